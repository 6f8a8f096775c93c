"""The storage interface: what the broker needs from an engine, and nothing more.

A *partition log* keeps stamped Iggy batches (``headwater.codec.batch``) in
offset order and hands them back byte-identical. A *metadata store* keeps the
broker's small records (catalog, users, tokens, consumer offsets) durably as a
key -> JSON value map. Engines are chosen by URL scheme in :func:`open_engine`;
the local-disk engine (``file:``, the default) lives in ``storage.local``.

Units: offsets are u64 message offsets; timestamps are microseconds since the
Unix epoch (Iggy's unit); sizes are bytes.

This module imports nothing above ``headwater.codec.batch``.
"""

from __future__ import annotations

import errno as _errno
from dataclasses import dataclass
from typing import Any, Awaitable, ContextManager, Iterable, Protocol, Sequence


class StorageError(Exception):
    """Base of storage failures the broker reports to clients."""


class CorruptSegment(StorageError):
    """A segment failed verification: recovery or a read refused to serve it (fail closed)."""


class CorruptBatch(CorruptSegment):
    """A read met a damaged batch in an opened segment (its header does not fit, or it fails
    ``batch.verify``: a batch or frame checksum). ``offset``: the first offset the batch would
    hold (the offset a reader must not get past); ``position``: its byte in the segment file.
    Reads that begin before it return the batches before it and stop there; a read that
    would begin with it raises this."""

    def __init__(self, message: str, offset: int, position: int):
        super().__init__(message)
        self.offset = offset
        self.position = position


class OffsetMismatch(StorageError):
    """An appended batch's base_offset is not the log's next offset."""


class StorageWriteError(StorageError):
    """The filesystem failed a write (append, segment roll, index or metadata write):
    ENOSPC / EDQUOT (no space), EIO, or any other OSError. Nothing of the failed
    write is kept: the files are cut back to their previous length, and a later
    write is tried afresh (space may have come back).

    ``errno`` is the OSError's errno (None when not from an OSError).
    """

    def __init__(self, message: str, errno: int | None = None):
        super().__init__(message)
        self.errno = errno

    @property
    def no_space(self) -> bool:
        """True for ENOSPC and EDQUOT (the disk or the quota is full)."""
        return self.errno in (_errno.ENOSPC, _errno.EDQUOT)

    @classmethod
    def from_os_error(cls, what: str, exc: OSError) -> "StorageWriteError":
        """``"{what}: [ENOSPC] No space left on device"`` with ``errno`` kept."""
        name = _errno.errorcode.get(exc.errno or 0, str(exc.errno))
        return cls(f"{what}: [{name}] {exc.strerror or exc}", exc.errno)


class WritesFenced(StorageWriteError):
    """A failed append could not even be cut back: the partition refuses writes until
    the cut succeeds (retried on each append) or a restart's recovery cuts the torn
    tail. Reads are unaffected (they never look past the last good batch)."""


class SyncFailed(StorageWriteError):
    """An fdatasync of a partition log failed (EIO, ENOSPC, ...). The log is fenced:
    what was written since its last good sync is never acknowledged, and appends
    are refused until the server restarts (recovery then checks the files)."""


@dataclass(frozen=True, slots=True)
class SegmentPolicy:
    """The storage-relevant topic options, as the broker hands them to an engine.

    ``segment_size``: soft rotation limit in bytes (rotation after the append that
    crosses it). ``enforce_fsync``: an append is to be acknowledged
    only once an fdatasync covering it returned (``PartitionLog.append`` returns
    what to await). ``messages_required_to_save`` / ``size_of_messages_required_to_save``:
    without enforce_fsync, fsync once this many messages / bytes were appended
    since the last sync. ``message_expiry_us``: sealed segments whose newest
    batch is older are deleted (0 = never). ``max_partition_bytes``: sealed
    segments beyond this many bytes are deleted, oldest first (0 = unlimited).
    ``preallocate_segments``: reserve ``segment_size`` on segment creation.
    ``validate_checksum``: re-verify batches read from disk.
    ``index_interval_bytes``: write a sparse index entry at least every this many bytes.
    ``segment_roll_us``: an append rolls an active segment whose first batch was
    stamped this long ago (Kafka segment.ms; 0 = never). ``compact``: the cleaner
    keeps only the newest message per key in sealed segments (:mod:`.local.compaction`);
    ``min_cleanable_dirty_ratio``, ``min_compaction_lag_us``, ``max_compaction_lag_us``
    (0 = never) and ``delete_retention_us`` (tombstones) as Kafka's topic configs.
    """

    segment_size: int = 1 << 30
    enforce_fsync: bool = False
    messages_required_to_save: int = 1024
    size_of_messages_required_to_save: int = 1 << 20
    message_expiry_us: int = 0
    max_partition_bytes: int = 0
    preallocate_segments: bool = False
    validate_checksum: bool = True
    index_interval_bytes: int = 4096
    segment_roll_us: int = 0
    compact: bool = False
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_us: int = 0
    max_compaction_lag_us: int = 0
    delete_retention_us: int = 86_400_000_000


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """One segment as an engine reports it."""

    start_offset: int
    end_offset: int  # one past the last offset stored in it (== start_offset when empty)
    size_bytes: int
    max_timestamp_us: int  # newest base_timestamp in it (0 when empty)
    sealed: bool


