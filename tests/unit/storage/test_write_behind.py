"""Write-behind (storage.local.writebehind) with real files, real appends and the real kernel:
appended data beyond the cache budget is written back and leaves the page cache (checked with
``mincore``), reads still return every byte, and syncs and acknowledgements are as before."""

from __future__ import annotations

import asyncio
import os

import pytest

from headwater.storage.api import SegmentPolicy, StorageWriteError, SyncFailed
from headwater.storage.local import writebehind
from headwater.storage.local.flusher import Flusher
from headwater.storage.local.log import LocalPartitionLog
from headwater.storage.local.writebehind import CHUNK_BYTES, TAIL_BYTES, WriteBehind, cached_bytes

from failing_disk import failing_disk
from storage_batches import stamped_batch

pytestmark = pytest.mark.skipif(not writebehind.available(), reason="needs Linux sync_file_range")

MIB = 1 << 20
OFF = SegmentPolicy(messages_required_to_save=16 << 20, size_of_messages_required_to_save=1 << 30)
"""compare.py's fsync-off topic: no periodic sync within these tests."""
BUDGET = 8 * MIB


def one_mib_batch(offset: int) -> bytes:
    return stamped_batch(offset, 1_000_000 + offset, count=100, payload_size=10_000)


def fill(log: LocalPartitionLog, megabytes: int, wait_acks: bool = False) -> list[bytes]:
    """Append ``megabytes`` ~1 MB batches on a running event loop; the batches appended."""
    written = []

    async def go():
        acks = []
        for _ in range(megabytes):
            batch = one_mib_batch(log.next_offset)
            written.append(batch)
            fut = log.append(batch)
            if fut is not None:
                acks.append(fut)
        if wait_acks:
            await asyncio.gather(*acks)

    asyncio.run(go())
    return written


def read_all(log: LocalPartitionLog) -> bytes:
    return b"".join(bytes(v) for v in log.read(0, 1 << 40, 1 << 40))


def log_files(directory) -> list[str]:
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".log"))


@pytest.fixture
def flusher_with(request):
    made = []

    def _make(cache_bytes: int) -> Flusher:
        f = Flusher(write_behind_cache_bytes=cache_bytes)
        made.append(f)
        return f

    yield _make
    for f in made:
        f.close()


def test_data_past_the_budget_is_written_back_and_dropped_and_reads_back_whole(tmp_path, flusher_with):
    flusher = flusher_with(BUDGET)
    log = LocalPartitionLog.open(str(tmp_path / "p"), OFF, flusher)
    try:
        written = fill(log, 40)
        wb = flusher.write_behind
        wb.drain()
        total = log.size_bytes
        assert wb.started >= total - CHUNK_BYTES - 2 * MIB  # all but the last partial chunk handed over
        assert wb.dropped >= total - BUDGET - CHUNK_BYTES - 2 * MIB
        assert wb.errors == 0 and wb.skipped == 0
        assert flusher.fdatasync_calls == 0  # write-behind is not a sync
        # the page cache holds the budget (plus the chunk not handed over, plus one page per range edge)
        cached = sum(cached_bytes(p) for p in log_files(tmp_path / "p"))
        assert cached <= BUDGET + CHUNK_BYTES + 2 * MIB, (cached, total)
        assert read_all(log) == b"".join(written)  # read back from the disk, unchanged
    finally:
        log.close()


def test_the_active_segments_tail_folio_stays_out_of_writeback(tmp_path, flusher_with):
    """Ranges of the active segment end on a TAIL_BYTES boundary (the folio the next append
    writes into is never under writeback); everything before the last CHUNK_BYTES is handed over."""
    flusher = flusher_with(1 << 30)  # nothing dropped: every range handed over stays counted
    log = LocalPartitionLog.open(str(tmp_path / "p"), OFF, flusher)
    try:
        written = fill(log, 23)
        wb = flusher.write_behind
        wb.drain()
        total = log.size_bytes
        assert total % TAIL_BYTES != 0  # (~1,000,000-byte batches: the tail is mid-folio)
        assert wb.started > 0 and wb.started % TAIL_BYTES == 0, wb.started
        assert total - CHUNK_BYTES < wb.started < total
        assert read_all(log) == b"".join(written)
    finally:
        log.close()


