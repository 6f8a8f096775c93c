"""Consumer group commands.

Sources: ``commands.mdx`` "Consumer groups"; crate ``requests/consumer_groups/*.rs``,
``responses/consumer_groups/*.rs``; SDK ``core/common/src/traits/binary_impls/
consumer_groups.rs`` and ``messages.rs`` (sync).

=====================  ====  ===  =====================================  ====================================
command                code  op   request body                           reply payload
=====================  ====  ===  =====================================  ====================================
GET_CONSUMER_GROUP     600   2    [stream_id][topic_id][group_id]        ConsumerGroupDetails; empty = none
GET_CONSUMER_GROUPS    601   2    [stream_id][topic_id]                  [ConsumerGroupInfo]* (no count)
CREATE_CONSUMER_GROUP  602   139  [stream_id][topic_id][name Name]       ConsumerGroupDetails (framed)
DELETE_CONSUMER_GROUP  603   140  [stream_id][topic_id][group_id]        empty (framed)
JOIN_CONSUMER_GROUP    604   148  [stream_id][topic_id][group_id]        empty (framed)
LEAVE_CONSUMER_GROUP   605   149  [stream_id][topic_id][group_id]        empty (framed)
SYNC_CONSUMER_GROUP    606   2    [stream_id][topic_id][group_id]        [generation u64][count u32]
                                                                         [partition_id u32]*; empty = not a
                                                                         member
=====================  ====  ===  =====================================  ====================================

(ids are Identifiers.) The crate types CREATE_CONSUMER_GROUP's reply as empty
but the SDK decodes ConsumerGroupDetails: we follow the SDK. JOIN carries no
assignment: a member learns its partitions and the generation from SYNC,
which the SDK calls after joining and on its heartbeat.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..codes import Command
from ..primitives import Identifier
from ..schema import IDENTIFIER, NAME, TO_END, U32, U64, Field, ListOf, Record
from ..schema import details, payload_codec, request

__all__ = [
    "GetConsumerGroup",
    "GetConsumerGroups",
    "CreateConsumerGroup",
    "DeleteConsumerGroup",
    "JoinConsumerGroup",
    "LeaveConsumerGroup",
    "SyncConsumerGroup",
    "decode_get_consumer_group",
    "encode_get_consumer_group",
    "decode_get_consumer_groups",
    "encode_get_consumer_groups",
    "decode_create_consumer_group",
    "encode_create_consumer_group",
    "decode_delete_consumer_group",
    "encode_delete_consumer_group",
    "decode_join_consumer_group",
    "encode_join_consumer_group",
    "decode_leave_consumer_group",
    "encode_leave_consumer_group",
    "decode_sync_consumer_group",
    "encode_sync_consumer_group",
    "ConsumerGroupInfo",
    "ConsumerGroupMember",
    "ConsumerGroupDetails",
    "SyncConsumerGroupReply",
    "encode_consumer_groups",
    "decode_consumer_groups",
    "encode_consumer_group_details",
    "decode_consumer_group_details",
    "encode_sync_consumer_group_reply",
    "decode_sync_consumer_group_reply",
]


@dataclass(frozen=True, slots=True)
class GetConsumerGroup:
    stream_id: Identifier
    topic_id: Identifier
    group_id: Identifier


@dataclass(frozen=True, slots=True)
class GetConsumerGroups:
    stream_id: Identifier
    topic_id: Identifier


@dataclass(frozen=True, slots=True)
class CreateConsumerGroup:
    stream_id: Identifier
    topic_id: Identifier
    name: str


@dataclass(frozen=True, slots=True)
class DeleteConsumerGroup:
    stream_id: Identifier
    topic_id: Identifier
    group_id: Identifier


@dataclass(frozen=True, slots=True)
class JoinConsumerGroup:
    stream_id: Identifier
    topic_id: Identifier
    group_id: Identifier


@dataclass(frozen=True, slots=True)
class LeaveConsumerGroup:
    stream_id: Identifier
    topic_id: Identifier
    group_id: Identifier


@dataclass(frozen=True, slots=True)
class SyncConsumerGroup:
    """Read-only: the member asks for its assignment and the group generation."""

    stream_id: Identifier
    topic_id: Identifier
    group_id: Identifier


# ---------------------------------------------------------------- replies


@dataclass(frozen=True, slots=True)
class ConsumerGroupInfo:
    """``[id u32][partitions_count u32][members_count u32][name Name]``.

    ``partitions_count`` is the topic's partition count.
    """

    id: int
    partitions_count: int
    members_count: int
    name: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """``[id u32][partitions_count u32][partition_id u32]*`` (count = ``len(partitions)``)."""

    id: int
    partitions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupDetails:
    """GET / CREATE_CONSUMER_GROUP reply: a :class:`ConsumerGroupInfo` whose ``members_count`` is
    ``len(members)``, then the :class:`ConsumerGroupMember` records."""

    id: int
    partitions_count: int
    name: str
    members: tuple[ConsumerGroupMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncConsumerGroupReply:
    """``[generation u64][partitions_count u32][partition_id u32]*``."""

    generation: int
    partitions: tuple[int, ...] = ()


CONSUMER_GROUP_INFO = Record(
    ConsumerGroupInfo,
    [
        Field("id", U32),
        Field("partitions_count", U32, doc="the topic's"),
        Field("members_count", U32),
        Field("name", NAME),
    ],
    label="consumer group",
)
CONSUMER_GROUP_MEMBER = Record(
    ConsumerGroupMember,
    [
        Field("id", U32),
        Field("partitions_count", U32, count_of="partitions"),
        Field("partitions", ListOf(U32, "partitions_count")),
    ],
    label="member",
)
CONSUMER_GROUP_DETAILS = details(
    CONSUMER_GROUP_INFO, ConsumerGroupDetails, "members", CONSUMER_GROUP_MEMBER
)
SYNC_CONSUMER_GROUP_REPLY = Record(
    SyncConsumerGroupReply,
    [Field("generation", U64), Field("partitions", ListOf(U32, U32))],
    what="sync consumer group",
)
CONSUMER_GROUPS = ListOf(CONSUMER_GROUP_INFO, TO_END)
"""GET_CONSUMER_GROUPS reply payload: records back to back, no count."""

decode_consumer_groups, encode_consumer_groups = payload_codec(CONSUMER_GROUPS, "consumer groups")
decode_consumer_group_details, encode_consumer_group_details = CONSUMER_GROUP_DETAILS.codec()
decode_sync_consumer_group_reply, encode_sync_consumer_group_reply = (
    SYNC_CONSUMER_GROUP_REPLY.codec()
)

# ---------------------------------------------------------------- requests

_TOPIC = [Field("stream_id", IDENTIFIER), Field("topic_id", IDENTIFIER)]
_GROUP = [*_TOPIC, Field("group_id", IDENTIFIER)]

GET_CONSUMER_GROUP = request(
    Command.GET_CONSUMER_GROUP,
    GetConsumerGroup,
    _GROUP,
    reply=CONSUMER_GROUP_DETAILS,
    empty_reply="not found",
)
GET_CONSUMER_GROUPS = request(
    Command.GET_CONSUMER_GROUPS, GetConsumerGroups, _TOPIC, reply=CONSUMER_GROUPS
)
CREATE_CONSUMER_GROUP = request(
    Command.CREATE_CONSUMER_GROUP,
    CreateConsumerGroup,
    [*_TOPIC, Field("name", NAME)],
    reply=CONSUMER_GROUP_DETAILS,
)
DELETE_CONSUMER_GROUP = request(Command.DELETE_CONSUMER_GROUP, DeleteConsumerGroup, _GROUP)
JOIN_CONSUMER_GROUP = request(Command.JOIN_CONSUMER_GROUP, JoinConsumerGroup, _GROUP)
LEAVE_CONSUMER_GROUP = request(Command.LEAVE_CONSUMER_GROUP, LeaveConsumerGroup, _GROUP)
SYNC_CONSUMER_GROUP = request(
    Command.SYNC_CONSUMER_GROUP,
    SyncConsumerGroup,
    _GROUP,
    reply=SYNC_CONSUMER_GROUP_REPLY,
    empty_reply="not a member",
)

decode_get_consumer_group, encode_get_consumer_group = GET_CONSUMER_GROUP.codec()
decode_get_consumer_groups, encode_get_consumer_groups = GET_CONSUMER_GROUPS.codec()
decode_create_consumer_group, encode_create_consumer_group = CREATE_CONSUMER_GROUP.codec()
decode_delete_consumer_group, encode_delete_consumer_group = DELETE_CONSUMER_GROUP.codec()
decode_join_consumer_group, encode_join_consumer_group = JOIN_CONSUMER_GROUP.codec()
decode_leave_consumer_group, encode_leave_consumer_group = LEAVE_CONSUMER_GROUP.codec()
decode_sync_consumer_group, encode_sync_consumer_group = SYNC_CONSUMER_GROUP.codec()
