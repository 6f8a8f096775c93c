"""Kafka RecordBatch v2 (magic 2): a lazy view, a CRC check, record decoding and a builder.

Source: Kafka ``DefaultRecordBatch.java`` and ``DefaultRecord.java``
(clients/src/main/java/org/apache/kafka/common/record/), KIP-98, and
``shared/spec/kafka-produce-v12.txt``. All batch-header integers big-endian.

Batch header (61 bytes)::

    off size field                 type    notes
      0    8 baseOffset            int64   0 from producers; first offset in the log
      8    4 batchLength           int32   bytes after this field: batch size = 12 + batchLength
     12    4 partitionLeaderEpoch  int32   -1 from producers
     16    1 magic                 int8    2
     17    4 crc                   uint32  CRC-32C (Castagnoli) of bytes 21..end
     21    2 attributes            int16   bits 0-2 compression, 3 timestamp type
                                           (1 = LogAppendTime), 4 transactional, 5 control
     23    4 lastOffsetDelta       int32   offset delta of the last record
     27    8 baseTimestamp         int64   ms; timestamp of the first record
     35    8 maxTimestamp          int64   ms; the largest, or the append time for LogAppendTime
     43    8 producerId            int64   -1 when not idempotent
     51    2 producerEpoch         int16   -1 when not idempotent
     53    4 baseSequence          int32   -1 when not idempotent
     57    4 recordCount           int32
     61      records               bytes   compressed as one stream when bits 0-2 are nonzero

The CRC leaves out baseOffset, batchLength and partitionLeaderEpoch, so a broker
can rewrite those without recomputing it.

Record (uncompressed form; varints are zigzag, at most 5 bytes, varlongs at most 10)::

    length             varint   bytes of the record after this field
    attributes         int8     unused, 0
    timestampDelta     varlong  ms, against baseTimestamp
    offsetDelta        varint   against baseOffset
    keyLength          varint   -1 (any negative) = null key
    key                bytes
    valueLength        varint   -1 (any negative) = null value
    value              bytes
    headerCount        varint
    headers            [headerKeyLength varint (>= 0), headerKey UTF-8,
                        headerValueLength varint (-1 = null), headerValue]

Header keys are kept as the raw bytes on the wire (Kafka does not validate
their UTF-8); the builder accepts ``str`` keys and encodes them as UTF-8.

Errors: :class:`CorruptRecord` (2) for a batch shorter than its header or its
buffer, a magic outside 0..2, a CRC mismatch or a section that does not
decompress; :class:`InvalidRecord` (87) for magic 0 or 1 (legacy message sets,
refused from Produce v3+), a batch running past a Produce ``records`` field
(:func:`split_batches`), bad varints, lengths or counts inside the records;
:class:`UnsupportedCompressionType` (76).
"""

from __future__ import annotations

import struct
from typing import Iterable, Iterator, NamedTuple, Sequence

import crc32c as _crc32c_module

from .compression import CompressionType, compress, decompress
from .errors import CorruptRecord, InvalidRecord

HEADER_SIZE = 61
LOG_OVERHEAD = 12
"""baseOffset + batchLength: the bytes before the part batchLength counts."""
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
MIN_LEGACY_BATCH_LENGTH = 14
"""Kafka's ``LegacyRecord.RECORD_OVERHEAD_V0``: below it a batchLength is corrupt whatever the magic."""
MAGIC = 2
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
RECORD_COUNT_OFFSET = 57

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

MIN_RECORD_SIZE = 7
"""length, attributes, timestampDelta, offsetDelta, key, value, headerCount: one byte each."""

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_LENGTH = struct.Struct(">qi")

crc32c = _crc32c_module.crc32c


