"""Walking a segment ``.log`` batch by batch, and telling a torn write from a damaged length.

Shared by boot recovery (:mod:`.recovery`, which cuts or refuses) and the read-only
checker (:mod:`.check`, which reports), so both reach the same verdict on the same bytes.
Layout (:mod:`.segment`, ``shared/spec/iggy-message-batches.md``): stamped batches back
to back, each ``[256-byte header][message_count frames]``; header bytes 32..40 are
``batch_length`` (u64 LE), 40..48 ``batch_checksum``, 48..52 ``message_count`` (u32 LE);
a frame is a 48-byte header whose bytes 32..36 / 36..40 are ``user_headers_length`` /
``payload_length`` (u32 LE), then those bytes. A preallocated file has zeros after its data.

The damaged-length rule (:func:`implied_length`). The batch checksum (40..48) covers
``batch_length`` and ``message_count`` (:mod:`headwater.codec.batch`). Walk the
``message_count`` frames from header byte 256 by their own length fields; where the last
one ends is the *implied length*. When the batch, with its stored ``batch_length``
replaced by the implied length, passes ``batch.verify`` (every frame checksum, the count,
the batch checksum), the writer stamped exactly that length and wrote every byte of the
batch: a stored length that differs was altered after the write (bit rot, a bad sector).
A torn write cannot produce this: a prefix of a batch lacks at least the end of its last
frame (the walk runs past the file, or stops short of ``message_count`` frames), and
zeros of a preallocated tail or an unwritten page fail the frame checksums. Such a batch
is damage, never a torn tail, wherever its stored length points (past the end of the
file, inside the batch, into zeros, below 304, or zero).
"""

from __future__ import annotations

import errno
import os
import re
import struct
from dataclasses import dataclass
from typing import Callable, Iterator

from headwater.codec import batch as codec_batch
from headwater.codec.batch import (
    BATCH_HEADER_SIZE,
    BATCH_LENGTH_OFFSET,
    BATCH_RESERVED_OFFSET,
    FRAME_HEADER_SIZE,
    MESSAGE_COUNT_OFFSET,
)
from headwater.codec.errors import CodecError

from .segment import MIN_BATCH_SIZE, ChunkReader, pread_exact, unpack_header

_FRAME_LENGTHS = struct.Struct("<32xII")  # user_headers_length, payload_length at frame bytes 32..40
_U32 = struct.Struct("<I")
_ZERO_FRAME = bytes(FRAME_HEADER_SIZE)
_READ_CHUNK = 1 << 20
_SCAN_CHUNK = 4 << 20
_RESERVED_ZEROS = bytes(BATCH_HEADER_SIZE - BATCH_RESERVED_OFFSET)
"""A stamped header's reserved bytes 52..256: 204 zeros, right after a nonzero message_count."""
_NONZERO = re.compile(rb"[^\x00]")

OK = "ok"
ZEROS = "zeros"  # batch_length is zero: the end of a preallocated file's data (bytes after it not checked)
TORN = "torn"  # the header or the batch runs past the end of the file
INVALID = "invalid"  # an impossible header (batch_length under 304, or message_count 0)
UNVERIFIED = "unverified"  # a whole-sized batch that fails verify (``problem`` is the codec error)
DAMAGED_LENGTH = "damaged length"  # a whole batch whose batch_length alone was altered (module doc)
NOT_TORN = "not a torn tail"  # a stop whose bytes recovery refuses to cut (:func:`tail_refusal`)


@dataclass(frozen=True, slots=True)
class BatchAt:
    """One step of :func:`walk_batches`: a verified batch (``state`` OK, ``view`` its bytes),
    or the stop (``view`` None; ``problem`` says why, ``problem_position`` is the file byte
    where the problem is, ``state`` one of ZEROS, TORN, INVALID, UNVERIFIED, DAMAGED_LENGTH)."""

    position: int
    base_offset: int
    base_timestamp_us: int
    length: int
    message_count: int
    view: memoryview | None = None
    problem: str = ""
    problem_position: int = 0
    state: str = OK

    @property
    def torn(self) -> bool:
        """The batch runs past the end of the file (a torn tail when it is the last thing there)."""
        return self.state == TORN


