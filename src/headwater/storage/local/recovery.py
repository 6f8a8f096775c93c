"""Boot-time recovery of one partition directory: cut torn tails, rebuild indexes.

Source: Iggy ``server/storage-engine.mdx``, "Boot-time segment recovery".
Runs on existing files before a partition log is served:

1. Sweep leftovers: ``*.staging`` files and orphan ``.index`` files (an index
   without its ``.log``) are deleted. A ``.log`` is never deleted.
2. Per segment, oldest first, read the ``.index`` (format in
   :mod:`.index`). An entry whose position is at or past the end of the
   ``.log`` (or names a zero, never-written header in a preallocated file)
   cannot be reconciled: raise CorruptSegment and refuse the partition
   rather than serve bytes that were never written.
3. A missing index, one whose length is not a multiple of 24, or one whose
   entries are not strictly increasing is rebuilt by walking the whole log.
   Otherwise the newest entry whose batch is whole and verifies is found
   (entries naming torn batches are dropped) and the log is walked from it.
4. The walk checks every batch: header complete, ``batch_length`` inside the
   file, ``base_offset`` continuing the previous batch, ``batch.verify``.
   The first batch failing any check ends the valid data (a zero
   ``batch_length`` is the clean end of a preallocated file). The walk is
   :func:`.walk.walk_batches`, the same one ``headwater verify`` uses.
5. A *damaged length* is refused, never cut: when the batch that ends the
   walk, with its stored ``batch_length`` (bytes 32..40) replaced by the end
   of its ``message_count`` frames, verifies in full (every frame checksum,
   the count, and the batch checksum, which covers ``batch_length``), it was
   written whole and only its length field changed at rest
   (:func:`.walk.implied_length`; the rule and why a torn write cannot look
   like this are in :mod:`.walk`). That holds wherever the damaged length
   points: past the end of the file, inside the batch, into preallocated
   zeros, below the minimum, or zero. Raise CorruptSegment naming the file
   and the byte (batch start + 32); nothing is cut.
6. Only a *torn tail* may be cut: the bytes from there to the end of the
   file must hold no whole batch that verifies with an offset at or past the
   one expected (:func:`.walk.tail_refusal`; a torn write leaves a partial
   batch, or zeros in a preallocated file, never whole batches after it).
   When one does, the damage is mid-chain: raise CorruptSegment naming the
   file and both byte positions, and cut nothing. A non-zero tail in a
   segment other than the newest is refused too when a later segment holds
   data: a process crash cannot leave one (the page cache keeps every write);
   a power loss can, before the group-commit round that syncs a sealed
   segment returned (the seal itself does not sync), and then nothing after
   the damage was acknowledged under ``enforce_fsync``: the operator decides.
   Otherwise the file is cut (index first, then log, so no entry ever names
   missing bytes).
7. Segments must not overlap in offsets (a gap is tolerated: reads skip it).
   A segment whose .log or .index holds blocks reserved past its end (``fallocate`` with
   ``FALLOC_FL_KEEP_SIZE``, :mod:`.prealloc`; a crash before their release, the
   newest segment's window ahead, or a spare's whole segment) has them freed
   (``ftruncate`` to its size, which leaves the size and the data alone). A leftover spare segment (``spare-<n>.log.staging``) goes with rule 1.

8. A *clean close* leaves no torn tail: a partition log whose close synced every byte
   writes :data:`CLEAN_SHUTDOWN` in its directory (``LocalPartitionLog.close``), and the
   next open deletes it once recovery is done. When recovery finds the marker, bytes after
   the valid data of the newest segment (other than a preallocated file's zeros) cannot be
   a torn write: they are damage at rest to acknowledged data (bit rot in the last batch,
   or its header), so the partition is refused (CorruptSegment), not cut. Without the
   marker (a crash, a kill, a power loss, an older version) rule 6 holds.

Only the tail after the newest good index entry is re-verified at boot;
damage at rest further back is caught by verified reads (fail closed).
What recovery changed is returned as a :class:`RecoveryReport` for the caller
to log (:meth:`RecoveryReport.outcome`).
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass, field

from headwater.codec import batch as codec_batch
from headwater.storage.api import CorruptSegment, RecoveryOutcome

from .compaction import finish_interrupted
from .prealloc import SLACK_BYTES, held_past_data
from .index import ENTRY_SIZE, decode_entries, is_well_formed, read_index_file, write_index_file
from .segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    ChunkReader,
    fsync_dir,
    parse_segment_name,
    segment_name,
)
from .walk import DAMAGED_LENGTH, OK, UNVERIFIED, ZEROS, BatchAt, first_batch, tail_refusal, walk_batches

_WALK_CHUNK = 1 << 20

CLEAN_SHUTDOWN = "clean-shutdown"
"""Name of the empty file a partition log's clean close leaves in its directory (module doc, 8)."""


