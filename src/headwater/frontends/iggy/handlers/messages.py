"""Messages (SendMessages 101, PollMessages 100, FlushUnsavedBuffer 102) and consumer offsets (120-122).

The poll path never re-encodes: the reply is the 16-byte prefix followed by
the stored batch buffers (sliced only at the edges), written with
``writelines``.

Offsets: Iggy's stored offset is the last offset consumed; the broker keeps
the next offset to consume (Kafka's meaning), so we store ``offset + 1`` and
report ``committed - 1``.
"""

from __future__ import annotations

from ....codec.iggy.codes import Command, ConsumerKind, PartitioningKind, PollingKind
from ....codec.iggy.commands import messages as w
from ....codec.iggy.commands import offsets as wo
from ....core import catchup, errors
from ....core.catalog import Topic
from ....core.offsets import CONSUMER, GROUP
from ....core.partition import Partition
from ....metrics import IGGY
from ..registry import Context, iggy_command
from ._common import may_poll, may_send, require


@iggy_command(Command.SEND_MESSAGES)
async def send_messages(ctx: Context, req: w.SendMessages) -> bytes:
    kind = req.partitioning.kind
    if kind == PartitioningKind.PARTITION_ID:
        return await send_batch(ctx, req.stream_id, req.topic_id, "partition", req.partitioning.partition_id, req.batch)
    if kind == PartitioningKind.MESSAGES_KEY:
        return await send_batch(ctx, req.stream_id, req.topic_id, "key", bytes(req.partitioning.key), req.batch)
    return await send_batch(ctx, req.stream_id, req.topic_id, "balanced", None, req.batch)


async def send_batch(ctx: Context, stream_id, topic_id, route: str, value, batch: memoryview) -> bytes:
    """SendMessages once decoded: resolve the topic, check the send right, pick the partition
    (:meth:`~headwater.core.broker.Broker.route`: ``route`` "partition", "key" or
    "balanced" with its ``value``), verify, stamp and append ``batch`` (a view into the
    request body: stamped in place unless the body is immutable ``bytes``); the reply
    payload is one SendConfirmation. Raises what the broker raises (TopicNotFound,
    Unauthorized, PartitionNotFound, InvalidBatch, MessagesNotSaved, ...)."""
    t, p, done = append_batch(ctx, stream_id, topic_id, route, value, batch)
    if done.durable is not None:  # enforce_fsync: reply once a sync covering the batch returned
        await done.durable
    return w.encode_send_confirmation(t.stream_id, t.id, p.id, done.base_offset)


def append_batch(ctx: Context, stream_id, topic_id, route: str, value, batch: memoryview):
    """The synchronous part of :func:`send_batch` (same arguments, same errors): resolve,
    check, route, verify, stamp and append; returns ``(topic, partition, done)``, ``done``
    the broker's append result (``base_offset``; ``durable``: None, or under enforce_fsync
    the awaitable the reply must wait for)."""
    t, p = send_route(ctx, stream_id, topic_id, route, value)
    return t, p, append_routed(ctx, t, p, batch)


def send_route(ctx: Context, stream_id, topic_id, route: str, value) -> tuple[Topic, Partition]:
    """The first half of :func:`append_batch` (same errors): the topic, checked for the send
    right, and the partition the batch goes to.

    For ``route`` "partition" the answer depends only on the request's fields,
    :func:`route_stamp` (what a kept route of either kind depends on) and the topic's
    partitions: a connection may keep it and skip this
    step for a later SendMessages of the same metadata bytes while the stamp is the same and the
    topic still holds that partition (the Iggy listener does: ``IggyFrontend._send_body``)."""
    t = ctx.broker.topic(stream_id, topic_id)
    require(may_send(ctx, t), "send messages")
    return t, ctx.broker.route(t, route, value)


def same_stamp(a: tuple, b: tuple) -> bool:
    """Whether two :func:`route_stamp` stamps are the same (the user, checker and ACL
    bindings by identity: cheaper than ``==``, which compares the user's fields)."""
    return a[0] == b[0] and a[1] is b[1] and a[2] is b[2] and a[3] is b[3] and a[4] == b[4]


