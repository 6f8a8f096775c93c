"""DeleteGroups (key 42), versions 0-2: delete Empty groups and their committed offsets.

v2 is flexible. Per group: NON_EMPTY_GROUP while it has members;
GROUP_ID_NOT_FOUND when neither the coordinator nor the offset store knows
it; otherwise the group is forgotten and every committed offset under its
name is deleted, on every topic. Those are also the offsets of an Iggy
consumer group of the same name (which itself, a per-topic catalog entry,
stays).
"""

from __future__ import annotations

from ....core.groups.classic import Outcome
from ....core.offsets import GROUP
from .. import errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api


def _delete(ctx: Context, group_id: str) -> int:
    if not authz.group(ctx, Operation.DELETE, group_id):
        return authz.GROUP_AUTHORIZATION_FAILED
    outcome = ctx.frontend.groups.delete(group_id)
    if outcome not in (Outcome.OK, Outcome.GROUP_NOT_FOUND):
        return errors.group_code(outcome)  # NON_EMPTY_GROUP
    removed = ctx.broker.delete_committed_of(GROUP, group_id)
    if outcome is Outcome.GROUP_NOT_FOUND and not removed:
        return errors.GROUP_ID_NOT_FOUND
    return errors.NONE


@kafka_api(ApiKey.DELETE_GROUPS)
def delete_groups(ctx: Context, request):
    results = tuple(ctx.build("DeletableGroupResult", group_id=gid, error_code=_delete(ctx, gid))
                    for gid in request.groups_names)
    return ctx.response(throttle_time=0, results=results)
