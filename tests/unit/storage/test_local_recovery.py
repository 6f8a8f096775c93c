"""Boot-time recovery: torn tails, index rebuilds, refusal on unreconcilable indexes."""

from __future__ import annotations

import os
import struct

import pytest

from headwater.storage.api import CorruptSegment, SegmentPolicy
from headwater.storage.local.index import decode_entries, encode_entry
from headwater.storage.local.log import LocalPartitionLog
from headwater.storage.local.recovery import CLEAN_SHUTDOWN

from storage_batches import stamped_batch

EVERY = SegmentPolicy(segment_size=1 << 20, index_interval_bytes=1)
SEG0 = "00000000000000000000"


def write_partition(directory, log_bytes: bytes, index_bytes: bytes | None, stem: str = SEG0):
    """The files as a crash leaves them: these bytes, and no clean-close marker (a previous
    open and close in the same directory left one)."""
    os.makedirs(directory, exist_ok=True)
    marker = os.path.join(directory, CLEAN_SHUTDOWN)
    if os.path.exists(marker):
        os.unlink(marker)
    with open(os.path.join(directory, stem + ".log"), "wb") as f:
        f.write(log_bytes)
    index_path = os.path.join(directory, stem + ".index")
    if index_bytes is None:
        if os.path.exists(index_path):
            os.unlink(index_path)
    else:
        with open(index_path, "wb") as f:
            f.write(index_bytes)


def read_all(log):
    return [bytes(v) for v in log.read(0, 1 << 30, 1 << 40)]


def reference(batches: int, count: int = 1, payload_size: int = 16):
    """Stamped batches and the .log / .index bytes a writer indexing every batch produces."""
    out, index, pos, offset = [], b"", 0, 0
    for i in range(batches):
        b = stamped_batch(offset, 100 + i, count, payload_size)
        index += encode_entry(offset, 100 + i, pos)
        out.append(b)
        pos += len(b)
        offset += count
    return out, b"".join(out), index


def test_torn_tail_cut_at_every_byte_keeps_exactly_the_whole_batches(tmp_path):
    batches, log_bytes, index_bytes = reference(3)  # 320-byte batches
    last_start = len(log_bytes) - len(batches[-1])
    directory = str(tmp_path / "p")
    for cut in range(last_start + 1, len(log_bytes)):
        write_partition(directory, log_bytes[:cut], index_bytes)
        log = LocalPartitionLog.open(directory, EVERY)
        try:
            assert log.next_offset == 2, cut
            assert read_all(log) == batches[:2], cut
            assert log.recovery.truncated_bytes == cut - last_start
            assert os.path.getsize(os.path.join(directory, SEG0 + ".log")) == last_start
            assert os.path.getsize(os.path.join(directory, SEG0 + ".index")) == 2 * 24
        finally:
            log.close()


def test_torn_tail_with_unindexed_last_batch_and_sparse_index(tmp_path):
    batches, log_bytes, index_bytes = reference(4)
    last_start = len(log_bytes) - len(batches[-1])
    directory = str(tmp_path / "p")
    sparse = SegmentPolicy(segment_size=1 << 20, index_interval_bytes=1 << 20)
    for cut in range(last_start, len(log_bytes)):
        write_partition(directory, log_bytes[:cut], index_bytes[:24])  # one entry, at 0
        log = LocalPartitionLog.open(directory, sparse)
        try:
            assert read_all(log) == batches[:3]
            assert log.next_offset == 3
        finally:
            log.close()


def closed_cleanly(directory: str, batches) -> str:
    """A log holding ``batches``, appended and closed by the log itself: returns its .log path."""
    log = LocalPartitionLog.open(directory, EVERY)
    for b in batches:
        log.append(bytearray(b))
    log.close()
    assert os.path.exists(os.path.join(directory, CLEAN_SHUTDOWN))
    return os.path.join(directory, SEG0 + ".log")


@pytest.mark.parametrize("where", ["payload", "header", "cut short"])
def test_a_bad_tail_after_a_clean_close_is_refused_not_cut(tmp_path, where):
    """A clean close synced every byte, so a bad last batch found at the next open is damage
    at rest to acknowledged data, never a torn write: the partition is refused and nothing on
    disk changes (recovery, module doc 8)."""
    batches, _, _ = reference(3)
    directory = str(tmp_path / "p")
    path = closed_cleanly(directory, batches)
    size = os.path.getsize(path)
    last = size - len(batches[-1])
    with open(path, "r+b") as f:
        if where == "cut short":
            f.truncate(size - 5)
        else:
            at = size - 3 if where == "payload" else last + 8  # a payload byte / base_offset
            f.seek(at)
            byte = f.read(1)[0]
            f.seek(at)
            f.write(bytes([byte ^ 0x40]))
    before = open(path, "rb").read()
    with pytest.raises(CorruptSegment, match="after a clean close"):
        LocalPartitionLog.open(directory, EVERY)
    assert open(path, "rb").read() == before  # nothing cut
    assert os.path.exists(os.path.join(directory, CLEAN_SHUTDOWN))  # refused again at every open


