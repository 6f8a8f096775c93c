"""Log compaction of sealed segments: keep the newest message per key, crash-safe swap.

Kafka's log cleaner semantics (``cleanup.policy=compact``) over the Iggy batch
layout. A *pass* over one partition:

1. Plan (event loop, :func:`plan`): the *cleanable* range is the sealed
   segments from the log start up to, not including, the first sealed segment
   whose newest message is younger than ``min_compaction_lag_us`` (the active
   segment is never touched). The *dirty* part starts at the log's clean
   offset (where the last pass ended; the log start after a restart). A pass
   runs when dirty bytes / cleanable bytes >= ``min_cleanable_dirty_ratio``,
   when a dirty segment is older than ``max_compaction_lag_us``, or when a
   tombstone kept by the last pass has outlived ``delete_retention_us``. The
   dirty part is capped at ``max_dirty_bytes`` (bounded work per pass).
2. Build and write (worker thread, :func:`run`): an offset map (xxh3-128 of
   the key -> newest offset) over the dirty part, then every cleanable
   segment is rewritten to ``{stem}.log.cleaned`` / ``{stem}.index.cleaned``:
   a message is kept unless a newer message with its key is in the map, and a
   tombstone (:mod:`headwater.codec.record_key`) that is the newest for its
   key is dropped once its batch's ``base_timestamp`` is ``delete_retention_us``
   old. Messages without a key are kept. Batches keep ``base_offset``,
   timestamps and their surviving frames byte-for-byte (``batch.select_frames``
   recomputes length, count and checksum), so offsets are preserved with gaps
   inside and between batches. The new index is rebuilt with the same sparse
   rule. Both files are fsynced. A segment left empty stays as an empty pair
   (its start offset still names the range).
3. Swap (event loop, :func:`swap_files` then the log replaces its in-memory
   segments): per segment ``index.cleaned -> index.swap``,
   ``log.cleaned -> log.swap`` (a segment's commit point: its ``.log.swap``
   exists), oldest segment first, fsync the directory, then ``index.swap -> index``, ``log.swap -> log``,
   fsync the directory. :func:`finish_interrupted` (called by recovery before
   anything else) completes a swap whose ``.log.swap`` exists and deletes every
   ``.cleaned`` file and any ``.index.swap`` without its ``.log.swap``: a crash
   at any point leaves each segment either old or new, never a mix. Any subset
   of a pass's segments swapped is a valid log: a message is only removed for
   a newer one with its key, which its own (later) segment keeps in both
   versions; a tombstone only goes with the older values before it, and older
   segments are swapped first.

Pinned offsets and the upper bound (the owner's, e.g. transactions): :func:`plan`
takes ``limit_offset`` and cleans only sealed segments that end at or below it
(Kafka's cleaner stops at the last stable offset: data of an undecided transaction
is never cleaned, nor does it shadow anything). :class:`Job` carries ``pinned``,
sorted inclusive ``(first, last)`` offset ranges whose messages are treated as
keyless: they never enter the offset map (so they shadow no other message) and are
always kept byte-for-byte (so no range the owner tracks changes; Kafka would drop
aborted records, we keep them). Storage knows nothing of why they are pinned.

Readers on the event loop never see a half-swapped segment: the renames and
the in-memory replacement run in one synchronous step there (a reader of a
sealed segment opens its files by path, so renaming in the worker would race).
"""

from __future__ import annotations

import bisect
import os
from array import array
from dataclasses import dataclass, field
from typing import Callable

import xxhash

from headwater.codec import batch as codec_batch
from headwater.codec.batch import BATCH_HEADER_SIZE
from headwater.codec.record_key import compaction_key
from headwater.storage.api import CorruptSegment, SegmentPolicy

from .index import entries_to_bytes
from .segment import INDEX_SUFFIX, LOG_SUFFIX, MIN_BATCH_SIZE, ChunkReader, fsync_dir, pwrite_all, segment_name, unpack_header

