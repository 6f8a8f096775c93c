"""ListOffsets (key 2), versions 1-10: offsets by timestamp, earliest, latest, max timestamp.

v1 returns one (timestamp, offset) per partition; v2 adds isolation_level
(LSO = high watermark: no transactions); v4 current_leader_epoch and
leader_epoch (0); v6 flexible; v7 max timestamp (-3); v8 earliest local
(-4, the log start here); v9 earliest pending upload (-5: no tiered storage,
offset -1); v10 timeout_ms.

Timestamps are Kafka record timestamps (CreateTime ms, as Fetch shows them).
``timestamp >= 0`` finds the first record whose timestamp is at least the
target, in log order (the first batch whose largest timestamp reaches it,
as Kafka's time index does); none: offset -1, timestamp -1. Stored batches
are indexed by server append time, not producer time, so this scans the
partition from its log start (see docs/gaps.md).
"""

from __future__ import annotations

from ....codec.batch import iter_frames, read_header
from ....codec.kafka.convert import kafka_fields_of
from ....core import errors as core_errors
from .. import errors
from ..registry import ApiKey, Context, kafka_api

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
EARLIEST_PENDING_UPLOAD = -5
_CHUNK = 1 << 20


def record_timestamps(p, start: int, end: int):
    """(offset, Kafka timestamp ms) of every record in [start, end), in log order."""
    offset = start
    while offset < end:
        stored = p.log.read(offset, end - offset, _CHUNK)
        if not stored:
            return
        for b in stored:
            h = read_header(b)
            origin = h.origin_timestamp
            for frame in iter_frames(b):
                o = h.base_offset + frame.offset_delta
                if o < offset or o >= end:
                    continue
                ts = (origin + frame.timestamp_delta) // 1000
                if len(frame.user_headers):
                    override = kafka_fields_of(frame.payload, frame.user_headers)[3]
                    if override is not None:
                        ts = override
                yield o, ts
            offset = max(offset, h.base_offset + h.message_count)


def lookup(ctx: Context, p, timestamp: int) -> tuple[int, int]:
    """(offset, timestamp) for one ListOffsets query."""
    broker = ctx.broker
    start = broker.log_start(p)
    hw = p.high_watermark
    if timestamp == LATEST:
        return hw, -1
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return start, -1
    if timestamp == EARLIEST_PENDING_UPLOAD:
        return -1, -1
    if timestamp == MAX_TIMESTAMP:
        best = (-1, -1)
        for o, ts in record_timestamps(p, start, hw):
            if ts > best[1] or best[0] < 0:
                best = (o, ts)
        return best
    if timestamp < 0:
        raise core_errors.InvalidArgument(f"timestamp {timestamp}")
    for o, ts in record_timestamps(p, start, hw):
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


@kafka_api(ApiKey.LIST_OFFSETS, versions=(1, 10))
def list_offsets(ctx: Context, request):
    names = ctx.frontend.names
    topics = []
    for t in request.topics:
        topic = names.resolve(t.name)
        parts = []
        for q in t.partitions:
            p = None if topic is None else topic.partitions.get(q.partition_index)
            if p is None:
                parts.append(_partition(ctx, q.partition_index, errors.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            try:
                offset, ts = lookup(ctx, p, q.timestamp)
            except core_errors.BrokerError as e:
                parts.append(_partition(ctx, q.partition_index, errors.code_for(e)))
                continue
            parts.append(_partition(ctx, q.partition_index, 0, offset, ts))
        topics.append(ctx.build("ListOffsetsTopicResponse", name=t.name, partitions=tuple(parts)))
    return ctx.response(throttle_time=0, topics=tuple(topics))