def test_the_marker_lasts_only_until_the_next_open(tmp_path):
    """Opening deletes the marker: a crash after it (no close) leaves a tail that may be torn,
    and that is cut as before."""
    batches, _, _ = reference(3)
    directory = str(tmp_path / "p")
    path = closed_cleanly(directory, batches[:2])
    log = LocalPartitionLog.open(directory, EVERY)
    assert not os.path.exists(os.path.join(directory, CLEAN_SHUTDOWN))
    log.append(bytearray(batches[2]))
    log._commit.sync_inline()  # the bytes are on disk; then the process "dies": no close
    size = os.path.getsize(path)
    os.truncate(path, size - 7)  # what a torn write of the last batch leaves
    again = LocalPartitionLog.open(directory, EVERY)
    try:
        assert read_all(again) == batches[:2]
        assert again.recovery.truncated_bytes == len(batches[2]) - 7
    finally:
        again.close()
        log.close()


def test_recovered_log_accepts_appends_and_survives_another_reopen(tmp_path):
    batches, log_bytes, index_bytes = reference(3)
    directory = str(tmp_path / "p")
    write_partition(directory, log_bytes[:-7], index_bytes)
    log = LocalPartitionLog.open(directory, EVERY)
    replacement = stamped_batch(2, 999, 2, 50)
    log.append(replacement)
    log.close()
    log = LocalPartitionLog.open(directory, EVERY)
    assert read_all(log) == batches[:2] + [replacement]
    assert log.recovery.truncated_bytes == 0
    log.close()


def test_whole_last_batch_failing_verify_is_cut(tmp_path):
    batches, log_bytes, index_bytes = reference(3)
    damaged = bytearray(log_bytes)
    damaged[-3] ^= 0xFF  # payload byte of the last batch
    directory = str(tmp_path / "p")
    write_partition(directory, bytes(damaged), index_bytes)
    log = LocalPartitionLog.open(directory, EVERY)
    assert read_all(log) == batches[:2]
    assert log.recovery.segments[0].stop_reason.startswith("verify failed")
    log.close()


def test_missing_index_is_rebuilt_from_the_log(tmp_path):
    batches, log_bytes, index_bytes = reference(5)
    directory = str(tmp_path / "p")
    write_partition(directory, log_bytes, None)
    log = LocalPartitionLog.open(directory, EVERY)
    assert read_all(log) == batches
    assert log.recovery.rebuilt_indexes == 1
    log.close()
    with open(os.path.join(directory, SEG0 + ".index"), "rb") as f:
        assert f.read() == index_bytes


@pytest.mark.parametrize("damage", ["partial entry", "not increasing", "wrong offsets"])
def test_torn_or_inconsistent_index_is_rebuilt(tmp_path, damage):
    batches, log_bytes, index_bytes = reference(5)
    if damage == "partial entry":
        bad = index_bytes + b"\x01\x02\x03\x04\x05"
    elif damage == "not increasing":
        bad = index_bytes[:24] + index_bytes[48:72] + index_bytes[24:48]
    else:  # well formed, but naming offsets the log does not have there
        bad = b"".join(encode_entry(10 * i, 100 + i, 320 * i) for i in range(5))
    directory = str(tmp_path / "p")
    write_partition(directory, log_bytes, bad)
    log = LocalPartitionLog.open(directory, EVERY)
    assert read_all(log) == batches
    assert log.recovery.rebuilt_indexes == 1
    for start in range(5):
        assert bytes(log.read(start, 1, 1 << 20)[0]) == batches[start]
    log.close()
    with open(os.path.join(directory, SEG0 + ".index"), "rb") as f:
        assert f.read() == index_bytes


def test_torn_index_mid_chain_is_rebuilt_in_a_sealed_segment(tmp_path):
    directory = str(tmp_path / "p")
    policy = SegmentPolicy(segment_size=900, index_interval_bytes=1)
    log = LocalPartitionLog.open(directory, policy)
    written = []
    for i in range(9):
        b = stamped_batch(log.next_offset, 10 + i, 1, 16)
        log.append(b)
        written.append(b)
    log.close()
    os.unlink(os.path.join(directory, "00000000000000000003.index"))
    log = LocalPartitionLog.open(directory, policy)
    assert read_all(log) == written
    assert log.recovery.rebuilt_indexes == 1
    log.close()


