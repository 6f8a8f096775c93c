"""The sparse segment index: the one reader and writer of ``.index`` files.

Source: Iggy ``server/storage-engine.mdx``, "Indexes". One file per segment,
named like its ``.log`` (``{start offset:020d}.index``). No header, no
padding; a flat run of 24-byte little-endian entries::

    off size field      type  notes
      0    8 offset     u64   base_offset of the indexed batch (absolute)
      8    8 timestamp  u64   base_timestamp of that batch, microseconds
     16    8 position   u64   byte position of the batch start in the .log

Entries are strictly increasing in offset and position. The index is sparse:
the writer adds an entry for a segment's first batch and then for the first
batch that starts at least ``index_interval_bytes`` past the last indexed
one (``interval <= 1`` indexes every batch). A lookup binary-searches for the
closest entry at or below its target and walks batch headers from there, so
a target below the first entry falls back to the segment start.

In memory the entries are an ``array('Q')`` of flat triples, so a segment of
a million entries costs 24 MB and no Python objects.

Writes are deferred: an active segment's new entries are ``pwrite``-n to the
file in one call once ``FLUSH_ENTRIES`` of them are pending or the log grew
``FLUSH_LOG_BYTES`` past the first pending one, and always before the index
is synced, sealed or closed (readers of an active segment use the in-memory
entries). So a request costs one ``pwrite`` (its batch), not two. A process
kill loses at most the pending entries, never log data: recovery walks the
log from the last entry on the file and re-adds them (``recovery.py``), at
most ``FLUSH_LOG_BYTES`` of walking more than before.
"""

from __future__ import annotations

import operator
import os
import struct
import sys
from array import array
from bisect import bisect_right

ENTRY_SIZE = 24
FLUSH_ENTRIES = 128
"""Pending entries that make an active index write them out (3 KiB)."""
FLUSH_LOG_BYTES = 4 << 20
"""Log bytes past the first pending entry that make an active index write them out."""
_ENTRY = struct.Struct("<QQQ")
_LITTLE = sys.byteorder == "little"


def encode_entry(offset: int, timestamp_us: int, position: int) -> bytes:
    """The 24 bytes of one entry: offset, timestamp (µs), position, u64 LE each."""
    return _ENTRY.pack(offset, timestamp_us, position)


def decode_entries(data: bytes | bytearray | memoryview) -> array:
    """Flat ``array('Q')`` of (offset, timestamp, position) triples from index bytes.

    A trailing partial entry (``len(data) % 24`` bytes) is ignored; callers
    that care whether the file was torn check the length themselves.
    """
    whole = len(data) - len(data) % ENTRY_SIZE
    out = array("Q")
    out.frombytes(bytes(memoryview(data)[:whole]))
    if not _LITTLE:  # pragma: no cover - every supported host is little-endian
        out.byteswap()
    return out


def entries_to_bytes(entries: array) -> bytes:
    """The on-disk bytes of a flat entry array (inverse of :func:`decode_entries`)."""
    if _LITTLE:
        return entries.tobytes()
    swapped = array("Q", entries)  # pragma: no cover
    swapped.byteswap()  # pragma: no cover
    return swapped.tobytes()  # pragma: no cover


def is_well_formed(entries: array, start_offset: int) -> bool:
    """True when offsets and positions strictly increase and no offset is below
    ``start_offset`` (the segment's first offset)."""
    n = len(entries) // 3
    if n == 0:
        return True
    offsets = entries[0::3]
    positions = entries[2::3]
    if offsets[0] < start_offset:
        return False
    return all(map(operator.lt, offsets, offsets[1:])) and all(map(operator.lt, positions, positions[1:]))