class BatchHeader(NamedTuple):
    """The 13 fields of a RecordBatch v2 header, in wire order."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int


class Record(NamedTuple):
    """One record of a batch, deltas as on the wire.

    Decoded records hold ``bytes``; the builder also takes memoryviews and
    ``str`` header keys. ``headers`` is a sequence of ``(key, value)`` pairs,
    ``value`` ``None`` for a null header value.
    """

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[bytes, bytes | None]] = ()
    attributes: int = 0


# ---------------------------------------------------------------------------
# varints (zigzag, Kafka ByteUtils)


def wrap_int64(value: int) -> int:
    """``value`` reduced to int64 two's complement (Java ``long`` overflow)."""
    if INT64_MIN <= value <= INT64_MAX:
        return value
    return ((value - INT64_MIN) & 0xFFFFFFFFFFFFFFFF) + INT64_MIN


def zigzag(value: int) -> int:
    """The zigzag form of a signed 64-bit value: 0, -1, 1, -2 -> 0, 1, 2, 3."""
    return (value << 1) if value >= 0 else ((-value) << 1) - 1


def varint_size(value: int) -> int:
    """Bytes a zigzag varint or varlong of ``value`` takes (1..10)."""
    v = (value << 1) if value >= 0 else ((-value) << 1) - 1
    return (v.bit_length() + 6) // 7 or 1


def write_varint(out: bytearray, value: int) -> None:
    """Append ``value`` as a zigzag varint (or varlong: the encoding is the same)."""
    v = (value << 1) if value >= 0 else ((-value) << 1) - 1
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def encode_varint(value: int) -> bytes:
    """``value`` as zigzag varint bytes."""
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


_SMALL_VARINTS = tuple(encode_varint(v) for v in range(-64, 64))
"""The one-byte varints, indexed by value + 64."""


def _read_zigzag(buf, pos: int, end: int, max_bytes: int, field: str) -> tuple[int, int]:
    result = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise InvalidRecord(
                f"{field} varint runs past the end of the records", offset=start, field=field
            )
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if pos - start >= max_bytes:
            raise InvalidRecord(
                f"{field} varint longer than {max_bytes} bytes", offset=start, field=field
            )
    if result.bit_length() > (32 if max_bytes == 5 else 64):
        raise InvalidRecord(f"{field} varint out of range", offset=start, field=field)
    return (result >> 1) ^ -(result & 1), pos


def read_varint(
    buf: bytes | bytearray | memoryview, pos: int, end: int | None = None
) -> tuple[int, int]:
    """Decode a zigzag varint (int32, at most 5 bytes) at ``pos``; returns (value, next pos).

    Raises :class:`InvalidRecord` if it runs past ``end`` (default: the buffer
    end), is longer than 5 bytes or does not fit 32 bits.
    """
    return _read_zigzag(buf, pos, len(buf) if end is None else end, 5, "varint")


def read_varlong(
    buf: bytes | bytearray | memoryview, pos: int, end: int | None = None
) -> tuple[int, int]:
    """Decode a zigzag varlong (int64, at most 10 bytes) at ``pos``; returns (value, next pos).

    Raises :class:`InvalidRecord` like :func:`read_varint`.
    """
    return _read_zigzag(buf, pos, len(buf) if end is None else end, 10, "varlong")


# ---------------------------------------------------------------------------
# records


