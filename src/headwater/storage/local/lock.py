"""One process per data directory: an exclusive ``flock`` on ``<data>/.lock``.

Two servers writing one data directory each assign offsets from their own
memory and overwrite each other's files, so acknowledged messages vanish at
the next start. Kafka guards every log directory with a ``.lock`` file for the
same reason; this is ours.

``<data>/.lock`` layout: the holder's PID in ASCII decimal followed by ``\\n``
(for the refusal message only: the lock is the ``flock``, not the content).
The file itself is never deleted while the directory is in use, so every
process locks the same inode.

The lock is held on an open file description for the process's life; the
kernel drops it when the descriptor closes, including on a crash or SIGKILL,
so a stale ``.lock`` file never blocks a restart. ``flock`` locks conflict
between two descriptions even inside one process, so a second engine opened on
the same directory by the same process is refused too. (``flock`` is advisory
and local: on NFS it may not exclude a process on another machine.)
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil

from headwater.storage.api import StorageError

from .segment import fsync_dir

LOCK_NAME = ".lock"


class DataDirLocked(StorageError):
    """Another live process holds the data directory; ``pid`` is its PID (None if unknown)."""

    def __init__(self, directory: str, pid: int | None):
        holder = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__(f"{directory} is in use by another process ({holder}, lock file {LOCK_NAME})")
        self.directory = directory
        self.pid = pid


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class DataDirLock:
    """An exclusive lock on one data directory; :meth:`acquire` takes it, :meth:`release` drops it.

    ``created`` lists the directories :meth:`acquire` had to create (outermost
    first), so a start that fails right after can remove them again with
    :meth:`release` ``(remove=True)``.
    """

    __slots__ = ("directory", "path", "created", "_fd")

    def __init__(self, directory: str, fd: int, created: list[str]):
        self.directory = directory
        self.path = os.path.join(directory, LOCK_NAME)
        self.created = created
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: str) -> "DataDirLock":
        """Create ``directory`` if missing, lock ``<directory>/.lock`` and write our PID into it.

        Writes nothing else. Raises DataDirLocked when another open lock holds
        it, StorageError when the path is not a usable directory (a file, no
        permission); the message names the path.
        """
        directory = os.path.abspath(directory)
        if os.path.exists(directory) and not os.path.isdir(directory):
            raise StorageError(f"{directory} is not a directory")
        created = []
        probe = directory
        while not os.path.exists(probe):
            created.append(probe)
            probe = os.path.dirname(probe)
        created.reverse()
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise StorageError(f"cannot create {directory}: {e.strerror or e}") from e
        path = os.path.join(directory, LOCK_NAME)
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as e:
                raise StorageError(f"cannot open {path}: {e.strerror or e}") from e
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                pid = _read_pid(fd)
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise DataDirLocked(directory, pid) from None
                raise StorageError(f"cannot lock {path}: {e.strerror or e}") from e
            # A holder that was cleaning up a failed first start may have unlinked the
            # file between our open and our flock: then we hold a lock nobody else sees.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except OSError as e:
            os.close(fd)
            raise StorageError(f"cannot write {path}: {e.strerror or e}") from e
        return cls(directory, fd, created)

    def empty(self) -> None:
        """Delete every entry of the directory but the lock file, while holding the lock
        (``--fresh``: so never another live server's data). Raises StorageError if not held."""
        if self._fd is None:
            raise StorageError(f"{self.directory}: emptied without holding its lock")
        for name in os.listdir(self.directory):
            if name == LOCK_NAME:
                continue
            entry = os.path.join(self.directory, name)
            if os.path.isdir(entry) and not os.path.islink(entry):
                shutil.rmtree(entry)
            else:
                os.unlink(entry)
        fsync_dir(self.directory)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self, *, remove: bool = False) -> None:
        """Drop the lock (idempotent). ``remove``: also delete the lock file and the
        directories :meth:`acquire` created, if they are empty (a failed first start)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if remove:
            try:
                os.unlink(self.path)  # still locked: a racing acquire sees the unlink and retries
            except OSError:
                pass
        os.close(fd)
        if remove:
            for d in reversed(self.created):
                try:
                    os.rmdir(d)
                except OSError:
                    break  # not empty (someone else's now) or gone: leave it

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
