"""Helpers the handler families share: permission checks, options blocks, wire views of core records."""

from __future__ import annotations

from typing import Any

from ....codec import headers as tlv
from ....codec.iggy.commands import groups as wg
from ....codec.iggy.commands import streams as ws
from ....codec.iggy.commands import topics as wt
from ....core import errors
from ....core import topic_options as topt
from ....core.acls import Operation
from ....core.catalog import Stream, Topic
from ....core.groups.assigned import AssignedGroup


def require(allowed: bool, what: str) -> None:
    if not allowed:
        raise errors.Unauthorized(f"permission denied: {what}")


def may_send(ctx, t: Topic) -> bool:
    """SendMessages: Iggy's send right, with Kafka ACLs on the topic's Kafka name (WRITE) over it
    (``core.acls.Authorizer.iggy_topic_allowed``; docs/security.md)."""
    return ctx.broker.authorizer.iggy_topic_allowed(
        ctx.user, ctx.checker.send_messages(t.stream_id, t.id), Operation.WRITE, _stream_name(ctx, t), t.name
    )


def may_poll(ctx, t: Topic) -> bool:
    """PollMessages and consumer offsets: Iggy's poll right, with Kafka ACLs (READ) over it."""
    return ctx.broker.authorizer.iggy_topic_allowed(
        ctx.user, ctx.checker.poll_messages(t.stream_id, t.id), Operation.READ, _stream_name(ctx, t), t.name
    )


def _stream_name(ctx, t: Topic) -> str:
    s = ctx.broker.catalog.streams.get(t.stream_id)
    return s.name if s is not None else ""


def options_from_block(block: bytes | memoryview) -> dict[str, Any]:
    """An options block -> ``{key: python value}`` (String -> str, Bool -> bool, ints -> int)."""
    if not block:
        return {}
    try:
        decoded = tlv.decode_options_block(block)
    except Exception as e:  # a CodecError subclass: report as an option value error
        raise errors.InvalidOptionValue(f"bad options block: {e}") from e
    out: dict[str, Any] = {}
    for key, (kind, value) in decoded.items():
        try:
            out[key] = tlv.unpack_value(kind, value)
        except Exception as e:
            raise errors.InvalidOptionValue(f"option {key!r}: {e}") from e
        if isinstance(out[key], (bytes, bytearray, memoryview)):
            out[key] = bytes(out[key]).decode("utf-8", "replace")
    return out


def reject_options(block: bytes | memoryview, scope: str) -> None:
    """Streams and users have an empty option catalog: any key is refused."""
    if options_from_block(block):
        raise errors.UnsupportedOptionKey(f"the {scope} option catalog is empty")


def options_block(values: dict[str, Any]) -> bytes:
    return tlv.encode_options_block(
        {k: (topt.OPTION_KINDS[k], tlv.pack_value(topt.OPTION_KINDS[k], v)) for k, v in sorted(values.items())}
    )


def _topic_fields(t: Topic) -> dict[str, Any]:
    o = t.options
    values = o.values()
    return dict(
        id=t.id,
        created_at=t.created_at_us,
        name=t.name,
        message_expiry=values[topt.MESSAGE_EXPIRY],
        compression_algorithm=o.compression_code,
        max_topic_size=values[topt.MAX_TOPIC_SIZE],
        size_bytes=t.size_bytes,
        messages_count=t.messages_count,
        options=options_block(o.explicit_values()),
        derived_options=options_block(o.derived_values()),
    )


def topic_info(t: Topic) -> wt.TopicInfo:
    return wt.TopicInfo(partitions_count=len(t.partitions), **_topic_fields(t))


def topic_details(t: Topic) -> wt.TopicDetails:
    parts = tuple(
        wt.PartitionInfo(
            id=p.id,
            created_at=p.created_at_us,
            segments_count=p.segments_count,
            current_offset=max(p.high_watermark - 1, 0),
            size_bytes=p.size_bytes,
            messages_count=p.messages_count,
        )
        for p in sorted(t.partitions.values(), key=lambda p: p.id)
    )
    return wt.TopicDetails(partitions=parts, **_topic_fields(t))


def stream_info(s: Stream) -> ws.StreamInfo:
    return ws.StreamInfo(
        id=s.id,
        created_at=s.created_at_us,
        topics_count=len(s.topics),
        name=s.name,
        size_bytes=s.size_bytes,
        messages_count=s.messages_count,
        options=b"",
    )


def stream_details(s: Stream, visible_topics: list[Topic] | None = None) -> ws.StreamDetails:
    topics = visible_topics if visible_topics is not None else list(s.topics.values())
    return ws.StreamDetails(
        id=s.id,
        created_at=s.created_at_us,
        name=s.name,
        size_bytes=s.size_bytes,
        messages_count=s.messages_count,
        options=b"",
        topics=tuple(topic_info(t) for t in sorted(topics, key=lambda t: t.id)),
    )


def group_details(t: Topic, g: AssignedGroup) -> wg.ConsumerGroupDetails:
    return wg.ConsumerGroupDetails(
        id=g.id,
        partitions_count=len(t.partitions),
        name=g.name,
        members=tuple(wg.ConsumerGroupMember(m, tuple(p)) for m, p in g.members.items()),
    )


def group_info(t: Topic, g: AssignedGroup) -> wg.ConsumerGroupInfo:
    return wg.ConsumerGroupInfo(id=g.id, partitions_count=len(t.partitions), members_count=len(g.members), name=g.name)
