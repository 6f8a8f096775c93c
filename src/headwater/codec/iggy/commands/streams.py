"""Stream commands and the stream records replies are made of.

Sources: ``commands.mdx`` "Streams"; crate ``requests/streams/*.rs``,
``responses/streams/*.rs``; SDK ``core/common/src/traits/binary_impls/streams.rs``.
``options`` are raw options blocks (TLV, decoded by ``headwater.codec.headers``).

=============  ====  ===  ===========================================  ============================
command        code  op   request body                                 reply payload
=============  ====  ===  ===========================================  ============================
GET_STREAM     200   2    [stream_id Identifier]                       StreamDetails; empty = none
GET_STREAMS    201   2    empty                                        [StreamInfo]* (no count)
CREATE_STREAM  202   128  [name Name][options to end]                  StreamDetails (framed; no
                                                                       topics yet)
DELETE_STREAM  203   130  [stream_id Identifier]                       empty (framed)
UPDATE_STREAM  204   129  [stream_id Identifier][name Name]            empty (framed)
                          [options to end]
PURGE_STREAM   205   131  [stream_id Identifier]                       empty (framed)
=============  ====  ===  ===========================================  ============================
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..primitives import Identifier, Reader, decode_identifier, encode_identifier, encode_name
from ._common import Buffer, expect_empty, options_prefixed, read_options_prefixed
from .topics import TopicInfo, encode_topic_info, read_topic_info

__all__ = [
    "GetStream",
    "GetStreams",
    "CreateStream",
    "DeleteStream",
    "UpdateStream",
    "PurgeStream",
    "decode_get_stream",
    "encode_get_stream",
    "decode_get_streams",
    "encode_get_streams",
    "decode_create_stream",
    "encode_create_stream",
    "decode_delete_stream",
    "encode_delete_stream",
    "decode_update_stream",
    "encode_update_stream",
    "decode_purge_stream",
    "encode_purge_stream",
    "StreamInfo",
    "StreamDetails",
    "encode_stream_info",
    "encode_streams",
    "decode_streams",
    "encode_stream_details",
    "decode_stream_details",
]


@dataclass(frozen=True, slots=True)
class GetStream:
    stream_id: Identifier


@dataclass(frozen=True, slots=True)
class GetStreams:
    pass


@dataclass(frozen=True, slots=True)
class CreateStream:
    name: str
    options: bytes = b""


@dataclass(frozen=True, slots=True)
class DeleteStream:
    stream_id: Identifier


@dataclass(frozen=True, slots=True)
class UpdateStream:
    stream_id: Identifier
    name: str
    options: bytes = b""


@dataclass(frozen=True, slots=True)
class PurgeStream:
    stream_id: Identifier


def _stream_id_only(body: Buffer, what: str) -> Identifier:
    r = Reader(body)
    value = decode_identifier(r, "stream_id")
    r.expect_end(what)
    return value


def decode_get_stream(body: Buffer) -> GetStream:
    """``[stream_id Identifier]``; raises :class:`InvalidFormat` (or InvalidIdentifier)."""
    return GetStream(_stream_id_only(body, "get_stream"))


def encode_get_stream(value: GetStream) -> bytes:
    return encode_identifier(value.stream_id)


def decode_get_streams(body: Buffer) -> GetStreams:
    expect_empty(body, "get_streams")
    return GetStreams()


def encode_get_streams(value: GetStreams) -> bytes:
    return b""


def decode_create_stream(body: Buffer) -> CreateStream:
    """``[name Name][options to end]``; raises :class:`InvalidFormat`."""
    r = Reader(body)
    name = r.name("name")
    return CreateStream(name, bytes(r.rest()))


def encode_create_stream(value: CreateStream) -> bytes:
    return encode_name(value.name) + bytes(value.options)


def decode_delete_stream(body: Buffer) -> DeleteStream:
    return DeleteStream(_stream_id_only(body, "delete_stream"))


def encode_delete_stream(value: DeleteStream) -> bytes:
    return encode_identifier(value.stream_id)


def decode_update_stream(body: Buffer) -> UpdateStream:
    """``[stream_id Identifier][name Name][options to end]``; raises :class:`InvalidFormat`."""
    r = Reader(body)
    stream_id = decode_identifier(r, "stream_id")
    name = r.name("name")
    return UpdateStream(stream_id, name, bytes(r.rest()))


def encode_update_stream(value: UpdateStream) -> bytes:
    return encode_identifier(value.stream_id) + encode_name(value.name) + bytes(value.options)


def decode_purge_stream(body: Buffer) -> PurgeStream:
    return PurgeStream(_stream_id_only(body, "purge_stream"))


def encode_purge_stream(value: PurgeStream) -> bytes:
    return encode_identifier(value.stream_id)


# ---------------------------------------------------------------- replies


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """``[id u32][created_at u64 µs][topics_count u32][size_bytes u64][messages_count u64][name Name]
    [options_len u32][options]``."""

    id: int
    created_at: int
    topics_count: int
    name: str
    size_bytes: int = 0
    messages_count: int = 0
    options: bytes = b""


@dataclass(frozen=True, slots=True)
class StreamDetails:
    """GET_STREAM / CREATE_STREAM reply: a :class:`StreamInfo` whose ``topics_count`` is
    ``len(topics)``, then that many topic records (:class:`~.topics.TopicInfo`)."""

    id: int
    created_at: int
    name: str
    size_bytes: int = 0
    messages_count: int = 0
    options: bytes = b""
    topics: tuple[TopicInfo, ...] = ()


_STREAM_HEAD = struct.Struct("<IQIQQ")


def encode_stream_info(value: StreamInfo) -> bytes:
    return (
        _STREAM_HEAD.pack(
            value.id, value.created_at, value.topics_count, value.size_bytes, value.messages_count
        )
        + encode_name(value.name)
        + options_prefixed(value.options)
    )


def _read_stream_info(r: Reader) -> StreamInfo:
    sid, created, topics, size, messages = _STREAM_HEAD.unpack(r.view(_STREAM_HEAD.size, "stream"))
    name = r.name("stream name")
    return StreamInfo(sid, created, topics, name, size, messages, read_options_prefixed(r))


def encode_streams(values: list[StreamInfo] | tuple[StreamInfo, ...]) -> bytes:
    """GET_STREAMS reply payload: records back to back, no count."""
    return b"".join(encode_stream_info(v) for v in values)


def decode_streams(payload: Buffer) -> tuple[StreamInfo, ...]:
    """Decode a GET_STREAMS reply payload (read to the end); raises :class:`InvalidFormat`."""
    r = Reader(payload)
    out = []
    while not r.at_end:
        out.append(_read_stream_info(r))
    return tuple(out)


def encode_stream_details(value: StreamDetails) -> bytes:
    """GET_STREAM / CREATE_STREAM reply payload."""
    head = encode_stream_info(
        StreamInfo(
            value.id,
            value.created_at,
            len(value.topics),
            value.name,
            value.size_bytes,
            value.messages_count,
            value.options,
        )
    )
    return head + b"".join(encode_topic_info(t) for t in value.topics)


def decode_stream_details(payload: Buffer) -> StreamDetails:
    """Decode a GET_STREAM / CREATE_STREAM reply payload; raises :class:`InvalidFormat`."""
    r = Reader(payload)
    s = _read_stream_info(r)
    topics = []
    for _ in range(s.topics_count):
        topics.append(read_topic_info(r))
    r.expect_end("stream details")
    return StreamDetails(
        s.id, s.created_at, s.name, s.size_bytes, s.messages_count, s.options, tuple(topics)
    )
