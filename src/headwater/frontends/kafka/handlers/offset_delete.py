"""OffsetDelete (key 47), version 0: delete a group's committed offsets for some partitions.

Allowed for any partition while the group is Empty (or known only by its
offsets). With members, only when the group speaks the "consumer" protocol:
partitions of topics some member subscribes to (read from the members'
ConsumerProtocolSubscription metadata of the current generation) answer
GROUP_SUBSCRIBED_TO_TOPIC, the rest are deleted; metadata that does not
decode protects every partition. Other protocol types with members:
NON_EMPTY_GROUP. An unknown group: GROUP_ID_NOT_FOUND. A partition that
does not exist: UNKNOWN_TOPIC_OR_PARTITION. Deleting an offset that is not
there succeeds.
"""

from __future__ import annotations

import struct

from ....core.groups.classic import Outcome
from ....core.offsets import GROUP
from .. import errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api

CONSUMER_PROTOCOL = "consumer"
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def subscribed_topics(metadata: bytes) -> set[str]:
    """Topic names of a ConsumerProtocolSubscription (any version: version i16, then
    topics as i32 count of i16-length UTF-8 strings; the fields after are not read).
    Raises ValueError when the bytes do not hold that much."""
    try:
        pos = _I16.size
        (count,) = _I32.unpack_from(metadata, pos)
        pos += _I32.size
        if count < 0:
            return set()
        topics = set()
        for _ in range(count):
            (n,) = _I16.unpack_from(metadata, pos)
            pos += _I16.size
            if n < 0 or pos + n > len(metadata):
                raise ValueError("topic name past the end")
            topics.add(bytes(metadata[pos:pos + n]).decode())
            pos += n
        return topics
    except (struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"not a consumer subscription: {e}") from e


def _protected(check) -> set[str] | None:
    """Topics whose offsets stay (None: every topic stays)."""
    topics: set[str] = set()
    for metadata in check.subscriptions:
        try:
            topics |= subscribed_topics(metadata)
        except ValueError:
            return None
    return topics


@kafka_api(ApiKey.OFFSET_DELETE)
def offset_delete(ctx: Context, request):
    group_id = request.group_id
    if not authz.group(ctx, Operation.DELETE, group_id):
        return ctx.response(error_code=authz.GROUP_AUTHORIZATION_FAILED, throttle_time=0, topics=())
    check = ctx.frontend.groups.coordinator.offset_delete_check(group_id)
    if check.outcome is Outcome.GROUP_NOT_FOUND and group_id not in ctx.broker.committed_names(GROUP):
        return ctx.response(error_code=errors.GROUP_ID_NOT_FOUND, throttle_time=0, topics=())
    protected: set[str] | None = set()
    if check.outcome is Outcome.OK and check.subscriptions is not None:
        if check.protocol_type != CONSUMER_PROTOCOL:
            return ctx.response(error_code=errors.NON_EMPTY_GROUP, throttle_time=0, topics=())
        protected = _protected(check)
    names = ctx.frontend.names
    topics = []
    for t in request.topics:
        topic = names.resolve(t.name)
        denied = not authz.topic(ctx, Operation.READ, t.name, topic)
        parts = []
        for q in t.partitions:
            p = None if topic is None else topic.partitions.get(q.partition_index)
            if denied:
                code = authz.TOPIC_AUTHORIZATION_FAILED
            elif p is None:
                code = errors.UNKNOWN_TOPIC_OR_PARTITION
            elif protected is None or t.name in protected:
                code = errors.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                ctx.broker.delete_committed(p, GROUP, group_id)
                code = errors.NONE
            parts.append(ctx.build("OffsetDeleteResponsePartition", partition_index=q.partition_index,
                                   error_code=code))
        topics.append(ctx.build("OffsetDeleteResponseTopic", name=t.name, partitions=tuple(parts)))
    return ctx.response(error_code=errors.NONE, throttle_time=0, topics=tuple(topics))