def test_index_entry_past_the_end_of_the_log_refuses_to_open(tmp_path):
    batches, log_bytes, index_bytes = reference(3)
    directory = str(tmp_path / "p")
    write_partition(directory, log_bytes, index_bytes + encode_entry(3, 200, len(log_bytes) + 320))
    with pytest.raises(CorruptSegment) as err:
        LocalPartitionLog.open(directory, EVERY)
    assert SEG0 + ".index" in str(err.value)
    assert "past the end" in str(err.value)
    # the files are left as they were for an operator to inspect
    assert os.path.getsize(os.path.join(directory, SEG0 + ".log")) == len(log_bytes)


def test_index_entry_naming_never_written_preallocated_bytes_refuses_to_open(tmp_path):
    batches, log_bytes, index_bytes = reference(3)
    directory = str(tmp_path / "p")
    padded = log_bytes + bytes(4096)  # preallocated zeros after the data
    write_partition(directory, padded, index_bytes + encode_entry(3, 200, len(log_bytes)))
    with pytest.raises(CorruptSegment):
        LocalPartitionLog.open(directory, EVERY)


def test_trailing_zeros_of_a_preallocated_log_end_the_data(tmp_path):
    batches, log_bytes, index_bytes = reference(3)
    directory = str(tmp_path / "p")
    write_partition(directory, log_bytes + bytes(5000), index_bytes)
    log = LocalPartitionLog.open(directory, EVERY)
    assert read_all(log) == batches
    assert log.recovery.segments[0].stop_reason == "zeros"
    assert (log.recovery.truncated_bytes, log.recovery.segments[0].zero_bytes) == (0, 5000)
    log.close()


def test_flipped_byte_in_a_sealed_segment_is_caught_on_read_not_at_open(tmp_path):
    directory = str(tmp_path / "p")
    policy = SegmentPolicy(segment_size=1000, index_interval_bytes=1)
    log = LocalPartitionLog.open(directory, policy)
    for i in range(8):
        log.append(stamped_batch(log.next_offset, 10 + i, 1, 16))
    log.close()
    path = os.path.join(directory, SEG0 + ".log")
    with open(path, "r+b") as f:
        f.seek(320 + 300)  # payload of the second of four batches in segment 0
        f.write(b"\xee")
    log = LocalPartitionLog.open(directory, policy)
    assert log.next_offset == 8
    assert len(log.read(0, 1, 1 << 20)) == 1
    with pytest.raises(CorruptSegment) as err:
        log.read(1, 1, 1 << 20)
    assert f"{SEG0}.log: batch at byte 320" in str(err.value)
    log.close()


def test_leftovers_are_swept_and_logs_kept(tmp_path):
    batches, log_bytes, index_bytes = reference(2)
    directory = str(tmp_path / "p")
    write_partition(directory, log_bytes, index_bytes)
    orphan = "00000000000000000777.index"
    for name in (orphan, SEG0 + ".index.staging"):
        with open(os.path.join(directory, name), "wb") as f:
            f.write(b"x" * 24)
    write_partition(directory, b"", None, stem="00000000000000000002")  # an empty newest segment
    log = LocalPartitionLog.open(directory, EVERY)
    assert sorted(log.recovery.removed_files) == sorted([orphan, SEG0 + ".index.staging"])
    assert sorted(os.listdir(directory)) == [
        SEG0 + ".index",
        SEG0 + ".log",
        "00000000000000000002.index",
        "00000000000000000002.log",
    ]
    assert read_all(log) == batches
    assert log.next_offset == 2
    log.close()


def test_log_with_no_whole_batch_recovers_empty(tmp_path):
    directory = str(tmp_path / "p")
    write_partition(directory, b"garbage that is no batch" * 3, None)
    log = LocalPartitionLog.open(directory, EVERY)
    assert (log.log_start_offset, log.next_offset, log.size_bytes) == (0, 0, 0)
    assert os.path.getsize(os.path.join(directory, SEG0 + ".log")) == 0
    b = stamped_batch(0, 5)
    log.append(b)
    assert read_all(log) == [b]
    log.close()