CLEANED = ".cleaned"
SWAP = ".swap"
DEFAULT_MAX_DIRTY_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Source:
    """One sealed segment a pass reads: its range and size when planned."""

    start_offset: int
    end_offset: int
    size: int
    max_timestamp_us: int


@dataclass(slots=True)
class Result:
    """One rewritten segment, its ``.cleaned`` files written and fsynced."""

    start_offset: int
    end_offset: int
    size: int
    max_timestamp_us: int
    removed_messages: int


@dataclass(slots=True)
class Job:
    """A planned pass: what the worker reads and writes, and what it produced."""

    directory: str
    generation: int
    sources: list[Source]
    dirty_from: int  # index into sources: the first dirty segment
    clean_offset: int  # where the next pass's dirty part starts (end of the last source)
    now_us: int
    delete_retention_us: int
    index_interval_bytes: int
    results: list[Result] = field(default_factory=list)
    tombstone_due_us: int = 0  # earliest time a kept tombstone may be removed (0 = none kept)
    removed_messages: int = 0
    pinned: list[tuple[int, int]] = field(default_factory=list)  # sorted inclusive offset ranges: keyless, kept


def plan(
    segments: list,  # SegmentInfo-like, oldest first; the last is the active one
    policy: SegmentPolicy,
    clean_offset: int,
    tombstone_due_us: int,
    now_us: int,
    max_dirty_bytes: int = DEFAULT_MAX_DIRTY_BYTES,
    limit_offset: int | None = None,
) -> tuple[list[Source], int] | None:
    """The cleanable sources and the index of the first dirty one, or None when no
    pass is due (see the module doc). ``limit_offset``: only segments whose
    ``end_offset`` (one past their last offset) is at most this are cleanable
    (None: no bound). Pure: no I/O."""
    if not policy.compact:
        return None
    sources: list[Source] = []
    dirty_bytes = 0
    dirty_from = -1
    forced = False
    lag_floor = now_us - policy.min_compaction_lag_us
    for seg in segments[:-1]:
        if not seg.sealed or seg.max_timestamp_us > lag_floor:
            break
        if limit_offset is not None and seg.end_offset > limit_offset:
            break
        if seg.end_offset > clean_offset:  # dirty
            if dirty_from < 0:
                dirty_from = len(sources)
            if dirty_bytes and dirty_bytes + seg.size_bytes > max_dirty_bytes:
                break
            dirty_bytes += seg.size_bytes
            if policy.max_compaction_lag_us and seg.max_timestamp_us + policy.max_compaction_lag_us <= now_us:
                forced = True
        sources.append(Source(seg.start_offset, seg.end_offset, seg.size_bytes, seg.max_timestamp_us))
    if not sources:
        return None
    total = sum(s.size for s in sources)
    tombstones_due = bool(tombstone_due_us) and tombstone_due_us <= now_us
    if dirty_from < 0:
        if not tombstones_due:
            return None
        dirty_from = len(sources)
    elif not forced and not tombstones_due and dirty_bytes < policy.min_cleanable_dirty_ratio * total:
        return None
    if not dirty_bytes and not tombstones_due:
        return None
    return sources, dirty_from


def _batches(fd: int, size: int, path: str):
    """(position, view) of each batch in ``[0, size)`` of a sealed ``.log``, verified
    (offset deltas may have gaps). Raises CorruptSegment."""
    reader = ChunkReader(fd, size, 1 << 20)
    position = 0
    while position < size:
        head = reader.view(position, BATCH_HEADER_SIZE)
        if len(head) < BATCH_HEADER_SIZE:
            raise CorruptSegment(f"{path}: batch at byte {position}: header cut at the end")
        length = unpack_header(head, 0)[2]
        if length < MIN_BATCH_SIZE or position + length > size:
            raise CorruptSegment(f"{path}: batch at byte {position}: batch_length {length} does not fit")
        view = reader.view(position, length)
        try:
            codec_batch.verify(view, check_offset_deltas=False)
        except Exception as exc:
            raise CorruptSegment(f"{path}: batch at byte {position}: verify failed: {exc}") from exc
        yield position, view
        position += length


