"""Users (31-37), logout (39) and personal access tokens (41-43).

Login-register (40, 45) is part of the session state machine in ``server.py``.
Self-service (``security.mdx``): a user may always read their own account,
change their own password and manage their own tokens.
"""

from __future__ import annotations

import asyncio

from ....codec.iggy import primitives as wp
from ....codec.iggy.codes import Command
from ....codec.iggy.commands import tokens as wt
from ....codec.iggy.commands import users as w
from ....core import errors
from ....core import permissions as cp
from ....core.users import User, check_password, hash_password, validate_password
from ..registry import Context, iggy_command
from ._common import reject_options, require


def to_core_permissions(p: wp.Permissions | None) -> cp.Permissions | None:
    if p is None:
        return None
    g = p.global_
    return cp.Permissions(
        cp.GlobalPermissions(
            g.manage_servers, g.read_servers, g.manage_users, g.read_users, g.manage_streams,
            g.read_streams, g.manage_topics, g.read_topics, g.poll_messages, g.send_messages,
        ),
        {
            s.stream_id: cp.StreamPermissions(
                s.manage_stream, s.read_stream, s.manage_topics, s.read_topics, s.poll_messages, s.send_messages,
                {
                    t.topic_id: cp.TopicPermissions(t.manage_topic, t.read_topic, t.poll_messages, t.send_messages)
                    for t in s.topics
                },
            )
            for s in p.streams
        },
    )


def to_wire_permissions(p: cp.Permissions | None) -> wp.Permissions | None:
    if p is None:
        return None
    g = p.global_
    return wp.Permissions(
        wp.GlobalPermissions(
            g.manage_servers, g.read_servers, g.manage_users, g.read_users, g.manage_streams,
            g.read_streams, g.manage_topics, g.read_topics, g.poll_messages, g.send_messages,
        ),
        tuple(
            wp.StreamPermissions(
                sid, s.manage_stream, s.read_stream, s.manage_topics, s.read_topics, s.poll_messages, s.send_messages,
                tuple(wp.TopicPermissions(tid, t.manage_topic, t.read_topic, t.poll_messages, t.send_messages)
                      for tid, t in sorted(s.topics.items())),
            )
            for sid, s in sorted(p.streams.items())
        ),
    )


def user_details(u: User) -> w.UserDetails:
    perms = cp.Permissions(cp.ALL_GLOBAL) if u.is_root else u.permissions
    return w.UserDetails(u.id, u.created_at_us, u.status, u.username, b"", to_wire_permissions(perms))


def _is_self(ctx: Context, u: User) -> bool:
    return ctx.user is not None and ctx.user.id == u.id


@iggy_command(Command.GET_USER)
def get_user(ctx: Context, req: w.GetUser) -> bytes:
    u = ctx.broker.users.find(req.user_id)
    if u is None:
        require(ctx.checker.read_users(), "read users")
        return b""
    require(_is_self(ctx, u) or ctx.checker.read_users(), "read users")
    return w.encode_user_details(user_details(u))


@iggy_command(Command.GET_USERS)
def get_users(ctx: Context, req: w.GetUsers) -> bytes:
    require(ctx.checker.read_users(), "read users")
    users = sorted(ctx.broker.users.users.values(), key=lambda u: u.id)
    return w.encode_users([w.UserInfo(u.id, u.created_at_us, u.status, u.username, b"") for u in users])


@iggy_command(Command.CREATE_USER)
async def create_user(ctx: Context, req: w.CreateUser) -> bytes:
    require(ctx.checker.manage_users(), "manage users")
    reject_options(req.options, "user")
    loop = asyncio.get_running_loop()
    # Argon2id hashing takes tens of milliseconds: keep it off the event loop.
    validate_password(req.password)
    password_hash = await loop.run_in_executor(None, hash_password, req.password)
    u = ctx.broker.create_user(
        req.username, req.password, req.status, to_core_permissions(req.permissions), password_hash
    )
    return w.encode_user_details(user_details(u))


@iggy_command(Command.UPDATE_USER)
def update_user(ctx: Context, req: w.UpdateUser) -> bytes:
    require(ctx.checker.manage_users(), "manage users")
    reject_options(req.options, "user")
    ctx.broker.users.update(req.user_id, req.username, req.status)
    return b""


@iggy_command(Command.DELETE_USER)
def delete_user(ctx: Context, req: w.DeleteUser) -> bytes:
    require(ctx.checker.manage_users(), "manage users")
    ctx.broker.users.delete(req.user_id)
    return b""


@iggy_command(Command.UPDATE_PERMISSIONS)
def update_permissions(ctx: Context, req: w.UpdatePermissions) -> bytes:
    require(ctx.checker.manage_users(), "manage users")
    ctx.broker.users.update_permissions(req.user_id, to_core_permissions(req.permissions))
    ctx.refresh_user()
    return b""


@iggy_command(Command.CHANGE_PASSWORD)
async def change_password(ctx: Context, req: w.ChangePassword) -> bytes:
    u = ctx.broker.users.get(req.user_id)
    require(_is_self(ctx, u) or ctx.checker.manage_users(), "manage users")
    validate_password(req.new_password)
    # Argon2id verification and hashing take tens of milliseconds each: run them in a worker
    # thread, then change the user here, on the event loop (the stores are not thread-safe).
    loop = asyncio.get_running_loop()
    if not await loop.run_in_executor(None, check_password, u.password_hash, req.current_password):
        raise errors.InvalidCredentials("current password is wrong")
    password_hash = await loop.run_in_executor(None, hash_password, req.new_password)
    ctx.broker.users.set_password_hash(u.id, password_hash)
    return b""


@iggy_command(Command.LOGOUT_USER)
def logout_user(ctx: Context, req: w.LogoutUser) -> bytes:
    """Logout ends the session: the connection leaves its consumer groups (they rebalance)."""
    for stream_id, topic_id, group_id in sorted(ctx.client.groups):
        ctx.broker.leave_group(ctx.client.id, stream_id, topic_id, group_id)
    ctx.logout()
    return b""


@iggy_command(Command.GET_PERSONAL_ACCESS_TOKENS)
def get_personal_access_tokens(ctx: Context, req: wt.GetPersonalAccessTokens) -> bytes:
    assert ctx.user is not None
    return wt.encode_personal_access_tokens(
        [wt.PersonalAccessTokenInfo(t.name, t.expiry_at_us or 0) for t in ctx.broker.users.user_tokens(ctx.user.id)]
    )


@iggy_command(Command.CREATE_PERSONAL_ACCESS_TOKEN)
def create_personal_access_token(ctx: Context, req: wt.CreatePersonalAccessToken) -> bytes:
    assert ctx.user is not None
    token = ctx.broker.users.create_token(ctx.user.id, req.name, req.expiry, ctx.broker.clock())
    return wt.encode_raw_personal_access_token(wt.RawPersonalAccessToken(token))


@iggy_command(Command.DELETE_PERSONAL_ACCESS_TOKEN)
def delete_personal_access_token(ctx: Context, req: wt.DeletePersonalAccessToken) -> bytes:
    assert ctx.user is not None
    ctx.broker.users.delete_token(ctx.user.id, req.name)
    return b""
