"""QA, session 12, about branch hw12-prealloc: preallocation bounded by a window ahead of the
write position, a spare of one window and a server-wide budget of reserved, unwritten bytes
(``[system] preallocate_window_bytes`` / ``preallocate_budget_bytes``), on real servers.

- 200 partitions of 1 MiB segments written a little (~600 KB each, past half a segment: each
  reserves its window and a spare) under a 64 MiB budget: what the files hold past their data
  stays within the budget while running; a SIGKILL and a restart frees it all (no spare left,
  nothing held past any file's data); a clean stop too; every message reads back.
- The ledger follows the disk: a purged topic's files are gone, so what they held must leave
  the ledger (``headwater_prealloc_held_bytes``), or the budget fills with bytes nobody holds
  and later partitions are refused reservations (``over_budget``) until a restart. Fails:
  ``LocalPartitionLog.purge`` deletes every segment, the active one included, without
  ``Reservations.forget_active`` / ``give_back`` (``truncate`` and ``close`` do), so the deleted
  active segment's and index's charges stay in the ledger (PurgeStream too, by the same path).
"""

from __future__ import annotations

import asyncio
import glob
import os
import time
import urllib.request

import apache_iggy as ig
import pytest
from prometheus_client.parser import text_string_to_metric_families

from headwater.storage.local import prealloc
from hw_server import ServerProcess, free_port
from test_robustness_startstop_crash import read_partitions
from test_robustness_wire import run, sdk_client

MIB = 1 << 20


def data_files(server) -> list[str]:
    return [p for p in glob.glob(str(server.data_dir / "streams" / "**" / "*"), recursive=True) if os.path.isfile(p)]


def held_on_disk(server) -> int:
    return sum(prealloc.held_past_data(os.stat(p)) for p in data_files(server))


def prealloc_metrics(server) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name.startswith("headwater_prealloc_")}


def settled(server, ok, wait_s: float = 30) -> dict[str, float]:
    """The metrics once ``ok(metrics)`` holds (the worker's jobs run after the sends; bounded)."""
    deadline = time.monotonic() + wait_s
    while True:
        values = prealloc_metrics(server)
        if ok(values) or time.monotonic() > deadline:
            return values
        time.sleep(0.1)


def a_server(tmp_path, window: int, budget: int) -> ServerProcess:
    server = ServerProcess(tmp_path / "data", free_port(), free_port(),
                           extra_env={"HEADWATER_SYSTEM_PREALLOCATE_WINDOW_BYTES": str(window),
                                      "HEADWATER_SYSTEM_PREALLOCATE_BUDGET_BYTES": str(budget)}).start()
    if prealloc.memory_backed(str(server.data_dir)) or not prealloc.available():
        server.stop()
        pytest.skip("nothing is reserved here (tmpfs, or no fallocate)")
    return server


def test_two_hundred_partitions_written_a_little_stay_within_the_budget_and_a_crash_frees_it(tmp_path):
    budget, parts = 64 * MIB, 200
    server = a_server(tmp_path, 64 * MIB, budget)
    payloads = [os.urandom(10_000) for _ in range(60)]
    try:
        async def produce() -> None:
            c = await sdk_client(server)
            await c.create_stream("pd")
            await c.create_topic("pd", "t", parts, options={"segment_size": str(MIB), "enforce_fsync": "false"})
            for p in range(parts):
                await c.send_messages("pd", "t", p, [ig.SendMessage(x) for x in payloads])

        run(produce(), 120)
        values = settled(server, lambda v: v.get("headwater_prealloc_over_budget_total", 0) > 0)
        assert values["headwater_prealloc_over_budget_total"] > 0, values  # the budget bit
        files = data_files(server)
        assert held_on_disk(server) <= budget + len(files) * prealloc.SLACK_BYTES, values
        assert values["headwater_prealloc_held_bytes"] <= budget, values

        server.kill()
        server.start()
        assert not glob.glob(str(server.data_dir / "streams" / "**" / (prealloc.SPARE_PREFIX + "*")), recursive=True)
        assert held_on_disk(server) <= len(data_files(server)) * prealloc.SLACK_BYTES
        stored = run(read_partitions(server, "pd", "t", parts), 120)
        for p in range(parts):
            assert [stored[(p, o)] for o in range(len(payloads))] == payloads, p
        assert server.stop() == 0
        assert held_on_disk(server) <= len(data_files(server)) * prealloc.SLACK_BYTES
    finally:
        if server.proc is not None:
            server.stop()


def test_a_purged_topic_leaves_no_charge_in_the_budget(tmp_path):
    """Six partitions of 64 MiB segments written ~10 MB each reserve a 4 MiB window ahead
    (~8 MiB in all); the topic is purged (PurgeTopic: every segment deleted, the partitions
    start again at offset 0) twice. The files that held the reservations are gone each
    time, so the ledger must come back to what the files hold; it grows by ~8 MiB a purge."""
    window, budget = 4 * MIB, 64 * MIB
    server = a_server(tmp_path, window, budget)
    payloads = [ig.SendMessage(os.urandom(1000)) for _ in range(200)]
    try:
        async def write_and_purge(c) -> None:
            for _ in range(50):
                for p in range(6):
                    await c.send_messages("pa", "t", p, payloads)

        async def go() -> list:
            c = await sdk_client(server)
            await c.create_stream("pa")
            await c.create_topic("pa", "t", 6, options={"enforce_fsync": "false", "segment_size": str(64 * MIB)})
            seen = []
            for _ in range(2):
                await write_and_purge(c)
                settled(server, lambda v: v.get("headwater_prealloc_held_bytes", 0) > 0)
                await c.purge_topic("pa", "t")
                values = settled(server, lambda v: v["headwater_prealloc_held_bytes"] <= held_on_disk(server)
                                 + 12 * prealloc.SLACK_BYTES, wait_s=5)
                seen.append((values["headwater_prealloc_held_bytes"], held_on_disk(server)))
            return seen

        seen = run(go(), 180)
        for ledger, disk in seen:
            assert ledger <= disk + 12 * prealloc.SLACK_BYTES, (
                f"after each purge (ledger bytes, bytes the files hold past their data): {seen}")
    finally:
        if server.proc is not None:
            server.stop()
