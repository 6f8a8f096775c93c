"""Message commands: poll, send, flush.

Sources: ``commands.mdx`` "Messages"; crate ``requests/messages/*.rs``,
``responses/messages/*.rs``; SDK ``core/common/src/traits/binary_impls/messages.rs``.
The batch layout itself is :mod:`headwater.codec.batch` (``messages.mdx``).

====================  ====  ===  =======================================================  ===========================
command               code  op   request body                                             reply payload (not framed)
====================  ====  ===  =======================================================  ===========================
POLL_MESSAGES         100   2    [consumer Consumer][stream_id Identifier]                [partition_id u32]
                                 [topic_id Identifier][partition flag u8 + id u32]        [current_offset u64]
                                 [strategy 9 bytes][count u32][auto_commit u8]            [messages_count u32]
                                                                                          [batches to end]
SEND_MESSAGES         101   160  [metadata_length u32][stream_id Identifier]              [count u32]
                                 [topic_id Identifier][Partitioning][messages_count u32]  [stream_id u32][topic_id u32]
                                 [batch: 256-byte header + frames]                        [partition_id u32]
                                                                                          [base_offset u64] x count
FLUSH_UNSAVED_BUFFER  102   2    [stream_id][topic_id][partition_id u32][fsync u8]        always FeatureUnavailable (5)
====================  ====  ===  =======================================================  ===========================

``metadata_length`` counts the bytes from ``stream_id`` through
``messages_count``. The SDK always sends Partitioning kind 2 (it resolves the
partition itself) and, for group consumers, an explicit partition id.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ...errors import InvalidFormat, InvalidMessagesCount
from .. import framing
from ..codes import Command, ConsumerKind, PartitioningKind, PollingKind
from ..primitives import (
    Consumer,
    Identifier,
    Partitioning,
    PollingStrategy,
    Reader,
    decode_identifier,
    decode_partitioning,
    encode_identifier,
    encode_partitioning,
)
from ..schema import (
    BATCH,
    CONSUMER,
    FLAG,
    IDENTIFIER,
    OPTIONAL_PARTITION,
    PARTITIONING,
    POLLING_STRATEGY,
    U32,
    U64,
    Field,
    ListOf,
    Record,
    payload_codec,
    request,
)

_U32 = struct.Struct("<I")
Buffer = bytes | bytearray | memoryview

__all__ = [
    "BATCH_HEADER_SIZE",
    "RESYNC_REQUIRED_PARTITION_ID",
    "PollMessages",
    "SendMessages",
    "FlushUnsavedBuffer",
    "decode_poll_messages",
    "encode_poll_messages",
    "decode_send_messages",
    "encode_send_messages",
    "decode_flush_unsaved_buffer",
    "encode_flush_unsaved_buffer",
    "POLL_PREFIX_SIZE",
    "PollPrefix",
    "PollReply",
    "encode_poll_prefix",
    "decode_poll_reply",
    "SendConfirmation",
    "encode_send_messages_reply",
    "encode_send_confirmation",
    "send_messages_fields",
    "poll_messages_fields",
    "decode_send_messages_reply",
]

BATCH_HEADER_SIZE = 256
_BATCH_COUNT_OFFSET = 48

RESYNC_REQUIRED_PARTITION_ID = 0xFFFFFFFF
"""Poll-reply ``partition_id`` that tells a group consumer its assignment is stale.

