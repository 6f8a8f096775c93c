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

from dataclasses import dataclass

from ..codes import AckLevel, Command, ConsumerKind
from ..primitives import Consumer, Identifier
from ..schema import CONSUMER, IDENTIFIER, OPTIONAL_PARTITION, U8, U32, U64, Enum, Field, Record
from ..schema import request

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


@dataclass(frozen=True, slots=True)
class ConsumerOffsetInfo:
    """``[partition_id u32][current_offset u64][stored_offset u64]`` (20 bytes).

    ``current_offset``: the partition's newest offset; ``stored_offset``: the
    consumer's committed one.
    """

    partition_id: int
    current_offset: int
    stored_offset: int


CONSUMER_OFFSET_INFO = Record(
    ConsumerOffsetInfo,
    [Field("partition_id", U32), Field("current_offset", U64), Field("stored_offset", U64)],
    what="consumer offset",
)
decode_consumer_offset, encode_consumer_offset = CONSUMER_OFFSET_INFO.codec()

_TARGET = [
    # JSON: the consumer is its id only (a single consumer), default 1
    Field("consumer", CONSUMER, json_name="consumer_id", json_default=Consumer(ConsumerKind.CONSUMER, 1)),
    Field("stream_id", IDENTIFIER),
    Field("topic_id", IDENTIFIER),
    Field("partition_id", OPTIONAL_PARTITION, json_default=None),
]
_ACK = Field("ack", Enum(U8, AckLevel), json="skip", doc="0 NoAck (leader-local), 1 Quorum")

GET_CONSUMER_OFFSET = request(
    Command.GET_CONSUMER_OFFSET,
    GetConsumerOffset,
    _TARGET,
    reply=CONSUMER_OFFSET_INFO,
    empty_reply="no stored offset",
)
STORE_CONSUMER_OFFSET = request(
    Command.STORE_CONSUMER_OFFSET, StoreConsumerOffset, [*_TARGET, Field("offset", U64), _ACK]
)
DELETE_CONSUMER_OFFSET = request(Command.DELETE_CONSUMER_OFFSET, DeleteConsumerOffset, [*_TARGET, _ACK])

decode_get_consumer_offset, encode_get_consumer_offset = GET_CONSUMER_OFFSET.codec()
decode_store_consumer_offset, encode_store_consumer_offset = STORE_CONSUMER_OFFSET.codec()
decode_delete_consumer_offset, encode_delete_consumer_offset = DELETE_CONSUMER_OFFSET.codec()
