"""Streams: get, list, create, update, delete, purge (codes 200-205)."""

from __future__ import annotations

from ....codec.iggy.codes import Command
from ....codec.iggy.commands import streams as w
from ..registry import Context, iggy_command
from ._common import reject_options, require, stream_details, stream_info


@iggy_command(Command.GET_STREAM)
def get_stream(ctx: Context, req: w.GetStream) -> bytes:
    s = ctx.broker.catalog.streams.get(req.stream_id) if isinstance(req.stream_id, int) else next(
        (s for s in ctx.broker.catalog.streams.values() if s.name == req.stream_id), None
    )
    if s is None:
        require(ctx.checker.read_stream(None), "read stream")
        return b""
    require(ctx.checker.read_stream(s.id), "read stream")
    return w.encode_stream_details(stream_details(s))


@iggy_command(Command.GET_STREAMS)
def get_streams(ctx: Context, req: w.GetStreams) -> bytes:
    # security.mdx: listing streams takes the global read_streams (or manage_streams)
    require(ctx.checker.read_stream(None), "read streams")
    streams = list(ctx.broker.catalog.streams.values())
    return w.encode_streams([stream_info(s) for s in sorted(streams, key=lambda s: s.id)])


@iggy_command(Command.CREATE_STREAM)
def create_stream(ctx: Context, req: w.CreateStream) -> bytes:
    require(ctx.checker.manage_stream(None), "manage streams")
    reject_options(req.options, "stream")
    s = ctx.broker.create_stream(req.name)
    return w.encode_stream_details(stream_details(s))


@iggy_command(Command.UPDATE_STREAM)
def update_stream(ctx: Context, req: w.UpdateStream) -> bytes:
    s = ctx.broker.stream(req.stream_id)
    require(ctx.checker.manage_stream(s.id), "manage stream")
    reject_options(req.options, "stream")
    ctx.broker.update_stream(s.id, req.name)
    return b""


@iggy_command(Command.DELETE_STREAM)
def delete_stream(ctx: Context, req: w.DeleteStream) -> bytes:
    s = ctx.broker.stream(req.stream_id)
    require(ctx.checker.manage_stream(s.id), "manage stream")
    ctx.broker.delete_stream(s.id)
    return b""


@iggy_command(Command.PURGE_STREAM)
def purge_stream(ctx: Context, req: w.PurgeStream) -> bytes:
    s = ctx.broker.stream(req.stream_id)
    require(ctx.checker.manage_stream(s.id), "manage stream")
    ctx.broker.purge_stream(s.id)
    return b""
