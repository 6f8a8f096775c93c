"""RecordBatch v2 <-> Iggy batch: round trips both ways, the mapping's golden bytes, errors."""

from __future__ import annotations

import math
import struct

import pytest
from aiokafka.record import default_records as aiokafka_records
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record import default_records as kp_records

from headwater.codec.batch import (
    MAX_TIMESTAMP_DELTA_US,
    Message,
    build_batch,
    iter_frames,
    read_header,
    slice_batch,
    stamp,
    verify,
)
from headwater.codec.headers import Kind, UserHeader, decode_user_headers, encode_user_headers, validate_user_headers
from headwater.codec.kafka.compression import CompressionType
from headwater.codec.kafka.convert import (
    KafkaBatchInfo,
    iggy_batches_to_kafka,
    iggy_to_kafka,
    kafka_fields_of,
    kafka_header_value,
    kafka_records_to_iggy,
    kafka_to_iggy,
    kafka_user_headers,
)
from headwater.codec.kafka.errors import (
    CorruptRecord,
    InvalidRecord,
    InvalidTimestamp,
    KafkaCodecError,
    MessageTooLarge,
    UnsupportedCompressionType,
)
from headwater.codec.kafka.record_batch import (
    INT64_MAX,
    INT64_MIN,
    LOG_APPEND_TIME,
    Record,
    RecordBatchView,
    build_record_batch,
    split_batches,
    wrap_int64,
)

