"""The data directory's exclusive lock: one engine per directory, released by close or by
the kernel when the holder dies; ``--fresh`` empties only a directory it holds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from headwater.storage.api import StorageError, lock_engine, open_engine
from headwater.storage.local.engine import LocalEngine
from headwater.storage.local.lock import LOCK_NAME, DataDirLock, DataDirLocked


def test_acquire_writes_our_pid_and_a_second_acquire_is_refused_naming_it(tmp_path):
    lock = DataDirLock.acquire(str(tmp_path))
    assert (tmp_path / LOCK_NAME).read_text() == f"{os.getpid()}\n"
    assert os.listdir(tmp_path) == [LOCK_NAME]  # nothing else written
    with pytest.raises(DataDirLocked) as refused:
        DataDirLock.acquire(str(tmp_path))  # a second open file description, same process
    assert refused.value.pid == os.getpid() and refused.value.directory == str(tmp_path)
    assert str(tmp_path) in str(refused.value) and f"pid {os.getpid()}" in str(refused.value)
    lock.release()
    lock.release()  # idempotent
    DataDirLock.acquire(str(tmp_path)).release()


def test_an_engine_holds_the_lock_until_closed(tmp_path):
    engine = open_engine(str(tmp_path))
    with pytest.raises(DataDirLocked):
        LocalEngine(str(tmp_path))
    with pytest.raises(DataDirLocked):
        lock_engine(f"file://{tmp_path}")
    engine.close()
    LocalEngine(str(tmp_path)).close()


def test_an_engine_adopts_a_lock_taken_first_and_refuses_a_foreign_one(tmp_path):
    lock = lock_engine(str(tmp_path / "a"))
    engine = open_engine(str(tmp_path / "a"), lock=lock)
    with pytest.raises(DataDirLocked):
        DataDirLock.acquire(str(tmp_path / "a"))
    engine.close()
    assert not lock.held
    other = DataDirLock.acquire(str(tmp_path / "b"))
    with pytest.raises(ValueError):
        LocalEngine(str(tmp_path / "a"), lock=other)
    other.release()
    with pytest.raises(ValueError):
        LocalEngine(str(tmp_path / "b"), lock=other)  # released: not held


HOLDER = """
import sys, time
from headwater.storage.local.lock import DataDirLock
lock = DataDirLock.acquire(sys.argv[1])
print("held", flush=True)
time.sleep(600)
"""


def test_sigkill_of_the_holder_releases_the_lock(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "held\n"
        with pytest.raises(DataDirLocked) as refused:
            DataDirLock.acquire(str(tmp_path))
        assert refused.value.pid == proc.pid
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    lock = DataDirLock.acquire(str(tmp_path))  # the kernel dropped the dead process's lock
    assert (tmp_path / LOCK_NAME).read_text() == f"{os.getpid()}\n"
    lock.release()


def test_empty_deletes_everything_but_the_lock_and_only_while_held(tmp_path):
    engine = LocalEngine(str(tmp_path))
    engine.metadata("catalog").put("k", {"v": 1})
    engine.close()
    lock = DataDirLock.acquire(str(tmp_path))
    lock.empty()
    assert os.listdir(tmp_path) == [LOCK_NAME]
    lock.release()
    with pytest.raises(StorageError):
        lock.empty()


def test_empty_refuses_a_directory_that_is_not_a_data_directory(tmp_path):
    """``--fresh`` on a mistyped path (a home directory, say) must not wipe it."""
    engine = LocalEngine(str(tmp_path))
    engine.close()
    (tmp_path / "thesis.txt").write_bytes(b"precious")
    os.symlink("/nonexistent", tmp_path / "link")
    lock = DataDirLock.acquire(str(tmp_path))
    with pytest.raises(StorageError, match="does not look like a Headwater data directory"):
        lock.empty()
    assert (tmp_path / "thesis.txt").read_bytes() == b"precious"
    assert sorted(os.listdir(tmp_path)) == sorted([LOCK_NAME, "link", "metadata", "streams", "thesis.txt", "trash"])
    lock.release()


def test_deleting_or_replacing_the_lock_file_does_not_let_a_second_holder_in(tmp_path):
    """The lock is on the directory itself: the file is only where the PID is written."""
    lock = DataDirLock.acquire(str(tmp_path))
    os.unlink(tmp_path / LOCK_NAME)
    with pytest.raises(DataDirLocked):
        DataDirLock.acquire(str(tmp_path))
    (tmp_path / LOCK_NAME).write_text("1\n")  # replaced by someone
    with pytest.raises(DataDirLocked):
        DataDirLock.acquire(str(tmp_path))
    lock.release()
    DataDirLock.acquire(str(tmp_path)).release()


def test_a_lock_file_that_is_a_symlink_is_refused_and_its_target_left_alone(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"important content")
    data = tmp_path / "data"
    data.mkdir()
    os.symlink(victim, data / LOCK_NAME)
    with pytest.raises(StorageError, match="symbolic link"):
        DataDirLock.acquire(str(data))
    assert victim.read_bytes() == b"important content"
    os.unlink(data / LOCK_NAME)
    DataDirLock.acquire(str(data)).release()  # and the directory's lock was not left held


def test_release_with_remove_deletes_only_what_acquire_created(tmp_path):
    lock = DataDirLock.acquire(str(tmp_path / "a" / "b"))
    assert lock.created == [str(tmp_path / "a"), str(tmp_path / "a" / "b")]
    lock.release(remove=True)
    assert os.listdir(tmp_path) == []
    (tmp_path / "kept").mkdir()
    lock = DataDirLock.acquire(str(tmp_path / "kept"))
    lock.release(remove=True)
    assert os.listdir(tmp_path / "kept") == []  # the lock file goes, the directory it found stays
    lock = DataDirLock.acquire(str(tmp_path / "c"))
    (tmp_path / "c" / "state").write_bytes(b"")
    lock.release(remove=True)
    assert os.listdir(tmp_path / "c") == ["state"]  # not empty: left alone


def test_a_lock_file_unlinked_while_we_waited_is_not_trusted(tmp_path):
    lock = DataDirLock.acquire(str(tmp_path))
    racer = os.open(tmp_path / LOCK_NAME, os.O_RDWR)  # a starter that opened the old inode
    lock.release(remove=True)
    again = DataDirLock.acquire(str(tmp_path))  # locks a new file, not the orphan the racer has
    assert not os.path.samestat(os.stat(tmp_path / LOCK_NAME), os.fstat(racer))
    os.close(racer)
    again.release()


def test_a_path_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_bytes(b"keep")
    with pytest.raises(StorageError, match="is not a directory"):
        DataDirLock.acquire(str(tmp_path / "f"))
    with pytest.raises(StorageError, match="cannot create"):
        DataDirLock.acquire(str(tmp_path / "f" / "sub"))
    assert (tmp_path / "f").read_bytes() == b"keep"


def test_a_failed_start_removes_only_the_lock_file_it_created(tmp_path):
    """A refused ``--fresh`` start (port taken) on an existing data directory leaves its
    ``.lock`` as it found it; a first start that fails removes the file it made."""
    DataDirLock.acquire(str(tmp_path)).release()
    before = (tmp_path / LOCK_NAME).read_bytes()
    lock = DataDirLock.acquire(str(tmp_path))
    assert not lock.created_file
    lock.release(remove=True)
    assert (tmp_path / LOCK_NAME).exists()
    fresh = tmp_path / "new"
    lock = DataDirLock.acquire(str(fresh))
    assert lock.created_file
    lock.release(remove=True)
    assert not fresh.exists() and before


def test_discard_deletes_a_directory_acquire_created_and_nothing_that_was_there(tmp_path):
    made = tmp_path / "a" / "data"
    lock = DataDirLock.acquire(str(made))
    assert lock.made_directory
    assert not lock.discard()  # still held: nothing happens
    engine = LocalEngine(str(made), lock=lock)  # writes its layout, adopts the lock
    engine.close()
    assert made.exists()
    assert lock.discard()
    assert os.listdir(tmp_path) == []  # "a" was made by acquire too
    assert not lock.discard()  # twice: nothing left to do

    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "streams").mkdir()
    lock = DataDirLock.acquire(str(kept))
    assert not lock.made_directory
    lock.release()
    assert not lock.discard() and sorted(os.listdir(kept)) == [LOCK_NAME, "streams"]


def test_discard_leaves_a_directory_another_holder_took_or_foreign_entries(tmp_path):
    made = tmp_path / "data"
    lock = DataDirLock.acquire(str(made))
    lock.release()
    other = DataDirLock.acquire(str(made))  # someone else's now
    assert not lock.discard() and (made / LOCK_NAME).exists()
    other.release()
    (made / "notes.txt").write_text("not ours")
    assert not lock.discard()
    assert sorted(os.listdir(made)) == [LOCK_NAME, "notes.txt"]
    DataDirLock.acquire(str(made)).release()  # and the lock was let go again