def pinned_at(pinned: list[tuple[int, int]], offset: int) -> bool:
    """Whether ``offset`` is inside one of the sorted inclusive ``(first, last)`` ranges."""
    i = bisect.bisect_right(pinned, (offset, 1 << 63)) - 1
    return i >= 0 and pinned[i][0] <= offset <= pinned[i][1]


def _keys(view: memoryview, base_offset: int, pinned: list[tuple[int, int]]):
    """(offset, key digest or None, tombstone) per frame of one batch; a frame at a
    pinned offset reports no key (it shadows nothing and is kept)."""
    digest = xxhash.xxh3_128_digest
    for frame in codec_batch.iter_frames(view):
        offset = base_offset + frame.offset_delta
        if pinned and pinned_at(pinned, offset):
            yield offset, None, False
            continue
        key, tombstone = compaction_key(frame.user_headers, frame.id, frame.payload)
        yield offset, None if key is None else digest(key), tombstone


def _open(directory: str, start: int) -> tuple[int, str]:
    path = os.path.join(directory, segment_name(start) + LOG_SUFFIX)
    return os.open(path, os.O_RDONLY), path


def run(job: Job, should_stop: Callable[[], bool] = lambda: False) -> Job:
    """Build the offset map and write every source's ``.cleaned`` pair (worker thread).

    ``job.results`` gets one :class:`Result` per source, in order. Returns the
    job; on a stop request or an error the ``.cleaned`` files written so far
    are removed (:func:`discard`) and the error propagates (CorruptSegment,
    OSError, FileNotFoundError when retention deleted a source meanwhile).
    """
    try:
        newest: dict[bytes, int] = {}
        for src in job.sources[job.dirty_from :]:
            fd, path = _open(job.directory, src.start_offset)
            try:
                for _, view in _batches(fd, src.size, path):
                    base = unpack_header(view, 0)[0]
                    for offset, key, _ in _keys(view, base, job.pinned):
                        if key is not None:
                            newest[key] = offset
            finally:
                os.close(fd)
            if should_stop():
                raise InterruptedError("compaction stopped")
        for src in job.sources:
            job.results.append(_rewrite(job, src, newest))
            if should_stop():
                raise InterruptedError("compaction stopped")
        return job
    except BaseException:
        discard(job)
        raise


def keep_indices(frames: list[tuple[int, bytes | None, bool]], newest: dict, expired_before_us: int, base_ts: int) -> list[int]:
    """Which frames of one batch survive: ``frames`` is (offset, key digest, tombstone)
    per frame, ``newest`` the offset map. A frame is dropped when a newer offset
    holds its key, or when it is a tombstone, the newest for its key, in a batch
    stamped (``base_ts``, µs) before ``expired_before_us``. Frames without a key stay."""
    keep = []
    for i, (offset, key, tombstone) in enumerate(frames):
        if key is not None:
            latest = newest.get(key, -1)
            if offset < latest:
                continue
            if tombstone and base_ts < expired_before_us:
                continue
        keep.append(i)
    return keep


