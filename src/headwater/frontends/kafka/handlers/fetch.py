"""Fetch (key 1), versions 4-17: records from stored Iggy batches, built as RecordBatch v2.

v4 adds isolation_level, last_stable_offset and aborted transactions (none
here: no transactions, LSO = high watermark); v5 log_start_offset; v7
incremental fetch sessions (declined: the response session id is 0, so
clients send full requests); v9 current_leader_epoch (0 here); v11 rack_id /
preferred_read_replica (-1); v12 flexible, diverging epochs (never);
v13 topics by id (derived ids, see names.py; an unknown id gets
UNKNOWN_TOPIC_ID); v15 replica_state; v16 node_endpoints (empty: the
leader is the broker in Metadata); v17 replica_directory_id (followers only).

Each stored Iggy batch overlapping the fetch becomes one RecordBatch v2
(``codec.kafka.convert.iggy_to_kafka``), uncompressed, partitionLeaderEpoch
0. The first batch starts at the fetch offset (stored batches are sliced
there). At least one batch is returned when there is data, even over
max_bytes. A fetch offset outside [log start, high watermark] gets
OFFSET_OUT_OF_RANGE. Long polling: with less than min_bytes available the
request waits up to max_wait_ms, woken by an append to any of its partitions
(``Partition.add_listener``) or by shutdown.
"""

from __future__ import annotations

import asyncio

from ....codec.kafka.convert import iggy_to_kafka
from ....core import errors as core_errors
from .. import errors
from ....codec.kafka.messages import ms
from ..names import topic_id
from ..registry import ApiKey, Context, kafka_api

NO_RECORDS = b""


def _read(ctx: Context, p, offset: int, limit: int) -> tuple[int, int, int, list[bytes]]:
    """(error, high_watermark, log_start, record batches) for one partition."""
    broker = ctx.broker
    hw = p.high_watermark
    start = broker.log_start(p)
    if offset < start or offset > hw:
        return errors.OFFSET_OUT_OF_RANGE, hw, start, []
    if offset == hw:
        return 0, hw, start, []
    try:
        stored, _ = p.read(offset, hw - offset, max(limit, 1))
    except core_errors.BrokerError as e:
        return errors.code_for(e), hw, start, []
    return 0, hw, start, [iggy_to_kafka(b, partition_leader_epoch=0) for b in stored]


def _targets(ctx: Context, request):
    """[(kafka name, topic id, topic or None, error, [fetch partitions])] in request order."""
    names = ctx.frontend.names
    out = []
    for ft in request.topics:
        if ctx.version >= 13:
            found = names.by_id(ft.topic_id)
            if found is None:
                out.append((None, ft.topic_id, None, errors.UNKNOWN_TOPIC_ID, ft.partitions))
            else:
                out.append((found[0], ft.topic_id, found[1], 0, ft.partitions))
        else:
            topic = names.resolve(ft.topic)
            err = 0 if topic is not None else errors.UNKNOWN_TOPIC_OR_PARTITION
            out.append((ft.topic, topic_id(topic) if topic else None, topic, err, ft.partitions))
    return out


def _collect(ctx: Context, targets, max_bytes: int, read: bool):
    """One pass over the partitions: (topic responses, bytes gathered, any error, partitions)."""
    remaining = max_bytes
    total = 0
    failed = False
    partitions = []
    topics = []
    for name, tid, topic, terr, fparts in targets:
        parts = []
        for fp in fparts:
            p = None if topic is None else topic.partitions.get(fp.partition)
            if p is None:
                code = terr or errors.UNKNOWN_TOPIC_OR_PARTITION
                parts.append(_partition(ctx, fp.partition, code, -1, -1, None))
                failed = True
                continue
            partitions.append(p)
            if read and (remaining > 0 or total == 0):
                limit = min(fp.partition_max_bytes, remaining) if total else fp.partition_max_bytes
                code, hw, start, batches = _read(ctx, p, fp.fetch_offset, limit)
            else:
                code, hw, start, batches = 0, p.high_watermark, ctx.broker.log_start(p), []
            size = sum(len(b) for b in batches)
            total += size
            remaining -= size
            failed = failed or code != 0
            parts.append(_partition(ctx, fp.partition, code, hw, start, b"".join(batches) if batches else NO_RECORDS))
        topics.append(ctx.build("FetchableTopicResponse", topic=name, topic_id=tid, partitions=tuple(parts)))
    return topics, total, failed, partitions


def _partition(ctx: Context, index: int, code: int, hw: int, start: int, records):
    return ctx.build(
        "PartitionData",
        partition_index=index,
        error_code=code,
        high_watermark=hw,
        last_stable_offset=hw,
        log_start_offset=start,
        aborted_transactions=None if code == 0 else None,
        preferred_read_replica=-1,
        records=records,
    )


async def _wait(partitions, closing, timeout_s: float) -> None:
    woken = asyncio.Event()

    def wake(_p) -> None:
        woken.set()

    for p in partitions:
        p.add_listener(wake)
    waiters = [asyncio.ensure_future(woken.wait())]
    if closing is not None:
        waiters.append(asyncio.ensure_future(closing.wait()))
    try:
        await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
        for p in partitions:
            p.remove_listener(wake)


@kafka_api(ApiKey.FETCH, versions=(4, 17))
async def fetch(ctx: Context, request):
    max_wait_s = max(ms(request.max_wait), 0) / 1000
    min_bytes = max(request.min_bytes, 1)
    max_bytes = request.max_bytes if request.max_bytes > 0 else 1
    targets = _targets(ctx, request)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_s
    while True:
        topics, total, failed, partitions = _collect(ctx, targets, max_bytes, True)
        now = loop.time()
        if total >= min_bytes or failed or now >= deadline or not partitions:
            break
        if ctx.closing is not None and ctx.closing.is_set():
            break
        await _wait(partitions, ctx.closing, deadline - now)
    return ctx.response(throttle_time=0, error_code=0, session_id=0, responses=tuple(topics), node_endpoints=())
