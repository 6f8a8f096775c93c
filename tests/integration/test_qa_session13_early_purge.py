"""QA, session 13: early rolls (storage/local/prealloc.py) on many partitions at once under a
small ``[system] preallocate_budget_bytes``, with a purge and segment deletion (retention by
size) while the early spares are being made, then SIGKILL and restart, on a real server.

Eight partitions of 64 MiB segments and an 8 MiB window each ask for a spare at their first
top-up (~12 MiB), but a 160 MiB budget holds two spares: the rest go on with top-ups. The topic
is purged right after those asks (spares being made for segments that no longer exist), written
again past the next asks, a second topic with a small max size has its old segments deleted
while its spares are made, then the server is killed. Checked: the held bytes never exceed the
budget; no error counted; after the restart every message written since the purge polls back
in order with contiguous offsets; after a clean stop no spare file and no reserved block is
left anywhere, and ``headwater verify`` is clean.
"""

from __future__ import annotations

import asyncio
import glob
import time

import apache_iggy as ig
import pytest

from headwater.storage.local import prealloc
from test_qa_session12_prealloc import prealloc_metrics
from test_qa_session13_early_roll import early_server, poll_all, stopped_and_clean

pytestmark = pytest.mark.slow

MIB = 1 << 20
WINDOW, SEGMENT, BUDGET = 8 * MIB, 64 * MIB, 160 * MIB
PARTITIONS = 8
OPTIONS = {"enforce_fsync": "false", "messages_required_to_save": str(16 << 20),
           "size_of_messages_required_to_save": str(1 << 30), "segment_size": str(SEGMENT)}


def payload(p: int, i: int) -> bytes:
    return p.to_bytes(2, "big") + i.to_bytes(8, "big") + bytes([i % 251]) * 1990


async def client(server) -> ig.IggyClient:
    c = ig.IggyClient(server.iggy_address)
    await c.connect()
    await c.login_user("iggy", "iggy")
    return c


async def send(c, topic: str, sent: list[int], mib: int, server, peaks: list[float]) -> None:
    """``mib`` MiB to every partition, 100 messages (~0.2 MiB) a call, round robin."""
    for _ in range(mib * 5):
        for p in range(len(sent)):
            await c.send_messages("s", topic, p, [ig.SendMessage(payload(p, i)) for i in range(sent[p], sent[p] + 100)])
            sent[p] += 100
        peaks.append(prealloc_metrics(server).get("headwater_prealloc_held_bytes", 0))


async def topic_t(server, partitions: int) -> ig.IggyClient:
    """Stream ``s``, topic ``t`` of ``partitions`` (OPTIONS); the client that made them."""
    c = await client(server)
    await c.create_stream("s")
    await c.create_topic("s", "t", partitions, options=OPTIONS)
    return c


def reads_back(server, topic: str, p: int, end: int, *, head_deleted: bool = False) -> None:
    """Partition ``p`` of ``s``/``topic`` polls back as ``payload(p, i)`` at offset ``i``, in order,
    for every ``i`` from its first offset to ``end`` - 1: the first is 0, or with
    ``head_deleted`` the first left, which must be above 0 (the oldest segments were deleted)."""
    messages = asyncio.run(poll_all(server, "s", topic, p))
    first = 0
    if head_deleted:
        first = messages[0].offset()
        assert first > 0, p
    assert [m.offset() for m in messages] == list(range(first, end)), p
    assert [m.payload() for m in messages] == [payload(p, i) for i in range(first, end)], p


def killed_and_read_back(server, sent: list[int]) -> None:
    """SIGKILL the server, start it again: partition ``p`` of topic ``t`` reads back its
    ``sent[p]`` messages (``reads_back``)."""
    server.kill()
    server.start()
    for p, end in enumerate(sent):
        reads_back(server, "t", p, end)


