"""The compaction key of stored messages, and batches rewritten with a subset of their frames."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater.codec import batch as codec_batch
from headwater.codec.batch import Message, build_batch, stamp
from headwater.codec.kafka.convert import kafka_to_iggy
from headwater.codec.kafka.record_batch import Record, build_record_batch
from headwater.codec.record_key import compaction_key

SETTINGS = settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
NOW_MS = 1_750_000_000_000

keys = st.one_of(
    st.none(),
    st.binary(max_size=20),
    st.binary(min_size=250, max_size=600),
    st.builds(lambda n: b"K" * n, st.integers(99_000, 110_000)),  # carried in the payload prefix
)


@SETTINGS
@given(records=st.lists(st.tuples(keys, st.none() | st.binary(max_size=30),
                                  st.lists(st.tuples(st.binary(max_size=8), st.binary(max_size=8)), max_size=2)),
                        min_size=1, max_size=4))
def test_the_kafka_key_is_the_compaction_key(records):
    batch = build_record_batch([Record(i, 0, k, v, h) for i, (k, v, h) in enumerate(records)], base_timestamp=NOW_MS)
    iggy, _ = kafka_to_iggy(batch, NOW_MS)
    for frame, (k, v, _) in zip(codec_batch.iter_frames(iggy), records):
        key, tombstone = compaction_key(frame.user_headers, frame.id, frame.payload)
        assert key == (None if k is None else b"k" + k)
        assert tombstone == (v is None)


def test_iggy_messages_are_keyed_by_id():
    assert compaction_key(b"", 7) == (b"i" + (7).to_bytes(16, "little"), False)
    assert compaction_key(b"", 0) == (None, False)


messages = st.lists(
    st.tuples(st.binary(max_size=40), st.integers(0, 2**128 - 1), st.binary(max_size=20)), min_size=1, max_size=12
)


@SETTINGS
@given(msgs=messages, data=st.data(), base=st.integers(0, 2**40))
def test_select_frames_keeps_offsets_and_bytes(msgs, data, base):
    headers = [b"" if not h else bytes([2, 1, 0, 0, 0]) + b"k" + bytes([1, len(h), 0, 0, 0]) + h for _, _, h in msgs]
    batch = bytearray(build_batch(Message(p, i, 1000 + n, hd) for n, ((p, i, _), hd) in enumerate(zip(msgs, headers))))
    stamp(batch, 3, base, 5_000)
    keep = sorted(data.draw(st.sets(st.integers(0, len(msgs) - 1), min_size=1)))
    out = codec_batch.select_frames(batch, keep)
    header = codec_batch.verify(out, check_offset_deltas=False)
    assert header.base_offset == base and header.message_count == len(keep)
    before = list(codec_batch.iter_frames(batch))
    after = list(codec_batch.iter_frames(out))
    for i, frame in zip(keep, after):
        old = before[i]
        assert bytes(batch[old.position : old.position + old.size]) == bytes(out[frame.position : frame.position + frame.size])
    assert codec_batch.frame_offset_deltas(out) == keep
    assert codec_batch.last_offset(out) == base + keep[-1]
