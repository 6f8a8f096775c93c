"""SyncGroup (key 14), versions 0-5: the leader hands in the assignment; every member gets its slice.

v1 adds throttle_time; v3 group_instance_id; v4 flexible; v5 protocol_type
and protocol_name in the request (checked against the group's:
INCONSISTENT_GROUP_PROTOCOL) and in the response.

A follower's sync that arrives before the leader's is parked until the
leader's sync (or the group's rebalance timeout, or a new rebalance:
REBALANCE_IN_PROGRESS). Assignments are opaque bytes; a member the leader
left out gets an empty assignment.
"""

from __future__ import annotations

from .. import errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api


@kafka_api(ApiKey.SYNC_GROUP)
async def sync_group(ctx: Context, request):
    if not authz.group(ctx, Operation.READ, request.group_id):
        return ctx.response(throttle_time=0, error_code=authz.GROUP_AUTHORIZATION_FAILED, generation_id=-1)
    result = await ctx.frontend.groups.sync(
        ctx,
        request.group_id,
        member_id=request.member_id,
        generation_id=request.generation_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments=[(a.member_id, a.assignment) for a in request.assignments],
    )
    if result is None:
        return None  # the peer left while the sync was parked
    return ctx.response(
        throttle_time=0,
        error_code=errors.group_code(result.outcome),
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )
