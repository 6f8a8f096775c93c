"""User-headers TLV and options blocks: golden bytes, round trips, every rule, garbage.

Spec: encodings.mdx ("Header kinds", "User headers block", "Options block");
layout checked against Iggy's primitives/user_headers.rs and options.rs.
"""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.codec import headers as H
from headwater.codec.errors import (
    CodecError,
    DuplicateOptionKey,
    InvalidFormat,
    InvalidHeaderKey,
    InvalidHeaderKind,
    InvalidHeaderValue,
    OptionsBlockTooLarge,
    TooBigUserHeaders,
)

K = H.Kind


def field(kind: int, data: bytes) -> bytes:
    return bytes([kind]) + len(data).to_bytes(4, "little") + data


# --------------------------------------------------------------------------- golden bytes


def test_golden_user_headers():
    block = H.encode_user_headers([("test", K.STRING, b"val"), ("n", K.UINT32, b"\x2a\0\0\0")])
    assert block == bytes.fromhex(
        "02" "04000000" "74657374"  # key: String, 4 bytes, "test"
        "02" "03000000" "76616c"  # value: String, 3 bytes, "val"
        "02" "01000000" "6e"  # key: String "n"
        "0b" "04000000" "2a000000"  # value: Uint32 (11) 42
    )
    assert H.decode_headers(block) == {"test": "val", "n": 42}
    assert H.encode_headers({"test": "val", "n": (K.UINT32, 42)}) == block


def test_golden_options_block():
    """enforce_fsync = true (Bool) and segment_size = 1 GiB (Uint64), the layout
    every Iggy SDK pins for an options block."""
    expected = bytes.fromhex(
        "02" "0d000000" + b"enforce_fsync".hex()  # key: String, 13 bytes
        + "03" "01000000" "01"  # value: Bool, 1 byte, true
        + "02" "0c000000" + b"segment_size".hex()  # key: String, 12 bytes
        + "0c" "08000000" "0000004000000000"  # value: Uint64, 2**30 LE
    )
    block = H.encode_options_block(
        {"enforce_fsync": (K.BOOL, b"\x01"), "segment_size": (K.UINT64, (2**30).to_bytes(8, "little"))}
    )
    assert block == expected
    decoded = H.decode_options_block(expected)
    assert decoded == {"enforce_fsync": (3, b"\x01"), "segment_size": (12, (2**30).to_bytes(8, "little"))}
    assert list(decoded) == ["enforce_fsync", "segment_size"]
    assert H.unpack_value(*decoded["segment_size"]) == 2**30
    assert H.unpack_value(*decoded["enforce_fsync"]) is True
    assert H.validate_options_block(expected) == 2


def test_kind_codes():
    assert [k.value for k in K] == list(range(1, 16))
    assert [k.name for k in K][:3] == ["RAW", "STRING", "BOOL"]
    assert K.INT128 == 8 and K.UINT8 == 9 and K.FLOAT64 == 15


# --------------------------------------------------------------------------- round trips


def value_for(kind: int):
    size = H.FIXED_SIZES.get(kind)
    if size is not None:
        return st.binary(min_size=size, max_size=size)
    return st.binary(min_size=1, max_size=255)


@st.composite
def entries(draw):
    out = []
    for _ in range(draw(st.integers(0, 8))):
        key_kind = draw(st.sampled_from([2, 2, 2, 1, 6, 12, 16, 200, 255]))
        kind = draw(st.integers(1, 255))
        out.append(H.UserHeader(draw(value_for(key_kind)), kind, draw(value_for(kind)), key_kind))
    return out


@given(entries())
def test_user_headers_round_trip(items):
    block = H.encode_user_headers(items)
    assert H.validate_user_headers(block) == len(items)
    assert H.decode_user_headers(block) == items
    assert H.decode_user_headers(block, strict=True) == items
    assert H.encode_user_headers(H.decode_user_headers(block)) == block
    assert len(block) == sum(10 + len(h.key) + len(h.value) for h in items)


@given(
    st.lists(
        st.tuples(st.text(min_size=1, max_size=60), st.integers(1, 255), st.binary(min_size=1, max_size=255)),
        max_size=6,
    )
)
def test_three_tuples_use_string_keys(triples):
    triples = [(k, kind, v) for k, kind, v in triples if kind not in H.FIXED_SIZES and len(k.encode()) <= 255]
    block = H.encode_user_headers(triples)
    decoded = H.decode_user_headers(block)
    got = [(h.key_str, h.kind, h.value, h.key_kind) for h in decoded]
    assert got == [(k, kind, v, 2) for k, kind, v in triples]


