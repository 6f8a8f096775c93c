"""Consumer offset commands.

Sources: ``commands.mdx`` "Consumer offsets"; crate ``requests/consumer_offsets/*.rs``,
``responses/consumer_offsets/get_consumer_offset.rs``.

=======================  ====  ===  =====================================================  ==============================
command                  code  op   request body                                           reply payload
=======================  ====  ===  =====================================================  ==============================
GET_CONSUMER_OFFSET      120   2    [consumer Consumer][stream_id Identifier]              [partition_id u32]
                                    [topic_id Identifier][partition flag u8 + id u32]      [current_offset u64]
                                                                                           [stored_offset u64] (20 bytes;
                                                                                           empty = no stored offset)
STORE_CONSUMER_OFFSET    121   161  ... same 4 fields ... [offset u64][ack u8]              empty (framed)
DELETE_CONSUMER_OFFSET   122   162  ... same 4 fields ... [ack u8]                          empty (framed)
=======================  ====  ===  =====================================================  ==============================

``ack``: 0 NoAck (leader-local), 1 Quorum; mandatory, anything else fails to decode.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ...errors import InvalidFormat
from ..codes import AckLevel
from ..primitives import (
    Consumer,
    Identifier,
    Reader,
    decode_consumer,
    decode_identifier,
    decode_optional_partition_id,
    encode_consumer,
    encode_identifier,
    encode_optional_partition_id,
)
from ._common import U64, Buffer

__all__ = [
    "GetConsumerOffset",
    "StoreConsumerOffset",
    "DeleteConsumerOffset",
    "decode_get_consumer_offset",
    "encode_get_consumer_offset",
    "decode_store_consumer_offset",
    "encode_store_consumer_offset",
    "decode_delete_consumer_offset",
    "encode_delete_consumer_offset",
    "ConsumerOffsetInfo",
    "encode_consumer_offset",
    "decode_consumer_offset",
]


@dataclass(frozen=True, slots=True)
class GetConsumerOffset:
    consumer: Consumer
    stream_id: Identifier
    topic_id: Identifier
    partition_id: int | None = None


@dataclass(frozen=True, slots=True)
class StoreConsumerOffset:
    consumer: Consumer
    stream_id: Identifier
    topic_id: Identifier
    partition_id: int | None
    offset: int
    ack: AckLevel = AckLevel.QUORUM


@dataclass(frozen=True, slots=True)
class DeleteConsumerOffset:
    consumer: Consumer
    stream_id: Identifier
    topic_id: Identifier
    partition_id: int | None = None
    ack: AckLevel = AckLevel.QUORUM


def _read_target(r: Reader) -> tuple[Consumer, Identifier, Identifier, int | None]:
    consumer = decode_consumer(r)
    stream_id = decode_identifier(r, "stream_id")
    topic_id = decode_identifier(r, "topic_id")
    return consumer, stream_id, topic_id, decode_optional_partition_id(r)


def _target(
    consumer: Consumer, stream_id: Identifier, topic_id: Identifier, partition_id: int | None
) -> bytes:
    return (
        encode_consumer(consumer)
        + encode_identifier(stream_id)
        + encode_identifier(topic_id)
        + encode_optional_partition_id(partition_id)
    )


def _read_ack(r: Reader) -> AckLevel:
    start = r.pos
    ack = r.u8("ack")
    if ack > 1:
        raise InvalidFormat(f"unknown ack level {ack}", offset=r.base + start)
    return AckLevel(ack)


def decode_get_consumer_offset(body: Buffer) -> GetConsumerOffset:
    """Decode GET_CONSUMER_OFFSET; raises :class:`InvalidFormat`."""
    r = Reader(body)
    target = _read_target(r)
    r.expect_end("get_consumer_offset")
    return GetConsumerOffset(*target)


def encode_get_consumer_offset(value: GetConsumerOffset) -> bytes:
    return _target(value.consumer, value.stream_id, value.topic_id, value.partition_id)


def decode_store_consumer_offset(body: Buffer) -> StoreConsumerOffset:
    """Decode STORE_CONSUMER_OFFSET (trailing ``[offset u64][ack u8]``); raises :class:`InvalidFormat`."""
    r = Reader(body)
    target = _read_target(r)
    offset = r.u64("offset")
    ack = _read_ack(r)
    r.expect_end("store_consumer_offset")
    return StoreConsumerOffset(*target, offset, ack)


def encode_store_consumer_offset(value: StoreConsumerOffset) -> bytes:
    return (
        _target(value.consumer, value.stream_id, value.topic_id, value.partition_id)
        + U64.pack(value.offset)
        + bytes((int(value.ack),))
    )


def decode_delete_consumer_offset(body: Buffer) -> DeleteConsumerOffset:
    """Decode DELETE_CONSUMER_OFFSET (trailing ``[ack u8]``); raises :class:`InvalidFormat`."""
    r = Reader(body)
    target = _read_target(r)
    ack = _read_ack(r)
    r.expect_end("delete_consumer_offset")
    return DeleteConsumerOffset(*target, ack)


def encode_delete_consumer_offset(value: DeleteConsumerOffset) -> bytes:
    return _target(value.consumer, value.stream_id, value.topic_id, value.partition_id) + bytes(
        (int(value.ack),)
    )


@dataclass(frozen=True, slots=True)
class ConsumerOffsetInfo:
    """``[partition_id u32][current_offset u64][stored_offset u64]`` (20 bytes).

    ``current_offset``: the partition's newest offset; ``stored_offset``: the
    consumer's committed one.
    """

    partition_id: int
    current_offset: int
    stored_offset: int


_OFFSET = struct.Struct("<IQQ")


def encode_consumer_offset(value: ConsumerOffsetInfo) -> bytes:
    return _OFFSET.pack(value.partition_id, value.current_offset, value.stored_offset)


def decode_consumer_offset(payload: Buffer) -> ConsumerOffsetInfo:
    r = Reader(payload)
    value = ConsumerOffsetInfo(*_OFFSET.unpack(r.view(_OFFSET.size, "consumer offset")))
    r.expect_end("consumer offset")
    return value