@dataclass(frozen=True, slots=True)
class RecoveryOutcome:
    """What opening a partition log changed on disk (boot-time recovery), for the broker to log.

    ``truncated_bytes``: torn-tail bytes cut from segment ends (never-written
    preallocated zeros are not counted). ``rebuilt_indexes`` / ``repaired_indexes``:
    indexes rebuilt from the log / rewritten with torn entries dropped or missing
    ones added. ``removed_files``: leftovers deleted. ``notes``: one line per change.
    """

    truncated_bytes: int = 0
    rebuilt_indexes: int = 0
    repaired_indexes: int = 0
    removed_files: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(
            self.truncated_bytes or self.rebuilt_indexes or self.repaired_indexes or self.removed_files or self.notes
        )


class PartitionLog(Protocol):
    """One partition's segmented log of stamped batches."""

    @property
    def recovery_outcome(self) -> RecoveryOutcome:
        """What opening this log changed on disk (false when nothing)."""

    @property
    def log_start_offset(self) -> int:
        """The first offset still stored (moves with retention and segment deletion)."""

    @property
    def next_offset(self) -> int:
        """The offset the next appended message gets (Kafka's high watermark / log end offset)."""

    @property
    def size_bytes(self) -> int:
        """Bytes of batches stored in all segments."""

    def append(self, batch: bytes | bytearray | memoryview) -> Awaitable[None] | None:
        """Append one stamped batch; its base_offset must equal ``next_offset``.

        On return the bytes are in the OS (a process kill loses nothing) and
        readable. With ``enforce_fsync`` the result is an awaitable that
        completes once they are on stable storage (an fdatasync covering them
        returned) and raises SyncFailed if that sync failed: acknowledge the
        batch only after it. None when there is nothing to wait for (no
        ``enforce_fsync``, or the sync was done before returning). Raises
        OffsetMismatch, StorageError (SyncFailed once the log is fenced).
        """

    def pending_sync(self) -> Awaitable[None] | None:
        """An awaitable completing once every batch appended so far is on stable
        storage (raising SyncFailed if a sync fails), or None when no sync is
        pending. Raises SyncFailed when the log is fenced."""

    def read(self, start_offset: int, max_messages: int, max_bytes: int, *, nowait: bool = False) -> list[memoryview]:
        """Whole stored batches holding offsets >= start_offset, oldest first.

        The first batch may begin before ``start_offset`` (callers slice).
        Stops once ``max_messages`` offsets from start_offset on are covered or
        ``max_bytes`` would be passed, but always returns at least one batch
        when one exists. Batches are re-verified when the policy says
        ``validate_checksum``. A damaged batch ends the read: the batches before it are
        returned, and a read that would begin with it raises CorruptBatch. ``nowait``: raise
        NotCached instead of waiting for bytes that are not in the page cache.
        """

    def offset_for_timestamp(self, timestamp_us: int, *, nowait: bool = False) -> int | None:
        """First offset of the first batch whose base_timestamp >= timestamp_us, or None.
        ``nowait``: raise NotCached instead of waiting for index-walk bytes that are not in
        the page cache (as :meth:`read` does). Raises CorruptBatch when a damaged batch lies
        on the way (it is not stepped over)."""

    def segments(self) -> Sequence[SegmentInfo]:
        """The segments, oldest first; the last is the active one."""

    def delete_oldest_segments(self, count: int) -> int:
        """Delete up to ``count`` oldest *sealed* segments; returns how many were deleted."""

    def apply_retention(self, now_us: int) -> int:
        """Delete sealed segments past the policy's expiry or size budget; returns the count."""

    def purge(self) -> None:
        """Delete every segment and start again empty at offset 0."""

    def truncate(self, offset: int) -> None:
        """Drop every message at or after ``offset`` (batches are cut whole)."""

    def sync(self) -> None:
        """fdatasync whatever is not yet on stable storage."""

    def roll_if_due(self, now_us: int) -> bool:
        """Seal the active segment when the policy's ``segment_roll_us`` says so; whether it did."""

    def plan_compaction(
        self, now_us: int, max_dirty_bytes: int, limit_offset: int | None = None, pinned: list[tuple[int, int]] | None = None
    ) -> Any:
        """A compaction pass due now (an opaque job), or None (policy ``compact``).
        Only sealed segments ending at or below ``limit_offset`` (None: no bound) are
        cleaned; messages at offsets inside a ``pinned`` inclusive ``(first, last)``
        range shadow nothing and are kept (the owner's, e.g. undecided or aborted data)."""

    def run_compaction(self, job: Any) -> Any:
        """Do a planned pass's reads and writes; thread-safe (files only). Returns the job."""

    def finish_compaction(self, job: Any) -> int:
        """Swap a finished job in (on the owner's thread); None after a failed run. Messages removed."""

    def set_policy(self, policy: SegmentPolicy) -> None:
        """Replace the policy (the broker calls this when updatable topic options change)."""

    def close(self) -> None:
        """Sync and close files. The object is unusable afterwards."""


