"""Read-only checks of a local data directory, for offline tools (``headwater verify``, ``dump``).

Nothing here writes: where boot recovery (:mod:`.recovery`) would cut a torn tail or
rebuild an index, this reports it. The layouts are the engine's own (:mod:`.segment`,
:mod:`.index`, :mod:`.metadata`) and so are the readers used: recovery's batch walk
(:func:`.walk.walk_batches`) for segments, ``headwater.codec.batch.verify`` for every batch
(frame xxh3 checksums, batch xxh3 checksum, offset deltas, reserved bytes),
``decode_entries`` / ``is_well_formed`` for indexes, ``metadata.replay`` and
``read_records`` (crc32 per record) for metadata journals and snapshots.

What counts as damage (a :class:`Finding` with ``damage=True``, naming the file and
the byte where it starts):

* a whole batch (its ``batch_length`` fits in the file) that fails ``verify``: the
  byte is the batch start plus the failing field's offset;
* a whole batch whose ``batch_length`` alone was damaged (it verifies with the length
  its frames imply, :func:`.walk.implied_length`), wherever the stored length points:
  the byte is the batch start + 32. Boot recovery refuses the same batch (one decision,
  :mod:`.walk`, for both);
* a batch header with an impossible ``batch_length`` / ``message_count``, or a
  ``base_offset`` that does not continue the previous batch (within a segment, and
  from one segment to the next: an overlap; a gap is only a note);
* an index that is torn (length not a multiple of 24), not strictly increasing, or
  whose entry names a byte where no batch of that offset and timestamp starts;
* a partial batch (or a garbage header) followed by a whole valid batch: not a torn
  tail, as recovery refuses it too (:func:`.walk.tail_refusal`, one decision for both);
* a metadata file with a bad header or a bad record followed by more data.

Not damage (a note): a partial last batch of the newest segment with no whole valid
batch after it, or a torn last
journal record, i.e. what a crash leaves and the next start cuts; preallocated zeros.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

from headwater.codec import batch as codec_batch

from .index import ENTRY_SIZE, decode_entries, is_well_formed, read_index_file
from .metadata import JOURNAL_MAGIC, SNAPSHOT_MAGIC, CorruptMetadata, check_header, read_records, replay
from .recovery import CLEAN_SHUTDOWN
from .segment import INDEX_SUFFIX, LOG_SUFFIX, ChunkReader, parse_segment_name
from .walk import NOT_TORN, TORN, ZEROS, BatchAt, tail_refusal, walk_batches

_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem (``damage``) or remark, at byte ``position`` of ``path``."""

    path: str
    position: int
    message: str
    damage: bool = True


@dataclass(slots=True)
class CheckReport:
    """What :func:`check_data_dir` saw."""

    findings: list[Finding] = field(default_factory=list)
    segments: int = 0
    indexes: int = 0
    metadata_files: int = 0
    batches: int = 0
    messages: int = 0
    bytes_checked: int = 0

    @property
    def damaged(self) -> list[Finding]:
        return [f for f in self.findings if f.damage]


def walk_log(path: str, progress: Callable[[int], None] | None = None) -> Iterator[BatchAt]:
    """Every batch of a segment ``.log`` from byte 0, each verified
    (:func:`.walk.walk_batches`, the walk boot recovery uses); stops after the first one
    that fails (or at a zero ``batch_length``: the clean end of a preallocated file, unless
    a nonzero byte follows it). A whole batch whose ``batch_length`` alone was damaged
    (:func:`.walk.implied_length`) is damage, as recovery refuses it, never a torn tail.
    A partial batch (state TORN) that recovery would refuse to cut
    (:func:`.walk.tail_refusal`: a whole valid batch follows it) is yielded with state
    NOT_TORN and recovery's reason instead.

    ``progress(n)`` is called with the bytes advanced past. Raises OSError.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        reader = ChunkReader(fd, size, _CHUNK)
        expected = parse_segment_name(os.path.basename(path), LOG_SUFFIX) or 0
        for b in walk_batches(reader, size, 0, progress):
            if b.state == ZEROS:
                if progress:
                    progress(size - b.position)
                nonzero = _first_nonzero(reader, b.position, size)
                if nonzero is not None:  # not a preallocated tail: a damaged batch_length, or data after it
                    yield replace(b, problem=f"batch_length is zero but byte {nonzero} is not",
                                  problem_position=b.position + 32)
                return  # zeros: never written
            if b.state == TORN:
                refusal, _ = tail_refusal(fd, size, b.position, expected, b.problem)
                if refusal is not None:
                    b = replace(b, state=NOT_TORN, problem=refusal, problem_position=b.position)
            elif b.view is not None:
                expected = codec_batch.last_offset(b.view) + 1
            yield b
    finally:
        os.close(fd)


def _first_nonzero(reader: ChunkReader, position: int, size: int) -> int | None:
    """The position of the first nonzero byte in ``[position, size)``, or None."""
    while position < size:
        chunk = bytes(reader.view(position, min(_CHUNK, size - position)))
        stripped = chunk.lstrip(b"\x00")
        if stripped:
            return position + len(chunk) - len(stripped)
        position += len(chunk)
    return None


def partition_dirs(data_dir: str) -> Iterator[tuple[int, int, int, str]]:
    """``(stream_id, topic_id, partition_id, path)`` of every partition directory, sorted."""
    streams = os.path.join(data_dir, "streams")
    for s in _ids(streams):
        topics = os.path.join(streams, str(s), "topics")
        for t in _ids(topics):
            parts = os.path.join(topics, str(t), "partitions")
            for p in _ids(parts):
                yield s, t, p, os.path.join(parts, str(p))


def _ids(directory: str) -> list[int]:
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(int(n) for n in names if n.isdigit() and os.path.isdir(os.path.join(directory, n)))


def segment_starts(partition_dir: str) -> list[int]:
    """Start offsets of the partition's segments (its ``.log`` files), oldest first."""
    return sorted(s for s in (parse_segment_name(n, LOG_SUFFIX) for n in os.listdir(partition_dir))
                  if s is not None)


