"""One segment: a ``.log`` of whole stamped batches plus its sparse ``.index``.

Source: Iggy ``server/storage-engine.mdx`` ("Segmented log", "On-disk batch
format"). File name: the segment's first offset, zero-padded to 20 digits
(``00000000000000001000.log``). Content: stamped batches back to back, each
byte-identical to the wire (see :mod:`headwater.codec.batch`)::

    [batch 0: batch_length bytes][batch 1]...[batch n-1]
    batch = [256-byte header][frames]; header bytes 8..16 base_offset (u64 LE),
    16..24 base_timestamp (u64 LE, µs), 32..40 batch_length (u64 LE),
    48..52 message_count (u32 LE)

Batch k+1's base_offset is batch k's base_offset + message_count. A
preallocated segment has zero bytes after its data: a header whose
batch_length is zero marks the end. Writes are ``os.pwrite`` at the end of
the data; reads are ``os.pread`` into one buffer sliced into memoryviews (a ``nowait``
read leaves chunks that are not in the page cache to a worker thread: :mod:`.readahead`).
"""

from __future__ import annotations

import errno
import itertools
import os
import struct
from array import array

from headwater.codec import batch as codec_batch
from headwater.codec.batch import BATCH_HEADER_SIZE
from headwater.storage.api import CorruptBatch, CorruptSegment, SegmentInfo, StorageError, StorageWriteError

from . import readahead
from .readahead import pread_exact
from .index import SegmentIndex, decode_entries, read_index_file

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
NAME_DIGITS = 20
MIN_BATCH_SIZE = BATCH_HEADER_SIZE + 48
"""A batch holds at least one 48-byte frame header."""

# base_offset @8, base_timestamp @16, (origin @24), batch_length @32, (checksum @40), count @48
_HEADER_FIELDS = struct.Struct("<8xQQ8xQ8xI")
_CHUNK_MIN = 64 * 1024
_CHUNK_MAX = 16 * 1024 * 1024

_SERIALS = itertools.count(1)

unpack_header = _HEADER_FIELDS.unpack_from
"""``unpack_header(buf, pos) -> (base_offset, base_timestamp_us, batch_length, message_count)``."""


def segment_name(start_offset: int) -> str:
    """``{start_offset:020d}``: the stem shared by a segment's .log and .index."""
    return f"{start_offset:0{NAME_DIGITS}d}"


def parse_segment_name(file_name: str, suffix: str) -> int | None:
    """The start offset a ``{20 digits}{suffix}`` file name encodes, else None."""
    if not file_name.endswith(suffix):
        return None
    stem = file_name[: -len(suffix)]
    if len(stem) != NAME_DIGITS or not stem.isdigit():
        return None
    return int(stem)


class ChunkReader:
    """Windowed ``os.pread`` over ``[0, end)`` of a file: :meth:`view` returns a
    memoryview of the requested range, reading a new chunk only when the range
    is not inside the current one. Returned views stay valid (each chunk is an
    immutable ``bytes``)."""

    __slots__ = ("fd", "end", "chunk_bytes", "_buf", "_start", "owner", "used_held")

    def __init__(self, fd: int, end: int, chunk_bytes: int = 1 << 20, owner: "Segment | None" = None):
        self.fd = fd
        self.end = end
        self.chunk_bytes = chunk_bytes
        self._buf = b""
        self._start = 0
        self.owner = owner
        """Set: the read may not block (``nowait``): a chunk not all in the page cache raises
        NotCached instead of being read (see :mod:`.readahead`)."""
        self.used_held = False  # a chunk came from a worker's read

    def view(self, position: int, length: int) -> memoryview:
        """Bytes ``[position, position + length)``, shorter only where ``end`` cuts it."""
        start = self._start
        if start <= position and position + length <= start + len(self._buf):
            rel = position - start
            return memoryview(self._buf)[rel : rel + length]
        want = min(max(length, self.chunk_bytes), self.end - position)
        owner = self.owner
        held = None
        if owner is not None:
            cached = owner.read_cached(position, want)
            if cached is not None and cached is not readahead.MISSED:  # small, all cached: read in one call
                self._buf = cached
                self._start = position
                return cached[:length]
            held = owner.ahead(position, want, length, cached is readahead.MISSED)
        if held is not None:
            self.used_held = True
            self._buf = held
        else:
            self._buf = pread_exact(self.fd, max(want, 0), position)
        self._start = position
        return memoryview(self._buf)[:length]


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    """``os.pwrite`` until every byte is written."""
    n = os.pwrite(fd, data, position)
    if n == len(data):  # (the common case: one call wrote it all, no view made)
        return
    view = memoryview(data)[n:]
    position += n
    while view:
        n = os.pwrite(fd, view, position)
        view = view[n:]
        position += n


