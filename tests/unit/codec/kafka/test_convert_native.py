"""Differential tests: the compiled loops (``_convert_c``) and their pure-Python twin
(``_convert_py``) against the reference code of ``convert.py``.

Every input, valid or broken (bit flips, truncations, lying varints, lengths and
counts), goes through ``kafka_to_iggy`` / ``iggy_to_kafka`` with each implementation;
all must give the same bytes, or the same error (class, Kafka error code, message,
offset, field, record errors). Other tests check that both loops really take the
inputs they are meant to (they may decline any input and leave it to the
reference, which would make a differential test vacuous).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from headwater.codec.batch import Message, build_batch, stamp, verify
from headwater.codec.headers import Kind
from headwater.codec.kafka import _convert_py, convert
from headwater.codec.kafka.compression import CompressionType
from headwater.codec.kafka.record_batch import (
    CRC_OFFSET,
    HEADER_SIZE,
    INT64_MAX,
    INT64_MIN,
    RECORD_COUNT_OFFSET,
    Record,
    build_record_batch,
    crc32c,
    encode_record,
    wrap_int64,
)

COMPILED = convert._compiled  # as chosen at import (the conftest fixture may swap it later)
needs_compiled = pytest.mark.skipif(COMPILED is None, reason="the compiled _convert_c is not built")
BOTH_LOOPS = [pytest.param(COMPILED, id="compiled", marks=needs_compiled), pytest.param(_convert_py, id="python")]

SETTINGS = settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
NOW_MS = 1_750_000_000_000


def outcome(fn, *args, loops, **kw):
    """``("ok", result)`` or ``("error", class, code, message, offset, field, record index, record errors)``."""
    saved = convert._loops
    convert._loops = loops
    try:
        return "ok", fn(*args, **kw)
    except Exception as e:  # noqa: BLE001 - any error must be the same on every side
        return ("error", type(e), getattr(e, "error_code", None), str(e), getattr(e, "offset", None),
                getattr(e, "field", None), getattr(e, "record_index", None), getattr(e, "record_errors", None))
    finally:
        convert._loops = saved


def same_on_both(fn, *args, **kw):
    """The reference's outcome, after checking the compiled loops and the pure-Python loops give it too."""
    reference = outcome(fn, *args, loops=None, **kw)
    if COMPILED is not None:
        assert outcome(fn, *args, loops=COMPILED, **kw) == reference
    assert outcome(fn, *args, loops=_convert_py, **kw) == reference
    return reference


# --------------------------------------------------------------------------- Kafka -> Iggy

blobs = st.one_of(st.binary(max_size=8), st.text(max_size=6).map(str.encode), st.binary(min_size=60, max_size=300))
keys = st.one_of(st.none(), st.just(b""), blobs, st.sampled_from([b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf",
                                                                  b"\xe0\x80\xaf", "é€𐍈".encode()]))
header_keys = st.one_of(
    st.binary(max_size=6),
    st.sampled_from([b"trace", b"Trace", b"TRACE", b"id", b"kafka.x", b"KAFKA.key", b"kafka", b"iggy.kinds",
                     b"k\xc3\xa9", b"\xe2\x84\xaa", b"k"]),  # (U+212A KELVIN SIGN lowercases to "k")
    st.text(alphabet="abcXYZ-._", min_size=1, max_size=8).map(str.encode),
    st.binary(min_size=255, max_size=256),
)
header_values = st.one_of(
    st.none(), st.just(b""), st.binary(max_size=6), st.text(min_size=1, max_size=6).map(str.encode),
    st.sampled_from([b"0:uint8", b"0:raw", b"1", b"true"]), st.binary(min_size=255, max_size=256),
)
headers = st.lists(st.tuples(header_keys, header_values), max_size=4)
timestamps = st.one_of(
    st.integers(NOW_MS - 5_000, NOW_MS + 5_000),
    st.just(-1),
    st.integers(-5, 5),
    st.integers(INT64_MIN, INT64_MAX),
    st.integers(18446744073709551 - 3, 18446744073709551 + 3),
)
records = st.lists(
    st.tuples(keys, st.none() | blobs, st.just([]) | headers, timestamps), min_size=1, max_size=10
)
records_now = st.lists(  # within one Iggy batch window: what the compiled loop converts itself
    st.tuples(keys, st.none() | blobs, st.just([]) | headers, st.integers(NOW_MS - 5_000, NOW_MS + 5_000)),
    min_size=1, max_size=10,
)


