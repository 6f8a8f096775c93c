"""OffsetFetch (key 9), versions 1-9: a group's committed offsets, with their metadata.

v1 names its topics and partitions; v2 adds a top-level error_code and a
null topic list meaning "every partition the group has an offset for";
v3 throttle_time; v5 committed_leader_epoch (as committed; -1 when none was); v6
flexible; v7 require_stable: a partition for which an ongoing transaction
holds offsets of the group (TxnOffsetCommit, not yet committed) answers
UNSTABLE_OFFSET_COMMIT (offset -1), so the consumer retries (KIP-447);
v8 batches groups, one answer each; v9 member_id and member_epoch (for
KIP-848 groups; a classic group ignores them, as Kafka's does).

The values are those ``Broker.commit`` stored under ``(partition, "group",
group_id)``: what Kafka members committed and what Iggy consumer groups of
the same name stored (Iggy's "last consumed" + 1). A partition without an
offset, or of a topic that does not exist, answers offset -1, metadata ""
and no error, as Kafka does. "Every partition" lists only topics Kafka can
name (``names.py``).
"""

from __future__ import annotations

from ....core.offsets import GROUP
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api

NO_OFFSET = -1
UNSTABLE_OFFSET_COMMIT = 88


def _offsets(ctx: Context, group_id: str, wanted, stable: bool = False) -> list[tuple[str, list[tuple]]]:
    """[(topic name, [(partition, offset, metadata, leader_epoch, error)])] for the requested
    topics, or all (``wanted`` None: the topics the caller may DESCRIBE; a requested one it
    may not: TOPIC_AUTHORIZATION_FAILED); ``stable`` (require_stable): partitions with
    offsets pending in a transaction get UNSTABLE_OFFSET_COMMIT."""
    broker = ctx.broker
    names = ctx.frontend.names
    pending = broker.transactions.pending_offsets(group_id) if stable else set()
    if wanted is None:
        found: dict[str, list[tuple]] = {}
        for topic, p, c in broker.committed_of(GROUP, group_id):
            name = names.name_of(topic)
            if name is not None and authz.topic(ctx, Operation.DESCRIBE, name, topic):
                found.setdefault(name, []).append(_entry(p, p.id, c, pending))
        return list(found.items())
    out = []
    for name, indexes in wanted:
        topic = names.resolve(name)
        if not authz.topic(ctx, Operation.DESCRIBE, name, topic):
            out.append((name, [(i, NO_OFFSET, "", -1, authz.TOPIC_AUTHORIZATION_FAILED) for i in indexes]))
            continue
        parts = []
        for i in indexes:
            p = None if topic is None else topic.partitions.get(i)
            c = None if p is None else broker.committed_entry(p, GROUP, group_id)
            parts.append(_entry(p, i, c, pending))
        out.append((name, parts))
    return out


def _entry(p, index: int, c, pending: set) -> tuple:
    if p is not None and (p.stream_id, p.topic_id, p.id) in pending:
        return index, NO_OFFSET, "", -1, UNSTABLE_OFFSET_COMMIT
    if c is None:
        return index, NO_OFFSET, "", -1, 0
    return index, c.offset, c.metadata, c.leader_epoch, 0


def _topics(ctx: Context, found, topic_class: str, partition_class: str) -> tuple:
    return tuple(
        ctx.build(topic_class, name=name, partitions=tuple(
            ctx.build(partition_class, partition_index=i, committed_offset=offset, committed_leader_epoch=epoch,
                      metadata=metadata, error_code=code)
            for i, offset, metadata, epoch, code in parts))
        for name, parts in found
    )


@kafka_api(ApiKey.OFFSET_FETCH)
def offset_fetch(ctx: Context, request):
    if ctx.version < 8:
        if not authz.group(ctx, Operation.DESCRIBE, request.group_id):
            return ctx.response(throttle_time=0, error_code=authz.GROUP_AUTHORIZATION_FAILED, topics=())
        wanted = None if request.topics is None else [(t.name, t.partition_indexes) for t in request.topics]
        found = _offsets(ctx, request.group_id, wanted, getattr(request, "require_stable", False))
        return ctx.response(throttle_time=0, error_code=0,
                            topics=_topics(ctx, found, "OffsetFetchResponseTopic", "OffsetFetchResponsePartition"))
    groups = []
    for g in request.groups:
        if not authz.group(ctx, Operation.DESCRIBE, g.group_id):
            groups.append(ctx.build("OffsetFetchResponseGroup", group_id=g.group_id,
                                    error_code=authz.GROUP_AUTHORIZATION_FAILED, topics=()))
            continue
        wanted = None if g.topics is None else [(t.name, t.partition_indexes) for t in g.topics]
        found = _offsets(ctx, g.group_id, wanted, request.require_stable)
        groups.append(ctx.build("OffsetFetchResponseGroup", group_id=g.group_id, error_code=0,
                                topics=_topics(ctx, found, "OffsetFetchResponseTopics",
                                               "OffsetFetchResponsePartitions")))
    return ctx.response(throttle_time=0, groups=tuple(groups))
