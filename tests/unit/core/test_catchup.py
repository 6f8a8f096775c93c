"""core.catchup on a real local log whose pages are dropped (posix_fadvise(DONTNEED)): ``soon``
answers a cached read at once and returns a coroutine for one that is not; the coroutine returns
what a plain read returns, asks ``check`` after each wait (its error ends the read), and counts
each wait in ``headwater_catchup_reads_total`` / ``_read_bytes_total`` under the protocol given."""

from __future__ import annotations

import asyncio
import glob
import inspect
import os

import pytest

from headwater import metrics
from headwater.codec.batch import Message, build_batch, stamp
from headwater.core import catchup
from headwater.storage.api import SegmentPolicy
from headwater.storage.local import readahead
from headwater.storage.local.log import LocalPartitionLog

pytestmark = pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="needs posix_fadvise")


@pytest.fixture
def log(tmp_path):
    log = LocalPartitionLog.open(str(tmp_path / "p"), SegmentPolicy(segment_size=1 << 20))
    for b in range(200):
        batch = bytearray(build_batch([Message(payload=bytes([b % 251]) * 1000) for _ in range(10)]))
        stamp(batch, 0, 10 * b, 1_000_000 + 10 * b)
        log.append(bytes(batch))
    yield log
    log.close()


def drop_cache(log) -> None:
    for path in glob.glob(os.path.join(log.directory, "*.log")):
        if not readahead.evict(path):
            pytest.skip("this filesystem keeps the pages in memory")


def counted(protocol: str) -> tuple[float, float]:
    return (metrics.REGISTRY.get_sample_value("headwater_catchup_reads_total", {"protocol": protocol}) or 0.0,
            metrics.REGISTRY.get_sample_value("headwater_catchup_read_bytes_total", {"protocol": protocol}) or 0.0)


def test_a_cached_read_is_answered_at_once_and_a_dropped_one_off_the_loop(log):
    expected = [bytes(v) for v in log.read(500, 300, 1 << 30)]
    again = catchup.soon("kafka", log.read, 500, 300, 1 << 30)
    assert not inspect.isawaitable(again) and [bytes(v) for v in again] == expected  # cached: no coroutine
    drop_cache(log)
    before = counted("kafka")
    reading = catchup.soon("kafka", log.read, 500, 300, 1 << 30)
    assert inspect.isawaitable(reading)
    assert [bytes(v) for v in asyncio.run(reading)] == expected
    after = counted("kafka")
    assert after[0] > before[0] and after[1] - before[1] >= sum(map(len, expected))


def test_a_timestamp_lookup_off_the_loop_counts_under_its_protocol(log):
    drop_cache(log)
    before, other = counted("iggy"), counted("kafka")
    looking_up = catchup.soon("iggy", log.offset_for_timestamp, 1_001_234)
    assert inspect.isawaitable(looking_up)
    assert asyncio.run(looking_up) == 1240
    assert counted("iggy")[0] > before[0] and counted("kafka") == other


def test_check_runs_after_the_wait_and_its_error_ends_the_read(log):
    drop_cache(log)

    class Gone(Exception):
        pass

    def check() -> None:
        raise Gone()

    with pytest.raises(Gone):
        asyncio.run(catchup.read_in("kafka", log.read, 0, 100, 1 << 30, check=check))
