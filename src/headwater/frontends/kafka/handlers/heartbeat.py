"""Heartbeat (key 12), versions 0-4: keep a member's session alive; learn of a rebalance.

v1 adds throttle_time; v3 group_instance_id; v4 flexible.

Answers: NONE; REBALANCE_IN_PROGRESS (rejoin; the heartbeat still counts);
UNKNOWN_MEMBER_ID (evicted, or the group is unknown, e.g. after a server
restart: join again); ILLEGAL_GENERATION; FENCED_INSTANCE_ID; INVALID_GROUP_ID
for an empty group id.
"""

from __future__ import annotations

from .. import errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api


@kafka_api(ApiKey.HEARTBEAT)
def heartbeat(ctx: Context, request):
    if not authz.group(ctx, Operation.READ, request.group_id):
        return ctx.response(throttle_time=0, error_code=authz.GROUP_AUTHORIZATION_FAILED, generation_id=-1)
    outcome = ctx.frontend.groups.heartbeat(
        request.group_id,
        member_id=request.member_id,
        generation_id=request.generation_id,
        group_instance_id=getattr(request, "group_instance_id", None),
    )
    return ctx.response(throttle_time=0, error_code=errors.group_code(outcome))
