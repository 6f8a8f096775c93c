"""JoinGroup (key 11), versions 0-9: join a classic group; the leader gets every member's metadata.

v0 has no rebalance_timeout (the session timeout serves as both); v1 adds
rebalance_timeout; v2 throttle_time; v4 the MEMBER_ID_REQUIRED handshake (a
join with an empty member id is answered with a fresh member id and error 79,
and the client joins again with it); v5 group_instance_id (static
membership, KIP-345) and per-member instance ids; v6 flexible; v7
protocol_type in the response (nullable protocol_name); v8 reason (ignored);
v9 skip_assignment (a restarted static leader of a stable group is told not
to assign, KIP-814).

The group logic is ``core.groups.classic``; a join that must wait for the
rest of the group is parked (``groups.py``) and answered when the join
phase completes, at the latest after the group's rebalance timeout.
"""

from __future__ import annotations

from .. import errors
from ....codec.kafka.messages import ms
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api


def client_host(ctx: Context) -> str:
    """The peer's host as Kafka shows it in DescribeGroups (``/127.0.0.1``)."""
    host = ctx.peer.rsplit(":", 1)[0] if ":" in ctx.peer else ctx.peer
    return "/" + host.strip("[]")


@kafka_api(ApiKey.JOIN_GROUP)
async def join_group(ctx: Context, request):
    v = ctx.version
    if not authz.group(ctx, Operation.READ, request.group_id):
        return ctx.response(throttle_time=0, error_code=authz.GROUP_AUTHORIZATION_FAILED, generation_id=-1)
    result = await ctx.frontend.groups.join(
        ctx,
        request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.client_id or "",
        client_host=client_host(ctx),
        session_timeout_ms=ms(request.session_timeout),
        rebalance_timeout_ms=ms(request.rebalance_timeout) if v >= 1 else -1,
        protocol_type=request.protocol_type,
        protocols=[(p.name, p.metadata) for p in request.protocols],
        require_known_member_id=v >= 4,
        supports_skip_assignment=v >= 9,
    )
    if result is None:
        return None  # the peer left while the join was parked
    members = tuple(
        ctx.build("JoinGroupResponseMember", member_id=m.member_id, group_instance_id=m.group_instance_id,
                  metadata=m.metadata)
        for m in result.members
    )
    protocol_name = result.protocol_name
    if protocol_name is None and v < 7:
        protocol_name = ""
    return ctx.response(
        throttle_time=0,
        error_code=errors.group_code(result.outcome),
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=protocol_name,
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=members,
    )
