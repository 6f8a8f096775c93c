"""Many partitions opened and closed together: markers removed and written, their syncs batched."""

from __future__ import annotations

import os

import pytest

from headwater.storage.api import SegmentPolicy, StorageError
from headwater.storage.local import bulk
from headwater.storage.local.engine import LocalEngine
from headwater.storage.local.log import LocalPartitionLog
from headwater.storage.local.recovery import CLEAN_SHUTDOWN

from failing_disk import failing_disk
from storage_batches import stamped_batch

POLICY = SegmentPolicy(segment_size=1 << 20)
QUIET = SegmentPolicy(segment_size=1 << 30, messages_required_to_save=1 << 24, size_of_messages_required_to_save=1 << 30)


def _marker(engine: LocalEngine, pid: int) -> bool:
    return os.path.exists(os.path.join(engine.partition_dir(0, 0, pid), CLEAN_SHUTDOWN))


def _fill(engine: LocalEngine, pids, policy=POLICY, batches: int = 2) -> None:
    for pid in pids:
        log = engine.open_partition(0, 0, pid, policy)
        for _ in range(batches):
            log.append(stamped_batch(log.next_offset, 1_000_000))


@pytest.mark.parametrize("use_syncfs", [True, False])
def test_sync_directories_takes_many_directories_and_skips_missing_ones(tmp_path, use_syncfs):
    dirs = []
    for i in range(40):
        d = tmp_path / f"d{i}"
        d.mkdir()
        (d / "f").write_bytes(b"")
        dirs.append(str(d))
    bulk.sync_directories(dirs + [str(tmp_path / "gone")], use_syncfs=use_syncfs)


def test_syncfs_is_found_on_linux(tmp_path):
    if not os.uname().sysname == "Linux":
        pytest.skip("syncfs(2) is Linux's")
    assert bulk.syncfs(str(tmp_path))


def test_close_writes_every_marker_and_a_bulk_open_removes_them_before_any_write(tmp_path):
    engine = LocalEngine(str(tmp_path / "data"))
    _fill(engine, range(30))
    engine.close()
    engine = LocalEngine(str(tmp_path / "data"))
    assert all(_marker(engine, p) for p in range(30))
    with engine.opening_many():
        logs = [engine.open_partition(0, 0, p, POLICY, create=False) for p in range(30)]
        assert all(log.marker_removal_pending for log in logs)  # removed; its sync waits for the exit
        assert not any(_marker(engine, p) for p in range(30))
    assert not any(log.marker_removal_pending for log in logs)
    assert [log.next_offset for log in logs] == [6] * 30
    engine.close()


def test_an_append_inside_a_bulk_open_syncs_its_own_directory_first(tmp_path):
    engine = LocalEngine(str(tmp_path / "data"))
    _fill(engine, [0])
    engine.close()
    engine = LocalEngine(str(tmp_path / "data"))
    with engine.opening_many():
        log = engine.open_partition(0, 0, 0, POLICY)
        assert log.marker_removal_pending
        log.append(stamped_batch(log.next_offset, 2_000_000))
        assert not log.marker_removal_pending
    engine.close()
    assert _marker(engine, 0)
    log = LocalPartitionLog.open(engine.partition_dir(0, 0, 0), POLICY)
    assert log.next_offset == 9 and not log.marker_removal_pending  # a plain open syncs itself
    log.close()


def test_a_log_already_closed_or_opened_outside_a_bulk_close_is_left_as_it_is(tmp_path):
    engine = LocalEngine(str(tmp_path / "data"))
    _fill(engine, range(3))
    engine.open_partition(0, 0, 1, POLICY).close()  # closed on its own: marker made the plain way
    engine.close()
    assert all(_marker(engine, p) for p in range(3))


def test_a_failed_final_sync_leaves_no_marker_and_the_close_still_closes_the_rest(tmp_path):
    with failing_disk(tmp_path) as mnt:
        engine = LocalEngine(str(mnt / "data"), write_behind_cache_bytes=0, preallocate=False)
        _fill(engine, [0], QUIET, batches=40)  # 40 x 300 KB unsynced: more than the device keeps
        for pid in (0, 1):
            log = engine.open_partition(0, 0, pid, QUIET)
            for _ in range(15):
                log.append(stamped_batch(log.next_offset, 1_000_000, count=300, payload_size=1000))
        with pytest.raises(StorageError, match="Input/output error|No space") as failure:
            engine.close()
        # a log whose final fdatasync failed is fenced (that sync is never retried: the error
        # is reported once) and gets no marker
        failed = [p for p in (0, 1) if engine.partition_dir(0, 0, p) + ":" in str(failure.value)]
        assert failed, str(failure.value)
        assert not any(_marker(engine, p) for p in failed)