SETTINGS = settings(
    deadline=None,
    max_examples=120,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
pytestmark = pytest.mark.usefixtures("implementation")  # every test, compiled and pure (conftest.py)
NOW_MS = 1_750_000_000_000


# --------------------------------------------------------------------------- helpers


def kafka_batch(records, compression=CompressionType.NONE, **kw) -> bytes:
    """records: (key, value, headers, timestamp_ms) tuples -> a producer's batch."""
    base = records[0][3]
    return build_record_batch(
        [Record(i, wrap_int64(ts - base), k, v, h) for i, (k, v, h, ts) in enumerate(records)],
        base_timestamp=base,
        compression=compression,
        **kw,
    )


def read_kafka(data: bytes) -> list[tuple]:
    view = RecordBatchView(data)
    view.verify_crc()
    return [
        (view.offset_of(r), view.timestamp_of(r), r.key, r.value, [(bytes(k), v) for k, v in r.headers])
        for r in view
    ]


def store(iggy: bytes, base_offset: int = 500, base_timestamp_us: int = 1_760_000_000_123_456) -> bytes:
    """What the partition does at append: verify, then stamp."""
    verify(iggy)
    stamped = bytearray(iggy)
    stamp(stamped, 3, base_offset, base_timestamp_us)
    verify(stamped)
    return bytes(stamped)


# --------------------------------------------------------------------------- strategies

short_or_long = st.one_of(
    st.binary(max_size=12),
    st.text(max_size=8).map(str.encode),
    st.binary(min_size=250, max_size=700),
)
header_keys = st.one_of(
    st.text(max_size=10).map(str.encode),
    st.sampled_from([b"", b"trace", b"Trace", b"kafka.key", b"KAFKA.flags", b"kafka.h.0",
                     b"iggy.kinds", b"iggy.headers", b"\xff\xfe"]),
    st.binary(min_size=250, max_size=300),
)
header_values = st.one_of(
    st.none(),
    short_or_long,
    st.sampled_from([b"", b"42", b"-7", b"true", b"1.5", b"nan", b"0:uint32", b"0:raw",
                     b"0:int8,1:bool", b"1:raw", b"0:200"]),
)
kafka_headers = st.lists(st.tuples(header_keys, header_values), max_size=6)
timestamps = st.one_of(
    st.integers(1_600_000_000_000, 1_800_000_000_000),
    st.integers(NOW_MS - 10_000, NOW_MS + 10_000),
    st.just(-1),
    st.integers(INT64_MIN, INT64_MAX),
)
kafka_records = st.lists(
    st.tuples(st.none() | short_or_long, st.none() | short_or_long, kafka_headers, timestamps),
    min_size=1,
    max_size=8,
)


# --------------------------------------------------------------------------- Kafka -> Iggy -> Kafka


@SETTINGS
@given(records=kafka_records, codec=st.sampled_from(list(CompressionType)),
       fetch_codec=st.sampled_from([CompressionType.NONE, CompressionType.LZ4]))
def test_kafka_iggy_kafka_is_exact(records, codec, fetch_codec):
    iggy, info = kafka_to_iggy(kafka_batch(records, codec), NOW_MS)
    assert info.record_count == len(records)
    assert info.compression == codec
    assert read_header(iggy).message_count == len(records)
    fetched = iggy_to_kafka(store(iggy, base_offset=500), compression=fetch_codec)
    got = read_kafka(fetched)
    expected = [(500 + i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(records)]
    assert got == expected


@SETTINGS
@given(records=kafka_records)
def test_frames_carry_value_and_time(records):
    iggy, _ = kafka_to_iggy(kafka_batch(records), NOW_MS)
    origin = read_header(iggy).origin_timestamp
    for frame, (key, value, headers, ts) in zip(iter_frames(iggy), records):
        validate_user_headers(frame.user_headers)  # structurally what Iggy admits
        assert bytes(frame.payload) == (value or b"")
        assert frame.id == 0
        fields = kafka_fields_of(frame.payload, frame.user_headers)
        if fields[3] is None:  # no override: the frame time is the Kafka time
            assert origin + frame.timestamp_delta == ts * 1000
        else:
            assert fields[3] == ts
        if key is None and value is not None and not headers and fields[3] is None:
            assert len(frame.user_headers) == 0  # nothing extra for the plain case


def test_kafka_python_batch_round_trip():
    builder = kp_records.DefaultRecordBatchBuilder(
        magic=2, compression_type=1, is_transactional=0, producer_id=11, producer_epoch=0,
        base_sequence=0, batch_size=1 << 20,
    )
    builder.append(0, 1_700_000_000_000, b"user-1", b"hello" * 50, [("trace", b"abc")])
    builder.append(1, 1_700_000_000_001, None, None, [("x", None)])
    builder.append(2, 1_700_000_000_002, b"", b"", [])
    data = bytes(builder.build())
    iggy, info = kafka_to_iggy(data, NOW_MS)
    assert info == KafkaBatchInfo(3, 11, 0, 0, False, 1, 1_700_000_000_002)
    assert info.last_sequence == 2
    fetched = iggy_to_kafka(store(iggy, base_offset=41))
    ours = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in kp_records.DefaultRecordBatch(fetched)]
    theirs = [(41 + r.offset, r.timestamp, r.key, r.value, r.headers) for r in kp_records.DefaultRecordBatch(data)]
    assert ours == theirs


@pytest.mark.parametrize("codec", list(CompressionType))
def test_aiokafka_batch_round_trip_every_codec(codec):
    builder = aiokafka_records.DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 20)
    for i in range(30):
        builder.append(i, 1_700_000_000_000 + 7 * i, b"k%d" % (i % 4), b"value" * 30, [("i", b"%d" % i)])
    data = bytes(builder.build())
    iggy, _ = kafka_to_iggy(data, NOW_MS)
    fetched = iggy_to_kafka(store(iggy, base_offset=0), compression=codec)
    ours = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in aiokafka_records.DefaultRecordBatch(fetched)]
    theirs = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in aiokafka_records.DefaultRecordBatch(data)]
    assert ours == theirs


