"""Consumer groups (600-606): server-assigned membership, round-robin partition assignment."""

from __future__ import annotations

from ....codec.iggy.codes import Command
from ....codec.iggy.commands import groups as w
from ..registry import Context, iggy_command
from ._common import group_details, group_info, require


@iggy_command(Command.GET_CONSUMER_GROUP)
def get_consumer_group(ctx: Context, req: w.GetConsumerGroup) -> bytes:
    t = ctx.broker.topic(req.stream_id, req.topic_id)
    require(ctx.checker.read_topic(t.stream_id, t.id), "read topic")
    g = t.find_group(req.group_id)
    return b"" if g is None else w.encode_consumer_group_details(group_details(t, g))


@iggy_command(Command.GET_CONSUMER_GROUPS)
def get_consumer_groups(ctx: Context, req: w.GetConsumerGroups) -> bytes:
    t = ctx.broker.topic(req.stream_id, req.topic_id)
    require(ctx.checker.read_topic(t.stream_id, t.id), "read topic")
    return w.encode_consumer_groups([group_info(t, g) for g in sorted(t.groups.values(), key=lambda g: g.id)])


@iggy_command(Command.CREATE_CONSUMER_GROUP)
def create_consumer_group(ctx: Context, req: w.CreateConsumerGroup) -> bytes:
    t = ctx.broker.topic(req.stream_id, req.topic_id)
    require(ctx.checker.read_topic(t.stream_id, t.id), "read topic")
    g = ctx.broker.create_group(t.stream_id, t.id, req.name)
    return w.encode_consumer_group_details(group_details(t, g))


@iggy_command(Command.DELETE_CONSUMER_GROUP)
def delete_consumer_group(ctx: Context, req: w.DeleteConsumerGroup) -> bytes:
    t = ctx.broker.topic(req.stream_id, req.topic_id)
    require(ctx.checker.read_topic(t.stream_id, t.id), "read topic")
    ctx.broker.delete_group(t.stream_id, t.id, req.group_id)
    return b""


@iggy_command(Command.JOIN_CONSUMER_GROUP)
def join_consumer_group(ctx: Context, req: w.JoinConsumerGroup) -> bytes:
    t = ctx.broker.topic(req.stream_id, req.topic_id)
    require(ctx.checker.read_topic(t.stream_id, t.id), "read topic")
    ctx.broker.join_group(ctx.client.id, t.stream_id, t.id, req.group_id)
    return b""


@iggy_command(Command.LEAVE_CONSUMER_GROUP)
def leave_consumer_group(ctx: Context, req: w.LeaveConsumerGroup) -> bytes:
    t = ctx.broker.topic(req.stream_id, req.topic_id)
    require(ctx.checker.read_topic(t.stream_id, t.id), "read topic")
    ctx.broker.leave_group(ctx.client.id, t.stream_id, t.id, req.group_id)
    return b""


@iggy_command(Command.SYNC_CONSUMER_GROUP)
def sync_consumer_group(ctx: Context, req: w.SyncConsumerGroup) -> bytes:
    t = ctx.broker.topic(req.stream_id, req.topic_id)
    require(ctx.checker.read_topic(t.stream_id, t.id), "read topic")
    g = t.group(req.group_id)
    parts = g.assignment(ctx.client.id)
    if parts is None:
        return b""  # not a member
    return w.encode_sync_consumer_group_reply(w.SyncConsumerGroupReply(g.generation, tuple(parts)))
