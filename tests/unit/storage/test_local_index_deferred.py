"""Deferred index writes (storage.local.index): entries reach the .index file in groups,
always before a sync, seal or close, never past what a rollback kept; a process kill loses
only pending entries, which recovery re-adds from the log. Real files, a real SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from headwater.storage.api import SegmentPolicy
from headwater.storage.local.index import ENTRY_SIZE, FLUSH_ENTRIES, FLUSH_LOG_BYTES, decode_entries
from headwater.storage.local.log import LocalPartitionLog

EVERY_BATCH = SegmentPolicy(index_interval_bytes=1)
NO_SYNC = SegmentPolicy(index_interval_bytes=1, messages_required_to_save=16_777_216,
                        size_of_messages_required_to_save=1 << 30)  # no inline periodic sync to flush
INDEX = "00000000000000000000.index"


def index_entries_on_file(log: LocalPartitionLog, name: str = INDEX) -> int:
    return os.path.getsize(os.path.join(log.directory, name)) // ENTRY_SIZE


def test_entries_reach_the_file_in_groups_of_flush_entries(open_log, filler):
    log = open_log(NO_SYNC)
    filler(log, FLUSH_ENTRIES - 1)
    assert index_entries_on_file(log) == 0  # pending: the batches alone were written
    filler(log, 1)
    assert index_entries_on_file(log) == FLUSH_ENTRIES
    filler(log, 5)
    assert index_entries_on_file(log) == FLUSH_ENTRIES
    log.sync()
    assert index_entries_on_file(log) == FLUSH_ENTRIES + 5
    with open(os.path.join(log.directory, INDEX), "rb") as f:
        entries = decode_entries(f.read())
    assert list(entries[0::3]) == [3 * i for i in range(FLUSH_ENTRIES + 5)]  # offsets, in order, no zeros


def test_entries_reach_the_file_once_the_log_grew_flush_log_bytes(open_log, filler):
    log = open_log(NO_SYNC)
    batch_bytes = len(filler(log, 1, count=10, payload_size=50_000)[0])
    per_flush = -(-FLUSH_LOG_BYTES // batch_bytes) + 1  # the first pending entry + the bytes after it
    filler(log, per_flush - 2, count=10, payload_size=50_000)
    assert index_entries_on_file(log) == 0
    filler(log, 1, count=10, payload_size=50_000)
    assert index_entries_on_file(log) == per_flush


def test_a_sealed_segment_has_every_entry_on_file_and_reads_by_offset(open_log, filler):
    log = open_log(SegmentPolicy(index_interval_bytes=1, segment_size=20_000))
    batches = filler(log, 60)  # several segments of ~40 batches... each sealed with pending entries
    sealed = [s for s in log.segments()][:-1]
    assert sealed
    for info in sealed:
        name = f"{info.start_offset:020d}.index"
        on_file = index_entries_on_file(log, name)
        assert on_file * 3 == info.end_offset - info.start_offset  # one entry per 3-message batch
    for i, b in enumerate(batches):  # sealed segments reload their index from the file
        assert bytes(log.read(3 * i + 1, 1, 1 << 30)[0]) == b


def test_close_writes_the_pending_entries_and_reopening_needs_no_repair(tmp_path, filler):
    directory = str(tmp_path / "p")
    log = LocalPartitionLog.open(directory, EVERY_BATCH)
    batches = filler(log, 10)
    log.close()
    again = LocalPartitionLog.open(directory, EVERY_BATCH)
    try:
        assert not again.recovery_outcome
        assert index_entries_on_file(again) == 10
        assert [bytes(v) for v in again.read(0, 100, 1 << 30)] == batches
    finally:
        again.close()


def test_a_rollback_never_extends_the_file_over_pending_entries(open_log, filler):
    log = open_log(NO_SYNC)
    filler(log, 4)
    seg = log._segments[-1]
    mark = seg.mark()
    filler(log, 2)
    seg.rollback(mark)
    assert index_entries_on_file(log) == 0  # no zero-filled entries appeared
    log.sync()
    assert index_entries_on_file(log) == 4


WRITER = textwrap.dedent(
    """
    import sys
    from headwater.storage.api import SegmentPolicy
    from headwater.storage.local.log import LocalPartitionLog
    sys.path.insert(0, sys.argv[2])
    from storage_batches import stamped_batch
    log = LocalPartitionLog.open(sys.argv[1], SegmentPolicy(index_interval_bytes=1))
    for i in range(int(sys.argv[3])):
        log.append(stamped_batch(log.next_offset, 1_000_000 + i, 3, 100))
    print(log.next_offset, flush=True)
    sys.stdin.read()  # killed here, the log never closed
    """
)


def test_sigkill_with_pending_entries_loses_no_batch_and_recovery_readds_the_entries(tmp_path):
    directory = str(tmp_path / "p")
    batches = FLUSH_ENTRIES + 7  # 7 entries pending at the kill
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, directory, os.path.dirname(__file__), str(batches)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    try:
        next_offset = int(proc.stdout.readline())
        assert os.path.getsize(os.path.join(directory, INDEX)) == FLUSH_ENTRIES * ENTRY_SIZE
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert next_offset == 3 * batches
    log = LocalPartitionLog.open(directory, EVERY_BATCH)
    try:
        assert log.next_offset == next_offset
        assert log.recovery_outcome  # the missing entries were found and re-added
        assert index_entries_on_file(log) == batches
        for i in range(batches):  # every acknowledged batch, found by offset
            view = log.read(3 * i + 2, 1, 1 << 30)[0]
            assert bytes(view[8:16]) == (3 * i).to_bytes(8, "little")
    finally:
        log.close()
