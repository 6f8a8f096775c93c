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
    MAX_PIECES,
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


# --------------------------------------------------------------------------- bombs and bounded work


def _bomb(codec: int, mebibytes: int) -> bytes:
    """``mebibytes`` MiB of zeros as concatenated streams of 1 MiB each (tens of bytes each
    for zstd, ~4 KiB for lz4, ~1 KiB for gzip)."""
    if codec == CompressionType.GZIP:
        return gzip.compress(b"\x00" * (1 << 20)) * mebibytes
    if codec == CompressionType.SNAPPY:
        block = cramjam.snappy.compress_raw(b"\x00" * (1 << 20))
        return XERIAL_MAGIC + struct.pack(">ii", 1, 1) + (struct.pack(">i", len(block)) + bytes(block)) * mebibytes
    one = compress(codec, b"\x00" * (1 << 20))
    return one * mebibytes


@pytest.mark.parametrize("codec", COMPRESSED)
def test_a_bomb_stops_at_the_cap_with_bounded_memory(codec):
    import tracemalloc

    cap = 4 << 20
    bomb = _bomb(codec, 2000)  # 2000 MiB claimed
    tracemalloc.start()
    try:
        with pytest.raises(MessageTooLarge):
            decompress(codec, bomb, max_bytes=cap)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < cap + (3 << 20), f"peak {peak} bytes for a {cap}-byte cap"


@pytest.mark.parametrize("codec", COMPRESSED)
def test_the_default_cap_is_64_mib(codec):
    bomb = _bomb(codec, 65)
    with pytest.raises(MessageTooLarge):
        decompress(codec, bomb)
    assert len(decompress(codec, _bomb(codec, 2))) == 2 << 20


def test_a_single_zstd_frame_without_content_size_stops_at_the_cap():
    import zstandard

    packed = zstandard.ZstdCompressor(write_content_size=False).compress(b"\x00" * (64 << 20))
    with pytest.raises(MessageTooLarge):
        decompress(CompressionType.ZSTD, packed, max_bytes=1 << 20)
    assert len(decompress(CompressionType.ZSTD, packed)) == 64 << 20


@pytest.mark.parametrize("codec", [CompressionType.LZ4, CompressionType.ZSTD])
def test_concatenated_frames_are_read_in_turn(codec):
    parts = [b"first " * 1000, b"", b"second " * 3, bytes(range(256)) * 50]
    assert decompress(codec, b"".join(compress(codec, p) for p in parts)) == b"".join(parts)


@pytest.mark.parametrize("codec", [CompressionType.LZ4, CompressionType.ZSTD, CompressionType.GZIP])
def test_an_empty_stream_is_corrupt(codec):
    with pytest.raises(CorruptRecord):
        decompress(codec, b"")


def _pieces(codec: int, n: int) -> bytes:
    """``n`` gzip members, xerial blocks, lz4 or zstd frames of b"x" each."""
    if codec == CompressionType.GZIP:
        return gzip.compress(b"x") * n
    if codec == CompressionType.SNAPPY:
        block = bytes(cramjam.snappy.compress_raw(b"x"))
        return XERIAL_MAGIC + struct.pack(">ii", 1, 1) + (struct.pack(">i", len(block)) + block) * n
    return compress(codec, b"x") * n


@pytest.mark.parametrize("codec", COMPRESSED)
def test_more_members_or_frames_than_the_limit_are_corrupt(codec):
    # e.g. 1 MB of concatenated empty gzip members: bounded work, then refused
    assert decompress(codec, _pieces(codec, MAX_PIECES)) == b"x" * MAX_PIECES
    with pytest.raises(CorruptRecord, match="more than"):
        decompress(codec, _pieces(codec, MAX_PIECES + 1))


def test_a_zstd_frame_declaring_a_huge_window_is_corrupt():
    frame = struct.pack("<I", 0xFD2FB528) + b"\xe0" + struct.pack("<Q", 1 << 40) + b"\x11\x00\x00hi"
    with pytest.raises(CorruptRecord):
        decompress(CompressionType.ZSTD, frame)
