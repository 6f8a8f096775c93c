"""IncrementalAlterConfigs (key 44), versions 0-1: change single topic configs.

v1 is flexible. Operations: 0 SET, 1 DELETE (back to the default), 2 APPEND
and 3 SUBTRACT (comma-separated items added to / removed from a list config,
cleanup.policy here; on another config, or leaving the list empty,
INVALID_CONFIG). Operations on one resource apply in order. See ``configs.py``.
"""

from __future__ import annotations

from .. import configs, errors
from ..registry import ApiKey, Context, kafka_api
from .alter_configs import apply

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@kafka_api(ApiKey.INCREMENTAL_ALTER_CONFIGS)
def incremental_alter_configs(ctx: Context, request):
    out = []
    for r in request.resources:
        changes: dict = {}
        code, message = 0, None
        for c in r.configs:
            if c.config_operation == SET:
                changes[c.name] = c.value
            elif c.config_operation == DELETE:
                changes[c.name] = None
            elif c.config_operation in (APPEND, SUBTRACT):
                topic = ctx.frontend.names.resolve(r.resource_name) if r.resource_type == 2 else None
                if topic is None:
                    continue  # apply() answers the unknown topic or resource type
                try:
                    changes[c.name] = configs.apply_list_op(
                        ctx.broker, topic, c.name, c.config_operation == APPEND, c.value
                    )
                except configs.ConfigError as e:
                    code, message = errors.INVALID_CONFIG, str(e)
            else:
                code, message = errors.INVALID_CONFIG, f"operation {c.config_operation} on {c.name!r} is not supported"
        if code == 0:
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