def append_routed(ctx: Context, t: Topic, p: Partition, batch: memoryview):
    """The second half of :func:`append_batch`: verify, stamp and append ``batch`` to ``p`` of
    ``t``; the broker's append result (raises what the broker raises)."""
    if isinstance(batch.obj, bytes):
        batch = bytearray(batch)
    if t.options.compact:
        ctx.broker.check_compaction_keys(batch)
    return ctx.broker.append(p, batch)


def consumer_key(t: Topic, consumer) -> tuple[str, str]:
    """(kind, name) under which a consumer's offsets are kept.

    A group's offsets are keyed by its name (shared with Kafka groups of that
    name); a single consumer's by its id as a decimal string, so the numeric
    consumer 7 and the named consumer "7" share their offsets.
    """
    if consumer.kind == ConsumerKind.CONSUMER_GROUP:
        return GROUP, t.group(consumer.id).name
    return CONSUMER, str(consumer.id)


def _owned(ctx: Context, t: Topic, consumer, partition_id: int) -> bool:
    """Whether this connection is a member of the consumer's group and owns ``partition_id``."""
    parts = t.group(consumer.id).assignment(ctx.client.id)
    return parts is not None and partition_id in parts


def _poll_partition(ctx: Context, t: Topic, consumer, partition_id: int | None) -> Partition | None:
    """The partition a poll reads; None: a group member with nothing to read.

    A single consumer reads the partition it names, partition 0 by default. A
    group member names one of its assigned partitions (the SDK picks them from
    SyncConsumerGroup) or none, and then the group hands it its partitions in
    turn; a member that names a partition it does not own is fenced
    (:class:`~headwater.core.errors.ConsumerGroupPartitionNotOwned`).
    """
    if consumer.kind != ConsumerKind.CONSUMER_GROUP:
        return t.partition(0 if partition_id is None else partition_id)
    g = t.group(consumer.id)
    parts = g.assignment(ctx.client.id)
    if partition_id is not None:
        p = t.partition(partition_id)
        if parts is None or partition_id not in parts:
            raise errors.ConsumerGroupPartitionNotOwned(
                f"client {ctx.client.id} does not own partition {partition_id} in group {g.name!r}"
            )
        return p
    if parts is None:
        raise errors.ConsumerGroupMemberNotFound(f"client {ctx.client.id} is not a member of {g.name!r}")
    pid = g.next_partition(ctx.client.id)
    return None if pid is None else t.partition(pid)


@iggy_command(Command.POLL_MESSAGES)
def poll_messages(ctx: Context, req: w.PollMessages):
    """The buffers of :func:`poll_batches`, or its coroutine when bytes must be read in (the
    dispatchers await a handler's awaitable result)."""
    s = req.strategy
    return poll_batches(ctx, req.consumer, req.stream_id, req.topic_id, req.partition_id, s.kind, s.value, req.count,
                        req.auto_commit)


def poll_batches(ctx: Context, consumer, stream_id, topic_id, partition_id: int | None, strategy: int,
                 value: int, count: int, auto_commit: bool):
    """PollMessages once decoded (the fields of ``w.poll_messages_fields``): resolve the
    topic, check the poll right, pick the partition (:func:`poll_route`), read from where
    ``strategy``/``value`` say (:class:`PollingKind`), commit when ``auto_commit``
    (:func:`poll_routed`). Returns the reply payload as buffers: the 16-byte prefix, then the
    stored batches (views, never copied). Raises what the broker raises (TopicNotFound,
    Unauthorized, PartitionNotFound, ConsumerGroupNotFound, CorruptData, ...).

    Synchronous when every byte to return is in the page cache (the Iggy listener serves it
    from its protocol callbacks); otherwise (a consumer far behind) it returns a coroutine
    that reads them in off the event loop and then returns the payload (or raises): the
    caller awaits it (:meth:`~headwater.core.broker.Broker.read_visible_soon`). The partition
    is picked once, before the read, so a group member's turn is not spent twice."""
    route = poll_route(ctx, consumer, stream_id, topic_id, partition_id)
    if type(route) is list:
        return route
    return poll_routed(ctx, route[1], route[2], route[3], strategy, value, count, auto_commit)


