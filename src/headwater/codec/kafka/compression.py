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
for compression and snappy; zlib, ``lz4.frame`` and ``zstandard`` for
streaming decompression with bounded output (see :func:`decompress`).

Errors: :class:`UnsupportedCompressionType` (76) for ids 5..7 (and anything
outside 0..7), :class:`CorruptRecord` (2) for data that does not decompress,
:class:`MessageTooLarge` (10) when the output would pass ``max_bytes``
(default 64 MiB): decompression stops there, so a bomb costs bounded memory.
"""

from __future__ import annotations

import enum
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

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

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
"""Output cap of :func:`decompress` when the caller passes none (MessageTooLarge past it)."""
MAX_PIECES = 16384
"""Most gzip members, lz4 frames, zstd frames or xerial blocks one stream may hold
(clients write one member or frame, and xerial blocks of 32 KiB: 2048 for 64 MiB)."""
_OUT_STEP = 1024 * 1024  # most output asked of gzip and lz4 in one step
_IN_STEP = 16 * 1024  # gzip and lz4 input per step: bounds the copy of unused data per member or frame
_ZSTD_MAX_RATIO = 32768  # a zstd block: at most 128 KiB out of at least 4 bytes in
_ZSTD_MIN_IN_STEP = 16


def _check_codec(codec: int) -> CompressionType:
    try:
        return CompressionType(codec)
    except ValueError:
        raise UnsupportedCompressionType(
            f"unknown compression id {codec}", field="attributes"
        ) from None


def decompress(
    codec: int, data: bytes | bytearray | memoryview, *, max_bytes: int | None = None
) -> bytes | bytearray:
    """Decompress a records section compressed with ``codec`` (an id 0..4).

    ``max_bytes`` caps the output (None: :data:`DEFAULT_MAX_BYTES`, 64 MiB).
    Every codec decompresses in a streaming way and stops once the output
    passes the cap, so at most ``max_bytes`` plus one step (at most 1 MiB)
    is ever held, whatever the data claims: a decompression bomb costs
    bounded memory. Concatenated gzip members, lz4 frames, zstd frames and
    xerial blocks are read in turn, at most :data:`MAX_PIECES` of them (so a
    stream of empty members costs bounded time). Id 0 returns ``bytes(data)``.

    Raises :class:`UnsupportedCompressionType` (76) for another id,
    :class:`CorruptRecord` (2) when the data does not decompress, ends inside
    a member, frame or block, or has more than :data:`MAX_PIECES` of them,
    :class:`MessageTooLarge` (10) past ``max_bytes``.
    """
    kind = _check_codec(codec)
    cap = DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
    if kind is CompressionType.NONE:
        return bytes(data)
    if kind is CompressionType.GZIP:
        return _gunzip(data, cap)
    if kind is CompressionType.SNAPPY:
        return _unsnappy(data, cap)
    if kind is CompressionType.LZ4:
        return _unlz4(data, cap)
    return _unzstd(data, cap)


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


def _too_large(cap: int) -> MessageTooLarge:
    return MessageTooLarge(f"decompressed records section over {cap} bytes")


def _view(data: bytes | bytearray | memoryview) -> memoryview:
    mv = memoryview(data)
    return mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")


def _too_many(what: str) -> CorruptRecord:
    return CorruptRecord(f"more than {MAX_PIECES} {what}")


def _gunzip(data: bytes | bytearray | memoryview, cap: int) -> bytearray:
    """Every gzip member of ``data``, concatenated; bytes after the last member
    that do not start another member are ignored (as java.util.zip does).

    Input is fed in :data:`_IN_STEP` pieces (so finding where a member
    ends copies at most that much) and output asked for at most up to the cap.
    """
    mv = _view(data)
    out = bytearray()
    pos, end = 0, len(mv)
    members = 0
    try:
        while True:
            members += 1
            if members > MAX_PIECES:
                raise _too_many("gzip members")
            inflater = zlib.decompressobj(_GZIP_WBITS)
            while not inflater.eof:
                chunk = mv[pos : pos + _IN_STEP]
                piece = inflater.decompress(chunk, min(_OUT_STEP, cap - len(out) + 1))
                used = len(chunk) - len(inflater.unconsumed_tail) - len(inflater.unused_data)
                pos += used
                if piece:
                    out += piece
                    if len(out) > cap:
                        raise _too_large(cap)
                elif not inflater.eof and (not chunk or not used):
                    raise CorruptRecord("gzip data ends inside a member", offset=pos)
            if mv[pos : pos + 2] != b"\x1f\x8b":
                return out
    except zlib.error as exc:
        raise CorruptRecord(f"gzip data does not decompress: {exc}", offset=pos) from None


def _unsnappy(data: bytes | bytearray | memoryview, cap: int) -> bytes | bytearray:
    """Xerial blocks or one raw block; each block's declared length (its
    leading varint) is checked against the cap before it is decompressed."""
    mv = _view(data)
    try:
        if len(mv) >= 16 and mv[:8] == XERIAL_MAGIC:
            out = bytearray()
            pos, end = 16, len(mv)
            blocks = 0
            while pos < end:
                blocks += 1
                if blocks > MAX_PIECES:
                    raise _too_many("xerial snappy blocks")
                if pos + 4 > end:
                    raise CorruptRecord("xerial snappy block length truncated", offset=pos)
                (length,) = _BE_I32.unpack_from(mv, pos)
                pos += 4
                if length < 0 or pos + length > end:
                    raise CorruptRecord(
                        f"xerial snappy block of {length} bytes runs past the data", offset=pos - 4
                    )
                block = mv[pos : pos + length]
                if len(out) + cramjam.snappy.decompress_raw_len(block) > cap:
                    raise _too_large(cap)
                out += cramjam.snappy.decompress_raw(block)
                pos += length
            return out
        if cramjam.snappy.decompress_raw_len(mv) > cap:
            raise _too_large(cap)
        return bytes(cramjam.snappy.decompress_raw(mv))
    except (cramjam.DecompressionError, ValueError, TypeError, OverflowError) as exc:
        raise CorruptRecord(f"snappy data does not decompress: {exc}") from None


def _unlz4(data: bytes | bytearray | memoryview, cap: int) -> bytearray:
    """Every LZ4 frame of ``data`` in turn. Input is fed in :data:`_IN_STEP`
    pieces (the decompressor keeps what it has not used, so finding where a
    frame ends copies at most that much) and each step asks for at most
    :data:`_OUT_STEP` bytes of output, never past the cap."""
    mv = _view(data)
    out = bytearray()
    pos, end = 0, len(mv)
    frames = 0
    try:
        while True:
            frames += 1
            if frames > MAX_PIECES:
                raise _too_many("lz4 frames")
            frame = lz4.frame.LZ4FrameDecompressor()
            fed = pos
            while not frame.eof:
                feed = b""
                if frame.needs_input:
                    if fed >= end:
                        raise CorruptRecord("lz4 data ends inside a frame", offset=end)
                    feed = mv[fed : fed + _IN_STEP]
                    fed += len(feed)
                piece = frame.decompress(feed, max_length=min(_OUT_STEP, cap - len(out) + 1))
                if piece:
                    out += piece
                    if len(out) > cap:
                        raise _too_large(cap)
                elif not feed and not frame.eof:
                    raise CorruptRecord("lz4 decompressor made no progress", offset=fed)
            pos = fed - len(frame.unused_data or b"")
            if pos >= end:
                return out
    except (RuntimeError, ValueError, TypeError, OverflowError) as exc:
        raise CorruptRecord(f"lz4 data does not decompress: {exc}") from None


def _unzstd(data: bytes | bytearray | memoryview, cap: int) -> bytearray:
    """Every zstd frame of ``data`` in turn (skippable frames included).

    A zstd block yields at most 128 KiB and takes at least 4 bytes, so
    ``n`` input bytes yield at most ``n * 32768`` bytes (plus a block or two
    held over): input is fed in steps of ``room // 32768`` bytes (at least
    16), ``room`` being what is left under the cap, which keeps the output
    within about 1 MiB of the cap.
    """
    mv = _view(data)
    if not len(mv):
        raise CorruptRecord("empty zstd stream")
    out = bytearray()
    pos, end = 0, len(mv)
    frames = 0
    dctx = zstandard.ZstdDecompressor()
    try:
        while pos < end:
            frames += 1
            if frames > MAX_PIECES:
                raise _too_many("zstd frames")
            frame = dctx.decompressobj()
            while not frame.eof:
                if pos >= end:
                    raise CorruptRecord("zstd data ends inside a frame", offset=pos)
                step = max(_ZSTD_MIN_IN_STEP, (cap - len(out)) // _ZSTD_MAX_RATIO)
                chunk = mv[pos : pos + step]
                piece = frame.decompress(chunk)
                pos += len(chunk) - len(frame.unused_data)
                if piece:
                    out += piece
                    if len(out) > cap:
                        raise _too_large(cap)
        return out
    except zstandard.ZstdError as exc:
        raise CorruptRecord(f"zstd data does not decompress: {exc}", offset=pos) from None
