"""Compression of a RecordBatch v2 records section: gzip, snappy, lz4, zstd.

The codec id is bits 0..2 of the batch attributes; everything after the
61-byte batch header (the records, without the record count, which stays in
the header) is compressed as one stream::

    id  name    wire format                                   written by us
     0  none    records as they are                           -
     1  gzip    RFC 1952 gzip member(s)                       one member, level 6 (java.util.zip default)
     2  snappy  xerial framing or raw snappy block (see below) xerial, 32 KiB blocks (or raw if asked)
     3  lz4     LZ4 frame format (KIP-57), independent blocks  no content checksum, independent blocks
     4  zstd    Zstandard frame(s)                            level 3 (Kafka's default)

Xerial snappy framing (what the Java client, kafka-python and aiokafka write)::

    off size field
      0    8 magic     0x82 'S' 'N' 'A' 'P' 'P' 'Y' 0x00
      8    4 version   int32 big-endian (1; not checked: some writers put it little-endian)
     12    4 compat    int32 big-endian (1; not checked)
     16      blocks    repeated: [length int32 big-endian][raw snappy block of `length` bytes]

librdkafka writes a single raw snappy block instead; a stream is read as xerial
when it starts with the 8 magic bytes and has at least 16 bytes, else as raw.

Kafka's LZ4 reader rejects dependent (linked) blocks, so we always write
independent ones; frames with or without content size or checksums are read.

Sources: Kafka ``CompressionType.java``, ``KafkaLZ4BlockOutputStream.java``
(KIP-57), ``shared/spec/NOTES.md`` (snappy framing by client); cramjam 2.x
for the algorithms, zlib for bounded gzip decompression.

Errors: :class:`UnsupportedCompressionType` (76) for ids 5..7 (and anything
outside 0..7), :class:`CorruptRecord` (2) for data that does not decompress,
:class:`MessageTooLarge` (10) when the output would pass ``max_bytes``.
"""

from __future__ import annotations

import enum
import struct
import zlib

import cramjam

from .errors import CorruptRecord, MessageTooLarge, UnsupportedCompressionType