def fsync_dir(path: str) -> None:
    """fsync a directory so entries created, renamed or removed in it are durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def preallocate(fd: int, size: int) -> None:
    """``os.posix_fallocate(fd, 0, size)``; silently skipped where unsupported."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:  # pragma: no cover - depends on the filesystem
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise


def unlink_all(paths) -> None:
    """Unlink each path, ignoring every failure (a leftover is swept at the next boot)."""
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass


def _unmade(made: list[str], exc: OSError, what: str) -> StorageError:
    """After making a segment's files failed with ``exc``: remove those ``made`` (a half-made
    segment would block the next try) and return the error to raise (StorageError when the
    files existed already, else StorageWriteError)."""
    unlink_all(made)
    if isinstance(exc, FileExistsError):
        return StorageError(f"segment file already exists: {exc.filename}")
    return StorageWriteError.from_os_error(what, exc)


class Segment:
    """One segment's state and files.

    ``size`` is the byte length of its whole batches (a preallocated file is
    longer on disk); ``end_offset`` is one past its last offset. The active
    segment keeps its .log and .index open for writing; a sealed one opens
    them on demand (:meth:`acquire`) and drops them again (:meth:`release`).
    """

    __slots__ = (
        "directory",
        "start_offset",
        "end_offset",
        "size",
        "max_timestamp_us",
        "sealed",
        "log_path",
        "index_path",
        "index_interval_bytes",
        "index_dirty",
        "_fd",
        "_index",
        "_file_size",
        "serial",
        "read_frontier",
        "prefetched_to",
    )

    def __init__(
        self,
        directory: str,
        start_offset: int,
        end_offset: int,
        size: int,
        max_timestamp_us: int,
        index_interval_bytes: int,
    ):
        self.directory = directory
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.size = size
        self.max_timestamp_us = max_timestamp_us
        self.sealed = True
        stem = os.path.join(directory, segment_name(start_offset))
        self.log_path = stem + LOG_SUFFIX
        self.index_path = stem + INDEX_SUFFIX
        self.index_interval_bytes = index_interval_bytes
        self.index_dirty = False
        self._fd: int | None = None
        self._index: SegmentIndex | None = None
        self._file_size = size
        self.serial = next(_SERIALS)  # names these bytes for reads held by .readahead; renewed by a cut
        self.read_frontier = 0  # .readahead: where the chunks the workers were asked to read end
        self.prefetched_to = 0  # .readahead: where the kernel was asked to read ahead to (0: never)

    # -- lifecycle -----------------------------------------------------------

    @classmethod
    def create(
        cls, directory: str, start_offset: int, index_interval_bytes: int, preallocate_bytes: int,
        sync_dir: bool = True,
    ) -> "Segment":
        """Create empty ``.log`` and ``.index`` files for a new active segment and
        fsync the directory (unless ``sync_dir`` is false: the caller then has it
        synced before anything in the segment counts as durable).
        ``preallocate_bytes`` > 0 reserves that many log bytes.

        Raises StorageError if the files already exist, StorageWriteError when the
        filesystem refuses them (ENOSPC, EIO...; whatever was made is removed again).
        """
        seg = cls(directory, start_offset, start_offset, 0, 0, index_interval_bytes)
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL
        made: list[str] = []
        try:
            seg._fd = os.open(seg.log_path, flags, 0o644)
            made.append(seg.log_path)
            index_fd = os.open(seg.index_path, flags, 0o644)
            made.append(seg.index_path)
            seg._index = SegmentIndex(seg.index_path, array("Q"), index_fd, index_interval_bytes)
            seg.sealed = False
            if preallocate_bytes > 0:
                preallocate(seg._fd, preallocate_bytes)
                seg._file_size = os.fstat(seg._fd).st_size
            if sync_dir:
                fsync_dir(directory)
        except OSError as exc:
            seg.release()
            raise _unmade(made, exc, f"{seg.log_path}: cannot create the segment") from exc
        return seg

    @classmethod
    def adopt(
        cls, directory: str, start_offset: int, index_interval_bytes: int, log_path: str, index_path: str,
    ) -> "Segment":
        """The new active segment from files made ahead (:mod:`.prealloc`'s spare: empty, named
        ``log_path`` / ``index_path``, no fd held): both are linked under the segment's names
        and opened read-write, then the spare names removed. The directory is not synced (the
        caller has it synced, as for :meth:`create` with ``sync_dir`` false).

        Raises StorageError if the segment's files already exist, StorageWriteError when
        the filesystem refuses (the spare's files are then still the caller's and nothing is
        left under the segment's names)."""
        seg = cls(directory, start_offset, start_offset, 0, 0, index_interval_bytes)
        made: list[str] = []
        log_fd = -1
        try:
            os.link(log_path, seg.log_path)
            made.append(seg.log_path)
            os.link(index_path, seg.index_path)
            made.append(seg.index_path)
            log_fd = os.open(seg.log_path, os.O_RDWR)
            index_fd = os.open(seg.index_path, os.O_RDWR)
        except OSError as exc:
            if log_fd >= 0:
                os.close(log_fd)
            raise _unmade(made, exc, f"{seg.log_path}: cannot adopt the spare segment") from exc
        unlink_all((log_path, index_path))  # a name left over: swept at the next boot (recovery)
        seg._fd = log_fd
        seg._index = SegmentIndex(seg.index_path, array("Q"), index_fd, index_interval_bytes)
        seg.sealed = False
        return seg

    def activate(self, preallocate_bytes: int) -> None:
        """Open an existing (recovered) segment for appending: it becomes the
        active one. Extends a preallocation if asked."""
        self.release()
        self._fd = os.open(self.log_path, os.O_RDWR)
        index_fd = os.open(self.index_path, os.O_RDWR | os.O_CREAT, 0o644)
        raw = read_index_file(self.index_path) or b""
        self._index = SegmentIndex(self.index_path, decode_entries(raw), index_fd, self.index_interval_bytes)
        self.sealed = False
        self._file_size = os.fstat(self._fd).st_size
        if preallocate_bytes > self._file_size:
            preallocate(self._fd, preallocate_bytes)
            self._file_size = os.fstat(self._fd).st_size

    def acquire(self) -> None:
        """Make sure the log is open and the index loaded (sealed segments load lazily)."""
        if self._fd is None:
            self._fd = os.open(self.log_path, os.O_RDONLY)
            readahead.sequential(self._fd)  # a sealed segment is read front to back
        if self._index is None:
            raw = read_index_file(self.index_path) or b""
            self._index = SegmentIndex(self.index_path, decode_entries(raw), None, self.index_interval_bytes)

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Close files and drop the in-memory index (a sealed segment reopens on demand)."""
        if self._index is not None:
            self._index.close()
            self._index = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def seal(self) -> list[int]:
        """Cut any preallocated tail, close the files for writing: read-only from now on.

        Does not sync (that blocks for as long as the disk takes to write the
        unsynced part, up to ``segment_size`` bytes): returns duplicates
        (``os.dup``) of the .log fd and, when entries were written since the
        last sync, of the .index fd, which the caller must fdatasync and close
        (the log's group commit does, off the event loop). Raises OSError (the
        cut or a dup failed; the segment then stays active and nothing leaks).
        """
        if self._fd is None:
            self.sealed = True
            return []
        if self._file_size > self.size:
            os.ftruncate(self._fd, self.size)
            self._file_size = self.size
        if self._index is not None and self._index.fd is not None:
            self._index.flush()  # the entries still in memory: the sealed segment reloads from the file
        fds = [os.dup(self._fd)]
        try:
            if self.index_dirty and self._index is not None and self._index.fd is not None:
                fds.append(os.dup(self._index.fd))
        except OSError:
            os.close(fds[0])
            raise
        self.index_dirty = False
        self.sealed = True
        self.release()
        return fds

    def dup_fds(self) -> list[int]:
        """Duplicates (``os.dup``) of the open .log fd and of the .index fd when it is open for
        writing, for a worker (:mod:`.prealloc`); the caller closes them. Raises OSError."""
        fds: list[int] = []
        if self._fd is None:
            return fds
        fds.append(os.dup(self._fd))
        try:
            if self._index is not None and self._index.fd is not None:
                fds.append(os.dup(self._index.fd))
        except OSError:
            os.close(fds[0])
            raise
        return fds

    def trim_reserved(self) -> None:
        """Free the blocks reserved past the end of the active segment's files (``ftruncate``
        to their size: ext4 frees blocks past the end even at the same size). Raises OSError."""
        if self._fd is None or self.sealed:
            return
        os.ftruncate(self._fd, self._file_size)
        if self._index is not None and self._index.fd is not None:
            os.ftruncate(self._index.fd, os.fstat(self._index.fd).st_size)

    def delete(self) -> None:
        """Close and unlink .log, then .index (an orphan index is swept at boot)."""
        self.release()
        for path in (self.log_path, self.index_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def sync(self) -> None:
        """fdatasync the .log and, when entries were written since, the .index."""
        if self._fd is not None and not self.sealed:
            os.fdatasync(self._fd)
            if self.index_dirty and self._index is not None:
                self._index.sync()
            self.index_dirty = False

    def final_sync_fds(self) -> list[int]:
        """The fds :meth:`sync` would fdatasync (the .log; the .index when entries were
        written since its last sync, its pending entries written first), for a caller that
        fdatasyncs them itself and then calls :meth:`synced_by_caller`; empty for a sealed
        or closed segment. Raises OSError (writing the pending index entries)."""
        if self._fd is None or self.sealed:
            return []
        fds = [self._fd]
        if self.index_dirty and self._index is not None and self._index.fd is not None:
            self._index.flush()
            fds.append(self._index.fd)
        return fds

    def synced_by_caller(self) -> None:
        """Every fd :meth:`final_sync_fds` returned was fdatasynced successfully."""
        self.index_dirty = False

    def sync_targets(self) -> list[int]:
        """For a group-commit round: a duplicate (``os.dup``) of the .log fd, which the
        caller fdatasyncs and closes; empty for a sealed segment. The .index is left
        out: recovery re-adds missing entries from the log, and it is synced after
        the segment is sealed (see :meth:`seal`) or when the log closes. Raises OSError when no fd is left."""
        if self._fd is None or self.sealed:
            return []
        return [os.dup(self._fd)]

    def info(self) -> SegmentInfo:
        return SegmentInfo(self.start_offset, self.end_offset, self.size, self.max_timestamp_us, self.sealed)

    # -- writes --------------------------------------------------------------

    def append(self, data, base_offset: int, base_timestamp_us: int, message_count: int) -> bool:
        """Write one batch at the end of the data; returns True if an index entry was written.

        The batch goes first, then its index entry, so an entry never names bytes
        a process kill could lose. Raises OSError from either write; the caller
        then undoes the partial write with :meth:`rollback` to a :meth:`mark`
        taken before (the in-memory size and end offset are not advanced).
        """
        position = self.size
        length = len(data)
        pwrite_all(self._fd, data, position)
        indexed = False
        if self._index.wants_entry(position):
            self._index.append(base_offset, base_timestamp_us, position)
            self.index_dirty = indexed = True
        self.size = position + length
        if self.size > self._file_size:
            self._file_size = self.size
        self.end_offset = base_offset + message_count
        if base_timestamp_us > self.max_timestamp_us:
            self.max_timestamp_us = base_timestamp_us
        return indexed

    def mark(self) -> tuple[int, int, int, int, bool, int]:
        """The state :meth:`rollback` returns to: (size, end_offset, max_timestamp_us,
        index entry count, index_dirty, file size)."""
        return (self.size, self.end_offset, self.max_timestamp_us, len(self._index), self.index_dirty,
                self._file_size)

    def rollback(self, mark: tuple[int, int, int, int, bool, int]) -> None:
        """Undo every write since ``mark`` (an active segment only): the in-memory state
        first, then the files, index before log, so no entry names dropped bytes.

        The .log is cut to the old size; a preallocated file is extended again
        (a sparse run of zeros: the clean end of the data). Raises OSError when a
        cut fails; the in-memory state is restored regardless (reads never look
        past ``size``), and calling again retries the cut.
        """
        size, end_offset, max_ts, entries, dirty, file_size = mark
        self.size = size
        self.end_offset = end_offset
        self.max_timestamp_us = max_ts
        self.index_dirty = dirty
        self._index.truncate_to_count(entries)
        os.ftruncate(self._fd, size)
        if file_size > size:
            os.ftruncate(self._fd, file_size)
        self._file_size = file_size

    def truncate(self, position: int, end_offset: int, max_timestamp_us: int) -> None:
        """Cut the log (and index) at ``position``, the start of the first dropped batch.

        The file is really shortened (stale batches past the cut must never come
        back after a later crash) and synced.
        """
        self.acquire()
        fd = self._fd
        if self.sealed:  # sealed segments are open read-only
            os.close(fd)
            self._fd = fd = os.open(self.log_path, os.O_RDWR)
        os.ftruncate(fd, position)
        self.serial = next(_SERIALS)  # chunks read ahead of the cut must not be served again
        os.fsync(fd)
        if self._index.fd is None:
            self._index.fd = os.open(self.index_path, os.O_RDWR | os.O_CREAT, 0o644)
        self._index.truncate_to_position(position)
        os.fsync(self._index.fd)
        self.size = self._file_size = position
        self.end_offset = end_offset
        self.max_timestamp_us = max_timestamp_us

    # -- reads ---------------------------------------------------------------

    def _corrupt(self, position: int, reason: str) -> CorruptSegment:
        return CorruptSegment(f"{self.log_path}: batch at byte {position}: {reason}")

    def _corrupt_batch(self, position: int, offset: int, reason: str) -> CorruptBatch:
        return CorruptBatch(f"{self.log_path}: batch at byte {position} (offset {offset}): {reason}", offset, position)

    def _header_problem(self, position: int, end: int, expected: int, base_offset: int, length: int,
                        count: int) -> str | None:
        """Why the batch header at ``position`` (its fields given) cannot be walked, or None: its
        length or count does not fit the ``end`` bytes, or its base_offset does not follow on
        from ``expected`` (gaps only in a sealed segment, which compaction may have left)."""
        if length < MIN_BATCH_SIZE or position + length > end or count == 0:
            return f"batch_length {length} / message_count {count} do not fit"
        if base_offset < expected or (base_offset != expected and not self.sealed):
            return f"base_offset {base_offset}, expected {expected}"
        return None

    def _locate(self, offset: int) -> tuple[int, int]:
        """(position, base_offset) of the indexed batch to walk from for ``offset``."""
        floor = self._index.floor_by_offset(offset)
        if floor is None:
            return 0, self.start_offset
        return floor[1], floor[0]

    def ahead(self, position: int, want: int, length: int, missed: bool = False) -> bytes | memoryview | None:
        """Before a ``nowait`` read of the chunk ``[position, position + want)``, of which
        ``length`` bytes are needed now: bytes from ``position`` on (at least ``length``) that
        the workers already read for this segment, or None when the whole chunk is in the
        page cache (read it); otherwise raises NotCached, a worker reading what is missing
        (see :mod:`.readahead`). A batch running from one chunk read into the next is joined
        (one copy of that batch). Pages already in the page cache are read on the loop, as
        any read's; a segment read from the disk has the kernel read :data:`.readahead.WINDOW`
        bytes ahead of its reader (``POSIX_FADV_WILLNEED``, from a worker), so a consumer
        reading front to back finds its next pages cached and is served without a worker.
        ``missed``: a :func:`.readahead.read_nowait` of the chunk just found bytes missing (no
        second check). With :data:`.readahead.direct` the workers read at least
        :data:`.readahead.DIRECT_CHUNK` bytes past the page cache and nothing is prefetched."""
        if not missed and readahead.cached(self._fd, position, want):
            self._keep_prefetching(position + want)
            return None
        held = readahead.find(self.serial, position)
        if held is not None:
            data = memoryview(self._held_data(position, *held))
            have = len(data) - (position - held[1])
            if have >= length:
                return data[position - held[1] :]
            following = readahead.find(self.serial, held[1] + held[2]) if len(data) == held[2] else None
            if following is not None and following[1] == held[1] + held[2]:
                more = memoryview(self._held_data(position, *following))
                if have + len(more) >= length:
                    return b"".join((data[position - held[1] :], more[: length - have]))
        if readahead.direct:  # one disk read per worker read: make them large; no kernel readahead
            want = max(want, min(readahead.DIRECT_CHUNK, self.size - position))
        self.read_frontier = position + want
        future = readahead.start(self.serial, self.log_path, position, want)
        if not readahead.direct:
            self._prefetch(position + want)
        raise readahead.missing(self.log_path, position, want, future)

    def read_cached(self, position: int, want: int) -> memoryview | None:
        """For a ``nowait`` read: the chunk ``[position, position + want)`` read at once when it
        is small and all in the page cache (:func:`.readahead.read_nowait`), else
        ``readahead.MISSED`` or None (then :meth:`ahead` decides). Keeps a catch-up reader's kernel read-ahead going as
        :meth:`ahead` does. With :data:`.readahead.direct`, always None (:meth:`ahead` checks
        with ``cachestat``): a ``RWF_NOWAIT`` miss starts the kernel's readahead, and the pages
        it reads carry the mark that has the next buffered read start more, so a catch-up reader
        would be back on reads through the page cache."""
        if readahead.direct:
            return None
        data = readahead.read_nowait(self._fd, want, position)
        if data:
            self._keep_prefetching(position + want)
        return data

    def _keep_prefetching(self, end: int) -> None:
        """A catch-up reader (one this segment prefetches for) that read up to ``end`` from the
        cache, half way through the kernel's window: have the next window read."""
        if self.prefetched_to and end > self.prefetched_to - readahead.WINDOW // 2:
            self._prefetch(end)

    def _prefetch(self, position: int) -> None:
        """Have the kernel read up to :data:`.readahead.WINDOW` bytes from ``position`` (or from
        where the last request ended, if further) into the page cache, off the loop."""
        start = max(position, self.prefetched_to)
        end = min(position + readahead.WINDOW, self.size)
        if end > start:
            readahead.prefetch(self.log_path, start, end - start)
            self.prefetched_to = end

    def _held_data(self, position: int, future, start_at: int, size: int) -> bytes:
        if not future.done():
            raise readahead.missing(self.log_path, position, start_at + size - position, future)
        return future.result() or b""

    def read_on(self, position: int, length: int) -> None:
        """After a ``nowait`` read that used bytes the workers read: keep them reading
        :data:`.readahead.DEPTH` chunks of ``length`` bytes past ``position`` (where that read
        stopped), each chunk starting where the one before ends, for the next polls."""
        frontier = max(self.read_frontier, position)
        if readahead.direct:
            length = max(length, readahead.DIRECT_CHUNK)
        while frontier < self.size and frontier < position + readahead.DEPTH * length:
            step = min(length, self.size - frontier)
            readahead.start(self.serial, self.log_path, frontier, step)
            frontier += step
        self.read_frontier = frontier

    def first_timestamp_us(self) -> int | None:
        """base_timestamp of the first batch (from the index's first entry), None when empty."""
        if self.size == 0:
            return None
        self.acquire()
        return self._index.entry(0)[1] if len(self._index) else None

    def read(
        self,
        start_offset: int,
        wanted: int,
        max_bytes: int,
        need_one: bool,
        validate: bool,
        out: list,
        nowait: bool = False,
    ) -> tuple[int, int]:
        """Append to ``out`` whole batches holding offsets >= ``start_offset``.

        Stops once the batches taken hold ``wanted`` messages at or past
        ``start_offset`` or before one that would pass ``max_bytes``; the first
        batch is taken regardless of ``max_bytes`` when ``need_one``. Returns
        (bytes taken, messages still wanted: <= 0 when done, also set to 0 when
        stopped by ``max_bytes``).

        Offsets may have gaps (compaction): a batch holds offsets from its
        ``base_offset`` up to the next batch's (the segment's ``end_offset`` for
        the last), its frames' ``offset_delta`` saying which; in a sealed segment
        batches are only required to start past the previous one's
        ``base_offset + message_count - 1`` (the active one is never compacted).
        A batch whose first message is below ``start_offset`` counts
        ``message_count - (start_offset - base_offset)`` messages (exact without
        gaps, an underestimate with them). A damaged batch (a malformed header, offsets
        going backwards, or with ``validate`` a batch failing ``batch.verify``) ends the
        read: when ``out`` holds batches already they are the answer (returns with 0
        wanted), else raises CorruptBatch naming the file, byte position and the
        offset the damaged batch would begin at. With ``nowait``, raises
        NotCached (views already added to ``out`` are then to be dropped) instead of
        reading bytes that are not in the page cache (see :mod:`.readahead`).
        """
        self.acquire()
        end = self.size
        position, expected = self._locate(start_offset)
        per_message = self.size / max(1, self.end_offset - self.start_offset)
        estimate = int(per_message * max(1, wanted)) + self.index_interval_bytes + 4096
        cap = max(_CHUNK_MIN, min(max_bytes + self.index_interval_bytes + 4096, _CHUNK_MAX))
        first_chunk = max(_CHUNK_MIN, min(estimate, cap))
        reader = ChunkReader(self._fd, end, first_chunk, self if nowait else None)
        taken = 0
        damage = None  # (why) the batch at ``position`` is damaged: the read ends before it
        while position < end:
            head = reader.view(position, BATCH_HEADER_SIZE)
            if len(head) < BATCH_HEADER_SIZE:
                damage = f"header cut at the end of the data ({end} bytes)"
                break
            base_offset, base_ts, length, count = unpack_header(head, 0)
            if base_offset != expected or count == 0 or length < MIN_BATCH_SIZE or position + length > end:
                damage = self._header_problem(position, end, expected, base_offset, length, count)
                if damage is not None:
                    break
            first, expected = expected, base_offset + count  # (first: the lowest offset it may begin at)
            if expected <= start_offset:
                # without gaps the batch ends below the start; with them it may reach the next base
                following = position + length
                if following + BATCH_HEADER_SIZE <= end:
                    next_base = unpack_header(reader.view(following, BATCH_HEADER_SIZE), 0)[0]
                else:
                    next_base = self.end_offset
                if next_base <= start_offset:
                    position = following
                    continue
            if not need_one and taken + length > max_bytes:
                if reader.used_held:
                    self.read_on(position, first_chunk)
                return taken, 0
            if reader.chunk_bytes < cap:  # taking batches: read further ahead next time
                reader.chunk_bytes = min(reader.chunk_bytes * 2, cap)
            view = reader.view(position, length)
            if validate:
                try:
                    codec_batch.verify_batch(view, check_offset_deltas=False)
                except Exception as exc:  # any codec error: the bytes are not what was written
                    damage = f"verify failed: {exc}"
                    expected = first  # (its base_offset is one of the bytes that may be damaged)
                    break
            out.append(view)
            taken += length
            need_one = False
            wanted -= max(0, count - (start_offset - base_offset)) if base_offset < start_offset else count
            position += length
            if wanted <= 0:
                break
        if damage is not None:
            # the valid prefix is served: a read that already holds batches (of this segment or
            # earlier ones) ends before the damage; one that would begin with it fails closed
            if out:
                return taken, 0
            raise self._corrupt_batch(position, expected, damage)
        if reader.used_held:  # a catch-up reader: its next chunk is read while this one is served
            self.read_on(position, first_chunk)
        return taken, wanted

    def offset_for_timestamp(self, timestamp_us: int, validate: bool = False, nowait: bool = False) -> int | None:
        """base_offset of the first batch with base_timestamp >= ``timestamp_us``, or None.

        Walks from the sparse index's last entry older than ``timestamp_us``. A batch walked
        that is damaged (a header that does not fit, offsets that do not follow on, or with
        ``validate`` a batch failing ``batch.verify``, whose base_timestamp is then not to be
        believed) raises CorruptBatch naming its position and the offset it would begin at:
        the answer may be that batch, so it is not stepped over. With ``nowait``, raises
        NotCached instead of reading bytes that are not in the page cache (see
        :mod:`.readahead`).
        """
        self.acquire()
        floor = self._index.before_timestamp(timestamp_us)
        position, expected = (0, self.start_offset) if floor is None else (floor[1], floor[0])
        end = self.size
        reader = ChunkReader(self._fd, end, _CHUNK_MIN, self if nowait else None)
        while position < end:
            head = reader.view(position, BATCH_HEADER_SIZE)
            if len(head) < BATCH_HEADER_SIZE:
                raise self._corrupt_batch(position, expected, "header cut at the end of the data")
            base_offset, base_ts, length, count = unpack_header(head, 0)
            problem = self._header_problem(position, end, expected, base_offset, length, count)
            if problem is not None:
                raise self._corrupt_batch(position, expected, problem)
            if validate:
                view = reader.view(position, length)  # (NotCached, with nowait, goes to the caller)
                try:
                    codec_batch.verify(view, check_offset_deltas=False)
                except Exception as exc:  # any codec error: the bytes are not what was written
                    raise self._corrupt_batch(position, expected, f"verify failed: {exc}") from exc
            if base_ts >= timestamp_us:
                return base_offset
            expected = base_offset + count
            position += length
        return None

    def cut_point(self, offset: int) -> tuple[int, int, int]:
        """Where a truncation at ``offset`` cuts this segment: (position,
        base_offset, newest timestamp kept) of the first batch whose last offset
        is >= ``offset``, or (size, end_offset, max_timestamp_us) when none is.

        Raises CorruptSegment on a malformed header.
        """
        self.acquire()
        position, _ = self._locate(offset)
        index = self._index
        max_ts = 0
        for i in range(len(index)):  # indexed batches before the walk start
            _, ts, pos = index.entry(i)
            if pos >= position:
                break
            max_ts = max(max_ts, ts)
        end = self.size
        reader = ChunkReader(self._fd, end, _CHUNK_MIN)
        while position < end:
            head = reader.view(position, BATCH_HEADER_SIZE)
            if len(head) < BATCH_HEADER_SIZE:
                raise self._corrupt(position, "header cut at the end of the data")
            base_offset, base_ts, length, count = unpack_header(head, 0)
            if length < MIN_BATCH_SIZE:
                raise self._corrupt(position, f"batch_length {length}")
            if base_offset + count > offset:
                return position, base_offset, max_ts
            max_ts = max(max_ts, base_ts)
            position += length
        return self.size, self.end_offset, self.max_timestamp_us
