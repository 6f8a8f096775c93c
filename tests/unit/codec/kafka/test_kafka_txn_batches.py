"""Transaction batches at the Kafka edge (record_batch.with_producer, control_batch):
hypothesis round-trips through the RecordBatch v2 view, and golden bytes from KIP-98."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from headwater.codec.kafka.record_batch import (
    Record,
    RecordBatchView,
    build_record_batch,
    control_batch,
    control_type,
    with_producer,
)

records = st.lists(
    st.tuples(st.binary(max_size=20) | st.none(), st.binary(max_size=40) | st.none()), min_size=1, max_size=5
)


@given(records, st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1), st.booleans(), st.sampled_from([0, 1, 2, 3, 4]))
def test_with_producer_sets_the_fields_and_keeps_the_records(recs, pid, epoch, transactional, codec):
    batch = build_record_batch([Record(i, i, k, v) for i, (k, v) in enumerate(recs)], base_timestamp=1_700_000_000_000,
                               base_offset=42, compression=codec)
    out = RecordBatchView(with_producer(batch, pid, epoch, transactional=transactional))
    out.verify_crc()
    before = RecordBatchView(batch)
    assert (out.producer_id, out.producer_epoch, out.is_transactional) == (pid, epoch, transactional)
    assert (out.base_offset, out.compression, out.is_control, out.record_count) == (42, codec, False, len(recs))
    assert [(r.key, r.value) for r in out.records()] == [(r.key, r.value) for r in before.records()]


@given(st.integers(0, 2**62), st.integers(0, 2**40), st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1),
       st.booleans(), st.integers(0, 2**31 - 1))
def test_control_batch_round_trips(offset, ts, pid, epoch, committed, coordinator_epoch):
    b = control_batch(offset, ts, pid, epoch, committed, coordinator_epoch)
    view = RecordBatchView(b)
    view.verify_crc()
    assert view.is_control and view.is_transactional
    assert (view.base_offset, view.base_timestamp, view.producer_id, view.producer_epoch) == (offset, ts, pid, epoch)
    assert control_type(b) == (1 if committed else 0)
    (record,) = list(view.records())
    assert struct.unpack(">hi", record.value) == (0, coordinator_epoch)
    assert control_type(build_record_batch([Record(0, 0, b"k", b"v")], base_timestamp=0)) is None


def test_control_record_golden_bytes():
    # KIP-98 EndTransactionMarker: key version 0 | type (COMMIT = 1); value version 0 | coordinator epoch
    (record,) = list(RecordBatchView(control_batch(7, 1000, 5, 2, True, 3)).records())
    assert record.key == b"\x00\x00\x00\x01" and record.value == b"\x00\x00\x00\x00\x00\x03"
    b = control_batch(7, 1000, 5, 2, False)
    assert struct.unpack_from(">h", b, 21)[0] == 0x30  # attributes: transactional | control, no compression
