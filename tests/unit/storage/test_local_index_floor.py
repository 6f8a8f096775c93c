"""``SegmentIndex.floor_by_offset`` checks the entry after its last answer first (a consumer reading
front to back): against a plain binary search over the same entries, for any sequence of lookups
while the index grows and is cut back (hypothesis)."""

from __future__ import annotations

from array import array
from bisect import bisect_right

from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.storage.local.index import SegmentIndex


def reference(entries: array, offset: int):
    offsets = list(entries[0::3])
    i = bisect_right(offsets, offset) - 1
    return None if i < 0 else (entries[3 * i], entries[3 * i + 2])


steps = st.lists(st.one_of(
    st.tuples(st.just("ask"), st.integers(-5, 400)),
    st.tuples(st.just("next"), st.integers(0, 3)),  # the offset just past the last answer, plus a little
    st.tuples(st.just("grow"), st.integers(1, 6)),
    st.tuples(st.just("cut"), st.integers(0, 30)),
), max_size=60)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(1, 9), max_size=30), steps)
def test_the_floor_is_the_binary_search_answer(gaps, operations):
    entries = array("Q")
    offset = 0
    for gap in gaps:
        entries.extend((offset, 1000 + offset, 300 * offset))
        offset += gap
    index = SegmentIndex("unused.index", entries, None, 4096)
    last = None
    for op, value in operations:
        if op == "grow":
            for _ in range(value):
                entries.extend((offset, 1000 + offset, 300 * offset))
                offset += 1 + value
            continue
        if op == "cut":
            del entries[3 * min(value, len(entries) // 3):]
            offset = entries[-3] + 1 if entries else 0
            continue
        ask = value if op == "ask" else (last[0] if last else 0) + value
        last = index.floor_by_offset(ask)
        assert last == reference(entries, ask), (op, ask)
