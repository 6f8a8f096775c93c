"""A durable key -> JSON map: an append-only journal plus an atomic snapshot.

Files, for a store named ``<name>`` in a directory (``<data>/metadata/``)::

    <name>.journal   header, then records appended one per put / put_many
    <name>.snapshot  header, then one record holding the whole map

    header (16 bytes): magic (8 bytes: b"HWJRNL\\x00\\x01" or b"HWSNAP\\x00\\x01"),
                       generation u64 LE
    record: length u32 LE | crc32 u32 LE (zlib.crc32 of the payload) | payload
    payload: UTF-8 JSON object {key: value}; a null value deletes the key

A put is written with ``os.pwrite`` and ``os.fdatasync``'ed before it
returns; a ``put_many`` is one record, so it survives a crash whole or not at
all. Loading reads the snapshot, then replays the journal if it has the same
generation (an older journal was already folded into the snapshot). A torn
final record (short, or failing its crc while ending exactly at the end of
the file) is ignored and cut; a bad record with more data after it raises
CorruptMetadata. Compaction writes ``<name>.snapshot.tmp``, fsyncs, renames,
then starts an empty journal of the next generation the same way, fsyncing
the directory after each rename; it runs once the journal outgrows both
``compact_bytes`` and the snapshot.
"""

from __future__ import annotations

import copy
import errno
import json
import os
import struct
import zlib
from dataclasses import dataclass
from typing import Any, Callable

from headwater.storage.api import StorageError, StorageWriteError

from .segment import fsync_dir, pread_exact, pwrite_all

JOURNAL_MAGIC = b"HWJRNL\x00\x01"
SNAPSHOT_MAGIC = b"HWSNAP\x00\x01"
_FILE_HEADER = struct.Struct("<8sQ")
_RECORD_HEADER = struct.Struct("<II")
HEADER_SIZE = _FILE_HEADER.size
DEFAULT_COMPACT_BYTES = 1 << 20


class CorruptMetadata(StorageError):
    """A metadata file is damaged beyond a torn final record (fail closed)."""


