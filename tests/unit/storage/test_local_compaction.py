"""Log compaction of the local engine: keep-newest per key, gaps, tombstones, crash-safe swap."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater.codec import batch as codec_batch
from headwater.codec.batch import Message, build_batch, stamp
from headwater.codec.record_key import compaction_key
from headwater.storage.api import SegmentPolicy
from headwater.storage.local.check import CheckReport, check_partition
from headwater.storage.local import compaction
from headwater.storage.local.log import LocalPartitionLog

HOUR_US = 3_600_000_000


def _tlv(name: bytes, kind: int, data: bytes) -> bytes:
    return struct.pack("<BI", 2, len(name)) + name + struct.pack("<BI", kind, len(data)) + data


def keyed_headers(key: bytes | None, tombstone: bool = False) -> bytes:
    """The user headers the Kafka edge writes for a key (one chunk) and a null value."""
    out = b"" if key is None else _tlv(b"kafka.key", 1, key)
    return out + (_tlv(b"kafka.flags", 9, b"\x01") if tombstone else b"")


def keyed_batch(base: int, ts_us: int, records: list[tuple[bytes | None, bytes | None]]) -> bytes:
    """A stamped batch; each record (key, value or None for a tombstone)."""
    messages = [
        Message(payload=v or b"", id=0, origin_timestamp=ts_us, user_headers=keyed_headers(k, v is None))
        for k, v in records
    ]
    batch = bytearray(build_batch(messages))
    stamp(batch, 0, base, ts_us)
    return bytes(batch)


def read_all(log) -> list[tuple[int, bytes | None, bytes, bytes]]:
    """(offset, key, payload, frame bytes checksum) of every stored message."""
    out = []
    for b in log.read(0, 1 << 30, 1 << 40):
        codec_batch.verify(b, check_offset_deltas=False)
        base = codec_batch.read_header(b).base_offset
        for f in codec_batch.iter_frames(b):
            key, _ = compaction_key(f.user_headers, f.id)
            out.append((base + f.offset_delta, key, bytes(f.payload), f.checksum))
    return out


def compact_now(log, now_us: int) -> int:
    job = log.plan_compaction(now_us)
    if job is None:
        return 0
    return log.finish_compaction(log.run_compaction(job))


POLICY = SegmentPolicy(segment_size=1500, compact=True, min_cleanable_dirty_ratio=0.0, delete_retention_us=HOUR_US)


def append_all(log, batches: list[list[tuple[bytes | None, bytes | None]]], ts: int) -> list[tuple[int, bytes | None, bytes | None]]:
    written = []
    for records in batches:
        base = log.next_offset
        log.append(keyed_batch(base, ts, records))
        written += [(base + i, k, v) for i, (k, v) in enumerate(records)]
    return written


records_st = st.lists(
    st.lists(
        st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]), st.one_of(st.none(), st.binary(min_size=1, max_size=120))),
        min_size=1,
        max_size=6,
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=records_st, expire=st.booleans())
def test_keep_newest_per_key(tmp_path_factory, batches, expire):
    """Property: after a pass, the sealed part holds exactly the newest record per key
    among the records up to the cleaned range (tombstones gone once expired), offsets
    and frames unchanged, and the active segment untouched."""
    log = LocalPartitionLog.open(str(tmp_path_factory.mktemp("c")), POLICY)
    try:
        ts = 1_000 * HOUR_US
        written = append_all(log, batches, ts)
        before = {o: (k, p, s) for o, k, p, s in read_all(log)}
        sealed = log.segments()[:-1]
        now = ts + (2 * HOUR_US if expire else 1)
        compact_now(log, now)
        after = read_all(log)
        upto = sealed[-1].end_offset if sealed else 0
        newest = {}
        for offset, key, _ in written:
            if offset < upto:
                newest[key] = offset
        expected = []
        for offset, key, value in written:
            if offset < upto:
                if newest[key] != offset or (value is None and expire):
                    continue
            expected.append(offset)
        assert [o for o, *_ in after] == expected
        for o, k, p, s in after:  # byte-identical frames at their original offsets
            assert before[o] == (k, p, s)
        # the offline checker (headwater verify) finds no damage in a compacted log
        log.close()
        report = CheckReport()
        check_partition(log.directory, report)
        assert report.damaged == [], report.damaged
        # a reopened log reads the same (indexes rebuilt consistently)
        log = LocalPartitionLog.open(log.directory, POLICY)
        assert read_all(log) == after
        assert log.next_offset == written[-1][0] + 1
    finally:
        log.close()


def test_reads_step_over_gaps(open_log):
    log = open_log(POLICY)
    ts = 1_000 * HOUR_US
    written = append_all(log, [[(b"k", b"v%d" % i), (b"x%d" % i, b"y")] for i in range(30)], ts)
    compact_now(log, ts + 1)
    offsets = [o for o, *_ in read_all(log)]
    assert len(offsets) < len(written)
    # from each offset, a read of n messages returns the next n stored ones
    for start in range(0, written[-1][0], 7):
        stored = [o for o in offsets if o >= start]
        got = []
        for b in log.read(start, 3, 1 << 30):
            base = codec_batch.read_header(b).base_offset
            got += [base + d for d in codec_batch.frame_offset_deltas(b)]
        got = [o for o in got if o >= start]
        assert got[: min(3, len(stored))] == stored[:3]


def test_tombstone_kept_until_delete_retention(open_log):
    log = open_log(POLICY)
    ts = 1_000 * HOUR_US
    append_all(log, [[(b"k", b"v1")], [(b"k", None)]] + [[(b"f%d" % i, b"x" * 300)] for i in range(12)], ts)
    compact_now(log, ts + 1)
    keys = [(o, k) for o, k, *_ in read_all(log)]
    assert (1, b"kk") in keys and (0, b"kk") not in keys  # the value went, the tombstone stays
    compact_now(log, ts + HOUR_US + 1)
    assert all(k != b"kk" for _, k in [(o, k) for o, k, *_ in read_all(log)])


@pytest.mark.parametrize("crash_at", ["index.swap", "log.swap", "commit", "index", "log", "done"])
def test_crash_during_swap_leaves_old_or_new(tmp_path, crash_at):
    """A crash after any step of the swap: reopening gives either the old or the
    compacted segments, whole, and the reads verify."""
    path = str(tmp_path / "p")
    log = LocalPartitionLog.open(path, POLICY)
    ts = 1_000 * HOUR_US
    append_all(log, [[(b"k%d" % (i % 3), b"v" * 200)] for i in range(40)], ts)
    old = read_all(log)
    job = log.run_compaction(log.plan_compaction(ts + 1))

    class Crash(Exception):
        pass

    def step(name):
        if name == crash_at:
            raise Crash(name)

    with pytest.raises(Crash):
        log.finish_compaction(job, step)
    log.close()
    reopened = LocalPartitionLog.open(path, POLICY)
    try:
        got = read_all(reopened)
        assert not [n for n in os.listdir(path) if n.endswith((".cleaned", ".swap"))]
        newest = {k: o for o, k, *_ in old}
        assert set(got) <= set(old)  # nothing altered; each segment old or compacted
        assert {newest[k] for k in newest} <= {o for o, *_ in got}  # the newest per key survives
        if crash_at == "index.swap":
            assert got == old  # no segment reached its commit point (its .log.swap)
        else:
            assert got != old  # the first segment's .log.swap existed: it was compacted
        assert reopened.next_offset == 40
    finally:
        reopened.close()


def test_plan_respects_ratio_and_lag():
    from headwater.storage.api import SegmentInfo

    segs = [SegmentInfo(0, 10, 1000, 100, True), SegmentInfo(10, 20, 1000, 200, True), SegmentInfo(20, 25, 10, 300, False)]
    p = SegmentPolicy(compact=True, min_cleanable_dirty_ratio=0.6)
    assert compaction.plan(segs, p, 0, 0, 1000) is not None  # all dirty
    assert compaction.plan(segs, p, 10, 0, 1000) is None  # half dirty < 0.6
    assert compaction.plan(segs, SegmentPolicy(compact=True, min_cleanable_dirty_ratio=0.6, max_compaction_lag_us=500), 10, 0, 1000) is not None
    assert compaction.plan(segs, SegmentPolicy(compact=True, min_compaction_lag_us=850), 0, 0, 1000)[0][-1].start_offset == 0
    assert compaction.plan(segs, SegmentPolicy(compact=False), 0, 0, 1000) is None
    # limit_offset (the owner's last stable offset): a segment ending past it is not cleanable
    assert compaction.plan(segs, p, 0, 0, 1000, limit_offset=19)[0][-1].start_offset == 0
    assert compaction.plan(segs, p, 0, 0, 1000, limit_offset=20)[0][-1].start_offset == 10
    assert compaction.plan(segs, p, 0, 0, 1000, limit_offset=9) is None


def test_pinned_offsets_shadow_nothing_and_stay(tmp_path):
    """Messages in pinned ranges never enter the offset map and are never removed."""
    log = LocalPartitionLog.open(str(tmp_path / "p"), SegmentPolicy(segment_size=1, compact=True, min_cleanable_dirty_ratio=0.0))
    try:
        append_all(log, [[(b"a", b"1"), (b"b", b"1")], [(b"a", b"2"), (b"b", None)], [(b"a", b"3")], [(b"x", b"x")]], 1)
        job = log.plan_compaction(2, pinned=[(2, 3)])
        assert job is not None and job.pinned == [(2, 3)]
        assert log.finish_compaction(log.run_compaction(job)) == 1  # only a=1 (shadowed by a=3)
        assert [(o, p) for o, _k, p, _c in read_all(log)] == [(1, b"1"), (2, b"2"), (3, b""), (4, b"3"), (5, b"x")]
        assert compaction.pinned_at([(2, 3), (7, 7)], 7) and not compaction.pinned_at([(2, 3), (7, 7)], 4)
    finally:
        log.close()