def implied_length(reader: ChunkReader, position: int, size: int) -> int | None:
    """The length the batch at ``position`` verifies with when its stored ``batch_length``
    is replaced by the end of its ``message_count`` frames; None when it does not (a torn
    or otherwise damaged batch) or when that is its stored length (module doc).

    Reads the frame headers one by one, then the batch once; never past ``size``. A zero
    frame header ends the walk at once, so a garbage ``message_count`` over a preallocated
    zero tail costs one step, not one per 48 zero bytes.
    """
    head = reader.view(position, BATCH_HEADER_SIZE)
    if len(head) < BATCH_HEADER_SIZE:
        return None
    (count,) = _U32.unpack_from(head, MESSAGE_COUNT_OFFSET)
    stored = unpack_header(head, 0)[2]
    rest = size - position
    end = BATCH_HEADER_SIZE
    for _ in range(count):
        frame = reader.view(position + end, FRAME_HEADER_SIZE)
        if len(frame) < FRAME_HEADER_SIZE or frame == _ZERO_FRAME:
            return None  # past the file, or zeros (never a frame: xxh3_64 of 40 zeros is not 0)
        user_headers, payload = _FRAME_LENGTHS.unpack_from(frame, 0)
        end += FRAME_HEADER_SIZE + user_headers + payload
        if end > rest:
            return None
    if count == 0 or end == stored:
        return None
    candidate = bytearray(reader.view(position, end))
    candidate[BATCH_LENGTH_OFFSET : BATCH_LENGTH_OFFSET + 8] = end.to_bytes(8, "little")
    try:
        codec_batch.verify(candidate, check_offset_deltas=False)  # compaction leaves gaps
    except CodecError:
        return None
    return end


def walk_batches(
    reader: ChunkReader, size: int, position: int = 0, progress: Callable[[int], None] | None = None
) -> Iterator[BatchAt]:
    """Every batch of ``[position, size)`` verified, in order; after the first that is not
    OK, one stop step (:class:`BatchAt`), then nothing. Continuity of ``base_offset`` is
    the caller's. ``progress(n)`` is called with the bytes of each verified batch."""
    while position < size:
        head = reader.view(position, BATCH_HEADER_SIZE)
        if len(head) >= BATCH_LENGTH_OFFSET + 8 and not any(head[BATCH_LENGTH_OFFSET : BATCH_LENGTH_OFFSET + 8]):
            yield _stop(reader, position, size, ZEROS, "zeros", position)
            return
        if len(head) < BATCH_HEADER_SIZE:
            yield BatchAt(position, 0, 0, 0, 0, None, "partial header", position, TORN)
            return
        base_offset, base_ts, length, count = unpack_header(head, 0)
        if length < MIN_BATCH_SIZE or count == 0:
            yield _stop(reader, position, size, INVALID, f"bad batch_length {length} / message_count {count}",
                        position + BATCH_LENGTH_OFFSET)
            return
        if position + length > size:
            yield _stop(reader, position, size, TORN, "partial batch", position + BATCH_LENGTH_OFFSET)
            return
        view = reader.view(position, length)
        try:
            codec_batch.verify(view, check_offset_deltas=False)  # compaction leaves gaps
        except CodecError as exc:
            yield _stop(reader, position, size, UNVERIFIED, str(exc), position + (exc.offset or 0))
            return
        yield BatchAt(position, base_offset, base_ts, length, count, view)
        if progress:
            progress(length)
        position += length


def _stop(reader: ChunkReader, position: int, size: int, state: str, problem: str, at: int) -> BatchAt:
    """The stop step: DAMAGED_LENGTH when :func:`implied_length` proves it, else ``state``."""
    head = reader.view(position, BATCH_HEADER_SIZE)
    fields = unpack_header(head, 0) if len(head) >= BATCH_HEADER_SIZE else (0, 0, 0, 0)
    implied = implied_length(reader, position, size)
    if implied is not None:
        state, at = DAMAGED_LENGTH, position + BATCH_LENGTH_OFFSET
        problem = f"batch_length {fields[2]} is damaged: the batch is whole and verifies at {implied} bytes"
    return BatchAt(position, *fields, None, problem, at, state)


def first_batch(reader: ChunkReader, position: int, file_size: int) -> BatchAt | None:
    """The first step of a walk from ``position``: the batch there or why there is none."""
    return next(walk_batches(reader, file_size, position), None)


