"""RecordBatch v2: varints, view, CRC, records, builder, splitting; kafka-python and aiokafka as oracles."""

from __future__ import annotations

import struct

import crc32c
import pytest
from aiokafka.record import default_records as aiokafka_records
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kafka.record import default_records as kp_records

from headwater.codec.kafka.compression import CompressionType
from headwater.codec.kafka.errors import (
    CorruptRecord,
    InvalidRecord,
    KafkaCodecError,
    UnsupportedCompressionType,
)
from headwater.codec.kafka.record_batch import (
    HEADER_SIZE,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    LOG_APPEND_TIME,
    Record,
    RecordBatchView,
    build_record_batch,
    encode_record,
    encode_varint,
    iter_record_fields,
    read_varint,
    read_varlong,
    record_size,
    split_batches,
    varint_size,
    wrap_int64,
)

SETTINGS = settings(deadline=None, max_examples=80, suppress_health_check=[HealthCheck.too_slow])
_HEADER = struct.Struct(">qiibIhiqqqhii")

# --------------------------------------------------------------------------- strategies

maybe_bytes = st.one_of(st.none(), st.binary(max_size=40))
headers_st = st.lists(
    st.tuples(st.text(max_size=10).map(str.encode) | st.binary(max_size=6), maybe_bytes), max_size=4
).map(tuple)


@st.composite
def records_st(draw, max_size=6):
    n = draw(st.integers(min_value=0, max_value=max_size))
    out = []
    for index in range(n):
        out.append(
            Record(
                offset_delta=draw(st.one_of(st.just(index), st.integers(INT32_MIN, INT32_MAX))),
                timestamp_delta=draw(st.one_of(st.integers(-5000, 5000), st.integers(INT64_MIN, INT64_MAX))),
                key=draw(maybe_bytes),
                value=draw(st.one_of(maybe_bytes, st.binary(min_size=200, max_size=2000))),
                headers=draw(headers_st),
            )
        )
    return out


# --------------------------------------------------------------------------- varints


@pytest.mark.parametrize(
    "value, encoded",
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-2, b"\x03"), (63, b"\x7e"), (-64, b"\x7f"),
     (64, b"\x80\x01"), (300, b"\xd8\x04"), (INT32_MAX, b"\xfe\xff\xff\xff\x0f"),
     (INT32_MIN, b"\xff\xff\xff\xff\x0f")],
)
def test_varint_golden(value, encoded):
    assert encode_varint(value) == encoded
    assert read_varint(encoded, 0) == (value, len(encoded))
    assert varint_size(value) == len(encoded)


@given(st.integers(INT32_MIN, INT32_MAX))
def test_varint_round_trip(value):
    data = encode_varint(value) + b"\xaa"
    assert read_varint(data, 0) == (value, len(data) - 1)


@given(st.integers(INT64_MIN, INT64_MAX))
def test_varlong_round_trip(value):
    data = encode_varint(value)
    assert len(data) == varint_size(value) <= 10
    assert read_varlong(data, 0) == (value, len(data))


def test_varint_errors():
    with pytest.raises(InvalidRecord):
        read_varint(b"\x80\x80", 0)  # runs past the end
    with pytest.raises(InvalidRecord):
        read_varint(b"\x80\x80\x80\x80\x80\x01", 0)  # six bytes
    with pytest.raises(InvalidRecord):
        read_varint(b"\xff\xff\xff\xff\x7f", 0)  # 35 bits
    with pytest.raises(InvalidRecord):
        read_varlong(b"\xff" * 10 + b"\x01", 0)
    assert read_varlong(encode_varint(INT64_MIN), 0)[0] == INT64_MIN


# --------------------------------------------------------------------------- golden


def test_empty_batch_from_the_produce_spec():
    # shared/spec/kafka-produce-v12.txt: the 61-byte empty RecordBatch v2.
    body = struct.pack(">hiqqqhii", 0, -1, -1, -1, -1, -1, -1, 0)
    expected = struct.pack(">qiib", 0, 49, -1, 2) + struct.pack(">I", crc32c.crc32c(body)) + body
    built = build_record_batch([], base_timestamp=-1, max_timestamp=-1)
    assert built == expected
    view = RecordBatchView(built)
    view.verify_crc()
    assert view.header() == (0, 49, -1, 2, crc32c.crc32c(body), 0, -1, -1, -1, -1, -1, -1, 0)
    assert list(view) == []


def test_one_record_golden_bytes():
    out = bytearray()
    encode_record(out, 0, 0, b"k", b"hello", [("h", b"v")])
    # length 16, attrs 0, ts 0, offset 0, key len 1 'k', value len 5 'hello', 1 header: 'h' -> 'v'
    assert bytes(out) == b"\x20\x00\x00\x00\x02k\x0ahello\x02\x02h\x02v"
    out = bytearray()
    encode_record(out, 1, -1, None, None, [(b"n", None)])
    assert bytes(out) == b"\x12\x00\x01\x02\x01\x01\x02\x02n\x01"