class SegmentIndex:
    """The entries of one segment's ``.index``, in memory, plus its writer.

    ``fd`` is the open index file (``O_RDWR``) or None for a read-only copy of
    a sealed segment's index. Writes go through :meth:`append` (``os.pwrite``
    at the end of the file) and :meth:`truncate_to_position`.
    """

    __slots__ = ("path", "entries", "fd", "interval_bytes", "_last_position", "_written", "_floor")

    def __init__(self, path: str, entries: array, fd: int | None, interval_bytes: int):
        self.path = path
        self.entries = entries
        self.fd = fd
        self.interval_bytes = interval_bytes
        self._last_position = entries[-1] if entries else -1
        self._written = len(entries) // 3  # entries on the file (the rest are pending)
        self._floor = -1  # the entry floor_by_offset answered last (a hint: checked before use)

    # -- reads -------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.entries) // 3

    def entry(self, i: int) -> tuple[int, int, int]:
        """Entry ``i`` as (offset, timestamp_us, position)."""
        e = self.entries
        return e[3 * i], e[3 * i + 1], e[3 * i + 2]

    def floor_by_offset(self, offset: int) -> tuple[int, int] | None:
        """(entry offset, position) of the last entry with offset <= ``offset``, or None.

        A consumer reading front to back asks for the entry after the one answered last (or the
        same one again): that entry is checked first (entry offsets only ever increase along
        the array, so "at or below ``offset``, the next one above it" is the answer, whatever
        happened to the array since); anything else is a binary search."""
        e = self.entries
        n = len(e) // 3
        i = self._floor + 1
        if 0 < i < n and e[3 * i - 3] <= offset:  # at or past the last answer
            if e[3 * i] > offset:
                return e[3 * i - 3], e[3 * i - 1]  # the same entry again
            if i + 1 == n or e[3 * i + 3] > offset:
                self._floor = i
                return e[3 * i], e[3 * i + 2]
        lo, hi = 0, n
        while lo < hi:  # first entry with offset > target
            mid = (lo + hi) // 2
            if e[3 * mid] <= offset:
                lo = mid + 1
            else:
                hi = mid
        i = lo - 1
        if i < 0:
            return None
        self._floor = i
        return e[3 * i], e[3 * i + 2]

    def before_timestamp(self, timestamp_us: int) -> tuple[int, int] | None:
        """(entry offset, position) of the last entry with timestamp < ``timestamp_us``.

        Assumes base timestamps do not decrease along the log (the broker stamps
        them that way); None means "walk from the segment start".
        """
        e = self.entries
        lo, hi = 0, len(e) // 3
        while lo < hi:  # first entry with timestamp >= target
            mid = (lo + hi) // 2
            if e[3 * mid + 1] < timestamp_us:
                lo = mid + 1
            else:
                hi = mid
        i = lo - 1
        if i < 0:
            return None
        return e[3 * i], e[3 * i + 2]

    def max_timestamp(self) -> int:
        """Largest indexed timestamp (0 when empty)."""
        return max(self.entries[1::3], default=0)

    # -- writes ------------------------------------------------------------

    def wants_entry(self, position: int) -> bool:
        """Whether a batch starting at ``position`` gets an entry (the sparse rule)."""
        return self._last_position < 0 or position - self._last_position >= self.interval_bytes

    def add(self, offset: int, timestamp_us: int, position: int) -> None:
        """Record an entry in memory (:meth:`flush` persists it)."""
        self.entries.extend((offset, timestamp_us, position))
        self._last_position = position

    def append(self, offset: int, timestamp_us: int, position: int) -> None:
        """Add an entry; it reaches the file with the next :meth:`flush` (see the
        module doc: at most ``FLUSH_ENTRIES`` entries or ``FLUSH_LOG_BYTES`` of log
        later, or at sync / seal / close).

        Raises OSError from a write this append triggered (the entry stays in
        memory: :meth:`truncate_to_count` undoes it).
        """
        self.add(offset, timestamp_us, position)
        entries = self.entries
        written = self._written
        pending = len(entries) // 3 - written
        if pending >= FLUSH_ENTRIES or position - entries[3 * written + 2] >= FLUSH_LOG_BYTES:
            self.flush()

    @property
    def pending(self) -> int:
        """Entries in memory not yet written to the file."""
        return len(self.entries) // 3 - self._written

    def flush(self) -> None:
        """``os.pwrite`` the pending entries at the end of the file (one call). Raises OSError."""
        count = len(self.entries) // 3
        if count == self._written:
            return
        assert self.fd is not None, "read-only index"
        tail = self.entries[3 * self._written :]
        _pwrite_all(self.fd, entries_to_bytes(tail), self._written * ENTRY_SIZE)
        self._written = count

    def truncate_to_position(self, position: int) -> None:
        """Drop entries whose position is >= ``position`` (memory and file)."""
        positions = self.entries[2::3]
        keep = bisect_right(positions, position - 1)
        del self.entries[3 * keep :]
        self._last_position = self.entries[-1] if self.entries else -1
        self._written = min(self._written, keep)  # never extend the file over pending entries
        if self.fd is not None:
            os.ftruncate(self.fd, self._written * ENTRY_SIZE)

    def truncate_to_count(self, count: int) -> None:
        """Keep the first ``count`` entries: memory at once, then the file (``os.ftruncate``
        to ``24 *`` the entries of those on the file; raises OSError, and calling again
        retries the cut)."""
        del self.entries[3 * count :]
        self._last_position = self.entries[-1] if self.entries else -1
        self._written = min(self._written, count)  # never extend the file over pending entries
        if self.fd is not None:
            os.ftruncate(self.fd, self._written * ENTRY_SIZE)

    def sync(self) -> None:
        """Write the pending entries, then ``os.fdatasync`` the file. Raises OSError."""
        if self.fd is not None:
            self.flush()
            os.fdatasync(self.fd)

    def close(self) -> None:
        """Write the pending entries (best effort: recovery re-adds what a failed write
        lost) and close the file."""
        if self.fd is not None:
            try:
                self.flush()
            except OSError:
                pass
            os.close(self.fd)
            self.fd = None


def read_index_file(path: str) -> bytes | None:
    """The raw bytes of an index file, or None when it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        chunks = []
        pos = 0
        while pos < size:
            chunk = os.pread(fd, size - pos, pos)
            if not chunk:
                break
            chunks.append(chunk)
            pos += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_index_file(path: str, entries: array) -> None:
    """Replace ``path`` with ``entries`` atomically: write ``path + '.staging'``,
    fsync it, rename over ``path``. The caller fsyncs the directory."""
    staging = path + ".staging"
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _pwrite_all(fd, entries_to_bytes(entries), 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(staging, path)


def _pwrite_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, position)
        view = view[n:]
        position += n