@dataclass(slots=True)
class RecoveredSegment:
    """What recovery learnt about one segment."""

    start_offset: int
    end_offset: int
    size: int  # bytes of whole valid batches (the .log is cut to this)
    max_timestamp_us: int
    truncated_bytes: int  # bytes of torn or invalid data cut from the end of the .log
    zero_bytes: int  # bytes of never-written (preallocated) zeros cut from the end of the .log
    stop_reason: str  # why the walk ended: "end", "zeros", "partial header", "verify failed: ..."
    index_rebuilt: bool  # the .index was missing or malformed and was rebuilt from the log
    index_rewritten: bool  # the .index was rewritten (rebuilt, or torn entries dropped / added)


@dataclass(slots=True)
class RecoveryReport:
    """What recovery did to one partition directory (for the broker to log)."""

    directory: str
    segments: list[RecoveredSegment] = field(default_factory=list)
    removed_files: list[str] = field(default_factory=list)
    compaction_notes: list[str] = field(default_factory=list)  # an interrupted compaction swap finished or undone

    @property
    def truncated_bytes(self) -> int:
        return sum(s.truncated_bytes for s in self.segments)

    @property
    def rebuilt_indexes(self) -> int:
        return sum(1 for s in self.segments if s.index_rebuilt)

    def outcome(self) -> RecoveryOutcome:
        """The engine-neutral summary the broker logs (trimmed preallocated zeros are not news)."""
        notes = []
        for s in self.segments:
            name = segment_name(s.start_offset) + LOG_SUFFIX
            if s.truncated_bytes:
                notes.append(f"{name}: cut {s.truncated_bytes} bytes of torn tail at byte {s.size} ({s.stop_reason})")
            if s.index_rebuilt:
                notes.append(f"{name}: index rebuilt from the log")
            elif s.index_rewritten:
                notes.append(f"{name}: index repaired")
        notes += [f"removed leftover {name}" for name in self.removed_files]
        notes += self.compaction_notes
        return RecoveryOutcome(
            truncated_bytes=self.truncated_bytes,
            rebuilt_indexes=self.rebuilt_indexes,
            repaired_indexes=sum(1 for s in self.segments if s.index_rewritten and not s.index_rebuilt),
            removed_files=tuple(self.removed_files),
            notes=tuple(notes),
        )


def recover_partition(directory: str, index_interval_bytes: int, *, clean: bool = False) -> RecoveryReport:
    """Recover every segment in ``directory`` (which must exist). ``clean``: the log was
    closed cleanly (its :data:`CLEAN_SHUTDOWN` marker is there), so no tail may be cut.

    Returns the report; segments are listed oldest first. Raises
    CorruptSegment when an index entry points past the end of its log, when
    a batch fails verification with whole batches after it (mid-chain
    damage, see the module doc), when a whole batch's ``batch_length`` was
    damaged, or when two segments overlap in offsets.
    OSError propagates.
    """
    report = RecoveryReport(directory)
    names = os.listdir(directory)
    finished = finish_interrupted(directory, names)
    if finished:
        report.compaction_notes.extend(finished)
        names = os.listdir(directory)
    logs = sorted(s for s in (parse_segment_name(n, LOG_SUFFIX) for n in names) if s is not None)
    log_set = set(logs)
    for name in names:
        start = parse_segment_name(name, INDEX_SUFFIX)
        if name.endswith(".staging") or (start is not None and start not in log_set):
            os.unlink(os.path.join(directory, name))
            report.removed_files.append(name)
    changed = bool(report.removed_files)
    previous: RecoveredSegment | None = None
    sizes = [os.path.getsize(os.path.join(directory, segment_name(start) + LOG_SUFFIX)) for start in logs]
    for i, start in enumerate(logs):
        data_follows = any(sizes[i + 1 :])
        seg = recover_segment(
            directory, start, index_interval_bytes, data_follows=data_follows, sealed=i < len(logs) - 1,
            clean=clean,
        )
        if previous is not None and seg.start_offset < previous.end_offset:
            raise CorruptSegment(
                f"{os.path.join(directory, segment_name(start) + LOG_SUFFIX)}: starts at offset "
                f"{start} but the previous segment ends at {previous.end_offset} (overlap)"
            )
        report.segments.append(seg)
        changed = changed or seg.index_rewritten
        previous = seg
    if changed:
        fsync_dir(directory)
    return report


