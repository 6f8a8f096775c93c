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
from ..primitives import (
    Consumer,
    Identifier,
    Partitioning,
    PollingStrategy,
    Reader,
    decode_consumer,
    decode_identifier,
    decode_optional_partition_id,
    decode_partitioning,
    decode_polling_strategy,
    encode_consumer,
    encode_identifier,
    encode_optional_partition_id,
    encode_partitioning,
    encode_polling_strategy,
)
from ._common import U32, Buffer, read_count

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
    "encode_poll_prefix",
    "decode_poll_reply",
    "SendConfirmation",
    "encode_send_messages_reply",
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


_POLL_TAIL = struct.Struct("<IB")


def decode_poll_messages(body: Buffer) -> PollMessages:
    """Decode POLL_MESSAGES (layout in the module table); raises :class:`InvalidFormat`.

    ``auto_commit`` reads any nonzero byte as true (as the crate does).
    """
    r = Reader(body)
    consumer = decode_consumer(r)
    stream_id = decode_identifier(r, "stream_id")
    topic_id = decode_identifier(r, "topic_id")
    partition_id = decode_optional_partition_id(r)
    strategy = decode_polling_strategy(r)
    count = r.u32("count")
    auto_commit = r.flag("auto_commit")
    r.expect_end("poll_messages")
    return PollMessages(consumer, stream_id, topic_id, partition_id, strategy, count, auto_commit)


def encode_poll_messages(value: PollMessages) -> bytes:
    return (
        encode_consumer(value.consumer)
        + encode_identifier(value.stream_id)
        + encode_identifier(value.topic_id)
        + encode_optional_partition_id(value.partition_id)
        + encode_polling_strategy(value.strategy)
        + _POLL_TAIL.pack(value.count, 1 if value.auto_commit else 0)
    )


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
    header_count = U32.unpack_from(batch, _BATCH_COUNT_OFFSET)[0]
    if messages_count == 0 or messages_count != header_count:
        raise InvalidMessagesCount(
            f"send_messages: messages_count {messages_count}, batch message_count {header_count}",
            offset=batch_start + _BATCH_COUNT_OFFSET,
        )
    return SendMessages(stream_id, topic_id, partitioning, messages_count, batch)


def encode_send_messages(value: SendMessages) -> bytes:
    """Encode SEND_MESSAGES around ``value.batch`` (copied into the result)."""
    metadata = (
        encode_identifier(value.stream_id)
        + encode_identifier(value.topic_id)
        + encode_partitioning(value.partitioning)
        + U32.pack(value.messages_count)
    )
    return U32.pack(len(metadata)) + metadata + bytes(value.batch)


_FLUSH_TAIL = struct.Struct("<IB")


def decode_flush_unsaved_buffer(body: Buffer) -> FlushUnsavedBuffer:
    """``[stream_id][topic_id][partition_id u32][fsync u8]``; raises :class:`InvalidFormat`."""
    r = Reader(body)
    stream_id = decode_identifier(r, "stream_id")
    topic_id = decode_identifier(r, "topic_id")
    partition_id = r.u32("partition_id")
    fsync = r.flag("fsync")
    r.expect_end("flush_unsaved_buffer")
    return FlushUnsavedBuffer(stream_id, topic_id, partition_id, fsync)


def encode_flush_unsaved_buffer(value: FlushUnsavedBuffer) -> bytes:
    return (
        encode_identifier(value.stream_id)
        + encode_identifier(value.topic_id)
        + _FLUSH_TAIL.pack(value.partition_id, 1 if value.fsync else 0)
    )


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


_CONFIRMATION = struct.Struct("<IIIQ")


def encode_send_messages_reply(
    confirmations: list[SendConfirmation] | tuple[SendConfirmation, ...] = (),
) -> bytes:
    """SEND_MESSAGES reply payload: ``[count u32][SendConfirmation]*``.

    An empty body is also accepted by the SDK (no confirmations); ``count = 0``
    means the same.
    """
    return U32.pack(len(confirmations)) + b"".join(
        _CONFIRMATION.pack(c.stream_id, c.topic_id, c.partition_id, c.base_offset)
        for c in confirmations
    )


def decode_send_messages_reply(payload: Buffer) -> tuple[SendConfirmation, ...]:
    """Decode the SEND_MESSAGES reply; an empty payload is an empty tuple. Raises :class:`InvalidFormat`."""
    if not len(payload):
        return ()
    r = Reader(payload)
    count = read_count(r, _CONFIRMATION.size, "confirmations_count")
    out = tuple(
        SendConfirmation(*_CONFIRMATION.unpack(r.view(_CONFIRMATION.size, "confirmation")))
        for _ in range(count)
    )
    r.expect_end("send_messages reply")
    return out
