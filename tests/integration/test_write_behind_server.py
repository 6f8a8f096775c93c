"""Write-behind in a real ``headwater serve`` (``[system] write_behind_cache_bytes``): an
fsync-off topic written past the budget through the apache-iggy SDK keeps about the budget of
its log in the page cache (``mincore``), and every message polls back unchanged."""

from __future__ import annotations

import asyncio
import glob
import os
import time
import urllib.request

import apache_iggy as ig
import pytest
from prometheus_client.parser import text_string_to_metric_families

from headwater.storage.local import writebehind
from headwater.storage.local.writebehind import CHUNK_BYTES, cached_bytes

pytestmark = pytest.mark.skipif(not writebehind.available(), reason="needs Linux sync_file_range")

MIB = 1 << 20
BUDGET = 4 * MIB
OFF = {"enforce_fsync": "false", "messages_required_to_save": str(16 << 20),
       "size_of_messages_required_to_save": str(1 << 30)}


def test_fsync_off_topic_keeps_the_budget_cached_and_polls_back_whole(fresh_server):
    fresh_server.stop()
    fresh_server.start(env={"HEADWATER_SYSTEM_WRITE_BEHIND_CACHE_BYTES": str(BUDGET)})
    payloads = [os.urandom(1000) for _ in range(200)]

    async def produce(c) -> int:
        await c.create_stream("wb")
        await c.create_topic("wb", "t", 1, options=OFF)
        sent = 0
        for _ in range(120):  # 120 x 200 x ~1 KB: ~25 MB, six times the budget
            await c.send_messages("wb", "t", 0, [ig.SendMessage(p) for p in payloads])
            sent += len(payloads)
        return sent

    async def consume(c, total: int) -> list[bytes]:
        got: list[bytes] = []
        while len(got) < total:
            batch = await c.poll_messages("wb", "t", consumer=ig.Consumer.Single("r"),
                                          polling_strategy=ig.PollingStrategy.Offset(len(got)),
                                          count=1000, auto_commit=False, partition_id=0)
            assert batch, f"no messages after offset {len(got)} of {total}"
            got += [m.payload() for m in batch]
        return got

    async def main():
        c = ig.IggyClient(fresh_server.iggy_address)
        await c.connect()
        await c.login_user("iggy", "iggy")
        total = await produce(c)
        logs = glob.glob(str(fresh_server.data_dir / "streams" / "*" / "topics" / "*" / "partitions" / "*" / "*.log"))
        assert logs
        written = sum(os.path.getsize(p) for p in logs)
        assert written > 5 * BUDGET
        # the server's worker drops what it was handed right after the appends: wait for it (bounded)
        bound = BUDGET + CHUNK_BYTES + 2 * MIB
        deadline = time.monotonic() + 30
        cached = sum(cached_bytes(p) for p in logs)
        while cached > bound and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            cached = sum(cached_bytes(p) for p in logs)
        assert cached <= bound, f"{cached} bytes of {written} still cached"
        got = await consume(c, total)  # read back from the disk
        assert got == payloads * (total // len(payloads))
        # /metrics shows the worker's work, once (one engine, one write-behind worker)
        with urllib.request.urlopen(f"http://127.0.0.1:{fresh_server.http_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        families = {f.name: f for f in text_string_to_metric_families(text)}
        assert text.count("# TYPE headwater_write_behind_bytes_total counter") == 1
        stages = {s.labels["stage"]: s.value for s in families["headwater_write_behind_bytes"].samples
                  if s.name == "headwater_write_behind_bytes_total"}
        assert stages["started"] >= written - BUDGET - CHUNK_BYTES, stages
        assert stages["dropped"] >= written - bound - CHUNK_BYTES, stages
        (held,) = families["headwater_write_behind_cached_bytes"].samples
        assert held.value <= BUDGET + CHUNK_BYTES
        assert [s.value for s in families["headwater_write_behind_errors"].samples if s.name.endswith("_total")] == [0]

    asyncio.run(main())
    assert fresh_server.stop() == 0, fresh_server.log()