class CompressionType(enum.IntEnum):
    """Compression ids of the RecordBatch attributes bits 0..2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024
"""Uncompressed bytes per xerial block, as the xerial library and the Java client use."""

_BE_I32 = struct.Struct(">i")
_DEFAULT_LEVELS = {CompressionType.GZIP: 6, CompressionType.LZ4: 9, CompressionType.ZSTD: 3}
_GZIP_WBITS = 16 + zlib.MAX_WBITS


def _check_codec(codec: int) -> CompressionType:
    try:
        return CompressionType(codec)
    except ValueError:
        raise UnsupportedCompressionType(
            f"unknown compression id {codec}", field="attributes"
        ) from None


def decompress(
    codec: int, data: bytes | bytearray | memoryview, *, max_bytes: int | None = None
) -> bytes:
    """Decompress a records section compressed with ``codec`` (an id 0..4).

    ``max_bytes`` caps the output; gzip and snappy stop before producing more,
    lz4 and zstd are checked once done. Id 0 returns ``bytes(data)``.

    Raises :class:`UnsupportedCompressionType` (76) for another id,
    :class:`CorruptRecord` (2) when the data does not decompress,
    :class:`MessageTooLarge` (10) past ``max_bytes``.
    """
    kind = _check_codec(codec)
    if kind is CompressionType.NONE:
        out = bytes(data)
    elif kind is CompressionType.GZIP:
        return _gunzip(data, max_bytes)
    elif kind is CompressionType.SNAPPY:
        return _unsnappy(data, max_bytes)
    else:
        try:
            if kind is CompressionType.LZ4:
                out = bytes(cramjam.lz4.decompress(data))
            else:
                out = bytes(cramjam.zstd.decompress(data))
        except (cramjam.DecompressionError, ValueError, TypeError, OverflowError) as exc:
            raise CorruptRecord(f"{kind.name.lower()} data does not decompress: {exc}") from None
    if max_bytes is not None and len(out) > max_bytes:
        raise MessageTooLarge(f"decompressed records section over {max_bytes} bytes")
    return out


def compress(
    codec: int,
    data: bytes | bytearray | memoryview,
    *,
    xerial: bool = True,
    level: int | None = None,
) -> bytes:
    """Compress a records section with ``codec`` (an id 0..4).

    ``xerial`` chooses xerial framing for snappy (readable by every client and
    by Kafka brokers) over one raw block (librdkafka's choice). ``level``
    overrides the defaults: gzip 6, lz4 9, zstd 3 (Kafka's, KIP-390).

    Raises :class:`UnsupportedCompressionType` (76) for another id.
    """
    kind = _check_codec(codec)
    if kind is CompressionType.NONE:
        return bytes(data)
    if level is None:
        level = _DEFAULT_LEVELS.get(kind)
    if kind is CompressionType.GZIP:
        return bytes(cramjam.gzip.compress(data, level=level))
    if kind is CompressionType.SNAPPY:
        if not xerial:
            return bytes(cramjam.snappy.compress_raw(data))
        mv = memoryview(data).cast("B")
        out = bytearray(XERIAL_HEADER)
        for start in range(0, len(mv), XERIAL_BLOCK_SIZE):
            block = cramjam.snappy.compress_raw(mv[start : start + XERIAL_BLOCK_SIZE])
            out += _BE_I32.pack(len(block))
            out += block
        return bytes(out)
    if kind is CompressionType.LZ4:
        compressor = cramjam.lz4.Compressor(
            level=level, content_checksum=False, block_linked=False
        )
        compressor.compress(data if type(data) is bytes else bytes(data))  # takes bytes only
        return bytes(compressor.finish())
    return bytes(cramjam.zstd.compress(data, level=level))


def _gunzip(data: bytes | bytearray | memoryview, max_bytes: int | None) -> bytes:
    """Every gzip member of ``data``, concatenated; bytes after the last member
    that do not start another member are ignored (as java.util.zip does)."""
    out = bytearray()
    rest = bytes(data)
    try:
        while True:
            inflater = zlib.decompressobj(_GZIP_WBITS)
            if max_bytes is None:
                out += inflater.decompress(rest)
            else:
                out += inflater.decompress(rest, max_bytes - len(out) + 1)
                if len(out) > max_bytes:
                    raise MessageTooLarge(f"decompressed records section over {max_bytes} bytes")
            if not inflater.eof:
                raise CorruptRecord("gzip data ends inside a member")
            rest = inflater.unused_data
            if not rest.startswith(b"\x1f\x8b"):
                return bytes(out)
    except zlib.error as exc:
        raise CorruptRecord(f"gzip data does not decompress: {exc}") from None


def _unsnappy(data: bytes | bytearray | memoryview, max_bytes: int | None) -> bytes:
    mv = memoryview(data).cast("B")
    try:
        if len(mv) >= 16 and mv[:8] == XERIAL_MAGIC:
            out = bytearray()
            pos, end = 16, len(mv)
            while pos < end:
                if pos + 4 > end:
                    raise CorruptRecord("xerial snappy block length truncated", offset=pos)
                (length,) = _BE_I32.unpack_from(mv, pos)
                pos += 4
                if length < 0 or pos + length > end:
                    raise CorruptRecord(
                        f"xerial snappy block of {length} bytes runs past the data", offset=pos - 4
                    )
                block = mv[pos : pos + length]
                if max_bytes is not None and (
                    len(out) + cramjam.snappy.decompress_raw_len(block) > max_bytes
                ):
                    raise MessageTooLarge(f"decompressed records section over {max_bytes} bytes")
                out += cramjam.snappy.decompress_raw(block)
                pos += length
            return bytes(out)
        if max_bytes is not None and cramjam.snappy.decompress_raw_len(mv) > max_bytes:
            raise MessageTooLarge(f"decompressed records section over {max_bytes} bytes")
        return bytes(cramjam.snappy.decompress_raw(mv))
    except (cramjam.DecompressionError, ValueError, TypeError, OverflowError) as exc:
        raise CorruptRecord(f"snappy data does not decompress: {exc}") from None