def test_overlapping_segments_refuse_to_open(tmp_path):
    batches, log_bytes, index_bytes = reference(3)
    directory = str(tmp_path / "p")
    write_partition(directory, log_bytes, index_bytes)
    write_partition(directory, stamped_batch(1, 5, 1, 16), None, stem="00000000000000000001")
    with pytest.raises(CorruptSegment) as err:
        LocalPartitionLog.open(directory, EVERY)
    assert "overlap" in str(err.value)


def test_index_decoding_round_trip():
    raw = encode_entry(1, 2, 3) + encode_entry(2**64 - 1, 0, 77)
    entries = decode_entries(raw + b"\x00")
    assert list(entries) == [1, 2, 3, 2**64 - 1, 0, 77]
    assert struct.unpack("<QQQ", raw[:24]) == (1, 2, 3)


# --------------------------------------------------------------------------- only a torn tail is cut


def _flip(data: bytes, position: int) -> bytes:
    out = bytearray(data)
    out[position] ^= 0xFF
    return bytes(out)


def _starts(batches) -> list[int]:
    out, pos = [], 0
    for b in batches:
        out.append(pos)
        pos += len(b)
    return out


def _assert_refused_untouched(directory, log_bytes, index_bytes, *needles):
    with pytest.raises(CorruptSegment) as err:
        LocalPartitionLog.open(directory, EVERY)
    for needle in needles:
        assert needle in str(err.value), str(err.value)
    with open(os.path.join(directory, SEG0 + ".log"), "rb") as f:
        assert f.read() == log_bytes  # nothing cut
    index_path = os.path.join(directory, SEG0 + ".index")
    assert (open(index_path, "rb").read() if os.path.exists(index_path) else None) == index_bytes
    return str(err.value)


@pytest.mark.parametrize("index", ["none", "first entry only", "every batch but the damaged one is newest"])
def test_damage_with_whole_batches_after_it_is_refused_not_cut(tmp_path, index):
    batches, log_bytes, index_bytes = reference(6)
    starts = _starts(batches)
    damaged = _flip(log_bytes, starts[3] + 300)  # a payload byte of batch 3 (offset 3)
    idx = {"none": None, "first entry only": index_bytes[:24], "every batch but the damaged one is newest": index_bytes[: 4 * 24]}[index]
    directory = str(tmp_path / "p")
    write_partition(directory, damaged, idx)
    message = _assert_refused_untouched(
        directory, damaged, idx, SEG0 + ".log", f"batch at byte {starts[3]}", f"follows at byte {starts[4]}"
    )
    assert "offset 4" in message


def test_a_damaged_batch_length_running_past_the_end_with_batches_after_it_is_refused(tmp_path):
    batches, log_bytes, _ = reference(4)
    starts = _starts(batches)
    damaged = bytearray(log_bytes)
    damaged[starts[1] + 32 + 5] ^= 0xFF  # batch_length now reaches far past the end of the file
    directory = str(tmp_path / "p")
    write_partition(directory, bytes(damaged), None)
    _assert_refused_untouched(directory, bytes(damaged), None, f"byte {starts[1] + 32}:", "is damaged",
                              "whole and verifies at 320 bytes")


def test_a_whole_batch_with_an_unexpected_base_offset_mid_chain_is_refused(tmp_path):
    batches = [stamped_batch(0, 100, 1), stamped_batch(1, 101, 1), stamped_batch(7, 102, 1), stamped_batch(8, 103, 1)]
    log_bytes = b"".join(batches)
    directory = str(tmp_path / "p")
    write_partition(directory, log_bytes, None)
    _assert_refused_untouched(directory, log_bytes, None, "base_offset 7, expected 2", "a whole valid batch there")


def test_a_damaged_final_batch_is_a_torn_tail_even_followed_by_a_partial_one(tmp_path):
    batches, log_bytes, index_bytes = reference(5)
    starts = _starts(batches)
    damaged = _flip(log_bytes, starts[3] + 300)[: starts[4] + 200]  # batch 3 damaged, batch 4 torn
    directory = str(tmp_path / "p")
    write_partition(directory, damaged, index_bytes[:24])
    log = LocalPartitionLog.open(directory, EVERY)
    try:
        assert read_all(log) == batches[:3]
        assert log.recovery.truncated_bytes == len(damaged) - starts[3]
        assert log.recovery.segments[0].stop_reason.startswith("verify failed")
        assert log.recovery_outcome and "torn tail" in log.recovery_outcome.notes[0]
    finally:
        log.close()