def test_timestamps_across_a_long_span():
    # A replayed topic: one batch spans days. Most records keep the frame time,
    # outliers get kafka.timestamp; Kafka sees all of them exactly.
    day = 86_400_000
    times = [NOW_MS - 3 * day, NOW_MS, NOW_MS + 1, NOW_MS + 2, NOW_MS + 3 * day, -1, 0, INT64_MAX]
    records = [(None, b"v%d" % i, [], ts) for i, ts in enumerate(times)]
    iggy, info = kafka_to_iggy(kafka_batch(records), NOW_MS)
    assert info.max_timestamp_ms == INT64_MAX
    header = read_header(iggy)
    assert header.origin_timestamp == NOW_MS * 1000  # the densest window
    overrides = [kafka_fields_of(f.payload, f.user_headers)[3] for f in iter_frames(iggy)]
    assert overrides == [NOW_MS - 3 * day, None, None, None, NOW_MS + 3 * day, -1, 0, INT64_MAX]
    frame_times = [header.origin_timestamp + f.timestamp_delta for f in iter_frames(iggy)]
    assert frame_times[:5] == [NOW_MS * 1000, NOW_MS * 1000, (NOW_MS + 1) * 1000, (NOW_MS + 2) * 1000,
                               NOW_MS * 1000 + MAX_TIMESTAMP_DELTA_US]
    assert [r[1] for r in read_kafka(iggy_to_kafka(store(iggy)))] == times


def test_no_representable_timestamp_uses_now():
    iggy, _ = kafka_to_iggy(kafka_batch([(None, b"a", [], -1), (None, b"b", [], -5)]), NOW_MS)
    assert read_header(iggy).origin_timestamp == NOW_MS * 1000
    assert [r[1] for r in read_kafka(iggy_to_kafka(store(iggy)))] == [-1, -5]


def test_offset_deltas_are_renumbered():
    data = build_record_batch(
        [Record(0, 0, None, b"a"), Record(5, 0, None, b"b"), Record(2, 0, None, b"c")],
        base_timestamp=NOW_MS, last_offset_delta=2,
    )
    iggy, _ = kafka_to_iggy(data, NOW_MS)
    assert [f.offset_delta for f in iter_frames(iggy)] == [0, 1, 2]
    assert [r[0] for r in read_kafka(iggy_to_kafka(store(iggy, base_offset=10)))] == [10, 11, 12]


def test_several_batches_in_one_records_field():
    one = kafka_batch([(b"a", b"1", [], NOW_MS)])
    two = kafka_batch([(b"b", b"2", [], NOW_MS), (b"c", b"3", [], NOW_MS)])
    converted = kafka_records_to_iggy(one + two, NOW_MS)
    assert [info.record_count for _, info in converted] == [1, 2]
    fetched = iggy_batches_to_kafka([store(converted[0][0], 0), store(converted[1][0], 1)])
    assert [[r[2] for r in read_kafka(b)] for b in split_batches(b"".join(fetched))] == [[b"a"], [b"b", b"c"]]


# --------------------------------------------------------------------------- golden mapping bytes


def test_golden_user_headers():
    block = kafka_user_headers(b"user-1", True, [(b"trace", b"abc"), (b"bin", b"\xff"), (b"n", None)])
    assert block == encode_user_headers([
        ("kafka.key", Kind.STRING, b"user-1"),
        ("kafka.flags", Kind.UINT8, b"\x01"),
        ("trace", Kind.STRING, b"abc"),
        ("bin", Kind.RAW, b"\xff"),
        ("kafka.h.2", Kind.RAW, b"\x02n\x01"),
    ])
    assert decode_user_headers(block) == [
        UserHeader(b"kafka.key", Kind.STRING, b"user-1"),
        UserHeader(b"kafka.flags", Kind.UINT8, b"\x01"),
        UserHeader(b"trace", Kind.STRING, b"abc"),
        UserHeader(b"bin", Kind.RAW, b"\xff"),
        UserHeader(b"kafka.h.2", Kind.RAW, b"\x02n\x01"),  # varint 1, 'n', varint -1
    ]
    assert block[:20] == b"\x02\x09\x00\x00\x00kafka.key\x02\x06\x00\x00\x00u"


