"""Block preallocation off the event loop: appends write into blocks reserved beforehand.

Why (measured in session 10, docs/benchmarks.md "Produce-ack tail at the 5 ms tick (session
10)"; session 11, "Ack stalls: preallocation"): on ext4 (delayed allocation) a ``pwrite`` that
extends a segment reserves a delayed block for each new page under the inode's ``i_data_sem``,
and writeback later allocates those blocks holding the same lock, reading a block group's
bitmap from the disk when it is not cached. On a busy shared disk that read takes tens to
hundreds of ms, and the event loop's next ``pwrite`` into that file waits for it. A write into
blocks already reserved with ``fallocate(2)`` (unwritten extents) takes no delayed block and
its writeback allocates nothing (only converts the extent), so that wait is gone.

``fallocate`` itself takes the inode's lock (``i_rwsem``), which every ``pwrite`` takes too, and
allocates under it: run on the file being appended to, it would only move the wait. So the
blocks are reserved in a file nothing appends to yet:

* **The spare**: once the active segment is half written (or its rest is at most
  ``SPARE_LEAD_WINDOWS`` windows, for small segments; checked at the points below), the
  log asks for the next segment's files (:meth:`Reservations.want_spare`). The worker
  creates ``spare-<n>.log.staging`` and ``spare-<n>.index.staging`` in the partition
  directory and reserves ``segment_size`` bytes of the ``.log`` (and the index entries a
  full segment needs, 24 bytes per ``index_interval_bytes``) with ``FALLOC_FL_KEEP_SIZE``:
  the file size stays 0, so a spare holds no data, and recovery sweeps a leftover one like
  any ``*.staging`` file. At the roll the loop takes it (:meth:`Reservations.take_spare`)
  when it is ready and links it under the new segment's name and opens it (``os.link``,
  ``os.open``, then ``os.unlink``: metadata only, no inode to allocate; a published spare
  holds no fd, so spares never use up the fds partitions need near ``RLIMIT_NOFILE``); when
  it is not ready the loop creates the segment itself, as before. The loop never waits for
  the worker. The whole segment is reserved there because that is the only place where
  the reservation does not contend with the appends: session 12 tried a spare of one window
  topped up in the active segment, and under disk load the loop's ``pwrite`` waited for the
  top-ups' ``fallocate`` (up to 195 ms; docs/benchmarks.md "Ack stalls: the bounded window
  (session 12)").
* **A window ahead in a segment not made from a spare** (a partition's first, the active
  one after a restart or a truncation, a roll that came before the spare was ready, a
  spare the budget did not fit): once it holds ``ACTIVE_AFTER_BYTES`` (or half of
  ``segment_size`` when that is less), the worker reserves its next ``window`` bytes
  (``[system] preallocate_window_bytes``, default 64 MiB, never past ``segment_size``), and
  again every half window appended, topping the reservation back up to a window ahead
  (:func:`ahead_plan`). These calls run beside the appends (an append into that file may
  wait for one call's allocation, as it could for session 11's one reservation of such a
  segment's whole rest), so a partition written a little holds a window, not a segment.
* **Early roll onto the spare**: so that a partition written continuously does not have such
  a segment topped up to its end (a 1 GiB segment: ~30 calls beside the appends, each one
  holding the inode's ``i_rwsem`` through its bitmap reads and, on a filesystem mounted
  ``discard`` without a journal, the synchronous discard of an extent block it frees: the
  loop's ``pwrite`` waited 28.7 ms behind a 13.7 ms one in session 13), such a segment asks
  for the spare at its first top-up already and, once the spare is ready and more than a
  window of the segment is left, the log rolls onto it at its next check point (every
  ``EARLY_CHECK_BYTES`` while the spare is being made): a short segment, then whole ones.
  Until then the top-ups go on (one is put off while a quarter window is still reserved
  ahead), and one queued for a segment sealed meanwhile is skipped.
* **Sealed segments keep nothing past their end**: a segment sealed with reserved blocks
  past its size (a time-based roll, a truncation, the window's rest) has them released by
  the worker (``ftruncate`` to its size on a duplicate fd; ext4 frees blocks past the end
  even when the size does not change), under the log's lock so that a truncation
  reactivating the segment never races it. A clean close releases the active segment's
  (:meth:`Reservations.close`); recovery releases what a crash left on any segment.

``FALLOC_FL_KEEP_SIZE`` keeps ``st_size`` the length of the data: recovery, readers and
every size check are unchanged (unlike ``posix_fallocate``, which the topic option
``preallocate_segments`` uses: it extends the file with zeros, on the loop).

Disk space is bounded twice. Per partition: a window ahead in a segment not made from a
spare; in one made from a spare, its rest, plus the next spare from the segment's half on
(1.5 x ``segment_size`` at the most, just before a roll; 2 x for a segment of at most
``SPARE_LEAD_WINDOWS`` windows, 256 MiB by default, whose spare is asked for at once). Per
server: a budget
(``[system] preallocate_budget_bytes``, default 4 GiB) of reserved, unwritten bytes, kept in
a :class:`Ledger`: after each call the worker sets the file's charge to what ``fstat``
says it holds past its data (``st_blocks`` x 512 less the size rounded up to 4 KiB), so the
ledger follows the disk rather than a count of requests; a reservation that would take the
total past the budget is not made (``over_budget``), and a partition that gets none works as
with the switch off (its appends allocate; no spare is made, the roll creates the segment).
The charges of the active segment go stale as appends fill the window (counted high, never
low) until its next top-up or seal. The worker also reserves only while the filesystem keeps
:func:`min_free_bytes` free after the reservation (``statvfs``). A ``fallocate`` that fails
(ENOSPC, EDQUOT, EIO) is counted and otherwise ignored: the appends then allocate as before
and report their own errors. An append that fails with ENOSPC or EDQUOT while reservations
are held has every reservation of the engine released (:meth:`Preallocator.release_all`,
on the loop: spares deleted, active tails cut to their size) and is retried once; the
second failure is raised as before. The engine does the same for a metadata journal write
and a new partition's files.

Where unavailable: not Linux, no ``fallocate`` in the C library, a filesystem answering
EOPNOTSUPP (the directory is then remembered and not tried again), and tmpfs or ramfs (where
a reservation is memory and there is no block allocation to move): the spare files are
still made off the loop; nothing is reserved. ``Preallocator(enabled=False)`` (the
server's ``[system] preallocate_next_segment = false``) turns the whole mechanism off.

Thread use: the loop thread calls every method of :class:`Reservations` but the ``_job_*``
ones, which run on the preallocator's one worker thread. A published spare (``spare``) is
never touched by the worker again; ``lock`` is held by the worker around each call it makes
for the log, and by the loop only where it must exclude them (close, truncation, release).
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import os
import sys
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from headwater import metrics

from .segment import unlink_all

FALLOC_FL_KEEP_SIZE = 0x01
"""``fallocate(2)`` mode: allocate blocks, leave the file size alone (include/uapi/linux/falloc.h)."""
ACTIVE_AFTER_BYTES = 8 << 20
"""Once the active segment holds this many bytes (or half of ``segment_size`` when less), its
window ahead is reserved (so a partition nothing or little is written to reserves nothing)."""
STEP_BYTES = 64 << 20
"""Bytes one ``fallocate`` call reserves at most (so a log closing waits for at most one call)."""
DEFAULT_WINDOW_BYTES = 64 << 20
"""``[system] preallocate_window_bytes``: bytes reserved ahead of an active segment's write
position, and in a spare."""
DEFAULT_BUDGET_BYTES = 4 << 30
"""``[system] preallocate_budget_bytes``: reserved, unwritten bytes the whole server may hold."""
SPARE_LEAD_WINDOWS = 4
"""The spare is asked for once the active segment is half written, or sooner once its rest is
at most this many windows (small segments)."""
EARLY_CHECK_BYTES = 1 << 20
"""While the spare a segment not made from a whole spare asked for is being made, that segment's
check points come this often (bytes appended), so it rolls onto the spare soon after it is ready."""
MIN_FREE_BYTES = 1 << 30
MIN_FREE_SHARE = 20
"""Reserve only while at least max(``MIN_FREE_BYTES``, 1/``MIN_FREE_SHARE`` of the filesystem)
stays free after the reservation."""
SPARE_SUFFIX = ".staging"
SPARE_PREFIX = "spare-"
ENTRY_BYTES = 24  # one sparse index entry (see .index)
SLACK_BYTES = 64 << 10
"""A sealed file holding more than its size (in 4 KiB blocks) and this many bytes (extent tree
blocks count in ``st_blocks``) has reserved blocks to release."""

_TMPFS_MAGIC = 0x01021994
_RAMFS_MAGIC = 0x858458F6
_UNSUPPORTED = (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def _load_libc():
    if not sys.platform.startswith("linux"):
        return None, None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fallocate = libc.fallocate
    except (OSError, AttributeError):
        return None, None
    fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    fallocate.restype = ctypes.c_int
    statfs = getattr(libc, "statfs", None)
    if statfs is not None:
        statfs.argtypes = (ctypes.c_char_p, ctypes.c_void_p)
        statfs.restype = ctypes.c_int
    return fallocate, statfs


_FALLOCATE, _STATFS = _load_libc()


def available() -> bool:
    """Whether this platform has ``fallocate(2)`` (Linux, through the C library)."""
    return _FALLOCATE is not None


def reserve(fd: int, offset: int, length: int) -> bool:
    """``fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, length)`` (ctypes: the GIL is released
    during the call): blocks for bytes ``[offset, offset + length)`` are allocated, the file
    size is unchanged. True when done; False where the platform or filesystem cannot
    (EOPNOTSUPP, ENOSYS, EINVAL). Raises OSError otherwise (ENOSPC, EDQUOT, EIO, EBADF...)."""
    if _FALLOCATE is None or length <= 0:
        return False
    while _FALLOCATE(fd, FALLOC_FL_KEEP_SIZE, offset, length) != 0:
        err = ctypes.get_errno()
        if err == errno.EINTR:
            continue
        if err in _UNSUPPORTED:
            return False
        raise OSError(err, os.strerror(err))
    return True


def memory_backed(directory: str) -> bool:
    """Whether ``directory`` is on tmpfs or ramfs (``statfs(2)`` f_type; False when unknown)."""
    if _STATFS is None:
        return False
    buf = ctypes.create_string_buffer(256)  # struct statfs (120 bytes on x86-64); f_type first
    if _STATFS(os.fsencode(directory), buf) != 0:
        return False
    f_type = ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF
    return f_type in (_TMPFS_MAGIC, _RAMFS_MAGIC)


def min_free_bytes(total: int) -> int:
    """Bytes a reservation must leave free on a filesystem of ``total`` bytes."""
    return max(MIN_FREE_BYTES, total // MIN_FREE_SHARE)


def allocated_bytes(fd: int) -> int:
    """Bytes of disk the file holds (``st_blocks`` x 512), reserved blocks past its end included."""
    return os.fstat(fd).st_blocks * 512


def held_past_data(st: os.stat_result) -> int:
    """Bytes a file holds past its data: ``st_blocks`` x 512 less its size rounded up to 4 KiB
    (never negative; extent-tree blocks count too, a few KiB at most). ext4 counts delayed
    blocks in ``st_blocks``, so data not yet written back is not taken for a reservation."""
    return max(0, st.st_blocks * 512 - -(-st.st_size // 4096) * 4096)


def effective_window(segment_size: int, window: int) -> int:
    """The window a log of ``segment_size`` uses: ``window``, at most the segment, at least 1."""
    return max(1, min(window, segment_size))


def first_check(segment_size: int, window: int, reserved: int) -> int:
    """The active segment's size at which its first check point (:func:`ahead_plan`) runs:
    ``ACTIVE_AFTER_BYTES`` (or half of ``segment_size`` when less), or sooner when a spare's
    ``reserved`` window is half written by then. At least 1."""
    first = min(ACTIVE_AFTER_BYTES, segment_size // 2)
    if reserved > 0:
        first = min(first, reserved - effective_window(segment_size, window) // 2)
    return max(1, first)


def ahead_plan(written: int, asked_to: int, segment_size: int, window: int) -> tuple[int, int, bool]:
    """What the log does at a check point of its active segment (pure arithmetic, on the loop).

    ``written``: the segment's size now; ``asked_to``: the ``.log`` offset reservations were
    asked up to so far (a spare's window, or earlier top-ups). Returns ``(reserve_to,
    next_check, spare)``: ask for the ``.log`` to be reserved up to ``reserve_to`` when it is
    above ``asked_to`` (a window ahead of ``written``, never past ``segment_size``); run again
    once the segment holds ``next_check`` bytes (half a window on); ask for the spare when
    ``spare`` (the segment's rest is at most half of it, or ``SPARE_LEAD_WINDOWS`` windows)."""
    w = effective_window(segment_size, window)
    reserve_to = max(asked_to, min(segment_size, written + w))
    next_check = written + max(w // 2, 1)
    spare = segment_size - written <= max(segment_size // 2, SPARE_LEAD_WINDOWS * w)
    return reserve_to, next_check, spare


def index_bytes_for(log_bytes: int, index_interval_bytes: int) -> int:
    """``.index`` bytes the entries of ``log_bytes`` of log need (24 per interval, plus one)."""
    return (log_bytes // max(index_interval_bytes, 1) + 1) * ENTRY_BYTES


def _unlinked(fd: int) -> bool:
    """Whether the file open as ``fd`` has no name left (or cannot be asked)."""
    try:
        return os.fstat(fd).st_nlink == 0
    except OSError:
        return True


class Ledger:
    """Reserved, unwritten bytes per file (a ``charges`` dict per log, keyed by inode) and
    their ``total``, against ``budget`` (thread-safe: the worker sets, the loop drops)."""

    __slots__ = ("budget", "total", "_lock")

    def __init__(self, budget: int):
        self.budget = budget
        self.total = 0
        self._lock = threading.Lock()

    def fits(self, length: int) -> bool:
        """Whether ``length`` more bytes stay within the budget."""
        return self.total + length <= self.budget

    def set(self, charges: dict[int, int], key: int, value: int) -> None:
        """The file ``key`` of a log now holds ``value`` bytes (0: forgotten)."""
        with self._lock:
            self.total += value - charges.get(key, 0)
            if value > 0:
                charges[key] = value
            else:
                charges.pop(key, None)

    def drop(self, charges: dict[int, int], keep: tuple[int, ...] = ()) -> None:
        """Forget a log's charges but those of the files ``keep`` (their blocks were freed)."""
        with self._lock:
            for key in [k for k in charges if k not in keep]:
                self.total -= charges.pop(key)


class Spare:
    """A next segment's files made ahead: their paths (the loop links and opens them at the
    roll), and their fds while the worker reserves their blocks (-1 once published: a spare
    holds no fd, so spares never take the fds the partitions need near RLIMIT_NOFILE)."""

    __slots__ = ("log_path", "index_path", "log_fd", "index_fd", "reserved", "inos")

    def __init__(self, log_path: str, index_path: str, log_fd: int, index_fd: int):
        self.log_path = log_path
        self.index_path = index_path
        self.log_fd = log_fd
        self.index_fd = index_fd
        self.reserved = 0  # log bytes reserved
        self.inos: tuple[int, ...] = ()  # the files' inode numbers (their keys in the ledger)

    def close_files(self) -> None:
        """Close the fds the worker used (the reservations stay with the files)."""
        for fd in (self.log_fd, self.index_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.log_fd = self.index_fd = -1

    def discard(self) -> None:
        """Close and delete both files (errors ignored: a leftover is swept at the next boot)."""
        self.close_files()
        unlink_all((self.log_path, self.index_path))


class Preallocator:
    """An engine's preallocating worker (see the module docstring).

    ``window_bytes``: reserved ahead of each active segment's write position and in each
    spare; ``budget_bytes``: reserved, unwritten bytes of all logs together (``ledger``).

    Counters (written by the worker; tests and logs read them): ``reserved`` (bytes
    reserved), ``spares`` (spares made), ``released`` (sealed segments whose tail was
    released), ``unsupported`` (reservations the filesystem refused as unsupported),
    ``errors`` (calls that failed), ``skipped`` (reservations left out to keep the
    filesystem's free space), ``over_budget`` (reservations left out to stay within
    ``budget_bytes``). ``released_all``: :meth:`release_all` calls (loop).
    """

    def __init__(self, enabled: bool = True, window_bytes: int = DEFAULT_WINDOW_BYTES,
                 budget_bytes: int = DEFAULT_BUDGET_BYTES):
        self.enabled = enabled and available()
        self.window = max(1, window_bytes)
        self.ledger = Ledger(budget_bytes)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="headwater-prealloc") if self.enabled else None
        self._logs: "weakref.WeakSet[Reservations]" = weakref.WeakSet()
        self._names = itertools.count(1)
        self._no_fallocate: set[str] = set()  # directories whose filesystem refused (worker only)
        self.reserved = 0
        self.spares = 0
        self.released = 0
        self.unsupported = 0
        self.errors = 0
        self.skipped = 0
        self.over_budget = 0
        self.released_all = 0
        # /metrics (read at scrape time, on another thread: plain int reads)
        self._source = metrics.add_source(self._families) if self.enabled else None

    def _families(self) -> Iterator[Metric]:
        """The worker's counters as metric families (``/metrics``): bytes reserved ahead
        (``headwater_prealloc_reserved_bytes_total``), spare segments made
        (``headwater_prealloc_spares_total``), sealed segments whose reserved tail was released
        (``headwater_prealloc_released_total``), reservations left out to keep free space
        (``headwater_prealloc_skipped_total``) or to stay within the budget
        (``headwater_prealloc_over_budget_total``), failed calls
        (``headwater_prealloc_errors_total``), and the bytes reserved and not yet written
        now (``headwater_prealloc_held_bytes``, a gauge; its ceiling
        ``headwater_prealloc_budget_bytes``)."""
        yield CounterMetricFamily("headwater_prealloc_reserved_bytes", "Log bytes whose blocks were reserved "
                                  "ahead of the appends (fallocate FALLOC_FL_KEEP_SIZE)", value=self.reserved)
        yield CounterMetricFamily("headwater_prealloc_spares", "Next segments made ahead of their roll",
                                  value=self.spares)
        yield CounterMetricFamily("headwater_prealloc_released", "Sealed segments whose blocks reserved past "
                                  "their end were released", value=self.released)
        yield CounterMetricFamily("headwater_prealloc_skipped", "Reservations left out to keep free space on "
                                  "the filesystem", value=self.skipped)
        yield CounterMetricFamily("headwater_prealloc_over_budget", "Reservations left out to keep the "
                                  "reserved, unwritten bytes within [system] preallocate_budget_bytes",
                                  value=self.over_budget)
        yield GaugeMetricFamily("headwater_prealloc_held_bytes", "Bytes of disk reserved ahead of the appends "
                                "and not written yet (all partitions; as of each file's last reservation "
                                "or release)", value=self.ledger.total)
        yield GaugeMetricFamily("headwater_prealloc_budget_bytes", "[system] preallocate_budget_bytes",
                                value=self.ledger.budget)
        yield CounterMetricFamily("headwater_prealloc_errors", "Preallocation calls that failed (fallocate, "
                                  "creating a spare, releasing; appends are not affected)", value=self.errors)

    def stats(self) -> dict[str, int]:
        return {"reserved": self.reserved, "spares": self.spares, "released": self.released,
                "unsupported": self.unsupported, "errors": self.errors, "skipped": self.skipped,
                "over_budget": self.over_budget, "released_all": self.released_all, "held": self.ledger.total}

    def attach(self, directory: str, trim_active: Callable[[], None]) -> "Reservations | None":
        """A partition log's reservations (None when disabled). ``trim_active``: the log's
        way to cut its active segment's reserved tail (called on the loop by
        :meth:`release_all`)."""
        if self._executor is None:
            return None
        r = Reservations(self, directory, trim_active, not memory_backed(directory))
        self._logs.add(r)
        return r

    def submit(self, job: Callable[[], None]) -> bool:
        """Run ``job`` on the worker; False when closed."""
        if self._executor is None:
            return False
        try:
            self._executor.submit(job)
        except RuntimeError:  # shut down: the engine is closing
            return False
        return True

    def drain(self) -> None:
        """Wait until every job submitted so far ran (for tests)."""
        if self._executor is not None:
            try:
                self._executor.submit(lambda: None).result()
            except RuntimeError:
                pass

    def held(self) -> bool:
        """Whether any log holds a spare or a reservation request (loop)."""
        return any(r.spare is not None or r.asked for r in self._logs)

    def release_all(self) -> None:
        """On the loop, after an append failed for want of space: delete every spare and cut
        every active segment's reserved tail (the worker reserves again only where
        :func:`min_free_bytes` stays free). Every charge in the ledger goes with them."""
        self.released_all += 1
        for r in list(self._logs):
            r.give_back()

    def close(self) -> None:
        """Finish the queued jobs, then stop the worker."""
        if self._source is not None:
            metrics.remove_source(self._source)
            self._source = None
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    # -- worker helpers ------------------------------------------------------------

    def _room(self, directory: str, length: int) -> bool:
        """Whether reserving ``length`` more bytes leaves :func:`min_free_bytes` free (worker)."""
        try:
            st = os.statvfs(directory)
        except OSError:
            return False
        free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
        if free - length < min_free_bytes(total):
            self.skipped += 1
            return False
        return True

    def _reserve(self, r: "Reservations", fd: int, offset: int, length: int) -> bool:
        """One reservation for ``r`` (worker, ``r.lock`` held): False when it stopped
        (unsupported, over the budget, no room, an error). The file's charge in the ledger
        is then what it holds past its data (:func:`held_past_data`)."""
        if not r.fallocate or r.directory in self._no_fallocate:
            return False
        if not self.ledger.fits(length):
            self.over_budget += 1
            return False
        if not self._room(r.directory, length):
            return False
        try:
            done = reserve(fd, offset, length)
        except OSError:
            self.errors += 1
            r.settle(fd)
            return False
        if not done:
            self.unsupported += 1
            self._no_fallocate.add(r.directory)
            return False
        self.reserved += length
        r.settle(fd, offset + length)
        return True


class Reservations:
    """One partition log's spare and reservations (see the module docstring).

    ``charges`` (inode -> bytes held past the data, in the owner's :class:`Ledger`) and
    ``ends`` (inode -> the offset reserved up to, the worker's own record) cover the spare,
    the active segment and a sealed one whose release is queued."""

    __slots__ = ("owner", "directory", "trim_active", "fallocate", "lock", "spare", "asked", "closed",
                 "charges", "ends", "_making", "__weakref__")

    def __init__(self, owner: Preallocator, directory: str, trim_active: Callable[[], None], fallocate: bool):
        self.owner = owner
        self.directory = directory
        self.trim_active = trim_active
        self.fallocate = fallocate  # False: tmpfs / ramfs (spares are still made, with nothing reserved)
        self.lock = threading.Lock()
        self.spare: Spare | None = None  # made and published by the worker; taken by the loop
        self.asked = False  # a spare was asked for and not taken yet (loop)
        self.closed = False
        self.charges: dict[int, int] = {}
        self.ends: dict[int, int] = {}
        self._making: Spare | None = None  # the spare the worker is making (under ``lock``)

    @property
    def window(self) -> int:
        return self.owner.window

    def settle(self, fd: int, end: int = 0) -> None:
        """Set the charge of the file open as ``fd`` to what it holds past its data, and
        record ``end`` as reserved (``lock`` held, or the loop with no worker call for this
        log running). Errors ignored (the charge stays as it was: counted high)."""
        try:
            st = os.fstat(fd)
        except OSError:
            return
        if end > self.ends.get(st.st_ino, 0):
            self.ends[st.st_ino] = end
        held = held_past_data(st)
        if held <= 0:
            self.ends.pop(st.st_ino, None)
        self.owner.ledger.set(self.charges, st.st_ino, held)

    def _forget(self, fd: int) -> None:
        """The file open as ``fd`` is no longer reserved ahead (sealed): its charge goes."""
        try:
            ino = os.fstat(fd).st_ino
        except OSError:
            return
        self._forget_inos((ino,))

    def _forget_inos(self, inos: tuple[int, ...]) -> None:
        """The files ``inos`` hold nothing reserved any more (``lock`` held): their records and
        charges go."""
        for ino in inos:
            self.ends.pop(ino, None)
            self.owner.ledger.set(self.charges, ino, 0)

    @property
    def reservable(self) -> bool:
        """Whether this log's filesystem takes reservations (not tmpfs, not refused)."""
        return self.fallocate and self.directory not in self.owner._no_fallocate

    def _spare_inos(self) -> tuple[int, ...]:
        return tuple(ino for s in (self.spare, self._making) if s is not None for ino in s.inos)

    # -- the loop ------------------------------------------------------------------

    def want_spare(self, log_bytes: int, index_bytes: int) -> None:
        """Have the worker make the next segment's files, ``log_bytes`` (and ``index_bytes`` of
        index) reserved. Once per spare: asking again before it is taken does nothing."""
        if self.asked or self.closed:
            return
        self.asked = self.owner.submit(lambda: self._job_spare(log_bytes, index_bytes))

    def take_spare(self) -> Spare | None:
        """The spare when it is ready (it is then the caller's), else None: never waits."""
        spare = self.spare
        if spare is None:
            return None
        self.spare = None
        self.asked = False
        return spare

    def reserve_active(self, jobs: list[tuple[int, int]], still_active: Callable[[], bool] = lambda: True) -> None:
        """Have the worker reserve, for each ``(fd, end)``, the file open as ``fd`` (a duplicate
        the job closes) up to byte ``end``, from its size or what it reserved before,
        ``STEP_BYTES`` per call, while ``still_active()`` holds (a segment sealed meanwhile, by
        an early roll onto the spare, needs nothing more)."""
        if not jobs:
            return
        if self.closed or not self.owner.submit(lambda: self._job_reserve(jobs, still_active)):
            for fd, _ in jobs:
                os.close(fd)

    def release_tail(self, fds: list[int], log_size: int, still_sealed: Callable[[], bool]) -> None:
        """Have the worker free the blocks reserved past the end of a sealed segment's files
        (``fds``: duplicates of its .log fd, then maybe its .index fd, which the job closes;
        ``log_size``: the .log's size), while ``still_sealed()`` holds."""
        if not self.owner.submit(lambda: self._job_release(fds, log_size, still_sealed)):
            for fd in fds:
                os.close(fd)

    def forget_active(self) -> None:
        """The active segment's reservations are gone (a truncation cut or deleted its files;
        called with ``lock`` held): its charges go, the spare's stay."""
        keep = self._spare_inos()
        for ino in [k for k in self.ends if k not in keep]:
            del self.ends[ino]
        self.owner.ledger.drop(self.charges, keep)

    def forget_files(self, inos: tuple[int, ...]) -> None:
        """The files ``inos`` were deleted (a spare that could not become the segment): their
        charges leave the ledger (loop)."""
        with self.lock:
            self._forget_inos(inos)

    def give_back(self) -> None:
        """Delete the spare (if ready) and cut the active segment's reserved tail (loop)."""
        if self.closed:
            return
        with self.lock:
            self._give_back()

    def _give_back(self) -> None:
        spare = self.take_spare()
        if spare is not None:
            spare.discard()
        try:
            self.trim_active()
        except OSError:
            pass
        keep = self._spare_inos()  # one being made (its files are still the worker's)
        self.ends = {k: v for k, v in self.ends.items() if k in keep}
        self.owner.ledger.drop(self.charges, keep)

    def close(self) -> None:
        """No more jobs for this log: its spare is deleted and the active segment's reserved
        tail cut (a clean stop leaves nothing reserved; waits for the worker's call for this
        log, if one runs: at most one ``STEP_BYTES`` reservation)."""
        with self.lock:
            self.closed = True
            self._making = None  # one being made is discarded by the worker (it sees closed)
            self._give_back()

    # -- the worker ----------------------------------------------------------------

    def _job_spare(self, log_bytes: int, index_bytes: int) -> None:
        """Make the spare and publish it (``spare``); ``asked`` stays set until the loop takes
        it (or is cleared here when no spare could be made, or nothing could be reserved in
        it: that log then works as with the switch off), so there is one at a time."""
        owner = self.owner
        with self.lock:
            if self.closed:
                return
            if self.reservable and not owner.ledger.fits(min(log_bytes, STEP_BYTES)):
                owner.over_budget += 1
                self.asked = False  # asked again at the log's next check point
                return
            stem = os.path.join(self.directory, f"{SPARE_PREFIX}{next(owner._names)}")
            flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
            log_fd = index_fd = -1
            try:
                log_fd = os.open(stem + ".log" + SPARE_SUFFIX, flags, 0o644)
                index_fd = os.open(stem + ".index" + SPARE_SUFFIX, flags, 0o644)
                inos = (os.fstat(log_fd).st_ino, os.fstat(index_fd).st_ino)
            except OSError:
                owner.errors += 1
                Spare(stem + ".log" + SPARE_SUFFIX, stem + ".index" + SPARE_SUFFIX if index_fd >= 0 else "",
                      log_fd, index_fd).discard()
                self.asked = False  # the next segment asks again
                return
            spare = Spare(stem + ".log" + SPARE_SUFFIX, stem + ".index" + SPARE_SUFFIX, log_fd, index_fd)
            spare.inos = inos
            self._making = spare
        position = 0
        while position < log_bytes:
            step = min(STEP_BYTES, log_bytes - position)
            with self.lock:
                if self.closed:
                    break
                if not owner._reserve(self, log_fd, position, step):
                    break
            position += step
            spare.reserved = position
        with self.lock:
            if not self.closed and spare.reserved > 0:
                owner._reserve(self, index_fd, 0, index_bytes)
            self._making = None
            if self.closed or (self.reservable and spare.reserved == 0):
                spare.discard()  # nothing reserved (over the budget, no room, an error): no spare
                self._forget_inos(spare.inos)
                self.asked = False
                return
            spare.close_files()
            owner.spares += 1
            self.spare = spare  # published: the worker never touches it again

    def _job_reserve(self, jobs: list[tuple[int, int]], still_active: Callable[[], bool]) -> None:
        try:
            for fd, end in jobs:
                with self.lock:
                    if self.closed or not still_active():
                        return
                    try:
                        st = os.fstat(fd)
                    except OSError:
                        continue
                    position = max(st.st_size, self.ends.get(st.st_ino, 0))
                while position < end:
                    step = min(STEP_BYTES, end - position)
                    with self.lock:
                        if self.closed or not still_active():
                            return
                        if _unlinked(fd):  # deleted since it was asked (a purge): nothing to reserve
                            self._forget(fd)
                            break
                        if not self.owner._reserve(self, fd, position, step):
                            return
                    position += step
        finally:
            for fd, _ in jobs:
                os.close(fd)

    def _job_release(self, fds: list[int], log_size: int, still_sealed: Callable[[], bool]) -> None:
        """Cut each file to its size when it holds blocks past it (the .log only when its
        size is still ``log_size``); their charges follow what they hold after."""
        try:
            with self.lock:
                if not still_sealed():  # reactivated by a truncation, which settled its charges
                    return
                cut = False
                for i, fd in enumerate(fds):
                    try:
                        st = os.fstat(fd)
                        if i == 0 and st.st_size != log_size:
                            continue
                        if held_past_data(st) > SLACK_BYTES:
                            os.ftruncate(fd, st.st_size)
                            cut = True
                    except OSError:
                        self.owner.errors += 1
                    self._forget(fd)  # sealed: nothing of it is reserved ahead any more
                if cut:
                    self.owner.released += 1
        finally:
            for fd in fds:
                os.close(fd)
