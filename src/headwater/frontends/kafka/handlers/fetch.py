"""Fetch (key 1), versions 4-17: records from stored Iggy batches, built as RecordBatch v2.

v4 adds isolation_level, last_stable_offset and aborted transactions: with
isolation_level 1 (read_committed) a partition is read up to its last stable
offset (the first offset of its oldest open transaction, ``core.transactions``)
and its answer lists the aborted transactions (producer id, first offset)
whose range meets the records returned; read_uncommitted reads to the high
watermark and gets null. Either way a stored transaction marker comes back as
a control batch (attributes transactional | control, one end-transaction
marker record) and a batch of an aborted transaction with its producer id,
epoch and the transactional bit, so the client can drop it (see
docs/kafka-mapping.md, "Transactions"); v5 log_start_offset; v7
incremental fetch sessions (declined: the response session id is 0, so
clients send full requests); v9 current_leader_epoch (0 here); v11 rack_id /
preferred_read_replica (-1); v12 flexible, diverging epochs (never);
v13 topics by id (derived ids, see names.py; an unknown id gets
UNKNOWN_TOPIC_ID); v15 replica_state; v16 node_endpoints (empty: the
leader is the broker in Metadata); v17 replica_directory_id (followers only).

The response body is written by ``codec.kafka.fetch_response`` (the same bytes as kio's encoder)
with the record batches copied once, straight from the conversions into the body.

Each stored Iggy batch overlapping the fetch becomes one RecordBatch v2
(``codec.kafka.convert.iggy_to_kafka``), uncompressed, partitionLeaderEpoch
0. The first batch starts at the fetch offset (stored batches are sliced
there). Conversions are kept in a small LRU (:class:`ConversionCache`), so
consumers reading the same recent batches (several groups following one
topic) convert each batch once. A fetch offset outside [log start, high watermark] gets
OFFSET_OUT_OF_RANGE. A damaged stored batch (it fails its checksums on read) ends a
partition's records before it; a fetch at its offset gets CORRUPT_MESSAGE (2) for that
partition (a fenced partition: KAFKA_STORAGE_ERROR, 56), the other partitions are answered
as usual; logged once a minute per partition (``frontends/corrupt.py``).

Partitions are keyed by (topic, partition) as Kafka's ``FetchRequest.fetchData``
(a LinkedHashMap) does: a partition named twice is read once, in the place of
its first mention, with the fetch position of its last. Sizes as in Kafka's
``ReplicaManager.readFromLog``: the response holds at most ``max_bytes``
(itself capped at ``FETCH_MAX_BYTES``, Kafka's broker ``fetch.max.bytes``
default) and each partition at most ``partition_max_bytes``, in whole
batches, except that the first batch found is returned even when it is
larger (so a consumer never stalls on a big batch).

Catch-up reads (a consumer far behind, see ``core.catchup``): every partition is read without
waiting for the disk. When all of them are in the page cache the handler answers at once (it
returns the body, no coroutine). Otherwise the first partition whose bytes are not has them
read by storage's worker thread while the event loop serves other clients, and the pass over
the partitions runs again, that read kept (so their order and the byte budget stay as above);
each such wait counts in ``headwater_catchup_reads_total{protocol="kafka"}``.

Long polling: with less than min_bytes available the request waits up to
max_wait_ms, woken by an append to one of its partitions, or their deletion
(``Partition.add_listener``), or by shutdown; topics and partitions are
looked up again after every wait, so one deleted (or deleted and created
again) meanwhile is answered UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID by
id). While it waits the request watches its connection (``ctx.peer_gone``):
a client that closes it ends the request at once, and nothing is sent.
"""

from __future__ import annotations

import asyncio
import struct
from collections import OrderedDict

from ....codec.batch import offset_range
from ....codec.kafka.convert import iggy_to_kafka
from ....codec.kafka.fetch_response import Partition, Topic, encode_fetch_response
from ....core.acls import Operation
from ....codec.kafka.record_batch import control_batch, with_producer
from ....core import catchup
from ....core.catchup import NotCached
from ....core import errors as core_errors
from .. import errors
from ... import corrupt
from ....codec.kafka.messages import ms
from ..configs import fetch_compression
from ..names import topic_id
from .. import authz
from ....metrics import KAFKA
from ..registry import ApiKey, Context, kafka_api

FETCH_MAX_BYTES = 55 * 1024 * 1024  # Kafka's broker fetch.max.bytes default (57671680)
CACHE_MAX_BYTES = 32 * 1024 * 1024

_KEY = struct.Struct("<8xQ16xQQ")  # Iggy batch header: base_offset, batch_length, batch_checksum