An empty poll reply carrying it makes the SDK re-sync (SYNC_CONSUMER_GROUP)
and retry (``iggy_common::RESYNC_REQUIRED_PARTITION_SENTINEL``).
"""


# ---------------------------------------------------------------- requests


@dataclass(frozen=True, slots=True)
class PollMessages:
    """``count``: messages wanted; ``auto_commit``: store the consumer offset with the poll."""

    consumer: Consumer
    stream_id: Identifier
    topic_id: Identifier
    partition_id: int | None
    strategy: PollingStrategy
    count: int
    auto_commit: bool = False


@dataclass(frozen=True, slots=True)
class SendMessages:
    """``batch`` is a memoryview into the request body (no copy): one unstamped batch.

    Verify and stamp it with :mod:`headwater.codec.batch`.
    """

    stream_id: Identifier
    topic_id: Identifier
    partitioning: Partitioning
    messages_count: int
    batch: memoryview


@dataclass(frozen=True, slots=True)
class FlushUnsavedBuffer:
    stream_id: Identifier
    topic_id: Identifier
    partition_id: int
    fsync: bool = False


def decode_send_messages(body: Buffer) -> SendMessages:
    """Decode SEND_MESSAGES; the batch is returned as a memoryview into ``body``.

    Checks, in order: ``metadata_length`` equals the bytes the metadata
    fields take (else :class:`InvalidFormat`, offset 0); the batch holds at
    least its 256-byte header (:class:`InvalidFormat`); ``messages_count`` is
    nonzero and equals the batch header's ``message_count`` at batch offset 48
    (else :class:`~headwater.codec.errors.InvalidMessagesCount`, Iggy 4009).
    Frames, lengths and checksums are left to :func:`headwater.codec.batch.verify`.
    """
    r = Reader(body)
    metadata_length = r.u32("metadata_length")
    start = r.pos
    stream_id = decode_identifier(r, "stream_id")
    topic_id = decode_identifier(r, "topic_id")
    partitioning = decode_partitioning(r)
    messages_count = r.u32("messages_count")
    if r.pos - start != metadata_length:
        raise InvalidFormat(
            f"send_messages: metadata_length {metadata_length}, metadata fields take {r.pos - start}",
            offset=0,
        )
    batch_start = r.pos
    batch = r.rest()
    if len(batch) < BATCH_HEADER_SIZE:
        raise InvalidFormat(
            f"send_messages: batch of {len(batch)} bytes is shorter than its 256-byte header",
            offset=batch_start,
        )
    header_count = _U32.unpack_from(batch, _BATCH_COUNT_OFFSET)[0]
    if messages_count == 0 or messages_count != header_count:
        raise InvalidMessagesCount(
            f"send_messages: messages_count {messages_count}, batch message_count {header_count}",
            offset=batch_start + _BATCH_COUNT_OFFSET,
        )
    return SendMessages(stream_id, topic_id, partitioning, messages_count, batch)


def _identifier_at(body: Buffer, at: int, size: int) -> tuple[int | str, int] | None:
    """``(identifier, next position)`` of the Identifier at ``at``, or None where
    :func:`~..primitives.decode_identifier` would raise."""
    if at + 2 > size:
        return None
    kind = body[at]
    length = body[at + 1]
    end = at + 2 + length
    if end > size:
        return None
    if kind == 1 and length == 4:
        return _U32.unpack_from(body, at + 2)[0], end
    if kind == 2 and length:
        try:
            return str(body[at + 2:end], "utf-8"), end
        except UnicodeDecodeError:
            return None
    return None


def _identifiers(body: Buffer, at: int, n: int) -> tuple[list[int | str], int] | None:
    """``n`` Identifiers back to back from ``at``, and the position after them; None where
    :func:`~..primitives.decode_identifier` would raise on one, or ``body`` is a memoryview
    of another format than unsigned bytes."""
    if isinstance(body, memoryview) and (body.format != "B" or body.ndim != 1):
        return None
    size = len(body)
    out = []
    for _ in range(n):
        got = _identifier_at(body, at, size)
        if got is None:
            return None
        out.append(got[0])
        at = got[1]
    return out, at


def send_messages_fields(body: Buffer) -> tuple[int | str, int | str, str, int | bytes | None, memoryview] | None:
    """The SendMessages fast read: ``(stream_id, topic_id, route, value, batch)`` without
    building request objects. ``route``/``value`` are what
    :meth:`~headwater.core.broker.Broker.route` takes: ``"balanced"``/None,
    ``"partition"``/partition id, ``"key"``/the key bytes; ``batch`` is a memoryview into
    ``body``.

    None when :func:`decode_send_messages` would raise (call it then for the error); never
    raises. For every body both accept they give the same fields.
    """
    ids = _identifiers(body, 4, 2)
    if ids is None:
        return None
    (stream_id, topic_id), at = ids
    size = len(body)
    metadata_length = _U32.unpack_from(body, 0)[0]
    if at + 2 > size:
        return None
    kind = body[at]
    length = body[at + 1]
    at += 2
    if kind == PartitioningKind.PARTITION_ID and length == 4 and at + 4 <= size:
        route, value = "partition", _U32.unpack_from(body, at)[0]
        at += 4
    elif kind == PartitioningKind.BALANCED and length == 0:
        route, value = "balanced", None
    elif kind == PartitioningKind.MESSAGES_KEY and length and at + length <= size:
        route, value = "key", bytes(body[at:at + length])
        at += length
    else:
        return None
    if at != metadata_length:
        return None
    batch = send_messages_batch(body, at)
    if batch is None:
        return None
    return stream_id, topic_id, route, value, batch


def send_messages_batch(body: Buffer, metadata_length: int) -> memoryview | None:
    """The batch of a SendMessages body whose metadata (u32 length, identifiers, partitioning)
    is ``metadata_length`` bytes: a memoryview of ``body`` after the ``messages_count`` (u32 LE
    at ``metadata_length``); None when :func:`decode_send_messages` would refuse what follows
    the metadata (a batch shorter than its header, a zero count, a count other than the batch
    header's). The last step of :func:`send_messages_fields`; on its own, for a body whose
    metadata bytes are known to read (the Iggy listener's kept route)."""
    batch_start = metadata_length + 4
    if len(body) - batch_start < BATCH_HEADER_SIZE:
        return None
    messages_count = _U32.unpack_from(body, metadata_length)[0]
    if messages_count == 0 or messages_count != _U32.unpack_from(body, batch_start + _BATCH_COUNT_OFFSET)[0]:
        return None
    view = body if isinstance(body, memoryview) else memoryview(body)
    return view[batch_start:]


_POLL_TAIL = struct.Struct("<BIBQIB")  # partition flag, partition_id, strategy kind, value, count, auto_commit
_CONSUMER_KINDS = {int(k): k for k in ConsumerKind}


def poll_messages_fields(body: Buffer) -> tuple[Consumer, int | str, int | str, int | None, int, int, int, bool] | None:
    """The PollMessages fast read: ``(consumer, stream_id, topic_id, partition_id,
    strategy_kind, strategy_value, count, auto_commit)`` without the generic decode
    (``strategy_kind`` the int 1..5 of :class:`PollingKind`; ``partition_id`` None when the
    flag is 0).

    None when :func:`decode_poll_messages` would raise (call it then for the error); never
    raises. For every body both accept they give the same fields.
    """
    ids = _identifiers(body, 1, 3)  # the consumer's id, stream_id, topic_id
    if ids is None:
        return None
    (consumer_id, stream_id, topic_id), at = ids
    kind = _CONSUMER_KINDS.get(body[0])
    if kind is None or len(body) - at != _POLL_TAIL.size:
        return None
    flag, partition_id, strategy, value, count, auto_commit = _POLL_TAIL.unpack_from(body, at)
    if flag > 1 or not 1 <= strategy <= 5:
        return None
    return (Consumer(kind, consumer_id), stream_id, topic_id, partition_id if flag else None, strategy, value,
            count, auto_commit != 0)


def encode_send_messages(value: SendMessages) -> bytes:
    """Encode SEND_MESSAGES around ``value.batch`` (copied into the result)."""
    metadata = (
        encode_identifier(value.stream_id)
        + encode_identifier(value.topic_id)
        + encode_partitioning(value.partitioning)
        + _U32.pack(value.messages_count)
    )
    return _U32.pack(len(metadata)) + metadata + bytes(value.batch)


# ---------------------------------------------------------------- poll reply

_POLL_PREFIX = struct.Struct("<IQI")
POLL_PREFIX_SIZE = _POLL_PREFIX.size  # 16


@dataclass(frozen=True, slots=True)
class PollPrefix:
    """The 16 bytes before the batches of a poll reply.

    ``current_offset``: the partition's newest offset at poll time;
    ``messages_count``: frames in the batches that follow.
    """

    partition_id: int
    current_offset: int
    messages_count: int


def encode_poll_prefix(partition_id: int, current_offset: int, messages_count: int) -> bytes:
    """``[partition_id u32][current_offset u64][messages_count u32]`` (16 bytes).

    Write it, then the stored batch buffers as they are, e.g.
    ``transport.writelines([reply_header, prefix, *batches])``.
    """
    return _POLL_PREFIX.pack(partition_id, current_offset, messages_count)


def decode_poll_reply(payload: Buffer) -> tuple[PollPrefix, memoryview]:
    """Split a poll reply payload into its prefix and the batch bytes (a memoryview, may be empty)."""
    r = Reader(payload)
    prefix = PollPrefix(*_POLL_PREFIX.unpack(r.view(POLL_PREFIX_SIZE, "poll prefix")))
    return prefix, r.rest()


# ---------------------------------------------------------------- send reply


@dataclass(frozen=True, slots=True)
class SendConfirmation:
    """``[stream_id u32][topic_id u32][partition_id u32][base_offset u64]`` (20 bytes): where a batch landed."""

    stream_id: int
    topic_id: int
    partition_id: int
    base_offset: int


SEND_CONFIRMATION = Record(
    SendConfirmation,
    [
        Field("stream_id", U32),
        Field("topic_id", U32),
        Field("partition_id", U32),
        Field("base_offset", U64),
    ],
    label="confirmation",
)
SEND_MESSAGES_REPLY = ListOf(SEND_CONFIRMATION, U32)
"""SEND_MESSAGES reply payload: ``[count u32][SendConfirmation]*``.

An empty body is also accepted by the SDK (no confirmations); ``count = 0``
means the same: both decode to ``()``.
"""
decode_send_messages_reply, encode_send_messages_reply = payload_codec(
    SEND_MESSAGES_REPLY, "send_messages reply", empty=()
)
_ONE_CONFIRMATION = struct.Struct("<IIIIQ")


def encode_send_confirmation(stream_id: int, topic_id: int, partition_id: int, base_offset: int) -> bytes:
    """The SEND_MESSAGES reply payload for one batch: ``[count u32 = 1][SendConfirmation]``
    (24 bytes), the same bytes as ``encode_send_messages_reply([SendConfirmation(...)])``.
    Raises ``struct.error`` on a value out of range."""
    return _ONE_CONFIRMATION.pack(1, stream_id, topic_id, partition_id, base_offset)


_send_reply = framing.reply_packer(_ONE_CONFIRMATION)


def encode_send_reply_to_head(head: bytes | bytearray | memoryview, op: int, stream_id: int, topic_id: int,
                              partition_id: int, base_offset: int) -> bytes:
    """The whole reply (256-byte header + 24-byte body) to the SendMessages request header
    ``head`` of one stored batch, in one pack: the same bytes as
    ``framing.encode_reply_to_head(head, encode_send_confirmation(...), op=op)`` (SendMessages
    replies are not result-framed). Raises ``struct.error`` on a value out of range."""
    return _send_reply(head, op, 1, stream_id, topic_id, partition_id, base_offset)

# ---------------------------------------------------------------- declarations

POLL_PREFIX = Record(
    PollPrefix,
    [Field("partition_id", U32), Field("current_offset", U64), Field("messages_count", U32)],
    label="poll prefix",
)


@dataclass(frozen=True, slots=True)
class PollReply:
    """The whole poll reply payload, for the walkers (the hot path splits it with
    :func:`decode_poll_reply` instead)."""

    partition_id: int
    current_offset: int
    messages_count: int
    batches: memoryview


POLL_REPLY = Record(PollReply, [*POLL_PREFIX.fields, Field("batches", BATCH)])
POLL_REPLY.payload_decoder = decode_poll_reply

_STREAM_TOPIC = [Field("stream_id", IDENTIFIER), Field("topic_id", IDENTIFIER)]


def _metadata_length(value: SendMessages) -> int:
    return len(encode_send_messages(value)) - 4 - len(value.batch)


POLL_MESSAGES = request(
    Command.POLL_MESSAGES,
    PollMessages,
    [
        # JSON (all in the query): consumer_id (a single consumer), kind and value
        # (the strategy, flattened); an absent partition_id is partition 0
        Field("consumer", CONSUMER, json_name="consumer_id", json_default=Consumer(ConsumerKind.CONSUMER, 1)),
        *_STREAM_TOPIC,
        Field("partition_id", OPTIONAL_PARTITION, json_default=0),
        Field("strategy", POLLING_STRATEGY, json_default=PollingStrategy(PollingKind.OFFSET, 0)),
        Field("count", U32, json_default=10),
        Field("auto_commit", FLAG),
    ],
    reply=POLL_REPLY,
)
SEND_MESSAGES = request(
    Command.SEND_MESSAGES,
    SendMessages,
    [
        Field("metadata_length", U32, computed=_metadata_length, doc="bytes of the next 4 fields"),
        *_STREAM_TOPIC,
        Field("partitioning", PARTITIONING),
        Field("messages_count", U32),
        Field("batch", BATCH),
    ],
    reply=SEND_MESSAGES_REPLY,
    empty_reply="no confirmations",
    codec=(decode_send_messages, encode_send_messages),
)
FLUSH_UNSAVED_BUFFER = request(
    Command.FLUSH_UNSAVED_BUFFER,
    FlushUnsavedBuffer,
    [*_STREAM_TOPIC, Field("partition_id", U32), Field("fsync", FLAG)],
)

decode_poll_messages, encode_poll_messages = POLL_MESSAGES.codec()
decode_flush_unsaved_buffer, encode_flush_unsaved_buffer = FLUSH_UNSAVED_BUFFER.codec()
