"""``headwater message send|poll|flush``, ``client list|get``, ``ping``, ``stats``."""

from __future__ import annotations

import sys
import time

import click

from ..codec import batch as batch_codec
from ..codec.errors import CodecError
from ..codec.headers import Kind, encode_user_headers, header
from ..codec.iggy.codes import ConsumerKind, PollingKind
from ..codec.iggy.commands import groups as wg
from ..codec.iggy.commands import messages as wm
from ..codec.iggy.commands import system as wsys
from ..codec.iggy.primitives import Consumer, Partitioning, PollingStrategy
from . import messages_view, render
from .common import COUNT, ID, NAME, U32, U64, client_command, found

_FOLLOW_INTERVAL_S = 0.2


@click.group()
def message() -> None:
    """Messages: send, poll, flush."""


def _header_value(kind_name: str, text: str):
    """``(kind, python value)`` of a typed header given as text (Iggy CLI's ``key:kind:value``)."""
    try:
        kind = Kind[kind_name.upper()]
    except KeyError:
        raise click.BadParameter(f"unknown header kind {kind_name!r}; one of "
                                 f"{', '.join(k.name.lower() for k in Kind)}", param_hint="--header") from None
    try:
        if kind == Kind.BOOL:
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return kind, text.lower() == "true"
        if kind in (Kind.FLOAT32, Kind.FLOAT64):
            return kind, float(text)
        if kind in (Kind.STRING,):
            return kind, text
        if kind == Kind.RAW:
            return kind, text.encode("utf-8")
        return kind, int(text, 0)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a {kind.name.lower()}", param_hint="--header") from None


def _headers(pairs: tuple[str, ...]) -> bytes:
    """``KEY=VALUE`` (a String header) or ``KEY:KIND:VALUE`` (typed, as Iggy's CLI) -> a headers block."""
    entries = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if sep and key and ":" not in key:
            entries.append(header(key, value))
            continue
        parts = pair.split(":", 2)
        if len(parts) != 3 or not parts[0]:
            raise click.BadParameter(f"expected KEY=VALUE or KEY:KIND:VALUE, got {pair!r}", param_hint="--header")
        kind, typed = _header_value(parts[1], parts[2])
        try:
            entries.append(header(parts[0], typed, kind))
        except CodecError as e:
            raise click.BadParameter(str(e), param_hint="--header") from None
    try:
        return encode_user_headers(entries) if entries else b""
    except CodecError as e:
        raise click.BadParameter(str(e), param_hint="--header") from None


@client_command(message, "send")
@click.argument("stream_id", type=ID)
@click.argument("topic_id", type=ID)
@click.argument("messages", nargs=-1)
@click.option("--partition", "-p", "partition_id", type=U32, help="Send to this partition.")
@click.option("--key", "-k", "messages_key", type=NAME, metavar="KEY",
              help="Pick the partition by this key, 1..255 UTF-8 bytes (messages key partitioning).")
@click.option("--header", "-H", "headers", multiple=True, metavar="KEY=VALUE|KEY:KIND:VALUE",
              help="A header (repeatable): KEY=VALUE is a String; KEY:KIND:VALUE any kind (uint32, bool, raw...).")
def message_send(client, out, stream_id, topic_id, messages, partition_id, messages_key, headers):
    """Send MESSAGES (or, when none are given, one message per line of standard input) in one batch.

    Without --partition or --key the server balances (round robin)."""
    if partition_id is not None and messages_key is not None:
        raise click.UsageError("--partition and --key exclude each other")
    payloads = [m.encode("utf-8") for m in messages] or [
        line.rstrip(b"\r\n") for line in sys.stdin.buffer.read().splitlines()]
    if not payloads:
        raise click.UsageError("no messages: give them as arguments or on standard input")
    if partition_id is not None:
        partitioning = Partitioning.by_partition(partition_id)
    elif messages_key is not None:
        partitioning = Partitioning.by_key(messages_key.encode("utf-8"))
    else:
        partitioning = Partitioning.balanced()
    user_headers = _headers(headers)
    now_us = time.time_ns() // 1000
    batch = batch_codec.build_batch(batch_codec.Message(p, origin_timestamp=now_us, user_headers=user_headers)
                                    for p in payloads)
    confirmations = client.call(wm.SendMessages(stream_id, topic_id, partitioning, len(payloads),
                                                memoryview(batch)))
    if out == "json":
        render.emit(out, {"ok": True, "messages_count": len(payloads), "confirmations": confirmations or []})
    else:
        where = ", ".join(f"partition {c.partition_id} from offset {c.base_offset}" for c in confirmations or ())
        click.echo(f"{len(payloads)} message(s) sent" + (f" ({where})" if where else ""))


def _strategy(offset, timestamp, first, last, next_) -> PollingStrategy:
    chosen = [name for name, v in (("--offset", offset), ("--timestamp", timestamp)) if v is not None]
    chosen += [name for name, v in (("--first", first), ("--last", last), ("--next", next_)) if v]
    if len(chosen) > 1:
        raise click.UsageError(f"{' and '.join(chosen)} exclude each other")
    if offset is not None:
        return PollingStrategy(PollingKind.OFFSET, offset)
    if timestamp is not None:
        return PollingStrategy(PollingKind.TIMESTAMP, timestamp)
    if last:
        return PollingStrategy(PollingKind.LAST)
    if next_:
        return PollingStrategy(PollingKind.NEXT)
    return PollingStrategy(PollingKind.FIRST)