typed_values = st.one_of(
    st.tuples(st.just(K.BOOL), st.booleans()),
    st.tuples(st.just(K.INT8), st.integers(-(2**7), 2**7 - 1)),
    st.tuples(st.just(K.INT16), st.integers(-(2**15), 2**15 - 1)),
    st.tuples(st.just(K.INT32), st.integers(-(2**31), 2**31 - 1)),
    st.tuples(st.just(K.INT64), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just(K.INT128), st.integers(-(2**127), 2**127 - 1)),
    st.tuples(st.just(K.UINT8), st.integers(0, 2**8 - 1)),
    st.tuples(st.just(K.UINT16), st.integers(0, 2**16 - 1)),
    st.tuples(st.just(K.UINT32), st.integers(0, 2**32 - 1)),
    st.tuples(st.just(K.UINT64), st.integers(0, 2**64 - 1)),
    st.tuples(st.just(K.UINT128), st.integers(0, 2**128 - 1)),
    st.tuples(st.just(K.FLOAT32), st.floats(width=32)),
    st.tuples(st.just(K.FLOAT64), st.floats()),
    st.tuples(st.just(K.STRING), st.text(min_size=1, max_size=60)),
    st.tuples(st.just(K.RAW), st.binary(min_size=1, max_size=255)),
)


def same(a, b):
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    return a == b and type(a) is type(b)


@given(typed_values)
def test_typed_values_round_trip(kv):
    kind, value = kv
    data = H.pack_value(kind, value)
    assert len(data) == H.FIXED_SIZES.get(kind, len(data))
    assert same(H.unpack_value(kind, data), value)


def test_typed_value_bytes():
    assert H.pack_value(K.INT16, -2) == b"\xfe\xff"
    assert H.pack_value(K.UINT64, 1) == b"\x01" + bytes(7)
    assert H.pack_value(K.FLOAT64, 1.5) == struct.pack("<d", 1.5)
    assert H.pack_value(K.FLOAT32, 1.5) == b"\x00\x00\xc0\x3f"
    assert H.pack_value(K.BOOL, False) == b"\x00"
    assert H.pack_value(K.STRING, "é") == b"\xc3\xa9"
    assert H.unpack_value(K.INT32, b"\xff\xff\xff\xff") == -1
    assert H.unpack_value(K.UINT32, b"\xff\xff\xff\xff") == 2**32 - 1


python_values = st.one_of(
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.text(min_size=1, max_size=50),
    st.binary(min_size=1, max_size=50),
    st.floats(allow_nan=False),
)


@given(st.dictionaries(st.text(min_size=1, max_size=30), python_values, max_size=6))
def test_friendly_dict_round_trip(d):
    block = H.encode_headers(d)
    back = H.decode_headers(block)
    assert list(back) == list(d)
    for key in d:
        assert same(back[key], d[key])


def test_header_helper_infers_kinds():
    assert H.header("a", True).kind == K.BOOL
    assert H.header("a", 5).kind == K.INT64
    assert H.header("a", 5.0).kind == K.FLOAT64
    assert H.header("a", "x").kind == K.STRING
    assert H.header("a", b"x").kind == K.RAW
    assert H.header("a", 5, K.UINT8) == H.UserHeader(b"a", 9, b"\x05")
    with pytest.raises(InvalidHeaderValue):
        H.header("a", None)


# --------------------------------------------------------------------------- rules


def test_empty_block():
    assert H.validate_user_headers(b"") == 0
    assert H.decode_user_headers(b"") == []
    assert H.encode_user_headers([]) == b""
    assert H.decode_options_block(b"") == {}


def test_kind_zero_rejected():
    block = field(2, b"k") + field(0, b"v")
    with pytest.raises(InvalidHeaderKind) as info:
        H.validate_user_headers(block)
    assert info.value.offset == 6 and info.value.code == 4040
    with pytest.raises(InvalidHeaderKind):
        H.encode_user_headers([("k", 0, b"v")])
    with pytest.raises(InvalidHeaderKind):
        H.encode_user_headers([("k", 256, b"v")])


