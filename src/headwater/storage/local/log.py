"""A partition's segmented log: append, roll, find by offset or time, trim, truncate.

Source: Iggy ``server/storage-engine.mdx`` ("Segmented log", "Write
pipeline", "Retention and cleanup"). One directory per partition holding
``{start offset:020d}.log`` / ``.index`` pairs (formats in :mod:`.segment`
and :mod:`.index`). All segments but the last are sealed; the last is the
active one, written with ``os.pwrite``. Rotation is soft: after the append
that makes the active segment reach ``segment_size``.

Durability (per :class:`~headwater.storage.api.SegmentPolicy`): when
:meth:`LocalPartitionLog.append` returns, the batch is in the OS page cache,
so a process kill loses nothing. Syncs go through the log's group commit
(:mod:`.flusher`), off the event loop: with ``enforce_fsync`` append returns
a future completing once an fdatasync of the active .log covering the batch
returned (the .index is synced at seal and close: recovery re-adds entries a
crash lost); otherwise a sync nobody awaits starts once
``messages_required_to_save`` messages or ``size_of_messages_required_to_save``
bytes were appended since the last one. Sealing a segment does not sync on
the event loop: its ``.log`` and ``.index`` (and the directory, for the new
segment's entry) are synced by the next group-commit round, asked for at the
rotation and not awaited (inline when no event loop runs); ``sync()`` and
``close()`` sync them too. A failed sync fences the log (SyncFailed).

Blocks ahead (:mod:`.prealloc`, unless the topic's ``preallocate_segments``): once the active
segment is half written, a worker thread makes the next segment's files and reserves their
blocks (``fallocate`` keeping the size); the roll links that spare under the new segment's
name when it is ready (never waiting for it). A segment not made that way has its blocks
reserved a window ahead of its end (64 MiB by default) once it holds 8 MiB, topped up every
half window until the spare it asks for at its first top-up is ready; the log then rolls onto
that spare early (the top-ups run beside the appends). A server-wide budget bounds what all
logs hold reserved. An append refused with ENOSPC / EDQUOT has every reservation given back
and is retried once; a clean close cuts the active segment's reserved tail.

Write failures (ENOSPC, EDQUOT, EIO...): a failed append is undone (index
and log cut back to the last good size) and raised as StorageWriteError; if
even the cut fails, writes are fenced (WritesFenced) until a later append
manages the cut, reads going on meanwhile. A roll whose new segment cannot be
made leaves the sealed segment last ("roll pending"); the next append makes
the new segment first, or fails with StorageWriteError. Nothing restarts:
writes succeed again as soon as the filesystem takes them.

One writer per partition: the object is not thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
from bisect import bisect_right
from collections import OrderedDict

from headwater.storage.api import (
    OffsetMismatch,
    RecoveryOutcome,
    SegmentInfo,
    SegmentPolicy,
    StorageError,
    StorageWriteError,
    WritesFenced,
)

from . import compaction
from .flusher import Flusher, GroupCommit, shared_flusher
from .prealloc import DISK_FULL, EARLY_CHECK_BYTES, ahead_plan, first_check, index_bytes_for
from .recovery import CLEAN_SHUTDOWN, RecoveryReport, recover_partition
from .retention import segments_to_delete
from .segment import MIN_BATCH_SIZE, Segment, fsync_dir, unpack_header
from .writebehind import CHUNK_BYTES, TAIL_BYTES

OPEN_SEALED_SEGMENTS = 4
"""Sealed segments kept open (fd + index in memory) per partition; older ones reopen on demand."""


class LocalPartitionLog:
    """The local-disk :class:`~headwater.storage.api.PartitionLog`.

    Open with :meth:`open` (runs recovery). ``recovery`` holds what recovery
    did, for the caller to log.
    """

    def __init__(
        self,
        directory: str,
        policy: SegmentPolicy,
        segments: list[Segment],
        recovery: RecoveryReport,
        flusher: Flusher | None = None,
    ):
        self.directory = directory
        self.policy = policy
        self.recovery = recovery
        self._segments = segments
        self._open_sealed: OrderedDict[int, Segment] = OrderedDict()
        self._sealed_bytes = sum(s.size for s in segments[:-1])
        self._unsynced_messages = 0
        self._unsynced_bytes = 0
        self._closed = False
        self._fenced: tuple[Segment, tuple, str] | None = None  # (segment, mark to cut back to, why)
        self._generation = 0  # bumped by every change to the sealed segments (a planned compaction checks it)
        self._clean_offset = 0  # compaction: where the dirty part starts (the log start after a restart)
        self._tombstone_due_us = 0  # compaction: when a kept tombstone may go (0 = none kept)
        self.compacting = False
        flusher = flusher or shared_flusher()
        self._write_behind = flusher.write_behind if flusher.write_behind.enabled else None
        self._behind_segment: Segment | None = None  # the segment ``_behind_from`` is a position in
        self._behind_from = 0  # bytes of it before this were handed to write-behind
        self._commit = GroupCommit(
            flusher,
            directory,
            lambda: self._segments[-1].sync_targets(),
            lambda: self._segments[-1].sync(),
        )
        # blocks reserved ahead of the appends, off the loop (:mod:`.prealloc`); None: off (or the
        # topic's preallocate_segments, which extends each segment with posix_fallocate instead)
        self._reservations = (
            None if policy.preallocate_segments else flusher.preallocator.attach(directory, self._trim_active)
        )
        self.marker_removal_pending = False  # open(defer_marker_sync=True): the marker's removal is not yet durable
        self._ahead_at = 1 << 62  # the active segment's size at which _ahead() runs next
        self._asked_to = 0  # the active .log's offset its reservations were asked up to
        self._whole = False  # the active segment was made from a whole spare (every block reserved)
        self._roll_early = False  # roll onto the ready spare after this append (see _ahead)
        self._prepare(segments[-1], 0)

    @classmethod
    def open(
        cls, directory: str, policy: SegmentPolicy, flusher: Flusher | None = None, *, defer_marker_sync: bool = False
    ) -> "LocalPartitionLog":
        """Open the log in ``directory`` (created if absent), recovering existing files.
        Syncs run on ``flusher``'s threads (the process-wide one when None).

        The clean-shutdown marker a clean close left is removed once recovery is done,
        and the directory synced so its removal is durable. ``defer_marker_sync``: that
        directory sync is left to the caller, who opens many logs and syncs their
        directories together (:func:`.bulk.sync_directories`) and then calls
        :meth:`marker_removal_synced`; until then :attr:`marker_removal_pending` is
        true, and an append syncs the directory itself first, so no append is ever
        acknowledged while a power loss could bring the marker back.

        Raises CorruptSegment when recovery refuses the partition (see
        :mod:`.recovery`), OSError on I/O failure.
        """
        os.makedirs(directory, exist_ok=True)
        marker = os.path.join(directory, CLEAN_SHUTDOWN)
        clean = os.path.exists(marker)
        report = recover_partition(directory, policy.index_interval_bytes, clean=clean)
        if clean:  # from here on appends may leave a torn tail again, until the next clean close
            os.unlink(marker)
            if not defer_marker_sync:
                fsync_dir(directory)
        segments = [
            Segment(directory, r.start_offset, r.end_offset, r.size, r.max_timestamp_us, policy.index_interval_bytes)
            for r in report.segments
        ]
        prealloc = policy.segment_size if policy.preallocate_segments else 0
        if segments:
            segments[-1].activate(prealloc)
        else:
            segments.append(Segment.create(directory, 0, policy.index_interval_bytes, prealloc))
        log = cls(directory, policy, segments, report, flusher)
        log.marker_removal_pending = clean and defer_marker_sync
        return log

    def marker_removal_synced(self) -> None:
        """The caller made the removal of the clean-shutdown marker durable (see :meth:`open`)."""
        self.marker_removal_pending = False

    # -- properties ----------------------------------------------------------

    @property
    def recovery_outcome(self) -> RecoveryOutcome:
        """What recovery changed on disk when this log was opened (false when nothing)."""
        return self.recovery.outcome()

    @property
    def log_start_offset(self) -> int:
        """The first offset still stored (moves with retention and segment deletion)."""
        return self._segments[0].start_offset

    @property
    def next_offset(self) -> int:
        """The offset the next appended message gets."""
        return self._segments[-1].end_offset

    @property
    def size_bytes(self) -> int:
        """Bytes of whole batches in all segments."""
        last = self._segments[-1]
        return self._sealed_bytes + (0 if last.sealed else last.size)  # a sealed last one: roll pending

    @property
    def writes_fenced(self) -> str | None:
        """Why writes are refused (a failed append could not be cut back), or None."""
        return None if self._fenced is None else self._fenced[2]

    def set_policy(self, policy: SegmentPolicy) -> None:
        """Swap the policy (e.g. after an UpdateTopic changed expiry or size caps).
        Applies to later appends, reads and retention; existing segments stay."""
        self.policy = policy

    # -- writes --------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"{self.directory}: partition log is closed")

    def append(self, batch: bytes | bytearray | memoryview) -> asyncio.Future | None:
        """Append one stamped batch at ``next_offset``.

        Checks only what storage relies on (admission verified the batch):
        ``base_offset`` (bytes 8..16) equals ``next_offset``, ``batch_length``
        (32..40) equals ``len(batch)``, ``message_count`` (48..52) is nonzero.
        Returns, with ``enforce_fsync``, a future completing once a sync covering
        the batch returned (SyncFailed if it failed); else None (also when no
        event loop runs: the sync was then done inline). Raises OffsetMismatch,
        StorageError (malformed header, closed log), StorageWriteError (the write
        failed; the log is as before the call), WritesFenced (see the module doc)
        or SyncFailed (a failed sync fenced the log).
        """
        if self._closed:
            self._check_open()
        self._commit.check()
        if self.marker_removal_pending:  # never left so by the engine: it syncs right after opening
            fsync_dir(self.directory)
            self.marker_removal_pending = False
        length = len(batch)
        if length < MIN_BATCH_SIZE:
            raise StorageError(f"batch of {length} bytes is shorter than a header and one frame")
        base_offset, base_ts, batch_length, count = unpack_header(batch, 0)
        if self._fenced is not None:
            self._repair()
        if self._segments[-1].sealed:  # the last roll could not make its new segment
            self._open_next_segment()
        elif self.policy.segment_roll_us and self._roll_due(base_ts):
            try:
                self._rotate()
            except (OSError, StorageError):
                pass  # append to the old active segment; the next append tries again
            if self._segments[-1].sealed:
                self._open_next_segment()
        active = self._segments[-1]
        if base_offset != active.end_offset:
            raise OffsetMismatch(f"batch base_offset {base_offset} != next offset {active.end_offset}")
        if batch_length != length or count == 0:
            raise StorageError(f"batch_length {batch_length} / message_count {count} for {length} bytes")
        mark = active.mark()
        try:
            active.append(batch, base_offset, base_ts, count)
        except OSError as exc:
            failed = self._undo(active, mark, exc)
            if exc.errno not in DISK_FULL or self._reservations is None or self._fenced is not None:
                raise failed from exc
            # out of space while blocks may be reserved ahead (.prealloc): give every reservation
            # back and try once more; a second failure is the disk's answer
            self._reservations.owner.release_all()
            try:
                active.append(batch, base_offset, base_ts, count)
            except OSError as again:
                raise self._undo(active, mark, again) from again
        if active.size >= self._ahead_at:
            self._ahead(active)
        policy = self.policy
        durable = None
        if policy.enforce_fsync:
            durable = self._commit.request(wait=True)
        else:
            self._unsynced_messages += count
            self._unsynced_bytes += length
            if (
                self._unsynced_messages >= policy.messages_required_to_save
                or self._unsynced_bytes >= policy.size_of_messages_required_to_save
            ):
                self._unsynced_messages = self._unsynced_bytes = 0
                self._commit.request(wait=False)
        if self._write_behind is not None:
            self._hand_over(active, CHUNK_BYTES)
        if active.size >= policy.segment_size or self._roll_early:
            self._roll_early = False
            try:
                self._rotate()
            except (OSError, StorageError):
                pass  # the batch is stored; the next append makes the new segment, or fails
        return durable

    def _prepare(self, active: Segment, reserved: int) -> None:
        """``active`` just became the active segment, ``reserved`` bytes of its .log reserved
        (a spare's window, :mod:`.prealloc`): :meth:`_ahead` runs once it holds
        ``ACTIVE_AFTER_BYTES`` (or half of ``segment_size`` when smaller; :func:`.prealloc.first_check`),
        so a partition nothing or little is written to reserves nothing."""
        if self._reservations is None or active.sealed:
            return
        self._asked_to = reserved
        self._whole = reserved >= self.policy.segment_size
        self._roll_early = False
        self._ahead_at = first_check(self.policy.segment_size, self._reservations.window, reserved)

    def _ahead(self, active: Segment) -> None:
        """A check point of the active segment (:func:`.prealloc.ahead_plan`): have it reserved
        off the loop up to a window ahead of its end (never past ``segment_size``; nothing to
        do in a segment made from a whole spare), and ask for the next segment's spare once it
        is half written; next check half a window on.

        A segment not made from a whole spare (a partition's first, the active one after a
        restart, a roll that came before its spare was ready) is reserved beside the appends,
        where each ``fallocate`` holds the inode's lock the next ``pwrite`` waits for. So it
        asks for the spare at its first top-up already, and rolls onto that spare as soon as
        it is ready (:data:`.prealloc.EARLY_CHECK_BYTES` between check points meanwhile), when
        more than a window of the segment is left: a short segment, then whole ones, instead
        of a top-up every half window to its end. Until the spare is ready, the top-ups go on."""
        r = self._reservations
        if r is None:
            self._ahead_at = 1 << 62
            return
        size = self.policy.segment_size
        interval = self.policy.index_interval_bytes
        asked_to = self._asked_to
        reserve_to, self._ahead_at, spare = ahead_plan(active.size, asked_to, size, r.window)
        early = not self._whole and r.reservable and size - active.size > r.window
        if early:
            ready = r.spare
            if ready is not None and ready.reserved >= size:  # a whole spare: this segment ends here
                self._roll_early = True
                return
            if asked_to > 0 or spare:  # a top-up is due: the partition is being written
                r.want_spare(size, index_bytes_for(size, interval))
            if r.asked and r.spare is None:  # being made: look again soon
                self._ahead_at = min(self._ahead_at, active.size + EARLY_CHECK_BYTES)
                if asked_to - active.size >= r.window // 4:
                    reserve_to = asked_to  # room left: no top-up (beside the appends) yet
        if reserve_to > asked_to:
            self._asked_to = reserve_to
            try:
                fds = active.dup_fds()
            except OSError:
                fds = []
            r.reserve_active(list(zip(fds, (reserve_to, index_bytes_for(reserve_to, interval)))),
                             lambda: not active.sealed)
        if spare:  # a whole segment: reserved where nothing appends (.prealloc says why)
            r.want_spare(size, index_bytes_for(size, interval))

    def _trim_active(self) -> None:
        """Free the blocks reserved past the active segment's end (:meth:`.prealloc.Preallocator.release_all`)."""
        active = self._segments[-1]
        if not active.sealed:
            active.trim_reserved()

    def _hand_over(self, segment: Segment, at_least: int, sealed: bool = False) -> None:
        """Give write-behind (:mod:`.writebehind`) the bytes of ``segment`` appended since
        the last hand-over, once there are ``at_least`` of them: all of a ``sealed`` one; of
        the active one, up to the last ``TAIL_BYTES`` boundary (the folio still being
        appended to stays out of writeback: see :data:`.writebehind.TAIL_BYTES`)."""
        if segment is not self._behind_segment or self._behind_from > segment.size:
            self._behind_segment, self._behind_from = segment, 0  # a new active segment, or cut back
        size = segment.size
        end = size if sealed else size - size % TAIL_BYTES
        if size - self._behind_from >= at_least and end > self._behind_from:
            self._write_behind.add(segment.log_path, self._behind_from, end)  # type: ignore[union-attr]
            self._behind_from = end

    def _roll_due(self, now_us: int) -> bool:
        """Whether the active segment's first batch is ``segment_roll_us`` old (segment.ms)."""
        active = self._segments[-1]
        first = active.first_timestamp_us()
        return active.size > 0 and first is not None and first + self.policy.segment_roll_us <= now_us

    def roll_if_due(self, now_us: int) -> bool:
        """Seal a non-empty active segment whose first batch is ``segment_roll_us`` old
        even when no append comes (so an idle compacted topic gets cleaned). Returns
        whether it rolled. Raises StorageError / StorageWriteError as a roll does."""
        self._check_open()
        if not self.policy.segment_roll_us or self._segments[-1].sealed or not self._roll_due(now_us):
            return False
        self._rotate()
        return True

    def _undo(self, active: Segment, mark: tuple, exc: OSError) -> StorageWriteError:
        """Cut a failed append back to ``mark``; the error to raise (WritesFenced when
        the cut failed too: later appends retry it first)."""
        failed = StorageWriteError.from_os_error(f"{active.log_path}: append at byte {mark[0]} failed", exc)
        try:
            active.rollback(mark)
        except OSError as cut_exc:
            why = f"{failed}; cutting it back failed too: {cut_exc}"
            self._fenced = (active, mark, why)
            return WritesFenced(f"{self.directory}: writes fenced: {why}", exc.errno)
        return failed

    def _repair(self) -> None:
        """Retry the cut a fenced partition still owes; raises WritesFenced while it fails."""
        seg, mark, why = self._fenced  # type: ignore[misc]
        try:
            seg.rollback(mark)
        except OSError as exc:
            raise WritesFenced(f"{self.directory}: writes fenced: {why}; retrying the cut: {exc}", exc.errno) from exc
        self._fenced = None

    def pending_sync(self) -> asyncio.Future | None:
        """A future completing once everything appended so far is synced (SyncFailed
        if that fails), or None when no sync is pending. Raises SyncFailed when fenced."""
        self._check_open()
        return self._commit.barrier()

    def _rotate(self) -> None:
        """Seal the active segment and open the next. The sealed segment's fdatasync is
        left to the group commit (a round asked for here, not awaited; inline when no
        event loop runs): it covers the waiters queued before the seal too."""
        active = self._segments[-1]
        r = self._reservations
        try:
            held = active.dup_fds() if r is not None else []  # for releasing its reserved blocks
        except OSError:
            held = []
        try:
            fds = active.seal()  # cuts the preallocated tail; no sync here
        except OSError as exc:
            for fd in held:
                os.close(fd)
            if exc.errno in (errno.EMFILE, errno.ENFILE):  # its dup: no fd free; nothing failed on
                # disk, the segment stays active and the next append (or roll_if_due) rolls again
                raise StorageError(f"{active.log_path}: roll put off: {exc.strerror}") from exc
            raise self._commit.fence(exc) from exc
        if held:
            size = active.size
            r.release_tail(held, size, lambda: active.sealed and active.size == size)  # type: ignore[union-attr]
        self._sealed_bytes += active.size
        self._unsynced_messages = self._unsynced_bytes = 0
        self._commit.add_sealed(fds, active.log_path)
        if self._write_behind is not None and active is self._behind_segment:
            self._hand_over(active, 1, sealed=True)  # the sealed segment's last bytes
        try:
            # the directory entry of the new segment: synced by the same round (a directory
            # fsync waits for the journal, which may be writing the sealed segment's data)
            dir_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            dir_fd = None
        try:
            self._open_next_segment(sync_dir=dir_fd is None)
        finally:
            if dir_fd is not None:
                self._commit.add_sealed([dir_fd], self.directory)
            self._commit.request(wait=False)

    def _open_next_segment(self, sync_dir: bool = True) -> None:
        """Create the active segment after the sealed last one (raises StorageWriteError).
        ``sync_dir`` false: the caller has the directory synced (see :meth:`_rotate`)."""
        prealloc = self.policy.segment_size if self.policy.preallocate_segments else 0
        start = self._segments[-1].end_offset
        interval = self.policy.index_interval_bytes
        spare = self._reservations.take_spare() if self._reservations is not None else None
        seg, reserved = None, 0
        if spare is not None:  # made and reserved off the loop (.prealloc): linked under the segment's names
            try:
                seg = Segment.adopt(self.directory, start, interval, spare.log_path, spare.index_path)
            except (StorageError, StorageWriteError):
                spare.discard()  # create() below says what is wrong
                self._reservations.forget_files(spare.inos)  # type: ignore[union-attr]
            else:
                reserved = spare.reserved
                if sync_dir:
                    try:
                        fsync_dir(self.directory)
                    except OSError as exc:  # undone, as create() undoes a segment it half made:
                        seg.delete()  # left under the segment's names, it would block every later roll
                        self._reservations.forget_files(spare.inos)  # type: ignore[union-attr]
                        raise StorageWriteError.from_os_error(f"{seg.log_path}: cannot create the segment", exc) from exc
        if seg is None:
            seg = Segment.create(self.directory, start, interval, prealloc, sync_dir)
        self._segments.append(seg)
        self._prepare(seg, reserved)

    def sync(self) -> None:
        """fdatasync now, on this thread: segments sealed and not yet synced by a round
        (.log and .index), then the active segment's .log and .index. Raises SyncFailed
        (and fences) on failure."""
        self._check_open()
        self._commit.sync_inline()
        self._unsynced_messages = self._unsynced_bytes = 0

    # -- reads ---------------------------------------------------------------

    def _touch(self, seg: Segment) -> None:
        """Keep at most OPEN_SEALED_SEGMENTS sealed segments open (LRU)."""
        if not seg.sealed:
            return
        key = seg.start_offset
        cache = self._open_sealed
        if key in cache:
            cache.move_to_end(key)
            return
        cache[key] = seg
        while len(cache) > OPEN_SEALED_SEGMENTS:
            _, old = cache.popitem(last=False)
            old.release()

    def _find(self, offset: int) -> int:
        """Index of the segment whose range starts at or below ``offset`` (0 if none)."""
        segments = self._segments
        last = len(segments) - 1
        if segments[last].start_offset <= offset:  # a reader at the tail: the active segment
            return last
        return max(0, bisect_right(segments, offset, key=lambda s: s.start_offset) - 1)

    def read(self, start_offset: int, max_messages: int, max_bytes: int, *, nowait: bool = False) -> list[memoryview]:
        """Whole stored batches holding offsets >= ``start_offset``, oldest first.

        The first batch may begin before ``start_offset``; a start below
        ``log_start_offset`` reads from the log start. Stops once offsets
        ``start_offset .. start_offset + max_messages - 1`` are covered, or
        before a batch that would take the total past ``max_bytes``; the first
        batch is always returned when one exists. Each item is a read-only
        memoryview of one batch read with ``os.pread``. With
        ``validate_checksum`` each batch is re-verified (``batch.verify``).
        Raises CorruptSegment (file and byte position in the message). ``nowait``: raises
        NotCached, after starting to read them in on a worker thread, rather than wait
        for bytes that are not in the page cache (:mod:`.readahead`); read again once its
        future is done.
        """
        self._check_open()
        out: list[memoryview] = []
        if start_offset >= self.next_offset:
            return out
        start_offset = max(start_offset, self.log_start_offset)
        wanted = max(1, max_messages)
        validate = self.policy.validate_checksum
        taken = 0
        segments = self._segments
        for i in range(self._find(start_offset), len(segments)):
            seg = segments[i]
            if seg.size == 0 or seg.end_offset <= start_offset:
                continue
            self._touch(seg)
            used, wanted = seg.read(start_offset, wanted, max_bytes - taken, not out, validate, out, nowait)
            taken += used
            if wanted <= 0:
                break
        return out

    def offset_for_timestamp(self, timestamp_us: int, *, nowait: bool = False) -> int | None:
        """base_offset of the first batch whose base_timestamp >= ``timestamp_us``, or None.

        Assumes base timestamps do not decrease along the log (segments are
        picked by their newest timestamp, batches by the sparse index). ``nowait``: raises
        NotCached, a worker reading the batch headers' chunk in (:mod:`.readahead`), rather
        than wait for bytes that are not in the page cache; look up again once its future
        is done. A damaged batch on the way (re-verified when the policy's
        ``validate_checksum``) raises CorruptBatch: it is never stepped over (its own
        timestamp may be the one asked for).
        """
        self._check_open()
        for seg in self._segments:
            if seg.size == 0 or seg.max_timestamp_us < timestamp_us:
                continue
            self._touch(seg)
            found = seg.offset_for_timestamp(timestamp_us, self.policy.validate_checksum, nowait)
            if found is not None:
                return found
        return None

    def segments(self) -> list[SegmentInfo]:
        """The segments, oldest first; the last is the active one."""
        return [s.info() for s in self._segments]

    # -- deletion ------------------------------------------------------------

    def delete_oldest_segments(self, count: int) -> int:
        """Delete up to ``count`` oldest sealed segments; returns how many were deleted.
        ``log_start_offset`` becomes the first remaining segment's start."""
        self._check_open()
        n = max(0, min(count, len(self._segments) - 1))
        if n == 0:
            return 0
        for seg in self._segments[:n]:
            self._open_sealed.pop(seg.start_offset, None)
            seg.delete()
            self._sealed_bytes -= seg.size
        del self._segments[:n]
        self._generation += 1
        fsync_dir(self.directory)
        return n

    def apply_retention(self, now_us: int) -> int:
        """Delete sealed segments past the policy's expiry or size budget (see
        :mod:`.retention`); ``now_us`` is the current time in µs. Returns the count."""
        self._check_open()
        return self.delete_oldest_segments(segments_to_delete(self.segments(), self.policy, now_us))

    def purge(self) -> None:
        """Delete every segment and start again empty at offset 0.

        Segments go oldest first, so a crash midway leaves a consistent log
        that merely starts later. Raises StorageWriteError when the new
        segment cannot be made: the log is then empty and the next append
        makes it.
        """
        self._check_open()
        r = self._reservations
        # (.prealloc: the deleted files' reservations leave the budget's ledger with them)
        with r.lock if r is not None else contextlib.nullcontext():
            for seg in self._segments:
                seg.delete()
            if r is not None:
                r.forget_active()
        self._open_sealed.clear()
        self._segments = []
        self._generation += 1
        self._clean_offset = self._tombstone_due_us = 0
        self._fenced = None
        self._sealed_bytes = 0
        self._unsynced_messages = self._unsynced_bytes = 0
        # an empty sealed stand-in first: if creating segment 0 fails (StorageWriteError), the log
        # is empty with a roll pending, and the next append creates the segment
        self._segments.append(Segment(self.directory, 0, 0, 0, 0, self.policy.index_interval_bytes))
        fsync_dir(self.directory)
        self._open_next_segment()
        del self._segments[0]

    def truncate(self, offset: int) -> None:
        """Drop every message at or after ``offset``; the batch holding ``offset``
        goes whole, so ``next_offset`` becomes that batch's base_offset.

        Later segments are deleted; the segment holding the cut is shortened
        (files really cut and synced) and becomes the active one. An offset at
        or past ``next_offset`` changes nothing; one below ``log_start_offset``
        empties the log, which then restarts at ``log_start_offset``.
        """
        self._check_open()
        if offset >= self.next_offset:
            return
        if self._fenced is not None:
            self._repair()
        offset = max(offset, self.log_start_offset)
        self._generation += 1
        self._clean_offset = min(self._clean_offset, offset)
        i = self._find(offset)
        seg = self._segments[i]
        position, cut_offset, max_ts = seg.cut_point(offset)
        for later in reversed(self._segments[i + 1 :]):  # newest first: a crash leaves a shorter log
            self._open_sealed.pop(later.start_offset, None)
            later.delete()
        del self._segments[i + 1 :]
        self._open_sealed.pop(seg.start_offset, None)
        r = self._reservations
        # (.prealloc: a release of this segment's reserved blocks may not run meanwhile)
        with r.lock if r is not None else contextlib.nullcontext():
            seg.truncate(position, cut_offset, max_ts)
            if seg.sealed:
                seg.activate(0)
            if r is not None:
                r.forget_active()  # the cut freed what was reserved past it; later segments are gone
        self._prepare(seg, 0)
        self._sealed_bytes = sum(s.size for s in self._segments[:-1])
        self._unsynced_messages = self._unsynced_bytes = 0
        fsync_dir(self.directory)

    # -- compaction ------------------------------------------------------------

    def plan_compaction(
        self,
        now_us: int,
        max_dirty_bytes: int = compaction.DEFAULT_MAX_DIRTY_BYTES,
        limit_offset: int | None = None,
        pinned: list[tuple[int, int]] | None = None,
    ) -> compaction.Job | None:
        """A compaction pass due now (see :mod:`.compaction`), or None. The job is run
        with :func:`compaction.run` (off the event loop) and applied with
        :meth:`finish_compaction`; one at a time per log (``compacting``).
        ``limit_offset``: clean only segments ending at or below it; ``pinned``:
        inclusive ``(first, last)`` offset ranges that shadow nothing and are kept."""
        self._check_open()
        if self.compacting or self._fenced is not None:
            return None
        clean = max(self._clean_offset, self.log_start_offset)
        planned = compaction.plan(
            self.segments(), self.policy, clean, self._tombstone_due_us, now_us, max_dirty_bytes, limit_offset
        )
        if planned is None:
            return None
        sources, dirty_from = planned
        self.compacting = True
        return compaction.Job(
            self.directory,
            self._generation,
            sources,
            dirty_from,
            sources[-1].end_offset,
            now_us,
            self.policy.delete_retention_us,
            self.policy.index_interval_bytes,
            pinned=sorted(pinned or ()),
        )

    def run_compaction(self, job: compaction.Job) -> compaction.Job:
        """The heavy part of a pass (:func:`compaction.run`): reads and writes files only,
        so it runs in a worker thread. It stops early when the log is closed."""
        return compaction.run(job, lambda: self._closed)

    def finish_compaction(self, job: compaction.Job | None, step=lambda _: None) -> int:
        """Swap a finished job's segments in (:func:`compaction.swap_files`) and replace them
        in memory; returns the messages removed. A job made stale by a deletion,
        purge or truncation since it was planned is discarded (returns 0). ``None``
        (the run failed) only clears ``compacting``. ``step``: see ``swap_files``."""
        self.compacting = False
        if job is None:
            return 0
        if self._closed or job.generation != self._generation or len(job.results) != len(job.sources):
            compaction.discard(job)
            return 0
        by_start = {s.start_offset: i for i, s in enumerate(self._segments)}
        compaction.swap_files(self.directory, [r.start_offset for r in job.results], step)
        for r in job.results:
            i = by_start[r.start_offset]
            old = self._segments[i]
            self._open_sealed.pop(old.start_offset, None)
            old.release()
            self._segments[i] = Segment(
                self.directory, r.start_offset, old.end_offset, r.size, r.max_timestamp_us, self.policy.index_interval_bytes
            )
            self._sealed_bytes += r.size - old.size
        self._generation += 1
        self._clean_offset = job.clean_offset
        self._tombstone_due_us = job.tombstone_due_us
        return job.removed_messages

    def final_sync_fds(self) -> list[int] | None:
        """For a caller closing many logs at once (:meth:`.engine.LocalEngine.close`): the fds
        the final sync of :meth:`close` would ``fdatasync`` (sealed segments not yet synced, the
        active .log, its .index when entries were written since its last sync; pending index
        entries are written first), or None when the log is closed or fenced (nothing to
        vouch for). The caller fdatasyncs them (on any thread; the fds stay open, as long
        as nothing else runs on this log meanwhile) and passes the outcome to
        :meth:`close` as ``synced``. Raises OSError when writing the index entries failed."""
        if self._closed or self._commit.fenced is not None:
            return None
        return self._commit.sealed_fds() + self._segments[-1].final_sync_fds()

    def close(self, *, synced: OSError | bool | None = None, mark: bool = True) -> bool:
        """Sync and close files; the object is unusable afterwards (StorageError).

        ``synced``: None, the final sync runs here; True, the caller fdatasynced every fd
        :meth:`final_sync_fds` returned, just before, and all succeeded; an OSError, one of
        them failed with it (the log is fenced as if this sync had failed). With ``mark``
        the clean-shutdown marker is written after a good final sync and its directory
        synced; without, the caller does both (:mod:`.bulk`). Returns whether the final
        sync succeeded (then, and only then, the marker may be written).
        Raises SyncFailed when the final sync fails (the files are closed anyway)."""
        if self._closed:
            return False
        done = False
        try:
            if self._commit.fenced is None:  # a fenced log's unsynced bytes are not vouched for
                if synced is None:
                    self._commit.sync_inline()  # a failure fences (a round in flight fails too) and raises
                elif synced is True:
                    self._commit.synced_by_caller()
                    self._segments[-1].synced_by_caller()
                else:  # never retried: the failed fdatasync consumed the error (the next one would pass)
                    raise self._commit.fence(synced)
                done = True
        finally:
            if self._reservations is not None:
                self._reservations.close()  # its spare deleted, the active segment's reserved tail cut
            for seg in self._segments:
                seg.release()
            self._open_sealed.clear()
            self._closed = True
            self._commit.close(done)
        # every byte is synced: the next open may not take a bad tail for a torn write
        # (recovery, module doc 8); after a fenced log or a failed sync no marker is left
        # (nor when a round that returned meanwhile failed: the close above settled it)
        done = done and self._commit.fenced is None
        if done and mark and os.path.isdir(self.directory):
            fd = os.open(os.path.join(self.directory, CLEAN_SHUTDOWN), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.close(fd)
            fsync_dir(self.directory)
        return done
