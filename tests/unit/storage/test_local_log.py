"""LocalPartitionLog: append, rotation, reads, lookups, retention, purge, truncate, reopen."""

from __future__ import annotations

import os

import pytest

from headwater.codec.batch import read_header
from headwater.storage.api import CorruptBatch, CorruptSegment, OffsetMismatch, SegmentPolicy, StorageError

from storage_batches import stamped_batch

# 3 messages of 100 B -> 256 + 3 * 148 = 700-byte batches
BATCH = 700
SMALL = SegmentPolicy(segment_size=2000, index_interval_bytes=1)  # 3 batches (2100 B) per segment


def base_offsets(views):
    return [read_header(v).base_offset for v in views]


def log_files(log):
    """The partition directory's files, less the next segment's spare (``spare-<n>.*.staging``,
    storage/local/prealloc.py: made ahead off the loop, no segment until a roll links it)."""
    return sorted(n for n in os.listdir(log.directory) if not n.startswith("spare-"))


def test_append_then_read_returns_identical_bytes(open_log, filler):
    log = open_log()
    batches = filler(log, 10)
    assert log.next_offset == 30
    assert log.log_start_offset == 0
    assert log.size_bytes == 10 * BATCH
    got = log.read(0, 1000, 1 << 30)
    assert [bytes(v) for v in got] == batches
    assert all(isinstance(v, memoryview) and v.readonly for v in got)


def test_append_rejects_wrong_base_offset_and_bad_lengths(open_log, filler):
    log = open_log()
    filler(log, 2)
    with pytest.raises(OffsetMismatch):
        log.append(stamped_batch(5, 1))
    with pytest.raises(OffsetMismatch):
        log.append(stamped_batch(0, 1))
    with pytest.raises(StorageError):
        log.append(stamped_batch(6, 1)[:-1])  # batch_length says one byte more
    with pytest.raises(StorageError):
        log.append(b"\x00" * 10)
    assert log.next_offset == 6
    assert len(log.read(0, 100, 1 << 30)) == 2


def test_rotation_is_soft_and_names_segments_by_start_offset(open_log, filler):
    log = open_log(SMALL)
    filler(log, 7)
    infos = log.segments()
    assert [(s.start_offset, s.end_offset, s.size_bytes, s.sealed) for s in infos] == [
        (0, 9, 3 * BATCH, True),  # 2100 >= 2000: rotated after the crossing append
        (9, 18, 3 * BATCH, True),
        (18, 21, BATCH, False),
    ]
    assert log_files(log) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000009.index",
        "00000000000000000009.log",
        "00000000000000000018.index",
        "00000000000000000018.log",
    ]
    assert os.path.getsize(os.path.join(log.directory, "00000000000000000009.log")) == 3 * BATCH
    assert os.path.getsize(os.path.join(log.directory, "00000000000000000009.index")) == 3 * 24