def test_lengths_one_to_255():
    for bad in (0, 256, 2**32 - 1):
        key = bytes([2]) + bad.to_bytes(4, "little") + b"k" * min(bad, 300)
        with pytest.raises(InvalidHeaderKey) as info:
            H.validate_user_headers(key + field(2, b"v"))
        assert info.value.offset == 1
        value = bytes([2]) + bad.to_bytes(4, "little") + b"v" * min(bad, 300)
        with pytest.raises(InvalidHeaderValue) as info:
            H.validate_user_headers(field(2, b"k") + value)
        assert info.value.offset == 7
    assert H.validate_user_headers(field(1, b"k" * 255) + field(1, b"v" * 255)) == 1
    with pytest.raises(InvalidHeaderKey):
        H.encode_user_headers([("k" * 256, 1, b"v")])
    with pytest.raises(InvalidHeaderKey):
        H.encode_user_headers([("", 1, b"v")])
    with pytest.raises(InvalidHeaderValue):
        H.encode_user_headers([("k", 1, b"")])
    with pytest.raises(InvalidHeaderValue):
        H.encode_user_headers([("k", 1, b"v" * 256)])


def test_every_truncation_rejected():
    block = H.encode_user_headers([("key", K.STRING, b"value"), ("n", K.UINT16, b"\1\0")])
    assert len(block) == 31
    pair_ends = {0, 18}
    key_ends = {8, 24}
    for size in range(len(block)):
        if size in pair_ends:
            assert H.validate_user_headers(block[:size]) == (0 if size == 0 else 1)
            continue
        with pytest.raises(CodecError) as info:
            H.validate_user_headers(block[:size])
        assert type(info.value) is (InvalidHeaderValue if size in key_ends else InvalidFormat)


def test_trailing_bytes_rejected():
    block = field(2, b"k") + field(2, b"v")
    for tail in (b"\x02", b"\x02\x01", field(2, b"x")):
        with pytest.raises(CodecError):
            H.validate_user_headers(block + tail)


def test_unknown_kinds_preserved_and_any_key_kind_accepted():
    block = field(16, b"a") + field(255, b"opaque") + field(6, b"\x2a\0\0\0") + field(12, bytes(8))
    decoded = H.decode_user_headers(block, strict=True)
    assert decoded == [H.UserHeader(b"a", 255, b"opaque", 16), H.UserHeader(b"\x2a\0\0\0", 12, bytes(8), 6)]
    assert H.encode_user_headers(decoded) == block
    with pytest.raises(InvalidHeaderKind):
        decoded[0].to_python()
    with pytest.raises(InvalidHeaderKey):
        decoded[1].key_str
    with pytest.raises(InvalidHeaderKey):
        H.decode_headers(field(6, b"\x2a\0\0\0") + field(2, b"v"))
    with pytest.raises(InvalidHeaderKind):
        H.decode_headers(field(2, b"k") + field(99, b"v"))


def test_strict_widths():
    bad_value = field(2, b"k") + field(K.BOOL, b"\0\0")
    assert H.decode_user_headers(bad_value)[0].value == b"\0\0"
    with pytest.raises(InvalidHeaderValue) as info:
        H.decode_user_headers(bad_value, strict=True)
    assert info.value.offset == 6
    bad_key = field(K.INT32, b"abc") + field(2, b"v")
    with pytest.raises(InvalidHeaderKey) as info:
        H.decode_user_headers(bad_key, strict=True)
    assert info.value.offset == 0
    with pytest.raises(InvalidHeaderValue):
        H.encode_user_headers([("k", K.UINT64, b"1234")])
    with pytest.raises(InvalidHeaderKey):
        H.encode_user_headers([(b"ab", K.FLOAT32, b"1234", K.FLOAT64)])


def test_typed_value_errors():
    with pytest.raises(InvalidHeaderValue):
        H.unpack_value(K.BOOL, b"\x02")
    with pytest.raises(InvalidHeaderValue):
        H.unpack_value(K.STRING, b"\xff")
    with pytest.raises(InvalidHeaderValue):
        H.unpack_value(K.INT64, b"\0" * 7)
    with pytest.raises(InvalidHeaderKind):
        H.unpack_value(0, b"\0")
    for kind, value in [
        (K.UINT8, 256),
        (K.UINT8, -1),
        (K.INT8, 128),
        (K.BOOL, 1),
        (K.INT32, 1.0),
        (K.INT32, True),
        (K.FLOAT32, 1e300),
        (K.STRING, b"x"),
        (K.RAW, 3),
        (K.FLOAT64, "x"),
    ]:
        with pytest.raises(InvalidHeaderValue):
            H.pack_value(kind, value)
    with pytest.raises(InvalidHeaderKind):
        H.pack_value(16, b"x")