def poll_route(ctx: Context, consumer, stream_id, topic_id, partition_id: int | None):
    """The first half of :func:`poll_batches` (same arguments less the strategy's, same errors):
    ``(topic, partition, consumer kind, consumer name)`` to read from, or the whole reply
    payload (a list) when a group member is not to read (stale assignment: the
    resync sentinel; no partition assigned: an empty poll).

    For a single consumer (not a group) the answer depends only on the request's fields,
    :func:`route_stamp` and the topic's partitions: a connection may keep it and skip
    this step for a later poll of the same fields while the stamp is equal and the topic
    still holds that partition (the Iggy listener does: ``IggyFrontend._poll_body``)."""
    t = ctx.broker.topic(stream_id, topic_id)
    require(may_poll(ctx, t), "poll messages")
    kind, name = consumer_key(t, consumer)
    try:
        p = _poll_partition(ctx, t, consumer, partition_id)
    except errors.ConsumerGroupPartitionNotOwned:
        # Iggy answers a stale assignment with an empty poll whose partition id is
        # u32::MAX: the SDK then re-syncs its assignment and polls again.
        return [w.encode_poll_prefix(w.RESYNC_REQUIRED_PARTITION_ID, 0, 0)]
    if p is None:  # a group member with no partitions assigned
        return [w.encode_poll_prefix(0, 0, 0)]
    return t, p, kind, name


def route_stamp(ctx: Context) -> tuple:
    """What :func:`poll_route` and :func:`send_route` read besides the request and the topic's
    partitions: the catalog (ids and names of streams and topics: ``Catalog.generation``), this
    session's permissions (``ctx.user`` and ``ctx.checker``, replaced at every login and user
    change) and the Kafka ACLs over them (the ACL store replaces its list on every change; the
    Kafka stream's name). The same stamps (:func:`same_stamp`): a kept route of either kind is
    still what it was."""
    broker = ctx.broker
    authorizer = broker.authorizer
    return broker.catalog.generation, ctx.user, ctx.checker, authorizer.acls.bindings, authorizer.kafka_stream


def poll_routed(ctx: Context, p: Partition, kind: str, name: str, strategy: int, value: int, count: int,
                auto_commit: bool):
    """The second half of :func:`poll_batches`: the read from partition ``p`` (of consumer
    ``kind``/``name``) where ``strategy``/``value`` say, and the commit."""
    if strategy == PollingKind.OFFSET:
        start = value
    elif strategy == PollingKind.TIMESTAMP:
        # the index walk's bytes not in the page cache: looked up off the event loop
        start = catchup.soon(IGGY, p.offset_for_timestamp, value, check=lambda: ctx.broker.require_present(p))
        if type(start) is not int:
            return _poll_from(ctx, p, kind, name, start, count, auto_commit)
    elif strategy == PollingKind.FIRST:
        start = p.log_start_offset
    elif strategy == PollingKind.LAST:
        start = max(p.high_watermark - count, p.log_start_offset)
    else:  # NEXT
        committed = ctx.broker.committed(p, kind, name)
        start = p.log_start_offset if committed is None else committed
    return _poll_at(ctx, p, kind, name, start, count, auto_commit)


async def _poll_from(ctx: Context, p: Partition, kind: str, name: str, looking_up, count: int,
                     auto_commit: bool) -> list:
    """A poll by timestamp whose lookup waits for the disk: the read once it has its offset."""
    read = _poll_at(ctx, p, kind, name, await looking_up, count, auto_commit)
    return await read if type(read) is not list else read


def _poll_at(ctx: Context, p: Partition, kind: str, name: str, start: int, count: int, auto_commit: bool):
    """The poll's read from offset ``start``: the reply's buffers, or a coroutine of them."""
    # A poll reply is capped at the frame size limit (at least one batch is still returned),
    # so a huge ``count`` cannot make the server build an unbounded reply in memory.
    # Kafka transactions: nothing past the last stable offset, no marker, no aborted batch
    # (see docs/kafka-mapping.md, "Transactions"); the auto-commit skips what was hidden.
    # Bytes not in the page cache (a consumer far behind) are read in off the event loop.
    read = ctx.broker.read_visible_soon(p, start, count, ctx.frontend.config.max_frame_size, resume=auto_commit,
                                        protocol=IGGY)
    if type(read) is not tuple:
        return _poll_after(ctx, p, kind, name, auto_commit, read)
    return _poll_reply(ctx, p, kind, name, auto_commit, read)


