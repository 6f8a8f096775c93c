"""The Iggy message batch: the one layout messages travel and rest in.

Source: Iggy binary protocol 0.11.0, ``messages.mdx`` ("Message batches"), and
``shared/spec/iggy-message-batches.md``. All integers little-endian.

Batch header (256 bytes)::

    off size field             type  notes
      0    8 partition_id      u64   server-stamped at admission
      8    8 base_offset       u64   server-stamped at append
     16    8 base_timestamp    u64   server-stamped at append, microseconds
     24    8 origin_timestamp  u64   earliest producer time in the batch, microseconds
     32    8 batch_length      u64   256 + blob length
     40    8 batch_checksum    u64   xxh3_64(pack('<5QI', fields 0..40 and 48) + frame checksums)
     48    4 message_count     u32   frames in the blob
     52  204 reserved                must be zero

Frame (48-byte header, then payload, then user headers)::

    off size field                type
      0    8 checksum             u64   xxh3_64(frame[8:])
      8   16 id                   u128
     24    4 offset_delta         u32   offset = base_offset + offset_delta
     28    4 timestamp_delta      u32   producer time = origin_timestamp + delta (µs)
     32    4 user_headers_length  u32
     36    4 payload_length       u32
     40    8 reserved             u64   must be zero

Everything here is pure: bytes or memoryviews in, bytes or values out. No
sockets, files or clocks. Hot paths use ``struct.Struct`` objects built at
import and ``unpack_from``/``pack_into``; payloads are never copied while
walking.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable, Iterator, NamedTuple

import xxhash

from .errors import (
    InvalidBatchChecksum,
    InvalidFormat,
    InvalidMessageChecksum,
    InvalidMessagesCount,
    InvalidMessageTimestampDelta,
    InvalidReservedField,
)

BATCH_HEADER_SIZE = 256
FRAME_HEADER_SIZE = 48
BATCH_CHECKSUM_OFFSET = 40
MESSAGE_COUNT_OFFSET = 48
BATCH_RESERVED_OFFSET = 52
MAX_TIMESTAMP_DELTA_US = 0xFFFFFFFF
"""A batch spans at most u32::MAX microseconds (about 71.6 minutes) of producer clock."""

_HEADER = struct.Struct("<QQQQQQI")  # partition_id .. message_count (52 bytes)
_CHECKSUM_FIELDS = struct.Struct("<QQQQQI")  # the fields the batch checksum covers, in order
_STAMP = struct.Struct("<QQQ")  # partition_id, base_offset, base_timestamp at 0..24
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_FRAME = struct.Struct("<Q16sIIIIQ")
_FRAME_LENGTHS = struct.Struct("<II")  # user_headers_length, payload_length at 32..40
_ZERO_RESERVED = bytes(BATCH_HEADER_SIZE - BATCH_RESERVED_OFFSET)

_xxh3 = xxhash.xxh3_64_intdigest
_xxh3_new = xxhash.xxh3_64


class BatchHeader(NamedTuple):
    """The decoded fields of a 256-byte batch header (reserved bytes not included)."""

    partition_id: int
    base_offset: int
    base_timestamp: int
    origin_timestamp: int
    batch_length: int
    batch_checksum: int
    message_count: int

    @property
    def last_offset(self) -> int:
        """Offset of the last frame, assuming offset_delta = index (what admission enforces)."""
        return self.base_offset + self.message_count - 1


class Frame(NamedTuple):
    """One frame of a batch. ``payload`` and ``user_headers`` are memoryviews into the batch."""

    checksum: int
    id: int
    offset_delta: int
    timestamp_delta: int
    payload: memoryview
    user_headers: memoryview
    position: int
    """Byte offset of the frame header inside the batch."""

    @property
    def size(self) -> int:
        return FRAME_HEADER_SIZE + len(self.payload) + len(self.user_headers)


@dataclass(frozen=True, slots=True)
class Message:
    """A message as a producer hands it to :func:`build_batch`.

    ``id`` is a u128 (0 lets the producer side leave it unset), ``origin_timestamp``
    is the producer clock in microseconds, ``user_headers`` an encoded TLV block
    (see :mod:`headwater.codec.headers`) or ``b""``.
    """

    payload: bytes
    id: int = 0
    origin_timestamp: int = 0
    user_headers: bytes = b""


def read_header(batch: bytes | bytearray | memoryview) -> BatchHeader:
    """Decode the first 256 bytes of ``batch``.

    Raises :class:`InvalidFormat` if fewer than 256 bytes are given.
    """
    if len(batch) < BATCH_HEADER_SIZE:
        raise InvalidFormat(
            f"batch header needs {BATCH_HEADER_SIZE} bytes, got {len(batch)}", offset=len(batch)
        )
    return BatchHeader._make(_HEADER.unpack_from(batch, 0))


def build_batch(messages: Iterable[Message]) -> bytes:
    """Encode messages into an unstamped batch, as a producer does.

    Frames get ``offset_delta`` = their index, ``timestamp_delta`` = their
    ``origin_timestamp`` minus the batch's (the smallest), and producer
    checksums. ``partition_id``, ``base_offset`` and ``base_timestamp`` are zero;
    the batch checksum is computed over those zeros.

    Raises :class:`InvalidMessageTimestampDelta` if the messages span more than
    ``MAX_TIMESTAMP_DELTA_US``; :class:`InvalidFormat` for an empty list.
    """
    messages = list(messages)
    if not messages:
        raise InvalidFormat("a batch needs at least one message")
    origin = min(m.origin_timestamp for m in messages)
    frames = bytearray()
    checksums = bytearray()
    for index, m in enumerate(messages):
        delta = m.origin_timestamp - origin
        if delta > MAX_TIMESTAMP_DELTA_US:
            raise InvalidMessageTimestampDelta(
                f"message spans {delta} µs past the batch origin", frame_index=index
            )
        start = len(frames)
        frames += _FRAME.pack(
            0,
            m.id.to_bytes(16, "little"),
            index,
            delta,
            len(m.user_headers),
            len(m.payload),
            0,
        )
        frames += m.payload
        frames += m.user_headers
        checksum = _xxh3(memoryview(frames)[start + 8 :])
        _U64.pack_into(frames, start, checksum)
        checksums += _U64.pack(checksum)
    batch_length = BATCH_HEADER_SIZE + len(frames)
    header = bytearray(BATCH_HEADER_SIZE)
    _HEADER.pack_into(header, 0, 0, 0, 0, origin, batch_length, 0, len(messages))
    checksum = _batch_checksum_from(0, 0, 0, origin, batch_length, len(messages), checksums)
    _U64.pack_into(header, BATCH_CHECKSUM_OFFSET, checksum)
    return bytes(header + frames)


def _batch_checksum_from(
    partition_id: int,
    base_offset: int,
    base_timestamp: int,
    origin_timestamp: int,
    batch_length: int,
    message_count: int,
    frame_checksums: bytes | bytearray | memoryview,
) -> int:
    h = _xxh3_new(
        _CHECKSUM_FIELDS.pack(
            partition_id, base_offset, base_timestamp, origin_timestamp, batch_length, message_count
        )
    )
    h.update(frame_checksums)
    return h.intdigest()


def iter_frames(batch: bytes | bytearray | memoryview) -> Iterator[Frame]:
    """Walk the frames of a batch lazily without copying payloads.

    Checks only that each frame lies inside ``batch_length``; use
    :func:`verify` for full admission validation.
    Raises :class:`InvalidFormat` on a frame that runs past the blob.
    """
    mv = memoryview(batch)
    header = read_header(mv)
    end = header.batch_length
    if end > len(mv) or end < BATCH_HEADER_SIZE:
        raise InvalidFormat(
            f"batch_length {end} does not fit the {len(mv)} bytes given", offset=32
        )
    pos = BATCH_HEADER_SIZE
    index = 0
    while pos < end:
        if pos + FRAME_HEADER_SIZE > end:
            raise InvalidFormat("truncated frame header", offset=pos, frame_index=index)
        checksum, id_bytes, offset_delta, ts_delta, headers_len, payload_len, _ = _FRAME.unpack_from(
            mv, pos
        )
        payload_start = pos + FRAME_HEADER_SIZE
        headers_start = payload_start + payload_len
        frame_end = headers_start + headers_len
        if frame_end > end:
            raise InvalidFormat("frame runs past the end of the batch", offset=pos, frame_index=index)
        yield Frame(
            checksum,
            int.from_bytes(id_bytes, "little"),
            offset_delta,
            ts_delta,
            mv[payload_start:headers_start],
            mv[headers_start:frame_end],
            pos,
        )
        pos = frame_end
        index += 1


def verify(batch: bytes | bytearray | memoryview, *, check_offset_deltas: bool = True) -> BatchHeader:
    """Admission validation of a whole batch; returns its header.

    Checks, in order: header size; ``batch_length`` equals ``len(batch)``;
    reserved bytes 52..256 zero; every frame inside the blob with its reserved
    bytes 40..48 zero and its checksum right; ``offset_delta`` equal to the
    frame index (when ``check_offset_deltas``); ``message_count`` equal to the
    frames walked and nonzero; the batch checksum.

    Raises :class:`InvalidFormat` (4), :class:`InvalidReservedField` (4101),
    :class:`InvalidMessageChecksum` (4027), :class:`InvalidMessagesCount` (4009)
    or :class:`InvalidBatchChecksum` (4039). The u32 ``timestamp_delta`` cannot
    exceed the 71.6-minute bound by construction.
    """
    mv = memoryview(batch)
    header = read_header(mv)
    size = len(mv)
    if header.batch_length != size:
        raise InvalidFormat(
            f"batch_length {header.batch_length} != {size} bytes given", offset=32
        )
    if mv[BATCH_RESERVED_OFFSET:BATCH_HEADER_SIZE] != _ZERO_RESERVED:
        raise InvalidReservedField("batch header reserved bytes 52..256 are not zero", offset=52)
    frame_unpack = _FRAME.unpack_from
    xxh = _xxh3
    checksums = bytearray()
    pos = BATCH_HEADER_SIZE
    index = 0
    while pos < size:
        if pos + FRAME_HEADER_SIZE > size:
            raise InvalidFormat("truncated frame header", offset=pos, frame_index=index)
        checksum, _, offset_delta, _, headers_len, payload_len, reserved = frame_unpack(mv, pos)
        frame_end = pos + FRAME_HEADER_SIZE + payload_len + headers_len
        if frame_end > size:
            raise InvalidFormat(
                "frame runs past the end of the batch", offset=pos, frame_index=index
            )
        if reserved:
            raise InvalidReservedField(
                "frame reserved bytes 40..48 are not zero", offset=pos + 40, frame_index=index
            )
        if check_offset_deltas and offset_delta != index:
            raise InvalidFormat(
                f"offset_delta {offset_delta} != frame index {index}",
                offset=pos + 24,
                frame_index=index,
            )
        computed = xxh(mv[pos + 8 : frame_end])
        if computed != checksum:
            raise InvalidMessageChecksum(
                f"frame checksum {checksum:#018x} != computed {computed:#018x}",
                offset=pos,
                frame_index=index,
            )
        checksums += mv[pos : pos + 8]
        pos = frame_end
        index += 1
    if index != header.message_count or index == 0:
        raise InvalidMessagesCount(
            f"message_count {header.message_count} but {index} frames in the blob", offset=48
        )
    computed = _batch_checksum_from(
        header.partition_id,
        header.base_offset,
        header.base_timestamp,
        header.origin_timestamp,
        header.batch_length,
        header.message_count,
        checksums,
    )
    if computed != header.batch_checksum:
        raise InvalidBatchChecksum(
            f"batch checksum {header.batch_checksum:#018x} != computed {computed:#018x}",
            offset=BATCH_CHECKSUM_OFFSET,
        )
    return header


def frame_checksums(batch: bytes | bytearray | memoryview) -> bytes:
    """The concatenated 8-byte checksums of every frame, in order (no verification)."""
    out = bytearray()
    for frame in iter_frames(batch):
        out += _U64.pack(frame.checksum)
    return bytes(out)


def compute_batch_checksum(batch: bytes | bytearray | memoryview) -> int:
    """The batch checksum the header fields and frame checksums of ``batch`` call for."""
    h = read_header(batch)
    return _batch_checksum_from(
        h.partition_id,
        h.base_offset,
        h.base_timestamp,
        h.origin_timestamp,
        h.batch_length,
        h.message_count,
        frame_checksums(batch),
    )


def stamp(
    batch: bytearray | memoryview,
    partition_id: int,
    base_offset: int,
    base_timestamp: int,
    frame_checksum_bytes: bytes | bytearray | memoryview | None = None,
) -> None:
    """Stamp a verified batch in place; frames are left untouched.

    Writes ``partition_id``, ``base_offset``, ``base_timestamp`` (u64 LE,
    microseconds) at bytes 0..24 and the recomputed ``batch_checksum`` at
    40..48. ``frame_checksum_bytes`` (the frames' checksums concatenated) may
    be passed when the caller already has them, to skip the walk.
    """
    _STAMP.pack_into(batch, 0, partition_id, base_offset, base_timestamp)
    h = read_header(batch)
    if frame_checksum_bytes is None:
        frame_checksum_bytes = frame_checksums(batch)
    checksum = _batch_checksum_from(
        partition_id,
        base_offset,
        base_timestamp,
        h.origin_timestamp,
        h.batch_length,
        h.message_count,
        frame_checksum_bytes,
    )
    _U64.pack_into(batch, BATCH_CHECKSUM_OFFSET, checksum)


def slice_batch(batch: bytes | bytearray | memoryview, start: int, stop: int) -> bytes:
    """Frames ``[start, stop)`` of a stored batch, as a valid batch.

    ``partition_id``, ``base_offset``, ``base_timestamp`` and
    ``origin_timestamp`` are kept, so each frame's offset stays
    ``base_offset + offset_delta``; frames are byte-identical; ``batch_length``,
    ``message_count`` and ``batch_checksum`` are recomputed. What a poll that
    starts or ends mid-batch returns. Returns ``bytes(batch)`` for the whole range.

    Raises :class:`InvalidFormat` for an empty or out-of-range slice.
    """
    mv = memoryview(batch)
    h = read_header(mv)
    if not 0 <= start < stop <= h.message_count:
        raise InvalidFormat(f"slice [{start}, {stop}) outside 0..{h.message_count}")
    if start == 0 and stop == h.message_count:
        return bytes(mv[: h.batch_length])
    first = last = None
    checksums = bytearray()
    for index, frame in enumerate(iter_frames(mv)):
        if index < start:
            continue
        if index >= stop:
            break
        if first is None:
            first = frame.position
        last = frame.position + frame.size
        checksums += _U64.pack(frame.checksum)
    assert first is not None and last is not None
    count = stop - start
    batch_length = BATCH_HEADER_SIZE + (last - first)
    out = bytearray(batch_length)
    out[:BATCH_HEADER_SIZE] = mv[:BATCH_HEADER_SIZE]
    out[BATCH_HEADER_SIZE:] = mv[first:last]
    _U64.pack_into(out, 32, batch_length)
    _U32.pack_into(out, MESSAGE_COUNT_OFFSET, count)
    checksum = _batch_checksum_from(
        h.partition_id, h.base_offset, h.base_timestamp, h.origin_timestamp, batch_length, count, checksums
    )
    _U64.pack_into(out, BATCH_CHECKSUM_OFFSET, checksum)
    return bytes(out)
