"""Topics (300-305), partitions (402-403) and segments (503)."""

from __future__ import annotations

from ....codec.iggy.codes import Command
from ....codec.iggy.commands import partitions as wp
from ....codec.iggy.commands import segments as wseg
from ....codec.iggy.commands import topics as w
from ....core import errors
from ..registry import Context, iggy_command
from ._common import options_from_block, require, topic_details, topic_info


@iggy_command(Command.GET_TOPIC)
def get_topic(ctx: Context, req: w.GetTopic) -> bytes:
    s = ctx.broker.stream(req.stream_id)
    t = s.topics.get(req.topic_id) if isinstance(req.topic_id, int) else next(
        (t for t in s.topics.values() if t.name == req.topic_id), None
    )
    if t is None:
        require(ctx.checker.read_topic(s.id), "read topic")
        return b""
    require(ctx.checker.read_topic(s.id, t.id), "read topic")
    return w.encode_topic_details(topic_details(t))


@iggy_command(Command.GET_TOPICS)
def get_topics(ctx: Context, req: w.GetTopics) -> bytes:
    s = ctx.broker.stream(req.stream_id)
    require(ctx.checker.read_topic(s.id), "read topics")
    return w.encode_topics([topic_info(t) for t in sorted(s.topics.values(), key=lambda t: t.id)])


@iggy_command(Command.CREATE_TOPIC)
def create_topic(ctx: Context, req: w.CreateTopic) -> bytes:
    s = ctx.broker.stream(req.stream_id)
    require(ctx.checker.manage_topic(s.id), "manage topics")
    t = ctx.broker.create_topic(s.id, req.name, req.partitions_count, options_from_block(req.options))
    return w.encode_topic_details(topic_details(t))


@iggy_command(Command.UPDATE_TOPIC)
def update_topic(ctx: Context, req: w.UpdateTopic) -> bytes:
    t = ctx.broker.topic(req.stream_id, req.topic_id)
    require(ctx.checker.manage_topic(t.stream_id, t.id), "manage topic")
    ctx.broker.update_topic(t.stream_id, t.id, req.name, options_from_block(req.options))
    return b""


@iggy_command(Command.DELETE_TOPIC)
def delete_topic(ctx: Context, req: w.DeleteTopic) -> bytes:
    t = ctx.broker.topic(req.stream_id, req.topic_id)
    require(ctx.checker.manage_topic(t.stream_id, t.id), "manage topic")
    ctx.broker.delete_topic(t.stream_id, t.id)
    return b""


@iggy_command(Command.PURGE_TOPIC)
def purge_topic(ctx: Context, req: w.PurgeTopic) -> bytes:
    t = ctx.broker.topic(req.stream_id, req.topic_id)
    require(ctx.checker.manage_topic(t.stream_id, t.id), "manage topic")
    ctx.broker.purge_topic(t.stream_id, t.id)
    return b""


@iggy_command(Command.CREATE_PARTITIONS)
def create_partitions(ctx: Context, req: wp.CreatePartitions) -> bytes:
    t = ctx.broker.topic(req.stream_id, req.topic_id)
    require(ctx.checker.manage_topic(t.stream_id, t.id), "manage topic")
    ctx.broker.create_partitions(t.stream_id, t.id, req.partitions_count)
    return b""


@iggy_command(Command.DELETE_PARTITIONS)
def delete_partitions(ctx: Context, req: wp.DeletePartitions) -> bytes:
    t = ctx.broker.topic(req.stream_id, req.topic_id)
    require(ctx.checker.manage_topic(t.stream_id, t.id), "manage topic")
    ctx.broker.delete_partitions(t.stream_id, t.id, req.partitions_count)
    return b""


@iggy_command(Command.DELETE_SEGMENTS)
def delete_segments(ctx: Context, req: wseg.DeleteSegments) -> bytes:
    t = ctx.broker.topic(req.stream_id, req.topic_id)
    require(ctx.checker.manage_topic(t.stream_id, t.id), "manage topic")
    if req.segments_count < 1:
        raise errors.InvalidSegmentsCount("segments_count must be at least 1")
    ctx.broker.delete_segments(t.stream_id, t.id, req.partition_id, req.segments_count)
    return b""