def test_golden_empty_key_timestamp_and_long_key():
    block = kafka_user_headers(b"", False, [], timestamp_ms=-1)
    assert decode_user_headers(block) == [
        UserHeader(b"kafka.flags", Kind.UINT8, b"\x02"),
        UserHeader(b"kafka.timestamp", Kind.INT64, b"\xff" * 8),
    ]
    key = bytes(range(256)) * 2
    assert decode_user_headers(kafka_user_headers(key, False)) == [
        UserHeader(b"kafka.key", Kind.RAW, key[:255]),
        UserHeader(b"kafka.key.1", Kind.RAW, key[255:510]),
        UserHeader(b"kafka.key.2", Kind.RAW, key[510:]),
    ]
    assert kafka_user_headers(None, False) == b""


def test_escaped_headers():
    headers = [(b"a", b"1"), (b"A", b"2"), (b"kafka.key", b"x"), (b"", b"e"), (b"v", b""), (b"l", b"y" * 300)]
    block = kafka_user_headers(None, False, headers)
    names = [h.key for h in decode_user_headers(block)]
    assert names == [b"a", b"kafka.h.1", b"kafka.h.2", b"kafka.h.3", b"kafka.h.4", b"kafka.h.5", b"kafka.h.5.1"]
    assert kafka_fields_of(b"", block)[2] == headers


# --------------------------------------------------------------------------- Iggy -> Kafka


def iggy_headers(pairs) -> bytes:
    """A TLV block written field by field: unlike encode_user_headers it lets a
    fixed-width kind carry the wrong width, as an Iggy producer may."""
    out = bytearray()
    for key, kind, value in pairs:
        key = key.encode() if isinstance(key, str) else key
        out += struct.pack("<BI", Kind.STRING, len(key)) + key + struct.pack("<BI", kind, len(value)) + value
    return bytes(out)


def test_iggy_message_seen_from_kafka():
    headers = iggy_headers([
        ("trace", Kind.STRING, b"abc"),
        ("count", Kind.UINT32, struct.pack("<I", 7)),
        ("ok", Kind.BOOL, b"\x01"),
        ("ratio", Kind.FLOAT64, struct.pack("<d", 0.25)),
        ("small", Kind.FLOAT32, struct.pack("<f", 0.1)),
        ("neg", Kind.INT16, struct.pack("<h", -3)),
        ("blob", Kind.RAW, b"\xff\x01"),
        ("text", Kind.RAW, b"plain"),
        ("future", 77, b"??"),
    ])
    iggy = build_batch([
        Message(b"payload", id=99, origin_timestamp=1_700_000_000_123_999, user_headers=headers),
        Message(b"", origin_timestamp=1_700_000_000_124_000),
    ])
    fetched = iggy_to_kafka(store(iggy, base_offset=7))
    records = list(kp_records.DefaultRecordBatch(fetched))
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [
        (7, 1_700_000_000_123, None, b"payload"), (8, 1_700_000_000_124, None, b""),
    ]
    assert records[0].headers == [
        ("trace", b"abc"), ("count", b"7"), ("ok", b"true"), ("ratio", b"0.25"), ("small", b"0.1"),
        ("neg", b"-3"), ("blob", b"\xff\x01"), ("text", b"plain"), ("future", b"??"),
        ("iggy.kinds", b"1:uint32,2:bool,3:float64,4:float32,5:int16,7:raw,8:77"),
    ]
    assert records[1].headers == []


def test_iggy_producer_can_set_kafka_key_and_flags():
    headers = iggy_headers([
        ("kafka.key", Kind.UINT64, struct.pack("<Q", 12345)),
        ("kafka.flags", Kind.STRING, b"junk"),  # not what we write: passes as a header
        ("kafka.other", Kind.STRING, b"x"),
    ])
    iggy = build_batch([Message(b"v", origin_timestamp=1_000_000, user_headers=headers)])
    [record] = list(kp_records.DefaultRecordBatch(iggy_to_kafka(store(iggy))))
    assert record.key == b"12345"
    assert record.headers == [("kafka.flags", b"junk"), ("kafka.other", b"x")]


