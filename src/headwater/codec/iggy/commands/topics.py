"""Topic commands and the topic / partition records replies are made of.

Sources: ``commands.mdx`` "Topics"; crate ``requests/topics/*.rs``,
``responses/topics/*.rs``, ``responses/streams/get_stream.rs`` (``TopicHeader``);
SDK ``core/common/src/traits/binary_impls/topics.rs`` and ``wire_conversions.rs``.
``options`` are raw options blocks (TLV, decoded by ``headwater.codec.headers``).

============  ====  ===  ==================================================  ==========================
command       code  op   request body                                        reply payload
============  ====  ===  ==================================================  ==========================
GET_TOPIC     300   2    [stream_id Identifier][topic_id Identifier]         TopicDetails; empty = none
GET_TOPICS    301   2    [stream_id Identifier]                              [count u32][TopicInfo]*
CREATE_TOPIC  302   132  [stream_id Identifier][partitions_count u32]        TopicDetails (framed)
                         [name Name][options to end]
DELETE_TOPIC  303   134  [stream_id Identifier][topic_id Identifier]         empty (framed)
UPDATE_TOPIC  304   133  [stream_id Identifier][topic_id Identifier]         empty (framed)
                         [name Name][options to end]
PURGE_TOPIC   305   135  [stream_id Identifier][topic_id Identifier]         empty (framed)
============  ====  ===  ==================================================  ==========================
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ...errors import InvalidFormat
from ..primitives import Identifier, Reader, decode_identifier, encode_identifier, encode_name
from ._common import U32, Buffer, options_prefixed, read_count, read_options_prefixed

__all__ = [
    "GetTopic",
    "GetTopics",
    "CreateTopic",
    "DeleteTopic",
    "UpdateTopic",
    "PurgeTopic",
    "decode_get_topic",
    "encode_get_topic",
    "decode_get_topics",
    "encode_get_topics",
    "decode_create_topic",
    "encode_create_topic",
    "decode_delete_topic",
    "encode_delete_topic",
    "decode_update_topic",
    "encode_update_topic",
    "decode_purge_topic",
    "encode_purge_topic",
    "TopicInfo",
    "PartitionInfo",
    "TopicDetails",
    "encode_topic_info",
    "read_topic_info",
    "encode_topics",
    "decode_topics",
    "encode_topic_details",
    "decode_topic_details",
]


@dataclass(frozen=True, slots=True)
class GetTopic:
    stream_id: Identifier
    topic_id: Identifier


@dataclass(frozen=True, slots=True)
class GetTopics:
    stream_id: Identifier


@dataclass(frozen=True, slots=True)
class CreateTopic:
    """``options`` carries every topic setting (compression, expiry, sizes...), raw TLV."""

    stream_id: Identifier
    partitions_count: int
    name: str
    options: bytes = b""


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    stream_id: Identifier
    topic_id: Identifier


@dataclass(frozen=True, slots=True)
class UpdateTopic:
    """Patch: keys absent from ``options`` stay unchanged."""

    stream_id: Identifier
    topic_id: Identifier
    name: str
    options: bytes = b""


@dataclass(frozen=True, slots=True)
class PurgeTopic:
    stream_id: Identifier
    topic_id: Identifier


def _two_ids(body: Buffer, what: str) -> tuple[Identifier, Identifier]:
    r = Reader(body)
    stream_id = decode_identifier(r, "stream_id")
    topic_id = decode_identifier(r, "topic_id")
    r.expect_end(what)
    return stream_id, topic_id


def decode_get_topic(body: Buffer) -> GetTopic:
    """``[stream_id Identifier][topic_id Identifier]``; raises :class:`InvalidFormat`."""
    return GetTopic(*_two_ids(body, "get_topic"))


def encode_get_topic(value: GetTopic) -> bytes:
    return encode_identifier(value.stream_id) + encode_identifier(value.topic_id)


def decode_get_topics(body: Buffer) -> GetTopics:
    r = Reader(body)
    stream_id = decode_identifier(r, "stream_id")
    r.expect_end("get_topics")
    return GetTopics(stream_id)


def encode_get_topics(value: GetTopics) -> bytes:
    return encode_identifier(value.stream_id)


def decode_create_topic(body: Buffer) -> CreateTopic:
    """``[stream_id][partitions_count u32][name Name][options to end]``; raises :class:`InvalidFormat`."""
    r = Reader(body)
    stream_id = decode_identifier(r, "stream_id")
    partitions_count = r.u32("partitions_count")
    name = r.name("name")
    return CreateTopic(stream_id, partitions_count, name, bytes(r.rest()))


def encode_create_topic(value: CreateTopic) -> bytes:
    return (
        encode_identifier(value.stream_id)
        + U32.pack(value.partitions_count)
        + encode_name(value.name)
        + bytes(value.options)
    )


def decode_delete_topic(body: Buffer) -> DeleteTopic:
    return DeleteTopic(*_two_ids(body, "delete_topic"))


def encode_delete_topic(value: DeleteTopic) -> bytes:
    return encode_identifier(value.stream_id) + encode_identifier(value.topic_id)


def decode_update_topic(body: Buffer) -> UpdateTopic:
    """``[stream_id][topic_id][name Name][options to end]``; raises :class:`InvalidFormat`."""
    r = Reader(body)
    stream_id = decode_identifier(r, "stream_id")
    topic_id = decode_identifier(r, "topic_id")
    name = r.name("name")
    return UpdateTopic(stream_id, topic_id, name, bytes(r.rest()))


def encode_update_topic(value: UpdateTopic) -> bytes:
    return (
        encode_identifier(value.stream_id)
        + encode_identifier(value.topic_id)
        + encode_name(value.name)
        + bytes(value.options)
    )


def decode_purge_topic(body: Buffer) -> PurgeTopic:
    return PurgeTopic(*_two_ids(body, "purge_topic"))


def encode_purge_topic(value: PurgeTopic) -> bytes:
    return encode_identifier(value.stream_id) + encode_identifier(value.topic_id)


# ---------------------------------------------------------------- replies


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic record (crate ``TopicHeader``)::

        [id u32][created_at u64 µs][partitions_count u32][message_expiry u64 µs]
        [compression_algorithm u8][max_topic_size u64][size_bytes u64][messages_count u64]
        [name Name][options_len u32][options][derived_options_len u32][derived_options]

    ``options``: the keys the client set at create; ``derived_options``: the
    server defaults resolved for the rest (their union is in force).
    ``message_expiry``: 0 or ``u64::MAX`` = never; ``max_topic_size``: 0 server
    default, ``u64::MAX`` unlimited; ``compression_algorithm`` must be 1 (none)
    or 2 (gzip): the SDK rejects other codes.
    """

    id: int
    created_at: int
    partitions_count: int
    name: str
    message_expiry: int = 0
    compression_algorithm: int = 1
    max_topic_size: int = 0
    size_bytes: int = 0
    messages_count: int = 0
    options: bytes = b""
    derived_options: bytes = b""


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """``[id u32][created_at u64 µs][segments_count u32][current_offset u64][size_bytes u64][messages_count u64]`` (40 bytes)."""

    id: int
    created_at: int = 0
    segments_count: int = 0
    current_offset: int = 0
    size_bytes: int = 0
    messages_count: int = 0


