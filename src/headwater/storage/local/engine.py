"""The local-disk storage engine: directories, partition logs, metadata stores.

Layout under the data directory (Iggy ``server/storage-engine.mdx``,
"Directory layout"; ids are 0-based)::

    <data>/streams/<stream_id>/topics/<topic_id>/partitions/<partition_id>/
        {start offset:020d}.log / .index       segments (see .segment, .index)
    <data>/metadata/<name>.journal / .snapshot  metadata stores (see .metadata)
    <data>/trash/                               deleted trees, emptied at start-up
    <data>/lost+found/<UTC time>/streams/...    trees set aside, never read (see retain)
    <data>/.lock                                the holder's PID; flock'ed (see .lock)

Opening an engine takes the directory's exclusive lock (:mod:`.lock`) before
it reads or writes anything there, and closing it releases the lock, so two
processes never write one data directory.

Deleting a partition, topic or stream first renames its directory into
``trash/`` (atomic, then both directories fsynced), then removes it, so a
crash never leaves half a tree where a recreated topic with the same id
would find stale segments. A crash between the catalog's delete and the
directory's leaves a whole tree no catalog entry names: at boot the broker
calls :meth:`LocalEngine.retain` with the partitions it knows, and every
other stream, topic or partition directory goes the same way.
"""

from __future__ import annotations

import os
import re
import shutil
import time
import uuid
from typing import Iterable

from headwater.storage.api import CorruptSegment, SegmentPolicy, StorageError, StorageWriteError