def _encode_record(items: dict[str, Any]) -> tuple[bytes, bytes]:
    for key in items:
        if not isinstance(key, str):
            raise TypeError(f"metadata keys are str, got {type(key).__name__}")
    payload = json.dumps(items, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    return _RECORD_HEADER.pack(len(payload), zlib.crc32(payload)) + payload, payload


def _read_file(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return pread_exact(fd, os.fstat(fd).st_size, 0)
    finally:
        os.close(fd)


def _write_atomically(directory: str, path: str, data: bytes) -> None:
    """Write ``path + '.tmp'``, fsync, rename over ``path``, fsync the directory.

    Raises StorageWriteError when anything before the rename fails (the .tmp
    file is removed; ``path`` is untouched). Once renamed, the new file is in
    place: a failing directory fsync is not raised (callers treat the write as
    done; the next rename in the directory fsyncs it again)."""
    tmp = path + ".tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            pwrite_all(fd, data, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise StorageWriteError.from_os_error(f"{path}: write failed", exc) from exc
    try:
        fsync_dir(directory)
    except OSError:
        pass


def check_header(data: bytes, magic: bytes, path: str) -> int:
    """The generation in a file's 16-byte header; raises CorruptMetadata on a short file or bad magic."""
    if len(data) < HEADER_SIZE:
        raise CorruptMetadata(f"{path}: shorter than its {HEADER_SIZE}-byte header")
    found, generation = _FILE_HEADER.unpack_from(data, 0)
    if found != magic:
        raise CorruptMetadata(f"{path}: bad magic {found!r} at byte 0")
    return generation


def read_records(data: bytes, path: str) -> tuple[list[dict[str, Any]], int, bool]:
    """Decode the records after the header: (records, end of the last whole one, torn?).

    A short or crc-failing record ending exactly at the end of ``data`` is a torn
    tail (``torn``); a failing record with data after it raises CorruptMetadata
    naming its byte position.
    """
    out = []
    pos = HEADER_SIZE
    size = len(data)
    view = memoryview(data)
    while pos < size:
        if size - pos < _RECORD_HEADER.size:
            return out, pos, True
        length, crc = _RECORD_HEADER.unpack_from(data, pos)
        end = pos + _RECORD_HEADER.size + length
        if end > size:
            return out, pos, True
        payload = view[pos + _RECORD_HEADER.size : end]
        if zlib.crc32(payload) != crc:
            if end == size:
                return out, pos, True
            raise CorruptMetadata(f"{path}: record at byte {pos} fails its crc32")
        try:
            items = json.loads(bytes(payload))
        except ValueError as exc:
            raise CorruptMetadata(f"{path}: record at byte {pos} is not JSON: {exc}") from exc
        if not isinstance(items, dict):
            raise CorruptMetadata(f"{path}: record at byte {pos} is not a JSON object")
        out.append(items)
        pos = end
    return out, pos, False


@dataclass(slots=True)
class Replayed:
    """A store's state rebuilt from its files' bytes (see :func:`replay`)."""

    state: dict[str, Any]
    generation: int
    snapshot_size: int
    journal_end: int | None  # end of the journal's last whole record; None: start a new journal
    torn: bool  # the journal ends in a torn record (cut at the next open)
    damage: str | None = None  # why records after the snapshot may be lost (see :func:`replay`)


def replay(snapshot: bytes | None, journal: bytes | None, snapshot_path: str, journal_path: str) -> Replayed:
    """Rebuild a store from the bytes of its snapshot and journal, changing nothing on disk.

    Raises CorruptMetadata as :class:`LocalMetadataStore` does when it opens them.
    """
    state: dict[str, Any] = {}
    generation = snapshot_size = 0
    if snapshot is not None:
        generation = check_header(snapshot, SNAPSHOT_MAGIC, snapshot_path)
        records, end, torn = read_records(snapshot, snapshot_path)
        if torn or len(records) != 1 or end != len(snapshot):
            raise CorruptMetadata(f"{snapshot_path}: not exactly one whole record")
        state = records[0]
        snapshot_size = len(snapshot)
    if journal is None or len(journal) < HEADER_SIZE:
        # compaction replaces the journal by rename, never removes or empties it: beside a
        # snapshot, a missing or headless journal is damage, and its records are gone
        damage = None if snapshot is None else (
            f"{journal_path}: missing" if journal is None else f"{journal_path}: {len(journal)} bytes, no header")
        return Replayed(state, generation, snapshot_size, None, False, damage)
    journal_generation = check_header(journal, JOURNAL_MAGIC, journal_path)
    if journal_generation > generation:
        raise CorruptMetadata(
            f"{journal_path}: generation {journal_generation} is newer than the snapshot's {generation}"
        )
    if journal_generation < generation:
        # a compaction that crashed before its new journal: every record is folded into the
        # snapshot already, so replaying them onto it changes nothing. One that would change
        # it is not that journal (a damaged generation): its records may be lost
        records, _, _ = read_records(journal, journal_path)
        again = copy.deepcopy(state)
        for items in records:
            _apply_items(again, items)
        damage = None if again == state else (
            f"{journal_path}: generation {journal_generation} is older than the snapshot's {generation} "
            "but holds records the snapshot does not")
        return Replayed(state, generation, snapshot_size, None, False, damage)
    records, end, torn = read_records(journal, journal_path)
    for items in records:
        _apply_items(state, items)
    return Replayed(state, generation, snapshot_size, end, torn)


def load_read_only(directory: str, name: str) -> dict[str, Any]:
    """The current map of the store ``name`` in ``directory``, read without changing a file
    (offline tools). Raises CorruptMetadata."""
    return replay(
        _read_file(os.path.join(directory, name + ".snapshot")),
        _read_file(os.path.join(directory, name + ".journal")),
        os.path.join(directory, name + ".snapshot"),
        os.path.join(directory, name + ".journal"),
    ).state


def _apply_items(state: dict[str, Any], items: dict[str, Any]) -> None:
    for key, value in items.items():
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value


class LocalMetadataStore:
    """The local :class:`~headwater.storage.api.MetadataStore` (see module doc)."""

    def __init__(self, directory: str, name: str, compact_bytes: int = DEFAULT_COMPACT_BYTES,
                 on_full: Callable[[], None] | None = None):
        """Open (creating if absent) the store ``name`` in ``directory`` and replay it.
        ``on_full``: called when a put's write fails for want of space (ENOSPC / EDQUOT),
        before the put is tried once more (the engine gives back the blocks its
        preallocation holds, :mod:`.prealloc`).

        Raises CorruptMetadata, OSError.
        """
        self.on_full = on_full
        self.directory = directory
        self.name = name
        self.compact_bytes = compact_bytes
        self.journal_path = os.path.join(directory, name + ".journal")
        self.snapshot_path = os.path.join(directory, name + ".snapshot")
        self.torn_bytes = 0
        """Bytes of a torn final journal record found at load (0 normally); they stay in the
        file until the first put cuts them (see :attr:`MetadataStore.torn_bytes`)."""
        self.damage: str | None = None
        """Why records may have been lost at load (see :attr:`MetadataStore.damage`); the
        damaged journal stays as it is until the first put replaces it."""
        os.makedirs(directory, exist_ok=True)
        for leftover in (self.journal_path + ".tmp", self.snapshot_path + ".tmp"):
            if os.path.exists(leftover):
                os.unlink(leftover)
        self._state: dict[str, Any] = {}
        self._generation = 0
        self._snapshot_size = 0
        self._fd: int | None = None
        self._journal_size = 0
        self._tail_dirty = False  # a failed put's or a torn record's bytes may follow _journal_size
        self._journal_stale = False  # a compaction's new journal could not be made
        self._load()

    # -- loading ---------------------------------------------------------------

    def _load(self) -> None:
        snapshot = _read_file(self.snapshot_path)
        journal = _read_file(self.journal_path)
        replayed = replay(snapshot, journal, self.snapshot_path, self.journal_path)
        self._state = replayed.state
        self._generation = replayed.generation
        self._snapshot_size = replayed.snapshot_size
        self.damage = replayed.damage
        if replayed.journal_end is None:
            if replayed.damage is not None:
                # left as it is until the first put makes a new journal (``_journal_stale``):
                # the caller acts on ``damage`` first, and a crash before that put finds it again
                self._journal_stale = True
                self._fd = os.open(self.snapshot_path, os.O_RDONLY)  # open; never written through
                return
            self._new_journal()
            return
        self._fd = os.open(self.journal_path, os.O_RDWR)
        if replayed.journal_end < len(journal):
            # Left on disk until the first put cuts it (``_tail_dirty``): the caller acts on
            # ``torn_bytes`` first (the broker sets aside what the catalog no longer names), and a
            # crash before that put finds the same torn record, and the same verdict, next time.
            self.torn_bytes = len(journal) - replayed.journal_end
            self._tail_dirty = True
        self._journal_size = replayed.journal_end

    def _apply(self, items: dict[str, Any]) -> None:
        _apply_items(self._state, items)

    def _new_journal(self) -> None:
        """Replace the journal by an empty one of the current generation. On failure
        (StorageWriteError) the store refuses puts until a retry succeeds: records
        appended to the old journal would be ignored at load once a newer snapshot exists."""
        self._journal_stale = True
        _write_atomically(self.directory, self.journal_path, _FILE_HEADER.pack(JOURNAL_MAGIC, self._generation))
        try:
            fd = os.open(self.journal_path, os.O_RDWR)
        except OSError as exc:
            raise StorageWriteError.from_os_error(f"{self.journal_path}: cannot open", exc) from exc
        if self._fd is not None:
            os.close(self._fd)
        self._fd = fd
        self._journal_size = HEADER_SIZE
        self._tail_dirty = False
        self._journal_stale = False

    # -- the MetadataStore interface -----------------------------------------

    def load(self) -> dict[str, Any]:
        """Every key and value, as last stored (a deep copy)."""
        return copy.deepcopy(self._state)

    def get(self, key: str, default: Any = None) -> Any:
        """One value (a deep copy), or ``default``."""
        return copy.deepcopy(self._state.get(key, default))

    def put(self, key: str, value: Any | None) -> None:
        """Store ``value`` under ``key`` (None deletes); durable when it returns.

        Raises TypeError / ValueError for a value JSON cannot encode, StorageError
        on a failed write (the journal is then as before the call).
        """
        self.put_many({key: value})

    def put_many(self, items: dict[str, Any | None]) -> None:
        """Several puts in one journal record: all or none survive a crash.

        Raises StorageWriteError when the write or its fdatasync fails (ENOSPC,
        EIO...): the record is cut off again and the map is unchanged. A
        compaction failing after a durable put is not the put's failure: it is
        retried by a later put.
        """
        if self._fd is None:
            raise StorageError(f"{self.journal_path}: metadata store is closed")
        if not items:
            return
        record, payload = _encode_record(items)
        if self._journal_stale:
            self._new_journal()
        position = self._journal_size
        try:
            self._write_record(record, position)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or self.on_full is None:
                raise StorageWriteError.from_os_error(f"{self.journal_path}: write failed", exc) from exc
            self.on_full()  # space held by the engine itself is given back: try once more
            try:
                self._write_record(record, position)
            except OSError as again:
                raise StorageWriteError.from_os_error(f"{self.journal_path}: write failed", again) from again
        self._journal_size = position + len(record)
        self._apply(json.loads(payload))
        if self._journal_size > max(self.compact_bytes, self._snapshot_size):
            try:
                self.compact()
            except StorageWriteError:
                pass  # the put is durable in the journal; compaction is retried by the next put

    def _write_record(self, record: bytes, position: int) -> None:
        """Write ``record`` at ``position`` of the journal and fdatasync; on OSError the
        journal is cut back to ``position`` (or marked to be cut by the next put) and it
        is raised."""
        assert self._fd is not None
        try:
            if self._tail_dirty:  # an earlier failed record could not be cut off then
                os.ftruncate(self._fd, position)
                self._tail_dirty = False
            pwrite_all(self._fd, record, position)
            os.fdatasync(self._fd)
        except OSError:
            try:
                os.ftruncate(self._fd, position)
            except OSError:
                self._tail_dirty = True
            raise

    def compact(self) -> None:
        """Fold the journal into a new snapshot and start an empty journal."""
        if self._fd is None:
            raise StorageError(f"{self.journal_path}: metadata store is closed")
        record, _ = _encode_record(self._state)
        snapshot = _FILE_HEADER.pack(SNAPSHOT_MAGIC, self._generation + 1) + record
        _write_atomically(self.directory, self.snapshot_path, snapshot)  # before the rename: nothing changed
        self._generation += 1
        self._snapshot_size = len(snapshot)
        self._new_journal()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