def test_a_damaged_final_batch_before_preallocated_zeros_is_cut(tmp_path):
    batches, log_bytes, index_bytes = reference(3)
    damaged = _flip(log_bytes, len(log_bytes) - 3) + bytes(8192)
    directory = str(tmp_path / "p")
    write_partition(directory, damaged, index_bytes[:24])
    log = LocalPartitionLog.open(directory, EVERY)
    try:
        assert read_all(log) == batches[:2]
        assert log.next_offset == 2
    finally:
        log.close()


def test_a_final_batch_with_an_all_zero_payload_that_fails_verification_is_cut(tmp_path):
    good = stamped_batch(0, 100)
    zero_payload = bytearray(stamped_batch(1, 101, 1, 4000))
    zero_payload[256 + 48 :] = bytes(4000)  # long zero runs: header candidates that never verify
    log_bytes = good + bytes(zero_payload)
    directory = str(tmp_path / "p")
    write_partition(directory, log_bytes, None)
    log = LocalPartitionLog.open(directory, EVERY)
    try:
        assert read_all(log) == [good]
    finally:
        log.close()


def test_preallocated_zeros_then_a_whole_batch_are_refused(tmp_path):
    """After a power loss a page of zeros can sit before batches that did reach the disk."""
    batches, log_bytes, index_bytes = reference(3)
    later = stamped_batch(3, 200)
    data = log_bytes + bytes(4096) + later + bytes(4096)
    directory = str(tmp_path / "p")
    write_partition(directory, data, index_bytes)
    _assert_refused_untouched(directory, data, index_bytes, f"batch at byte {len(log_bytes)}", "(zeros)",
                              f"follows at byte {len(log_bytes) + 4096}")


def test_preallocated_zeros_then_garbage_are_cut_and_counted_as_torn(tmp_path):
    batches, log_bytes, index_bytes = reference(3)
    data = log_bytes + bytes(1000) + b"\x5a" * 700 + bytes(3000)
    directory = str(tmp_path / "p")
    write_partition(directory, data, index_bytes)
    log = LocalPartitionLog.open(directory, EVERY)
    try:
        assert read_all(log) == batches
        assert log.recovery.truncated_bytes == len(data) - len(log_bytes)
        assert log.recovery.segments[0].zero_bytes == 0
    finally:
        log.close()


def test_a_big_preallocated_zero_tail_is_fine_and_reports_nothing(tmp_path):
    batches, log_bytes, index_bytes = reference(3)
    directory = str(tmp_path / "p")
    write_partition(directory, log_bytes, index_bytes)
    with open(os.path.join(directory, SEG0 + ".log"), "r+b") as f:
        f.truncate(len(log_bytes) + (9 << 20))  # a 9 MiB hole, as posix_fallocate leaves unwritten
    log = LocalPartitionLog.open(directory, EVERY)
    try:
        assert read_all(log) == batches
        assert log.recovery.segments[0].zero_bytes == 9 << 20
        assert not log.recovery_outcome  # trimmed zeros are not news
    finally:
        log.close()


@pytest.mark.parametrize("gap", [(4 << 20) - 600, (4 << 20) - 300, (4 << 20) - 250, (4 << 20) - 50, 9 << 20])
@pytest.mark.parametrize("hole", [True, False])
def test_a_whole_batch_far_behind_zeros_is_found_across_scan_chunks(tmp_path, gap, hole):
    batches, log_bytes, index_bytes = reference(2)
    later = stamped_batch(2, 300)
    path = str(tmp_path / "p" / (SEG0 + ".log"))
    write_partition(str(tmp_path / "p"), log_bytes, index_bytes)
    with open(path, "r+b") as f:
        if not hole:
            f.seek(len(log_bytes))
            f.write(bytes(gap))
        f.seek(len(log_bytes) + gap)
        f.write(later)
    with pytest.raises(CorruptSegment) as err:
        LocalPartitionLog.open(str(tmp_path / "p"), EVERY)
    assert f"follows at byte {len(log_bytes) + gap} (offset 2)" in str(err.value)


def test_a_damaged_tail_of_a_sealed_segment_is_refused_when_later_segments_hold_data(tmp_path):
    directory = str(tmp_path / "p")
    policy = SegmentPolicy(segment_size=1000, index_interval_bytes=1 << 20)  # one index entry per segment
    log = LocalPartitionLog.open(directory, policy)
    for i in range(8):
        log.append(stamped_batch(log.next_offset, 10 + i, 1, 16))
    log.close()
    path = os.path.join(directory, SEG0 + ".log")
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size - 3)  # payload of the segment's last batch
        f.write(b"\xee")
    with pytest.raises(CorruptSegment) as err:
        LocalPartitionLog.open(directory, policy)
    assert "later segments hold data" in str(err.value)
    assert os.path.getsize(path) == size