from .flusher import Flusher
from .writebehind import CACHE_BYTES
from .lock import DataDirLock
from .log import LocalPartitionLog
from .metadata import LocalMetadataStore
from .prealloc import DEFAULT_BUDGET_BYTES, DEFAULT_WINDOW_BYTES, DISK_FULL
from .segment import fsync_dir

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def _child_ids(directory: str) -> list[int]:
    """The subdirectories of ``directory`` named by a canonical decimal id, sorted."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(
        int(n) for n in names
        if n.isdigit() and n.isascii() and str(int(n)) == n and os.path.isdir(os.path.join(directory, n))
    )


def _check_id(kind: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{kind} id must be a non-negative int, got {value!r}")
    return value


class LocalEngine:
    """The ``file:`` :class:`~headwater.storage.api.StorageEngine`.

    ``open_partition`` returns the already-open log for the same ids (one
    writer per partition), after applying the given policy to it. Its logs'
    syncs run on ``flusher`` (:mod:`.flusher`; its counters are public).
    """

    def __init__(self, path: str, *, lock: DataDirLock | None = None, write_behind_cache_bytes: int = CACHE_BYTES,
                 preallocate: bool = True, preallocate_window_bytes: int = DEFAULT_WINDOW_BYTES,
                 preallocate_budget_bytes: int = DEFAULT_BUDGET_BYTES):
        """Use (creating if needed) the data directory ``path``; empties its trash.

        Takes the directory's lock first, or adopts ``lock`` (already held on
        ``path``, e.g. taken before the listeners were bound); the engine owns it
        from then on and releases it in :meth:`close`. ``write_behind_cache_bytes``:
        appended bytes left in the page cache (:mod:`.writebehind`; 0 = off).
        ``preallocate``: next segments made and their blocks reserved off the loop
        (:mod:`.prealloc`; False = off), ``preallocate_window_bytes`` ahead of each active
        segment and in each spare, ``preallocate_budget_bytes`` for all logs together. Raises
        :class:`~.lock.DataDirLocked` when another engine holds the directory.
        """
        self.path = os.path.abspath(path)
        if lock is None:
            lock = DataDirLock.acquire(self.path)
        elif not lock.held or lock.directory != self.path:
            raise ValueError(f"the lock given is not held on {self.path}")
        self._lock = lock
        self._logs: dict[tuple[int, int, int], LocalPartitionLog] = {}
        self._stores: dict[str, LocalMetadataStore] = {}
        self._closed = False
        try:
            for sub in ("streams", "metadata", "trash"):
                self._makedirs(os.path.join(self.path, sub))
            trash = os.path.join(self.path, "trash")
            for name in os.listdir(trash):
                shutil.rmtree(os.path.join(trash, name), ignore_errors=True)
        except BaseException:
            lock.release()
            raise
        self.flusher = Flusher(write_behind_cache_bytes=write_behind_cache_bytes, preallocate=preallocate,
                               preallocate_window_bytes=preallocate_window_bytes,
                               preallocate_budget_bytes=preallocate_budget_bytes)

    def disk_usage(self) -> tuple[int, int] | None:
        """(total_bytes, usable_bytes) of the volume holding the data directory
        (``os.statvfs``: f_blocks and f_bavail times f_frsize), None when unknown."""
        try:
            st = os.statvfs(self.path)
        except OSError:
            return None
        return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize

    # -- paths ---------------------------------------------------------------

    def stream_dir(self, stream_id: int) -> str:
        return os.path.join(self.path, "streams", str(_check_id("stream", stream_id)))

    def topic_dir(self, stream_id: int, topic_id: int) -> str:
        return os.path.join(self.stream_dir(stream_id), "topics", str(_check_id("topic", topic_id)))

    def partition_dir(self, stream_id: int, topic_id: int, partition_id: int) -> str:
        return os.path.join(
            self.topic_dir(stream_id, topic_id), "partitions", str(_check_id("partition", partition_id))
        )

    def _makedirs(self, path: str) -> None:
        """Create ``path`` and missing parents, fsyncing each parent that gained an entry."""
        missing = []
        p = path
        while not os.path.isdir(p):
            missing.append(p)
            p = os.path.dirname(p)
        for d in reversed(missing):
            try:
                os.mkdir(d)
            except FileExistsError:
                continue
            fsync_dir(os.path.dirname(d))

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"{self.path}: engine is closed")

    # -- partitions ------------------------------------------------------------

    def open_partition(
        self, stream_id: int, topic_id: int, partition_id: int, policy: SegmentPolicy, *, create: bool = True
    ) -> LocalPartitionLog:
        """Open a partition log, running recovery on existing files; ``create``: make it when absent.

        Raises CorruptSegment when recovery refuses the partition, or when its
        directory is missing and ``create`` is false (at boot a partition the
        catalog names must exist: an empty one would silently replace lost data).
        """
        self._check_open()
        key = (stream_id, topic_id, partition_id)
        log = self._logs.get(key)
        if log is not None:
            log.set_policy(policy)
            return log
        directory = self.partition_dir(stream_id, topic_id, partition_id)
        if not create and not os.path.isdir(directory):
            raise CorruptSegment(f"partition directory {directory} is missing: its data is lost or moved")
        try:
            self._makedirs(directory)
            log = LocalPartitionLog.open(directory, policy, self.flusher)
        except (OSError, StorageWriteError) as exc:
            if exc.errno not in DISK_FULL:
                raise
            self._give_back_space()  # space held by our own preallocation: try once more
            self._makedirs(directory)
            log = LocalPartitionLog.open(directory, policy, self.flusher)
        self._logs[key] = log
        return log

    def _give_back_space(self) -> None:
        """A write failed for want of space: delete every spare segment and cut every active
        segment's reserved tail (:meth:`.prealloc.Preallocator.release_all`), so the write can
        be tried once more with the room this engine itself held."""
        self.flusher.preallocator.release_all()

    def _discard(self, directory: str, match=None) -> None:
        """Close the open logs ``match`` selects, then delete ``directory`` through the trash."""
        if match is not None:
            for key in [k for k in self._logs if match(k)]:
                self._logs.pop(key).close()
        if not os.path.isdir(directory):
            return
        trash = os.path.join(self.path, "trash", uuid.uuid4().hex)
        os.rename(directory, trash)
        fsync_dir(os.path.dirname(directory))
        fsync_dir(os.path.dirname(trash))
        shutil.rmtree(trash, ignore_errors=True)

    def retain(
        self, partitions: Iterable[tuple[int, int, int]], *, dry_run: bool = False, set_aside: bool = False
    ) -> list[str]:
        """Delete (through the trash) every stream, topic and partition directory
        not on the path of one of ``partitions`` ((stream, topic, partition) ids).

        Only directories named by a canonical decimal id are ours; any other
        entry is left alone. Returns the deleted directories that held files,
        as paths relative to the data directory; with ``dry_run`` the ones that
        would be, deleting nothing. With ``set_aside`` a directory holding files
        is renamed under ``<data>/lost+found/<UTC time>/`` (``<UTC time>.N`` when a tree of that
        second is there already; same relative path;
        the engine never reads there) instead of deleted, and the returned paths
        name where it went; empty trees are still deleted.
        """
        self._check_open()
        keep = set(partitions)
        streams = {k[0] for k in keep}
        topics = {k[:2] for k in keep}
        removed: list[str] = []
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        aside_root = _fresh_dir_name(os.path.join(self.path, "lost+found", stamp))

        def sweep(directory: str, match) -> None:
            holds_files = any(files for _, _, files in os.walk(directory))
            relative = os.path.relpath(directory, self.path)
            if holds_files and set_aside:
                target = os.path.join(aside_root, relative)
                if not dry_run:
                    self._set_aside(directory, target, match)
                removed.append(os.path.relpath(target, self.path))
                return
            if not dry_run:
                self._discard(directory, match)
            if holds_files:  # an empty tree is not worth a word
                removed.append(relative)

        for s in _child_ids(os.path.join(self.path, "streams")):
            if s not in streams:
                sweep(self.stream_dir(s), lambda k, s=s: k[0] == s)
                continue
            for t in _child_ids(os.path.join(self.stream_dir(s), "topics")):
                if (s, t) not in topics:
                    sweep(self.topic_dir(s, t), lambda k, s=s, t=t: k[:2] == (s, t))
                    continue
                for p in _child_ids(os.path.join(self.topic_dir(s, t), "partitions")):
                    if (s, t, p) not in keep:
                        sweep(self.partition_dir(s, t, p), lambda k, key=(s, t, p): k == key)
        return removed

    def _set_aside(self, directory: str, target: str, match) -> None:
        """Close the open logs ``match`` selects and rename ``directory`` to ``target``
        (its parents made; both parent directories fsynced)."""
        for key in [k for k in self._logs if match(k)]:
            self._logs.pop(key).close()
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.rename(directory, target)
        fsync_dir(os.path.dirname(directory))
        fsync_dir(os.path.dirname(target))

    def delete_partition(self, stream_id: int, topic_id: int, partition_id: int) -> None:
        """Close the partition's log if open and delete its directory (absent is fine)."""
        self._check_open()
        directory = self.partition_dir(stream_id, topic_id, partition_id)
        log = self._logs.pop((stream_id, topic_id, partition_id), None)
        if log is not None:
            log.close()
        self._discard(directory)

    def delete_topic(self, stream_id: int, topic_id: int) -> None:
        """Close and delete every partition of the topic, and the topic directory."""
        self._check_open()
        self._discard(self.topic_dir(stream_id, topic_id), lambda k: k[:2] == (stream_id, topic_id))

    def delete_stream(self, stream_id: int) -> None:
        """Close and delete every topic of the stream, and the stream directory."""
        self._check_open()
        self._discard(self.stream_dir(stream_id), lambda k: k[0] == stream_id)

    # -- metadata ----------------------------------------------------------------

    def metadata(self, name: str) -> LocalMetadataStore:
        """The metadata store ``name`` (``[A-Za-z0-9_.-]``, at most 128 characters),
        kept under ``<data>/metadata/<name>.*``; the same object for the same name.

        Raises ValueError for a bad name, CorruptMetadata for a damaged store.
        """
        self._check_open()
        if not _NAME.fullmatch(name) or name in (".", ".."):
            raise ValueError(f"bad metadata store name {name!r}")
        store = self._stores.get(name)
        if store is None:
            store = LocalMetadataStore(os.path.join(self.path, "metadata"), name, on_full=self._give_back_space)
            self._stores[name] = store
        return store

    def close(self) -> None:
        """Sync and close every open log and store, then release the directory's lock."""
        if self._closed:
            return
        self._closed = True
        errors = []
        try:
            for log in self._logs.values():
                try:
                    log.close()
                except (OSError, StorageError) as exc:  # keep closing the rest
                    errors.append(exc)
            for store in self._stores.values():
                store.close()
        finally:
            self._logs.clear()
            self._stores.clear()
            try:
                self.flusher.close()
            finally:
                self._lock.release()
        if errors:
            raise StorageError(f"closing partition logs failed: {errors}")


def _fresh_dir_name(path: str) -> str:
    """``path``, or ``path.1``, ``path.2``... : the first that does not exist (a second boot within
    the same second sets its trees aside beside the first's, never onto them)."""
    candidate, n = path, 0
    while os.path.lexists(candidate):
        n += 1
        candidate = f"{path}.{n}"
    return candidate