def iter_record_fields(
    section: memoryview, count: int, *, copy: bool = True
) -> Iterator[Record]:
    """Decode ``count`` records from an uncompressed records section.

    With ``copy=False`` keys, values and header fields are memoryviews into
    ``section`` (no copies); with ``copy=True`` they are ``bytes``.

    Raises :class:`InvalidRecord` (87) for a varint that runs past the end or
    is too long, a negative header count or header key length, a record whose
    fields do not fill exactly its declared length, fewer than ``count``
    records, or bytes left after the last one. ``offset`` in the error is
    inside ``section``.
    """
    end = len(section)
    if count < 0 or count * MIN_RECORD_SIZE > end:
        raise InvalidRecord(
            f"record count {count} does not fit {end} bytes of records", field="recordCount"
        )
    buf = section
    pos = 0
    read = _read_zigzag
    # Every varint takes the one-byte path inline when it can (most do); the
    # general reader handles the rest and every error.
    for index in range(count):
        try:
            b = buf[pos] if pos < end else 0x80
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                length, pos = read(buf, pos, end, 5, "length")
            start = pos
            stop = pos + length
            if length < MIN_RECORD_SIZE - 1 or stop > end:
                raise InvalidRecord(
                    f"record length {length} does not fit the records section",
                    offset=start,
                    field="length",
                )
            attributes = buf[pos]
            b = buf[pos + 1]
            if b < 0x80:
                timestamp_delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                timestamp_delta, pos = read(buf, pos + 1, stop, 10, "timestampDelta")
            b = buf[pos] if pos < stop else 0x80
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                offset_delta, pos = read(buf, pos, stop, 5, "offsetDelta")
            b = buf[pos] if pos < stop else 0x80
            if b < 0x80:
                key_length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                key_length, pos = read(buf, pos, stop, 5, "keyLength")
            if key_length >= 0:
                if pos + key_length > stop:
                    raise InvalidRecord("key runs past the record", offset=pos, field="key")
                key = buf[pos : pos + key_length]
                pos += key_length
                if copy:
                    key = bytes(key)
            else:
                key = None
            b = buf[pos] if pos < stop else 0x80
            if b < 0x80:
                value_length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                value_length, pos = read(buf, pos, stop, 5, "valueLength")
            if value_length >= 0:
                if pos + value_length > stop:
                    raise InvalidRecord("value runs past the record", offset=pos, field="value")
                value = buf[pos : pos + value_length]
                pos += value_length
                if copy:
                    value = bytes(value)
            else:
                value = None
            b = buf[pos] if pos < stop else 0x80
            if b == 0:
                pos += 1
                headers = ()
            else:
                header_count, pos = read(buf, pos, stop, 5, "headerCount")
                if header_count < 0 or header_count * 2 > stop - pos:
                    raise InvalidRecord(
                        f"invalid header count {header_count}", offset=pos, field="headerCount"
                    )
                header_list = []
                for _ in range(header_count):
                    hk_length, pos = read(buf, pos, stop, 5, "headerKeyLength")
                    if hk_length < 0 or pos + hk_length > stop:
                        raise InvalidRecord(
                            f"invalid header key length {hk_length}", offset=pos, field="headerKey"
                        )
                    hkey = buf[pos : pos + hk_length]
                    pos += hk_length
                    hv_length, pos = read(buf, pos, stop, 5, "headerValueLength")
                    if hv_length >= 0:
                        if pos + hv_length > stop:
                            raise InvalidRecord(
                                "header value runs past the record", offset=pos, field="headerValue"
                            )
                        hvalue = buf[pos : pos + hv_length]
                        pos += hv_length
                        if copy:
                            hvalue = bytes(hvalue)
                    else:
                        hvalue = None
                    header_list.append((bytes(hkey) if copy else hkey, hvalue))
                headers = tuple(header_list)
            if pos != stop:
                raise InvalidRecord(
                    f"record declares {length} bytes but its fields take {pos - start}",
                    offset=start,
                    field="length",
                )
        except InvalidRecord as exc:
            exc.record_index = index
            exc.record_errors = ((index, exc.message),)
            raise
        yield Record(offset_delta, timestamp_delta, key, value, headers, attributes)
    if pos != end:
        raise InvalidRecord(
            f"{end - pos} bytes left after {count} records", offset=pos, field="recordCount"
        )


def record_size(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
    headers: Sequence[tuple[bytes, bytes | bytearray | memoryview | None]] = (),
) -> int:
    """Bytes the record takes after its length varint (header keys as bytes)."""
    size = 1 + varint_size(timestamp_delta) + varint_size(offset_delta)
    if key is None:
        size += 1
    else:
        n = len(key)
        size += varint_size(n) + n
    if value is None:
        size += 1
    else:
        n = len(value)
        size += varint_size(n) + n
    size += varint_size(len(headers))
    for hkey, hvalue in headers:
        n = len(hkey)
        size += varint_size(n) + n
        if hvalue is None:
            size += 1
        else:
            n = len(hvalue)
            size += varint_size(n) + n
    return size


def encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
    headers: Sequence[tuple[bytes | str, bytes | bytearray | memoryview | None]] = (),
    attributes: int = 0,
) -> None:
    """Append one record (length varint first) to ``out``.

    ``offset_delta`` must fit int32, ``timestamp_delta`` int64 (ms); ``str``
    header keys are encoded as UTF-8. Raises ``ValueError`` otherwise.
    """
    if not INT32_MIN <= offset_delta <= INT32_MAX:
        raise ValueError(f"offset delta {offset_delta} does not fit int32")
    if not INT64_MIN <= timestamp_delta <= INT64_MAX:
        raise ValueError(f"timestamp delta {timestamp_delta} does not fit int64")
    small = _SMALL_VARINTS
    # Everything before the value and everything after it are short: build
    # them apart so the value is copied once, straight into ``out``.
    head = bytearray((attributes & 0xFF,))
    t, o = timestamp_delta, offset_delta
    head += small[t + 64] if -64 <= t < 64 else encode_varint(t)
    head += small[o + 64] if -64 <= o < 64 else encode_varint(o)
    if key is None:
        head.append(1)
    else:
        n = len(key)
        head += small[n + 64] if n < 64 else encode_varint(n)
        head += key
    if value is None:
        head.append(1)
        value_length = 0
    else:
        value_length = len(value)
        head += small[value_length + 64] if value_length < 64 else encode_varint(value_length)
    if headers:
        tail = bytearray()
        write_varint(tail, len(headers))
        for hkey, hvalue in headers:
            if isinstance(hkey, str):
                hkey = hkey.encode("utf-8")
            write_varint(tail, len(hkey))
            tail += hkey
            if hvalue is None:
                tail.append(1)
            else:
                write_varint(tail, len(hvalue))
                tail += hvalue
    else:
        tail = b"\x00"
    size = len(head) + value_length + len(tail)
    out += small[size + 64] if size < 64 else encode_varint(size)
    out += head
    if value_length:
        out += value
    out += tail


# ---------------------------------------------------------------------------
# the view


