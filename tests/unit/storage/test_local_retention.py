"""The pure retention decision, and the sparse index's in-memory lookups."""

from __future__ import annotations

from array import array

from headwater.storage.api import SegmentInfo, SegmentPolicy
from headwater.storage.local.index import SegmentIndex, is_well_formed
from headwater.storage.local.retention import expired_count, over_size_count, segments_to_delete


def seg(start, newest_us, size=100, sealed=True):
    return SegmentInfo(start, start + 10, size, newest_us, sealed)


SEGMENTS = [seg(0, 100), seg(10, 200), seg(20, 300), seg(30, 400, sealed=False)]


def test_expiry_deletes_a_prefix_of_sealed_segments():
    assert expired_count(SEGMENTS, 0, 10**9) == 0  # 0 = never
    assert expired_count(SEGMENTS, 50, 150) == 0  # cutoff 100: not older
    assert expired_count(SEGMENTS, 50, 151) == 1
    assert expired_count(SEGMENTS, 50, 10**9) == 3  # never the active one
    out_of_order = [seg(0, 500), seg(10, 100), seg(20, 600, sealed=False)]
    assert expired_count(out_of_order, 50, 300) == 0  # no holes


def test_size_budget_counts_sealed_bytes_only():
    assert over_size_count(SEGMENTS, 0) == 0  # 0 = unlimited
    assert over_size_count(SEGMENTS, 300) == 0
    assert over_size_count(SEGMENTS, 299) == 1
    assert over_size_count(SEGMENTS, 100) == 2
    assert over_size_count(SEGMENTS, 1) == 3


def test_the_larger_count_wins_and_is_capped_at_the_sealed_count():
    policy = SegmentPolicy(message_expiry_us=50, max_partition_bytes=250)
    assert segments_to_delete(SEGMENTS, policy, now_us=151) == 1  # size: 1, age: 1
    assert segments_to_delete(SEGMENTS, policy, now_us=251) == 2  # age wins
    policy = SegmentPolicy(message_expiry_us=0, max_partition_bytes=1)
    assert segments_to_delete(SEGMENTS, policy, now_us=0) == 3
    assert segments_to_delete([seg(0, 1, sealed=False)], policy, now_us=10**9) == 0


def entries(*triples):
    out = array("Q")
    for t in triples:
        out.extend(t)
    return out


def test_index_lookups():
    index = SegmentIndex("x", entries((10, 100, 0), (13, 200, 700), (20, 300, 1400)), None, 1)
    assert index.floor_by_offset(9) is None
    assert index.floor_by_offset(10) == (10, 0)
    assert index.floor_by_offset(12) == (10, 0)
    assert index.floor_by_offset(13) == (13, 700)
    assert index.floor_by_offset(10**6) == (20, 1400)
    assert index.before_timestamp(100) is None
    assert index.before_timestamp(101) == (10, 0)
    assert index.before_timestamp(300) == (13, 700)
    assert index.before_timestamp(301) == (20, 1400)
    assert index.max_timestamp() == 300
    assert len(index) == 3 and index.entry(1) == (13, 200, 700)


def test_sparse_rule_and_well_formedness():
    index = SegmentIndex("x", array("Q"), None, 1000)
    assert index.wants_entry(0)
    index.add(0, 1, 0)
    assert not index.wants_entry(999)
    assert index.wants_entry(1000)
    assert is_well_formed(entries((5, 1, 0), (8, 1, 10)), 5)
    assert not is_well_formed(entries((5, 1, 0), (8, 1, 10)), 6)  # below the segment start
    assert not is_well_formed(entries((5, 1, 0), (5, 1, 10)), 0)
    assert not is_well_formed(entries((5, 1, 10), (8, 1, 10)), 0)
