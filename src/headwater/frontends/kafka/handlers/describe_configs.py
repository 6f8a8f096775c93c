"""DescribeConfigs (key 32), versions 1-4: topic configs (and a few broker ones).

v1 adds config_source and synonyms (no synonyms here); v2 nothing on the
wire; v3 config_type and documentation; v4 is flexible. Topic configs are
those of ``configs.py``; the broker (resource type 4, name = node id)
reports a few read-only values. Other resource types get INVALID_REQUEST;
an unknown topic UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from .. import configs, errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api

TOPIC = 2
BROKER = 4
SOURCE_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
TYPE_STRING = 2
TYPE_INT = 3
TYPE_LONG = 5
TYPE_LIST = 7
_TYPES = {
    "retention.ms": TYPE_LONG,
    "retention.bytes": TYPE_LONG,
    "segment.bytes": TYPE_INT,
    "max.message.bytes": TYPE_INT,
    "cleanup.policy": TYPE_LIST,
    "min.cleanable.dirty.ratio": 6,  # DOUBLE
    "min.compaction.lag.ms": TYPE_LONG,
    "max.compaction.lag.ms": TYPE_LONG,
    "delete.retention.ms": TYPE_LONG,
    "segment.ms": TYPE_LONG,
    "min.insync.replicas": TYPE_INT,
}


def broker_configs(ctx: Context) -> list[configs.ConfigValue]:
    cfg = ctx.config
    return [
        configs.ConfigValue("auto.create.topics.enable", "true" if cfg.auto_create_topics else "false", True, False),
        configs.ConfigValue("num.partitions", str(cfg.default_partitions), True, False),
        configs.ConfigValue("default.replication.factor", "1", True, True),
        configs.ConfigValue("message.max.bytes", str(configs.DEFAULT_MAX_MESSAGE_BYTES), True, True),
        configs.ConfigValue("socket.request.max.bytes", str(cfg.max_request_size), True, False),
    ]


def _entry(ctx: Context, c: configs.ConfigValue, static_source: int):
    return ctx.build(
        "DescribeConfigsResourceResult",
        name=c.name,
        value=c.value,
        read_only=c.read_only,
        config_source=SOURCE_DEFAULT if c.is_default else static_source,
        is_sensitive=False,
        synonyms=(),
        config_type=_TYPES.get(c.name, TYPE_STRING),
        documentation=configs.DOCS.get(c.name),
    )


def _one(ctx: Context, r):
    keys = None if r.configuration_keys is None else set(r.configuration_keys)
    if r.resource_type == TOPIC:
        topic = ctx.frontend.names.resolve(r.resource_name)
        if not authz.topic(ctx, Operation.DESCRIBE_CONFIGS, r.resource_name, topic):
            return authz.TOPIC_AUTHORIZATION_FAILED, None, ()
        if topic is None:
            return errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic {r.resource_name!r} not found", ()
        values, source = configs.describe(ctx.broker, topic), SOURCE_TOPIC
    elif r.resource_type == BROKER:
        if r.resource_name not in ("", str(ctx.frontend.node_id)):
            return errors.INVALID_REQUEST, f"no broker {r.resource_name!r}", ()
        if not authz.cluster(ctx, Operation.DESCRIBE_CONFIGS):
            return authz.CLUSTER_AUTHORIZATION_FAILED, None, ()
        values, source = broker_configs(ctx), SOURCE_STATIC_BROKER
    else:
        return errors.INVALID_REQUEST, f"resource type {r.resource_type} is not supported", ()
    entries = tuple(_entry(ctx, c, source) for c in values if keys is None or c.name in keys)
    return 0, None, entries


@kafka_api(ApiKey.DESCRIBE_CONFIGS)
def describe_configs(ctx: Context, request):
    results = []
    for r in request.resources:
        code, message, entries = _one(ctx, r)
        results.append(
            ctx.build(
                "DescribeConfigsResult",
                error_code=code,
                error_message=message,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                configs=entries,
            )
        )
    return ctx.response(throttle_time=0, results=tuple(results))