def test_read_starting_mid_batch_returns_the_batch_holding_the_offset(open_log, filler):
    log = open_log(SMALL)
    batches = filler(log, 7)
    for start in range(21):
        got = log.read(start, 1, 1 << 30)
        assert len(got) == 1
        assert bytes(got[0]) == batches[start // 3]


def test_reads_cross_segment_boundaries(open_log, filler):
    log = open_log(SMALL)
    batches = filler(log, 10)
    got = log.read(7, 9, 1 << 30)  # offsets 7..15: batches 2 (6..8) .. 5 (15..17)
    assert base_offsets(got) == [6, 9, 12, 15]
    assert [bytes(v) for v in got] == batches[2:6]


def test_max_messages_budget(open_log, filler):
    log = open_log(SMALL)
    filler(log, 10)
    assert base_offsets(log.read(0, 3, 1 << 30)) == [0]
    assert base_offsets(log.read(0, 4, 1 << 30)) == [0, 3]
    assert base_offsets(log.read(1, 3, 1 << 30)) == [0, 3]
    assert base_offsets(log.read(2, 1, 1 << 30)) == [0]
    assert base_offsets(log.read(0, 0, 1 << 30)) == [0]  # at least one batch
    assert base_offsets(log.read(0, 1000, 1 << 30)) == list(range(0, 30, 3))


def test_max_bytes_budget_always_returns_one_batch(open_log, filler):
    log = open_log(SMALL)
    filler(log, 10)
    assert base_offsets(log.read(0, 1000, 2 * BATCH)) == [0, 3]
    assert base_offsets(log.read(0, 1000, 2 * BATCH - 1)) == [0]
    assert base_offsets(log.read(0, 1000, 0)) == [0]
    assert base_offsets(log.read(4, 1000, 3 * BATCH)) == [3, 6, 9]  # across a segment boundary


def test_read_past_the_end_and_below_the_start(open_log, filler):
    log = open_log(SMALL)
    filler(log, 10)
    assert log.read(30, 10, 1 << 30) == []
    assert log.read(10_000, 10, 1 << 30) == []
    log.delete_oldest_segments(1)
    assert log.log_start_offset == 9
    assert base_offsets(log.read(0, 3, 1 << 30)) == [9]


def test_sparse_index_still_finds_every_offset(open_log, filler):
    log = open_log(SegmentPolicy(segment_size=1 << 20, index_interval_bytes=2000))
    batches = filler(log, 12)
    index_path = os.path.join(log.directory, "00000000000000000000.index")
    # entries at positions 0, 2100, 4200, 6300: one per 3 batches of 700 B
    log.sync()  # entries reach the file in groups; a sync writes the pending ones
    assert os.path.getsize(index_path) == 4 * 24
    for start in range(36):
        assert bytes(log.read(start, 1, 1 << 30)[0]) == batches[start // 3]


def test_large_reads_span_several_chunks(open_log, filler):
    log = open_log(SegmentPolicy(segment_size=1 << 30, index_interval_bytes=4096))
    batches = filler(log, 40, count=20, payload_size=4000)  # ~80 KB batches, 3.2 MB total
    got = log.read(5, 10_000, 1 << 30)
    assert [bytes(v) for v in got] == batches
    got = log.read(401, 30, 1 << 30)
    assert base_offsets(got) == [400, 420]


def test_offset_for_timestamp_across_segments(open_log, filler):
    log = open_log(SMALL)
    filler(log, 10, ts0=1_000_000, ts_step=1_000)  # batch i stamped 1_000_000 + 1000 i
    assert log.offset_for_timestamp(0) == 0
    assert log.offset_for_timestamp(1_000_000) == 0
    assert log.offset_for_timestamp(1_000_001) == 3
    assert log.offset_for_timestamp(1_003_000) == 9  # first batch of the second segment
    assert log.offset_for_timestamp(1_002_500) == 9
    assert log.offset_for_timestamp(1_009_000) == 27
    assert log.offset_for_timestamp(1_009_001) is None


def test_offset_for_timestamp_with_a_sparse_index(open_log, filler):
    log = open_log(SegmentPolicy(segment_size=1 << 20, index_interval_bytes=3000))
    filler(log, 12, ts0=5_000, ts_step=10)
    for i in range(12):
        assert log.offset_for_timestamp(5_000 + 10 * i) == 3 * i
        assert log.offset_for_timestamp(5_000 + 10 * i - 5) == 3 * i


def test_retention_by_age_deletes_expired_sealed_segments_only(open_log, filler):
    policy = SegmentPolicy(segment_size=2000, index_interval_bytes=1, message_expiry_us=10_000)
    log = open_log(policy)
    filler(log, 10, ts0=1_000_000, ts_step=1_000)  # segments' newest: 1_002_000, 1_005_000, 1_008_000, active
    assert log.apply_retention(now_us=1_012_000) == 0  # cutoff 1_002_000: not older
    assert log.apply_retention(now_us=1_012_001) == 1
    assert log.log_start_offset == 9
    assert log.apply_retention(now_us=2_000_000) == 2  # everything expired: the active one stays
    assert [s.sealed for s in log.segments()] == [False]
    assert log.log_start_offset == 27
    assert log.next_offset == 30
    assert base_offsets(log.read(0, 100, 1 << 30)) == [27]
    assert log_files(log) == ["00000000000000000027.index", "00000000000000000027.log"]


def test_retention_by_size_keeps_sealed_bytes_within_budget(open_log, filler):
    policy = SegmentPolicy(segment_size=2000, index_interval_bytes=1, max_partition_bytes=2 * 2100)
    log = open_log(policy)
    filler(log, 16)  # 5 sealed segments of 2100 B, an active one of 700 B
    assert log.apply_retention(now_us=0) == 3
    assert [s.start_offset for s in log.segments()] == [27, 36, 45]
    assert log.log_start_offset == 27
    assert log.size_bytes == 2 * 2100 + 700
    assert log.apply_retention(now_us=0) == 0


def test_delete_oldest_segments_never_deletes_the_active_one(open_log, filler):
    log = open_log(SMALL)
    filler(log, 7)
    assert log.delete_oldest_segments(0) == 0
    assert log.delete_oldest_segments(1) == 1
    assert log.log_start_offset == 9
    assert log.delete_oldest_segments(10) == 1
    assert log.delete_oldest_segments(10) == 0
    assert log.log_start_offset == 18
    assert log.next_offset == 21
    assert log_files(log) == ["00000000000000000018.index", "00000000000000000018.log"]


def test_purge_restarts_empty_at_offset_zero(open_log, filler):
    log = open_log(SMALL)
    filler(log, 7)
    log.purge()
    assert (log.log_start_offset, log.next_offset, log.size_bytes) == (0, 0, 0)
    assert log.read(0, 10, 1 << 30) == []
    assert log_files(log) == ["00000000000000000000.index", "00000000000000000000.log"]
    batches = filler(log, 2)
    assert [bytes(v) for v in log.read(0, 10, 1 << 30)] == batches


def test_truncate_within_the_active_segment(open_log, filler):
    log = open_log(SMALL)
    batches = filler(log, 8)  # active segment holds offsets 18..23
    log.truncate(22)  # inside batch 7 (21..23): the batch goes whole
    assert log.next_offset == 21
    assert [bytes(v) for v in log.read(0, 100, 1 << 30)] == batches[:7]
    log.truncate(100)  # past the end: nothing
    assert log.next_offset == 21
    again = filler(log, 1)
    assert bytes(log.read(21, 1, 1 << 30)[0]) == again[0]


def test_truncate_into_an_older_segment_reactivates_it(open_log, filler, tmp_path):
    log = open_log(SMALL)
    batches = filler(log, 10)
    log.truncate(4)
    assert log.next_offset == 3
    assert [(s.start_offset, s.end_offset, s.sealed) for s in log.segments()] == [(0, 3, False)]
    assert log_files(log) == ["00000000000000000000.index", "00000000000000000000.log"]
    assert os.path.getsize(os.path.join(log.directory, "00000000000000000000.log")) == BATCH
    more = filler(log, 4)
    assert [bytes(v) for v in log.read(0, 100, 1 << 30)] == batches[:1] + more
    log.close()
    reopened = open_log(SMALL)
    assert [bytes(v) for v in reopened.read(0, 100, 1 << 30)] == batches[:1] + more


def test_truncate_at_a_segment_start_and_below_the_log_start(open_log, filler):
    log = open_log(SMALL)
    batches = filler(log, 10)
    log.truncate(9)
    assert log.next_offset == 9
    assert [bytes(v) for v in log.read(0, 100, 1 << 30)] == batches[:3]
    log.delete_oldest_segments(1)
    assert log.log_start_offset == 9
    log.truncate(0)  # below the log start: empty, restarting at the log start
    assert (log.log_start_offset, log.next_offset) == (9, 9)
    assert log.read(0, 100, 1 << 30) == []


def test_reopen_after_close_gives_identical_bytes(open_log, filler):
    log = open_log(SMALL)
    batches = filler(log, 11)
    infos = log.segments()
    log.close()
    reopened = open_log(SMALL)
    assert reopened.segments() == infos
    assert reopened.next_offset == 33
    assert [bytes(v) for v in reopened.read(0, 1000, 1 << 30)] == batches
    assert reopened.recovery.truncated_bytes == 0
    assert reopened.recovery.rebuilt_indexes == 0
    more = filler(reopened, 1)
    assert bytes(reopened.read(33, 1, 1 << 30)[0]) == more[0]


def test_flipped_byte_on_disk_fails_the_read_closed(open_log, filler):
    log = open_log(SMALL)
    filler(log, 7)
    path = os.path.join(log.directory, "00000000000000000009.log")
    with open(path, "r+b") as f:  # a payload byte of the second batch of segment 9
        f.seek(BATCH + 400)
        byte = f.read(1)
        f.seek(BATCH + 400)
        f.write(bytes([byte[0] ^ 0x40]))
    assert len(log.read(0, 9, 1 << 30)) == 3  # the first segment is intact
    first = log.read(9, 100, 1 << 30)  # the batch before the damage, and no further
    assert [bytes(b) for b in first] == [bytes(log.read(9, 3, 1 << 30)[0])] and len(first[0]) == BATCH
    for start in (12, 14):  # a read that begins at the damaged batch fails closed
        with pytest.raises(CorruptBatch) as err:
            log.read(start, 100, 1 << 30)
        assert isinstance(err.value, CorruptSegment) and (err.value.offset, err.value.position) == (12, BATCH)
        assert "00000000000000000009.log" in str(err.value)
        assert f"byte {BATCH}" in str(err.value)
    log.close()
    unchecked = open_log(SegmentPolicy(segment_size=2000, index_interval_bytes=1, validate_checksum=False))
    assert len(unchecked.read(9, 9, 1 << 30)) == 3  # served as stored when checks are off


def test_preallocated_segments(open_log, filler):
    policy = SegmentPolicy(segment_size=4096, index_interval_bytes=1, preallocate_segments=True)
    log = open_log(policy)
    batches = filler(log, 8)  # 6 batches (4200 B) in segment 0, 2 in the active one
    active = os.path.join(log.directory, "00000000000000000018.log")
    sealed = os.path.join(log.directory, "00000000000000000000.log")
    assert os.path.getsize(active) == 4096  # reserved, zeros after the data
    assert os.path.getsize(sealed) == 6 * BATCH  # cut to its data when sealed
    log.close()
    reopened = open_log(policy)
    assert reopened.next_offset == 24
    assert [bytes(v) for v in reopened.read(0, 100, 1 << 30)] == batches
    assert os.path.getsize(active) == 4096
    more = filler(reopened, 1)
    assert bytes(reopened.read(24, 1, 1 << 30)[0]) == more[0]


def test_enforce_fsync_and_thresholds_keep_appends_working(open_log, filler):
    for policy in (
        SegmentPolicy(segment_size=2000, enforce_fsync=True),
        SegmentPolicy(segment_size=2000, messages_required_to_save=1, size_of_messages_required_to_save=1),
    ):
        log = open_log(policy, name=str(policy.enforce_fsync))
        batches = filler(log, 5)
        log.sync()
        assert [bytes(v) for v in log.read(0, 100, 1 << 30)] == batches


def test_closed_log_refuses_calls(open_log, filler):
    log = open_log()
    filler(log, 1)
    log.close()
    log.close()  # idempotent
    with pytest.raises(StorageError):
        log.append(stamped_batch(3, 1))
    with pytest.raises(StorageError):
        log.read(0, 1, 100)


def test_many_sealed_segments_reopen_on_demand(open_log, filler):
    log = open_log(SegmentPolicy(segment_size=700, index_interval_bytes=1))  # one batch per segment
    batches = filler(log, 30)
    for start in (0, 87, 3, 45, 30, 0):
        assert bytes(log.read(start, 1, 1 << 30)[0]) == batches[start // 3]
    assert [bytes(v) for v in log.read(0, 1000, 1 << 30)] == batches
