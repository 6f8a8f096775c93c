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

import contextlib
import os
import re
import shutil
import time
import uuid
from typing import Iterable, Iterator

from headwater.storage.api import CorruptSegment, SegmentPolicy, StorageError, StorageWriteError

from . import bulk, readahead
from .flusher import Flusher
from .writebehind import CACHE_BYTES
from .lock import DataDirLock
from .log import LocalPartitionLog
from .metadata import LocalMetadataStore
from .prealloc import DEFAULT_BUDGET_BYTES, DEFAULT_WINDOW_BYTES, DISK_FULL
from .recovery import CLEAN_SHUTDOWN
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
                 catchup_direct_io: bool = True, preallocate: bool = True, preallocate_window_bytes: int = DEFAULT_WINDOW_BYTES,
                 preallocate_budget_bytes: int = DEFAULT_BUDGET_BYTES):
        """Use (creating if needed) the data directory ``path``; empties its trash.

        Takes the directory's lock first, or adopts ``lock`` (already held on
        ``path``, e.g. taken before the listeners were bound); the engine owns it
        from then on and releases it in :meth:`close`. ``write_behind_cache_bytes``:
        appended bytes left in the page cache (:mod:`.writebehind`; 0 = off).
        ``catchup_direct_io``: reads of data not in the page cache by the workers of
        :mod:`.readahead` use ``O_DIRECT`` (:func:`.readahead.set_direct`: process-wide, the
        last engine opened decides).
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
        self._deferred: list[LocalPartitionLog] | None = None  # inside opening_many(): markers removed, not synced
        try:
            for sub in ("streams", "metadata", "trash"):
                self._makedirs(os.path.join(self.path, sub))
            trash = os.path.join(self.path, "trash")
            for name in os.listdir(trash):
                shutil.rmtree(os.path.join(trash, name), ignore_errors=True)
        except BaseException:
            lock.release()
            raise
        readahead.set_direct(catchup_direct_io)
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
        defer = self._deferred is not None
        try:
            self._makedirs(directory)
            log = LocalPartitionLog.open(directory, policy, self.flusher, defer_marker_sync=defer)
        except (OSError, StorageWriteError) as exc:
            if exc.errno not in DISK_FULL:
                raise
            self._give_back_space()  # space held by our own preallocation: try once more
            self._makedirs(directory)
            log = LocalPartitionLog.open(directory, policy, self.flusher, defer_marker_sync=defer)
        self._logs[key] = log
        if log.marker_removal_pending and self._deferred is not None:
            self._deferred.append(log)
        return log

    @contextlib.contextmanager
    def opening_many(self, partitions: Iterable[tuple[int, int, int]] = ()) -> Iterator[None]:
        """Open many partitions (at boot): inside, :meth:`open_partition` leaves the sync of
        each removed clean-shutdown marker for the exit, where the directories of all of
        them are synced together (:func:`.bulk.sync_directories`: one ``syncfs`` per
        filesystem, or directory fsyncs on a pool of threads), instead of one directory
        fsync per partition. No log is written meanwhile (a log's own append would sync
        its directory first). ``partitions``: the (stream, topic, partition) ids about to be
        opened, in that order; their files are read ahead on threads (:class:`.bulk.Prefetch`).
        Raises OSError from the sync (on exit, also after an error inside: a log opened is
        left in a state an append makes safe again)."""
        self._check_open()
        if self._deferred is not None:  # nested: the outer exit syncs
            yield
            return
        self._deferred = []
        prefetch = bulk.Prefetch([self.partition_dir(*key) for key in partitions])
        try:
            yield
        finally:
            prefetch.close()
            pending, self._deferred = self._deferred, None
            pending = [log for log in pending if log.marker_removal_pending]
            if pending:
                bulk.sync_directories([log.directory for log in pending])
                for log in pending:
                    log.marker_removal_synced()

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
        errors: list[BaseException] = []
        try:
            self._close_logs(list(self._logs.values()), errors)
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


    def _close_logs(self, logs: list[LocalPartitionLog], errors: list[BaseException]) -> None:
        """Close ``logs`` together: their final fdatasyncs on a pool of threads, then each
        log closed (on this thread), then the clean-shutdown markers of those whose sync
        succeeded made (a pool again) and all their directories synced at once
        (:func:`.bulk.sync_directories`). A marker is made only after its log's data was
        synced, so one that survives a crash never vouches for data that did not. Failures
        are appended to ``errors`` and the rest carry on."""
        prepared: list[tuple[LocalPartitionLog, list[int] | None]] = []
        for log in logs:
            try:
                prepared.append((log, log.final_sync_fds()))
            except OSError as exc:  # the index entries could not be written: close it the plain way
                errors.append(exc)
                prepared.append((log, None))
        with_fds = [(log, fds) for log, fds in prepared if fds is not None]
        outcomes = bulk.fdatasync_groups([fds for _, fds in with_fds])
        synced = {id(log): (True if exc is None else exc) for (log, _), exc in zip(with_fds, outcomes)}
        clean: list[LocalPartitionLog] = []
        for log, _ in prepared:
            try:
                if log.close(synced=synced.get(id(log)), mark=False):
                    clean.append(log)
            except (OSError, StorageError) as exc:  # keep closing the rest
                errors.append(exc)
        clean = [log for log in clean if os.path.isdir(log.directory)]
        made = []
        for log, exc in zip(clean, bulk.create_files([os.path.join(log.directory, CLEAN_SHUTDOWN) for log in clean])):
            if exc is None:
                made.append(log.directory)
            else:
                errors.append(exc)
        try:
            bulk.sync_directories(made)
        except OSError as exc:
            errors.append(exc)


def _fresh_dir_name(path: str) -> str:
    """``path``, or ``path.1``, ``path.2``... : the first that does not exist (a second boot within
    the same second sets its trees aside beside the first's, never onto them)."""
    candidate, n = path, 0
    while os.path.lexists(candidate):
        n += 1
        candidate = f"{path}.{n}"
    return candidate
