"""Write-behind: keep the page cache that appended log data takes bounded.

Why (measured in session 5, docs/benchmarks.md "fsync off and the page cache
(session 5)"): an append is a ``pwrite`` into the OS page cache, and every byte
appended to a log that nobody deletes takes a page the cache did not hold
before. On a VM whose free memory is handed back to the host (virtio-balloon
free page reporting, as on the benchmark machine) a page the guest has not
touched lately costs a host fault on first write: the copy into the cache
(``copy_folio_from_iter_atomic``) went from ~0.3 ms to 3-5 ms per MB of
appended data once a few GB had been written, whatever the sync policy; not
the kernel's dirty-page throttling (``balance_dirty_pages`` never showed,
``nr_dirty`` stayed under the background threshold, and writing back early
alone did not help). Pages the kernel gets back from the cache and hands out
again at once cost nothing extra, so a server whose cache of written data
stays bounded pays the same per byte after 10 GB as after 10 MB.

How: each partition log hands every ``CHUNK_BYTES`` it appended (up to the last
``TAIL_BYTES`` boundary of its active segment; a sealed segment's rest whole) to
:meth:`WriteBehind.add`. A worker thread then

* asks the kernel to start writing that range back (``sync_file_range`` with
  ``SYNC_FILE_RANGE_WRITE``: no waiting; RocksDB's ``bytes_per_sync`` and
  PostgreSQL's ``*_flush_after`` use the same call), so dirty pages never pile
  up into one large writeback;
* once the ranges handed over add up to more than ``cache_bytes``, takes the
  oldest ones (oldest first, across every partition of the engine), waits for
  their writeback (``SYNC_FILE_RANGE_WAIT_BEFORE | WRITE | WAIT_AFTER``) and
  drops them from the page cache (``posix_fadvise(POSIX_FADV_DONTNEED)``).

So about ``cache_bytes`` of the most recently appended data stays cached for
tail readers; a consumer reading further back reads from the disk (the page
cache then holds what it read, until the kernel evicts it).

Durability: none of this is a sync. ``sync_file_range`` writes no metadata
and guarantees nothing on a power loss; acknowledgements under
``enforce_fsync`` and the periodic syncs still wait for ``fdatasync``
(:mod:`.flusher`). The worker opens each file again by path (its own open
file description), so a writeback error its waits see is still reported to
the log's ``fdatasync`` (Linux tracks which errors each open file description
has seen). Files gone meanwhile (retention, truncation) are skipped; errors
are counted and otherwise ignored: these are hints.

Where unavailable (no ``sync_file_range`` in the C library, no
``os.posix_fadvise``: not Linux) or with ``cache_bytes`` 0, :meth:`add` does
nothing and the kernel alone decides, as before.

Thread use: :meth:`add` is called on the event loop thread and only submits;
the range queue and counters belong to the one worker thread.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from headwater import metrics

CHUNK_BYTES = 4 << 20
"""A log hands its appended bytes over in ranges of at least this many bytes."""
TAIL_BYTES = 2 << 20
"""A range handed over from a log's *active* segment ends at a multiple of this many bytes, so
its writeback never touches the page-cache folio the next append writes into (x86-64's largest
page-cache folio is 2 MiB, and folios are aligned to their size). Why (session 10,
docs/benchmarks.md "Produce-ack tail at the 5 ms tick"): writeback of delayed-allocation data
(ext4) allocates its blocks with that folio locked and the inode's ``i_data_sem`` held, reading
block bitmaps from the disk when they are not cached; an append into the same folio waited for
its lock (``__filemap_get_folio``), or, its block now allocated, for ``i_data_sem`` to move the
on-disk size (``ext4_da_write_end``): the event loop blocked in ``pwrite`` for as long as that
disk read took (up to hundreds of ms on a shared disk). A sealed segment is handed over whole."""
CACHE_BYTES = 256 << 20
"""Default ``cache_bytes`` (``[system] write_behind_cache_bytes``)."""

SYNC_FILE_RANGE_WAIT_BEFORE = 1
SYNC_FILE_RANGE_WRITE = 2
SYNC_FILE_RANGE_WAIT_AFTER = 4
"""The flags of Linux ``sync_file_range(2)`` (include/uapi/linux/fs.h)."""


def _load_sync_file_range():
    """libc's ``sync_file_range(int fd, off64_t offset, off64_t nbytes, unsigned int flags)``
    through ctypes (which releases the GIL during the call), or None where absent."""
    if not sys.platform.startswith("linux") or not hasattr(os, "posix_fadvise"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    fn.restype = ctypes.c_int
    return fn


_SYNC_FILE_RANGE = _load_sync_file_range()


def available() -> bool:
    """Whether this platform has what write-behind needs (Linux ``sync_file_range``)."""
    return _SYNC_FILE_RANGE is not None


def cached_bytes(path: str) -> int:
    """How many bytes of the file at ``path`` are in the page cache now, in whole pages
    (``mincore(2)`` over a read-only shared mapping, which reads nothing in). For tests and
    diagnostics; Linux only (raises OSError elsewhere or when the calls fail)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    page = os.sysconf("SC_PAGE_SIZE")
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        addr = libc.mmap(None, size, 0x1, 0x01, fd, 0)  # PROT_READ, MAP_SHARED
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap of {path} failed")
        try:
            vec = ctypes.create_string_buffer((size + page - 1) // page)
            if libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore of {path} failed")
            return sum(b & 1 for b in vec.raw) * page
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


class WriteBehind:
    """An engine's write-behind worker (see the module docstring).

    ``cache_bytes``: how many handed-over bytes may stay cached before the
    oldest are written back and dropped; 0 turns write-behind off.
    Counters (written by the worker; tests and logs read them): ``started``
    (bytes whose writeback was started), ``dropped`` (bytes dropped from the
    page cache after their writeback), ``skipped`` (ranges of files gone),
    ``errors`` (calls that failed).
    """

    def __init__(self, cache_bytes: int = CACHE_BYTES):
        if cache_bytes < 0:
            raise ValueError(f"cache_bytes must be >= 0, got {cache_bytes}")
        self.cache_bytes = cache_bytes
        self.enabled = cache_bytes > 0 and available()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="headwater-writebehind") if self.enabled else None
        self._ranges: deque[tuple[str, int, int]] = deque()  # handed over, still cached: worker only
        self._held = 0
        self.started = 0
        self.dropped = 0
        self.skipped = 0
        self.errors = 0
        # /metrics (read at scrape time, on another thread: plain int reads)
        self._source = metrics.add_source(self._families) if self.enabled else None

    def _families(self) -> Iterator[Metric]:
        """The worker's counters as metric families (``/metrics``): bytes whose writeback was
        started and bytes dropped from the page cache (``headwater_write_behind_bytes_total``,
        label ``stage``), bytes handed over and still cached
        (``headwater_write_behind_cached_bytes``) and failed calls
        (``headwater_write_behind_errors_total``)."""
        done = CounterMetricFamily("headwater_write_behind_bytes", "Appended log bytes by write-behind stage: "
                                   "writeback started, or dropped from the page cache", labels=("stage",))
        done.add_metric(("started",), self.started)
        done.add_metric(("dropped",), self.dropped)
        yield done
        yield GaugeMetricFamily("headwater_write_behind_cached_bytes", "Appended log bytes handed to write-behind "
                                "and not dropped yet (at most about [system] write_behind_cache_bytes)",
                                value=self._held)
        yield CounterMetricFamily("headwater_write_behind_errors", "Write-behind calls that failed "
                                  "(sync_file_range or posix_fadvise; hints only: the log's fdatasync still "
                                  "reports write errors)", value=self.errors)

    def stats(self) -> dict[str, int]:
        return {"started": self.started, "dropped": self.dropped, "held": self._held,
                "skipped": self.skipped, "errors": self.errors}

    def add(self, path: str, start: int, end: int) -> None:
        """Hand over bytes ``start .. end`` of the file at ``path`` (already written with
        ``pwrite``). Returns at once; does nothing when disabled or closed."""
        if self._executor is None or end <= start:
            return
        try:
            self._executor.submit(self._run, path, start, end)
        except RuntimeError:  # shut down: the engine is closing
            pass

    def drain(self) -> None:
        """Wait until every range handed over so far was processed (for tests)."""
        if self._executor is not None:
            self._executor.submit(lambda: None).result()

    def close(self) -> None:
        """Finish the queued work, then stop the worker (ranges still cached stay cached)."""
        if self._source is not None:
            metrics.remove_source(self._source)
            self._source = None
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    # -- the worker --------------------------------------------------------------

    def _call(self, path: str, start: int, end: int, flags: int, drop: bool) -> bool | None:
        """One ``sync_file_range`` (then the drop): True if done, False if a call failed,
        None if the file is gone."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.skipped += 1
            return None
        try:
            if _SYNC_FILE_RANGE(fd, start, end - start, flags) != 0:
                self.errors += 1
                return False
            if drop:
                os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)
        except OSError:
            self.errors += 1
            return False
        finally:
            os.close(fd)
        return True

    def _run(self, path: str, start: int, end: int) -> None:
        started = self._call(path, start, end, SYNC_FILE_RANGE_WRITE, drop=False)
        if started is None:
            return  # deleted meanwhile: its pages went with it
        if started:
            self.started += end - start
        self._ranges.append((path, start, end))
        self._held += end - start
        wait = SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER
        while self._held > self.cache_bytes and self._ranges:
            old_path, old_start, old_end = self._ranges.popleft()
            self._held -= old_end - old_start
            if self._call(old_path, old_start, old_end, wait, drop=True):
                self.dropped += old_end - old_start
