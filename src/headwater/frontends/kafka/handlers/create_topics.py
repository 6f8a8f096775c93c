"""CreateTopics (key 19), versions 2-7: create topics in the Kafka stream.

v2-4 add nothing we use; v5 is flexible and returns num_partitions,
replication_factor and the configs; v6 nothing on the wire; v7 topic_id.
num_partitions -1 takes ``kafka.default_partitions``; replication factor
must be -1 or 1 (INVALID_REPLICATION_FACTOR otherwise); manual assignments
are accepted only when every replica list is this broker
(INVALID_REPLICA_ASSIGNMENT otherwise). Configs map to Iggy topic options
(``configs.py``; INVALID_CONFIG). Names must be valid Kafka names
(INVALID_TOPIC_EXCEPTION) and must not exist or shadow an Iggy ``S.T``
(TOPIC_ALREADY_EXISTS). validate_only checks without creating. A name given
more than once gets one result, INVALID_REQUEST "Duplicate topic name.",
after the others (as Kafka's ``ControllerApis.createTopics``), and nothing
is created for it.
"""

from __future__ import annotations

import uuid
from collections import Counter

from ....core import errors as core_errors
from .. import configs, errors
from ..names import is_valid_name, topic_id
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api


def _result(ctx: Context, name: str, code: int, message: str | None = None, topic=None, partitions=-1, cfgs=()):
    return ctx.build(
        "CreatableTopicResult",
        name=name,
        topic_id=topic_id(topic) if topic is not None else uuid.UUID(int=0),
        error_code=code,
        error_message=message,
        topic_config_error_code=0,
        num_partitions=partitions,
        replication_factor=1 if code == 0 else -1,
        configs=cfgs,
    )


def _describe(ctx: Context, topic):
    return tuple(
        ctx.build(
            "CreatableTopicConfigs",
            name=c.name,
            value=c.value,
            read_only=c.read_only,
            config_source=5 if c.is_default else 1,  # DEFAULT_CONFIG / TOPIC_CONFIG
            is_sensitive=False,
        )
        for c in configs.describe(ctx.broker, topic)
    )


def _create_one(ctx: Context, t, validate_only: bool):
    names = ctx.frontend.names
    node = ctx.frontend.node_id
    name = t.name
    if not is_valid_name(name):
        return _result(ctx, name, errors.INVALID_TOPIC_EXCEPTION, f"{name!r} is not a valid topic name")
    if not authz.create_topic(ctx, name):
        return _result(ctx, name, authz.TOPIC_AUTHORIZATION_FAILED, "CREATE on the cluster or the topic is needed")
    if names.resolve(name) is not None:
        return _result(ctx, name, errors.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
    partitions = t.num_partitions
    if t.assignments:
        if partitions != -1 or t.replication_factor != -1:
            return _result(ctx, name, errors.INVALID_REQUEST, "assignments exclude num_partitions and replication_factor")
        indexes = sorted(a.partition_index for a in t.assignments)
        if indexes != list(range(len(indexes))) or any(tuple(a.broker_ids) != (node,) for a in t.assignments):
            return _result(ctx, name, errors.INVALID_REPLICA_ASSIGNMENT, f"every partition must have exactly broker {node}")
        partitions = len(indexes)
    elif partitions == -1:
        partitions = ctx.config.default_partitions
    if partitions < 1:
        return _result(ctx, name, errors.INVALID_PARTITIONS, f"num_partitions {partitions} must be at least 1")
    if t.replication_factor not in (-1, 1) and not t.assignments:
        return _result(ctx, name, errors.INVALID_REPLICATION_FACTOR, "this broker has one node: replication factor 1")
    try:
        options, settings = configs.split({c.name: c.value for c in t.configs}, partitions)
        configs.check_create_options(options, partitions)
    except configs.ConfigError as e:
        return _result(ctx, name, errors.INVALID_CONFIG, str(e))
    if validate_only:
        return _result(ctx, name, 0, None, None, partitions)
    try:
        topic = names.create(name, partitions, options)
    except core_errors.BrokerError as e:
        return _result(ctx, name, errors.code_for(e), str(e))
    if settings:
        ctx.broker.update_topic_settings(topic, settings)
    return _result(ctx, name, 0, None, topic, partitions, _describe(ctx, topic) if ctx.version >= 5 else ())


@kafka_api(ApiKey.CREATE_TOPICS)
def create_topics(ctx: Context, request):
    counts = Counter(t.name for t in request.topics)
    results = [_create_one(ctx, t, request.validate_only) for t in request.topics if counts[t.name] == 1]
    results += [
        _result(ctx, name, errors.INVALID_REQUEST, "Duplicate topic name.") for name, n in counts.items() if n > 1
    ]
    return ctx.response(throttle_time=0, topics=tuple(results))
