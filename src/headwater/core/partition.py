"""One partition: admission (stamp), append, read, and wake-ups for waiting readers.

The partition owns the offset and time sequence: ``base_offset`` is the log's
next offset, ``base_timestamp`` the server clock in microseconds, never going
backwards within a partition. Batches arrive already verified
(``codec.batch.verify``) and leave as stored bytes, sliced only at the edges.
"""

from __future__ import annotations

import struct
from typing import Awaitable, Callable, NamedTuple

from ..codec import batch as batch_codec
from ..storage.api import CorruptBatch, CorruptSegment, PartitionLog, RecoveryOutcome, SegmentInfo, SegmentPolicy
from . import errors

_BASE_COUNT = struct.Struct("<8xQ32xI")  # a stored batch's base_offset (u64 at 8) and message_count (u32 at 48)


class Appended(NamedTuple):
    """What an append did.

    ``base_offset`` / ``message_count``: the stored batch's offsets. ``durable``:
    None when there is nothing to wait for, else an awaitable that completes
    once the batch is on stable storage (the topic's ``enforce_fsync``) and
    raises storage's SyncFailed (a StorageError) when the sync failed: a
    front-end acknowledges the batch only after awaiting it. ``duplicate``: an
    idempotent producer's retry, answered with the original batch's offsets.
    """

    base_offset: int
    message_count: int
    durable: Awaitable[None] | None = None
    duplicate: bool = False


_new_tuple = tuple.__new__  # an Appended without its Python-level __new__ (the send path makes one per batch)


class RefusingLog:
    """Stands in for a partition log storage refused to open (a fenced partition).

    Fail closed: it reports an empty log so listings and stats still show the
    partition, and every read or write raises CorruptData carrying storage's
    reason (file and byte position). The files stay on disk untouched.
    """

    __slots__ = ("refusal",)

    log_start_offset = 0
    next_offset = 0
    size_bytes = 0
    recovery_outcome = RecoveryOutcome()

    def __init__(self, refusal: str):
        self.refusal = refusal

    def _refuse(self, *args, **kwargs):
        raise errors.CorruptData(f"partition fenced: {self.refusal}")

    append = read = offset_for_timestamp = delete_oldest_segments = purge = truncate = _refuse

    def segments(self) -> list[SegmentInfo]:
        return []

    def apply_retention(self, now_us: int) -> int:
        return 0

    def sync(self) -> None:
        pass

    def pending_sync(self) -> None:
        return None

    def set_policy(self, policy: SegmentPolicy) -> None:
        pass

    def close(self) -> None:
        pass


