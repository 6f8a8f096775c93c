"""Every single-bit flip and every truncation of a valid stamped batch is refused,
with the error class its position calls for (exhaustive over a small batch)."""

from __future__ import annotations

import struct

import pytest

from headwater.codec import batch as B
from headwater.codec.errors import (
    CodecError,
    FrameOutOfBounds,
    InvalidBatchChecksum,
    InvalidBatchLength,
    InvalidMessageChecksum,
    InvalidMessagesCount,
    InvalidReservedField,
    TruncatedBatch,
)


def small_stamped_batch() -> bytes:
    messages = [
        B.Message(b"", id=0x0102, origin_timestamp=1_700_000_000_000_000),
        B.Message(
            b"p",
            id=2**127 + 5,
            origin_timestamp=1_700_000_000_000_007,
            user_headers=b"\x02\x01\x00\x00\x00k\x03\x01\x00\x00\x00\x01",  # {"k": true}
        ),
        B.Message(b"payload", id=3, origin_timestamp=1_700_000_000_000_003),
    ]
    batch = bytearray(B.build_batch(messages))
    B.stamp(batch, 9, 1_000_000, 1_700_000_000_123_456)
    B.verify(batch)
    return bytes(batch)


BATCH = small_stamped_batch()
POSITIONS = B.frame_positions(BATCH)


def expected_for(byte: int):
    """The error classes a flipped bit at ``byte`` may give, and the frame it should name."""
    if byte < 32 or 40 <= byte < 48:
        return {InvalidBatchChecksum}, None
    if byte < 40:
        return {InvalidBatchLength}, None
    if byte < 52:
        return {InvalidMessagesCount}, None
    if byte < 256:
        return {InvalidReservedField}, None
    index = max(i for i in range(len(POSITIONS) - 1) if POSITIONS[i] <= byte)
    at = byte - POSITIONS[index]
    if 32 <= at < 40:  # a length: the frame overruns the blob, or hashes the wrong span
        return {FrameOutOfBounds, InvalidMessageChecksum}, index
    if 40 <= at < 48:
        return {InvalidReservedField}, index
    return {InvalidMessageChecksum}, index


@pytest.mark.parametrize("byte", range(len(BATCH)))
def test_every_bit_flip_is_refused_with_the_right_error(byte):
    classes, frame_index = expected_for(byte)
    for bit in range(8):
        mutated = bytearray(BATCH)
        mutated[byte] ^= 1 << bit
        with pytest.raises(CodecError) as info:
            B.verify(mutated)
        assert type(info.value) in classes, (byte, bit, info.value)
        if frame_index is not None:
            assert info.value.frame_index == frame_index, (byte, bit, info.value)
        if type(info.value) is InvalidReservedField:
            assert info.value.offset == (byte if byte < 256 else POSITIONS[frame_index] + 40)
        # the reference walk agrees exactly
        with pytest.raises(type(info.value)) as ref:
            B._diagnose(memoryview(bytes(mutated)), True)
        assert str(ref.value) == str(info.value)
        # and admission leaves a refused batch untouched
        before = bytes(mutated)
        with pytest.raises(CodecError):
            B.verify_and_stamp(mutated, 1, 2, 3)
        assert mutated == before


def test_every_truncation_and_extension_is_refused():
    for size in range(len(BATCH)):
        with pytest.raises((TruncatedBatch, InvalidBatchLength)) as info:
            B.verify(BATCH[:size])
        assert type(info.value) is (TruncatedBatch if size < 256 else InvalidBatchLength)
    for extra in (b"\0", bytes(48), BATCH):
        with pytest.raises(InvalidBatchLength):
            B.verify(BATCH + extra)


def test_every_consistent_truncation_is_refused():
    """Cut the blob anywhere and fix batch_length to match: the frame walk catches it."""
    for size in range(256, len(BATCH)):
        cut = bytearray(BATCH[:size])
        struct.pack_into("<Q", cut, 32, size)
        with pytest.raises(CodecError) as info:
            B.verify(cut)
        if size in POSITIONS:  # cut at a frame boundary: too few frames
            assert type(info.value) is InvalidMessagesCount
        else:
            assert type(info.value) is FrameOutOfBounds
            assert info.value.frame_index == max(i for i, p in enumerate(POSITIONS) if p <= size)


def test_the_unmutated_batch_passes():
    assert B.verify(BATCH).message_count == 3
