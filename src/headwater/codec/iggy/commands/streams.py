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

from dataclasses import dataclass

from ..codes import Command
from ..primitives import Identifier
from ..schema import IDENTIFIER, NAME, OPTIONS, REST, TO_END, U32, U64, Field, ListOf, Record
from ..schema import details, payload_codec, request
from .topics import TOPIC_INFO, TopicInfo

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


STREAM_INFO = Record(
    StreamInfo,
    [
        Field("id", U32),
        Field("created_at", U64, doc="µs since the epoch"),
        Field("topics_count", U32),
        Field("size_bytes", U64, json_name="size"),
        Field("messages_count", U64),
        Field("name", NAME),
        Field("options", OPTIONS),
    ],
    label="stream",
)
STREAM_DETAILS = details(STREAM_INFO, StreamDetails, "topics", TOPIC_INFO)
STREAMS = ListOf(STREAM_INFO, TO_END)
"""GET_STREAMS reply payload: records back to back, no count."""

encode_stream_info = STREAM_INFO.codec()[1]
decode_streams, encode_streams = payload_codec(STREAMS, "streams")
decode_stream_details, encode_stream_details = STREAM_DETAILS.codec()

# ---------------------------------------------------------------- requests

STREAM_ID = Field("stream_id", IDENTIFIER)

GET_STREAM = request(
    Command.GET_STREAM, GetStream, [STREAM_ID], reply=STREAM_DETAILS, empty_reply="not found"
)
GET_STREAMS = request(Command.GET_STREAMS, GetStreams, reply=STREAMS)
CREATE_STREAM = request(
    Command.CREATE_STREAM,
    CreateStream,
    [Field("name", NAME), Field("options", REST)],
    reply=STREAM_DETAILS,
)
DELETE_STREAM = request(Command.DELETE_STREAM, DeleteStream, [STREAM_ID])
UPDATE_STREAM = request(
    Command.UPDATE_STREAM,
    UpdateStream,
    [STREAM_ID, Field("name", NAME), Field("options", REST)],
)
PURGE_STREAM = request(Command.PURGE_STREAM, PurgeStream, [STREAM_ID])

decode_get_stream, encode_get_stream = GET_STREAM.codec()
decode_get_streams, encode_get_streams = GET_STREAMS.codec()
decode_create_stream, encode_create_stream = CREATE_STREAM.codec()
decode_delete_stream, encode_delete_stream = DELETE_STREAM.codec()
decode_update_stream, encode_update_stream = UPDATE_STREAM.codec()
decode_purge_stream, encode_purge_stream = PURGE_STREAM.codec()