class Partition:
    __slots__ = ("stream_id", "topic_id", "id", "created_at_us", "log", "start_floor", "_last_ts", "_listeners",
                 "messages_in", "bytes_in", "messages_out", "bytes_out")

    def __init__(self, stream_id: int, topic_id: int, partition_id: int, created_at_us: int, log: PartitionLog):
        self.stream_id = stream_id
        self.topic_id = topic_id
        self.id = partition_id
        self.created_at_us = created_at_us
        self.log = log
        self.start_floor = 0  # logical log start (Kafka DeleteRecords); storage drops whole segments only
        self._last_ts = max((s.max_timestamp_us for s in log.segments()), default=0)
        self._listeners: list[Callable[["Partition"], None]] = []
        # metrics (core.metrics_source reads them at scrape time): added to once per batch
        self.messages_in = self.bytes_in = self.messages_out = self.bytes_out = 0

    @property
    def fenced(self) -> str | None:
        """Why storage refused this partition (its reads and writes fail), or None."""
        log = self.log
        return log.refusal if type(log) is RefusingLog else None

    def require_readable(self) -> None:
        """Raise CorruptData (storage's reason) when the partition is fenced.

        A fenced partition reports an empty log (high watermark 0), so a read
        path that returns early at the end of the log would answer "no messages"
        instead of failing closed: every read path calls this first."""
        log = self.log
        if type(log) is RefusingLog:
            log.read()

    # --- offsets ---
    @property
    def high_watermark(self) -> int:
        """The offset the next message gets (one past the newest)."""
        return self.log.next_offset

    @property
    def log_start_offset(self) -> int:
        """The first offset readers see: the storage log start, or the logical floor
        DeleteRecords set when that is later (at most the high watermark)."""
        start = self.log.log_start_offset
        if self.start_floor > start:
            start = min(self.start_floor, self.log.next_offset)
        return start

    @property
    def messages_count(self) -> int:
        return self.log.next_offset - self.log_start_offset

    @property
    def size_bytes(self) -> int:
        return self.log.size_bytes

    @property
    def segments_count(self) -> int:
        return len(self.log.segments())

    # --- writes ---
    def append(self, batch: bytearray | memoryview, now_us: int, *, verified: bool = False) -> Appended:
        """Admit one batch: verify it (unless ``verified``), stamp it in place and append it.

        Returns its offsets and durability (:class:`Appended`). ``batch`` must be writable.
        Raises the batch codec's CodecError subclasses for a batch that fails
        admission (the partition is left unchanged), CorruptData when the
        partition is fenced.
        """
        if type(self.log) is RefusingLog:
            self.log.append(batch)
        base_offset = self.log.next_offset
        ts = now_us if now_us > self._last_ts else self._last_ts
        if verified:
            batch_codec.stamp(batch, self.id, base_offset, ts)
            count = batch_codec.read_header(batch).message_count
        else:
            count = batch_codec.verify_and_stamp(batch, self.id, base_offset, ts).message_count
        durable = self.log.append(batch)
        self._last_ts = ts
        self.messages_in += count
        self.bytes_in += len(batch)
        if self._listeners:
            for listener in list(self._listeners):
                listener(self)
        return _new_tuple(Appended, (base_offset, count, durable, False))

    def add_listener(self, fn: Callable[["Partition"], None]) -> None:
        self._listeners.append(fn)

    def remove_listener(self, fn: Callable[["Partition"], None]) -> None:
        try:
            self._listeners.remove(fn)
        except ValueError:
            pass

    def wake_listeners(self) -> None:
        """Call the listeners without an append: the partition is being deleted, so
        waiting readers look it up again (and find it gone)."""
        for listener in list(self._listeners):
            listener(self)

    # --- reads ---
    def read(
        self, start_offset: int, count: int, max_bytes: int = 1 << 62, *, metered: bool = True,
        nowait: bool = False,
    ) -> tuple[list[bytes | memoryview], int]:
        """Up to ``count`` messages at offsets >= ``start_offset``, as batches sliced at the edges.

        Returns (batches, messages). Offsets below the log start begin at the
        log start. Offsets compaction removed are stepped over: ``count`` counts
        messages, not offsets, so a read across gaps still returns up to
        ``count`` messages (their offsets are ``base_offset + offset_delta``).
        A damaged batch ends the read: the batches before it are returned; a read that
        would begin with it raises CorruptBatch (a CorruptData). Raises CorruptData when
        storage refuses a damaged segment otherwise or the partition is fenced. ``metered``: count the read in ``messages_out`` /
        ``bytes_out`` (False for reads that are not consumers', e.g. the console's).
        ``nowait``: raise storage's NotCached (the bytes being read in on a worker thread)
        instead of waiting for bytes that are not in the page cache.
        """
        log = self.log
        if type(log) is RefusingLog:  # (require_readable, inline: every poll reads here)
            log.read()
        if count <= 0:
            return [], 0
        start = log.log_start_offset  # (the log_start_offset property, inline)
        if self.start_floor > start:
            start = min(self.start_floor, log.next_offset)
        if start_offset > start:
            start = start_offset
        if start >= log.next_offset:
            return [], 0
        try:
            stored = log.read(start, count, max_bytes, nowait=nowait)
        except CorruptBatch as e:  # the read began at a damaged batch (reads before it stop short of it)
            raise self._damaged(e) from e
        except CorruptSegment as e:
            raise errors.CorruptData(str(e)) from e
        out: list[bytes | memoryview] = []
        total = 0
        size = 0
        base_count = _BASE_COUNT.unpack_from
        for b in stored:
            if total >= count:
                break
            base, n = base_count(b, 0)  # (storage returns whole batches: at least a header and a frame)
            lo = 0
            if base < start:  # the first batch: find its first frame at or past start
                floor = start - base
                deltas = batch_codec.frame_offset_deltas(b)
                lo = next((i for i, d in enumerate(deltas) if d >= floor), n)
                if lo == n:
                    continue
            hi = n if lo + count - total >= n else lo + count - total
            if lo == 0 and hi == n:
                out.append(b)
                size += len(b)
            else:
                part = batch_codec.slice_batch(b, lo, hi)
                out.append(part)
                size += len(part)
            total += hi - lo
        if metered:
            self.messages_out += total
            self.bytes_out += size
        return out, total

    def next_offset_after(self, batches: list[bytes | memoryview], start_offset: int) -> int:
        """The offset after the last message of ``batches`` (a :meth:`read` result): what a
        consumer commits next. ``start_offset`` (at least the log start) when empty.
        Gaps compaction left are skipped over, so it may be more than start + count."""
        if not batches:
            return max(start_offset, self.log_start_offset)
        return batch_codec.last_offset(batches[-1]) + 1

    def offset_for_timestamp(self, timestamp_us: int, *, nowait: bool = False) -> int:
        """First offset stored at or after ``timestamp_us``; the high watermark when none.
        ``nowait``: raise storage's NotCached (the index walk's bytes being read in on a worker
        thread) instead of waiting for bytes that are not in the page cache.

        Raises CorruptBatch (a CorruptData) when a damaged batch lies where the answer is
        looked for (its timestamp cannot be believed, so it is not stepped over), CorruptData
        when storage refuses a damaged segment otherwise."""
        try:
            off = self.log.offset_for_timestamp(timestamp_us, nowait=nowait)
        except CorruptBatch as e:
            raise self._damaged(e) from e
        except CorruptSegment as e:
            raise errors.CorruptData(str(e)) from e
        return self.log.next_offset if off is None else off

    def _damaged(self, e: CorruptBatch) -> errors.CorruptBatch:
        """Storage's damaged batch as the core's error, naming this partition."""
        where = (self.stream_id, self.topic_id, self.id)
        return errors.CorruptBatch(f"partition {where}: damaged batch at offset {e.offset}: {e}", where, e.offset)

    def reset(self) -> None:
        """After a purge: the clock and the logical floor start again."""
        self._last_ts = 0
        self.start_floor = 0
