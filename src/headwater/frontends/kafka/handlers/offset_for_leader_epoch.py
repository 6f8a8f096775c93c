"""OffsetForLeaderEpoch (key 23), versions 2-4: end offset of a leader epoch.

There is one leader epoch, 0, for every partition (Metadata and Fetch say
so): epoch 0 ends at the high watermark; a later epoch is unknown
(epoch -1, offset -1, as Kafka answers). A current_leader_epoch above 0 gets
UNKNOWN_LEADER_EPOCH. v3 adds replica_id, v4 is flexible.
"""

from __future__ import annotations

from .. import errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api

UNKNOWN_LEADER_EPOCH = 75


@kafka_api(ApiKey.OFFSET_FOR_LEADER_EPOCH)
def offset_for_leader_epoch(ctx: Context, request):
    names = ctx.frontend.names
    topics = []
    for t in request.topics:
        topic = names.resolve(t.topic)
        denied = not authz.topic(ctx, Operation.DESCRIBE, t.topic, topic)
        parts = []
        for q in t.partitions:
            p = None if topic is None else topic.partitions.get(q.partition)
            if denied:
                code, epoch, end = authz.TOPIC_AUTHORIZATION_FAILED, -1, -1
            elif p is None:
                code, epoch, end = errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1
            elif q.current_leader_epoch > 0:
                code, epoch, end = UNKNOWN_LEADER_EPOCH, -1, -1
            elif q.leader_epoch <= 0:
                code, epoch, end = 0, 0, p.high_watermark
            else:
                code, epoch, end = 0, -1, -1
            parts.append(ctx.build("EpochEndOffset", error_code=code, partition=q.partition, leader_epoch=epoch, end_offset=end))
        topics.append(ctx.build("OffsetForLeaderTopicResult", topic=t.topic, partitions=tuple(parts)))
    return ctx.response(throttle_time=0, topics=tuple(topics))
