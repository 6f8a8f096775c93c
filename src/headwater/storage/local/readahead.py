"""Catch-up reads: a read of data that is not in the page cache never waits on the event loop.

A poll reads segment data with ``os.pread`` on the event loop. When the bytes are in the page
cache that is a copy; when they are not (a consumer far behind the tail: write-behind dropped
them, see :mod:`.writebehind`) the ``pread`` waits for the disk, and every other connection of
the server waits with it. A read that may not block (``nowait``) therefore first asks the
kernel whether every page of the chunk it is about to read is cached (``cachestat(2)``, Linux
6.5+; elsewhere a one-byte ``preadv2(RWF_NOWAIT)`` of the chunk's first and last page), and
when one is not:

- a worker thread reads the chunk (:func:`read_chunk`, ``os.pread`` through the page cache,
  whose readahead keeps the disk busy meanwhile), and the read raises
  :class:`~headwater.storage.api.NotCached` holding the worker's future. The caller awaits it
  and runs the whole read again on the loop, against the log's state of that moment: a chunk
  a worker read (:func:`find`) is used as it is, no second copy, when it belongs to the same
  segment (:attr:`.Segment.serial`, which a truncation renews), and its batches are
  re-verified like any other read's;
- a read that used such a chunk has the workers read the next :data:`DEPTH` chunks, each
  starting where the one before ends (:meth:`.Segment.read_on`, not awaited): a consumer
  reading front to back finds its next chunk read, or being read, while the loop serves the
  current one, and the disk has :data:`DEPTH` reads at a time.

The workers never touch the log's objects: they open the file by name, so a segment deleted or
cut meanwhile only makes them read less (or nothing). Chunks read are held up to
:data:`HELD_BYTES` in all, the least recently used dropped first. Pages read go through the page
cache as any read's do (no drop: ``POSIX_FADV_DONTNEED`` after each chunk halved the rate in a
probe, as every call drains the LRU lists on every CPU), unless :data:`direct` is on: then a
chunk not all in the page cache is read with ``O_DIRECT`` into the worker's reused buffer and
copied out (:func:`read_direct`), in chunks of at least :data:`DIRECT_CHUNK`, the kernel asked to
read nothing ahead, and the loop checks the cache with ``cachestat`` only (no ``RWF_NOWAIT``
read, whose miss would start the kernel's readahead): a consumer far behind takes no new
page-cache pages, which on a VM whose free memory goes back to the host cost as much as the
writer's (docs/benchmarks.md "Session 15").
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import errno
import mmap
import os
import sys
import threading
from collections import OrderedDict

from headwater import _native
from headwater.storage.api import NotCached

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_CACHESTAT = 451  # the syscall number on x86_64 and aarch64 (asm-generic)

_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="hw-readahead")
    return _pool


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64)
                for n in ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")]


class _CacheStat:
    """``cachestat(fd, &range, &stat, 0)`` through libc's ``syscall``; ``usable`` is False
    where the kernel or the platform has none (then :func:`cached` probes instead)."""

    def __init__(self) -> None:
        self.usable = False
        if not sys.platform.startswith("linux"):
            return
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            call = libc.syscall
        except (OSError, AttributeError):
            return
        call.restype = ctypes.c_long
        call.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
        self._call = call
        self._lock = threading.Lock()  # one range/stat pair, shared
        self._range, self._stat = _Range(), _Stat()
        self._range_p, self._stat_p = ctypes.addressof(self._range), ctypes.addressof(self._stat)
        fd = os.open(os.devnull, os.O_RDONLY)
        try:
            self.usable = self.pages(fd, 0, _PAGE) is not None
        finally:
            os.close(fd)

    def pages(self, fd: int, position: int, length: int) -> int | None:
        """Pages of ``[position, position + length)`` in the page cache; None when the call fails."""
        with self._lock:
            self._range.off, self._range.len = position, length
            if self._call(_CACHESTAT, fd, self._range_p, self._stat_p, 0) != 0:
                return None
            return self._stat.nr_cache


_cachestat = _CacheStat()


def _probe(fd: int, position: int) -> bool:
    """Whether the page holding ``position`` is cached (a one-byte RWF_NOWAIT read)."""
    try:
        os.preadv(fd, [bytearray(1)], position, os.RWF_NOWAIT)
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True  # let the real read report it


def cached(fd: int, position: int, length: int) -> bool:
    """Whether every page of ``[position, position + length)`` of ``fd`` is in the page cache
    (the first and last page only, where ``cachestat`` is missing), its last page read in (not
    one the kernel's readahead is still reading). True for an empty range and
    where neither check exists (the read then blocks, as it always did)."""
    if length <= 0:
        return True
    if _cachestat.usable:
        first = position // _PAGE
        want = (position + length - 1) // _PAGE - first + 1
        got = _cachestat.pages(fd, first * _PAGE, want * _PAGE)
        if got is not None:
            # cachestat counts a page the kernel's readahead is still reading in; the last page,
            # read last, is then not ready yet: a one-byte RWF_NOWAIT read of it tells
            return got >= want and (not hasattr(os, "RWF_NOWAIT") or _probe(fd, position + length - 1))
    if not hasattr(os, "RWF_NOWAIT"):
        return True
    return _probe(fd, position) and _probe(fd, position + length - 1)


NOWAIT_READ_MAX = 256 << 10
"""Chunks up to this many bytes are read with one ``preadv2(RWF_NOWAIT)`` (:func:`read_nowait`)
instead of a ``cachestat`` check, a one-byte probe and a ``pread``: one system call, not three,
for the reads of consumers at the tail (a poll of 1000 x 100 B reads ~156 KiB). Larger ones keep
the check: past ~256 KiB the zeroed buffer the pure-Python reference must give ``preadv`` costs
more than the calls saved (``benchmarks/bench_poll_pieces.py``, docs/benchmarks.md "Iggy poll:
the server's time per poll (session 10)": at 156 KiB 14.7 µs against 16.9, at 1 MiB 92 against
75; the compiled read, which zeroes nothing, took 11.9 and 68)."""

_NOWAIT = getattr(os, "RWF_NOWAIT", 0) if hasattr(os, "preadv") else 0


MISSED = memoryview(b"")
"""What :func:`read_nowait` returns when some of the bytes are not in the page cache."""


def read_nowait(fd: int, length: int, position: int) -> memoryview | None:
    """Bytes ``[position, position + length)`` of ``fd`` (read-only) when every one of them is in
    the page cache, read without waiting (``preadv2`` with ``RWF_NOWAIT``: the kernel returns
    fewer bytes, or EAGAIN, rather than wait for the disk); :data:`MISSED` when some are not;
    None when the range is over :data:`NOWAIT_READ_MAX`, the flag is missing or the filesystem
    refuses it (check with :func:`cached` then). After a miss, do not ask :func:`cached`: the
    miss starts the kernel's readahead of the range, whose pages then count as cached while
    their reads are still in flight (a ``pread`` of them would wait). Compiled
    (``headwater.storage.local._pread_c``: read into a buffer nothing zeroed first) when built,
    else :func:`_py_read_nowait`, the reference."""
    if not _NOWAIT or length > NOWAIT_READ_MAX or length <= 0:
        return None
    if _compiled is None:
        return _py_read_nowait(fd, length, position)
    got = _compiled.read_nowait(fd, length, position, _NOWAIT)
    return MISSED if got is False else got


def _py_read_nowait(fd: int, length: int, position: int) -> memoryview | None:
    """:func:`read_nowait` past its size check, in Python: ``os.preadv`` into a zeroed bytearray."""
    buf = bytearray(length)
    try:
        got = os.preadv(fd, [buf], position, _NOWAIT)
    except BlockingIOError:
        return MISSED
    except OSError:  # EOPNOTSUPP and the like (a filesystem without it): check instead
        return None
    return memoryview(buf).toreadonly() if got == length else MISSED


def use_implementation(name: str) -> str:
    """Switch :func:`read_nowait` to ``"compiled"`` or ``"python"`` (the tests compare them);
    returns the previous choice. ValueError for an unknown name or a compiled module not built."""
    global _compiled
    previous = "python" if _compiled is None else "compiled"
    if name == "python":
        _compiled = None
    elif name == "compiled" and _built is not None:
        _compiled = _built
    else:
        raise ValueError(f"no {name!r} implementation of read_nowait here")
    return previous


_built = _native.load("headwater.storage.local._pread_c") if _NOWAIT else None
_compiled = _built


WINDOW = 32 << 20
"""Bytes past a chunk that was not in the page cache that a worker asks the kernel to read into
it (``POSIX_FADV_WILLNEED``: asynchronous readahead), renewed when the reader is half way through:
a consumer catching up then finds its next pages cached and is served on the loop, without a
worker round trip per poll. (The workers open the file anew for each read, so the kernel's own
sequential readahead, which lives in an open file, never ramps up for them.)"""


def prefetch(path: str, position: int, length: int) -> None:
    """Have a worker ask the kernel to read ``[position, position + length)`` of ``path`` into
    the page cache (``POSIX_FADV_WILLNEED``; a hint: failures are ignored). Event loop only."""
    if length > 0 and hasattr(os, "POSIX_FADV_WILLNEED"):
        _executor().submit(_willneed, path, position, length)


def _willneed(path: str, position: int, length: int) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, position, length, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass
    finally:
        os.close(fd)


DEPTH = 2
"""Chunks a catch-up reader has read ahead of it (each on a worker thread: the disk gets
that many reads at once)."""

HELD_BYTES = 64 << 20
"""Bytes of the chunks the workers read (or are reading) held for reads to use, all segments
together, at most (the least recently used dropped first; a read that then misses reads again)."""

_held: OrderedDict[tuple[int, int], tuple[concurrent.futures.Future, int]] = OrderedDict()
_held_bytes = 0


def pread_exact(fd: int, length: int, position: int) -> bytes:
    """``os.pread`` until ``length`` bytes or end of file."""
    data = os.pread(fd, length, position)
    if len(data) == length or not data:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        more = os.pread(fd, length - got, position + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def read_chunk(path: str, position: int, length: int) -> bytes | None:
    """Worker thread: bytes ``[position, position + length)`` of ``path`` (fewer at its end),
    read through the page cache (the kernel's readahead keeps the disk busy meanwhile), or,
    with :data:`direct` on and the range not all cached, past it (:func:`read_direct`, falling
    back to the page cache where the filesystem refuses ``O_DIRECT``). None when the file
    cannot be opened or read (gone): the caller's next read decides."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        if direct and not cached(fd, position, length):
            data = read_direct(path, position, length)
            if data is not None:
                return data
        return pread_exact(fd, length, position)
    except OSError:
        return None
    finally:
        os.close(fd)


direct = True
"""Catch-up reads past the page cache (``[system] catchup_direct_io``; :func:`set_direct`).
On, a worker reads a chunk that is not all in the page cache with ``O_DIRECT`` into a buffer
it reuses, then copies it out (:func:`read_direct`), and no ``POSIX_FADV_WILLNEED`` runs ahead
of the reader: a consumer reading what write-behind dropped takes no new page-cache pages
(on a VM whose free memory goes back to the host each costs a host fault on first touch, as
the writer's do: docs/benchmarks.md "Session 14"). Its chunks are then at least
:data:`DIRECT_CHUNK` bytes. Off: the page cache, as before session 15 (on by default since:
docs/benchmarks.md "Session 15")."""

DIRECT_CHUNK = 4 << 20
"""Bytes a worker reads at a time, at least, for a catch-up reader when :data:`direct` is on
(no kernel readahead works for it then: each worker read is one disk read)."""

ALIGN = 4096
"""Offsets, lengths and buffer addresses of ``O_DIRECT`` reads are multiples of this: a page,
and a multiple of every logical block size up to it (512 and 4096 in practice)."""

_buffers = threading.local()  # each worker thread's reused mmap (page-aligned) for O_DIRECT reads


def set_direct(on: bool) -> bool:
    """Turn :data:`direct` on or off for the whole process (the engine does, from its
    setting; the last engine opened decides); returns the previous value."""
    global direct
    previous, direct = direct, bool(on)
    return previous


def _buffer(size: int) -> mmap.mmap:
    """This thread's O_DIRECT buffer, at least ``size`` bytes (made anew, in whole
    :data:`DIRECT_CHUNK` steps, only when a larger read comes): reused, so its pages stay the
    process's own rather than coming fresh from the kernel for every read."""
    buf = getattr(_buffers, "buf", None)
    if buf is None or len(buf) < size:
        if buf is not None:
            buf.close()
        buf = _buffers.buf = mmap.mmap(-1, -(-size // DIRECT_CHUNK) * DIRECT_CHUNK)
    return buf


def read_direct(path: str, position: int, length: int) -> bytes | None:
    """Bytes ``[position, position + length)`` of ``path`` (fewer at its end) read with
    ``O_DIRECT``, bypassing the page cache: the blocks around the range (:data:`ALIGN`) into
    this thread's reused buffer, the range copied out as ``bytes`` (the buffer is read again
    by the next call; ``bytes`` live as long as a reply holds a view of them). None when the
    filesystem refuses ``O_DIRECT`` (EINVAL on open or read: tmpfs and the like; read through
    the page cache then). Other OSErrors propagate. Worker threads (any thread: the buffer is
    per thread)."""
    if length <= 0:
        return b""
    if not hasattr(os, "O_DIRECT"):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return None
        raise
    try:
        start = position - position % ALIGN
        size = -(-(position + length) // ALIGN) * ALIGN - start
        view = memoryview(_buffer(size))
        try:
            got = 0
            while got < size:
                n = os.preadv(fd, [view[got:size]], start + got)
                got += n
                if n == 0 or n % ALIGN:  # a short read: the end of the file
                    break
            skip = position - start
            return bytes(view[skip : min(got, skip + length)]) if got > skip else b""
        finally:
            view.release()
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return None
        raise
    finally:
        os.close(fd)


def start(serial: int, path: str, position: int, length: int) -> concurrent.futures.Future:
    """Have the worker read ``[position, position + length)`` of segment ``serial`` (its file
    ``path``) and hold the result for :func:`find`; the future of that read. Event loop only."""
    global _held_bytes
    key = (serial, position)
    held = _held.get(key)
    if held is not None and held[1] >= length:
        return held[0]
    if held is not None:
        _held_bytes -= _held.pop(key)[1]
    future = _executor().submit(read_chunk, path, position, length)
    _held[key] = (future, length)
    _held_bytes += length
    while _held_bytes > HELD_BYTES and len(_held) > 1:
        _held_bytes -= _held.popitem(last=False)[1][1]
    return future


def find(serial: int, position: int) -> tuple[concurrent.futures.Future, int, int] | None:
    """The held read of segment ``serial`` whose range holds ``position`` (the one reaching
    furthest) as (future, start, length asked); None when none does. Event loop only."""
    best = None
    for (key_serial, start_at), (future, size) in _held.items():
        if key_serial == serial and start_at <= position < start_at + size:
            if best is None or start_at + size > best[1] + best[2]:
                best = (future, start_at, size)
    if best is not None:
        _held.move_to_end((serial, best[1]))
    return best


def missing(path: str, position: int, length: int, future: concurrent.futures.Future) -> NotCached:
    """The NotCached a read raises while ``future`` (a worker's read of the range) runs."""
    return NotCached(f"{path}: bytes {position}..{position + length} are not in the page cache", future)


def evict(path: str) -> bool:
    """Write ``path`` back and drop its pages from the page cache (as for a consumer far behind,
    whose bytes write-behind dropped); False where the pages stay in memory (tmpfs). For tests
    and benchmarks."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        size = os.fstat(fd).st_size
        return not size or not cached(fd, 0, size)
    finally:
        os.close(fd)


def sequential(fd: int) -> None:
    """Hint that ``fd`` is read front to back (the kernel doubles its readahead window)."""
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    except (OSError, AttributeError):
        pass  # a hint
