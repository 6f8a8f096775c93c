"""Produce (key 0), versions 0-12 advertised, 3-12 served.

v0-2 (magic 0/1 message sets) are advertised only because librdkafka before
2.11.1 enables compression when Produce v0 is in the advertised range (Kafka
4 does the same); a v0-2 request is answered with UNSUPPORTED_VERSION for
every partition (hand-encoded: kio has no v0-2 schema). v3 adds
transactional_id and RecordBatch v2; v5 log_start_offset; v8 record_errors
and error_message; v9 is flexible; v10 current_leader / node_endpoints
(tagged, left empty: there is one broker).

Each partition's records must be exactly one RecordBatch v2 (INVALID_RECORD
otherwise); it is checked and converted by ``codec.kafka.convert`` (CRC-32C,
compression, structure: CORRUPT_MESSAGE, INVALID_RECORD, INVALID_TIMESTAMP,
UNSUPPORTED_COMPRESSION_TYPE, MESSAGE_TOO_LARGE) and stored as one Iggy batch.
A batch larger than the topic's ``max.message.bytes`` gets MESSAGE_TOO_LARGE.
Batches with a producer id go through the idempotence checks
(``core.producers``): a duplicate is answered with its original offsets.
acks 0, 1 and -1 all mean "appended to the log": there is one node, so the
in-sync replica set acks=-1 waits for is the leader alone. With the topic's
``enforce_fsync`` the response leaves only once a group-commit fdatasync
covering every written batch returned (a failed one answers that partition
KAFKA_STORAGE_ERROR); other acks INVALID_REQUIRED_ACKS. acks=0 gets no
response; when any partition failed the connection is closed instead, so
the producer learns of it and refreshes its metadata (as Kafka's
``KafkaApis.handleProduceRequest``); the partitions that succeeded stay
written.

Transactional batches (attribute bit 0x10; KIP-98): the partition must have been
added to the producer's ongoing transaction with AddPartitionsToTxn (KIP-890's
server-side verification) and the epoch must be current; otherwise
INVALID_TXN_STATE, or INVALID_PRODUCER_EPOCH for an old epoch. The batch is
recorded in the partition's transaction state (``core.transactions``) before
it is written, so it stays hidden from read_committed and Iggy consumers until
the commit marker. A transactional batch without a producer id is
INVALID_RECORD. As in Kafka, the request's transactional_id itself is not
looked at.

A write the filesystem refuses (disk full, EIO) gets KAFKA_STORAGE_ERROR (56)
for its partition; nothing of that batch is kept.
"""

from __future__ import annotations

import struct
import time

from ....codec.kafka.convert import kafka_to_iggy
from ....codec.kafka.errors import KafkaCodecError
from ....codec.kafka.produce import encode_response
from ....codec.kafka.record_batch import split_batches
from ....core import errors as core_errors
from ....core.acls import Operation
from .. import authz, errors
from ..configs import max_message_bytes
from ..names import is_valid_name
from ..registry import ApiKey, Context, kafka_api

def _partition_error(ctx: Context, index: int, code: int, message: str | None = None, record_errors=()):
    return ctx.build(
        "PartitionProduceResponse",
        index=index,
        error_code=code,
        base_offset=-1,
        log_append_time=-1,
        log_start_offset=-1,
        record_errors=tuple(
            ctx.build("BatchIndexAndErrorMessage", batch_index=i, batch_index_error_message=m) for i, m in record_errors
        ),
        error_message=message,
    )


