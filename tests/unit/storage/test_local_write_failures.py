"""Writes the filesystem refuses: nothing torn is kept, reads go on, writes resume.

The failures are real: ``RLIMIT_FSIZE`` makes the kernel refuse any write or
``posix_fallocate`` past a byte limit with EFBIG (SIGXFSZ ignored), the way a
full disk refuses with ENOSPC; no part of Headwater is replaced. The disk-full
run on a size-limited tmpfs is ``tests/integration/test_disk_full.py``.
"""

from __future__ import annotations

import errno
import os
import resource
import signal
from contextlib import contextmanager

import pytest

from headwater.codec.batch import read_header
from headwater.storage.api import SegmentPolicy, StorageError, StorageWriteError, WritesFenced
from headwater.storage.local.log import LocalPartitionLog
from headwater.storage.local.metadata import LocalMetadataStore

from storage_batches import stamped_batch

BATCH = 700  # 3 messages of 100 B


@contextmanager
def file_size_limit(limit: int):
    """Inside: writes or ``posix_fallocate`` past byte ``limit`` of any file fail with EFBIG."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)


def append_next(log, ts: int = 1_000_000) -> bytes:
    b = stamped_batch(log.next_offset, ts, 3, 100)
    log.append(b)
    return b


def file_sizes(directory: str) -> dict[str, int]:
    return {n: os.path.getsize(os.path.join(directory, n)) for n in sorted(os.listdir(directory))}


def test_a_refused_append_leaves_no_torn_bytes_and_writes_resume(open_log):
    log = open_log(SegmentPolicy(index_interval_bytes=1))
    kept = [append_next(log) for _ in range(4)]
    before = file_sizes(log.directory)
    with file_size_limit(4 * BATCH + BATCH // 2):  # half of the next batch fits
        with pytest.raises(StorageWriteError) as info:
            append_next(log)
        assert info.value.errno == errno.EFBIG
        assert not info.value.no_space
        assert file_sizes(log.directory) == before  # cut back: no half batch on disk
        assert log.next_offset == 12 and log.size_bytes == 4 * BATCH
        assert [bytes(v) for v in log.read(0, 100, 1 << 20)] == kept  # reads unaffected
    kept.append(append_next(log))  # room again: no restart needed
    assert read_header(kept[-1]).base_offset == 12
    assert [bytes(v) for v in log.read(0, 100, 1 << 20)] == kept
    directory = log.directory
    log.close()
    again = LocalPartitionLog.open(directory, SegmentPolicy(index_interval_bytes=1))
    try:
        assert not again.recovery_outcome  # recovery finds nothing to repair
        assert [bytes(v) for v in again.read(0, 100, 1 << 20)] == kept
    finally:
        again.close()


def test_a_roll_that_cannot_make_its_segment_is_retried_by_the_next_append(open_log):
    log = open_log(SegmentPolicy(segment_size=2 * BATCH, index_interval_bytes=1))
    kept = [append_next(log)]
    obstacle = os.path.join(log.directory, "00000000000000000006.index")
    os.mkdir(obstacle)  # the new segment's index cannot be created (its .log can)
    kept.append(append_next(log))  # fills the segment: stored, the roll fails quietly
    assert [(s.start_offset, s.sealed) for s in log.segments()] == [(0, True)]
    assert not os.path.exists(os.path.join(log.directory, "00000000000000000006.log"))  # half-made one removed
    with pytest.raises(StorageError):
        append_next(log)  # needs the new segment: the error comes now
    assert log.size_bytes == 2 * BATCH and log.next_offset == 6
    assert [bytes(v) for v in log.read(0, 100, 1 << 20)] == kept
    os.rmdir(obstacle)
    kept.append(append_next(log))
    assert [(s.start_offset, s.sealed) for s in log.segments()] == [(0, True), (6, False)]
    assert [bytes(v) for v in log.read(0, 100, 1 << 20)] == kept


def test_segment_creation_refused_by_the_filesystem_is_a_write_error(tmp_path):
    from headwater.storage.local.segment import Segment

    with file_size_limit(1000):
        with pytest.raises(StorageWriteError) as info:
            Segment.create(str(tmp_path), 0, 4096, preallocate_bytes=4096)  # posix_fallocate: EFBIG
    assert info.value.errno == errno.EFBIG
    assert os.listdir(tmp_path) == []  # nothing half-made is left
    Segment.create(str(tmp_path), 0, 4096, preallocate_bytes=4096).release()


def test_a_refused_metadata_put_changes_nothing(tmp_path):
    store = LocalMetadataStore(str(tmp_path), "catalog")
    store.put("a", 1)
    size = os.path.getsize(store.journal_path)
    with file_size_limit(size + 10):
        with pytest.raises(StorageWriteError):
            store.put("b", "x" * 100)
        assert os.path.getsize(store.journal_path) == size
        assert store.load() == {"a": 1}
    store.put("c", 3)
    store.close()
    reopened = LocalMetadataStore(str(tmp_path), "catalog")
    assert reopened.load() == {"a": 1, "c": 3}
    assert reopened.torn_bytes == 0
    reopened.close()


def test_a_compaction_that_fails_does_not_fail_the_durable_put(tmp_path):
    store = LocalMetadataStore(str(tmp_path), "catalog", compact_bytes=200)
    store.put("a", "y" * 150)
    journal = os.path.getsize(store.journal_path)
    with file_size_limit(journal + 300):  # the record fits; a snapshot of everything does not
        store.put("b", "z" * 250)  # passes compact_bytes: compaction is tried and fails
    assert not os.path.exists(store.snapshot_path + ".tmp")
    assert store.load() == {"a": "y" * 150, "b": "z" * 250}
    store.put("c", 1)  # compaction retried, now with room
    assert os.path.exists(store.snapshot_path)
    store.close()
    reopened = LocalMetadataStore(str(tmp_path), "catalog")
    assert reopened.load() == {"a": "y" * 150, "b": "z" * 250, "c": 1}
    reopened.close()


def test_a_failed_append_that_cannot_be_cut_back_fences_writes_until_the_cut_succeeds(open_log):
    # The active .log's descriptor is swapped (dup2) for a read-only one on the same file, as when
    # the device turns read-only: the kernel refuses both the write (EBADF) and the cut back.
    log = open_log(SegmentPolicy(index_interval_bytes=1))
    kept = [append_next(log) for _ in range(2)]
    fd = log._segments[-1]._fd
    writable = os.dup(fd)
    read_only = os.open(log._segments[-1].log_path, os.O_RDONLY)
    os.dup2(read_only, fd)
    try:
        with pytest.raises(WritesFenced) as info:
            append_next(log)
        assert log.writes_fenced is not None and "cutting it back failed" in str(info.value)
        with pytest.raises(WritesFenced):
            append_next(log)  # still cannot cut: still fenced
        assert [bytes(v) for v in log.read(0, 100, 1 << 20)] == kept  # reads go on
    finally:
        os.dup2(writable, fd)
        os.close(writable)
        os.close(read_only)
    kept.append(append_next(log))  # the cut succeeds first, then the append
    assert log.writes_fenced is None
    assert [bytes(v) for v in log.read(0, 100, 1 << 20)] == kept
    assert os.path.getsize(log._segments[-1].log_path) == 3 * BATCH


def test_a_purge_whose_new_segment_cannot_be_made_leaves_an_empty_log_that_appends_later(open_log):
    log = open_log(SegmentPolicy(segment_size=2 * BATCH, index_interval_bytes=1))
    for _ in range(5):
        append_next(log)
    assert log.delete_oldest_segments(1) == 1 and log.log_start_offset == 6
    obstacle = os.path.join(log.directory, "00000000000000000000.index")
    os.mkdir(obstacle)  # in the way of the new segment 0's index
    with pytest.raises(StorageError):
        log.purge()
    assert log.next_offset == 0 and log.size_bytes == 0 and log.read(0, 10, 1 << 20) == []
    assert sorted(os.listdir(log.directory)) == ["00000000000000000000.index"]  # only the obstacle
    os.rmdir(obstacle)
    first = append_next(log)
    assert read_header(first).base_offset == 0
    assert [bytes(v) for v in log.read(0, 10, 1 << 20)] == [first]