class MetadataStore(Protocol):
    """Durable key -> JSON value map for the broker's small records.

    Keys are strings (the broker namespaces them, e.g. ``"stream/0"``); values
    are JSON-serialisable. A put is durable (fsynced) when it returns; a crash
    leaves either the old or the new value, never a mix.
    """

    def load(self) -> dict[str, Any]:
        """Every key and value, as last stored."""

    def put(self, key: str, value: Any | None) -> None:
        """Store ``value`` under ``key``; ``None`` deletes the key."""

    def put_many(self, items: dict[str, Any | None]) -> None:
        """Several puts applied atomically (all or none survive a crash)."""

    def close(self) -> None: ...

    @property
    def torn_bytes(self) -> int:
        """Bytes of a torn final record found when the store was opened (0 normally). A torn
        record was never durable, so never acknowledged -- unless the file was damaged
        instead, which cannot be told apart: callers that would delete data on the strength
        of what the store names should set it aside instead when this is not 0. The torn bytes
        stay in the file until the first put cuts them, so a crash before that put reports
        them again at the next open."""

    @property
    def damage(self) -> str | None:
        """Why records stored after the last snapshot may have been lost when the store was
        opened (a journal missing, emptied, or of an older generation holding records the
        snapshot lacks), else None. Such a store loads what the snapshot holds; callers treat
        it as :attr:`torn_bytes`: set aside, never delete, on the strength of what it names.
        The damaged file stays until the first put, so a crash before it reports it again."""


class StorageEngine(Protocol):
    """An engine: partition logs addressed by 0-based (stream, topic, partition) ids,
    plus named metadata stores."""

    def open_partition(
        self, stream_id: int, topic_id: int, partition_id: int, policy: SegmentPolicy
    ) -> PartitionLog:
        """Open (creating if absent) a partition log. Runs recovery on existing files.

        Raises CorruptSegment when recovery refuses the partition (its files are
        left as they are), StorageError or OSError when the files cannot be made.
        """

    def opening_many(self, partitions: Iterable[tuple[int, int, int]] = ()) -> ContextManager[None]:
        """A block that opens many partitions (boot): durability work each open would do
        on its own (the local engine: syncing the removal of a clean-shutdown marker) may
        be done once for all of them on exit, before any log opened inside is written
        (a log written earlier does it itself first). ``partitions``: the (stream, topic,
        partition) ids to be opened, in order, a hint (the local engine reads their files
        ahead on threads). Raises what that work raises."""

    def delete_partition(self, stream_id: int, topic_id: int, partition_id: int) -> None: ...

    def delete_topic(self, stream_id: int, topic_id: int) -> None: ...

    def delete_stream(self, stream_id: int) -> None: ...

    def retain(
        self, partitions: Iterable[tuple[int, int, int]], *, dry_run: bool = False, set_aside: bool = False
    ) -> list[str]:
        """Delete every stream, topic and partition the engine holds that is not on the
        path of one of ``partitions`` ((stream, topic, partition) ids): leftovers of
        deletes a crash interrupted. Returns what was deleted (for the caller to log);
        with ``dry_run``, what would be, deleting nothing. With ``set_aside``, trees that
        hold data are moved somewhere the engine never reads again (for an operator to
        restore or remove) instead of deleted; the returned strings then name where.
        Called at boot, after the catalog is loaded and before partitions are opened.
        """

    def metadata(self, name: str) -> MetadataStore:
        """A named metadata store (e.g. ``"catalog"``, ``"offsets"``)."""

    def disk_usage(self) -> tuple[int, int] | None:
        """(total_bytes, usable_bytes) of the volume holding the data, None when unknown."""

    def close(self) -> None:
        """Sync and close every partition log still open and every metadata store, then let
        go of the data (the local engine: its lock). Logs are closed together, their final
        syncs concurrent; raises StorageError naming the failures after closing the rest."""


