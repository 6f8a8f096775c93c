"""Catch-up reads past the page cache (storage.local.readahead with ``direct`` on): the aligned
``O_DIRECT`` read returns exactly the bytes of the range asked (ranges not starting or ending on
a block, reaching past the end of the file, files shorter than a block), reads nothing into the
page cache, and falls back to a read through the page cache where the filesystem refuses
``O_DIRECT``; a log read catching up with it on returns what a plain read returns. Real files."""

from __future__ import annotations

import asyncio
import errno
import glob
import os
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.storage.api import NotCached, SegmentPolicy
from headwater.storage.local import readahead, writebehind

from storage_batches import stamped_batch

pytestmark = pytest.mark.skipif(not hasattr(os, "O_DIRECT") or not hasattr(os, "posix_fadvise"),
                                reason="needs O_DIRECT and posix_fadvise")

A = readahead.ALIGN


def write(path, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


def direct_ok(path: str) -> None:
    """Skip where the test's filesystem refuses O_DIRECT (the fallback test covers that)."""
    if readahead.read_direct(path, 0, 1) is None:
        pytest.skip("this filesystem refuses O_DIRECT")


@pytest.fixture
def direct_on():
    previous = readahead.set_direct(True)
    yield
    readahead.set_direct(previous)


@pytest.fixture
def direct_off():
    previous = readahead.set_direct(False)
    yield
    readahead.set_direct(previous)


EDGES = [
    (0, 1), (0, A), (0, A + 1), (1, A - 1), (1, A), (A - 1, 2), (A, A), (A + 7, 3 * A),
    (5 * A - 1, 1), (3 * A + 100, 10 * A),  # the last runs past the end of the file
]


@pytest.mark.parametrize("position,length", EDGES)
def test_an_aligned_direct_read_returns_exactly_the_range(tmp_path, position, length):
    data = os.urandom(7 * A + 123)  # the last block is partial
    path = write(tmp_path / "f", data)
    direct_ok(path)
    assert readahead.read_direct(path, position, length) == data[position : position + length]


@pytest.mark.parametrize("size", [1, 100, A - 1, A, A + 1])
def test_files_around_one_block(tmp_path, size):
    data = os.urandom(size)
    path = write(tmp_path / "f", data)
    direct_ok(path)
    assert readahead.read_direct(path, 0, 1 << 20) == data
    assert readahead.read_direct(path, size - 1, 10) == data[-1:]
    assert readahead.read_direct(path, 1, size) == data[1:]


def test_reads_at_or_past_the_end_and_empty_ranges(tmp_path):
    data = os.urandom(2 * A + 5)
    path = write(tmp_path / "f", data)
    direct_ok(path)
    assert readahead.read_direct(path, len(data), 100) == b""
    assert readahead.read_direct(path, len(data) + 3 * A + 1, 100) == b""
    assert readahead.read_direct(path, 10, 0) == b""
    assert readahead.read_direct(write(tmp_path / "empty", b""), 0, 100) == b""


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40_000), st.integers(0, 40_000))
def test_any_range_of_a_file(tmp_path_factory, position, length):
    path = os.path.join(tmp_path_factory.getbasetemp(), "hypothesis-direct")
    if not os.path.exists(path):
        write(path, os.urandom(9 * A + 1000))
    direct_ok(path)
    with open(path, "rb") as f:
        data = f.read()
    assert readahead.read_direct(path, position, length) == data[position : position + length]


def test_a_growing_read_and_threads_each_have_their_buffer(tmp_path):
    data = os.urandom(3 * readahead.DIRECT_CHUNK + 5000)
    path = write(tmp_path / "f", data)
    direct_ok(path)
    small = readahead.read_direct(path, 17, 5000)
    large = readahead.read_direct(path, 4000, len(data))  # a larger buffer replaces the first
    assert small == data[17:5017] and large == data[4000:]
    results: dict[int, list[bool]] = {}

    def reader(k: int) -> None:
        results[k] = [readahead.read_direct(path, p, 300_000) == data[p : p + 300_000]
                      for p in range(k * 1000 + 1, len(data), 1_000_003)]

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(all(r) and r for r in results.values()) and len(results) == 3