def intact_batch_after(
    fd: int, file_size: int, start: int, min_offset: int
) -> tuple[tuple[int, int] | None, bool]:
    """Look in bytes ``[start, file_size)`` of a ``.log`` for a whole batch that
    verifies and whose base_offset is >= ``min_offset``.

    Returns ((position, base_offset) of the first one, or None; whether any
    nonzero byte was seen). Candidates come from the header layout: a stamped
    header's reserved bytes 52..256 are 204 zeros following a nonzero
    message_count (48..52), so a header starts 49..52 bytes before the start of
    a run of at least 204 zero bytes; each candidate is checked with
    ``batch.verify``. Holes (a preallocated file's unwritten extents) are
    skipped with ``SEEK_DATA`` and all-zero chunks without a byte-wise scan, so
    a long zero tail costs little.
    """
    reader = ChunkReader(fd, file_size, _READ_CHUNK)
    nonzero = False
    pos = start
    span = len(_RESERVED_ZEROS)
    seek = hasattr(os, "SEEK_DATA")
    while pos < file_size:
        data_end = file_size  # end of the data extent pos is in (a hole or the end of the file follows)
        if seek:
            try:
                pos = max(pos, os.lseek(fd, pos, os.SEEK_DATA))
                data_end = min(file_size, os.lseek(fd, pos, os.SEEK_HOLE))
            except OSError as exc:
                if exc.errno == errno.ENXIO:
                    break  # nothing but a hole up to the end of the file
                seek = False
        # never read into a hole: cached zero pages would count as data for SEEK_DATA
        chunk = pread_exact(fd, min(_SCAN_CHUNK + BATCH_HEADER_SIZE, data_end - pos), pos)
        if not chunk:
            break
        if chunk.translate(None, b"\x00"):  # not all zeros
            i = 0
            while True:
                m = _NONZERO.search(chunk, i)
                if m is None:
                    break  # zeros to the end of this chunk
                nonzero = True
                z = chunk.find(_RESERVED_ZEROS, m.start())
                if z < 0:
                    break
                for p in range(pos + z - BATCH_RESERVED_OFFSET, pos + z - BATCH_RESERVED_OFFSET + 4):
                    if p < start or p + MIN_BATCH_SIZE > file_size:
                        continue
                    b = first_batch(reader, p, file_size)
                    if b is not None and b.state in (OK, DAMAGED_LENGTH) and b.base_offset >= min_offset:
                        return (p, b.base_offset), True
                i = z + span
        if len(chunk) <= _SCAN_CHUNK:
            pos += len(chunk)  # the extent is done: next, the data after the hole, if any
        else:
            pos += _SCAN_CHUNK
    return None, nonzero


def tail_refusal(
    fd: int, file_size: int, end: int, min_offset: int, reason: str, *, data_follows: bool = False
) -> tuple[str | None, str]:
    """Whether the bytes ``[end, file_size)`` of a ``.log``, after its last whole valid
    batch (the walk stopped at ``end`` for ``reason``), are a torn tail that boot recovery
    may cut. The one decision both recovery (which refuses the partition) and
    ``headwater verify`` / ``dump`` (which report damage) use.

    Returns (why they are not a torn tail, or None when they may be cut; the stop reason,
    "zeros, then nonzero bytes" when a zero ``batch_length`` is followed by data). Not a
    torn tail: a whole batch verifying with a base_offset >= ``min_offset`` lies there or
    after it (:func:`intact_batch_after`), or ``data_follows`` (a later segment holds
    bytes, so this one was sealed: a crash cannot tear it, and a power loss only before the
    round syncing it returned, when nothing after it was acknowledged under ``enforce_fsync``;
    see :mod:`.recovery`) and the bytes are not a preallocated zero
    tail. Reads only; raises OSError.
    """
    if end >= file_size:
        return None, reason
    found, nonzero = intact_batch_after(fd, file_size, end, min_offset)
    if found is not None:
        where = "there" if found[0] == end else f"follows at byte {found[0]} (offset {found[1]})"
        return f"batch at byte {end} is damaged ({reason}) but a whole valid batch {where}: not a torn tail", reason
    zeros = reason == "zeros"
    if zeros and nonzero:
        zeros, reason = False, "zeros, then nonzero bytes"
    if data_follows and not zeros:
        return f"batch at byte {end} is damaged ({reason}) and later segments hold data: not a torn tail", reason
    return None, reason


__all__ = [
    "BatchAt", "DAMAGED_LENGTH", "INVALID", "NOT_TORN", "OK", "TORN", "UNVERIFIED", "ZEROS", "first_batch",
    "implied_length", "intact_batch_after", "tail_refusal", "walk_batches",
]
