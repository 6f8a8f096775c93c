"""DescribeGroups (key 15), versions 0-6: state, protocol, leader-chosen assignment of each group.

v1 adds throttle_time; v3 include_authorized_operations (the caller's
bit set when asked for, else INT32_MIN; a group it may not DESCRIBE is
answered GROUP_AUTHORIZATION_FAILED); v4 group_instance_id per
member; v5 flexible; v6 an unknown group is GROUP_ID_NOT_FOUND (before:
state "Dead", no error) with an error_message.

Members' metadata (for the chosen protocol) and assignments are shown only
while the group is Stable, as Kafka does. A group known only by its
committed offsets (see list_groups) is Empty with protocol type "".
"""

from __future__ import annotations

from ....core.groups.classic import State
from ....core.offsets import GROUP
from .. import errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api

NOT_COMPUTED = -(2**31)


def _member(ctx: Context, m):
    return ctx.build("DescribedGroupMember", member_id=m.member_id, group_instance_id=m.group_instance_id,
                     client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                     member_assignment=m.assignment)


@kafka_api(ApiKey.DESCRIBE_GROUPS)
def describe_groups(ctx: Context, request):
    coordinator = ctx.frontend.groups.coordinator
    with_offsets = None
    out = []
    asked = bool(getattr(request, "include_authorized_operations", False))
    for gid in request.groups:
        if not authz.group(ctx, Operation.DESCRIBE, gid):
            out.append(ctx.build("DescribedGroup", error_code=authz.GROUP_AUTHORIZATION_FAILED, group_id=gid,
                                 group_state="", protocol_type="", protocol_data="", members=(),
                                 authorized_operations=NOT_COMPUTED))
            continue
        operations = authz.group_operations(ctx, gid) if asked else NOT_COMPUTED
        d = coordinator.describe(gid)
        if d is not None:
            out.append(ctx.build("DescribedGroup", error_code=0, group_id=gid, group_state=d.state.value,
                                 protocol_type=d.protocol_type, protocol_data=d.protocol_name,
                                 members=tuple(_member(ctx, m) for m in d.members),
                                 authorized_operations=operations))
            continue
        if with_offsets is None:
            with_offsets = ctx.broker.committed_names(GROUP)
        if gid in with_offsets:
            state, code, message = State.EMPTY.value, errors.NONE, None
        elif ctx.version >= 6:
            state, code, message = State.DEAD.value, errors.GROUP_ID_NOT_FOUND, f"group {gid!r} not found"
        else:
            state, code, message = State.DEAD.value, errors.NONE, None
        out.append(ctx.build("DescribedGroup", error_code=code, error_message=message, group_id=gid,
                             group_state=state, protocol_type="", protocol_data="", members=(),
                             authorized_operations=operations))
    return ctx.response(throttle_time=0, groups=tuple(out))
