"""``headwater stream|topic|partition|segment|consumer-group|consumer-offset ...``: the catalog.

Verbs follow Iggy's CLI (``core/cli`` in apache/iggy): list, get, create, update,
delete, purge; ``consumer-offset get|set|delete``. Streams, topics and groups are
given by id or name, partitions by id.
"""

from __future__ import annotations

import click

from ..codec.headers import Kind, encode_options_block
from ..codec.iggy.codes import ConsumerKind
from ..codec.iggy.commands import groups as wg
from ..codec.iggy.commands import offsets as wo
from ..codec.iggy.commands import partitions as wp
from ..codec.iggy.commands import segments as wseg
from ..codec.iggy.commands import streams as ws
from ..codec.iggy.commands import topics as wt
from ..codec.iggy.primitives import Consumer
from . import render
from .common import COUNT, ID, NAME, U32, U64, EXIT_SERVER_ERROR, client_command, fail, found

_STREAM_COLUMNS = [
    ("id", lambda s: s.id),
    ("name", lambda s: s.name),
    ("created", lambda s: render.time_us(s.created_at)),
    ("size", lambda s: render.size(s.size_bytes)),
    ("messages", lambda s: s.messages_count),
    ("topics", lambda s: getattr(s, "topics_count", None) if not hasattr(s, "topics") else len(s.topics)),
]
_TOPIC_COLUMNS = [
    ("id", lambda t: t.id),
    ("name", lambda t: t.name),
    ("created", lambda t: render.time_us(t.created_at)),
    ("partitions", lambda t: getattr(t, "partitions_count", None) if not hasattr(t, "partitions")
     else len(t.partitions)),
    ("size", lambda t: render.size(t.size_bytes)),
    ("messages", lambda t: t.messages_count),
    ("message expiry", lambda t: render.duration_us(t.message_expiry)),
    ("compression", lambda t: {1: "none", 2: "gzip"}.get(t.compression_algorithm, t.compression_algorithm)),
]
_PARTITION_COLUMNS = [
    ("id", lambda p: p.id),
    ("created", lambda p: render.time_us(p.created_at)),
    ("segments", lambda p: p.segments_count),
    ("current offset", lambda p: p.current_offset),
    ("size", lambda p: render.size(p.size_bytes)),
    ("messages", lambda p: p.messages_count),
]


def option_value(text: str) -> tuple[int, bytes]:
    """An option's TLV value from text: ``true``/``false`` Bool, digits Uint64, else String."""
    if text.lower() in ("true", "false"):
        return Kind.BOOL, b"\x01" if text.lower() == "true" else b"\x00"
    if text.isdigit() and int(text) < 1 << 64:
        return Kind.UINT64, int(text).to_bytes(8, "little")
    return Kind.STRING, text.encode("utf-8")


def options_block(pairs: tuple[str, ...], **named: str | None) -> bytes:
    """``KEY=VALUE`` pairs plus named options (None = not given) as an options block."""
    options: dict[str, tuple[int, bytes]] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--option")
        options[key] = option_value(value)
    for key, value in named.items():
        if value is not None:
            options[key] = option_value(value)
    return encode_options_block(options) if options else b""


def _details(out: str, value, what: str, columns, children: str, child_columns) -> None:
    """A get command's reply: JSON, or its row then a table of its ``children``; exit 1 when
    the server answered "none" (an empty reply: Iggy's not-found for a get)."""
    found(value, what)
    if out == "json":
        render.emit(out, value)
    else:
        render.emit(out, [value], columns)
        render.emit(out, getattr(value, children), child_columns, title=children)


_option_flag = click.option("--option", "options", multiple=True, metavar="KEY=VALUE",
                            help="A topic or stream option (repeatable), e.g. segment_size=16MiB.")
_update_option_flag = click.option(
    "--option", "options", multiple=True, metavar="KEY=VALUE",
    help="A topic option to change (repeatable), e.g. enforce_fsync=true; segment_size and "
         "preallocate_segments are create-only (server error 4041).")


