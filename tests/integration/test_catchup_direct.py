"""Catch-up reads with ``[system] catchup_direct_io = true`` on a real server: a consumer far
behind the tail (a backlog of ~12 MB, ``write_behind_cache_bytes`` 2 MiB, the segment files then
written back and dropped from the page cache) reads the whole backlog with the apache-iggy SDK and
gets every message, in order, and a raw PollMessages of the uncached backlog answers the very bytes
it answers when the files are in the page cache. The reads went past the page cache: the backlog's
files are still mostly uncached afterwards (through the page cache, the kernel would have been asked
to read 32 MiB ahead of the reader, the whole backlog). Polls by timestamp of the uncached backlog
find the right messages."""

from __future__ import annotations

import asyncio
import glob
import os

import apache_iggy as ig
import pytest

from headwater.storage.local import readahead, writebehind
from hw_server import ServerProcess, free_port
from test_robustness_wire import Raw, poll_body, sdk_client

pytestmark = pytest.mark.skipif(not hasattr(os, "posix_fadvise") or not hasattr(os, "O_DIRECT"),
                                reason="needs posix_fadvise and O_DIRECT")

BATCHES = 120  # batches of 100 messages of ~1 KB: ~12 MB, six times the budget
PER_BATCH = 100


def payload(i: int) -> bytes:
    return b"m%06d-" % i + bytes([97 + i % 26]) * (900 + i % 211)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = ServerProcess(tmp_path_factory.mktemp("headwater") / "data", free_port(), free_port())
    s.start(env={"HEADWATER_SYSTEM_WRITE_BEHIND_CACHE_BYTES": str(2 << 20),
                 "HEADWATER_SYSTEM_CATCHUP_DIRECT_IO": "true"})
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def backlog(server):
    async def fill() -> None:
        c = await sdk_client(server)
        await c.create_stream("direct")
        await c.create_topic("direct", "t", 1)
        for b in range(BATCHES):
            await c.send_messages("direct", "t", 0, [ig.SendMessage(payload(b * PER_BATCH + m))
                                                     for m in range(PER_BATCH)])

    asyncio.run(asyncio.wait_for(fill(), 120))
    return sorted(glob.glob(os.path.join(server.data_dir, "streams", "**", "*.log"), recursive=True))


def drop_cache(paths) -> None:
    for path in paths:
        if not readahead.evict(path):
            pytest.skip("this filesystem keeps the pages in memory")


def cached(paths) -> int:
    return sum(writebehind.cached_bytes(p) for p in paths)


def test_an_sdk_consumer_far_behind_reads_every_message_past_the_page_cache(server, backlog):
    drop_cache(backlog)
    total = sum(os.path.getsize(p) for p in backlog)

    async def read_all() -> list[tuple[int, bytes]]:
        c = await sdk_client(server)
        got: list[tuple[int, bytes]] = []
        while len(got) < BATCHES * PER_BATCH:
            polled = await c.poll_messages("direct", "t", partition_id=0, consumer=ig.Consumer.Single("far"),
                                           polling_strategy=ig.PollingStrategy.Offset(len(got)), count=700,
                                           auto_commit=False)
            assert polled, len(got)
            got += [(m.offset(), m.payload()) for m in polled]
        return got

    got = asyncio.run(asyncio.wait_for(read_all(), 120))
    assert got == [(i, payload(i)) for i in range(BATCHES * PER_BATCH)]
    # past the page cache: the backlog's pages were not read in (only what a first miss's
    # RWF_NOWAIT read may start); through it, the whole backlog would be cached now
    assert cached(backlog) < total // 2, (cached(backlog), total)


def test_a_raw_poll_of_the_uncached_backlog_answers_the_bytes_of_a_cached_one(server, backlog):
    reads = [(0, 1000), (0, 7), (3333, 450), (BATCHES * PER_BATCH - 40, 100), (6000, 5000)]
    with Raw(server.iggy_address) as r:
        r.login()
        for path in backlog:  # everything in the page cache: the reads below are served on the loop
            with open(path, "rb") as f:
                while f.read(1 << 20):
                    pass
        answers = {}
        for offset, count in reads:
            kind, status, body = r.call(100, poll_body("direct", "t", 0, offset, count))
            assert (kind, status) == ("reply", 0)
            answers[(offset, count)] = body
        for offset, count in reads:
            drop_cache(backlog)
            kind, status, body = r.call(100, poll_body("direct", "t", 0, offset, count))
            assert (kind, status) == ("reply", 0)
            assert body == answers[(offset, count)], (offset, count)


def test_polls_by_timestamp_of_the_uncached_backlog(server, backlog):
    async def go() -> None:
        c = await sdk_client(server)

        async def poll(strategy, count):
            return await c.poll_messages("direct", "t", partition_id=0, consumer=ig.Consumer.Single("ts"),
                                         polling_strategy=strategy, count=count, auto_commit=False)

        firsts = {}  # batch -> timestamp of its first message
        offset = 0
        while offset < BATCHES * PER_BATCH:
            got = await poll(ig.PollingStrategy.Offset(offset), 1000)
            firsts.update((m.offset() // PER_BATCH, m.timestamp()) for m in got if m.offset() % PER_BATCH == 0)
            offset = got[-1].offset() + 1
        assert len(firsts) == BATCHES
        for b in (97, 0, BATCHES - 1, 31):
            drop_cache(backlog)
            got = await poll(ig.PollingStrategy.Timestamp(firsts[b]), 150)
            want = range(b * PER_BATCH, min(b * PER_BATCH + 150, BATCHES * PER_BATCH))
            assert [(m.offset(), m.payload()) for m in got] == [(i, payload(i)) for i in want]

    asyncio.run(asyncio.wait_for(go(), 120))