class RecordBatchView:
    """A RecordBatch v2 read lazily from a buffer: header fields on demand, records on iteration.

    The constructor checks only what it must to trust the frame: at least 61
    bytes, ``batchLength`` >= 49 and inside the buffer, magic 2. ``buffer`` is
    then a memoryview of exactly ``12 + batchLength`` bytes (a longer buffer is
    cut; see :func:`split_batches` for several batches). Nothing is copied.

    Raises :class:`CorruptRecord` (2) for a short buffer, a ``batchLength``
    below 14 or past the buffer, a magic outside 0..2, or a magic 2 batch
    with ``batchLength`` below 49; :class:`InvalidRecord` (87) for magic 0
    or 1 (a legacy message set: Kafka's ``ProduceRequest.validateRecords``
    refuses it from Produce v3+ with INVALID_RECORD; only magic < 0 or > 2
    is a ``CorruptRecordException`` in ``ByteBufferLogInputStream``).
    """

    __slots__ = ("buffer",)

    def __init__(self, data: bytes | bytearray | memoryview):
        mv = memoryview(data)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        if len(mv) < MAGIC_OFFSET + 1:
            raise CorruptRecord(
                f"record batch needs {HEADER_SIZE} header bytes, got {len(mv)}", offset=len(mv)
            )
        (batch_length,) = _I32.unpack_from(mv, 8)
        if batch_length < MIN_LEGACY_BATCH_LENGTH:
            raise CorruptRecord(
                f"batchLength {batch_length} is below the minimum {MIN_LEGACY_BATCH_LENGTH}",
                offset=8,
                field="batchLength",
            )
        magic = _I8.unpack_from(mv, MAGIC_OFFSET)[0]
        if not 0 <= magic <= MAGIC:
            raise CorruptRecord(f"invalid magic {magic}", offset=MAGIC_OFFSET, field="magic")
        if LOG_OVERHEAD + batch_length > len(mv):
            raise CorruptRecord(
                f"batchLength {batch_length} runs past the {len(mv)} bytes given",
                offset=8,
                field="batchLength",
            )
        if magic != MAGIC:
            raise InvalidRecord(
                f"magic {magic}: only record batches with magic 2 are accepted",
                offset=MAGIC_OFFSET,
                field="magic",
            )
        if batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecord(
                f"batchLength {batch_length} is below the minimum {MIN_BATCH_LENGTH}",
                offset=8,
                field="batchLength",
            )
        self.buffer = mv[: LOG_OVERHEAD + batch_length]

    # header fields -------------------------------------------------------

    def header(self) -> BatchHeader:
        """All 13 header fields in one unpack."""
        return BatchHeader._make(_HEADER.unpack_from(self.buffer, 0))

    @property
    def size(self) -> int:
        """Total batch size in bytes: 12 + batchLength."""
        return len(self.buffer)

    @property
    def base_offset(self) -> int:
        return _I64.unpack_from(self.buffer, 0)[0]

    @property
    def batch_length(self) -> int:
        return _I32.unpack_from(self.buffer, 8)[0]

    @property
    def partition_leader_epoch(self) -> int:
        return _I32.unpack_from(self.buffer, 12)[0]

    @property
    def magic(self) -> int:
        return self.buffer[MAGIC_OFFSET]

    @property
    def crc(self) -> int:
        return _U32.unpack_from(self.buffer, CRC_OFFSET)[0]

    @property
    def attributes(self) -> int:
        return _I16.unpack_from(self.buffer, ATTRIBUTES_OFFSET)[0]

    @property
    def compression(self) -> int:
        """Attributes bits 0..2: the compression id (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)."""
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """Attributes bit 3: 0 CreateTime, 1 LogAppendTime."""
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def last_offset_delta(self) -> int:
        return _I32.unpack_from(self.buffer, 23)[0]

    @property
    def base_timestamp(self) -> int:
        return _I64.unpack_from(self.buffer, 27)[0]

    @property
    def max_timestamp(self) -> int:
        return _I64.unpack_from(self.buffer, 35)[0]

    @property
    def producer_id(self) -> int:
        return _I64.unpack_from(self.buffer, 43)[0]

    @property
    def producer_epoch(self) -> int:
        return _I16.unpack_from(self.buffer, 51)[0]

    @property
    def base_sequence(self) -> int:
        return _I32.unpack_from(self.buffer, 53)[0]

    @property
    def record_count(self) -> int:
        return _I32.unpack_from(self.buffer, RECORD_COUNT_OFFSET)[0]

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    # integrity -------------------------------------------------------------

    def compute_crc(self) -> int:
        """CRC-32C of bytes 21..end (attributes to the end of the batch)."""
        return crc32c(self.buffer[ATTRIBUTES_OFFSET:])

    def verify_crc(self) -> None:
        """Raise :class:`CorruptRecord` (2) unless the stored CRC matches bytes 21..end."""
        stored = self.crc
        computed = self.compute_crc()
        if stored != computed:
            raise CorruptRecord(
                f"crc {stored:#010x} != computed {computed:#010x}", offset=CRC_OFFSET, field="crc"
            )

    # records ---------------------------------------------------------------

    def records_section(self, *, max_bytes: int | None = None) -> memoryview:
        """The records after the header, decompressed if the attributes say so.

        Raises :class:`UnsupportedCompressionType` (76), :class:`CorruptRecord`
        (2) or :class:`MessageTooLarge` (10, over ``max_bytes``).
        """
        raw = self.buffer[HEADER_SIZE:]
        codec = self.compression
        if codec == CompressionType.NONE:
            return raw
        return memoryview(decompress(codec, raw, max_bytes=max_bytes))

    def records(self, *, copy: bool = True, max_bytes: int | None = None) -> Iterator[Record]:
        """Decode the records (after decompression); see :func:`iter_record_fields`.

        Does not check the CRC (call :meth:`verify_crc` first).
        """
        return iter_record_fields(
            self.records_section(max_bytes=max_bytes), self.record_count, copy=copy
        )

    __iter__ = records

    def timestamp_of(self, record: Record) -> int:
        """A record's timestamp (ms): maxTimestamp for LogAppendTime, else baseTimestamp + delta
        (wrapping at int64 as Java's long arithmetic does)."""
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return self.max_timestamp
        return wrap_int64(self.base_timestamp + record.timestamp_delta)

    def offset_of(self, record: Record) -> int:
        """A record's offset: baseOffset + offsetDelta."""
        return self.base_offset + record.offset_delta