# ---------------------------------------------------------------- streams


@click.group()
def stream() -> None:
    """Streams: list, get, create, update, delete, purge."""


@client_command(stream, "list")
def stream_list(client, out):
    """List streams."""
    streams = client.call(ws.GetStreams())
    render.emit(out, streams, _STREAM_COLUMNS)


@client_command(stream, "get")
@click.argument("stream_id", type=ID)
def stream_get(client, out, stream_id):
    """Show one stream and its topics."""
    _details(out, client.call(ws.GetStream(stream_id)), f"stream {stream_id!r}", _STREAM_COLUMNS,
             "topics", _TOPIC_COLUMNS)


@client_command(stream, "create")
@click.argument("name", type=NAME)
@_option_flag
def stream_create(client, out, name, options):
    """Create a stream called NAME."""
    s = client.call(ws.CreateStream(name, options_block(options)))
    render.emit(out, s) if out == "json" else render.done(out, f"stream {s.name!r} created with id {s.id}")


@client_command(stream, "update")
@click.argument("stream_id", type=ID)
@click.argument("name", type=NAME)
@_option_flag
def stream_update(client, out, stream_id, name, options):
    """Rename stream STREAM_ID to NAME."""
    client.call(ws.UpdateStream(stream_id, name, options_block(options)))
    render.done(out, f"stream {stream_id!r} updated", stream_id=stream_id, name=name)


@client_command(stream, "delete")
@click.argument("stream_id", type=ID)
def stream_delete(client, out, stream_id):
    """Delete a stream with all its topics and messages."""
    client.call(ws.DeleteStream(stream_id))
    render.done(out, f"stream {stream_id!r} deleted", stream_id=stream_id)


@client_command(stream, "purge")
@click.argument("stream_id", type=ID)
def stream_purge(client, out, stream_id):
    """Delete every message of a stream (its topics stay)."""
    client.call(ws.PurgeStream(stream_id))
    render.done(out, f"stream {stream_id!r} purged", stream_id=stream_id)


# ---------------------------------------------------------------- topics


@click.group()
def topic() -> None:
    """Topics: list, get, create, update, delete, purge."""


@client_command(topic, "list")
@click.argument("stream_id", type=ID)
def topic_list(client, out, stream_id):
    """List the topics of a stream."""
    render.emit(out, client.call(wt.GetTopics(stream_id)), _TOPIC_COLUMNS)


@client_command(topic, "get")
@click.argument("stream_id", type=ID)
@click.argument("topic_id", type=ID)
def topic_get(client, out, stream_id, topic_id):
    """Show one topic and its partitions."""
    _details(out, client.call(wt.GetTopic(stream_id, topic_id)), f"topic {topic_id!r}", _TOPIC_COLUMNS,
             "partitions", _PARTITION_COLUMNS)


_topic_settings = [
    click.option("--compression", help="none or gzip."),
    click.option("--message-expiry", help='Microseconds, "7 days", "1h 30m" or "never".'),
    click.option("--max-topic-size", help='Bytes, "1 GiB" or "unlimited".'),
]


def _with_topic_settings(f):
    for option in reversed(_topic_settings):
        f = option(f)
    return f


@client_command(topic, "create")
@click.argument("stream_id", type=ID)
@click.argument("name", type=NAME)
@click.option("--partitions", "-p", "partitions_count", type=U32, default=1, show_default=True)
@_with_topic_settings
@_option_flag
def topic_create(client, out, stream_id, name, partitions_count, compression, message_expiry, max_topic_size,
                 options):
    """Create topic NAME in a stream."""
    block = options_block(options, compression_algorithm=compression, message_expiry=message_expiry,
                          max_topic_size=max_topic_size)
    t = client.call(wt.CreateTopic(stream_id, partitions_count, name, block))
    render.emit(out, t) if out == "json" else render.done(
        out, f"topic {t.name!r} created with id {t.id} and {len(t.partitions)} partition(s)")


