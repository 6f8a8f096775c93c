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

from dataclasses import dataclass

from ..codes import Command
from ..primitives import Identifier
from ..schema import IDENTIFIER, NAME, OPTIONS, REST, U8, U32, U64, Field, ListOf, Record
from ..schema import details, payload_codec, request

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


TOPIC_INFO = Record(
    TopicInfo,
    [
        Field("id", U32),
        Field("created_at", U64, doc="µs since the epoch"),
        Field("partitions_count", U32),
        Field("message_expiry", U64, doc="µs; 0 or u64::MAX = never"),
        Field("compression_algorithm", U8, json="compression algorithm", doc="1 none, 2 gzip"),
        Field("max_topic_size", U64, doc="bytes; 0 server default, u64::MAX unlimited"),
        Field("size_bytes", U64, json_name="size"),
        Field("messages_count", U64),
        Field("name", NAME),
        Field("options", OPTIONS, json="topic options", doc="JSON: with derived_options"),
        Field("derived_options", OPTIONS, json="skip"),
    ],
    label="topic",
)
PARTITION_INFO = Record(
    PartitionInfo,
    [
        Field("id", U32),
        Field("created_at", U64, doc="µs since the epoch"),
        Field("segments_count", U32),
        Field("current_offset", U64),
        Field("size_bytes", U64, json_name="size"),
        Field("messages_count", U64),
    ],
    label="partition",
)
TOPIC_DETAILS = details(TOPIC_INFO, TopicDetails, "partitions", PARTITION_INFO)
TOPICS = ListOf(TOPIC_INFO, U32)
"""GET_TOPICS reply payload: ``[count u32][TopicInfo]*`` (the only list with a count)."""

read_topic_info = TOPIC_INFO.read
encode_topic_info = TOPIC_INFO.codec()[1]
decode_topics, encode_topics = payload_codec(TOPICS, "topics")
decode_topic_details, encode_topic_details = TOPIC_DETAILS.codec()

# ---------------------------------------------------------------- requests

STREAM_ID = Field("stream_id", IDENTIFIER)
TOPIC_ID = Field("topic_id", IDENTIFIER)

GET_TOPIC = request(
    Command.GET_TOPIC, GetTopic, [STREAM_ID, TOPIC_ID], reply=TOPIC_DETAILS, empty_reply="not found"
)
GET_TOPICS = request(Command.GET_TOPICS, GetTopics, [STREAM_ID], reply=TOPICS)
CREATE_TOPIC = request(
    Command.CREATE_TOPIC,
    CreateTopic,
    [
        STREAM_ID,
        Field("partitions_count", U32, json_default=1),
        Field("name", NAME),
        Field("options", REST),
    ],
    reply=TOPIC_DETAILS,
)
DELETE_TOPIC = request(Command.DELETE_TOPIC, DeleteTopic, [STREAM_ID, TOPIC_ID])
UPDATE_TOPIC = request(
    Command.UPDATE_TOPIC,
    UpdateTopic,
    [STREAM_ID, TOPIC_ID, Field("name", NAME), Field("options", REST)],
)
PURGE_TOPIC = request(Command.PURGE_TOPIC, PurgeTopic, [STREAM_ID, TOPIC_ID])

decode_get_topic, encode_get_topic = GET_TOPIC.codec()
decode_get_topics, encode_get_topics = GET_TOPICS.codec()
decode_create_topic, encode_create_topic = CREATE_TOPIC.codec()
decode_delete_topic, encode_delete_topic = DELETE_TOPIC.codec()
decode_update_topic, encode_update_topic = UPDATE_TOPIC.codec()
decode_purge_topic, encode_purge_topic = PURGE_TOPIC.codec()