def test_kinds_list_skips_headers_a_produce_would_escape():
    block = iggy_headers([("kafka.other", Kind.UINT32, struct.pack("<I", 5)), ("n", Kind.UINT8, b"\x01")])
    _, _, headers, _ = kafka_fields_of(b"", block)
    assert headers == [(b"kafka.other", b"5"), (b"n", b"1"), (b"iggy.kinds", b"1:uint8")]
    again = kafka_user_headers(None, False, headers)
    assert [(h.key, h.kind) for h in decode_user_headers(again)] == [(b"kafka.h.0", Kind.RAW), (b"n", Kind.UINT8)]
    assert kafka_fields_of(b"", again)[2] == headers  # the Kafka view is stable


def test_null_flag_with_a_payload_is_not_honoured():
    headers = iggy_headers([("kafka.flags", Kind.UINT8, b"\x01")])
    key, value, extra, _ = kafka_fields_of(b"data", headers)
    assert value == b"data"
    assert extra == [(b"kafka.flags", b"1")]  # no kinds entry: a produce would escape it


def test_undecodable_block_reaches_kafka_raw():
    garbage = b"\x00\x01\x02"
    iggy = build_batch([Message(b"v", origin_timestamp=5_000, user_headers=garbage)])
    [record] = list(kp_records.DefaultRecordBatch(iggy_to_kafka(iggy)))
    assert record.headers == [("iggy.headers", garbage)]


def test_log_append_time_uses_the_server_stamp():
    iggy = build_batch([Message(b"a", origin_timestamp=1_000_000), Message(b"b", origin_timestamp=2_000_000)])
    fetched = iggy_to_kafka(store(iggy, base_timestamp_us=1_760_000_000_999_999), timestamp_type=LOG_APPEND_TIME)
    view = RecordBatchView(fetched)
    assert view.timestamp_type == 1 and view.max_timestamp == 1_760_000_000_999
    for reader in (kp_records.DefaultRecordBatch, aiokafka_records.DefaultRecordBatch):
        assert [r.timestamp for r in reader(fetched)] == [1_760_000_000_999] * 2
    # CreateTime (the default) shows producer time
    assert [r.timestamp for r in kp_records.DefaultRecordBatch(iggy_to_kafka(store(iggy)))] == [1000, 2000]


def test_fetch_fields_and_slices():
    iggy = store(build_batch([Message(b"m%d" % i, origin_timestamp=10_000 * i) for i in range(6)]), base_offset=100)
    full = RecordBatchView(iggy_to_kafka(iggy, producer_id=9, producer_epoch=1, base_sequence=4,
                                         partition_leader_epoch=2))
    assert (full.base_offset, full.last_offset_delta, full.record_count) == (100, 5, 6)
    assert (full.producer_id, full.producer_epoch, full.base_sequence, full.partition_leader_epoch) == (9, 1, 4, 2)
    assert (full.base_timestamp, full.max_timestamp) == (0, 50)
    part = iggy_to_kafka(slice_batch(iggy, 2, 5))
    assert [(r[0], r[3]) for r in read_kafka(part)] == [(102, b"m2"), (103, b"m3"), (104, b"m4")]


iggy_keys = st.one_of(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=16),
    st.sampled_from(["iggy.kinds", "iggy.headers", "trace-id"]),
).filter(lambda k: not k.startswith("kafka."))


def _float_bits(width):
    fmt = "<f" if width == 32 else "<d"
    return st.floats(width=width).map(lambda f: struct.pack(fmt, f)) | st.binary(
        min_size=width // 8, max_size=width // 8
    )


