"""Catch-up reads (storage.local.readahead): a ``nowait`` read of bytes that are not in the page
cache raises NotCached while a worker reads them, and the read run again returns exactly what a
plain (blocking) read returns, also when the log changed meanwhile (appends, a truncation,
retention deleting the segment, a batch damaged on disk). Real files; the page cache is
emptied for a segment with posix_fadvise(POSIX_FADV_DONTNEED)."""

from __future__ import annotations

import asyncio
import glob
import os

import pytest

from headwater.storage.api import CorruptBatch, CorruptSegment, NotCached, SegmentPolicy
from headwater.storage.local import readahead

from storage_batches import stamped_batch

pytestmark = pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="needs posix_fadvise")


def drop_cache(log) -> None:
    """Drop every segment file of ``log`` from the page cache; skips the test where the
    filesystem keeps the pages anyway (tmpfs)."""
    for path in glob.glob(os.path.join(log.directory, "*.log")):
        if not readahead.evict(path):
            pytest.skip("this filesystem keeps the pages in memory (no page cache to miss)")


def plain(log, offset: int, count: int, max_bytes: int = 1 << 30) -> list[bytes]:
    return [bytes(v) for v in log.read(offset, count, max_bytes)]


async def waiting(log, offset: int, count: int, max_bytes: int = 1 << 30, misses: list | None = None,
                  between=None) -> list[bytes]:
    """The nowait read, run again after each miss (``between`` runs while the worker reads)."""
    while True:
        try:
            return [bytes(v) for v in log.read(offset, count, max_bytes, nowait=True)]
        except NotCached as miss:
            if misses is not None:
                misses.append(miss)
            if between is not None:
                between()
                between = None
            await asyncio.wrap_future(miss.future)


def fill(log, batches: int, count: int = 10, size: int = 1000) -> None:
    for _ in range(batches):
        log.append(stamped_batch(log.next_offset, 1_000_000 + log.next_offset, count, size))


def test_a_read_from_the_disk_returns_the_bytes_a_cached_read_returns(open_log):
    log = open_log(SegmentPolicy(segment_size=1 << 20))
    fill(log, 300)  # ~3 MB over several segments
    expected = plain(log, 0, log.next_offset)
    drop_cache(log)
    misses: list = []

    async def catch_up() -> list[bytes]:
        out, offset = [], 0
        while offset < log.next_offset:
            got = await waiting(log, offset, 200, misses=misses)
            out += got
            offset = int.from_bytes(got[-1][8:16], "little") + int.from_bytes(got[-1][48:52], "little")
        return out

    assert asyncio.run(catch_up()) == expected
    assert misses  # the pages were really gone: the worker path ran


def test_a_small_read_of_dropped_pages_is_served_by_the_worker_read(open_log):
    log = open_log()
    fill(log, 50)
    expected = plain(log, 120, 30)
    drop_cache(log)
    misses: list = []
    assert asyncio.run(waiting(log, 120, 30, misses=misses)) == expected
    assert misses


def test_a_timestamp_lookup_in_dropped_pages_waits_for_the_worker_read(open_log):
    log = open_log(SegmentPolicy(segment_size=1 << 20))
    fill(log, 300)  # batches of 10: base offsets 0, 10, ... 2990, base timestamps 1_000_000 + base offset
    targets = [0, 1_001_234, 1_001_240, 1_000_700, 1_002_990, 1_002_991]
    expected = [log.offset_for_timestamp(t) for t in targets]
    assert expected == [0, 1240, 1240, 700, 2990, None]
    misses: list = []

    async def lookup(timestamp_us: int) -> int | None:
        while True:
            try:
                return log.offset_for_timestamp(timestamp_us, nowait=True)
            except NotCached as miss:
                misses.append(miss)
                await asyncio.wrap_future(miss.future)

    for target, want in zip(targets, expected):
        drop_cache(log)
        assert asyncio.run(lookup(target)) == want
    assert misses  # the index walk's pages were really gone: the worker path ran


def test_appends_while_the_worker_reads(open_log):
    log = open_log()
    fill(log, 40)
    drop_cache(log)
    got = asyncio.run(waiting(log, 0, 10_000, between=lambda: fill(log, 5)))
    assert got == plain(log, 0, 10_000)
    assert len(got) == 45


def test_a_truncation_while_the_worker_reads_is_never_served_the_old_bytes(open_log):
    log = open_log()
    fill(log, 40)
    old = plain(log, 100, 10_000)
    drop_cache(log)

    def cut_and_rewrite() -> None:
        log.truncate(100)
        fill(log, 30, count=10, size=700)  # other bytes at the same offsets and positions

    got = asyncio.run(waiting(log, 100, 10_000, between=cut_and_rewrite))
    assert got == plain(log, 100, 10_000)
    assert got != old
    # and again after the worker's chunk of the old bytes is done: still the new bytes
    assert asyncio.run(waiting(log, 100, 10_000)) == plain(log, 100, 10_000)