def test_parse_kafka_python_batch():
    builder = kp_records.DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=0, producer_id=7, producer_epoch=1,
        base_sequence=42, batch_size=1 << 20,
    )
    builder.append(0, 1_700_000_000_000, b"key", b"value", [("a", b"1"), ("b", None)])
    builder.append(1, 1_700_000_000_123, None, None, [])
    builder.append(2, 1_699_999_999_000, b"", b"", [("", b"")])
    data = bytes(builder.build())
    view = RecordBatchView(data)
    view.verify_crc()
    assert (view.producer_id, view.producer_epoch, view.base_sequence) == (7, 1, 42)
    assert (view.record_count, view.last_offset_delta, view.magic) == (3, 2, 2)
    assert (view.base_timestamp, view.max_timestamp) == (1_700_000_000_000, 1_700_000_000_123)
    ours = [(view.offset_of(r), view.timestamp_of(r), r.key, r.value, list(r.headers)) for r in view]
    theirs = [
        (r.offset, r.timestamp, r.key, r.value, [(k.encode(), v) for k, v in r.headers])
        for r in kp_records.DefaultRecordBatch(data)
    ]
    assert ours == theirs


@pytest.mark.parametrize("codec", list(CompressionType))
def test_parse_aiokafka_batches_every_codec(codec):
    builder = aiokafka_records.DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 20)
    for i in range(50):
        builder.append(i, 1_700_000_000_000 + i, b"k%d" % i, b"value " * 20, [("h", b"x" * i)])
    data = bytes(builder.build())
    view = RecordBatchView(data)
    view.verify_crc()
    assert view.compression == codec
    records = list(view)
    assert [r.key for r in records] == [b"k%d" % i for i in range(50)]
    assert [view.timestamp_of(r) for r in records] == [1_700_000_000_000 + i for i in range(50)]
    assert records[7].headers == ((b"h", b"x" * 7),)


@pytest.mark.parametrize("codec", list(CompressionType))
@pytest.mark.parametrize("xerial", [True, False])
def test_clients_read_what_we_build(codec, xerial):
    records = [
        Record(i, i * 3 - 5, None if i % 3 == 0 else b"key-%d" % i, None if i == 4 else b"v" * (i * 50),
               ((b"trace", b"t%d" % i), ("n\u00e9", None)))
        for i in range(10)
    ]
    data = build_record_batch(
        records, base_timestamp=1_700_000_000_000, base_offset=1000, compression=codec, xerial=xerial,
        producer_id=5, producer_epoch=2, base_sequence=9, is_transactional=True,
        partition_leader_epoch=3,
    )
    expected = [
        (1000 + i, 1_700_000_000_000 + i * 3 - 5, r.key, r.value,
         [("trace", b"t%d" % i), ("n\u00e9", None)])
        for i, r in enumerate(records)
    ]
    readers = [aiokafka_records.DefaultRecordBatch, aiokafka_records._DefaultRecordBatchPy]
    if codec in (CompressionType.NONE, CompressionType.GZIP):  # kafka-python has no other codec libs here
        readers.append(kp_records.DefaultRecordBatch)
    for reader in readers:
        batch = reader(data)
        assert batch.validate_crc()
        assert (batch.base_offset, batch.producer_id, batch.base_sequence) == (1000, 5, 9)
        assert batch.is_transactional and batch.compression_type == codec
        got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
        assert got == expected


def test_log_append_time_reads_max_timestamp():
    data = build_record_batch(
        [Record(0, 0, None, b"a"), Record(1, 10, None, b"b")], base_timestamp=100,
        max_timestamp=999, timestamp_type=LOG_APPEND_TIME,
    )
    view = RecordBatchView(data)
    assert view.timestamp_type == 1
    assert [view.timestamp_of(r) for r in view] == [999, 999]
    assert [r.timestamp for r in kp_records.DefaultRecordBatch(data)] == [999, 999]


# --------------------------------------------------------------------------- properties


@SETTINGS
@given(records=records_st(), codec=st.sampled_from(list(CompressionType)),
       base_timestamp=st.integers(INT64_MIN, INT64_MAX), base_offset=st.integers(0, 2**62),
       control=st.booleans(), transactional=st.booleans())
