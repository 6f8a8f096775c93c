"""OffsetCommit (key 8), versions 2-9: store a group's next offsets to consume, with metadata.

v2 drops the per-partition timestamp of v1 and adds retention_time
(ignored: committed offsets never expire here); v3 throttle_time; v5 drops
retention_time; v6 committed_leader_epoch (stored with the offset; OffsetFetch
returns it, -1 when none was given); v7 group_instance_id; v8 flexible; v9 generation_id_or_member_epoch is
the generation for classic groups, as before. v0-1 are not served (Kafka 4
dropped them); old librdkafka only needs 2 inside the range.

Who may commit (``GroupCoordinator.validate_commit``): a member of the
current generation (not while the group waits for the leader's assignment:
REBALANCE_IN_PROGRESS); or anyone with generation -1 and no member id while
the group is Empty or unknown (a "simple" consumer or an admin client: the
group is created Empty). A refusal (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
FENCED_INSTANCE_ID, ...) is the code of every partition of the request.

Per partition: UNKNOWN_TOPIC_OR_PARTITION for a topic or partition that does
not exist; OFFSET_METADATA_TOO_LARGE above ``kafka.offset_metadata_max_bytes``
(UTF-8 bytes); otherwise the offset is written through ``Broker.commit_many`` (every
partition of the request in one atomic, durable write before the answer) under ``(partition, "group", group_id)``, the
key an Iggy consumer group of the same name uses. A negative offset means
"no offset" to Kafka readers and removes the stored one.
"""

from __future__ import annotations

from ....core.groups.classic import Outcome
from ....core.offsets import GROUP
from ....core import errors as core_errors
from .. import errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api


def checked_commits(
    ctx: Context, group_id: str, topics, group_error: int = errors.NONE
) -> list[tuple[str, list[tuple]]]:
    """Per topic of an OffsetCommit / TxnOffsetCommit request: ``(name, [(partition_index,
    code, partition, offset, metadata, leader_epoch)])``, code GROUP_AUTHORIZATION_FAILED
    (no READ on the group), TOPIC_AUTHORIZATION_FAILED (no READ on the topic),
    UNKNOWN_TOPIC_OR_PARTITION, ``group_error``, OFFSET_METADATA_TOO_LARGE or NONE
    (partition None unless found)."""
    names = ctx.frontend.names
    if group_error != authz.TRANSACTIONAL_ID_AUTHORIZATION_FAILED and not authz.group(ctx, Operation.READ, group_id):
        group_error = authz.GROUP_AUTHORIZATION_FAILED
    refused = group_error in (authz.GROUP_AUTHORIZATION_FAILED, authz.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    limit = ctx.config.offset_metadata_max_bytes
    out = []
    for t in topics:
        topic = names.resolve(t.name)
        denied = not refused and not authz.topic(ctx, Operation.READ, t.name, topic)
        parts = []
        for q in t.partitions:
            p = None if topic is None else topic.partitions.get(q.partition_index)
            metadata = q.committed_metadata or ""
            if refused:
                code = group_error
            elif denied:
                code = authz.TOPIC_AUTHORIZATION_FAILED
            elif p is None:
                code = errors.UNKNOWN_TOPIC_OR_PARTITION
            elif group_error:
                code = group_error
            elif len(metadata.encode()) > limit:
                code = errors.OFFSET_METADATA_TOO_LARGE
            else:
                code = errors.NONE
            epoch = getattr(q, "committed_leader_epoch", -1)
            parts.append((q.partition_index, code, p, q.committed_offset, metadata, epoch))
        out.append((t.name, parts))
    return out


@kafka_api(ApiKey.OFFSET_COMMIT)
def offset_commit(ctx: Context, request):
    broker = ctx.broker
    group_id = request.group_id
    outcome = ctx.frontend.groups.validate_commit(
        group_id,
        member_id=request.member_id or "",
        generation_id=request.generation_id_or_member_epoch,
        group_instance_id=getattr(request, "group_instance_id", None),
    )
    group_error = errors.group_code(outcome) if outcome is not Outcome.OK else errors.NONE
    commits = []  # written together below: one durable, atomic write per request
    answers = []  # per topic: (name, [(partition_index, code, committed?)])
    for name, parts in checked_commits(ctx, group_id, request.topics, group_error):
        for _index, code, p, offset, metadata, epoch in parts:
            if code == errors.NONE:
                commits.append((p, None if offset < 0 else offset, metadata, epoch))
        answers.append((name, [(index, code, code == errors.NONE) for index, code, *_ in parts]))
    written_code = errors.NONE
    if commits:
        try:
            broker.commit_many(GROUP, group_id, commits)
        except core_errors.StorageWriteFailed as e:  # nothing was committed
            written_code = errors.code_for(e)
    topics = tuple(
        ctx.build("OffsetCommitResponseTopic", name=name, partitions=tuple(
            ctx.build("OffsetCommitResponsePartition", partition_index=index,
                      error_code=written_code if committed else code)
            for index, code, committed in parts
        ))
        for name, parts in answers
    )
    return ctx.response(throttle_time=0, topics=topics)
