"""Compression of RecordBatch records sections: round trips, client interop, garbage, caps."""

from __future__ import annotations

import gzip
import struct

import cramjam
import pytest
from aiokafka import codec as aiokafka_codec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater.codec.kafka.compression import (
    XERIAL_BLOCK_SIZE,
    XERIAL_MAGIC,
    CompressionType,
    compress,
    decompress,
)
from headwater.codec.kafka.errors import (
    CorruptRecord,
    KafkaCodecError,
    MessageTooLarge,
    UnsupportedCompressionType,
)

CODECS = list(CompressionType)
COMPRESSED = [c for c in CompressionType if c is not CompressionType.NONE]
SETTINGS = settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=3000), xerial=st.booleans())
def test_round_trip_every_codec(codec, data, xerial):
    assert decompress(codec, compress(codec, data, xerial=xerial)) == data


@pytest.mark.parametrize("codec", COMPRESSED)
def test_round_trip_large_input(codec):
    data = bytes(range(256)) * 700 + b"tail"  # several xerial blocks, several lz4 blocks
    assert decompress(codec, compress(codec, data)) == data


def test_xerial_layout():
    data = b"a" * (XERIAL_BLOCK_SIZE + 10)
    out = compress(CompressionType.SNAPPY, data)
    assert out[:8] == XERIAL_MAGIC
    assert struct.unpack(">ii", out[8:16]) == (1, 1)
    (first,) = struct.unpack(">i", out[16:20])
    block = out[20 : 20 + first]
    assert bytes(cramjam.snappy.decompress_raw(block)) == b"a" * XERIAL_BLOCK_SIZE
    (second,) = struct.unpack(">i", out[20 + first : 24 + first])
    assert 24 + first + second == len(out)


def test_raw_snappy_is_one_block():
    out = compress(CompressionType.SNAPPY, b"hello hello hello", xerial=False)
    assert not out.startswith(XERIAL_MAGIC)
    assert bytes(cramjam.snappy.decompress_raw(out)) == b"hello hello hello"


def test_xerial_version_fields_are_not_checked():
    # Some writers put version/compat little-endian; the magic alone decides.
    framed = bytearray(compress(CompressionType.SNAPPY, b"payload" * 10))
    framed[8:16] = struct.pack("<ii", 1, 1)
    assert decompress(CompressionType.SNAPPY, framed) == b"payload" * 10


def test_lz4_writes_independent_blocks_without_content_checksum():
    out = compress(CompressionType.LZ4, b"x" * 1000)
    assert out[:4] == b"\x04\x22\x4d\x18"
    flg = out[4]
    assert flg & 0x20  # block independence: Kafka's reader rejects linked blocks
    assert not flg & 0x04  # no content checksum


def test_gzip_reads_concatenated_members_and_ignores_trailing_junk():
    data = gzip.compress(b"one") + gzip.compress(b"two") + b"\x00\x00junk"
    assert decompress(CompressionType.GZIP, data) == b"onetwo"


# --------------------------------------------------------------------------- interop


@pytest.mark.parametrize(
    "encode, codec",
    [
        (aiokafka_codec.gzip_encode, CompressionType.GZIP),
        (aiokafka_codec.snappy_encode, CompressionType.SNAPPY),
        (lambda d: aiokafka_codec.snappy_encode(d, xerial_compatible=False), CompressionType.SNAPPY),
        (lambda d: aiokafka_codec.snappy_encode(d, xerial_blocksize=1024), CompressionType.SNAPPY),
        (aiokafka_codec.lz4_encode, CompressionType.LZ4),
        (aiokafka_codec.zstd_encode, CompressionType.ZSTD),
    ],
)
def test_reads_what_aiokafka_writes(encode, codec):
    data = b"kafka record bytes " * 500
    assert decompress(codec, encode(data)) == data


@pytest.mark.parametrize(
    "decode, codec, xerial",
    [
        (aiokafka_codec.gzip_decode, CompressionType.GZIP, True),
        (aiokafka_codec.snappy_decode, CompressionType.SNAPPY, True),
        (aiokafka_codec.snappy_decode, CompressionType.SNAPPY, False),
        (aiokafka_codec.lz4_decode, CompressionType.LZ4, True),
        (aiokafka_codec.zstd_decode, CompressionType.ZSTD, True),
    ],
)
def test_aiokafka_reads_what_we_write(decode, codec, xerial):
    data = b"kafka record bytes " * 5000
    assert bytes(decode(compress(codec, data, xerial=xerial))) == data


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("codec", [5, 6, 7, 8, -1])
def test_unknown_codec(codec):
    with pytest.raises(UnsupportedCompressionType) as info:
        decompress(codec, b"abc")
    assert info.value.error_code == 76
    with pytest.raises(UnsupportedCompressionType):
        compress(codec, b"abc")


@SETTINGS
@given(codec=st.sampled_from(COMPRESSED), data=st.binary(max_size=200))
def test_garbage_raises_only_our_errors(codec, data):
    try:
        decompress(codec, data, max_bytes=1 << 20)
    except KafkaCodecError:
        pass


@SETTINGS
@given(codec=st.sampled_from(COMPRESSED), cut=st.integers(min_value=1, max_value=40))
def test_truncated_streams(codec, cut):
    whole = compress(codec, bytes(range(256)) * 40)
    try:
        out = decompress(codec, whole[:-cut])
    except KafkaCodecError as exc:
        assert isinstance(exc, CorruptRecord)
    else:  # some formats can end early on a block boundary; never silently longer
        assert len(out) <= 256 * 40


def test_corrupt_has_code_2():
    with pytest.raises(CorruptRecord) as info:
        decompress(CompressionType.ZSTD, b"not zstd at all")
    assert info.value.error_code == 2


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize("xerial", [True, False])
def test_max_bytes(codec, xerial):
    data = b"z" * 100_000
    packed = compress(codec, data, xerial=xerial)
    assert decompress(codec, packed, max_bytes=100_000) == data
    with pytest.raises(MessageTooLarge) as info:
        decompress(codec, packed, max_bytes=99_999)
    assert info.value.error_code == 10


def test_xerial_block_past_end():
    framed = XERIAL_MAGIC + struct.pack(">ii", 1, 1) + struct.pack(">i", 1000) + b"abc"
    with pytest.raises(CorruptRecord):
        decompress(CompressionType.SNAPPY, framed)
    with pytest.raises(CorruptRecord):
        decompress(CompressionType.SNAPPY, XERIAL_MAGIC + struct.pack(">ii", 1, 1) + b"\x00\x00")


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview, lambda b: memoryview(b"__" + b)[2:]])
def test_any_buffer_type(codec, wrap):
    data = b"buffer types " * 100
    packed = compress(codec, wrap(data))
    assert decompress(codec, wrap(packed)) == data