def test_sealed_segments_are_handed_over_whole(tmp_path, flusher_with):
    flusher = flusher_with(BUDGET)
    policy = SegmentPolicy(segment_size=6 * MIB, messages_required_to_save=16 << 20,
                           size_of_messages_required_to_save=1 << 30)
    log = LocalPartitionLog.open(str(tmp_path / "p"), policy, flusher)
    try:
        written = fill(log, 30)
        flusher.write_behind.drain()
        files = log_files(tmp_path / "p")
        assert len(files) >= 4
        sealed_bytes = sum(os.path.getsize(p) for p in files[:-1])
        assert flusher.write_behind.started >= sealed_bytes
        assert read_all(log) == b"".join(written)
    finally:
        log.close()


def test_enforce_fsync_acks_still_wait_for_fdatasync(tmp_path, flusher_with):
    flusher = flusher_with(BUDGET)
    log = LocalPartitionLog.open(str(tmp_path / "p"), SegmentPolicy(enforce_fsync=True), flusher)
    try:
        written = fill(log, 20, wait_acks=True)
        assert flusher.acknowledged == 20  # every append acknowledged by a successful fdatasync round
        assert flusher.fdatasync_calls >= 1 and flusher.failed == 0
        flusher.write_behind.drain()
        assert flusher.write_behind.dropped > 0
        assert read_all(log) == b"".join(written)
    finally:
        log.close()


def test_zero_turns_it_off(tmp_path, flusher_with):
    flusher = flusher_with(0)
    assert not flusher.write_behind.enabled
    log = LocalPartitionLog.open(str(tmp_path / "p"), OFF, flusher)
    try:
        written = fill(log, 12)
        flusher.write_behind.drain()
        assert flusher.write_behind.stats() == {"started": 0, "dropped": 0, "held": 0, "skipped": 0, "errors": 0}
        assert read_all(log) == b"".join(written)
    finally:
        log.close()


def test_a_file_gone_before_its_turn_is_skipped(tmp_path):
    wb = WriteBehind(1)
    try:
        path = tmp_path / "gone.log"
        path.write_bytes(os.urandom(2 * MIB))
        kept = tmp_path / "kept.log"
        kept.write_bytes(os.urandom(2 * MIB))
        os.unlink(path)
        wb.add(str(path), 0, 2 * MIB)
        wb.add(str(kept), 0, 2 * MIB)
        wb.drain()
        assert wb.skipped == 1  # the deleted file's range, dropped from the queue without an error
        assert wb.errors == 0
        assert wb.started == 2 * MIB and wb.dropped == 2 * MIB  # over the 1-byte budget: dropped at once
        assert cached_bytes(str(kept)) == 0
    finally:
        wb.close()


def test_negative_budget_is_refused():
    with pytest.raises(ValueError):
        WriteBehind(-1)



def test_the_log_still_fences_on_a_writeback_error_write_behind_saw(tmp_path, flusher_with):
    """A real EIO (ext4 on a loop device that runs out of backing store) that write-behind's
    waits saw first: the log's own fdatasync still fails and fences it. (By design the
    worker opens files separately, so its waits cannot consume an error owed to the log's fd;
    on this failing device the log's sync would also fail on its own writes, so this shows
    the end result, not that mechanism alone.)"""
    with failing_disk(tmp_path) as mnt:
        flusher = flusher_with(1 * MIB)
        log = LocalPartitionLog.open(str(mnt / "p"), OFF, flusher)
        try:
            async def go():
                for _ in range(16):
                    try:
                        log.append(one_mib_batch(log.next_offset))
                    except StorageWriteError:
                        break  # the filesystem itself gave up: enough was handed over

            asyncio.run(go())
            flusher.write_behind.drain()
            assert flusher.write_behind.errors >= 1  # its waits saw the EIO
            with pytest.raises(SyncFailed):
                log.sync()
            with pytest.raises(SyncFailed):
                log.append(one_mib_batch(log.next_offset))  # fenced
        finally:
            log.close()