def split_batches(
    data: bytes | bytearray | memoryview, *, allow_partial: bool = False
) -> list[memoryview]:
    """Cut a concatenation of record batches (a Produce or Fetch ``records`` field) into batches.

    Cuts as Kafka's ``ByteBufferLogInputStream`` does, from the 12-byte
    ``[baseOffset int64][batchLength int32]`` prefix and the magic byte of
    each; CRC and the v2 header are checked later by :class:`RecordBatchView`.
    With ``allow_partial`` a truncated last batch (as a Fetch response may
    end with) is dropped; otherwise it raises. Note that Kafka accepts exactly
    one batch per partition in Produce v3+; enforcing that is the caller's job.

    Raises :class:`CorruptRecord` (2) for a batchLength below 14 (the
    smallest legacy message) or a magic outside 0..2; :class:`InvalidRecord`
    (87) for a batch (or its 12-byte prefix) running past the data: Kafka's
    reader yields no batch there, and Produce answers INVALID_RECORD ("must
    have at least one record batch per partition").
    """
    mv = memoryview(data)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    out = []
    pos, end = 0, len(mv)
    while pos < end:
        if pos + LOG_OVERHEAD > end:
            if allow_partial:
                break
            raise InvalidRecord(
                f"{end - pos} bytes left, not a record batch", offset=pos, field="batchLength"
            )
        _, batch_length = _LENGTH.unpack_from(mv, pos)
        if batch_length < MIN_LEGACY_BATCH_LENGTH:
            raise CorruptRecord(
                f"batchLength {batch_length} is below the minimum {MIN_LEGACY_BATCH_LENGTH}",
                offset=pos + 8,
                field="batchLength",
            )
        if pos + MAGIC_OFFSET < end:
            magic = _I8.unpack_from(mv, pos + MAGIC_OFFSET)[0]
            if not 0 <= magic <= MAGIC:
                raise CorruptRecord(
                    f"invalid magic {magic}", offset=pos + MAGIC_OFFSET, field="magic"
                )
        stop = pos + LOG_OVERHEAD + batch_length
        if stop > end:
            if allow_partial:
                break
            raise InvalidRecord(
                f"record batch of {stop - pos} bytes runs past the {end - pos} left",
                offset=pos + 8,
                field="batchLength",
            )
        out.append(mv[pos:stop])
        pos = stop
    return out


# ---------------------------------------------------------------------------
# building