def _produce_partition(ctx: Context, topic, index: int, records, now_ms: int, state: dict, durable: list,
                       txn_allowed: bool = True):
    """One partition's append. ``txn_allowed``: the request's transactional id may WRITE
    (else a transactional batch gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka)."""
    broker = ctx.broker
    p = topic.partitions.get(index)
    if p is None:
        return _partition_error(ctx, index, errors.UNKNOWN_TOPIC_OR_PARTITION, f"partition {index} not found")
    if records is None or not len(records):
        return _partition_error(ctx, index, errors.INVALID_RECORD, "no records")
    limit = max_message_bytes(broker, topic)
    try:
        batches = split_batches(records)
        if len(batches) != 1:
            return _partition_error(
                ctx, index, errors.INVALID_RECORD, f"exactly one record batch per partition, got {len(batches)}"
            )
        if len(batches[0]) > limit:
            return _partition_error(
                ctx, index, errors.MESSAGE_TOO_LARGE, f"batch of {len(batches[0])} bytes is over max.message.bytes {limit}"
            )
        iggy, info = kafka_to_iggy(batches[0], now_ms, require_key=topic.options.compact)
        batch = iggy if type(iggy) is bytearray else bytearray(iggy)  # the compiled loop's is one
        if info.is_transactional:
            if not txn_allowed:
                return _partition_error(ctx, index, authz.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None)
            if info.producer_id < 0:
                return _partition_error(ctx, index, errors.INVALID_RECORD, "a transactional batch needs a producer id")
            state["idempotent"] = True
            done = broker.append_transactional(
                topic, p, batch, info.producer_id, info.producer_epoch, info.base_sequence, verified=True
            )
        elif info.producer_id >= 0:
            state["idempotent"] = True
            done = broker.append_idempotent(
                topic, p, batch, info.producer_id, info.producer_epoch, info.base_sequence, verified=True
            )
        else:
            done = broker.append(p, batch, verified=True)
        base = done.base_offset
        durable.append(done.durable)
    except KafkaCodecError as e:
        return _partition_error(ctx, index, e.error_code, e.message, e.record_errors)
    except core_errors.BrokerError as e:
        return _partition_error(ctx, index, errors.code_for(e), str(e))
    return (index, base, broker.log_start(p))  # a success: encoded by _answer


def _ok_entity(ctx: Context, part: tuple[int, int, int]):
    index, base, log_start = part
    return ctx.build(
        "PartitionProduceResponse",
        index=index,
        error_code=0,
        base_offset=base,
        log_append_time=-1,
        log_start_offset=log_start,
        record_errors=(),
        error_message=None,
    )


async def _await_durable(ctx: Context, topics: list, durable: list) -> None:
    """Wait for the syncs of the partitions written (``durable`` holds one awaitable or
    None per successful partition response, in order); a failed one answers its partition
    KAFKA_STORAGE_ERROR instead."""
    pending = iter(durable)
    for _name, parts in topics:
        for i, part in enumerate(parts):
            if not isinstance(part, tuple):
                continue
            waiting = next(pending)
            if waiting is None:
                continue
            try:
                await waiting
            except core_errors.BrokerError as e:  # MessagesNotSaved: the sync failed
                parts[i] = _partition_error(ctx, part[0], errors.code_for(e), str(e))


@kafka_api(ApiKey.PRODUCE)
def produce(ctx: Context, request):
    """Every batch is appended before this returns (so appends follow the order of the
    requests, which the connection may answer ahead: ``server._Pipeline``); it returns the
    response, or, when a partition waits for its fdatasync (``enforce_fsync``), an awaitable
    of it."""
    if ctx.version < 3:
        try:
            return legacy_unsupported(ctx.version, request)
        except (ValueError, struct.error) as e:
            raise errors.CloseConnection(f"undecodable Produce v{ctx.version} body: {e}") from e
    acks = request.acks
    now_ms = time.time_ns() // 1_000_000
    names = ctx.frontend.names
    state: dict = {}
    topics: list[tuple[str, list]] = []
    durable: list = []
    txn_id = getattr(request, "transactional_id", None)
    txn_allowed = txn_id is None or authz.transactional_id(ctx, Operation.WRITE, txn_id)
    for td in request.topic_data:
        topic = names.resolve(td.name)
        denied = not authz.topic(ctx, Operation.WRITE, td.name, topic)
        parts = []
        for pd in td.partition_data:
            if acks not in (0, 1, -1):
                parts.append(_partition_error(ctx, pd.index, errors.INVALID_REQUIRED_ACKS, f"acks {acks}"))
            elif denied:
                parts.append(_partition_error(ctx, pd.index, authz.TOPIC_AUTHORIZATION_FAILED, None))
            elif topic is None:
                code = errors.UNKNOWN_TOPIC_OR_PARTITION if is_valid_name(td.name) else errors.INVALID_TOPIC_EXCEPTION
                parts.append(_partition_error(ctx, pd.index, code, f"topic {td.name!r} not found"))
            else:
                parts.append(_produce_partition(ctx, topic, pd.index, pd.records, now_ms, state, durable, txn_allowed))
        topics.append((td.name, parts))
    if state:
        ctx.broker.producers.flush()
    if any(d is not None for d in durable):
        return _answer_when_durable(ctx, acks, topics, durable)
    return _answer(ctx, acks, topics)


