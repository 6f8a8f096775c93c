"""DeleteRecords (key 21), versions 0-2: move a partition's log start offset forward.

v1 adds nothing on the wire; v2 is flexible. ``offset`` -1 means the high
watermark. The new start is a logical log start kept by the broker
(``Broker.delete_records``): Kafka reads below it get OFFSET_OUT_OF_RANGE and
ListOffsets earliest reports it at once, while the storage engine deletes
only the sealed segments that lie wholly below it. An offset past the high
watermark gets OFFSET_OUT_OF_RANGE.
"""

from __future__ import annotations

from ....core import errors as core_errors
from .. import errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api


@kafka_api(ApiKey.DELETE_RECORDS)
def delete_records(ctx: Context, request):
    names = ctx.frontend.names
    topics = []
    for t in request.topics:
        topic = names.resolve(t.name)
        denied = not authz.topic(ctx, Operation.DELETE, t.name, topic)
        parts = []
        for q in t.partitions:
            p = None if topic is None else topic.partitions.get(q.partition_index)
            if denied:
                code, low = authz.TOPIC_AUTHORIZATION_FAILED, -1
            elif p is None:
                code, low = errors.UNKNOWN_TOPIC_OR_PARTITION, -1
            else:
                try:
                    code, low = 0, ctx.broker.delete_records(topic, p, q.offset)
                except core_errors.BrokerError as e:
                    code, low = errors.code_for(e), -1
            parts.append(ctx.build("DeleteRecordsPartitionResult", partition_index=q.partition_index, low_watermark=low, error_code=code))
        topics.append(ctx.build("DeleteRecordsTopicResult", name=t.name, partitions=tuple(parts)))
    return ctx.response(throttle_time=0, topics=tuple(topics))