iggy_values = st.one_of(
    st.tuples(st.just(int(Kind.STRING)), st.text(min_size=1, max_size=30).map(str.encode).filter(lambda b: len(b) <= 255)),
    st.tuples(st.just(int(Kind.STRING)), st.sampled_from([b"0:uint32", b"0:raw", b"\xff\xfe"])),
    st.tuples(st.just(int(Kind.RAW)), st.binary(min_size=1, max_size=40)),
    st.tuples(st.just(int(Kind.BOOL)), st.sampled_from([b"\x00", b"\x01", b"\x07"])),
    *[
        st.tuples(st.just(int(kind)), st.binary(min_size=size, max_size=size))
        for kind, size in [(Kind.INT8, 1), (Kind.INT16, 2), (Kind.INT32, 4), (Kind.INT64, 8),
                           (Kind.INT128, 16), (Kind.UINT8, 1), (Kind.UINT16, 2), (Kind.UINT32, 4),
                           (Kind.UINT64, 8), (Kind.UINT128, 16)]
    ],
    st.tuples(st.just(int(Kind.FLOAT32)), _float_bits(32)),
    st.tuples(st.just(int(Kind.FLOAT64)), _float_bits(64)),
    st.tuples(st.sampled_from([int(Kind.INT32), int(Kind.FLOAT64)]), st.binary(min_size=1, max_size=3)),
    st.tuples(st.integers(16, 255), st.binary(min_size=1, max_size=10)),
)
iggy_header_lists = st.lists(
    st.tuples(iggy_keys, iggy_values), max_size=6, unique_by=lambda kv: kv[0].lower()
).map(lambda pairs: [(k, kind, v) for k, (kind, v) in pairs])
iggy_messages = st.lists(
    st.tuples(st.binary(max_size=60), iggy_header_lists, st.integers(0, MAX_TIMESTAMP_DELTA_US // 1000)),
    min_size=1,
    max_size=6,
)


@SETTINGS
@given(messages=iggy_messages, origin_ms=st.integers(0, 2**50), codec=st.sampled_from(list(CompressionType)))
def test_iggy_kafka_iggy_keeps_payload_headers_and_time(messages, origin_ms, codec):
    original = build_batch([
        Message(payload, origin_timestamp=(origin_ms + offset_ms) * 1000, user_headers=iggy_headers(headers) if headers else b"")
        for payload, headers, offset_ms in messages
    ])
    fetched = iggy_to_kafka(store(original), compression=codec)
    again, _ = kafka_to_iggy(fetched, NOW_MS)
    verify(again)
    before = list(iter_frames(original))
    after = list(iter_frames(again))
    assert read_header(again).origin_timestamp == read_header(original).origin_timestamp
    assert len(before) == len(after)
    for a, b in zip(before, after):
        assert bytes(a.payload) == bytes(b.payload)
        assert a.timestamp_delta == b.timestamp_delta
        assert decode_user_headers(a.user_headers) == decode_user_headers(b.user_headers)


@SETTINGS
@given(kind=st.integers(1, 255), data=st.binary(min_size=1, max_size=20))
def test_kafka_header_value_is_reversible(kind, data):
    text, token = kafka_header_value(kind, data)
    block = iggy_headers([("h", kind, data)])
    _, _, headers, _ = kafka_fields_of(b"", block)
    back = kafka_user_headers(None, False, headers)
    assert decode_user_headers(back) == [UserHeader(b"h", kind, data)]
    if token is None:
        assert headers == [(b"h", text)]


def test_float_texts():
    assert kafka_header_value(Kind.FLOAT64, struct.pack("<d", math.inf)) == (b"inf", b"float64")
    assert kafka_header_value(Kind.FLOAT64, struct.pack("<d", -0.0)) == (b"-0.0", b"float64")
    assert kafka_header_value(Kind.FLOAT32, struct.pack("<f", 3.4028234663852886e38))[1] == b"float32"
    assert kafka_header_value(Kind.FLOAT32, struct.pack("<f", math.nan)) == (b"nan", b"float32")
    odd_nan = b"\x01\x00\xc0\x7f"
    assert kafka_header_value(Kind.FLOAT32, odd_nan) == (odd_nan, b"14")


def test_kinds_descriptor_edge_cases_round_trip():
    cases = [
        [(b"n", b"42"), (b"iggy.kinds", b"0:uint32")],  # consumed: n is a Uint32
        [(b"n", b"42"), (b"iggy.kinds", b"0:uint32"), (b"iggy.kinds", b"")],  # protected
        [(b"n", b"042"), (b"iggy.kinds", b"0:uint32")],  # not canonical: plain
        [(b"n", b"42"), (b"iggy.kinds", b"0:string")],  # default kind is never listed
        [(b"iggy.kinds", b"")],
        [(b"iggy.kinds", b"x"), (b"iggy.kinds", b"")],
        [(b"n", b"300"), (b"iggy.kinds", b"0:uint8")],  # out of range
    ]
    for headers in cases:
        block = kafka_user_headers(None, False, headers)
        assert kafka_fields_of(b"", block)[2] == headers, headers
    typed = decode_user_headers(kafka_user_headers(None, False, cases[0]))
    assert typed == [UserHeader(b"n", Kind.UINT32, struct.pack("<I", 42))]


@SETTINGS
@given(block=st.binary(max_size=120) | iggy_header_lists.map(lambda h: iggy_headers(h) if h else b""),
       mutate=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=3))
def test_any_user_headers_block_converts(block, mutate):
    block = bytearray(block)
    for position, byte in mutate:
        if position < len(block):
            block[position] = byte
    iggy = build_batch([Message(b"p", origin_timestamp=1_000, user_headers=bytes(block))])
    read_kafka(iggy_to_kafka(iggy))


# --------------------------------------------------------------------------- errors


def test_errors_of_produce_validation():
    def batch(**kw):
        return build_record_batch([Record(0, 0, b"k", b"v"), Record(1, 0, None, b"w")],
                                  base_timestamp=NOW_MS, **kw)

    with pytest.raises(InvalidRecord):
        kafka_to_iggy(batch(is_control=True), NOW_MS)
    with pytest.raises(InvalidTimestamp) as info:
        kafka_to_iggy(batch(timestamp_type=LOG_APPEND_TIME, max_timestamp=NOW_MS), NOW_MS)
    assert info.value.error_code == 32
    with pytest.raises(InvalidRecord):
        kafka_to_iggy(batch(last_offset_delta=5), NOW_MS)
    with pytest.raises(InvalidRecord):
        kafka_to_iggy(batch(producer_id=3, producer_epoch=0, base_sequence=-1), NOW_MS)
    with pytest.raises(InvalidRecord):
        kafka_to_iggy(build_record_batch([], base_timestamp=-1), NOW_MS)
    with pytest.raises(InvalidRecord) as info:
        kafka_to_iggy(batch(), NOW_MS, require_key=True)
    assert info.value.record_errors == ((1, "compacted topic needs a key"),)
    with pytest.raises(CorruptRecord):
        kafka_to_iggy(batch() + b"x", NOW_MS)
    damaged = bytearray(batch())
    damaged[damaged.rindex(b"w")] = ord("x")
    with pytest.raises(CorruptRecord):
        kafka_to_iggy(damaged, NOW_MS)
    kafka_to_iggy(damaged, NOW_MS, verify_crc=False)


def test_unsupported_compression_id():
    good = bytearray(build_record_batch([Record(0, 0, None, b"v")], base_timestamp=NOW_MS))
    struct.pack_into(">h", good, 21, 6)
    import crc32c

    struct.pack_into(">I", good, 17, crc32c.crc32c(bytes(good[21:])))
    with pytest.raises(UnsupportedCompressionType):
        kafka_to_iggy(good, NOW_MS)


def test_timestamp_bounds_collect_every_record():
    data = kafka_batch([(None, b"a", [], NOW_MS - 5000), (None, b"b", [], NOW_MS), (None, b"c", [], -1),
                        (None, b"d", [], NOW_MS + 5000)])
    with pytest.raises(InvalidTimestamp) as info:
        kafka_to_iggy(data, NOW_MS, timestamp_before_max_ms=1000, timestamp_after_max_ms=1000)
    assert [i for i, _ in info.value.record_errors] == [0, 3]
    kafka_to_iggy(data, NOW_MS, timestamp_before_max_ms=5000, timestamp_after_max_ms=5000)


big_bytes = st.builds(lambda n, b: bytes([b]) * n + b"\xff", st.integers(60_000, 130_000), st.integers(0, 255))


@settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    records=st.lists(
        st.tuples(st.none() | big_bytes | short_or_long, st.none() | short_or_long,
                  st.lists(st.tuples(header_keys, st.none() | big_bytes | short_or_long), max_size=3), timestamps),
        min_size=1, max_size=3,
    )
)
def test_large_keys_and_headers_round_trip(records):
    """Keys and headers past Iggy's 100 000-byte user-headers cap ride in the payload
    prefix; Kafka -> Iggy -> Kafka stays exact and every frame's block fits the cap."""
    iggy, _ = kafka_to_iggy(kafka_batch(records), NOW_MS)
    for frame, (k, v, h, _) in zip(iter_frames(iggy), records):
        assert len(frame.user_headers) <= 100_000
        big = (len(k or b"") + sum(len(a) + len(b or b"") for a, b in h)) > 100_000
        prefixed = b"kafka.prefix" in bytes(frame.user_headers)
        if prefixed:
            assert frame.payload.tobytes().endswith(v or b"")
        assert prefixed or not big
    got = read_kafka(iggy_to_kafka(store(iggy, base_offset=7)))
    assert got == [(7 + i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(records)]


def test_a_99000_byte_key_with_a_null_value_round_trips():
    key = bytes(range(256)) * 386 + b"k" * 184  # 99 000 bytes, not UTF-8
    iggy, _ = kafka_to_iggy(kafka_batch([(key, None, [(b"h", b"x" * 5000)], NOW_MS)]), NOW_MS)
    frame = next(iter_frames(iggy))
    pairs = {p.key: p.value for p in decode_user_headers(frame.user_headers)}
    assert set(pairs) == {b"kafka.prefix", b"kafka.flags"}  # the key and header are in the payload
    assert struct.unpack("<I", pairs[b"kafka.prefix"])[0] == len(frame.payload) > 99_000
    got = read_kafka(iggy_to_kafka(store(iggy)))
    assert got[0][2:] == (key, None, [(b"h", b"x" * 5000)])


def test_decompressed_cap():
    data = kafka_batch([(None, b"z" * 50_000, [], NOW_MS)], CompressionType.GZIP)
    with pytest.raises(MessageTooLarge):
        kafka_to_iggy(data, NOW_MS, max_uncompressed_bytes=10_000)


@SETTINGS
@given(st.binary(max_size=300))
def test_garbage_produce_raises_only_our_errors(data):
    try:
        kafka_records_to_iggy(data, NOW_MS)
    except KafkaCodecError:
        pass


@SETTINGS
@given(records=kafka_records, data=st.data())
def test_mutated_produce_raises_only_our_errors(records, data):
    batch = bytearray(kafka_batch(records))
    for _ in range(data.draw(st.integers(1, 3))):
        batch[data.draw(st.integers(0, len(batch) - 1))] = data.draw(st.integers(0, 255))
    try:
        kafka_to_iggy(batch, NOW_MS, verify_crc=data.draw(st.booleans()))
    except KafkaCodecError:
        pass