def evicted(tmp_path, size: int) -> tuple[str, bytes]:
    """A file of ``size`` random bytes, none of them in the page cache (skips where O_DIRECT
    is refused or the pages cannot be dropped)."""
    data = os.urandom(size)
    path = write(tmp_path / "f", data)
    direct_ok(path)
    if not readahead.evict(path):
        pytest.skip("this filesystem keeps the pages in memory")
    return path, data


def test_a_direct_read_leaves_the_page_cache_alone(tmp_path, direct_off):
    path, data = evicted(tmp_path, 4 << 20)
    assert readahead.read_direct(path, 12345, len(data)) == data[12345:]
    assert writebehind.cached_bytes(path) == 0
    assert readahead.read_chunk(path, 0, 1 << 20) == data[: 1 << 20]  # direct off: through the cache
    assert writebehind.cached_bytes(path) >= 1 << 20


def test_read_chunk_with_direct_on_reads_uncached_bytes_past_the_cache(tmp_path, direct_on):
    path, data = evicted(tmp_path, 3 << 20)
    assert readahead.read_chunk(path, 4097, 2 << 20) == data[4097 : 4097 + (2 << 20)]
    assert writebehind.cached_bytes(path) == 0


def refusing_file() -> str:
    """A readable file on a filesystem that refuses O_DIRECT (procfs: EINVAL at open)."""
    path = "/proc/self/cmdline"
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
    except OSError as exc:
        assert exc.errno == errno.EINVAL, exc
        return path
    pytest.skip("procfs accepts O_DIRECT here: no filesystem to test the fallback on")


def test_where_o_direct_is_refused_the_read_falls_back_to_the_page_cache(direct_on):
    path = refusing_file()
    assert readahead.read_direct(path, 0, 100) is None  # refused: the caller reads otherwise
    with open(path, "rb") as f:
        expected = f.read()
    got = readahead.read_chunk(path, 0, 1 << 16)
    assert got == expected and got


def test_read_chunk_of_a_file_gone_is_none(tmp_path, direct_on):
    assert readahead.read_chunk(str(tmp_path / "missing"), 0, 100) is None


def test_a_log_catching_up_with_direct_reads_returns_the_plain_bytes(open_log, direct_on):
    log = open_log(SegmentPolicy(segment_size=3 << 20))
    for _ in range(900):  # ~9 MB over three segments, batches of 10 x 1 KB
        log.append(stamped_batch(log.next_offset, 1_000_000 + log.next_offset, 10, 1000))
    expected = [bytes(v) for v in log.read(0, log.next_offset, 1 << 30)]
    paths = glob.glob(os.path.join(log.directory, "*.log"))
    for path in paths:
        direct_ok(path)
        if not readahead.evict(path):
            pytest.skip("this filesystem keeps the pages in memory")
    misses: list = []

    async def catch_up() -> list[bytes]:
        out, offset = [], 0
        while offset < log.next_offset:
            while True:
                try:
                    got = [bytes(v) for v in log.read(offset, 300, 400_000, nowait=True)]
                    break
                except NotCached as miss:
                    misses.append(miss)
                    await asyncio.wrap_future(miss.future)
            out += got
            offset = int.from_bytes(got[-1][8:16], "little") + int.from_bytes(got[-1][48:52], "little")
        return out

    assert asyncio.run(catch_up()) == expected
    assert misses  # the worker path ran
    # past the page cache: at most the pages a first RWF_NOWAIT miss per segment starts reading
    assert sum(writebehind.cached_bytes(p) for p in paths) < sum(os.path.getsize(p) for p in paths) // 4