async def _poll_after(ctx: Context, p: Partition, kind: str, name: str, auto_commit: bool, reading) -> list:
    return _poll_reply(ctx, p, kind, name, auto_commit, await reading)


def _poll_reply(ctx: Context, p: Partition, kind: str, name: str, auto_commit: bool, read: tuple) -> list:
    batches, n, next_offset = read
    current = max(p.high_watermark - 1, 0)
    if auto_commit and n:
        ctx.broker.commit(p, kind, name, next_offset)
    return [w.encode_poll_prefix(p.id, current, n), *batches]


@iggy_command(Command.FLUSH_UNSAVED_BUFFER)
def flush_unsaved_buffer(ctx: Context, req: w.FlushUnsavedBuffer) -> bytes:
    raise errors.FeatureUnavailable("FlushUnsavedBuffer is not supported; use the enforce_fsync topic option")


def _offset_partition(ctx: Context, t: Topic, consumer, partition_id: int | None, *, fenced: bool) -> Partition:
    """The partition an offset command addresses (partition 0 when none is named).

    Writes to a group's offsets are fenced like polls: only the member that
    owns the partition may store or delete its offset (Iggy's commit fence).
    Reads are not fenced.
    """
    pid = 0 if partition_id is None else partition_id
    p = t.partition(pid)
    if fenced and consumer.kind == ConsumerKind.CONSUMER_GROUP and not _owned(ctx, t, consumer, pid):
        raise errors.ConsumerGroupPartitionNotOwned(f"client {ctx.client.id} does not own partition {pid}")
    return p


@iggy_command(Command.GET_CONSUMER_OFFSET)
def get_consumer_offset(ctx: Context, req: wo.GetConsumerOffset) -> bytes:
    t = ctx.broker.topic(req.stream_id, req.topic_id)
    require(may_poll(ctx, t), "poll messages")
    p = _offset_partition(ctx, t, req.consumer, req.partition_id, fenced=False)
    try:
        kind, name = consumer_key(t, req.consumer)
    except errors.ConsumerGroupNotFound:
        return b""  # a group that does not exist has no offsets (Iggy reports none)
    committed = ctx.broker.committed(p, kind, name)
    if committed is None or committed == 0:
        return b""
    return wo.encode_consumer_offset(wo.ConsumerOffsetInfo(p.id, max(p.high_watermark - 1, 0), committed - 1))


@iggy_command(Command.STORE_CONSUMER_OFFSET)
def store_consumer_offset(ctx: Context, req: wo.StoreConsumerOffset) -> bytes:
    t = ctx.broker.topic(req.stream_id, req.topic_id)
    require(may_poll(ctx, t), "poll messages")
    kind, name = consumer_key(t, req.consumer)
    p = _offset_partition(ctx, t, req.consumer, req.partition_id, fenced=True)
    if req.offset >= p.high_watermark:
        # Iggy refuses an offset past the partition's newest one with InvalidOffset (4100)
        raise errors.OffsetOutOfRange(
            f"offset {req.offset} is past the newest offset {p.high_watermark - 1} of partition {p.id}"
        )
    ctx.broker.commit(p, kind, name, req.offset + 1)
    return b""


@iggy_command(Command.DELETE_CONSUMER_OFFSET)
def delete_consumer_offset(ctx: Context, req: wo.DeleteConsumerOffset) -> bytes:
    t = ctx.broker.topic(req.stream_id, req.topic_id)
    require(may_poll(ctx, t), "poll messages")
    kind, name = consumer_key(t, req.consumer)
    p = _offset_partition(ctx, t, req.consumer, req.partition_id, fenced=True)
    if not ctx.broker.delete_committed(p, kind, name):
        raise errors.ConsumerOffsetNotFound("no stored offset for this consumer")
    return b""
