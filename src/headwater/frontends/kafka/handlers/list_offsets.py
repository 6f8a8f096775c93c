"""ListOffsets (key 2), versions 1-10: offsets by timestamp, earliest, latest, max timestamp.

v1 returns one (timestamp, offset) per partition; v2 adds isolation_level
(1, read_committed: latest is the last stable offset, see core.transactions); v4 current_leader_epoch and
leader_epoch (0); v6 flexible; v7 max timestamp (-3); v8 earliest local
(-4, the log start here); v9 latest tiered (-5: no tiered storage, offset
-1); v10 timeout_ms.

Per partition, in Kafka's order (``ReplicaManager.fetchOffset``): a
partition named more than once in the request gets INVALID_REQUEST at every
mention (``ListOffsetsRequest.duplicatePartitions``); a negative timestamp
that is not one of the above, or older than the version that introduced it,
gets UNSUPPORTED_VERSION; then unknown topics and partitions
UNKNOWN_TOPIC_OR_PARTITION.

Timestamps are Kafka record timestamps (CreateTime ms, as Fetch shows them).
``timestamp >= 0`` finds the first record whose timestamp is at least the
target, in log order (the first batch whose largest timestamp reaches it,
as Kafka's time index does); none: offset -1, timestamp -1. Stored batches
are indexed by server append time, not producer time, so this scans the
partition from its log start (see docs/gaps.md). The scan gives the event
loop back after every read and every ``_PAUSE_EVERY`` records, and reads
what is not in the page cache on a worker thread (a catch-up read, counted
in ``headwater_catchup_reads_total{protocol="kafka"}``), so other clients
are served meanwhile; after each pause the partition is looked up
again (deleted meanwhile: UNKNOWN_TOPIC_OR_PARTITION).
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing

from ....codec.batch import iter_frames, read_header
from ....codec.kafka.convert import kafka_fields_of
from ....core import catchup
from ....core import errors as core_errors
from .. import errors
from ....core.acls import Operation
from .. import authz
from ....metrics import KAFKA
from ..registry import ApiKey, Context, kafka_api

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
# special timestamp -> first version that has it (Kafka's ReplicaManager.timestampMinSupportedVersion)
SPECIAL_SINCE = {LATEST: 1, EARLIEST: 1, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}
_CHUNK = 256 * 1024  # stored bytes read at a time
_PAUSE_EVERY = 2048  # records scanned between two pauses at most (about 10 ms)


class _Gone(Exception):
    """The partition was deleted (or replaced) while a scan paused."""


def batch_timestamps(stored, offset: int, end: int):
    """(offset, Kafka timestamp ms) of the records in ``stored`` batches within [offset, end)."""
    for b in stored:
        h = read_header(b)
        origin = h.origin_timestamp
        base = h.base_offset
        for frame in iter_frames(b):
            o = base + frame.offset_delta
            if o < offset or o >= end:
                continue
            ts = (origin + frame.timestamp_delta) // 1000
            if len(frame.user_headers):
                override = kafka_fields_of(frame.payload, frame.user_headers)[3]
                if override is not None:
                    ts = override
            yield o, ts


async def record_timestamps(p, start: int, end: int, still_there):
    """(offset, Kafka timestamp ms) of every record in [start, end), in log order.

    Reads about ``_CHUNK`` bytes at a time and pauses for the event loop after
    each read and every ``_PAUSE_EVERY`` records (one stored batch may hold
    many). Bytes not in the page cache are read in on storage's worker thread
    while the loop serves others (:func:`~headwater.core.catchup.soon`).
    ``still_there()`` is asked after each pause and wait; False raises _Gone.
    Raises CorruptData when storage refuses a read.
    """

    def check() -> None:
        if not still_there():
            raise _Gone()

    async def pause() -> None:
        await asyncio.sleep(0)
        check()

    offset = start
    while offset < end:
        read = catchup.soon(KAFKA, p.read, offset, end - offset, _CHUNK, check=check)
        if type(read) is not tuple:  # bytes not in the page cache: read in on a worker meanwhile
            read = await read
        stored, count = read
        last = -1
        n = 0
        for o, ts in batch_timestamps(stored, offset, end):
            yield o, ts
            last = o
            n += 1
            if n == _PAUSE_EVERY:
                n = 0
                await pause()
        offset = last + 1 if count and last >= offset else end
        if offset < end:
            await pause()


async def lookup(ctx: Context, p, timestamp: int, still_there=lambda: True, committed: bool = False) -> tuple[int, int]:
    """(offset, timestamp) for one ListOffsets query (a supported timestamp); ``committed``
    (isolation_level 1): LATEST is the last stable offset. Raises CorruptData when the
    partition is fenced (its empty-looking log must not be taken for offsets)."""
    p.require_readable()
    broker = ctx.broker
    start = broker.log_start(p)
    hw = p.high_watermark
    if timestamp == LATEST:
        return (broker.last_stable_offset(p) if committed else hw), -1
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return start, -1
    if timestamp == LATEST_TIERED:
        return -1, -1
    if timestamp == MAX_TIMESTAMP:
        best = (-1, -1)
        async with aclosing(record_timestamps(p, start, hw, still_there)) as scan:
            async for o, ts in scan:
                if ts > best[1] or best[0] < 0:
                    best = (o, ts)
        return best
    if timestamp < 0:
        raise core_errors.InvalidArgument(f"timestamp {timestamp}")
    async with aclosing(record_timestamps(p, start, hw, still_there)) as scan:
        async for o, ts in scan:
            if ts >= timestamp:
                return o, ts
    return -1, -1


def _partition(ctx: Context, index: int, code: int, offset: int = -1, timestamp: int = -1):
    return ctx.build(
        "ListOffsetsPartitionResponse",
        partition_index=index,
        error_code=code,
        timestamp=timestamp,
        offset=offset,
        leader_epoch=0 if code == 0 else -1,
    )


def _duplicates(request) -> set[tuple[str, int]]:
    seen: set[tuple[str, int]] = set()
    twice: set[tuple[str, int]] = set()
    for t in request.topics:
        for q in t.partitions:
            tp = (t.name, q.partition_index)
            (twice if tp in seen else seen).add(tp)
    return twice


def _unsupported(timestamp: int, version: int) -> bool:
    return timestamp < 0 and SPECIAL_SINCE.get(timestamp, version + 1) > version


@kafka_api(ApiKey.LIST_OFFSETS)
async def list_offsets(ctx: Context, request):
    names = ctx.frontend.names
    twice = _duplicates(request)
    topics = []
    for t in request.topics:
        parts = []
        for q in t.partitions:
            index = q.partition_index
            if (t.name, index) in twice:
                parts.append(_partition(ctx, index, errors.INVALID_REQUEST))
                continue
            if _unsupported(q.timestamp, ctx.version):
                parts.append(_partition(ctx, index, errors.UNSUPPORTED_VERSION))
                continue
            topic = names.resolve(t.name)  # each time: an earlier scan may have paused
            if not authz.topic(ctx, Operation.DESCRIBE, t.name, topic):
                parts.append(_partition(ctx, index, authz.TOPIC_AUTHORIZATION_FAILED))
                continue
            p = None if topic is None else topic.partitions.get(index)
            if p is None:
                parts.append(_partition(ctx, index, errors.UNKNOWN_TOPIC_OR_PARTITION))
                continue

            def still_there(name=t.name, topic=topic, index=index, p=p) -> bool:
                now = names.resolve(name)
                return now is topic and now.partitions.get(index) is p

            try:
                offset, ts = await lookup(ctx, p, q.timestamp, still_there, getattr(request, "isolation_level", 0) == 1)
            except _Gone:
                parts.append(_partition(ctx, index, errors.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            except core_errors.BrokerError as e:
                parts.append(_partition(ctx, index, errors.code_for(e)))
                continue
            parts.append(_partition(ctx, index, 0, offset, ts))
        topics.append(ctx.build("ListOffsetsTopicResponse", name=t.name, partitions=tuple(parts)))
    return ctx.response(throttle_time=0, topics=tuple(topics))
