"""Metadata (key 3), versions 0-13: brokers, cluster id, topics and partition leaders.

v1 adds a nullable topic list (null = all; in v0 an empty list means all),
controller_id, rack, is_internal; v2 cluster_id; v3 throttle_time_ms; v4
allow_auto_topic_creation; v5 offline_replicas; v7 leader_epoch (always 0
here); v8-10 authorized operations (the caller's bit sets when asked for,
else INT32_MIN); v9 flexible;
v10 topic ids (derived, see names.py); v12 topics by id in the request;
v13 a top-level error_code.

Before v12 a request topic must have a name and no id: otherwise every
topic of the request is answered INVALID_REQUEST (a null name as ``""``),
as Kafka's ``KafkaApis.handleTopicMetadataRequest`` does.

Unknown topics are created when the request allows it (always before v4)
and ``kafka.auto_create_topics`` is on: synchronously, in the Kafka stream,
with ``kafka.default_partitions`` partitions, and answered normally (Kafka
answers LEADER_NOT_AVAILABLE while it creates).

Authorization (docs/security.md): listing all topics shows those the caller
may DESCRIBE; a named topic it may not is answered TOPIC_AUTHORIZATION_FAILED
(by id: TOPIC_AUTHORIZATION_FAILED with a null name); an unknown topic it may
describe but not CREATE (on the cluster or the topic) is not auto-created and
gets TOPIC_AUTHORIZATION_FAILED, as in Kafka.
"""

from __future__ import annotations

import uuid

from ....core import errors as core_errors
from .. import errors
from ..names import is_valid_name, topic_id
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api

NO_AUTHORIZED_OPERATIONS = -(2**31)
ZERO = uuid.UUID(int=0)


def topic_entity(ctx: Context, name: str | None, topic, error: int = 0, tid: uuid.UUID | None = None):
    node = ctx.frontend.node_id
    operations = NO_AUTHORIZED_OPERATIONS
    if topic is not None and ctx.include_operations:
        operations = authz.topic_operations(ctx, name, topic)
    partitions = ()
    if topic is not None:
        partitions = tuple(
            ctx.build(
                "MetadataResponsePartition",
                error_code=0,
                partition_index=pid,
                leader_id=node,
                leader_epoch=0,
                replica_nodes=(node,),
                isr_nodes=(node,),
                offline_replicas=(),
            )
            for pid in sorted(topic.partitions)
        )
        tid = topic_id(topic)
    return ctx.build(
        "MetadataResponseTopic",
        error_code=error,
        name=name,
        topic_id=tid or uuid.UUID(int=0),
        is_internal=False,
        partitions=partitions,
        topic_authorized_operations=operations,
    )


def _one(ctx: Context, name: str | None, tid, allow_create: bool):
    names = ctx.frontend.names
    if name is None:
        if tid is None or tid.int == 0:
            return topic_entity(ctx, None, None, errors.INVALID_REQUEST)
        found = names.by_id(tid)
        if found is None:
            return topic_entity(ctx, None, None, errors.UNKNOWN_TOPIC_ID, tid)
        if not authz.topic(ctx, Operation.DESCRIBE, found[0], found[1]):
            return topic_entity(ctx, None, None, authz.TOPIC_AUTHORIZATION_FAILED, tid)
        return topic_entity(ctx, found[0], found[1])
    topic = names.resolve(name)
    if not authz.topic(ctx, Operation.DESCRIBE, name, topic):
        return topic_entity(ctx, name, None, authz.TOPIC_AUTHORIZATION_FAILED)
    if topic is not None:
        return topic_entity(ctx, name, topic)
    if not is_valid_name(name):
        return topic_entity(ctx, name, None, errors.INVALID_TOPIC_EXCEPTION)
    if not (allow_create and ctx.config.auto_create_topics):
        return topic_entity(ctx, name, None, errors.UNKNOWN_TOPIC_OR_PARTITION)
    if not authz.create_topic(ctx, name):
        return topic_entity(ctx, name, None, authz.TOPIC_AUTHORIZATION_FAILED)
    try:
        topic = names.create(name, ctx.config.default_partitions, {})
    except core_errors.BrokerError as e:
        return topic_entity(ctx, name, None, errors.code_for(e))
    return topic_entity(ctx, name, topic)


@kafka_api(ApiKey.METADATA)
def metadata(ctx: Context, request):
    fe = ctx.frontend
    allow_create = ctx.version < 4 or bool(getattr(request, "allow_auto_topic_creation", True))
    wanted = request.topics
    ctx.include_operations = bool(getattr(request, "include_topic_authorized_operations", False))
    if wanted is None or (ctx.version == 0 and not wanted):
        topics = tuple(
            topic_entity(ctx, name, t)
            for name, t in fe.names.visible()
            if authz.topic(ctx, Operation.DESCRIBE, name, t)
        )
    elif ctx.version < 12 and any(t.name is None or getattr(t, "topic_id", None) not in (None, ZERO) for t in wanted):
        topics = tuple(
            topic_entity(ctx, t.name or "", None, errors.INVALID_REQUEST, getattr(t, "topic_id", None)) for t in wanted
        )
    else:
        topics = tuple(_one(ctx, t.name, getattr(t, "topic_id", None), allow_create) for t in wanted)
    cluster_operations = NO_AUTHORIZED_OPERATIONS
    if getattr(request, "include_cluster_authorized_operations", False):
        cluster_operations = authz.cluster_operations(ctx)
    broker = ctx.build("MetadataResponseBroker", node_id=fe.node_id, host=fe.advertised_host, port=fe.advertised_port, rack=None)
    return ctx.response(
        throttle_time=0,
        brokers=(broker,),
        cluster_id=ctx.broker.cluster_id,
        controller_id=fe.node_id,
        topics=topics,
        cluster_authorized_operations=cluster_operations,
        error_code=0,
    )