@client_command(topic, "update")
@click.argument("stream_id", type=ID)
@click.argument("topic_id", type=ID)
@click.argument("name", type=NAME)
@_with_topic_settings
@_update_option_flag
def topic_update(client, out, stream_id, topic_id, name, compression, message_expiry, max_topic_size, options):
    """Rename a topic (NAME: its new name, or the same one) and change its options: compression, expiry, maximum size, durability (--option)."""
    block = options_block(options, compression_algorithm=compression, message_expiry=message_expiry,
                          max_topic_size=max_topic_size)
    client.call(wt.UpdateTopic(stream_id, topic_id, name, block))
    render.done(out, f"topic {topic_id!r} updated", stream_id=stream_id, topic_id=topic_id, name=name)


@client_command(topic, "delete")
@click.argument("stream_id", type=ID)
@click.argument("topic_id", type=ID)
def topic_delete(client, out, stream_id, topic_id):
    """Delete a topic with its messages."""
    client.call(wt.DeleteTopic(stream_id, topic_id))
    render.done(out, f"topic {topic_id!r} deleted", stream_id=stream_id, topic_id=topic_id)


@client_command(topic, "purge")
@click.argument("stream_id", type=ID)
@click.argument("topic_id", type=ID)
def topic_purge(client, out, stream_id, topic_id):
    """Delete every message of a topic."""
    client.call(wt.PurgeTopic(stream_id, topic_id))
    render.done(out, f"topic {topic_id!r} purged", stream_id=stream_id, topic_id=topic_id)


# ---------------------------------------------------------------- partitions, segments


@click.group()
def partition() -> None:
    """Partitions: create (add), delete (remove the last ones)."""


def _partitions_command(name: str, request_type: type, done: str, doc: str) -> None:
    @client_command(partition, name, help=doc)
    @click.argument("stream_id", type=ID)
    @click.argument("topic_id", type=ID)
    @click.argument("partitions_count", type=COUNT)
    def command(client, out, stream_id, topic_id, partitions_count):
        client.call(request_type(stream_id, topic_id, partitions_count))
        render.done(out, f"{partitions_count} partition(s) {done}", stream_id=stream_id, topic_id=topic_id,
                    partitions_count=partitions_count)


_partitions_command("create", wp.CreatePartitions, "added", "Add PARTITIONS_COUNT partitions to a topic.")
_partitions_command("delete", wp.DeletePartitions, "deleted", "Delete the last PARTITIONS_COUNT partitions of a topic.")


@click.group()
def segment() -> None:
    """Segments: delete the oldest sealed ones."""


@client_command(segment, "delete")
@click.argument("stream_id", type=ID)
@click.argument("topic_id", type=ID)
@click.argument("partition_id", type=U32)
@click.argument("segments_count", type=COUNT)
def segment_delete(client, out, stream_id, topic_id, partition_id, segments_count):
    """Delete the oldest SEGMENTS_COUNT segments of a partition."""
    client.call(wseg.DeleteSegments(stream_id, topic_id, partition_id, segments_count))
    render.done(out, f"up to {segments_count} segment(s) deleted", stream_id=stream_id, topic_id=topic_id,
                partition_id=partition_id, segments_count=segments_count)


# ---------------------------------------------------------------- consumer groups, offsets

_GROUP_COLUMNS = [
    ("id", lambda g: g.id),
    ("name", lambda g: g.name),
    ("partitions", lambda g: g.partitions_count),
    ("members", lambda g: g.members_count if hasattr(g, "members_count") else len(g.members)),
]


@click.group("consumer-group")
def consumer_group() -> None:
    """Consumer groups: list, get, create, delete."""


@client_command(consumer_group, "list")
@click.argument("stream_id", type=ID)
@click.argument("topic_id", type=ID)
def group_list(client, out, stream_id, topic_id):
    """List the consumer groups of a topic."""
    render.emit(out, client.call(wg.GetConsumerGroups(stream_id, topic_id)), _GROUP_COLUMNS)