def files_size(data_dir: str) -> int:
    """Bytes :func:`check_data_dir` will read (for a progress total)."""
    total = 0
    for top in ("metadata", "streams"):
        for root, _dirs, names in os.walk(os.path.join(data_dir, top)):
            for n in names:
                if n.endswith((LOG_SUFFIX, INDEX_SUFFIX, ".journal", ".snapshot")):
                    total += os.path.getsize(os.path.join(root, n))
    return total


def _check_index(path: str, start: int, batches: dict[int, tuple[int, int]], walked_to: int,
                 report: CheckReport) -> None:
    """Check an index against the batches walked (positions at or past ``walked_to``, where
    the walk stopped at damage, cannot be judged and are skipped)."""
    raw = read_index_file(path)
    if raw is None:
        report.findings.append(Finding(path, 0, "missing (rebuilt from the log at the next start)", False))
        return
    report.indexes += 1
    if len(raw) % ENTRY_SIZE:
        report.findings.append(Finding(path, len(raw) - len(raw) % ENTRY_SIZE,
                                       f"torn: {len(raw)} bytes is not a multiple of {ENTRY_SIZE}"))
    entries = decode_entries(raw)
    if not is_well_formed(entries, start):
        report.findings.append(Finding(path, 0, "entries are not strictly increasing from the segment start"))
        return
    for i in range(len(entries) // 3):
        offset, ts, position = entries[3 * i], entries[3 * i + 1], entries[3 * i + 2]
        if position < walked_to and batches.get(position) != (offset, ts):
            report.findings.append(Finding(
                path, i * ENTRY_SIZE,
                f"entry {i} (offset {offset}, timestamp {ts}) names byte {position} of the log, where no batch "
                "with that offset and timestamp starts"))
            return


def check_partition(directory: str, report: CheckReport, progress: Callable[[int], None] | None = None) -> None:
    """Check every segment and index of one partition directory into ``report``."""
    starts = segment_starts(directory)
    expected: int | None = None
    clean = os.path.exists(os.path.join(directory, CLEAN_SHUTDOWN))  # no torn tail after a clean close
    for i, start in enumerate(starts):
        log_path = os.path.join(directory, f"{start:020d}{LOG_SUFFIX}")
        report.segments += 1
        if expected is not None and start < expected:
            report.findings.append(Finding(log_path, 0, f"starts at offset {start} but the previous segment "
                                                        f"ends at {expected} (overlap)"))
        elif expected is not None and start > expected:
            report.findings.append(Finding(log_path, 0, f"offsets {expected}..{start - 1} are missing (a gap "
                                                        "left by deleted messages)", False))
        expected = start
        batches: dict[int, tuple[int, int]] = {}
        walked_to = 1 << 64  # the whole log, unless the walk stops at damage
        newest = i == len(starts) - 1
        for b in walk_log(log_path, progress):
            if b.view is None:
                walked_to = b.position
                if b.torn and newest and not clean:
                    report.findings.append(Finding(log_path, b.position, f"torn tail: {b.problem} (cut at the "
                                                                          "next start)", False))
                elif b.torn and newest:
                    report.findings.append(Finding(log_path, b.position, f"{b.problem} after a clean close "
                                                                          f"({CLEAN_SHUTDOWN}): damage, not a torn "
                                                                          "tail (the partition is refused)"))
                else:
                    report.findings.append(Finding(log_path, b.problem_position, b.problem))
                break
            # compaction leaves gaps between and inside the batches of sealed segments (never the active one)
            if b.base_offset < expected or (b.base_offset != expected and newest):
                walked_to = b.position
                report.findings.append(Finding(log_path, b.position + 8, f"batch base_offset {b.base_offset}, "
                                                                         f"expected {expected}"))
                break
            batches[b.position] = (b.base_offset, b.base_timestamp_us)
            report.batches += 1
            report.messages += b.message_count
            expected = codec_batch.last_offset(b.view) + 1  # base + count, unless compaction left gaps
        report.bytes_checked += os.path.getsize(log_path)
        index_path = log_path[: -len(LOG_SUFFIX)] + INDEX_SUFFIX
        _check_index(index_path, start, batches, walked_to, report)
        if os.path.exists(index_path):
            report.bytes_checked += os.path.getsize(index_path)
            if progress:
                progress(os.path.getsize(index_path))


def check_metadata(directory: str, report: CheckReport, progress: Callable[[int], None] | None = None) -> None:
    """Check every ``.journal`` and ``.snapshot`` in ``directory`` (header magic, record crc32s)."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return
    contents: dict[str, bytes] = {}  # name -> bytes, for the snapshot-and-journal check below
    for name in names:
        magic = JOURNAL_MAGIC if name.endswith(".journal") else SNAPSHOT_MAGIC if name.endswith(".snapshot") else None
        if magic is None:
            continue
        path = os.path.join(directory, name)
        with open(path, "rb") as f:
            data = f.read()
        contents[name] = data
        report.metadata_files += 1
        report.bytes_checked += len(data)
        if progress:
            progress(len(data))
        try:
            check_header(data, magic, path)
            records, end, torn = read_records(data, path)
        except CorruptMetadata as exc:
            text = str(exc)
            at = int(text.split("at byte ")[1].split()[0]) if "at byte " in text else 0
            report.findings.append(Finding(path, at, text.split(": ", 1)[-1]))
            continue
        if torn:
            damage = magic == SNAPSHOT_MAGIC  # a snapshot is written whole, then renamed: never torn
            report.findings.append(Finding(path, end, "torn last record" + ("" if damage else
                                                                            " (cut at the next start)"), damage))
    # a snapshot and its journal together: a journal missing beside it, emptied, or of an older
    # generation holding records the snapshot lacks (metadata.replay says why)
    for name, snapshot in contents.items():
        if not name.endswith(".snapshot"):
            continue
        store = name[: -len(".snapshot")]
        snapshot_path, journal_path = (os.path.join(directory, store + suffix) for suffix in (".snapshot", ".journal"))
        try:
            replayed = replay(snapshot, contents.get(store + ".journal"), snapshot_path, journal_path)
        except CorruptMetadata:
            continue  # reported file by file above
        if replayed.damage is not None:
            report.findings.append(Finding(journal_path, 0, replayed.damage.split(": ", 1)[-1] +
                                           " (records after the snapshot may be lost)"))


def check_data_dir(data_dir: str, progress: Callable[[int], None] | None = None) -> CheckReport:
    """Check a whole data directory (metadata, then every partition); changes nothing."""
    report = CheckReport()
    check_metadata(os.path.join(data_dir, "metadata"), report, progress)
    for _s, _t, _p, path in partition_dirs(data_dir):
        check_partition(path, report, progress)
    return report


def read_partition(directory: str, from_offset: int) -> Iterator[memoryview]:
    """The verified batches of a partition holding offsets at or past ``from_offset``, in order.

    Stops at the first batch that fails verification (raises ValueError naming the
    file and byte) or at a torn tail. Reads only.
    """
    starts = segment_starts(directory)
    for i, start in enumerate(starts):
        if i + 1 < len(starts) and starts[i + 1] <= from_offset:
            continue
        log_path = os.path.join(directory, f"{start:020d}{LOG_SUFFIX}")
        for b in walk_log(log_path):
            if b.view is None:
                if b.torn and i == len(starts) - 1:
                    return
                raise ValueError(f"{log_path}: byte {b.problem_position}: {b.problem}")
            if b.base_offset + b.message_count > from_offset:
                yield b.view


__all__ = [
    "BatchAt",
    "CheckReport",
    "Finding",
    "check_data_dir",
    "check_metadata",
    "check_partition",
    "files_size",
    "partition_dirs",
    "read_partition",
    "segment_starts",
    "walk_log",
]