def kafka_batch(recs, compression=CompressionType.NONE, **kw) -> bytes:
    base = recs[0][3]
    return build_record_batch(
        [Record(i, wrap_int64(ts - base), k, v, h) for i, (k, v, h, ts) in enumerate(recs)],
        base_timestamp=base, compression=compression, **kw,
    )


def fix_crc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, CRC_OFFSET, crc32c(memoryview(data)[HEADER_SIZE - 40:]))
    return bytes(data)


options = st.fixed_dictionaries({}, optional={
    "require_key": st.booleans(),
    "timestamp_before_max_ms": st.integers(0, 10_000) | st.just(2**70),
    "timestamp_after_max_ms": st.integers(0, 10_000),
})


@SETTINGS
@given(recs=records | records_now, codec=st.sampled_from([CompressionType.NONE, CompressionType.LZ4]), kw=options)
def test_valid_produce_batches_convert_identically(recs, codec, kw):
    same_on_both(convert.kafka_to_iggy, kafka_batch(recs, codec), NOW_MS, **kw)


@settings(deadline=None, max_examples=20, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.tuples(st.integers(0, 130_000), st.integers(0, 60_000), st.booleans()), min_size=1, max_size=3),
    small=st.booleans(),
)
def test_records_too_big_for_user_headers_convert_identically(sizes, small):
    """A key or headers past the 100 000-byte user-headers cap: both loops decline and the
    reference puts them in the payload prefix; all three agree (and small records beside them)."""
    recs = [(b"k" * k, None if null else b"v", [(b"h", b"x" * h)] if h else [], NOW_MS) for k, h, null in sizes]
    if small:
        recs.append((b"key", b"value", [], NOW_MS))
    result = same_on_both(convert.kafka_to_iggy, kafka_batch(recs), NOW_MS)
    assert result[0] == "ok"


mutations = st.lists(
    st.tuples(
        st.sampled_from(["flip", "byte", "varint", "truncate", "insert", "delete", "count"]),
        st.integers(0, 2**16),
        st.integers(0, 255),
    ),
    min_size=1,
    max_size=4,
)


def mutate(data: bytes, edits, lo: int) -> bytearray:
    """Apply ``edits`` to ``data[lo:]`` (``lo``: where the part under test starts)."""
    b = bytearray(data)
    for op, where, value in edits:
        span = len(b) - lo
        if span <= 0:
            break
        at = lo + where % span
        if op == "flip":
            b[at] ^= 1 << (value % 8)
        elif op == "byte":
            b[at] = value
        elif op == "varint":  # a varint that lies: too long, or huge
            b[at:at + 1] = bytes([0xFF] * (1 + value % 11)) + bytes([value & 0x7F])
        elif op == "truncate":
            del b[at:]
        elif op == "insert":
            b[at:at] = bytes([value])
        elif op == "delete":
            del b[at]
        elif op == "count":  # a record count (and lastOffsetDelta) that lies
            if len(b) >= HEADER_SIZE:
                count = struct.unpack_from(">i", b, RECORD_COUNT_OFFSET)[0] + (value % 7) - 3
                # an earlier mutation may have left the count near an int32 bound: wrap, as the wire would
                struct.pack_into(">I", b, RECORD_COUNT_OFFSET, count & 0xFFFFFFFF)
                struct.pack_into(">I", b, 23, (count - 1) & 0xFFFFFFFF)
    if len(b) >= 12:
        struct.pack_into(">i", b, 8, len(b) - 12)  # keep the frame: the records are under test
    return b