@dataclass(frozen=True, slots=True)
class TopicDetails:
    """GET_TOPIC / CREATE_TOPIC reply: a :class:`TopicInfo` whose ``partitions_count`` is
    ``len(partitions)``, then the :class:`PartitionInfo` records."""

    id: int
    created_at: int
    name: str
    message_expiry: int = 0
    compression_algorithm: int = 1
    max_topic_size: int = 0
    size_bytes: int = 0
    messages_count: int = 0
    options: bytes = b""
    derived_options: bytes = b""
    partitions: tuple[PartitionInfo, ...] = ()


_TOPIC_HEAD = struct.Struct("<IQIQBQQQ")
_PARTITION = struct.Struct("<IQIQQQ")


def encode_topic_info(value: TopicInfo) -> bytes:
    return (
        _TOPIC_HEAD.pack(
            value.id,
            value.created_at,
            value.partitions_count,
            value.message_expiry,
            value.compression_algorithm,
            value.max_topic_size,
            value.size_bytes,
            value.messages_count,
        )
        + encode_name(value.name)
        + options_prefixed(value.options)
        + options_prefixed(value.derived_options)
    )


def read_topic_info(r: Reader) -> TopicInfo:
    """Read one topic record from ``r`` (used by stream details too)."""
    tid, created, partitions, expiry, compression, max_size, size, messages = _TOPIC_HEAD.unpack(
        r.view(_TOPIC_HEAD.size, "topic")
    )
    name = r.name("topic name")
    options = read_options_prefixed(r, "options")
    derived = read_options_prefixed(r, "derived_options")
    return TopicInfo(
        tid,
        created,
        partitions,
        name,
        expiry,
        compression,
        max_size,
        size,
        messages,
        options,
        derived,
    )


def encode_topics(values: list[TopicInfo] | tuple[TopicInfo, ...]) -> bytes:
    """GET_TOPICS reply payload: ``[count u32][TopicInfo]*`` (the only list with a count)."""
    return U32.pack(len(values)) + b"".join(encode_topic_info(v) for v in values)


_MIN_TOPIC = _TOPIC_HEAD.size + 2 + 8


def decode_topics(payload: Buffer) -> tuple[TopicInfo, ...]:
    """Decode a GET_TOPICS reply payload; raises :class:`InvalidFormat`."""
    r = Reader(payload)
    count = read_count(r, _MIN_TOPIC, "topics_count")
    out = tuple(read_topic_info(r) for _ in range(count))
    r.expect_end("topics")
    return out


def encode_topic_details(value: TopicDetails) -> bytes:
    """GET_TOPIC / CREATE_TOPIC reply payload."""
    head = encode_topic_info(
        TopicInfo(
            value.id,
            value.created_at,
            len(value.partitions),
            value.name,
            value.message_expiry,
            value.compression_algorithm,
            value.max_topic_size,
            value.size_bytes,
            value.messages_count,
            value.options,
            value.derived_options,
        )
    )
    return head + b"".join(
        _PARTITION.pack(
            p.id, p.created_at, p.segments_count, p.current_offset, p.size_bytes, p.messages_count
        )
        for p in value.partitions
    )


def decode_topic_details(payload: Buffer) -> TopicDetails:
    """Decode a GET_TOPIC / CREATE_TOPIC reply payload; raises :class:`InvalidFormat`."""
    r = Reader(payload)
    t = read_topic_info(r)
    if t.partitions_count * _PARTITION.size > r.remaining:
        raise InvalidFormat(
            f"topic details: {t.partitions_count} partitions truncated", offset=r.pos
        )
    partitions = tuple(
        PartitionInfo(*_PARTITION.unpack(r.view(_PARTITION.size, "partition")))
        for _ in range(t.partitions_count)
    )
    r.expect_end("topic details")
    return TopicDetails(
        t.id,
        t.created_at,
        t.name,
        t.message_expiry,
        t.compression_algorithm,
        t.max_topic_size,
        t.size_bytes,
        t.messages_count,
        t.options,
        t.derived_options,
        partitions,
    )