@pytest.mark.skipif(not prealloc.available(), reason="needs Linux fallocate(2)")
def test_many_partitions_a_small_budget_purge_and_deletion_while_spares_are_made(tmp_path):
    server = early_server(tmp_path, HEADWATER_SYSTEM_PREALLOCATE_BUDGET_BYTES=str(BUDGET), HEADWATER_SYSTEM_RETENTION_INTERVAL_S="0.2")
    peaks: list[float] = []
    try:
        sent = [0] * PARTITIONS
        small = [0] * 2

        async def round_one() -> None:
            c = await client(server)
            await c.create_stream("s")
            await c.create_topic("s", "t", PARTITIONS, options=OPTIONS)
            await c.create_topic("s", "small", 2, options=dict(OPTIONS, segment_size=str(16 * MIB)),
                                 max_topic_size=ig.MaxTopicSize.Custom(48 * MIB))
            await send(c, "t", sent, 13, server, peaks)  # past the first top-up: spares asked
            await c.purge_topic("s", "t")  # while they are being made
            sent[:] = [0] * PARTITIONS
            await send(c, "t", sent, 14, server, peaks)  # the new first segments: asked again
            await send(c, "small", small, 60, server, peaks)  # old segments deleted meanwhile

        asyncio.run(round_one())
        values = prealloc_metrics(server)
        assert max(peaks) <= BUDGET and values["headwater_prealloc_errors_total"] == 0, (max(peaks), values)
        # the budget was what bounded them, and spares were made (not all refused)
        assert values["headwater_prealloc_over_budget_total"] > 0 and values["headwater_prealloc_spares_total"] >= 1, values
        killed_and_read_back(server, sent)
        for p in range(2):
            reads_back(server, "small", p, small[p], head_deleted=True)  # max topic size
        stopped_and_clean(server)
    finally:
        if server.proc is not None:
            server.stop()


@pytest.mark.skipif(not prealloc.available(), reason="needs Linux fallocate(2)")
def test_a_topic_deleted_and_made_again_while_its_spares_are_made(tmp_path):
    """The topic's partitions ask for their early spares (~13 MiB each), the topic is deleted at
    once and made again under the same name (the same directories, ids reused), written a
    little, a partition removed and added back: no spare of the old topic turns up in the new
    one, nothing is charged for files that are gone, and after a SIGKILL and a clean stop
    nothing is left reserved; the new topic's messages all read back."""
    server = early_server(tmp_path, HEADWATER_SYSTEM_PREALLOCATE_BUDGET_BYTES=str(BUDGET))
    peaks: list[float] = []
    try:
        sent = [0] * 4

        async def go() -> None:
            c = await topic_t(server, 4)
            await send(c, "t", sent, 13, server, peaks)
            await c.delete_topic("s", "t")
            await c.create_topic("s", "t", 4, options=OPTIONS)
            sent[:] = [0] * 4
            await send(c, "t", sent, 1, server, peaks)
            await c.delete_partitions("s", "t", 1)
            await c.create_partitions("s", "t", 1)
            sent[3] = 0
            await send(c, "t", sent, 1, server, peaks)

        asyncio.run(go())
        # the new topic's partitions hold ~1-2 MiB each: none reaches its first check point, so
        # nothing may be reserved once the old topic's jobs have run
        deadline = time.monotonic() + 30
        while prealloc_metrics(server)["headwater_prealloc_held_bytes"] > 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        values = prealloc_metrics(server)
        assert values["headwater_prealloc_held_bytes"] == 0 and values["headwater_prealloc_errors_total"] == 0, values
        assert glob.glob(str(server.data_dir / "streams" / "**" / (prealloc.SPARE_PREFIX + "*")), recursive=True) == []
        killed_and_read_back(server, sent)
        stopped_and_clean(server)
    finally:
        if server.proc is not None:
            server.stop()


@pytest.mark.skipif(not prealloc.available(), reason="needs Linux fallocate(2)")
def test_a_budget_smaller_than_one_spare_lets_no_spare_in_and_writes_go_on(tmp_path):
    """A 24 MiB budget cannot hold a spare (at least its first 64 MiB): the early asks are
    refused each time (over_budget), no segment rolls early, the windows fit the budget,
    the held bytes never pass it, and every message reads back after a SIGKILL."""
    budget = 24 * MIB
    server = early_server(tmp_path, HEADWATER_SYSTEM_PREALLOCATE_BUDGET_BYTES=str(budget))
    peaks: list[float] = []
    try:
        sent = [0] * 4

        async def go() -> None:
            c = await topic_t(server, 4)
            await send(c, "t", sent, 24, server, peaks)

        asyncio.run(go())
        values = prealloc_metrics(server)
        assert max(peaks) <= budget and values["headwater_prealloc_errors_total"] == 0, (max(peaks), values)
        assert values["headwater_prealloc_spares_total"] == 0 and values["headwater_prealloc_over_budget_total"] > 0
        logs = glob.glob(str(server.data_dir / "streams" / "**" / "*.log"), recursive=True)
        assert len(logs) == 4, logs  # no early roll without a spare
        killed_and_read_back(server, sent)
        stopped_and_clean(server)
    finally:
        if server.proc is not None:
            server.stop()
