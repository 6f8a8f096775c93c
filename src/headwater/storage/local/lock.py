"""One process per data directory: an exclusive ``flock`` on ``<data>/.lock``.

Two servers writing one data directory each assign offsets from their own
memory and overwrite each other's files, so acknowledged messages vanish at
the next start. Kafka guards every log directory with a ``.lock`` file for the
same reason; this is ours.

The lock is an ``flock`` on the data directory itself (an ``O_DIRECTORY``
descriptor), so deleting, renaming or replacing ``.lock`` while a server runs
cannot let a second one in: the directory's inode is what both lock. The file
``<data>/.lock`` (Kafka's name) holds the holder's PID in ASCII decimal followed
by ``\\n``, for the refusal message only; it is not itself locked. It is opened
with ``O_NOFOLLOW``: a symbolic link there is refused, never written through.

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
import time

from headwater.storage.api import StorageError

from .segment import fsync_dir

LOCK_NAME = ".lock"
# what a data directory holds at its top level (the engine's folders, the lock, "certs": the
# self-signed TLS pair (frontends/tls.py, made again after --fresh), and "http": the HTTP
# front-end's JWT secret and revoked tokens); ``empty`` (``--fresh``) refuses a directory
# holding anything else
DATA_DIR_ENTRIES = frozenset({LOCK_NAME, "streams", "metadata", "trash", "certs", "http"})


class DataDirLocked(StorageError):
    """Another live process holds the data directory; ``pid`` is its PID (None if unknown)."""

    def __init__(self, directory: str, pid: int | None):
        holder = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__(f"{directory} is in use by another process ({holder}, lock file {LOCK_NAME})")
        self.directory = directory
        self.pid = pid


def _read_pid_at(path: str) -> int | None:
    """The PID recorded in the lock file at ``path`` (never following a symbolic link).
    A holder that has just taken the lock may not have written its PID yet (it empties
    the file first): an empty file is read again a few times, 10 ms apart."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        for _ in range(5):
            pid = _read_pid(fd)
            if pid is not None:
                return pid
            time.sleep(0.01)
        return None
    finally:
        os.close(fd)


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

    __slots__ = ("directory", "path", "created", "created_file", "_fd", "_dir_fd")

    def __init__(self, directory: str, fd: int, dir_fd: int, created: list[str], created_file: bool = True):
        self.directory = directory
        self.path = os.path.join(directory, LOCK_NAME)
        self.created = created
        self.created_file = created_file  # False: the .lock file was there before (a restart)
        self._fd: int | None = fd
        self._dir_fd: int | None = dir_fd

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
        try:
            dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            raise StorageError(f"cannot open {directory}: {e.strerror or e}") from e
        try:
            fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(dir_fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise DataDirLocked(directory, _read_pid_at(path)) from None
            raise StorageError(f"cannot lock {directory}: {e.strerror or e}") from e
        created_file = not os.path.lexists(path)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            os.close(dir_fd)
            if e.errno == errno.ELOOP:
                raise StorageError(f"{path} is a symbolic link: refusing to write through it (remove it)") from e
            raise StorageError(f"cannot open {path}: {e.strerror or e}") from e
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except OSError as e:  # e.g. a full disk: leave nothing behind
            cls(directory, fd, dir_fd, created, created_file).release(remove=True)
            raise StorageError(f"cannot write {path}: {e.strerror or e}") from e
        return cls(directory, fd, dir_fd, created, created_file)

    def empty(self) -> None:
        """Delete every entry of the directory but the lock file, while holding the lock
        (``--fresh``: so never another live server's data). Raises StorageError if not
        held, or when the directory holds anything a data directory does not
        (``DATA_DIR_ENTRIES``): ``--fresh`` on a mistyped path must not wipe it."""
        if self._fd is None:
            raise StorageError(f"{self.directory}: emptied without holding its lock")
        foreign = sorted(set(os.listdir(self.directory)) - DATA_DIR_ENTRIES)
        if foreign:
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise StorageError(
                f"{self.directory} does not look like a Headwater data directory (it holds {shown}): "
                "refusing to empty it; delete it yourself or pick another directory"
            )
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

    @property
    def made_directory(self) -> bool:
        """Whether :meth:`acquire` created the data directory itself (nothing was there)."""
        return bool(self.created) and self.created[-1] == self.directory

    def discard(self) -> bool:
        """After :meth:`release`, for a first start that failed after writing its data:
        when :meth:`acquire` created the directory, take the lock again, delete everything
        in it, and remove the lock file and the directories :meth:`acquire` created.
        Returns whether it did. Leaves everything (False) when the directory was there
        before, the lock is still held, another process holds it now, or it holds entries
        a data directory does not (see :meth:`empty`)."""
        if not self.made_directory or self._fd is not None or not os.path.isdir(self.directory):
            return False
        try:
            again = DataDirLock.acquire(self.directory)
        except StorageError:
            return False
        try:
            again.empty()
        except (StorageError, OSError):
            again.release()
            return False
        again.created, again.created_file = self.created, True
        again.release(remove=True)
        return True

    def release(self, *, remove: bool = False) -> None:
        """Drop the lock (idempotent). ``remove``: also delete what :meth:`acquire` created
        (a failed start): the lock file if it was not there before, and the directories,
        if they are empty."""
        fd, self._fd = self._fd, None
        dir_fd, self._dir_fd = self._dir_fd, None
        if fd is None:
            return
        if remove and self.created_file:
            try:
                os.unlink(self.path)  # still holding the directory's lock
            except OSError:
                pass
        os.close(fd)
        if dir_fd is not None:
            os.close(dir_fd)
        if remove:
            for d in reversed(self.created):
                try:
                    os.rmdir(d)
                except OSError:
                    break  # not empty (someone else's now) or gone: leave it

    def __del__(self) -> None:
        for name in ("_fd", "_dir_fd"):
            fd = getattr(self, name, None)
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