class ConversionCache:
    """Recent ``iggy_to_kafka`` results, least recently used dropped past ``max_bytes``.

    Keyed by the stored batch's ``(base_offset, batch_length, batch_checksum)``
    (header bytes 8..16 and 32..48): the checksum covers every header field and
    every frame checksum, so equal keys mean equal batches (a slice has its own
    length and checksum), and the conversion depends on nothing else. Nothing
    needs invalidating: a changed batch has another key.
    """

    def __init__(self, max_bytes: int = CACHE_MAX_BYTES):
        self.max_bytes = max_bytes
        self.size = 0
        self._entries: OrderedDict[tuple[int, int, int, int], bytes] = OrderedDict()

    def convert(self, batch, compression: int = 0) -> bytes:
        """The RecordBatch v2 for one stored Iggy batch (from the cache, or converted and kept),
        its records compressed with ``compression`` (the topic's compression.type)."""
        key = (*_KEY.unpack_from(batch, 0), compression)
        entries = self._entries
        found = entries.get(key)
        if found is not None:
            entries.move_to_end(key)
            return found
        converted = iggy_to_kafka(batch, partition_leader_epoch=0, compression=compression)
        if len(converted) <= self.max_bytes:
            entries[key] = converted
            self.size += len(converted)
            while self.size > self.max_bytes:
                self.size -= len(entries.popitem(last=False)[1])
        return converted


_cache = ConversionCache()


_BASE = struct.Struct("<8xQQ")  # Iggy batch header: base_offset u64 at 8, base_timestamp u64 (µs) at 16