def test_build_then_parse(records, codec, base_timestamp, base_offset, control, transactional):
    data = build_record_batch(
        records, base_timestamp=base_timestamp, base_offset=base_offset, compression=codec,
        is_control=control, is_transactional=transactional,
    )
    view = RecordBatchView(data)
    view.verify_crc()
    assert view.size == len(data)
    assert (view.base_offset, view.base_timestamp, view.record_count) == (base_offset, base_timestamp, len(records))
    assert (view.compression, view.is_control, view.is_transactional) == (codec, control, transactional)
    assert view.last_offset_delta == (records[-1].offset_delta if records else -1)
    parsed = list(view)
    expected = [r._replace(headers=tuple((bytes(k), v) for k, v in r.headers)) for r in records]
    assert parsed == expected
    # the memoryview form decodes the same fields
    lean = list(view.records(copy=False))
    assert [(r.key, r.value) for r in lean] == [(r.key, r.value) for r in records]
    for r in records:
        assert view.timestamp_of(r) == wrap_int64(base_timestamp + r.timestamp_delta)


@SETTINGS
@given(records=records_st(max_size=4))
def test_record_size_matches_encoding(records):
    for r in records:
        out = bytearray()
        encode_record(out, r.offset_delta, r.timestamp_delta, r.key, r.value, r.headers)
        size = record_size(r.offset_delta, r.timestamp_delta, r.key, r.value, r.headers)
        assert len(out) == size + varint_size(size)


@SETTINGS
@given(records=records_st(max_size=3).filter(bool), data=st.data())
def test_flipping_a_covered_bit_breaks_the_crc(records, data):
    batch = bytearray(build_record_batch(records, base_timestamp=0))
    position = data.draw(st.integers(21, len(batch) - 1))
    batch[position] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(CorruptRecord) as info:
        RecordBatchView(batch).verify_crc()
    assert info.value.error_code == 2


@SETTINGS
@given(records=records_st(max_size=3), data=st.data())
def test_uncovered_fields_do_not_touch_the_crc(records, data):
    batch = bytearray(build_record_batch(records, base_timestamp=0))
    struct.pack_into(">q", batch, 0, data.draw(st.integers(INT64_MIN, INT64_MAX)))
    struct.pack_into(">i", batch, 12, data.draw(st.integers(INT32_MIN, INT32_MAX)))
    RecordBatchView(batch).verify_crc()


@SETTINGS
@given(records=records_st(max_size=3), cut=st.integers(1, 60))
def test_truncated_batches_are_corrupt(records, cut):
    batch = build_record_batch(records, base_timestamp=0)
    assume(cut <= len(batch))
    with pytest.raises(CorruptRecord):
        RecordBatchView(batch[:-cut])


def _recrc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def _consume(data) -> None:
    view = RecordBatchView(data)
    view.verify_crc()
    list(view)


@SETTINGS
@given(st.binary(max_size=300))
def test_garbage_raises_only_our_errors(data):
    try:
        _consume(data)
    except KafkaCodecError:
        pass


@SETTINGS
@given(body=st.binary(max_size=200), count=st.integers(INT32_MIN, INT32_MAX),
       attributes=st.integers(0, 0xFFFF))
def test_garbage_records_with_a_valid_crc_raise_only_our_errors(body, count, attributes):
    batch = bytearray(build_record_batch([], base_timestamp=0))
    batch += body
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">H", batch, 21, attributes)
    struct.pack_into(">i", batch, 57, count)
    try:
        _consume(_recrc(batch))
    except KafkaCodecError:
        pass


@SETTINGS
@given(records=records_st(max_size=4).filter(bool), data=st.data())
def test_mutated_records_with_a_valid_crc_raise_only_our_errors(records, data):
    batch = bytearray(build_record_batch(records, base_timestamp=0))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(HEADER_SIZE, len(batch) - 1))
        batch[position] = data.draw(st.integers(0, 255))
    try:
        _consume(_recrc(batch))
    except KafkaCodecError:
        pass


# --------------------------------------------------------------------------- specific errors


def test_bad_magic_is_corrupt():
    batch = bytearray(build_record_batch([Record(0, 0, None, b"x")], base_timestamp=0))
    for magic in (3, 0x7F, 0x80, 0xFF):  # int8: 0x80.. are negative
        batch[16] = magic
        with pytest.raises(CorruptRecord) as info:
            RecordBatchView(batch)
        assert info.value.field == "magic"
        with pytest.raises(CorruptRecord):
            split_batches(batch)


def test_legacy_magic_is_invalid_record():
    # ProduceRequest.validateRecords: "Produce requests with version N are only allowed to
    # contain record batches with magic version 2" (InvalidRecordException, 87)
    batch = bytearray(build_record_batch([Record(0, 0, None, b"x")], base_timestamp=0))
    for magic in (0, 1):
        batch[16] = magic
        assert [bytes(b) for b in split_batches(batch)] == [bytes(batch)]
        with pytest.raises(InvalidRecord) as info:
            RecordBatchView(batch)
        assert info.value.field == "magic" and info.value.error_code == 87
        short = bytearray(batch)
        struct.pack_into(">i", short, 8, 20)  # a legacy message may be shorter than a v2 header
        with pytest.raises(InvalidRecord):
            RecordBatchView(short)


