"""Blocks reserved ahead of the appends (storage/local/prealloc.py) in a real ``headwater serve``:
an fsync-off topic with 4 MiB segments written through the apache-iggy SDK rolls onto spares
made ahead, every file's size is its data, sealed segments hold no reserved blocks past their
end, /metrics shows the worker's work, every message polls back unchanged, and after a SIGKILL
the restarted server has every acknowledged message and no spare left over."""

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

MIB = 1 << 20
SEGMENT = 4 * MIB
OPTIONS = {"enforce_fsync": "false", "messages_required_to_save": str(16 << 20),
           "size_of_messages_required_to_save": str(1 << 30), "segment_size": str(SEGMENT)}


def partition_files(server, pattern: str) -> list[str]:
    return sorted(glob.glob(str(server.data_dir / "streams" / "*" / "topics" / "*" / "partitions" / "*" / pattern)))


async def client(server) -> ig.IggyClient:
    c = ig.IggyClient(server.iggy_address)
    await c.connect()
    await c.login_user("iggy", "iggy")
    return c


async def poll_all(c, total: int) -> list[bytes]:
    got: list[bytes] = []
    while len(got) < total:
        batch = await c.poll_messages("pa", "t", consumer=ig.Consumer.Single("r"),
                                      polling_strategy=ig.PollingStrategy.Offset(len(got)),
                                      count=1000, auto_commit=False, partition_id=0)
        assert batch, f"no messages after offset {len(got)} of {total}"
        got += [m.payload() for m in batch]
    return got


def metric_values(server) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name.startswith("headwater_prealloc_")}