def test_retention_deleting_the_segment_while_the_worker_reads(open_log):
    log = open_log(SegmentPolicy(segment_size=1 << 20))
    fill(log, 300)
    drop_cache(log)
    got = asyncio.run(waiting(log, 0, 50, between=lambda: log.delete_oldest_segments(1)))
    assert log.log_start_offset > 0
    assert got == plain(log, 0, 50)
    assert int.from_bytes(got[0][8:16], "little") == log.log_start_offset


def test_a_batch_damaged_on_disk_fails_closed_after_the_worker_read(open_log):
    """The worker's read meets the damage like a cached read: the batches before it are
    served unchanged, a read that reaches it fails closed (CorruptBatch, a CorruptSegment)."""
    log = open_log()
    fill(log, 20)
    before = plain(log, 0, 10_000)
    position = sum(len(b) for b in before[:5])  # the sixth batch (offsets 50..59)
    path = glob.glob(os.path.join(log.directory, "*.log"))[0]
    fd = os.open(path, os.O_RDWR)
    try:
        byte = os.pread(fd, 1, position + 256 + 48 + 3)
        os.pwrite(fd, bytes([byte[0] ^ 0xFF]), position + 256 + 48 + 3)  # a payload byte
    finally:
        os.close(fd)
    drop_cache(log)
    misses: list = []
    with pytest.raises(CorruptBatch, match=f"batch at byte {position}") as err:
        asyncio.run(waiting(log, 50, 10_000, misses=misses))
    assert misses and isinstance(err.value, CorruptSegment)
    drop_cache(log)
    assert asyncio.run(waiting(log, 0, 10_000)) == before[:5]
    assert (err.value.offset, err.value.position) == (50, position)
    assert plain(log, 0, 10_000) == before[:5]
    for start in (50, 55, 59):
        with pytest.raises(CorruptBatch, match=f"batch at byte {position}"):
            plain(log, start, 10_000)
    assert plain(log, 60, 10_000) == before[6:]  # reads past the damage do not touch it


@pytest.mark.parametrize("check", ["cachestat", "probe"])
def test_cached_tells_pages_in_memory_from_pages_on_disk(tmp_path, monkeypatch, check):
    """Both checks: cachestat(2), and the RWF_NOWAIT probe of kernels older than 6.5."""
    if check == "probe":
        if not hasattr(os, "RWF_NOWAIT"):
            pytest.skip("no RWF_NOWAIT here")
        monkeypatch.setattr(readahead._cachestat, "usable", False)
    elif not readahead._cachestat.usable:
        pytest.skip("this kernel has no cachestat(2)")
    # A probe that misses starts the kernel's readahead around the page it asked about, so a
    # later question about nearby pages could find them read in meanwhile (this test failed
    # that way, now and then): each question after the drop asks about pages far from the
    # earlier ones, and whether the drop took is asked of cachestat(2) itself, which reads nothing.
    path = tmp_path / "f"
    path.write_bytes(os.urandom(8 << 20))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.pread(fd, 8 << 20, 0)
        assert readahead.cached(fd, 0, 8 << 20)
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        left = readahead._CacheStat().pages(fd, 0, 8 << 20)  # None: no cachestat on this kernel
        if left:
            pytest.skip("this filesystem keeps the pages in memory")
        assert not readahead.cached(fd, 1 << 20, 8192)
        os.pread(fd, 4096, 6 << 20)
        assert readahead.cached(fd, 6 << 20, 100)
        assert readahead.cached(fd, 0, 0)
    finally:
        os.close(fd)


def test_the_worker_read_of_a_file_gone_is_none(tmp_path):
    assert readahead.read_chunk(str(tmp_path / "gone.log"), 0, 4096) is None
    path = tmp_path / "short.log"
    path.write_bytes(b"abc")
    assert readahead.read_chunk(str(path), 1, 4096) == b"bc"


@pytest.mark.skipif(not hasattr(os, "RWF_NOWAIT"), reason="no RWF_NOWAIT here")
def test_read_nowait_reads_cached_bytes_and_reports_missing_ones(tmp_path):
    data = os.urandom(1 << 20)
    path = tmp_path / "f"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.pread(fd, 1 << 20, 0)
        got = readahead.read_nowait(fd, 20_000, 4096)
        assert got.readonly and bytes(got) == data[4096:24096]
        assert readahead.read_nowait(fd, readahead.NOWAIT_READ_MAX + 1, 0) is None  # larger: cachestat's
        if not readahead.evict(str(path)):
            pytest.skip("this filesystem keeps the pages in memory")
        assert readahead.read_nowait(fd, 20_000, 300_000) is readahead.MISSED
    finally:
        os.close(fd)