class _Walk:
    """Result of walking a log from a position."""

    __slots__ = ("end", "expected", "max_ts", "reason", "damaged")

    def __init__(self, end: int, expected: int, max_ts: int, reason: str):
        self.end = end
        self.expected = expected
        self.max_ts = max_ts
        self.reason = reason
        self.damaged: BatchAt | None = None  # the stop, when it is a whole batch with a damaged length


def _walk(
    reader: ChunkReader,
    file_size: int,
    position: int,
    expected: int,
    entries: array,
    interval: int,
    gaps: bool = False,
) -> tuple[_Walk, bool]:
    """Walk and verify batches from ``position`` (:func:`.walk.walk_batches`); add sparse
    index entries for batches past the last entry. Returns the walk and whether entries
    were added. A whole batch whose length was damaged ends the walk with ``damaged`` set
    (the caller refuses the segment)."""
    last_indexed = entries[-1] if entries else -1
    added = False
    max_ts = 0
    reason = "end"
    damaged = None
    for b in walk_batches(reader, file_size, position):
        if b.view is None:
            reason = {ZEROS: "zeros", UNVERIFIED: f"verify failed: {b.problem}"}.get(b.state, b.problem)
            if b.state == DAMAGED_LENGTH:
                damaged = b
            break
        if b.base_offset < expected or (b.base_offset != expected and not gaps):  # compaction leaves gaps
            reason = f"base_offset {b.base_offset}, expected {expected}"
            break
        if position > last_indexed and (last_indexed < 0 or position - last_indexed >= interval):
            entries.extend((b.base_offset, b.base_timestamp_us, position))
            last_indexed = position
            added = True
        if b.base_timestamp_us > max_ts:
            max_ts = b.base_timestamp_us
        expected = codec_batch.last_offset(b.view) + 1  # base + count, unless compaction left gaps
        position += b.length
    walk = _Walk(position, expected, max_ts, reason)
    walk.damaged = damaged
    return walk, added


def _free_reserved(fd: int) -> None:
    """Free the blocks a crash left reserved past the file's end (.prealloc: the window ahead,
    a spare's whole segment and its index, a release that never ran): ``ftruncate`` to its
    size, which leaves the size and the data alone (:func:`.prealloc.held_past_data`, the
    measure the worker's own release uses)."""
    st = os.fstat(fd)
    if held_past_data(st) > SLACK_BYTES:
        os.ftruncate(fd, st.st_size)