@client_command(consumer_group, "get")
@click.argument("stream_id", type=ID)
@click.argument("topic_id", type=ID)
@click.argument("group_id", type=ID)
def group_get(client, out, stream_id, topic_id, group_id):
    """Show a consumer group with its members and their partitions."""
    _details(out, client.call(wg.GetConsumerGroup(stream_id, topic_id, group_id)), f"consumer group {group_id!r}",
             _GROUP_COLUMNS, "members", [("member", lambda m: m.id),
                                         ("partitions", lambda m: ", ".join(map(str, m.partitions)))])


@client_command(consumer_group, "create")
@click.argument("stream_id", type=ID)
@click.argument("topic_id", type=ID)
@click.argument("name", type=NAME)
def group_create(client, out, stream_id, topic_id, name):
    """Create consumer group NAME on a topic."""
    g = client.call(wg.CreateConsumerGroup(stream_id, topic_id, name))
    render.emit(out, g) if out == "json" else render.done(out, f"consumer group {g.name!r} created with id {g.id}")


@client_command(consumer_group, "delete")
@click.argument("stream_id", type=ID)
@click.argument("topic_id", type=ID)
@click.argument("group_id", type=ID)
def group_delete(client, out, stream_id, topic_id, group_id):
    """Delete a consumer group."""
    client.call(wg.DeleteConsumerGroup(stream_id, topic_id, group_id))
    render.done(out, f"consumer group {group_id!r} deleted", stream_id=stream_id, topic_id=topic_id,
                group_id=group_id)


@click.group("consumer-offset")
def consumer_offset() -> None:
    """Stored consumer offsets: get, set, delete."""


_KINDS = {"consumer": ConsumerKind.CONSUMER, "consumer-group": ConsumerKind.CONSUMER_GROUP}
_kind_option = click.option("--kind", "-k", type=click.Choice(list(_KINDS)), default="consumer",
                            show_default=True, help="A single consumer or a consumer group.")
_offset_target = [
    click.argument("consumer_id", type=ID),
    click.argument("stream_id", type=ID),
    click.argument("topic_id", type=ID),
    click.argument("partition_id", type=U32),
]


def _with_offset_target(f):
    for decorator in reversed(_offset_target):
        f = decorator(f)
    return _kind_option(f)


@client_command(consumer_offset, "get")
@_with_offset_target
def offset_get(client, out, consumer_id, stream_id, topic_id, partition_id, kind):
    """Show a consumer's stored offset in a partition, with the partition's current offset (and lag)."""
    info = client.call(wo.GetConsumerOffset(Consumer(_KINDS[kind], consumer_id), stream_id, topic_id,
                                            partition_id))
    if info is None:
        fail(f"no stored offset for consumer {consumer_id!r} in partition {partition_id}", EXIT_SERVER_ERROR)
    data = {"partition_id": info.partition_id, "current_offset": info.current_offset,
            "stored_offset": info.stored_offset, "lag": max(0, info.current_offset - info.stored_offset)}
    render.emit(out, data)


@client_command(consumer_offset, "set")
@_with_offset_target
@click.argument("offset", type=U64)
def offset_set(client, out, consumer_id, stream_id, topic_id, partition_id, kind, offset):
    """Store OFFSET as a consumer's offset in a partition."""
    client.call(wo.StoreConsumerOffset(Consumer(_KINDS[kind], consumer_id), stream_id, topic_id, partition_id,
                                       offset))
    render.done(out, f"offset {offset} stored", consumer_id=consumer_id, partition_id=partition_id, offset=offset)


@client_command(consumer_offset, "delete")
@_with_offset_target
def offset_delete(client, out, consumer_id, stream_id, topic_id, partition_id, kind):
    """Delete a consumer's stored offset in a partition."""
    client.call(wo.DeleteConsumerOffset(Consumer(_KINDS[kind], consumer_id), stream_id, topic_id, partition_id))
    render.done(out, "offset deleted", consumer_id=consumer_id, partition_id=partition_id)


GROUPS = (stream, topic, partition, segment, consumer_group, consumer_offset)