@pytest.mark.skipif(not prealloc.available(), reason="needs Linux fallocate(2)")
def test_segments_roll_onto_spares_and_a_sigkill_keeps_every_acknowledged_message(fresh_server):
    if prealloc.memory_backed(str(fresh_server.data_dir)):
        pytest.skip("the data directory is on tmpfs: nothing is reserved there")
    payloads = [os.urandom(1000) for _ in range(200)]

    async def produce() -> int:
        c = await client(fresh_server)
        await c.create_stream("pa")
        await c.create_topic("pa", "t", 1, options=OPTIONS)
        sent = 0
        for _ in range(100):  # 100 x 200 x ~1 KB: ~21 MB, five segments
            await c.send_messages("pa", "t", 0, [ig.SendMessage(p) for p in payloads])
            sent += len(payloads)
        return sent

    total = asyncio.run(produce())
    logs = partition_files(fresh_server, "*.log")
    assert len(logs) >= 4
    # the worker's release of the last sealed segment runs after its roll: wait for it (bounded)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        values = metric_values(fresh_server)
        if values.get("headwater_prealloc_spares_total", 0) >= 2:
            break
        time.sleep(0.1)
    assert values["headwater_prealloc_spares_total"] >= 2, values
    assert values["headwater_prealloc_reserved_bytes_total"] >= 2 * SEGMENT, values
    assert values["headwater_prealloc_errors_total"] == 0, values
    for path in logs[:-1]:  # sealed: the size is the data, nothing reserved past it
        st = os.stat(path)
        assert st.st_size >= SEGMENT
        assert st.st_blocks * 512 <= st.st_size + prealloc.SLACK_BYTES + 4096, path
    assert sum(os.path.getsize(p) for p in logs) > total * 1000

    async def check() -> None:
        c = await client(fresh_server)
        got = await poll_all(c, total)
        assert got == payloads * (total // len(payloads))

    asyncio.run(check())
    fresh_server.kill()
    fresh_server.start()
    assert partition_files(fresh_server, prealloc.SPARE_PREFIX + "*") == []  # recovery swept the spare
    asyncio.run(check())
    assert fresh_server.stop() == 0, fresh_server.log()


def test_preallocate_next_segment_false_makes_no_spare_and_reserves_nothing(tmp_path):
    from hw_server import ServerProcess, free_port

    server = ServerProcess(tmp_path / "data", free_port(), free_port(),
                           extra_env={"HEADWATER_SYSTEM_PREALLOCATE_NEXT_SEGMENT": "false"}).start()
    try:
        payloads = [os.urandom(1000) for _ in range(200)]

        async def produce_and_check() -> None:
            c = await client(server)
            await c.create_stream("pa")
            await c.create_topic("pa", "t", 1, options=OPTIONS)
            for _ in range(25):  # ~5 MB: one roll
                await c.send_messages("pa", "t", 0, [ig.SendMessage(p) for p in payloads])
            assert await poll_all(c, 25 * len(payloads)) == payloads * 25

        asyncio.run(produce_and_check())
        assert len(partition_files(server, "*.log")) >= 2
        assert partition_files(server, prealloc.SPARE_PREFIX + "*") == []
        values = metric_values(server)
        assert values.get("headwater_prealloc_spares_total", 0) == 0, values
        assert values.get("headwater_prealloc_reserved_bytes_total", 0) == 0, values
    finally:
        server.stop()


def held_past_data(paths: list[str]) -> int:
    return sum(prealloc.held_past_data(os.stat(p)) for p in paths)


@pytest.mark.skipif(not prealloc.available(), reason="needs Linux fallocate(2)")
def test_the_window_and_the_budget_bound_the_disk_held_and_a_clean_stop_gives_it_back(tmp_path):
    """A server with a 4 MiB window and a 12 MiB budget (set through the environment); six
    partitions of 64 MiB segments written ~10 MB each would want 24 MiB reserved: what their
    files hold past their data stays within the budget (/metrics says so, and counts the
    reservations left out), every message polls back, and a clean stop leaves nothing
    reserved on any file."""
    from hw_server import ServerProcess, free_port

    window, budget = 4 * MIB, 12 * MIB
    server = ServerProcess(tmp_path / "data", free_port(), free_port(),
                           extra_env={"HEADWATER_SYSTEM_PREALLOCATE_WINDOW_BYTES": str(window),
                                      "HEADWATER_SYSTEM_PREALLOCATE_BUDGET_BYTES": str(budget)}).start()
    if prealloc.memory_backed(str(server.data_dir)):
        server.stop()
        pytest.skip("the data directory is on tmpfs: nothing is reserved there")
    options = dict(OPTIONS, segment_size=str(64 * MIB))
    payloads = [os.urandom(1000) for _ in range(200)]
    try:
        async def produce() -> None:
            c = await client(server)
            await c.create_stream("pa")
            await c.create_topic("pa", "t", 6, options=options)
            for _ in range(50):  # 50 x 200 x ~1 KB: ~10 MB a partition, past the 8 MiB check point
                for partition in range(6):
                    await c.send_messages("pa", "t", partition, [ig.SendMessage(p) for p in payloads])

        asyncio.run(produce())
        logs = partition_files(server, "*.log")
        assert len(logs) == 6
        deadline = time.monotonic() + 30  # the worker's reservations run after the sends: wait (bounded)
        while time.monotonic() < deadline:
            values = metric_values(server)
            if values.get("headwater_prealloc_over_budget_total", 0) > 0 and values["headwater_prealloc_held_bytes"] > 0:
                break
            time.sleep(0.1)
        assert values["headwater_prealloc_budget_bytes"] == budget, values
        assert 0 < values["headwater_prealloc_held_bytes"] <= budget, values
        assert values["headwater_prealloc_over_budget_total"] > 0, values
        assert values["headwater_prealloc_errors_total"] == 0, values
        files = partition_files(server, "*")
        assert held_past_data([p for p in files if os.path.isfile(p)]) <= budget + len(files) * prealloc.SLACK_BYTES
        assert partition_files(server, prealloc.SPARE_PREFIX + "*") == []  # 10 of 64 MiB: no spare yet

        async def check() -> None:
            c = await client(server)
            for partition in range(6):
                got: list[bytes] = []
                while len(got) < 50 * len(payloads):
                    batch = await c.poll_messages("pa", "t", consumer=ig.Consumer.Single("r"),
                                                  polling_strategy=ig.PollingStrategy.Offset(len(got)),
                                                  count=1000, auto_commit=False, partition_id=partition)
                    assert batch
                    got += [m.payload() for m in batch]
                assert got == payloads * 50

        asyncio.run(check())
        assert server.stop() == 0, server.log()
        files = [p for p in partition_files(server, "*") if os.path.isfile(p)]
        for path in files:  # a clean stop: the active segments' reserved tails were cut
            assert prealloc.held_past_data(os.stat(path)) <= prealloc.SLACK_BYTES, path
    finally:
        if server.proc is not None:
            server.stop()


def wait_for_metric(server, name: str, at_least: float) -> dict[str, float]:
    """/metrics' prealloc values once ``name`` reaches ``at_least`` (the worker runs after the
    sends; bounded wait, then the caller's assertion says what it saw)."""
    deadline = time.monotonic() + 30
    while True:
        values = metric_values(server)
        if values.get(name, 0) >= at_least or time.monotonic() > deadline:
            return values
        time.sleep(0.05)


@pytest.mark.skipif(not prealloc.available(), reason="needs Linux fallocate(2)")
def test_a_first_segment_rolls_early_onto_its_spare_and_nothing_is_lost_or_left_reserved(tmp_path):
    """A fresh partition's first segment is not made from a spare: it asks for one at its first
    top-up and rolls onto it once it is ready, short (session 13: the top-ups run beside the
    appends, on the inode they write). A real server with an 8 MiB window, 64 MiB segments:
    ~14 MiB sent, the spare made, 2 MiB more: two segments, the first short and holding nothing
    past its end, the second the spare (a whole segment reserved); every message polls back,
    before and after a clean stop, which leaves nothing reserved on any file."""
    from hw_server import ServerProcess, free_port

    window, segment = 8 * MIB, 64 * MIB
    server = ServerProcess(tmp_path / "data", free_port(), free_port(),
                           extra_env={"HEADWATER_SYSTEM_PREALLOCATE_WINDOW_BYTES": str(window),
                                      "HEADWATER_SYSTEM_WRITE_BEHIND_CACHE_BYTES": "0"}).start()
    if prealloc.memory_backed(str(server.data_dir)):
        server.stop()
        pytest.skip("the data directory is on tmpfs: nothing is reserved there")
    options = dict(OPTIONS, segment_size=str(segment))
    payloads = [os.urandom(1000) for _ in range(200)]
    sends = 0

    async def send(count: int) -> None:
        nonlocal sends
        c = await client(server)
        if sends == 0:
            await c.create_stream("pa")
            await c.create_topic("pa", "t", 1, options=options)
        for _ in range(count):  # ~0.2 MiB each
            await c.send_messages("pa", "t", 0, [ig.SendMessage(p) for p in payloads])
        sends += count

    async def check() -> None:
        c = await client(server)
        assert await poll_all(c, sends * len(payloads)) == payloads * sends

    try:
        asyncio.run(send(70))  # ~14 MiB: past the first check point (8 MiB) and the first top-up (12)
        values = wait_for_metric(server, "headwater_prealloc_spares_total", 1)
        assert values["headwater_prealloc_spares_total"] == 1, values
        asyncio.run(send(10))  # ~2 MiB more: past the next check point, at most 1 MiB on
        logs = partition_files(server, "*.log")
        assert len(logs) == 2, logs
        first, second = (os.stat(p) for p in logs)
        assert 12 * MIB <= first.st_size <= 16 * MIB  # rolled early, not at 64 MiB
        assert second.st_blocks * 512 >= segment  # the spare: the whole segment reserved
        assert partition_files(server, prealloc.SPARE_PREFIX + "*") == []
        values = wait_for_metric(server, "headwater_prealloc_released_total", 1)
        assert values["headwater_prealloc_errors_total"] == 0, values
        assert prealloc.held_past_data(os.stat(logs[0])) <= prealloc.SLACK_BYTES  # sealed: released
        asyncio.run(check())
        assert server.stop() == 0, server.log()
        for path in (p for p in partition_files(server, "*") if os.path.isfile(p)):
            assert prealloc.held_past_data(os.stat(path)) <= prealloc.SLACK_BYTES, path
        server.start()
        asyncio.run(check())
        assert server.stop() == 0, server.log()
    finally:
        if server.proc is not None:
            server.stop()