def recover_segment(
    directory: str, start_offset: int, index_interval_bytes: int, *, data_follows: bool = False, sealed: bool = False,
    clean: bool = False,
) -> RecoveredSegment:
    """Recover one segment's ``.log`` and ``.index`` in place (see module doc).

    ``sealed``: a later segment exists, so this one may have been compacted:
    gaps between its batches' offsets are allowed (elsewhere a gap is damage).
    ``data_follows``: a later segment of the partition holds bytes, so this
    one was sealed: a non-zero torn tail is refused, not cut (see module doc, 6).
    ``clean``: the partition was closed cleanly: a non-zero tail is refused too (module doc, 8).

    Raises CorruptSegment when an index entry points past the end of the log,
    when a whole batch's ``batch_length`` was damaged, or when the bytes after
    the valid data are not a torn tail; nothing is changed on disk then.
    """
    stem = os.path.join(directory, segment_name(start_offset))
    log_path, index_path = stem + LOG_SUFFIX, stem + INDEX_SUFFIX
    fd = os.open(log_path, os.O_RDWR)
    try:
        file_size = os.fstat(fd).st_size
        raw = read_index_file(index_path)
        entries = decode_entries(raw) if raw is not None else array("Q")
        count = len(entries) // 3
        if count and max(entries[2::3]) >= file_size:
            i = next(i for i in range(count) if entries[3 * i + 2] >= file_size)
            position = entries[3 * i + 2]
            raise CorruptSegment(
                f"{index_path}: entry {i} (offset {entries[3 * i]}) points at byte {position}, "
                f"past the end of {log_path} ({file_size} bytes); refusing to open the partition"
            )
        rebuild = raw is None or len(raw) % ENTRY_SIZE != 0 or not is_well_formed(entries, start_offset)
        reader = ChunkReader(fd, file_size, _WALK_CHUNK)
        dropped = False
        position, expected = 0, start_offset
        if not rebuild:
            k = count - 1
            while k >= 0:
                off, ts, pos = entries[3 * k], entries[3 * k + 1], entries[3 * k + 2]
                b = first_batch(reader, pos, file_size)
                if b.state == ZEROS:
                    raise CorruptSegment(
                        f"{index_path}: entry {k} (offset {off}) points at byte {pos} of {log_path}, "
                        "where no batch was ever written; refusing to open the partition"
                    )
                if b.state == OK:
                    if b.base_offset != off or b.base_timestamp_us != ts:
                        rebuild = True  # the index describes another log: trust the log
                    else:
                        position, expected = pos, off
                    break
                k -= 1  # the entry names a torn batch: drop it, try the one before
            if not rebuild and k < count - 1:
                del entries[3 * (k + 1) :]
                dropped = True
        if rebuild:
            entries = array("Q")
            position, expected = 0, start_offset
        walk, added = _walk(reader, file_size, position, expected, entries, index_interval_bytes, sealed)
        if walk.damaged is not None:
            raise CorruptSegment(
                f"{log_path}: byte {walk.damaged.problem_position}: {walk.damaged.problem}: not a torn tail; "
                "refusing to open the partition rather than cut acknowledged data"
            )
        cut = file_size - walk.end
        zeros = False
        if cut:
            refusal, walk.reason = tail_refusal(fd, file_size, walk.end, walk.expected, walk.reason,
                                                data_follows=data_follows)
            if refusal is not None:
                raise CorruptSegment(
                    f"{log_path}: {refusal}; refusing to open the partition rather than cut acknowledged data"
                )
            zeros = walk.reason == "zeros"
            if clean and not zeros:
                raise CorruptSegment(
                    f"{log_path}: byte {walk.end}: {walk.reason}, {cut} bytes before the end of the file, "
                    f"after a clean close ({CLEAN_SHUTDOWN}): not a torn write but damage to acknowledged "
                    "data; refusing to open the partition rather than cut it"
                )
        rewrite = rebuild or dropped or added
        if rewrite:
            write_index_file(index_path, entries)  # before the log cut: no entry past the end
        if cut:
            os.ftruncate(fd, walk.end)
            os.fsync(fd)
        else:
            _free_reserved(fd)  # not cut: its size is walk.end
        if not rewrite:  # (a rewritten index is a new file: nothing reserved)
            index_fd = os.open(index_path, os.O_RDWR)
            try:
                _free_reserved(index_fd)
            finally:
                os.close(index_fd)
        max_ts = max(walk.max_ts, max(entries[1::3], default=0))
        return RecoveredSegment(
            start_offset=start_offset,
            end_offset=walk.expected,
            size=walk.end,
            max_timestamp_us=max_ts,
            truncated_bytes=0 if zeros else cut,
            zero_bytes=cut if zeros else 0,
            stop_reason=walk.reason,
            index_rebuilt=rebuild,
            index_rewritten=rewrite,
        )
    finally:
        os.close(fd)