@SETTINGS
@given(recs=records | records_now, edits=mutations, kw=options)
def test_mutated_produce_batches_fail_identically(recs, edits, kw):
    broken = mutate(kafka_batch(recs), edits, HEADER_SIZE)
    assume(len(broken) >= HEADER_SIZE)
    same_on_both(convert.kafka_to_iggy, fix_crc(broken), NOW_MS, **kw)
    same_on_both(convert.kafka_to_iggy, bytes(broken), NOW_MS, verify_crc=False, **kw)


@SETTINGS
@given(recs=records, edits=mutations)
def test_mutated_compressed_records_fail_identically(recs, edits):
    """Lies inside a compressed records section (the loop sees the decompressed bytes)."""
    plain = kafka_batch(recs)
    section = mutate(plain, edits, HEADER_SIZE)[HEADER_SIZE:]
    head = _header_of(plain)
    batch = convert.finish_record_batch(section, head["count"], last_offset_delta=head["count"] - 1,
                                        base_timestamp=head["base"], max_timestamp=head["base"],
                                        compression=CompressionType.GZIP)
    same_on_both(convert.kafka_to_iggy, batch, NOW_MS)


def _header_of(batch: bytes) -> dict:
    """recordCount and baseTimestamp of a batch."""
    return {"count": struct.unpack_from(">i", batch, RECORD_COUNT_OFFSET)[0],
            "base": struct.unpack_from(">q", batch, 27)[0]}


@SETTINGS
@given(data=st.binary(max_size=200), count=st.integers(-2, 40), base=st.integers(INT64_MIN, INT64_MAX))
def test_garbage_records_sections(data, count, base):
    assume(count >= 1)
    batch = convert.finish_record_batch(data, count, last_offset_delta=count - 1, base_timestamp=base,
                                        max_timestamp=base)
    same_on_both(convert.kafka_to_iggy, batch, NOW_MS)


@pytest.mark.parametrize("loops", BOTH_LOOPS)
def test_loops_take_plain_records(loops):
    """No key, keys up to 255 bytes, null values, out-of-window timestamps: converted by the loop."""
    cases = [
        [(None, b"v" * 100, [], NOW_MS + i) for i in range(50)],
        [(b"k", b"v", [], NOW_MS), (b"", None, [], -1), (b"\xff" * 255, b"", [], NOW_MS + 1)],
        [(None, b"x", [], 2**62), (None, b"y", [], NOW_MS)],
    ]
    for recs in cases:
        batch = kafka_batch(recs)
        section = memoryview(batch)[HEADER_SIZE:]
        fast = loops.kafka_records_to_iggy(section, len(recs), recs[0][3], NOW_MS, False, False, 0, False, 0,
                                           convert.kafka_user_headers)
        assert fast is not None
        assert (fast[0], fast[1]) == (same_on_both(convert.kafka_to_iggy, batch, NOW_MS)[1][0],
                                      max(ts for *_, ts in recs))


@pytest.mark.parametrize("loops", BOTH_LOOPS)
def test_loops_decline_what_they_leave_to_the_reference(loops):
    wide = kafka_batch([(None, b"a", [], 0), (None, b"b", [], 2**40)])  # times past one window
    section = memoryview(wide)[HEADER_SIZE:]
    assert loops.kafka_records_to_iggy(section, 2, 0, NOW_MS, False, False, 0, False, 0, None) is None
    broken = bytearray(section)
    broken[0] = 0xFF  # the first record's length runs on
    assert loops.kafka_records_to_iggy(memoryview(broken), 2, 0, NOW_MS, False, False, 0, False, 0, None) is None


# --------------------------------------------------------------------------- Iggy -> Kafka

def tlv(pairs) -> bytes:
    """(key kind, key, value kind, value) fields as a raw TLV block (nothing checked)."""
    out = bytearray()
    for key_kind, key, kind, value in pairs:
        out += struct.pack("<BI", key_kind, len(key)) + key + struct.pack("<BI", kind, len(value)) + value
    return bytes(out)


