"""The Iggy message batch: the one layout messages travel and rest in.

Source: Iggy binary protocol 0.11.0, ``messages.mdx`` ("Message batches"), and
``shared/spec/iggy-message-batches.md``; checked against the Iggy crate
``core/binary_protocol/src/batch.rs``. All integers little-endian.

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

The batch checksum covers the six header fields (``partition_id``,
``base_offset``, ``base_timestamp``, ``origin_timestamp``, ``batch_length``,
``message_count``: ``struct.pack('<5QI', ...)``) followed by each frame's
8 stored checksum bytes in order; it binds the frame bodies only through the
frame checksums, so a validating reader re-hashes every frame (``verify``).

Everything here is pure: bytes or memoryviews in, bytes or values out. No
sockets, files or clocks. Hot paths use ``struct.Struct`` objects built at
import and ``unpack_from``/``pack_into``; payloads are never copied while
walking. The per-frame loops (``_py_verify_frames``, ``_py_walk``,
``_py_span``) carry no error bookkeeping: on anything odd they give up and the
reference walk ``_diagnose`` finds and raises the precise error.

Those loops have a compiled twin, ``headwater.codec._batch_c`` (Cython; its
XXH3-64 is the xxHash library's own, the function ``xxhash.xxh3_64_intdigest``
runs, through ``headwater.codec._xxh3_c``): used when it is built and ``HEADWATER_NO_EXTENSIONS=1`` is
not set (:func:`implementation`, :func:`use_implementation`). The Python loops
here stay the specification; the compiled ones must return exactly what they
return (``tests/unit/codec/test_batch_native.py``), so every error is still
raised by the same Python code. See ``docs/benchmarks.md`` for the speed of
both and where the time goes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable, Iterator, NamedTuple, NoReturn, Sequence

import xxhash

from .. import _native
from .errors import (
    FrameOutOfBounds,
    InvalidBatchChecksum,
    InvalidBatchLength,
    InvalidFormat,
    InvalidMessageChecksum,
    InvalidMessagesCount,
    InvalidMessageTimestampDelta,
    InvalidOffsetDelta,
    InvalidReservedField,
    TruncatedBatch,
)

BATCH_HEADER_SIZE = 256
FRAME_HEADER_SIZE = 48
BATCH_LENGTH_OFFSET = 32
BATCH_CHECKSUM_OFFSET = 40
MESSAGE_COUNT_OFFSET = 48
BATCH_RESERVED_OFFSET = 52
FRAME_RESERVED_OFFSET = 40
MAX_TIMESTAMP_DELTA_US = 0xFFFFFFFF
"""A batch spans at most u32::MAX microseconds (about 71.6 minutes) of producer clock."""
MAX_MESSAGE_COUNT = 0xFFFFFFFF

_U64_MAX = 0xFFFFFFFFFFFFFFFF
_ORIGIN_SAFE_MAX = _U64_MAX - MAX_TIMESTAMP_DELTA_US
"""Up to this origin_timestamp no u32 delta can push producer time past u64."""

_HEADER = struct.Struct("<QQQQQQI")  # partition_id .. message_count (52 bytes)
_CHECKSUM_FIELDS = struct.Struct("<QQQQQI")  # the fields the batch checksum covers, in order
_STAMP = struct.Struct("<QQQ")  # partition_id, base_offset, base_timestamp at 0..24
_ORIGIN_LENGTH = struct.Struct("<24xQQ8xI")  # origin_timestamp, batch_length, message_count
_RESERVED = struct.Struct(f"<{BATCH_HEADER_SIZE - BATCH_RESERVED_OFFSET}s")
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_FRAME = struct.Struct("<QQQIIIIQ")  # checksum, id lo, id hi, deltas, lengths, reserved
_FRAME_BODY = struct.Struct("<QQIIIIQ")  # frame bytes 8..48, what build_batch writes
# Hot-loop views of a frame header: only the fields each loop needs.
_FRAME_VERIFY = struct.Struct("<Q16xI4xIIQ")  # checksum, offset_delta, uh_len, p_len, reserved
_FRAME_WALK = struct.Struct("<Q24xII")  # checksum, user_headers_length, payload_length
_ZERO_RESERVED = bytes(BATCH_HEADER_SIZE - BATCH_RESERVED_OFFSET)

_xxh3 = xxhash.xxh3_64_intdigest
_struct_error = struct.error
_new_tuple = tuple.__new__  # builds a NamedTuple without its Python-level __new__


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
        """Offset of the last frame of a *stored* batch (offset_delta = index, which
        :func:`verify` enforces). Wrong for a :func:`slice_batch` result that does
        not start at frame 0: there the first frame's delta is the slice start."""
        return self.base_offset + self.message_count - 1


