"""ListGroups (key 16), versions 0-5: every group this node coordinates.

v1 adds throttle_time; v3 flexible; v4 states_filter and group_state; v5
types_filter and group_type (always "classic": KIP-848 groups are not
served). Filters match case-insensitively, as Kafka's do.

A group is listed while the coordinator knows it (members, or an Empty group
made by a simple commit) and also when it only has committed offsets,
e.g. after a restart (the coordinator's state is not persisted) or when
only an Iggy consumer group of that name stored offsets: such a group is
Empty with protocol type "".
"""

from __future__ import annotations

from ....core.groups.classic import State
from ....core.offsets import GROUP
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api

GROUP_TYPE = "classic"


def listing(ctx: Context) -> dict[str, tuple[str, str]]:
    """group id -> (protocol type, state name), coordinator groups and offset-only groups, by name."""
    out = {g.group_id: (g.protocol_type, g.state.value) for g in ctx.frontend.groups.coordinator.list_groups()}
    for name in ctx.broker.committed_names(GROUP):
        out.setdefault(name, ("", State.EMPTY.value))
    return dict(sorted(out.items()))


@kafka_api(ApiKey.LIST_GROUPS)
def list_groups(ctx: Context, request):
    states = {s.lower() for s in getattr(request, "states_filter", ()) or ()}
    types = {t.lower() for t in getattr(request, "types_filter", ()) or ()}
    if types and GROUP_TYPE not in types:
        return ctx.response(throttle_time=0, error_code=0, groups=())
    everything = authz.cluster(ctx, Operation.DESCRIBE)  # else only the groups the caller may DESCRIBE, as Kafka
    groups = tuple(
        ctx.build("ListedGroup", group_id=gid, protocol_type=ptype, group_state=state, group_type=GROUP_TYPE)
        for gid, (ptype, state) in listing(ctx).items()
        if (not states or state.lower() in states) and (everything or authz.group(ctx, Operation.DESCRIBE, gid))
    )
    return ctx.response(throttle_time=0, error_code=0, groups=groups)
