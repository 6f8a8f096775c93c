"""CreatePartitions (key 37), versions 0-3: grow a topic to ``count`` partitions.

v1 adds nothing on the wire; v2 is flexible; v3 nothing we use. ``count``
is the new total: not above the current count gets INVALID_PARTITIONS;
manual assignments must name only this broker (INVALID_REPLICA_ASSIGNMENT).
validate_only checks without creating. A topic named more than once gets one
result, INVALID_REQUEST "Duplicate topic name.", and is left unchanged; as
in Kafka's ``ControllerApis.createPartitions`` those results come first.
"""

from __future__ import annotations

from collections import Counter

from ....core import errors as core_errors
from ....core.broker import MAX_PARTITIONS
from .. import errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api


def _one(ctx: Context, t, validate_only: bool) -> tuple[int, str | None]:
    topic = ctx.frontend.names.resolve(t.name)
    if not authz.topic(ctx, Operation.ALTER, t.name, topic):
        return authz.TOPIC_AUTHORIZATION_FAILED, None
    if topic is None:
        return errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic {t.name!r} not found"
    current = len(topic.partitions)
    if t.count <= current:
        return errors.INVALID_PARTITIONS, f"topic has {current} partitions; {t.count} does not add any"
    if t.count > MAX_PARTITIONS:
        return errors.INVALID_PARTITIONS, f"a topic has at most {MAX_PARTITIONS} partitions"
    node = ctx.frontend.node_id
    if t.assignments is not None:
        if len(t.assignments) != t.count - current or any(tuple(a.broker_ids) != (node,) for a in t.assignments):
            return errors.INVALID_REPLICA_ASSIGNMENT, f"every new partition must have exactly broker {node}"
    if validate_only:
        return 0, None
    try:
        ctx.broker.create_partitions(topic.stream_id, topic.id, t.count - current)
    except core_errors.BrokerError as e:
        return errors.code_for(e), str(e)
    return 0, None


@kafka_api(ApiKey.CREATE_PARTITIONS)
def create_partitions(ctx: Context, request):
    counts = Counter(t.name for t in request.topics)
    results = [
        ctx.build("CreatePartitionsTopicResult", name=name, error_code=errors.INVALID_REQUEST,
                  error_message="Duplicate topic name.")
        for name, n in counts.items() if n > 1
    ]
    for t in request.topics:
        if counts[t.name] > 1:
            continue
        code, message = _one(ctx, t, request.validate_only)
        results.append(ctx.build("CreatePartitionsTopicResult", name=t.name, error_code=code, error_message=message))
    return ctx.response(throttle_time=0, results=tuple(results))