def _transactional(pt, b, convert) -> bytes | None:
    """The RecordBatch for a stored batch the partition's transaction state names (a
    marker: a control batch; an aborted batch: with its producer id and the
    transactional bit), None for an ordinary one."""
    base, timestamp_us = _BASE.unpack_from(b, 0)  # a slice keeps its batch's base: the same hidden range
    hidden = pt.find(base)
    if hidden is None:
        return None
    pid, epoch, committed, _first, _batches = pt.markers[hidden[2]]
    if hidden[0] == hidden[2]:
        return control_batch(base, timestamp_us // 1000, pid, epoch, committed, partition_leader_epoch=0)
    return with_producer(convert(b), pid, epoch, transactional=True)


class _Miss(Exception):
    """A partition's read needs bytes that are not in the page cache (a consumer far behind):
    the pass stops, the read is done off the event loop (:func:`_read_in`) and the pass runs
    again, finding the batches read in ``ready``."""

    def __init__(self, p, offset: int, end: int, limit: int, miss):
        super().__init__()
        self.p, self.offset, self.end, self.limit, self.miss = p, offset, end, limit, miss


def _read(ctx: Context, p, offset: int, limit: int, min_one: bool, compression: int = 0, committed: bool = False,
          ready: dict | None = None):
    """(error, high_watermark, last_stable_offset, log_start, record batches, aborted) for one partition.

    Whole batches within ``limit`` bytes; with ``min_one`` the first batch
    even when it alone is larger; records compressed with ``compression`` (the
    topic's compression.type, 0 = as stored). ``committed`` (read_committed) stops at the
    last stable offset and gives the aborted transactions met (else None).
    Reads only what is in the page cache: stored bytes that are not raise :class:`_Miss`,
    unless ``ready`` holds this partition's read from ``offset``, done off the loop since
    (used while its end is not past today's end).
    """
    broker = ctx.broker
    hw = p.high_watermark
    start = broker.log_start(p)
    aborted = [] if committed else None
    try:
        p.require_readable()  # fenced: KAFKA_STORAGE_ERROR, never an empty fetch at high watermark 0
    except core_errors.BrokerError as e:
        if isinstance(e, core_errors.CorruptData):
            corrupt.report(e, "kafka", api="fetch")
        return errors.code_for(e), -1, -1, -1, [], aborted  # Kafka's offsets on an errored partition
    pt = broker.transactions.peek((p.stream_id, p.topic_id, p.id))
    lso = hw if pt is None else pt.last_stable_offset(hw)
    end = lso if committed else hw
    if offset < start or offset > hw:
        return errors.OFFSET_OUT_OF_RANGE, hw, lso, start, [], aborted
    if offset >= end or (limit <= 0 and not min_one):
        return 0, hw, lso, start, [], aborted
    done = ready.get((p, offset)) if ready else None
    try:
        if done is not None and done[0] <= end:
            stored = done[1]
            if isinstance(stored, Exception):
                raise stored
        else:
            stored, _ = p.read(offset, end - offset, max(limit, 1), nowait=True)
    except NotCached as miss:
        raise _Miss(p, offset, end, max(limit, 1), miss) from None
    except core_errors.BrokerError as e:
        # a damaged batch at the fetch offset: CORRUPT_MESSAGE for this partition only (the
        # batches before it were served to the fetches that reached it); fenced: KAFKA_STORAGE_ERROR
        if isinstance(e, core_errors.CorruptData):
            corrupt.report(e, "kafka", api="fetch")
        return errors.code_for(e), hw, lso, start, [], aborted
    out: list[bytes] = []
    size = 0
    convert = _cache.convert
    for b in stored:
        kafka_batch = None if pt is None else _transactional(pt, b, lambda x: convert(x, compression))
        if kafka_batch is None:
            kafka_batch = convert(b, compression)
        if size + len(kafka_batch) > limit and (out or not min_one):
            break
        out.append(kafka_batch)
        size += len(kafka_batch)
    if committed and pt is not None and out:
        aborted = pt.aborted_between(offset, offset_range(stored[len(out) - 1])[1])
    return 0, hw, lso, start, out, aborted


async def _read_in(ctx: Context, m: _Miss, ready: dict) -> None:
    """The read a pass missed, done off the event loop (:func:`.catchup.read_in`), kept in
    ``ready`` for the next pass: ``(end, batches)``, or ``(end, error)`` for a read storage
    refused or a partition deleted meanwhile (the next pass finds it gone first)."""
    p = m.p
    try:
        stored, _ = await catchup.read_in(KAFKA, p.read, m.offset, m.end - m.offset, m.limit, miss=m.miss,
                                          check=lambda: ctx.broker.require_present(p))
    except core_errors.BrokerError as e:
        stored = e
    ready[(p, m.offset)] = (m.end, stored)


def _plan(ctx: Context, request) -> dict:
    """{(topic key, partition): FetchPartition}: first mention's place, last mention's values.

    The topic key is the name, or from v13 the topic id.
    """
    by_id = ctx.version >= 13
    plan: dict = {}
    for ft in request.topics:
        key = ft.topic_id if by_id else ft.topic
        for fp in ft.partitions:
            plan[(key, fp.partition)] = fp
    return plan


def _resolve(ctx: Context, key) -> tuple:
    """(kafka name, topic id, topic or None, error) for a topic key."""
    names = ctx.frontend.names
    if ctx.version >= 13:
        found = names.by_id(key)
        if found is None:
            return None, key, None, errors.UNKNOWN_TOPIC_ID
        if not authz.topic(ctx, Operation.READ, found[0], found[1]):
            return found[0], key, None, authz.TOPIC_AUTHORIZATION_FAILED
        return found[0], key, found[1], 0
    topic = names.resolve(key)
    if not authz.topic(ctx, Operation.READ, key, topic):
        return key, None, None, authz.TOPIC_AUTHORIZATION_FAILED
    if topic is None:
        return key, None, None, errors.UNKNOWN_TOPIC_OR_PARTITION
    return key, topic_id(topic), topic, 0


def _recheck(ctx: Context, key, first: tuple) -> tuple:
    """``first`` (the resolution before waiting) if the key still names that same topic, else gone."""
    now = _resolve(ctx, key)
    if now[2] is not None and now[2] is first[2]:
        return now
    gone = errors.UNKNOWN_TOPIC_ID if ctx.version >= 13 else errors.UNKNOWN_TOPIC_OR_PARTITION
    return first[0], first[1], None, gone


def _collect(ctx: Context, plan: dict, resolved: dict, seen: dict, max_bytes: int, committed: bool = False,
             ready: dict | None = None):
    """One pass over the partitions: (topic responses, bytes gathered, any error, partitions).

    Consecutive partitions of one topic share a topic response (as Kafka's
    ``FetchResponse.of``). ``seen`` keeps each partition object of the first
    pass: a partition replaced since (deleted and created again) counts as gone.
    Raises :class:`_Miss` at the first partition whose bytes are not in the page
    cache (and not in ``ready``, see :func:`_read`).
    """
    remaining = max_bytes
    total = 0
    failed = False
    partitions = []
    groups: list[tuple[object, str | None, object, list[Partition]]] = []  # (key, name, topic id, partitions)
    for (key, index), fp in plan.items():
        name, tid, topic, terr = resolved[key]
        if not groups or groups[-1][0] != key:
            groups.append((key, name, tid, []))
        parts = groups[-1][3]
        p = None if topic is None else topic.partitions.get(index)
        if p is not None and seen.setdefault((key, index), p) is not p:
            p = None
        if p is None:
            parts.append(_failed(index, terr or errors.UNKNOWN_TOPIC_OR_PARTITION))
            failed = True
            continue
        partitions.append(p)
        code, hw, lso, start, batches, aborted = _read(
            ctx, p, fp.fetch_offset, min(fp.partition_max_bytes, remaining), total == 0,
            fetch_compression(ctx.broker, topic), committed, ready,
        )
        size = sum(len(b) for b in batches)
        total += size
        remaining -= size
        failed = failed or code != 0
        parts.append(Partition(index, code, hw, lso, start, aborted, -1, batches))
    topics = [Topic(name, tid, parts) for _, name, tid, parts in groups]
    return topics, total, failed, partitions


def _failed(index: int, code: int) -> Partition:
    """A partition that could not be read: offsets -1, no records (null)."""
    return Partition(index, code, -1, -1, -1, None, -1, None)


async def _wait(partitions, ctx: Context, timeout_s: float) -> bool:
    """Wait for an append to (or the deletion of) one of ``partitions``, shutdown or the timeout.

    Returns True when the peer closed the connection meanwhile (nobody to answer).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    woken = asyncio.Event()

    def wake(_p) -> None:
        woken.set()

    for p in partitions:
        p.add_listener(wake)
    own = [asyncio.ensure_future(woken.wait())]
    if ctx.closing is not None:
        own.append(asyncio.ensure_future(ctx.closing.wait()))
    waiters = set(own)
    # the server's read-ahead of the next request: it fails once the peer closes (not ours to cancel)
    gone = ctx.peer_gone() if ctx.peer_gone is not None else None
    if gone is not None:
        waiters.add(gone)
    try:
        while True:
            if gone is not None and gone.done():
                if gone.cancelled() or gone.exception() is not None:
                    return True
                waiters.discard(gone)  # the next request arrived early; it waits its turn
                gone = None
            left = deadline - loop.time()
            if left <= 0:
                return False
            done, _ = await asyncio.wait(waiters, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            if not done or any(w in done for w in own):
                return False
    finally:
        for w in own:
            w.cancel()
        for p in partitions:
            p.remove_listener(wake)


@kafka_api(ApiKey.FETCH)
def fetch(ctx: Context, request):
    """The response body when it can be answered at once from the page cache (no await, no
    coroutine: the consumer following the tail), else a coroutine of it (:func:`_fetch_later`:
    a partition read off the event loop, or a long poll). Either way the same passes
    over the partitions, in the same order, with the same byte budget."""
    max_wait_s = max(ms(request.max_wait), 0) / 1000
    plan = _plan(ctx, request)
    committed = request.isolation_level == 1
    first = {key: _resolve(ctx, key) for key, _ in plan}
    seen: dict = {}
    max_bytes = min(request.max_bytes, FETCH_MAX_BYTES)
    try:
        topics, total, failed, partitions = _collect(ctx, plan, first, seen, max_bytes, committed)
    except _Miss as m:
        return _fetch_later(ctx, request, plan, first, seen, max_wait_s, m)
    if (total >= max(request.min_bytes, 1) or failed or max_wait_s <= 0 or not partitions
            or (ctx.closing is not None and ctx.closing.is_set())):
        return encode_fetch_response(ctx.version, 0, 0, 0, topics)
    return _fetch_later(ctx, request, plan, first, seen, max_wait_s, None)


async def _fetch_later(ctx: Context, request, plan: dict, first: dict, seen: dict, max_wait_s: float,
                       missed: _Miss | None):
    """The rest of a Fetch whose first pass missed the page cache (``missed``) or found less
    than min_bytes: reads missed are done off the loop and the pass runs again; with less than
    min_bytes the request waits (long poll) up to max_wait_ms from now, and passes again."""
    min_bytes = max(request.min_bytes, 1)
    max_bytes = min(request.max_bytes, FETCH_MAX_BYTES)
    committed = request.isolation_level == 1
    resolved = first
    ready: dict = {}  # (partition, offset) -> (end, batches or error): reads done off the loop
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_s
    while True:
        if missed is not None:
            await _read_in(ctx, missed, ready)
            resolved = {key: _recheck(ctx, key, r) for key, r in first.items()}
        try:
            topics, total, failed, partitions = _collect(ctx, plan, resolved, seen, max_bytes, committed, ready)
        except _Miss as m:
            missed = m
            continue
        missed = None
        now = loop.time()
        if total >= min_bytes or failed or now >= deadline or not partitions:
            break
        if ctx.closing is not None and ctx.closing.is_set():
            break
        if await _wait(partitions, ctx, deadline - now):
            return None  # the client went away: nothing to send
        ready.clear()  # read before the wait: the next pass reads what is there now
        resolved = {key: _recheck(ctx, key, r) for key, r in first.items()}
    return encode_fetch_response(ctx.version, 0, 0, 0, topics)