def finish_record_batch(
    records: bytes | bytearray | memoryview,
    record_count: int,
    *,
    base_offset: int = 0,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    compression: int = CompressionType.NONE,
    timestamp_type: int = CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    xerial: bool = True,
    level: int | None = None,
) -> bytes:
    """Wrap already-encoded records (see :func:`encode_record`) in a v2 batch header.

    Compresses ``records`` with ``compression`` (``xerial``/``level`` as in
    :func:`compression.compress`), sets the attributes bits, batchLength and
    the CRC-32C. Times are ms.
    """
    if compression != CompressionType.NONE:
        records = compress(compression, records, xerial=xerial, level=level)
    attributes = compression & COMPRESSION_MASK
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    header = bytearray(HEADER_SIZE)
    _HEADER.pack_into(
        header,
        0,
        base_offset,
        HEADER_SIZE + len(records) - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    # the CRC runs on from the header's tail into the records, which are copied once (into the result)
    _U32.pack_into(header, CRC_OFFSET, crc32c(records, crc32c(memoryview(header)[ATTRIBUTES_OFFSET:])))
    return bytes(header) + records


def build_record_batch(
    records: Iterable[Record | tuple],
    *,
    base_timestamp: int,
    max_timestamp: int | None = None,
    base_offset: int = 0,
    last_offset_delta: int | None = None,
    compression: int = CompressionType.NONE,
    timestamp_type: int = CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    xerial: bool = True,
    level: int | None = None,
) -> bytes:
    """Encode records into a valid RecordBatch v2 (uncompressed or with any codec).

    ``records`` are :class:`Record` values (or tuples in its field order),
    deltas against ``base_offset`` and ``base_timestamp`` (ms).
    ``max_timestamp`` defaults to the largest record timestamp (base + delta,
    wrapped at int64; LogAppendTime needs it given), or ``base_timestamp``
    for no records.
    ``last_offset_delta`` defaults to the last record's offset delta (-1 when
    empty). Other arguments as in :func:`finish_record_batch`.

    Raises ``ValueError`` for deltas that do not fit int32/int64.
    """
    body = bytearray()
    count = 0
    last = -1
    largest = None
    for record in records:
        offset_delta, timestamp_delta, key, value, *rest = record
        headers = rest[0] if rest else ()
        attributes = rest[1] if len(rest) > 1 else 0
        encode_record(body, offset_delta, timestamp_delta, key, value, headers, attributes)
        count += 1
        last = offset_delta
        timestamp = wrap_int64(base_timestamp + timestamp_delta)
        if largest is None or timestamp > largest:
            largest = timestamp
    if max_timestamp is None:
        max_timestamp = base_timestamp if largest is None else largest
    return finish_record_batch(
        body,
        count,
        base_offset=base_offset,
        last_offset_delta=last if last_offset_delta is None else last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        compression=compression,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        is_control=is_control,
        partition_leader_epoch=partition_leader_epoch,
        xerial=xerial,
        level=level,
    )


# ---------------------------------------------------------------------------
# transactions (KIP-98)

_PRODUCER = struct.Struct(">qh")  # producerId int64 at 43, producerEpoch int16 at 51
_ATTRIBUTES = struct.Struct(">h")  # attributes int16 at 21
_CONTROL_RECORD = struct.Struct(">hhhi")  # key: version, type; value: version, coordinatorEpoch


def with_producer(batch: bytes | bytearray | memoryview, producer_id: int, producer_epoch: int, *,
                  transactional: bool) -> bytes:
    """A copy of a RecordBatch v2 with producerId (int64 at 43), producerEpoch (int16 at 51)
    and the transactional attribute bit (0x10 of the int16 at 21) set, and its CRC-32C
    (at 17, over 21..end) recomputed. Per batch: the records are not touched.
    Source: Kafka ``DefaultRecordBatch`` (layout above)."""
    out = bytearray(batch)
    _PRODUCER.pack_into(out, 43, producer_id, producer_epoch)
    (attributes,) = _ATTRIBUTES.unpack_from(out, ATTRIBUTES_OFFSET)
    attributes = (attributes | TRANSACTIONAL_MASK) if transactional else (attributes & ~TRANSACTIONAL_MASK)
    _ATTRIBUTES.pack_into(out, ATTRIBUTES_OFFSET, attributes)
    _U32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def control_batch(base_offset: int, timestamp_ms: int, producer_id: int, producer_epoch: int, committed: bool,
                  coordinator_epoch: int = 0, partition_leader_epoch: int = 0) -> bytes:
    """A control batch (attributes: transactional | control) holding one end-transaction
    marker record: key = version int16 0 | type int16 (0 ABORT, 1 COMMIT), value =
    version int16 0 | coordinatorEpoch int32 (Kafka ``EndTransactionMarker``)."""
    key = _CONTROL_RECORD.pack(0, 1 if committed else 0, 0, coordinator_epoch)
    return build_record_batch(
        [(0, 0, key[:4], key[4:])],
        base_timestamp=timestamp_ms,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def control_type(batch: bytes | bytearray | memoryview) -> int | None:
    """For a control batch, its first record's type (0 ABORT, 1 COMMIT); None otherwise."""
    view = RecordBatchView(batch)
    if not view.is_control:
        return None
    for record in view.records():
        return struct.unpack(">hh", bytes(record.key)[:4])[1]
    return None