def test_batch_length_below_minimum():
    batch = bytearray(build_record_batch([], base_timestamp=0))
    struct.pack_into(">i", batch, 8, 48)
    with pytest.raises(CorruptRecord):
        RecordBatchView(batch)


def test_count_mismatch_and_trailing_bytes_are_invalid():
    good = build_record_batch([Record(0, 0, None, b"x"), Record(1, 0, None, b"y")], base_timestamp=0)
    fewer = bytearray(good)
    struct.pack_into(">i", fewer, 57, 1)
    with pytest.raises(InvalidRecord) as info:
        _consume(_recrc(fewer))
    assert info.value.error_code == 87
    more = bytearray(good)
    struct.pack_into(">i", more, 57, 3)
    with pytest.raises(InvalidRecord):
        _consume(_recrc(more))


def test_record_length_mismatch_names_the_record():
    body = bytearray()
    encode_record(body, 0, 0, None, b"abc")
    body[0] += 2  # declares two bytes more than its fields take
    body += b"\x00\x00"
    section = memoryview(bytes(body))
    with pytest.raises(InvalidRecord) as info:
        list(iter_record_fields(section, 1))
    assert info.value.record_index == 0
    assert info.value.record_errors[0][0] == 0


def test_negative_header_count_and_key_length():
    body = bytearray(b"\x00\x00\x00\x01\x01")  # attrs, ts, offset, null key, null value
    body += b"\x01"  # header count -1
    record = encode_varint(len(body)) + bytes(body)
    with pytest.raises(InvalidRecord):
        list(iter_record_fields(memoryview(record), 1))
    body = bytearray(b"\x00\x00\x00\x01\x01\x02\x03\x01")  # 1 header, key length -2
    record = encode_varint(len(body)) + bytes(body)
    with pytest.raises(InvalidRecord):
        list(iter_record_fields(memoryview(record), 1))


def test_unknown_compression_id():
    batch = bytearray(build_record_batch([Record(0, 0, None, b"x")], base_timestamp=0))
    struct.pack_into(">h", batch, 21, 5)
    view = RecordBatchView(_recrc(batch))
    view.verify_crc()
    with pytest.raises(UnsupportedCompressionType):
        list(view)


def test_undecompressable_section_is_corrupt():
    batch = bytearray(build_record_batch([Record(0, 0, None, b"x" * 100)], base_timestamp=0))
    struct.pack_into(">h", batch, 21, CompressionType.ZSTD)
    with pytest.raises(CorruptRecord):
        list(RecordBatchView(_recrc(batch)))


def test_builder_rejects_out_of_range_deltas():
    with pytest.raises(ValueError):
        build_record_batch([Record(INT32_MAX + 1, 0, None, b"")], base_timestamp=0)
    with pytest.raises(ValueError):
        build_record_batch([Record(0, INT64_MAX + 1, None, b"")], base_timestamp=0)


# --------------------------------------------------------------------------- splitting


@SETTINGS
@given(st.lists(records_st(max_size=3), min_size=0, max_size=4))
def test_split_concatenation(batches):
    built = [build_record_batch(r, base_timestamp=0, base_offset=i) for i, r in enumerate(batches)]
    parts = split_batches(b"".join(built))
    assert [bytes(p) for p in parts] == built


def test_split_partial_tail():
    # Kafka's ByteBufferLogInputStream yields no batch for a truncated one, and Produce answers
    # INVALID_RECORD when that leaves none ("must have at least one record batch")
    one = build_record_batch([Record(0, 0, b"k", b"v")], base_timestamp=0)
    two = build_record_batch([Record(0, 0, b"k", b"w")], base_timestamp=0)
    for cut in (1, 5, 12, len(two) - 1):
        data = one + two[:cut]
        assert [bytes(p) for p in split_batches(data, allow_partial=True)] == [one]
        with pytest.raises(InvalidRecord):
            split_batches(data)
        with pytest.raises(InvalidRecord):
            split_batches(two[:cut])


@pytest.mark.parametrize("length", [-1, 0, 13])
def test_split_batch_length_below_the_legacy_minimum_is_corrupt(length):
    batch = bytearray(build_record_batch([Record(0, 0, b"k", b"v")], base_timestamp=0))
    struct.pack_into(">i", batch, 8, length)
    with pytest.raises(CorruptRecord):
        split_batches(batch)


def test_view_cuts_a_longer_buffer():
    one = build_record_batch([Record(0, 0, b"k", b"v")], base_timestamp=0)
    view = RecordBatchView(one + b"trailing")
    assert bytes(view.buffer) == one