def _rewrite(job: Job, src: Source, newest: dict[bytes, int]) -> Result:
    stem = os.path.join(job.directory, segment_name(src.start_offset))
    fd, path = _open(job.directory, src.start_offset)
    log_out = os.open(stem + LOG_SUFFIX + CLEANED, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    entries = array("Q")
    position = 0
    last_indexed = -1
    max_ts = 0
    removed = 0
    expired_before = job.now_us - job.delete_retention_us
    try:
        for _, view in _batches(fd, src.size, path):
            base, base_ts, _, count = unpack_header(view, 0)
            frames = list(_keys(view, base, job.pinned))
            keep = keep_indices(frames, newest, expired_before, base_ts)
            for i in keep:
                if frames[i][2] and frames[i][1] is not None:  # a tombstone kept: note when it expires
                    due = base_ts + job.delete_retention_us
                    job.tombstone_due_us = due if not job.tombstone_due_us else min(job.tombstone_due_us, due)
            removed += count - len(keep)
            if not keep:
                continue
            data = codec_batch.select_frames(view, keep)
            if last_indexed < 0 or position - last_indexed >= job.index_interval_bytes:
                entries.extend((base, base_ts, position))
                last_indexed = position
            pwrite_all(log_out, data, position)
            position += len(data)
            max_ts = max(max_ts, base_ts)
        os.fsync(log_out)
    finally:
        os.close(log_out)
        os.close(fd)
    index_out = os.open(stem + INDEX_SUFFIX + CLEANED, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        pwrite_all(index_out, entries_to_bytes(entries), 0)
        os.fsync(index_out)
    finally:
        os.close(index_out)
    job.removed_messages += removed
    return Result(src.start_offset, src.end_offset, position, max_ts, removed)


def discard(job: Job) -> None:
    """Remove the ``.cleaned`` files of ``job`` (an abandoned pass)."""
    for src in job.sources:
        stem = os.path.join(job.directory, segment_name(src.start_offset))
        for path in (stem + LOG_SUFFIX + CLEANED, stem + INDEX_SUFFIX + CLEANED):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def swap_files(directory: str, starts: list[int], step: Callable[[str], None] = lambda _: None) -> None:
    """Put the ``.cleaned`` pairs of segments ``starts`` in place of the live files
    (the protocol in the module doc). ``step(name)`` is called after each step
    (``"index.swap"``, ``"log.swap"``, ``"commit"``, ``"index"``, ``"log"``, ``"done"``):
    a test hook that may raise to simulate a crash there."""
    stems = [os.path.join(directory, segment_name(s)) for s in starts]
    for stem in stems:
        os.replace(stem + INDEX_SUFFIX + CLEANED, stem + INDEX_SUFFIX + SWAP)
        step("index.swap")
        os.replace(stem + LOG_SUFFIX + CLEANED, stem + LOG_SUFFIX + SWAP)
        step("log.swap")
    fsync_dir(directory)
    step("commit")
    for stem in stems:
        os.replace(stem + INDEX_SUFFIX + SWAP, stem + INDEX_SUFFIX)
        step("index")
        os.replace(stem + LOG_SUFFIX + SWAP, stem + LOG_SUFFIX)
        step("log")
    fsync_dir(directory)
    step("done")


def finish_interrupted(directory: str, names: list[str]) -> list[str]:
    """Boot-time: complete or undo a swap a crash interrupted (see the module doc).

    ``names`` is the directory listing. Returns one note per file changed. A
    ``.log.swap`` commits its segment (its ``.index.swap``, if still there, goes
    in place first); a ``.cleaned`` file, or an ``.index.swap`` whose
    ``.log.swap`` was never made, is deleted (that segment stays as it was).
    """
    notes: list[str] = []
    present = set(names)
    committed = sorted(n for n in names if n.endswith(LOG_SUFFIX + SWAP))
    for name in committed:
        stem = name[: -len(LOG_SUFFIX + SWAP)]
        index_swap = stem + INDEX_SUFFIX + SWAP
        if index_swap in present:
            os.replace(os.path.join(directory, index_swap), os.path.join(directory, stem + INDEX_SUFFIX))
            present.discard(index_swap)
        os.replace(os.path.join(directory, name), os.path.join(directory, stem + LOG_SUFFIX))
        notes.append(f"completed the compaction swap of segment {stem}")
    for name in sorted(present):
        if name.endswith(CLEANED) or name.endswith(INDEX_SUFFIX + SWAP):
            os.unlink(os.path.join(directory, name))
            notes.append(f"removed unfinished compaction file {name}")
    if notes:
        fsync_dir(directory)
    return notes