@client_command(message, "poll")
@click.argument("stream_id", type=ID)
@click.argument("topic_id", type=ID)
@click.option("--partition", "-p", "partition_id", type=U32,
              help="The partition (default 0; with --consumer-group, the ones the group assigns).")
@click.option("--offset", type=U64, help="Start at this offset.")
@click.option("--timestamp", type=U64, help="Start at this time (µs since the epoch).")
@click.option("--first", is_flag=True, help="Start at the first message (the default).")
@click.option("--last", is_flag=True, help="The last COUNT messages.")
@click.option("--next", "next_", is_flag=True, help="After the consumer's stored offset.")
@click.option("--count", "-c", type=COUNT, default=10, show_default=True,
              help="Messages per poll.")
@click.option("--consumer", "consumer_id", type=ID, default="headwater-cli", show_default=True)
@click.option("--consumer-group", "group", is_flag=True,
              help="--consumer names a consumer group: join it for the poll (and leave after).")
@click.option("--auto-commit", is_flag=True, help="Store the consumer offset with each poll.")
@click.option("--follow", "-f", is_flag=True, help="Keep polling for new messages until interrupted.")
@click.option("--format", "fmt", type=click.Choice(messages_view.FORMATS), default="text", show_default=True,
              help="How payloads are shown.")
def message_poll(client, out, stream_id, topic_id, partition_id, offset, timestamp, first, last, next_, count,
                 consumer_id, group, auto_commit, follow, fmt):
    """Poll messages of one partition (or, with --consumer-group, of the partitions the group
    assigns); --follow streams new ones as they arrive (Ctrl-C stops).

    Each message is a line: offset, time, Kafka key, headers, payload; with
    --output json one JSON object per line."""
    strategy = _strategy(offset, timestamp, first, last, next_)
    consumer = Consumer(ConsumerKind.CONSUMER_GROUP if group else ConsumerKind.CONSUMER, consumer_id)
    if group:
        if follow and not (next_ and auto_commit):
            raise click.UsageError("--follow with --consumer-group needs --next --auto-commit")
        client.call(wg.JoinConsumerGroup(stream_id, topic_id, consumer_id))
    elif partition_id is None:
        partition_id = 0
    client.settimeout(None if follow else 30)
    try:
        while True:
            prefix, batches = client.call(wm.PollMessages(consumer, stream_id, topic_id, partition_id, strategy,
                                                          count, auto_commit))
            last_offset = None
            for m in messages_view.messages_of(batches, strategy.value if strategy.kind == PollingKind.OFFSET
                                               else 0, prefix.partition_id):
                messages_view.show(m, fmt, out)
                last_offset = m["offset"]
            sys.stdout.flush()
            if not follow:
                break
            if group:  # --next --auto-commit: the group's stored offsets move on
                if last_offset is None:
                    time.sleep(_FOLLOW_INTERVAL_S)
            elif last_offset is not None:
                strategy = PollingStrategy(PollingKind.OFFSET, last_offset + 1)
            else:
                time.sleep(_FOLLOW_INTERVAL_S)
    except KeyboardInterrupt:
        return
    if group:
        client.call(wg.LeaveConsumerGroup(stream_id, topic_id, consumer_id))


@client_command(message, "flush")
@click.argument("stream_id", type=ID)
@click.argument("topic_id", type=ID)
@click.argument("partition_id", type=U32)
@click.option("--fsync", is_flag=True, help="Also fsync the partition's files.")
def message_flush(client, out, stream_id, topic_id, partition_id, fsync):
    """Flush a partition's unsaved messages to disk."""
    client.call(wm.FlushUnsavedBuffer(stream_id, topic_id, partition_id, fsync))
    render.done(out, f"partition {partition_id} flushed", partition_id=partition_id, fsync=fsync)


# ---------------------------------------------------------------- clients, ping, stats

_CLIENT_COLUMNS = [
    ("client id", lambda c: c.client_id),
    ("user id", lambda c: c.user_id),
    ("transport", lambda c: render.transport_name(c.transport)),
    ("address", lambda c: c.address),
    ("consumer groups", lambda c: getattr(c, "consumer_groups_count", None)
     if not hasattr(c, "consumer_groups") else len(c.consumer_groups)),
]


@click.group("client")
def client_group() -> None:
    """Connected clients: list, get."""


@client_command(client_group, "list")
def client_list(client, out):
    """List the connected clients."""
    render.emit(out, client.call(wsys.GetClients()), _CLIENT_COLUMNS)


@client_command(client_group, "get")
@click.argument("client_id", type=U32)
def client_get(client, out, client_id):
    """Show one connected client and its consumer groups."""
    render.emit_client(out, found(client.call(wsys.GetClient(client_id)), f"client {client_id}"))


@client_command(None, "ping", login=False)
@click.option("--count", "-c", type=click.IntRange(1), default=1, show_default=True)
def ping(client, out, count):
    """Ping the server (no login needed); prints the round-trip times."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        client.call(wsys.Ping())
        times.append((time.perf_counter() - start) * 1000)
    if out == "json":
        render.emit(out, {"ok": True, "server": client.address, "round_trip_ms": times})
    else:
        for t in times:
            click.echo(f"pong from {client.address}: {t:.2f} ms")


@client_command(None, "stats")
def stats(client, out):
    """Show the server's statistics."""
    s = client.call(wsys.GetStats())
    render.emit(out, s)


COMMANDS = (ping, stats)
GROUPS = (message, client_group)
