"""IncrementalAlterConfigs (key 44), versions 0-1: SET or DELETE single topic configs.

v1 is flexible. Operations: 0 SET, 1 DELETE (back to the default); APPEND
(2) and SUBTRACT (3) apply to list configs only, and the only list config,
cleanup.policy, is fixed: INVALID_CONFIG. See ``configs.py``.
"""

from __future__ import annotations

from .. import errors
from ..registry import ApiKey, Context, kafka_api
from .alter_configs import apply

SET, DELETE = 0, 1


@kafka_api(ApiKey.INCREMENTAL_ALTER_CONFIGS, versions=(0, 1))
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
