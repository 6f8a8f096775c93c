"""Durability work over many partitions at once, for start-up and shut-down.

Opening a partition that was closed cleanly removes its ``clean-shutdown`` marker
(:mod:`.recovery`, rule 8), and closing one writes it again; each must be durable
(a directory sync) before the partition may be written again (open) or before the
process ends (close). Done one partition after another that is one journal commit
and one device flush per partition: seconds on 2,000 partitions, tens of seconds
on a busy disk. Here the same syncs are done together:

- :func:`sync_directories`: the entries of many directories made durable with one
  ``syncfs(2)`` per filesystem (Linux; found through ``ctypes`` in the C library,
  as Python's ``os`` has no wrapper), or, where it is missing or fails, an
  ``fsync`` of each directory on a pool of threads (the filesystem's journal
  commits the concurrent ones together).
- :func:`fdatasync_groups`: the final ``fdatasync`` calls of many partition logs run
  on a pool of threads, each group's first error returned, not raised.
- :func:`create_files`: empty files (the markers) made on a pool of threads.

The pool's threads only make system calls; nothing here touches a partition log's
state, so the caller keeps that on its own thread.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from .segment import fsync_dir

THREADS = 16
"""Threads of a bulk pool: syncs mostly wait on the device, so more threads than cores help."""


def _load_syncfs():
    """The C library's ``syncfs`` (``int syncfs(int fd)``), or None off Linux or when absent."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_syncfs = _load_syncfs()


def _pool_map(fn, items: Sequence) -> list:
    """``[fn(x) for x in items]``, run on up to :data:`THREADS` threads (inline for one item)."""
    if len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(THREADS, len(items)), thread_name_prefix="headwater-bulk") as pool:
        return list(pool.map(fn, items))


def syncfs(path: str) -> bool:
    """``syncfs(2)`` on the filesystem holding ``path``: every dirty page and metadata
    change of that filesystem written and its journal committed. Returns False when it
    is not available (not Linux, no C library symbol) or failed (the caller then syncs
    what it needs the precise way: a ``syncfs`` error may be another file's writeback
    error and does not say whose)."""
    if _syncfs is None:
        return False
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return _syncfs(fd) == 0
    finally:
        os.close(fd)


def sync_directories(directories: Sequence[str], *, use_syncfs: bool = True) -> None:
    """Make the entries created or removed in every one of ``directories`` durable.

    One :func:`syncfs` per filesystem (``st_dev``) they are on; where that is not
    available or fails, each directory of that filesystem is ``fsync``ed, on up to
    :data:`THREADS` threads. ``use_syncfs=False``: the per-directory way only.
    Raises OSError (the first failed directory fsync); a directory that no longer
    exists is skipped (deleted since: nothing of it to make durable).
    """
    by_device: dict[int, list[str]] = {}
    for d in directories:
        try:
            by_device.setdefault(os.stat(d).st_dev, []).append(d)
        except FileNotFoundError:
            continue
    for dirs in by_device.values():
        if use_syncfs and syncfs(dirs[0]):
            continue
        errors = [e for e in _pool_map(_fsync_dir_quiet, dirs) if e is not None]
        if errors:
            raise errors[0]


def _fsync_dir_quiet(path: str) -> OSError | None:
    try:
        fsync_dir(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return e
    return None


def fdatasync_groups(groups: Sequence[Sequence[int]]) -> list[OSError | None]:
    """``os.fdatasync`` every fd of every group, on up to :data:`THREADS` threads; for each
    group its first error (the rest of that group is then not synced), else None. The fds
    must stay open until this returns (the caller's thread owns them and waits here)."""

    def sync(fds: Sequence[int]) -> OSError | None:
        try:
            for fd in fds:
                os.fdatasync(fd)
        except OSError as e:
            return e
        return None

    return _pool_map(sync, groups)


def create_files(paths: Sequence[str]) -> list[OSError | None]:
    """Create (or truncate) an empty file at each of ``paths``, on up to :data:`THREADS`
    threads; for each its error or None. Nothing is synced (see :func:`sync_directories`)."""

    def create(path: str) -> OSError | None:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        except OSError as e:
            return e
        return None

    return _pool_map(create, paths)


PREFETCH_TAIL_BYTES = 1 << 20
"""Bytes at the end of each segment's .log asked to be read ahead (recovery re-walks the tail)."""


class Prefetch:
    """Warm the page cache for the recovery of ``directories`` ahead of a caller opening them
    one after another in the same order: up to :data:`THREADS` threads list each directory
    and ask the kernel to read ahead (``posix_fadvise(POSIX_FADV_WILLNEED)``) its segments'
    ``.index`` files and the last :data:`PREFETCH_TAIL_BYTES` of their ``.log`` files. On a
    cold cache recovery's reads otherwise wait for the disk one partition after another.
    Only advice: nothing is written, errors are ignored, and a directory the caller reaches
    first is simply read by it. :meth:`close` stops what has not started and waits for the rest."""

    def __init__(self, directories: Sequence[str]):
        self._pool = None
        if len(directories) > 1 and hasattr(os, "posix_fadvise"):
            self._pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="headwater-prefetch")
            for d in directories:
                self._pool.submit(_warm, d)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _warm(directory: str) -> None:
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        is_index = name.endswith(".index")
        if not is_index and not name.endswith(".log"):
            continue
        try:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
        except OSError:
            continue
        try:
            size = os.fstat(fd).st_size
            start = 0 if is_index else max(0, size - PREFETCH_TAIL_BYTES)
            os.posix_fadvise(fd, start, size - start, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass
        finally:
            os.close(fd)
