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

import struct
from dataclasses import dataclass

from ...errors import InvalidFormat
from ..primitives import Identifier, Reader, decode_identifier, encode_identifier, encode_name
from ._common import U32, U64, Buffer, read_count

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


def _three_ids(body: Buffer, what: str) -> tuple[Identifier, Identifier, Identifier]:
    r = Reader(body)
    ids = (
        decode_identifier(r, "stream_id"),
        decode_identifier(r, "topic_id"),
        decode_identifier(r, "group_id"),
    )
    r.expect_end(what)
    return ids


def _encode_three(stream_id: Identifier, topic_id: Identifier, group_id: Identifier) -> bytes:
    return encode_identifier(stream_id) + encode_identifier(topic_id) + encode_identifier(group_id)


def decode_get_consumer_group(body: Buffer) -> GetConsumerGroup:
    """``[stream_id][topic_id][group_id]``; raises :class:`InvalidFormat` (or InvalidIdentifier)."""
    return GetConsumerGroup(*_three_ids(body, "get_consumer_group"))


def encode_get_consumer_group(value: GetConsumerGroup) -> bytes:
    return _encode_three(value.stream_id, value.topic_id, value.group_id)


def decode_get_consumer_groups(body: Buffer) -> GetConsumerGroups:
    r = Reader(body)
    stream_id = decode_identifier(r, "stream_id")
    topic_id = decode_identifier(r, "topic_id")
    r.expect_end("get_consumer_groups")
    return GetConsumerGroups(stream_id, topic_id)


def encode_get_consumer_groups(value: GetConsumerGroups) -> bytes:
    return encode_identifier(value.stream_id) + encode_identifier(value.topic_id)


def decode_create_consumer_group(body: Buffer) -> CreateConsumerGroup:
    """``[stream_id][topic_id][name Name]``; raises :class:`InvalidFormat`."""
    r = Reader(body)
    stream_id = decode_identifier(r, "stream_id")
    topic_id = decode_identifier(r, "topic_id")
    name = r.name("name")
    r.expect_end("create_consumer_group")
    return CreateConsumerGroup(stream_id, topic_id, name)


def encode_create_consumer_group(value: CreateConsumerGroup) -> bytes:
    return (
        encode_identifier(value.stream_id)
        + encode_identifier(value.topic_id)
        + encode_name(value.name)
    )


def decode_delete_consumer_group(body: Buffer) -> DeleteConsumerGroup:
    return DeleteConsumerGroup(*_three_ids(body, "delete_consumer_group"))


def encode_delete_consumer_group(value: DeleteConsumerGroup) -> bytes:
    return _encode_three(value.stream_id, value.topic_id, value.group_id)


def decode_join_consumer_group(body: Buffer) -> JoinConsumerGroup:
    return JoinConsumerGroup(*_three_ids(body, "join_consumer_group"))


def encode_join_consumer_group(value: JoinConsumerGroup) -> bytes:
    return _encode_three(value.stream_id, value.topic_id, value.group_id)


def decode_leave_consumer_group(body: Buffer) -> LeaveConsumerGroup:
    return LeaveConsumerGroup(*_three_ids(body, "leave_consumer_group"))


def encode_leave_consumer_group(value: LeaveConsumerGroup) -> bytes:
    return _encode_three(value.stream_id, value.topic_id, value.group_id)


def decode_sync_consumer_group(body: Buffer) -> SyncConsumerGroup:
    return SyncConsumerGroup(*_three_ids(body, "sync_consumer_group"))


def encode_sync_consumer_group(value: SyncConsumerGroup) -> bytes:
    return _encode_three(value.stream_id, value.topic_id, value.group_id)


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


_GROUP_HEAD = struct.Struct("<III")
_MEMBER_HEAD = struct.Struct("<II")


def _encode_group_info(value: ConsumerGroupInfo) -> bytes:
    return _GROUP_HEAD.pack(value.id, value.partitions_count, value.members_count) + encode_name(
        value.name
    )


def _read_group_info(r: Reader) -> ConsumerGroupInfo:
    gid, partitions, members = _GROUP_HEAD.unpack(r.view(_GROUP_HEAD.size, "consumer group"))
    return ConsumerGroupInfo(gid, partitions, members, r.name("group name"))


def _u32_list(values: tuple[int, ...] | list[int]) -> bytes:
    return struct.pack(f"<{len(values)}I", *values)


def _read_u32_list(r: Reader, count: int, what: str) -> tuple[int, ...]:
    if count * 4 > r.remaining:
        raise InvalidFormat(
            f"{what}: {count} ids cannot fit in {r.remaining} bytes", offset=r.base + r.pos
        )
    return struct.unpack(f"<{count}I", r.view(4 * count, what))


def encode_consumer_groups(
    values: list[ConsumerGroupInfo] | tuple[ConsumerGroupInfo, ...],
) -> bytes:
    """GET_CONSUMER_GROUPS reply payload: records back to back, no count."""
    return b"".join(_encode_group_info(v) for v in values)


def decode_consumer_groups(payload: Buffer) -> tuple[ConsumerGroupInfo, ...]:
    """Decode a GET_CONSUMER_GROUPS payload (read to the end); raises :class:`InvalidFormat`."""
    r = Reader(payload)
    out = []
    while not r.at_end:
        out.append(_read_group_info(r))
    return tuple(out)


def encode_consumer_group_details(value: ConsumerGroupDetails) -> bytes:
    """GET / CREATE_CONSUMER_GROUP reply payload."""
    out = bytearray(
        _encode_group_info(
            ConsumerGroupInfo(value.id, value.partitions_count, len(value.members), value.name)
        )
    )
    for m in value.members:
        out += _MEMBER_HEAD.pack(m.id, len(m.partitions)) + _u32_list(m.partitions)
    return bytes(out)


def decode_consumer_group_details(payload: Buffer) -> ConsumerGroupDetails:
    """Decode a GET / CREATE_CONSUMER_GROUP payload; raises :class:`InvalidFormat`."""
    r = Reader(payload)
    g = _read_group_info(r)
    members = []
    for _ in range(g.members_count):
        mid, count = _MEMBER_HEAD.unpack(r.view(_MEMBER_HEAD.size, "member"))
        members.append(ConsumerGroupMember(mid, _read_u32_list(r, count, "member partitions")))
    r.expect_end("consumer group details")
    return ConsumerGroupDetails(g.id, g.partitions_count, g.name, tuple(members))


def encode_sync_consumer_group_reply(value: SyncConsumerGroupReply) -> bytes:
    """SYNC_CONSUMER_GROUP reply payload (send an empty body for a non-member)."""
    return (
        U64.pack(value.generation) + U32.pack(len(value.partitions)) + _u32_list(value.partitions)
    )


def decode_sync_consumer_group_reply(payload: Buffer) -> SyncConsumerGroupReply:
    """Decode the SYNC_CONSUMER_GROUP payload; raises :class:`InvalidFormat`."""
    r = Reader(payload)
    generation = r.u64("generation")
    count = read_count(r, 4, "partitions_count")
    partitions = _read_u32_list(r, count, "partitions")
    r.expect_end("sync consumer group")
    return SyncConsumerGroupReply(generation, partitions)
