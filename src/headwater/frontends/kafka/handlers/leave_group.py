"""LeaveGroup (key 13), versions 0-5: members leave a group; the others rebalance.

v0-2 carry one member_id and answer with its error; v1 adds throttle_time;
v3 batches members (member_id, group_instance_id) with one answer each,
and a static member may leave by instance id alone (empty member id, as
the admin client's remove_members does); v4 flexible; v5 a reason per
member (ignored).

Leaving an unknown group answers every member UNKNOWN_MEMBER_ID.
"""

from __future__ import annotations

from .. import errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api


@kafka_api(ApiKey.LEAVE_GROUP)
def leave_group(ctx: Context, request):
    if not authz.group(ctx, Operation.READ, request.group_id):
        return ctx.response(throttle_time=0, error_code=authz.GROUP_AUTHORIZATION_FAILED, generation_id=-1)
    if ctx.version < 3:
        members = [(request.member_id, None)]
    else:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    result = ctx.frontend.groups.leave(request.group_id, members)
    code = errors.group_code(result.outcome)
    if ctx.version < 3:
        if code == errors.NONE and result.members:
            code = errors.group_code(result.members[0].outcome)
        return ctx.response(throttle_time=0, error_code=code)
    answers = tuple(
        ctx.build("MemberResponse", member_id=m.member_id, group_instance_id=m.group_instance_id,
                  error_code=errors.group_code(m.outcome))
        for m in result.members
    )
    return ctx.response(throttle_time=0, error_code=code, members=answers)