S, R, U8, I64 = int(Kind.STRING), int(Kind.RAW), int(Kind.UINT8), int(Kind.INT64)
reserved_fields = st.sampled_from([
    (S, b"kafka.key", S, b"abc"), (S, b"kafka.key", R, b"\xff\x00"), (S, b"kafka.key", U8, b"\x07"),
    (S, b"kafka.key.1", R, b"more"), (S, b"kafka.flags", U8, b"\x01"), (S, b"kafka.flags", U8, b"\x02"),
    (S, b"kafka.flags", U8, b"\x03"), (S, b"kafka.flags", U8, b"\x04"), (S, b"kafka.flags", I64, b"\x01" * 8),
    (S, b"kafka.timestamp", I64, struct.pack("<q", -5)), (S, b"kafka.timestamp", I64, b"\x01" * 7),
    (R, b"kafka.key", S, b"raw-named"), (S, b"kafka.h.0", R, b"\x02k\x01"), (S, b"trace", S, b"t-1"),
    (S, b"iggy.kinds", S, b"0:uint8"), (S, b"kafka.flaGs", U8, b"\x01"), (S, b"trace", R, b"\xff"),
    (S, b"Trace", R, b"utf-8 but raw"), (S, b"x", S, b"\xff\xfe"), (R, b"k", S, b"v"), (S, b"KAFKA.key", S, b"k"),
    (S, b"\xff", S, b"non-utf-8 key"), (S, b"trace", S, b"again"),
])
blocks = st.one_of(
    st.just(b""),
    st.lists(reserved_fields, max_size=4).map(tlv),
    st.binary(max_size=30),
    st.builds(lambda k, v, h, t: convert.kafka_user_headers(k, v, h, t),
              st.none() | st.binary(max_size=300), st.booleans(), headers, st.none() | st.integers(INT64_MIN, INT64_MAX)),
)
frames = st.lists(
    st.tuples(st.binary(max_size=40), blocks, st.integers(0, 10**9)), min_size=1, max_size=8
)


def iggy_batch(messages, origin_us: int) -> bytes:
    built = bytearray(build_batch([Message(p, origin_timestamp=origin_us + dt, user_headers=h) for p, h, dt in messages]))
    stamp(built, 1, 7_000, 1_760_000_000_000_000)
    return bytes(built)


origins = st.integers(0, 2**50) | st.integers(2**64 - 2**33, 2**64 - 1 - 10**9)


@SETTINGS
@given(messages=frames, origin=origins, kw=st.fixed_dictionaries({}, optional={"timestamp_type": st.just(1)}))
def test_stored_batches_convert_identically(messages, origin, kw):
    same_on_both(convert.iggy_to_kafka, iggy_batch(messages, origin), **kw)


@SETTINGS
@given(messages=frames, origin=origins, edits=mutations)
def test_mutated_stored_batches_fail_identically(messages, origin, edits):
    """Frames with lying lengths, offsets and deltas (what the walk tolerates must match too)."""
    broken = bytes(mutate(iggy_batch(messages, origin), edits, 0))
    if len(broken) >= 40:
        broken = broken[:32] + struct.pack("<Q", max(0, len(broken) - (edits[0][2] % 3) * 30)) + broken[40:]
    same_on_both(convert.iggy_to_kafka, broken)


HEADER_EDGES = [
    [(b"trace", b"1"), (b"Trace", b"2")],  # the same key ignoring case: the second is escaped
    [(b"TRACE", b"1"), (b"x", b"2"), (b"trace", b"3")],
    [(b"\xe2\x84\xaa", b"1"), (b"k", b"2")],  # KELVIN SIGN lowercases to "k"
    [(b"k", b"1"), (b"K", b"\xff")],
    [(b"KAFKA.key", b"1")], [(b"Kafka.", b"1")], [(b"kafka", b"1")],
    [(b"a", b"0:uint8"), (b"iggy.kinds", b"0:uint8")], [(b"iggy.kinds", b"x"), (b"b", b"1")],
    [(b"a", b"")], [(b"a", None)], [(b"", b"1")], [(b"a" * 255, b"v" * 255)], [(b"a" * 256, b"v")],
    [(b"a", b"v" * 256)], [(b"h%d" % i, b"v") for i in range(33)], [(b"h%d" % i, b"v") for i in range(32)],
]


