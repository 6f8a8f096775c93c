"""AlterConfigs (key 33), versions 0-2: replace a topic's configs.

v1 adds nothing on the wire; v2 is flexible. As in Kafka, the request is
the whole set: an updatable config left out goes back to its default
(retention.ms and retention.bytes -1, max.message.bytes 1048588). See
``configs.py`` for what can change (segment.bytes cannot). Broker resources
get INVALID_REQUEST (broker configs are read-only here).
"""

from __future__ import annotations

from .. import configs, errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api

TOPIC = 2


def apply(ctx: Context, resource_type: int, resource_name: str, changes: dict, validate_only: bool) -> tuple[int, str | None]:
    if resource_type != TOPIC:
        return errors.INVALID_REQUEST, "only topic configs can be altered"
    topic = ctx.frontend.names.resolve(resource_name)
    if not authz.topic(ctx, Operation.ALTER_CONFIGS, resource_name, topic):
        return authz.TOPIC_AUTHORIZATION_FAILED, None
    if topic is None:
        return errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic {resource_name!r} not found"
    try:
        configs.alter(ctx.broker, topic, changes, validate_only)
    except configs.ConfigError as e:
        return errors.INVALID_CONFIG, str(e)
    return 0, None


@kafka_api(ApiKey.ALTER_CONFIGS)
def alter_configs(ctx: Context, request):
    out = []
    for r in request.resources:
        changes: dict = {name: None for name in configs.UPDATABLE}
        changes.update({c.name: c.value for c in r.configs})
        code, message = apply(ctx, r.resource_type, r.resource_name, changes, request.validate_only)
        out.append(
            ctx.build(
                "AlterConfigsResourceResponse",
                error_code=code,
                error_message=message,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
        )
    return ctx.response(throttle_time=0, responses=tuple(out))