def _scheme(url: str) -> tuple[str, str]:
    if "://" in url:
        scheme, _, rest = url.partition("://")
        return scheme, rest
    return "file", url


class EngineLock(Protocol):
    """An engine's exclusive hold on its data, taken before the engine opens (:func:`lock_engine`)."""

    def empty(self) -> None:
        """Delete all the data it guards (``--fresh``), keeping the lock held."""

    def release(self, *, remove: bool = False) -> None:
        """Let go (idempotent). ``remove``: also delete what taking the lock created,
        for a start that failed before writing anything."""

    def discard(self) -> bool:
        """After ``release()``, for a first start that failed after writing: when taking
        the lock created the data's place, delete it all again (taking the lock again
        for that). Returns whether it did; never touches data that was there before."""


def lock_engine(url: str) -> EngineLock:
    """Take the exclusive lock the engine at ``url`` needs, without opening the engine.

    For the start-up order (lock, bind the listeners, only then read or write
    the data): hand the result to :func:`open_engine` as ``lock``, or call its
    ``release()`` if the start fails. For ``file:`` this creates the directory
    if missing and writes only ``<dir>/.lock``. Raises StorageError (the
    subclass DataDirLocked names the holder's PID) or ValueError for an unknown
    scheme.
    """
    scheme, rest = _scheme(url)
    if scheme == "file":
        from .local.lock import DataDirLock

        return DataDirLock.acquire(rest)
    raise ValueError(f"unknown storage engine scheme {scheme!r} in {url!r}")


def open_engine(url: str, *, lock: EngineLock | None = None, write_behind_cache_bytes: int | None = None,
                catchup_direct_io: bool = True, preallocate: bool = True, preallocate_window_bytes: int | None = None,
                preallocate_budget_bytes: int | None = None) -> StorageEngine:
    """Pick an engine by URL scheme: ``file:///path`` or a bare path -> local disk.

    ``write_behind_cache_bytes``: how much recently appended data the local
    engine leaves in the OS page cache before writing back and dropping the
    oldest (``storage.local.writebehind``; 0 = off, None = its default).
    ``catchup_direct_io``: the local engine's workers read data not in the page cache with
    ``O_DIRECT`` (``storage.local.readahead``; process-wide, the last engine opened decides).
    ``preallocate``: the local engine makes next segments and reserves their
    blocks on a worker thread (``storage.local.prealloc``; False = off);
    ``preallocate_window_bytes`` reserved ahead of each active segment and in each
    spare, ``preallocate_budget_bytes`` held by all partitions together (None: defaults).

    The engine takes its data's exclusive lock first (or adopts ``lock`` from
    :func:`lock_engine`) and releases it on ``close()``. Raises ValueError for
    an unknown scheme, StorageError when another process holds the data.
    """
    scheme, rest = _scheme(url)
    if scheme == "file":
        from .local.engine import LocalEngine

        kwargs: dict = {"preallocate": preallocate, "catchup_direct_io": catchup_direct_io}
        if write_behind_cache_bytes is not None:
            kwargs["write_behind_cache_bytes"] = write_behind_cache_bytes
        if preallocate_window_bytes is not None:
            kwargs["preallocate_window_bytes"] = preallocate_window_bytes
        if preallocate_budget_bytes is not None:
            kwargs["preallocate_budget_bytes"] = preallocate_budget_bytes
        return LocalEngine(rest, lock=lock, **kwargs)
    raise ValueError(f"unknown storage engine scheme {scheme!r} in {url!r}")


class NotCached(Exception):
    """A read asked not to block (``nowait``) needs bytes that are not in the page cache.

    ``future`` (a ``concurrent.futures.Future``) completes once a worker thread has read them
    in; the caller awaits it (``asyncio.wrap_future``) and reads again. Never reaches a client:
    it is not a :class:`StorageError`, and only readers that ask for ``nowait`` get it."""

    def __init__(self, message: str, future: Any):
        super().__init__(message)
        self.future = future
