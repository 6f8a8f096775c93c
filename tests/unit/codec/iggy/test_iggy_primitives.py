"""Shared encodings: Reader, Identifier, Consumer, partition id, Partitioning, PollingStrategy, Permissions."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.codec.errors import CodecError, InvalidFormat
from headwater.codec.iggy.codes import ConsumerKind, PartitioningKind, PollingKind
from headwater.codec.iggy.errors import InvalidIdentifier
from headwater.codec.iggy.primitives import (
    Consumer,
    GlobalPermissions,
    Partitioning,
    Permissions,
    PollingStrategy,
    Reader,
    StreamPermissions,
    TopicPermissions,
    decode_consumer,
    decode_identifier,
    decode_optional_partition_id,
    decode_partitioning,
    decode_permissions,
    decode_polling_strategy,
    encode_consumer,
    encode_identifier,
    encode_name,
    encode_optional_partition_id,
    encode_partitioning,
    encode_permissions,
    encode_polling_strategy,
    identifier_size,
)
from iggy_strategies import consumers, identifiers, partitionings, permissions, polling


def _whole(decode, data):
    r = Reader(data)
    value = decode(r)
    r.expect_end()
    return value


def test_identifier_golden():
    assert encode_identifier(7) == b"\x01\x04\x07\x00\x00\x00"
    assert encode_identifier("s1") == b"\x02\x02s1"
    assert _whole(decode_identifier, b"\x01\x04\xff\xff\xff\xff") == 0xFFFFFFFF
    assert _whole(decode_identifier, "\x02\x03€".encode()[:2] + "€".encode()) == "€"


@pytest.mark.parametrize(
    "data", [b"\x01\x02\x00\x00", b"\x02\x00", b"\x03\x01x", b"\x00\x04\x00\x00\x00\x00"]
)
def test_identifier_errors_are_iggy_6(data):
    with pytest.raises(InvalidIdentifier) as err:
        decode_identifier(Reader(data))
    assert err.value.code == 6 and err.value.offset == 0


def test_identifier_encode_rejects_bad_values():
    for bad in ("", "x" * 256, True, 1.5, -1, 1 << 32):
        with pytest.raises((ValueError, struct.error)):
            encode_identifier(bad)


@given(identifiers)
def test_identifier_round_trip(value):
    raw = encode_identifier(value)
    assert len(raw) == identifier_size(value)
    assert _whole(decode_identifier, raw) == value


def test_reader_reports_absolute_offsets():
    r = Reader(b"\x01\x02\x03", base=256)
    r.u8()
    with pytest.raises(InvalidFormat) as err:
        r.u32("field")
    assert err.value.offset == 257 and "field" in str(err.value)
    with pytest.raises(InvalidFormat) as err:
        Reader(b"\x01a\x02\xc3\x28").utf8(5)
    assert err.value.offset == 3
    with pytest.raises(InvalidFormat):
        Reader(b"\x00").name()
    r = Reader(b"\x01\x02")
    r.u8()
    with pytest.raises(InvalidFormat) as err:
        r.expect_end()
    assert err.value.offset == 1


def test_reader_views_do_not_copy():
    buf = bytearray(b"abcdef")
    view = Reader(buf).view(3)
    buf[0] = ord("z")
    assert bytes(view) == b"zbc"


def test_name_encoding_limits():
    assert encode_name("a") == b"\x01a"
    with pytest.raises(ValueError):
        encode_name("")
    with pytest.raises(ValueError):
        encode_name("é" * 128)  # 256 bytes


def test_consumer_golden_and_kind():
    assert encode_consumer(Consumer(ConsumerKind.CONSUMER_GROUP, "g")) == b"\x02\x02\x01g"
    with pytest.raises(InvalidFormat):
        decode_consumer(Reader(b"\x03\x01\x04\x00\x00\x00\x00"))


@given(consumers)
def test_consumer_round_trip(value):
    assert _whole(decode_consumer, encode_consumer(value)) == value


def test_optional_partition_id():
    assert encode_optional_partition_id(None) == bytes(5)
    assert encode_optional_partition_id(3) == b"\x01\x03\x00\x00\x00"
    assert _whole(decode_optional_partition_id, b"\x00\x09\x00\x00\x00") is None
    assert _whole(decode_optional_partition_id, b"\x01\x00\x00\x00\x00") == 0
    with pytest.raises(InvalidFormat):
        decode_optional_partition_id(Reader(b"\x02\x00\x00\x00\x00"))


def test_partitioning_golden():
    assert encode_partitioning(Partitioning.balanced()) == b"\x01\x00"
    assert encode_partitioning(Partitioning.by_partition(1)) == b"\x02\x04\x01\x00\x00\x00"
    assert encode_partitioning(Partitioning.by_key(b"k")) == b"\x03\x01k"
    for bad in (b"\x01\x01x", b"\x02\x03\x00\x00\x00", b"\x03\x00", b"\x04\x00"):
        with pytest.raises(InvalidFormat):
            decode_partitioning(Reader(bad))
    with pytest.raises(ValueError):
        encode_partitioning(Partitioning(PartitioningKind.MESSAGES_KEY, key=b""))


@given(partitionings)
def test_partitioning_round_trip(value):
    assert _whole(decode_partitioning, encode_partitioning(value)) == value


def test_polling_strategy():
    assert encode_polling_strategy(
        PollingStrategy(PollingKind.TIMESTAMP, 5)
    ) == b"\x02" + struct.pack("<Q", 5)
    for kind in (0, 6):
        with pytest.raises(InvalidFormat):
            decode_polling_strategy(Reader(bytes((kind,)) + bytes(8)))


@given(polling)
def test_polling_round_trip(value):
    assert _whole(decode_polling_strategy, encode_polling_strategy(value)) == value


def test_permissions_golden():
    p = Permissions(
        GlobalPermissions(read_streams=True),
        (
            StreamPermissions(
                1,
                read_stream=True,
                topics=(TopicPermissions(2, poll_messages=True), TopicPermissions(3)),
            ),
            StreamPermissions(4),
        ),
    )
    expected = (
        bytes([0, 0, 0, 0, 0, 1, 0, 0, 0, 0])  # global flags
        + b"\x01"  # has streams
        + struct.pack("<I", 1)
        + bytes([0, 1, 0, 0, 0, 0])  # stream 1
        + b"\x01"  # has topics
        + struct.pack("<I", 2)
        + bytes([0, 0, 1, 0])
        + b"\x01"  # topic 2, more follow
        + struct.pack("<I", 3)
        + bytes([0, 0, 0, 0])
        + b"\x00"  # topic 3, last
        + b"\x01"  # more streams
        + struct.pack("<I", 4)
        + bytes(6)
        + b"\x00"  # stream 4, no topics
        + b"\x00"  # last stream
    )
    assert encode_permissions(p) == expected
    assert _whole(decode_permissions, expected) == p
    assert encode_permissions(Permissions()) == bytes(11)


@given(permissions)
def test_permissions_round_trip(value):
    assert _whole(decode_permissions, encode_permissions(value)) == value


@given(st.binary(max_size=200))
def test_permissions_garbage(data):
    try:
        decode_permissions(Reader(data))
    except CodecError:
        pass