async def _answer_when_durable(ctx: Context, acks: int, topics: list, durable: list):
    await _await_durable(ctx, topics, durable)
    return _answer(ctx, acks, topics)


def _answer(ctx: Context, acks: int, topics: list):
    """The ProduceResponse (None for acks=0; CloseConnection for a failed acks=0 Produce).
    ``topics``: [(name, [partition answer])], a success as (index, base_offset, log_start_offset),
    a failure as its kio entity. All successes are written by ``codec.kafka.produce`` straight
    to bytes; otherwise kio writes the response."""
    failed = any(not isinstance(part, tuple) for _name, parts in topics for part in parts)
    if acks == 0:
        if failed:
            raise errors.CloseConnection("an acks=0 Produce failed")
        return None
    if not failed:
        return encode_response(ctx.version, topics)
    responses = [
        ctx.build("TopicProduceResponse", name=name, partition_responses=tuple(
            _ok_entity(ctx, part) if isinstance(part, tuple) else part for part in parts))
        for name, parts in topics
    ]
    return ctx.response(responses=tuple(responses), throttle_time=0)


# ---------------------------------------------------------------------------
# v0-2: decode just enough to answer UNSUPPORTED_VERSION per partition.
#
# request  v0-2: acks int16 | timeout int32 | [topic: name string | [partition int32 | records bytes]]
# response v0:   [topic: name string | [partition int32 | error_code int16 | base_offset int64]]
#          v1:   v0 + throttle_time_ms int32 (at the end)
#          v2:   v1, log_append_time int64 after base_offset

_H = struct.Struct(">h")
_I = struct.Struct(">i")


def legacy_unsupported(version: int, body) -> bytes | None:
    """The v0-2 response with UNSUPPORTED_VERSION everywhere (None for acks=0 without
    partitions; CloseConnection for acks=0 with some, as for any failed acks=0 Produce).
    Raises ValueError / struct.error for a body that does not decode."""
    mv = memoryview(body)
    pos = 0

    def take(n: int) -> memoryview:
        nonlocal pos
        if n < 0 or pos + n > len(mv):
            raise ValueError("Produce v0-2 request runs past its frame")
        out = mv[pos : pos + n]
        pos += n
        return out

    (acks,) = _H.unpack(take(2))
    take(4)
    out = bytearray()
    answered = 0
    (topics,) = _I.unpack(take(4))
    if topics < 0 or topics > len(mv):
        raise ValueError("bad topic count")
    out += _I.pack(topics)
    for _ in range(topics):
        (n,) = _H.unpack(take(2))
        name = bytes(take(n))
        out += _H.pack(len(name)) + name
        (parts,) = _I.unpack(take(4))
        if parts < 0 or parts > len(mv):
            raise ValueError("bad partition count")
        out += _I.pack(parts)
        for _ in range(parts):
            (index,) = _I.unpack(take(4))
            (size,) = _I.unpack(take(4))
            if size > 0:
                take(size)
            out += struct.pack(">ihq", index, errors.UNSUPPORTED_VERSION, -1)
            answered += 1
            if version >= 2:
                out += struct.pack(">q", -1)
    if pos != len(mv):
        raise ValueError("bytes after the Produce v0-2 body")
    if version >= 1:
        out += _I.pack(0)
    if acks == 0:
        if answered:
            raise errors.CloseConnection(f"an acks=0 Produce v{version} (unsupported) named partitions")
        return None
    return bytes(out)