class VerifiedBatch(NamedTuple):
    """What :func:`verify_batch` proves: the header and the frames' checksum bytes.

    ``frame_checksums`` is the concatenation of every frame's 8 checksum bytes
    (u64 LE), ready for :func:`stamp` so it need not walk the frames again.
    """

    header: BatchHeader
    frame_checksums: bytes


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
    is the producer clock in microseconds (u64), ``user_headers`` an encoded TLV
    block (see :mod:`headwater.codec.headers`) or ``b""``.
    """

    payload: bytes
    id: int = 0
    origin_timestamp: int = 0
    user_headers: bytes = b""


def _byte_view(batch: bytes | bytearray | memoryview) -> memoryview:
    mv = memoryview(batch)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def read_header(batch: bytes | bytearray | memoryview) -> BatchHeader:
    """Decode the first 256 bytes of ``batch`` (header bytes 0..52; nothing is checked).

    Raises :class:`TruncatedBatch` (an :class:`InvalidFormat`, Iggy 4) if
    fewer than 256 bytes are given.
    """
    mv = _byte_view(batch)
    if len(mv) < BATCH_HEADER_SIZE:
        raise TruncatedBatch(
            f"batch header needs {BATCH_HEADER_SIZE} bytes, got {len(mv)}", offset=len(mv)
        )
    return BatchHeader._make(_HEADER.unpack_from(mv, 0))


# --------------------------------------------------------------------------- build


def build_batch(messages: Iterable[Message]) -> bytes:
    """Encode messages into an unstamped batch, as a producer does.

    Frames get ``offset_delta`` = their index, ``timestamp_delta`` = their
    ``origin_timestamp`` minus the batch's (the smallest), reserved bytes zero
    and producer checksums (``xxh3_64(frame[8:])``). ``partition_id``,
    ``base_offset`` and ``base_timestamp`` are zero; the batch checksum is
    computed over those zeros. Mirrors Iggy's ``SendMessagesEncoder``
    (``core/binary_protocol/src/requests/messages/send_messages.rs``).

    Raises :class:`InvalidMessageTimestampDelta` (4038) if the messages span
    more than ``MAX_TIMESTAMP_DELTA_US``; :class:`InvalidFormat` (4) for an
    empty list, an id outside u128, a timestamp outside u64, or a payload or
    user-headers block of 2**32 bytes or more.
    """
    messages = list(messages)
    count = len(messages)
    if not count:
        raise InvalidFormat("a batch needs at least one message")
    if count > MAX_MESSAGE_COUNT:
        raise InvalidFormat(f"{count} messages do not fit message_count (u32)")
    timestamps = [m.origin_timestamp for m in messages]
    origin = min(timestamps)
    if origin < 0 or max(timestamps) > _U64_MAX:
        raise InvalidFormat("origin_timestamp outside u64")
    pack_body = _FRAME_BODY.pack
    pack_u64 = _U64.pack
    xxh = _xxh3
    join = b"".join
    parts: list[bytes] = [b""]  # [0] becomes the batch header
    append = parts.append
    sums = [0] * count
    for index, m in enumerate(messages):
        ident = m.id
        payload = m.payload
        user_headers = m.user_headers
        delta = timestamps[index] - origin
        try:  # struct refuses an id outside u128, a delta or a length outside u32
            head = pack_body(
                ident & _U64_MAX, ident >> 64, index, delta, len(user_headers), len(payload), 0
            )
        except _struct_error:
            if delta > MAX_TIMESTAMP_DELTA_US:
                raise InvalidMessageTimestampDelta(
                    f"message is {delta} µs past the batch origin (max {MAX_TIMESTAMP_DELTA_US})",
                    frame_index=index,
                ) from None
            if ident < 0 or ident >> 128:
                raise InvalidFormat(f"message id {ident} outside u128", frame_index=index) from None
            raise InvalidFormat(
                "payload or user headers of 2**32 bytes or more", frame_index=index
            ) from None
        body = join((head, payload, user_headers)) if user_headers else head + payload
        checksum = xxh(body)
        sums[index] = checksum
        append(pack_u64(checksum))
        append(body)
    batch_length = BATCH_HEADER_SIZE + sum(map(len, parts))
    sum_bytes = struct.pack(f"<{count}Q", *sums)
    checksum = _xxh3(_CHECKSUM_FIELDS.pack(0, 0, 0, origin, batch_length, count) + sum_bytes)
    parts[0] = _HEADER.pack(0, 0, 0, origin, batch_length, checksum, count) + _ZERO_RESERVED
    return join(parts)


# --------------------------------------------------------------------------- frame walks
#
# Each walk returns None, never raising, when anything is off; the caller
# then runs the reference walk `_diagnose`, which raises the precise error.
# Keeping the fast loops free of error bookkeeping is what makes them fast.


def _py_verify_frames(mv: memoryview, size: int, count: int) -> bytes | None:
    """Frame checksums (u64 LE, concatenated) of a blob that tiles [256, size) in
    exactly ``count`` frames, each with zero reserved bytes, a matching checksum
    and offset_delta == index; else None. ``size`` must be ``len(mv)``.

    No per-frame bounds check: a frame running past the end is hashed over the
    clamped slice, and whatever that gives, ``pos`` then stays past ``size``, so
    the next unpack fails or the final ``pos == size`` does.
    """
    unpack = _FRAME_VERIFY.unpack_from
    xxh = _xxh3
    sums: list[int] = []
    append = sums.append
    pos = BATCH_HEADER_SIZE
    try:
        for index in range(count):
            checksum, delta, uh_len, p_len, reserved = unpack(mv, pos)
            start = pos + 8
            pos = start + 40 + p_len + uh_len
            if reserved or delta != index or xxh(mv[start:pos]) != checksum:
                return None
            append(checksum)
    except _struct_error:
        return None
    return struct.pack(f"<{count}Q", *sums) if pos == size else None


def _py_verify_frames_any_delta(mv: memoryview, size: int, count: int) -> bytes | None:
    """:func:`_py_verify_frames` without the offset_delta check."""
    unpack = _FRAME_VERIFY.unpack_from
    xxh = _xxh3
    sums: list[int] = []
    append = sums.append
    pos = BATCH_HEADER_SIZE
    try:
        for _ in range(count):
            checksum, _, uh_len, p_len, reserved = unpack(mv, pos)
            start = pos + 8
            pos = start + 40 + p_len + uh_len
            if reserved or xxh(mv[start:pos]) != checksum:
                return None
            append(checksum)
    except _struct_error:
        return None
    return struct.pack(f"<{count}Q", *sums) if pos == size else None


def _py_walk(mv: memoryview, size: int, stop: int) -> tuple[list[int], list[int]] | None:
    """Positions (``stop + 1`` of them: each frame's start, then the end of frame
    ``stop - 1``) and checksums of the first ``stop`` frames, checking only that
    each lies inside ``size``; None if one does not (or cannot: a frame takes at
    least 48 bytes, which bounds ``stop`` before anything is allocated)."""
    if stop * FRAME_HEADER_SIZE > size - BATCH_HEADER_SIZE:
        return None
    unpack = _FRAME_WALK.unpack_from
    sums = [0] * stop
    positions = [0] * (stop + 1)
    pos = BATCH_HEADER_SIZE
    try:
        for index in range(stop):
            positions[index] = pos
            checksum, uh_len, p_len = unpack(mv, pos)
            pos += 48 + p_len + uh_len
            sums[index] = checksum
    except _struct_error:
        return None
    if pos > size:
        return None
    positions[stop] = pos
    return positions, sums


def _py_span(mv: memoryview, size: int, start: int, stop: int) -> tuple[int, int, bytes] | None:
    """Where frame ``start`` begins, where frame ``stop - 1`` ends, and the
    checksums (u64 LE, concatenated) of frames ``[start, stop)``: what a slice
    or a re-checksum needs, without a list of every position. None when
    ``not 0 <= start <= stop`` or a frame before ``stop`` does not lie inside
    ``size`` (as :func:`_py_walk`)."""
    if not 0 <= start <= stop:
        return None
    walked = _py_walk(mv, size, stop)
    if walked is None:
        return None
    positions, sums = walked
    return positions[start], positions[stop], struct.pack(f"<{stop - start}Q", *sums[start:stop])


# The walks in use: the compiled ones (headwater.codec._batch_c) when built and not
# disabled (HEADWATER_NO_EXTENSIONS=1), else the pure-Python references above.
_compiled = _native.load("headwater.codec._batch_c")
_verify_frames = _py_verify_frames
_verify_frames_any_delta = _py_verify_frames_any_delta
_walk = _py_walk
_span = _py_span
_verify_and_stamp = None  # compiled: _batch_c.verify_and_stamp (None: the reference alone)


def use_implementation(name: str) -> str:
    """Switch this module's frame walks to ``"compiled"`` or ``"python"``; returns the
    previous choice. For the differential tests, the fuzzer and the benchmarks: the
    server picks once, at import. Raises ValueError for ``"compiled"`` when the
    extension is not available (not built, or disabled by HEADWATER_NO_EXTENSIONS=1)."""
    global _verify_frames, _verify_frames_any_delta, _walk, _span, _verify_and_stamp
    previous = implementation()
    if name == "compiled":
        if _compiled is None:
            raise ValueError("the compiled batch walks are not available (not built, or disabled)")
        c = _compiled
        _verify_frames, _verify_frames_any_delta = c.verify_frames, c.verify_frames_any_delta
        _walk, _span = c.walk, c.span
        _verify_and_stamp = c.verify_and_stamp
    elif name == "python":
        _verify_frames, _verify_frames_any_delta = _py_verify_frames, _py_verify_frames_any_delta
        _walk, _span = _py_walk, _py_span
        _verify_and_stamp = None
    else:
        raise ValueError(f"unknown implementation {name!r}: 'compiled' or 'python'")
    return previous


def implementation() -> str:
    """``"compiled"`` or ``"python"``: which frame walks this module uses now."""
    return "python" if _walk is _py_walk else "compiled"


if _compiled is not None:
    use_implementation("compiled")


def _fast_verify_frames(mv: memoryview, size: int, count: int, check_offset_deltas: bool) -> bytes | None:
    if check_offset_deltas:
        return _verify_frames(mv, size, count)
    return _verify_frames_any_delta(mv, size, count)


def _diagnose(mv: memoryview, check_offset_deltas: bool) -> VerifiedBatch:
    """The reference admission check: one check at a time, in the documented
    order, raising the precise error. Slow; used when the fast path finds
    anything off, and by the tests as the specification of the fast path."""
    size = len(mv)
    if size < BATCH_HEADER_SIZE:
        raise TruncatedBatch(
            f"batch header needs {BATCH_HEADER_SIZE} bytes, got {size}", offset=size
        )
    header = BatchHeader._make(_HEADER.unpack_from(mv, 0))
    if header.batch_length != size:
        raise InvalidBatchLength(
            f"batch_length {header.batch_length} != {size} bytes given", offset=BATCH_LENGTH_OFFSET
        )
    reserved = mv[BATCH_RESERVED_OFFSET:BATCH_HEADER_SIZE].tobytes()
    if reserved != _ZERO_RESERVED:
        first = next(i for i, b in enumerate(reserved) if b)
        raise InvalidReservedField(
            "batch header reserved bytes 52..256 are not zero",
            offset=BATCH_RESERVED_OFFSET + first,
        )
    sums = bytearray()
    pos = BATCH_HEADER_SIZE
    index = 0
    while pos < size:
        if pos + FRAME_HEADER_SIZE > size:
            raise FrameOutOfBounds(
                f"frame header needs {FRAME_HEADER_SIZE} bytes, {size - pos} left",
                offset=pos,
                frame_index=index,
            )
        checksum, _, _, offset_delta, ts_delta, uh_len, p_len, reserved_u64 = _FRAME.unpack_from(
            mv, pos
        )
        end = pos + FRAME_HEADER_SIZE + p_len + uh_len
        if end > size:
            raise FrameOutOfBounds(
                f"frame of {end - pos} bytes runs {end - size} bytes past the batch",
                offset=pos,
                frame_index=index,
            )
        if reserved_u64:
            raise InvalidReservedField(
                "frame reserved bytes 40..48 are not zero",
                offset=pos + FRAME_RESERVED_OFFSET,
                frame_index=index,
            )
        computed = _xxh3(mv[pos + 8 : end])
        if computed != checksum:
            raise InvalidMessageChecksum(
                f"frame checksum {checksum:#018x} != computed {computed:#018x}",
                offset=pos,
                frame_index=index,
            )
        if check_offset_deltas and offset_delta != index:
            raise InvalidOffsetDelta(
                f"offset_delta {offset_delta} != frame index {index}",
                offset=pos + 24,
                frame_index=index,
            )
        if header.origin_timestamp + ts_delta > _U64_MAX:
            raise InvalidMessageTimestampDelta(
                f"origin_timestamp {header.origin_timestamp} + timestamp_delta {ts_delta} "
                "overflows u64 microseconds",
                offset=pos + 28,
                frame_index=index,
            )
        sums += mv[pos : pos + 8]
        pos = end
        index += 1
    if index != header.message_count or index == 0:
        raise InvalidMessagesCount(
            f"message_count {header.message_count} but {index} frames in the blob",
            offset=MESSAGE_COUNT_OFFSET,
        )
    computed = _xxh3(
        _CHECKSUM_FIELDS.pack(
            header.partition_id,
            header.base_offset,
            header.base_timestamp,
            header.origin_timestamp,
            header.batch_length,
            header.message_count,
        )
        + sums
    )
    if computed != header.batch_checksum:
        raise InvalidBatchChecksum(
            f"batch checksum {header.batch_checksum:#018x} != computed {computed:#018x}",
            offset=BATCH_CHECKSUM_OFFSET,
        )
    return VerifiedBatch(header, bytes(sums))


# --------------------------------------------------------------------------- verify


def verify_batch(
    batch: bytes | bytearray | memoryview, *, check_offset_deltas: bool = True
) -> VerifiedBatch:
    """Admission validation of a whole batch; returns its header and frame checksums.

    ``batch`` must be exactly one batch (``len(batch) == batch_length``).
    Checks, in this order, raising the first failure:

    1. at least 256 bytes: :class:`TruncatedBatch` (4);
    2. ``batch_length`` (32..40) equals ``len(batch)``: :class:`InvalidBatchLength` (4);
    3. reserved bytes 52..256 zero: :class:`InvalidReservedField` (4101);
    4. frame by frame, from byte 256 to the end: the 48-byte header and the
       ``payload_length + user_headers_length`` bytes after it lie inside the
       batch (:class:`FrameOutOfBounds`, 4); reserved bytes 40..48 zero
       (:class:`InvalidReservedField`, 4101); ``checksum == xxh3_64(frame[8:])``
       (:class:`InvalidMessageChecksum`, 4027); ``offset_delta`` equals the
       frame index when ``check_offset_deltas`` (:class:`InvalidOffsetDelta`, 4);
       ``origin_timestamp + timestamp_delta`` fits u64 microseconds
       (:class:`InvalidMessageTimestampDelta`, 4038; the u32 delta itself
       cannot exceed the 71.6-minute bound);
    5. ``message_count`` (48..52) equals the frames walked and is nonzero:
       :class:`InvalidMessagesCount` (4009);
    6. ``batch_checksum`` (40..48) matches: :class:`InvalidBatchChecksum` (4039).

    Errors carry ``offset`` (byte in ``batch``) and ``frame_index``. Iggy's
    ``decode_batch_slice`` + ``convert_request_message`` check 1-3, 4 (bounds,
    reserved, checksums), 5 and 6, but not offset_delta: its producers always
    write the index. Source: messages.mdx, "Batch header" and "Message frame
    header"; ``core/binary_protocol/src/batch.rs``.
    """
    mv = _byte_view(batch)
    size = len(mv)
    if size >= BATCH_HEADER_SIZE:
        partition_id, base_offset, base_timestamp, origin, length, checksum, count = (
            _HEADER.unpack_from(mv, 0)
        )
        if (
            length == size
            and 0 < count
            and count * FRAME_HEADER_SIZE <= size - BATCH_HEADER_SIZE
            and origin <= _ORIGIN_SAFE_MAX
            and _RESERVED.unpack_from(mv, BATCH_RESERVED_OFFSET)[0] == _ZERO_RESERVED
        ):
            sum_bytes = _fast_verify_frames(mv, size, count, check_offset_deltas)
            if sum_bytes is not None:
                computed = _xxh3(
                    _CHECKSUM_FIELDS.pack(
                        partition_id, base_offset, base_timestamp, origin, length, count
                    )
                    + sum_bytes
                )
                if computed != checksum:
                    raise InvalidBatchChecksum(
                        f"batch checksum {checksum:#018x} != computed {computed:#018x}",
                        offset=BATCH_CHECKSUM_OFFSET,
                    )
                header = _new_tuple(
                    BatchHeader,
                    (partition_id, base_offset, base_timestamp, origin, length, checksum, count),
                )
                return _new_tuple(VerifiedBatch, (header, sum_bytes))
    return _diagnose(mv, check_offset_deltas)


def verify(batch: bytes | bytearray | memoryview, *, check_offset_deltas: bool = True) -> BatchHeader:
    """Admission validation of a whole batch; returns its header.

    Same checks, order and errors as :func:`verify_batch` (which also returns
    the frame checksums for :func:`stamp`).
    """
    return verify_batch(batch, check_offset_deltas=check_offset_deltas).header


# --------------------------------------------------------------------------- walk


def iter_frames(batch: bytes | bytearray | memoryview) -> Iterator[Frame]:
    """Walk the frames of a batch lazily without copying payloads.

    ``batch`` may run past ``batch_length`` (a poll reply or segment read
    holding several batches); only the first batch is walked. Checks only
    that each frame lies inside ``batch_length``; use :func:`verify` for
    full admission validation.

    Raises :class:`TruncatedBatch` (4) under 256 bytes,
    :class:`InvalidBatchLength` (4) when ``batch_length`` is under 256 or past
    the bytes given, :class:`FrameOutOfBounds` (4) on a frame that runs past
    the blob (after yielding the frames before it).
    """
    mv = _byte_view(batch)
    header = read_header(mv)
    end = header.batch_length
    if end > len(mv) or end < BATCH_HEADER_SIZE:
        raise InvalidBatchLength(
            f"batch_length {end} does not fit the {len(mv)} bytes given",
            offset=BATCH_LENGTH_OFFSET,
        )
    unpack = _FRAME.unpack_from
    new = _new_tuple
    pos = BATCH_HEADER_SIZE
    index = 0
    while pos < end:
        if pos + FRAME_HEADER_SIZE > end:
            raise FrameOutOfBounds("truncated frame header", offset=pos, frame_index=index)
        checksum, id_lo, id_hi, offset_delta, ts_delta, uh_len, p_len, _ = unpack(mv, pos)
        payload_start = pos + FRAME_HEADER_SIZE
        headers_start = payload_start + p_len
        frame_end = headers_start + uh_len
        if frame_end > end:
            raise FrameOutOfBounds(
                "frame runs past the end of the batch", offset=pos, frame_index=index
            )
        yield new(
            Frame,
            (
                checksum,
                id_lo | id_hi << 64,
                offset_delta,
                ts_delta,
                mv[payload_start:headers_start],
                mv[headers_start:frame_end],
                pos,
            ),
        )
        pos = frame_end
        index += 1


def frame_positions(batch: bytes | bytearray | memoryview) -> list[int]:
    """Byte offsets of the ``message_count`` frames of ``batch``, plus the end of the last.

    A list of ``message_count + 1`` ints: frame ``i`` spans
    ``[positions[i], positions[i + 1])``. Checks only that the frames lie
    inside ``batch_length`` (not checksums). Raises :class:`TruncatedBatch`,
    :class:`InvalidBatchLength` or :class:`FrameOutOfBounds` (all Iggy 4), and
    :class:`InvalidMessagesCount` (4009) when the blob ends before
    ``message_count`` frames.
    """
    mv = _byte_view(batch)
    h = read_header(mv)
    _check_length(h.batch_length, len(mv))
    walked = _walk(mv, h.batch_length, h.message_count)
    if walked is None:
        _raise_walk_error(mv, h.batch_length, h.message_count)
    return walked[0]


def frame_checksums(batch: bytes | bytearray | memoryview) -> bytes:
    """The concatenated 8-byte checksums of the ``message_count`` frames, in order.

    No verification beyond the frames lying inside ``batch_length``; raises
    like :func:`frame_positions`.
    """
    mv = _byte_view(batch)
    h = read_header(mv)
    _check_length(h.batch_length, len(mv))
    return _checksum_bytes(mv, h.batch_length, h.message_count)


def _check_length(length: int, size: int) -> None:
    if length > size or length < BATCH_HEADER_SIZE:
        raise InvalidBatchLength(
            f"batch_length {length} does not fit the {size} bytes given",
            offset=BATCH_LENGTH_OFFSET,
        )


def _checksum_bytes(mv: memoryview, length: int, count: int) -> bytes:
    spanned = _span(mv, length, 0, count)
    if spanned is None:
        _raise_walk_error(mv, length, count)
    return spanned[2]


def _raise_walk_error(mv: memoryview, length: int, count: int) -> NoReturn:
    """Find the first of ``count`` frames that does not fit in ``length`` bytes, and raise."""
    pos = BATCH_HEADER_SIZE
    for index in range(count):
        if pos + FRAME_HEADER_SIZE > length:
            if pos == length:
                raise InvalidMessagesCount(
                    f"message_count {count} but only {index} frames in the blob",
                    offset=MESSAGE_COUNT_OFFSET,
                )
            raise FrameOutOfBounds("truncated frame header", offset=pos, frame_index=index)
        _, uh_len, p_len = _FRAME_WALK.unpack_from(mv, pos)
        end = pos + FRAME_HEADER_SIZE + p_len + uh_len
        if end > length:
            raise FrameOutOfBounds(
                "frame runs past the end of the batch", offset=pos, frame_index=index
            )
        pos = end
    raise AssertionError("walk failed but every frame fits")  # pragma: no cover


def split_batches(buffer: bytes | bytearray | memoryview) -> Iterator[memoryview]:
    """Split back-to-back batches (a poll reply body, a segment read) into views.

    Each yielded memoryview is one whole batch by its ``batch_length``; nothing
    inside it is checked. Raises :class:`TruncatedBatch` (4) if the buffer
    ends inside a batch header, :class:`InvalidBatchLength` (4) if a
    ``batch_length`` is under 256 or runs past the buffer (``offset`` is the
    batch's start plus 32).
    """
    mv = _byte_view(buffer)
    size = len(mv)
    unpack = _U64.unpack_from
    pos = 0
    while pos < size:
        if pos + BATCH_HEADER_SIZE > size:
            raise TruncatedBatch(
                f"batch header needs {BATCH_HEADER_SIZE} bytes, {size - pos} left", offset=pos
            )
        length = unpack(mv, pos + BATCH_LENGTH_OFFSET)[0]
        if length < BATCH_HEADER_SIZE or pos + length > size:
            raise InvalidBatchLength(
                f"batch_length {length} does not fit the {size - pos} bytes left",
                offset=pos + BATCH_LENGTH_OFFSET,
            )
        yield mv[pos : pos + length]
        pos += length


# --------------------------------------------------------------------------- checksums, stamp, slice


def compute_batch_checksum(batch: bytes | bytearray | memoryview) -> int:
    """The batch checksum the header fields and frame checksums of ``batch`` call for.

    ``xxh3_64(pack('<5QI', partition_id, base_offset, base_timestamp,
    origin_timestamp, batch_length, message_count) + frame checksum bytes)``.
    Frame checksums are read, not recomputed. Raises like :func:`frame_positions`.
    """
    mv = _byte_view(batch)
    h = read_header(mv)
    _check_length(h.batch_length, len(mv))
    return _xxh3(
        _CHECKSUM_FIELDS.pack(
            h.partition_id,
            h.base_offset,
            h.base_timestamp,
            h.origin_timestamp,
            h.batch_length,
            h.message_count,
        )
        + _checksum_bytes(mv, h.batch_length, h.message_count)
    )


def stamp(
    batch: bytearray | memoryview,
    partition_id: int,
    base_offset: int,
    base_timestamp: int,
    frame_checksum_bytes: bytes | bytearray | memoryview | None = None,
) -> int:
    """Stamp a verified batch in place; frames are left untouched. Returns the new checksum.

    Writes ``partition_id``, ``base_offset``, ``base_timestamp`` (u64 LE,
    ``base_timestamp`` in microseconds) at bytes 0..24 and the recomputed
    ``batch_checksum`` at 40..48. ``frame_checksum_bytes`` (the frames'
    checksums concatenated, as :func:`verify_batch` returns them) skips the
    frame walk. Nothing is written unless every check passes.

    Raises :class:`TruncatedBatch` / :class:`InvalidBatchLength` (4) for a
    short buffer or a ``batch_length`` outside it; :class:`InvalidReservedField`
    (4101) on nonzero reserved bytes 52..256; :class:`FrameOutOfBounds` (4) or
    :class:`InvalidMessagesCount` (4009) when the frames do not fit (walk
    only) or ``frame_checksum_bytes`` is not ``8 * message_count`` bytes;
    ``TypeError`` for a read-only buffer; ``struct.error`` for values outside
    u64. Source: messages.mdx, "Batch header"; Iggy's
    ``stamp_prepare_for_persistence``.
    """
    mv = _byte_view(batch)
    if mv.readonly:
        raise TypeError("stamp needs a writable buffer (bytearray or writable memoryview)")
    size = len(mv)
    if size < BATCH_HEADER_SIZE:
        raise TruncatedBatch(
            f"batch header needs {BATCH_HEADER_SIZE} bytes, got {size}", offset=size
        )
    origin, length, count = _ORIGIN_LENGTH.unpack_from(mv, 0)
    _check_length(length, size)
    if _RESERVED.unpack_from(mv, BATCH_RESERVED_OFFSET)[0] != _ZERO_RESERVED:
        raise InvalidReservedField(
            "batch header reserved bytes 52..256 are not zero", offset=BATCH_RESERVED_OFFSET
        )
    if frame_checksum_bytes is None:
        frame_checksum_bytes = _checksum_bytes(mv, length, count)
    elif len(frame_checksum_bytes) != 8 * count:
        raise InvalidMessagesCount(
            f"{len(frame_checksum_bytes)} checksum bytes for message_count {count}",
            offset=MESSAGE_COUNT_OFFSET,
        )
    fields = _CHECKSUM_FIELDS.pack(partition_id, base_offset, base_timestamp, origin, length, count)
    checksum = _xxh3(fields + frame_checksum_bytes)
    _STAMP.pack_into(mv, 0, partition_id, base_offset, base_timestamp)
    _U64.pack_into(mv, BATCH_CHECKSUM_OFFSET, checksum)
    return checksum


def verify_and_stamp(
    batch: bytearray | memoryview,
    partition_id: int,
    base_offset: int,
    base_timestamp: int,
    *,
    check_offset_deltas: bool = True,
) -> BatchHeader:
    """:func:`verify_batch` then :func:`stamp` with one frame walk; returns the stamped header.

    Raises whatever :func:`verify_batch` raises (the batch is then left
    untouched), ``TypeError`` for a read-only buffer and ``struct.error`` for a
    stamp outside u64 (nothing written). With the compiled walks in use, one call
    of ``_batch_c.verify_and_stamp`` does it all (the send path's whole admission);
    anything it does not accept goes to the reference below, which raises the
    precise error.
    """
    compiled = _verify_and_stamp
    if compiled is not None:
        fields = compiled(batch, partition_id, base_offset, base_timestamp, check_offset_deltas)
        if fields is not None:
            return _new_tuple(BatchHeader, fields)
    return _py_verify_and_stamp(batch, partition_id, base_offset, base_timestamp, check_offset_deltas)


def _py_verify_and_stamp(
    batch: bytearray | memoryview,
    partition_id: int,
    base_offset: int,
    base_timestamp: int,
    check_offset_deltas: bool,
) -> BatchHeader:
    """The reference of :func:`verify_and_stamp` (the specification of
    ``_batch_c.verify_and_stamp``): :func:`verify_batch`, then the stamp."""
    mv = _byte_view(batch)
    if mv.readonly:
        raise TypeError("stamp needs a writable buffer (bytearray or writable memoryview)")
    h, sums = verify_batch(mv, check_offset_deltas=check_offset_deltas)
    origin, length, count = h.origin_timestamp, h.batch_length, h.message_count
    checksum = _xxh3(
        _CHECKSUM_FIELDS.pack(partition_id, base_offset, base_timestamp, origin, length, count)
        + sums
    )
    _STAMP.pack_into(mv, 0, partition_id, base_offset, base_timestamp)
    _U64.pack_into(mv, BATCH_CHECKSUM_OFFSET, checksum)
    return _new_tuple(
        BatchHeader, (partition_id, base_offset, base_timestamp, origin, length, checksum, count)
    )


_RANGE = struct.Struct("<8xQ32xI")  # base_offset u64 at 8, message_count u32 at 48
_FIRST_DELTA = struct.Struct("<I")  # the first frame's offset_delta: u32 at 256 + 24


def offset_range(batch: bytes | bytearray | memoryview) -> tuple[int, int]:
    """``(first_offset, end_offset)`` of a stored batch or a :func:`slice_batch` of one:
    ``base_offset`` (u64 LE at 8) + the first frame's ``offset_delta`` (u32 LE at 280),
    and one past the last frame's offset (``first + message_count`` unless compaction
    left gaps; the frames are walked to find the last one when there are several);
    slices keep ``base_offset``, so the header alone does not say where they start.
    The batch must hold a frame (a stored one always does)."""
    base, count = _RANGE.unpack_from(batch, 0)
    first = base + _FIRST_DELTA.unpack_from(batch, BATCH_HEADER_SIZE + 24)[0]
    if count > 1:  # compaction may have left gaps between frames: the last frame says where it ends
        return first, last_offset(batch) + 1
    return first, first + count


def slice_batch(batch: bytes | bytearray | memoryview, start: int, stop: int) -> bytes:
    """Frames ``[start, stop)`` of a stored batch, as a valid batch.

    ``partition_id``, ``base_offset``, ``base_timestamp`` and
    ``origin_timestamp`` are kept, so each frame's offset stays
    ``base_offset + offset_delta``; frames are byte-identical;
    ``batch_length`` (32..40), ``message_count`` (48..52) and
    ``batch_checksum`` (40..48) are recomputed; reserved bytes are written
    zero. What a poll that starts or ends mid-batch returns (Iggy's poll reply
    serves such server-sliced records: ``responses/messages/poll_messages.rs``).
    Returns ``bytes(batch[:batch_length])`` for the whole range. Frame
    checksums are not re-verified.

    Raises :class:`InvalidFormat` (4) for an empty or out-of-range slice, and
    like :func:`frame_positions` when the frames do not fit.
    """
    mv = _byte_view(batch)
    h = read_header(mv)
    _check_length(h.batch_length, len(mv))
    count = h.message_count
    if not 0 <= start < stop <= count:
        raise InvalidFormat(f"slice [{start}, {stop}) outside 0..{count}")
    if start == 0 and stop == count:
        return mv[: h.batch_length].tobytes()
    spanned = _span(mv, h.batch_length, start, stop)
    if spanned is None:
        _raise_walk_error(mv, h.batch_length, stop)
    first, last, sums = spanned
    n = stop - start
    batch_length = BATCH_HEADER_SIZE + (last - first)
    checksum = _xxh3(
        _CHECKSUM_FIELDS.pack(
            h.partition_id, h.base_offset, h.base_timestamp, h.origin_timestamp, batch_length, n
        )
        + sums
    )
    header = bytearray(BATCH_HEADER_SIZE)
    _HEADER.pack_into(
        header,
        0,
        h.partition_id,
        h.base_offset,
        h.base_timestamp,
        h.origin_timestamp,
        batch_length,
        checksum,
        n,
    )
    return b"".join((header, mv[first:last]))


def frame_offset_deltas(batch: bytes | bytearray | memoryview) -> list[int]:
    """The ``offset_delta`` (frame bytes 24..28, u32 LE) of each of the
    ``message_count`` frames, in order. A stored batch written by an append has
    ``0..count-1``; one rewritten by compaction may have gaps (increasing, not
    consecutive). Raises like :func:`frame_positions`."""
    mv = _byte_view(batch)
    unpack = _U32.unpack_from
    return [unpack(mv, pos + 24)[0] for pos in frame_positions(mv)[:-1]]


def last_offset(batch: bytes | bytearray | memoryview) -> int:
    """The offset of a stored batch's last frame: ``base_offset`` + the last
    frame's ``offset_delta`` (which equals ``message_count - 1`` unless compaction
    removed frames, see :func:`select_frames`). Raises like :func:`frame_positions`.
    Walks the frames without a list of their positions (a poll asks this of
    every reply's last batch). A batch of no frames (``message_count`` 0) has no last
    frame: :class:`InvalidMessagesCount` (4009) once its frames check out."""
    mv = _byte_view(batch)
    h = read_header(mv)
    count = h.message_count
    if count:
        _check_length(h.batch_length, len(mv))
        spanned = _span(mv, h.batch_length, count - 1, count)
        if spanned is not None:
            return h.base_offset + _U32.unpack_from(mv, spanned[0] + 24)[0]
    positions = frame_positions(mv)  # raises the walk's precise error
    if not count:
        raise InvalidMessagesCount("message_count is 0: the batch has no last frame", offset=MESSAGE_COUNT_OFFSET)
    return h.base_offset + _U32.unpack_from(mv, positions[-2] + 24)[0]


def select_frames(batch: bytes | bytearray | memoryview, keep: Sequence[int]) -> bytes:
    """A valid batch holding only frames ``keep`` (increasing frame indices) of ``batch``.

    What compaction writes: ``partition_id``, ``base_offset``,
    ``base_timestamp`` and ``origin_timestamp`` are kept, frames are
    byte-identical (so each keeps its ``offset_delta``, its offset, and its
    checksum), ``batch_length`` (32..40), ``message_count`` (48..52) and
    ``batch_checksum`` (40..48) are recomputed, reserved bytes are zero. The
    result's offset deltas are no longer ``0..n-1``: verify it with
    ``check_offset_deltas=False``. Raises :class:`InvalidFormat` (4) for an
    empty or out-of-range ``keep``, and like :func:`frame_positions`.
    """
    mv = _byte_view(batch)
    h = read_header(mv)
    positions = frame_positions(mv)
    count = h.message_count
    if not keep or any(not 0 <= i < count for i in keep) or any(a >= b for a, b in zip(keep, keep[1:])):
        raise InvalidFormat(f"frames {list(keep)[:8]} are not increasing indices in 0..{count}")
    if len(keep) == count:
        return mv[: h.batch_length].tobytes()
    parts = [mv[positions[i] : positions[i + 1]] for i in keep]
    sums = b"".join(p[:8] for p in parts)
    batch_length = BATCH_HEADER_SIZE + sum(len(p) for p in parts)
    n = len(keep)
    checksum = _xxh3(
        _CHECKSUM_FIELDS.pack(h.partition_id, h.base_offset, h.base_timestamp, h.origin_timestamp, batch_length, n)
        + sums
    )
    header = bytearray(BATCH_HEADER_SIZE)
    _HEADER.pack_into(
        header, 0, h.partition_id, h.base_offset, h.base_timestamp, h.origin_timestamp, batch_length, checksum, n
    )
    return b"".join((header, *parts))