def test_user_headers_size_cap():
    items = [(f"{i:0>255}", K.RAW, b"v" * 255) for i in range(196)]  # 196 * 520 = 101 920 bytes
    with pytest.raises(TooBigUserHeaders) as info:
        H.encode_user_headers(items)
    assert info.value.code == 4017
    assert len(H.encode_user_headers(items[:192])) == 99_840


# --------------------------------------------------------------------------- options block


def test_options_rules():
    s = K.STRING
    with pytest.raises(DuplicateOptionKey) as info:
        H.decode_options_block(field(s, b"a") + field(s, b"1") + field(s, b"a") + field(s, b"2"))
    assert info.value.offset == 12 and info.value.code == 4018
    with pytest.raises(InvalidHeaderKey):
        H.decode_options_block(field(K.UINT64, bytes(8)) + field(s, b"v"))
    with pytest.raises(InvalidHeaderKey):
        H.decode_options_block(field(s, b"\xff\xfe") + field(s, b"v"))
    # Iggy checks every key's kind before looking for duplicates
    with pytest.raises(InvalidHeaderKey) as info:
        H.decode_options_block(
            field(s, b"a") + field(s, b"1") + field(s, b"a") + field(s, b"2")
            + field(1, b"k") + field(s, b"3")
        )
    assert type(info.value) is InvalidHeaderKey
    assert H.decode_options_block(field(s, b"future") + field(200, b"opaque")) == {"future": (200, b"opaque")}
    unsorted = field(s, b"b") + field(s, b"1") + field(s, b"a") + field(s, b"2")
    assert list(H.decode_options_block(unsorted)) == ["b", "a"]
    with pytest.raises(CodecError):
        H.decode_options_block(field(s, b"a"))  # a key with no value


def test_options_entry_cap():
    at_cap = [(f"key_{i}", K.STRING, b"v") for i in range(H.MAX_OPTIONS)]
    block = H.encode_options_block(at_cap)
    assert H.validate_options_block(block) == 1024
    over = block + field(2, b"key_1024") + field(2, b"v")
    with pytest.raises(OptionsBlockTooLarge) as info:
        H.decode_options_block(over)
    assert info.value.code == 4043
    with pytest.raises(OptionsBlockTooLarge):
        H.encode_options_block(at_cap + [("one_more", K.STRING, b"v")])


def test_options_byte_cap():
    items = [(f"{i:0>255}", K.STRING, b"v" * 255) for i in range(200)]  # 104 000 bytes, 200 entries
    block = H.encode_user_headers(items[:192])
    assert H.validate_options_block(block) == 192
    big = b"".join(field(2, k.encode()) + field(2, v) for k, _, v in items)
    assert len(big) > H.MAX_OPTIONS_BYTES
    with pytest.raises(OptionsBlockTooLarge):
        H.decode_options_block(big)
    # the size cap comes first, before any structural check
    with pytest.raises(OptionsBlockTooLarge):
        H.decode_options_block(b"\0" * (H.MAX_OPTIONS_BYTES + 1))


def test_encode_options_rejects_non_str_keys_and_duplicates():
    with pytest.raises(InvalidHeaderKey):
        H.encode_options_block([(b"k", K.STRING, b"v")])
    with pytest.raises(DuplicateOptionKey):
        H.encode_options_block([("k", K.STRING, b"v"), ("k", K.STRING, b"w")])


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=40).filter(lambda k: len(k.encode()) <= 255),
        st.tuples(st.integers(1, 255), st.binary(min_size=1, max_size=255)),
        max_size=10,
    )
)
def test_options_round_trip(options):
    options = {k: (kind, v) for k, (kind, v) in options.items() if kind not in H.FIXED_SIZES}
    block = H.encode_options_block(options)
    assert H.decode_options_block(block) == options
    assert list(H.decode_options_block(block)) == list(options)


# --------------------------------------------------------------------------- garbage


@given(st.binary(max_size=400))
def test_garbage_raises_only_codec_errors(data):
    for fn in (
        H.validate_user_headers,
        H.decode_user_headers,
        lambda b: H.decode_user_headers(b, strict=True),
        H.decode_headers,
        H.decode_options_block,
        H.validate_options_block,
    ):
        try:
            fn(data)
        except CodecError:
            pass


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 300), st.binary(max_size=300)), max_size=6))
def test_near_valid_garbage(parts):
    """Fields with random kinds and declared lengths around the limits."""
    data = b"".join(bytes([k]) + n.to_bytes(4, "little") + d for k, n, d in parts)
    for fn in (H.decode_user_headers, H.decode_headers, H.decode_options_block):
        try:
            fn(data)
        except CodecError:
            pass