@pytest.mark.parametrize("edge", range(len(HEADER_EDGES)))
def test_header_edge_cases_convert_identically(edge):
    batch = kafka_batch([(b"key", b"value", HEADER_EDGES[edge], NOW_MS), (None, b"v", [], NOW_MS)])
    ok, (iggy, _) = same_on_both(convert.kafka_to_iggy, batch, NOW_MS)
    stored_batch = bytearray(iggy)
    stamp(stored_batch, 0, 0, NOW_MS * 1000)
    same_on_both(convert.iggy_to_kafka, bytes(stored_batch))


@needs_compiled
def test_compiled_loop_writes_plain_headers_itself():
    recs = [(b"k", b"v", [(b"trace", b"abc"), (b"Id", b"\xff")], NOW_MS), (None, b"w", [(b"a", b"1")], NOW_MS + 1)]
    batch = kafka_batch(recs)

    def refuse(*_args):
        raise AssertionError("plain headers went to the reference mapping")

    fast = COMPILED.kafka_records_to_iggy(memoryview(batch)[HEADER_SIZE:], 2, NOW_MS, NOW_MS, False, False, 0,
                                          False, 0, refuse)
    assert fast is not None
    assert fast[0] == same_on_both(convert.kafka_to_iggy, batch, NOW_MS)[1][0]


@needs_compiled
def test_compiled_loop_takes_kafka_shaped_frames():
    blocks_ = [b"", convert.kafka_user_headers(b"key", False), convert.kafka_user_headers(None, True),
               convert.kafka_user_headers(b"", False, (), -7), tlv([(S, b"kafka.key", R, b"\xfe")]),
               convert.kafka_user_headers(b"k", False, [(b"trace", b"abc"), (b"Bin", b"\xff")]),
               tlv([(S, b"Trace", S, b"t"), (S, b"trace", R, b"\x80"), (S, b"KAFKA.x", S, b"y")])]
    payloads = [b"p0", b"p1", b"", b"p3", b"p4", b"p5", b"p6"]  # a null value is an empty payload
    batch = iggy_batch([(payloads[i], h, i) for i, h in enumerate(blocks_)], 1_700_000_000_000_000)

    def refuse(*_args):
        raise AssertionError("a simple frame went to the reference mapping")

    fast = COMPILED.iggy_to_kafka_records(memoryview(batch), refuse, refuse)
    assert fast is not None and fast[1] == len(blocks_)
    assert same_on_both(convert.iggy_to_kafka, batch)[0] == "ok"


def test_python_loop_takes_headerless_frames():
    batch = iggy_batch([(b"p%d" % i, b"", i * 1000) for i in range(5)], 1_700_000_000_000_000)

    def refuse(*_args):
        raise AssertionError("a headerless frame went to the reference mapping")

    fast = _convert_py.iggy_to_kafka_records(memoryview(batch), refuse, refuse)
    assert fast is not None and fast[1] == 5
    assert same_on_both(convert.iggy_to_kafka, batch)[0] == "ok"


def test_offset_delta_outside_int32_is_the_references_error():
    batch = bytearray(iggy_batch([(b"a", b"", 0), (b"b", b"", 1)], 0))
    struct.pack_into("<I", batch, 256 + 49 + 24, 0xFFFFFFF0)  # the second frame's offset_delta
    assert same_on_both(convert.iggy_to_kafka, bytes(batch))[1] is ValueError


@needs_compiled
def test_xxh3_matches_the_xxhash_package():
    import xxhash

    for n in (0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1024, 5000):
        data = bytes(range(256)) * (n // 256) + bytes(range(n % 256))
        assert COMPILED.xxh3_64(data) == xxhash.xxh3_64_intdigest(data)


def test_encode_record_reference_matches_compiled_record():
    """A headerless record encodes the same way in both: checked through a whole batch."""
    out = bytearray()
    encode_record(out, 0, 0, None, b"v")
    batch = iggy_batch([(b"v", b"", 0)], 0)
    assert bytes(memoryview(convert.iggy_to_kafka(batch))[HEADER_SIZE:]) == bytes(out)
    verify(batch)
