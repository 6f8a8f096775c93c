"""Iggy batch codec: round trips, golden bytes, each admission check, garbage.

Spec: shared/spec/iggy-message-batches.md and NOTES.md (checksum formulas).
"""

from __future__ import annotations

import struct

import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater.codec import batch as B
from headwater.codec.errors import (
    CodecError,
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

U64 = 2**64 - 1
U32 = 2**32 - 1


# --------------------------------------------------------------------------- strategies


@st.composite
def message_lists(draw, max_size=12, max_payload=300):
    base = draw(st.integers(0, U64 - U32))
    n = draw(st.integers(1, max_size))
    return [
        B.Message(
            payload=draw(st.binary(max_size=max_payload)),
            id=draw(st.integers(0, 2**128 - 1)),
            origin_timestamp=base + draw(st.integers(0, U32)),
            user_headers=draw(st.binary(max_size=40)),
        )
        for _ in range(n)
    ]


stamps = st.tuples(st.integers(0, U64), st.integers(0, U64), st.integers(0, U64))


def outcome(fn, *args, **kwargs):
    """What a call does: its result, or the error's class, text and location."""
    try:
        return ("ok", fn(*args, **kwargs))
    except CodecError as exc:
        return (type(exc), str(exc), exc.offset, exc.frame_index)


def hand_frame(payload: bytes, *, ident=0, offset_delta=0, ts_delta=0, headers=b"", reserved=0):
    """A frame written field by field from the spec table, with its producer checksum."""
    body = (
        ident.to_bytes(16, "little")
        + offset_delta.to_bytes(4, "little")
        + ts_delta.to_bytes(4, "little")
        + len(headers).to_bytes(4, "little")
        + len(payload).to_bytes(4, "little")
        + reserved.to_bytes(8, "little")
        + payload
        + headers
    )
    return xxhash.xxh3_64_intdigest(body).to_bytes(8, "little") + body


def hand_batch(frames, *, partition_id=0, base_offset=0, base_timestamp=0, origin=0, count=None):
    """A batch assembled from the spec: header fields, checksum per NOTES.md, reserved zero."""
    blob = b"".join(frames)
    length = 256 + len(blob)
    count = len(frames) if count is None else count
    fields = struct.pack("<5QI", partition_id, base_offset, base_timestamp, origin, length, count)
    sums = b"".join(f[:8] for f in frames)
    checksum = xxhash.xxh3_64_intdigest(fields + sums)
    header = (
        struct.pack("<QQQQQQI", partition_id, base_offset, base_timestamp, origin, length, checksum, count)
        + bytes(204)
    )
    return header + blob


def rechecksum(batch: bytearray) -> None:
    """Rewrite the batch checksum to match the (possibly tampered) header and frames."""
    struct.pack_into("<Q", batch, 40, B.compute_batch_checksum(batch))


# --------------------------------------------------------------------------- golden bytes


def test_xxh3_is_the_spec_hash():
    # XXH3_64bits of the empty input, from the xxHash reference test vectors.
    assert xxhash.xxh3_64_intdigest(b"") == 0x2D06800538D394C2


def test_golden_tiny_batch():
    """One message "hi", id 1, origin 1000 µs, no headers: every byte from the spec tables."""
    raw = B.build_batch([B.Message(b"hi", id=1, origin_timestamp=1000)])
    frame_body = bytes.fromhex(
        "01000000000000000000000000000000"  # id u128 = 1
        "00000000"  # offset_delta = 0
        "00000000"  # timestamp_delta = 0
        "00000000"  # user_headers_length = 0
        "02000000"  # payload_length = 2
        "0000000000000000"  # reserved
        "6869"  # payload "hi"
    )
    frame_checksum = xxhash.xxh3_64_intdigest(frame_body)
    batch_length = 256 + 8 + len(frame_body)
    assert batch_length == 306
    covered = bytes.fromhex(
        "0000000000000000"  # partition_id
        "0000000000000000"  # base_offset
        "0000000000000000"  # base_timestamp
        "e803000000000000"  # origin_timestamp = 1000
        "3201000000000000"  # batch_length = 306
        "01000000"  # message_count = 1
    ) + frame_checksum.to_bytes(8, "little")
    batch_checksum = xxhash.xxh3_64_intdigest(covered)
    expected = (
        covered[:40]
        + batch_checksum.to_bytes(8, "little")
        + bytes.fromhex("01000000")
        + bytes(204)
        + frame_checksum.to_bytes(8, "little")
        + frame_body
    )
    assert raw == expected
    assert raw == hand_batch([hand_frame(b"hi", ident=1)], origin=1000)
    h = B.verify(raw)
    assert h == B.BatchHeader(0, 0, 0, 1000, 306, batch_checksum, 1)

    stamped = bytearray(raw)
    B.stamp(stamped, 7, 100, 5_000_000)
    covered2 = struct.pack("<5QI", 7, 100, 5_000_000, 1000, 306, 1) + frame_checksum.to_bytes(8, "little")
    assert stamped[:24] == struct.pack("<QQQ", 7, 100, 5_000_000)
    assert stamped[40:48] == xxhash.xxh3_64_intdigest(covered2).to_bytes(8, "little")
    assert stamped[24:40] == raw[24:40] and stamped[48:] == raw[48:]


def test_golden_two_frames_with_headers_and_deltas():
    headers = bytes.fromhex("02010000006b" "0201000000" "76")  # {"k": "v"}, both String
    frames = [
        hand_frame(b"", ident=5, offset_delta=0, ts_delta=20),
        hand_frame(b"abc", ident=6, offset_delta=1, ts_delta=0, headers=headers),
    ]
    expected = hand_batch(frames, origin=10)
    raw = B.build_batch(
        [
            B.Message(b"", id=5, origin_timestamp=30),
            B.Message(b"abc", id=6, origin_timestamp=10, user_headers=headers),
        ]
    )
    assert raw == expected


# --------------------------------------------------------------------------- round trips


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(message_lists())
def test_build_verify_walk_round_trip(messages):
    raw = B.build_batch(messages)
    h = B.verify(raw)
    origin = min(m.origin_timestamp for m in messages)
    assert (h.partition_id, h.base_offset, h.base_timestamp) == (0, 0, 0)
    assert h.origin_timestamp == origin
    assert h.batch_length == len(raw)
    assert h.message_count == len(messages)
    frames = list(B.iter_frames(raw))
    assert len(frames) == len(messages)
    positions = B.frame_positions(raw)
    assert positions[0] == 256 and positions[-1] == len(raw)
    for index, (frame, m) in enumerate(zip(frames, messages)):
        assert bytes(frame.payload) == m.payload
        assert bytes(frame.user_headers) == m.user_headers
        assert frame.id == m.id
        assert frame.offset_delta == index
        assert origin + frame.timestamp_delta == m.origin_timestamp
        assert frame.position == positions[index]
        assert frame.position + frame.size == positions[index + 1]
        assert frame.checksum == xxhash.xxh3_64_intdigest(raw[frame.position + 8 : positions[index + 1]])
    assert B.frame_checksums(raw) == b"".join(struct.pack("<Q", f.checksum) for f in frames)
    assert B.compute_batch_checksum(raw) == h.batch_checksum
    assert B.verify_batch(raw) == (h, B.frame_checksums(raw))


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(message_lists(), stamps, st.booleans())
def test_stamp_then_verify(messages, values, pass_checksums):
    raw = B.build_batch(messages)
    batch = bytearray(raw)
    sums = B.verify_batch(raw).frame_checksums if pass_checksums else None
    new_checksum = B.stamp(batch, *values, sums)
    h = B.verify(batch)
    assert (h.partition_id, h.base_offset, h.base_timestamp) == values
    assert h.batch_checksum == new_checksum
    assert batch[24:40] == raw[24:40]
    assert batch[48:] == raw[48:]  # count, reserved and every frame untouched
    # restamping is idempotent and order-free
    again = bytearray(raw)
    B.stamp(again, 1, 2, 3)
    B.stamp(again, *values)
    assert again == batch


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(message_lists(), stamps)
def test_verify_and_stamp_matches_the_two_steps(messages, values):
    raw = B.build_batch(messages)
    one = bytearray(raw)
    h = B.verify_and_stamp(one, *values)
    two = bytearray(raw)
    B.verify(two)
    B.stamp(two, *values)
    assert one == two
    assert h == B.read_header(one)


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(message_lists(max_size=10), stamps, st.data())
def test_slice_is_a_valid_batch_with_identical_frames(messages, values, data):
    batch = bytearray(B.build_batch(messages))
    B.stamp(batch, *values)
    n = len(messages)
    start = data.draw(st.integers(0, n - 1))
    stop = data.draw(st.integers(start + 1, n))
    sliced = B.slice_batch(batch, start, stop)
    h = B.verify(sliced, check_offset_deltas=False)
    orig = B.read_header(batch)
    assert (h.partition_id, h.base_offset, h.base_timestamp, h.origin_timestamp) == (
        orig.partition_id,
        orig.base_offset,
        orig.base_timestamp,
        orig.origin_timestamp,
    )
    assert h.message_count == stop - start
    positions = B.frame_positions(batch)
    assert sliced[256:] == batch[positions[start] : positions[stop]]
    assert sliced[52:256] == bytes(204)
    deltas = [f.offset_delta for f in B.iter_frames(sliced)]
    assert deltas == list(range(start, stop))
    assert B.offset_range(sliced) == (orig.base_offset + start, orig.base_offset + stop)
    assert B.offset_range(batch) == (orig.base_offset, orig.base_offset + n)
    if start:
        with pytest.raises(InvalidOffsetDelta) as info:
            B.verify(sliced)
        assert info.value.frame_index == 0
    else:
        B.verify(sliced)
    if (start, stop) == (0, n):
        assert sliced == bytes(batch)


def test_slice_range_errors():
    raw = B.build_batch([B.Message(b"a"), B.Message(b"b")])
    for start, stop in [(0, 0), (1, 1), (2, 3), (-1, 1), (1, 0), (0, 3)]:
        with pytest.raises(InvalidFormat):
            B.slice_batch(raw, start, stop)


@given(st.lists(message_lists(max_size=4, max_payload=60), min_size=1, max_size=5))
def test_split_batches(batches):
    raws = [B.build_batch(m) for m in batches]
    joined = b"".join(raws)
    assert [bytes(v) for v in B.split_batches(joined)] == raws
    # iter_frames walks only the first batch of a longer buffer
    assert len(list(B.iter_frames(joined))) == len(batches[0])


def test_split_batches_errors():
    raw = B.build_batch([B.Message(b"x" * 10)])
    with pytest.raises(TruncatedBatch) as info:
        list(B.split_batches(raw + raw[:100]))
    assert info.value.offset == len(raw)
    with pytest.raises(InvalidBatchLength) as info:
        list(B.split_batches(raw + raw[:-1]))
    assert info.value.offset == len(raw) + 32
    bad = bytearray(raw)
    struct.pack_into("<Q", bad, 32, 255)
    with pytest.raises(InvalidBatchLength):
        list(B.split_batches(bad))
    assert list(B.split_batches(b"")) == []


def test_walk_accepts_memoryview_of_other_format():
    raw = B.build_batch([B.Message(b"abcd" * 3), B.Message(b"zz")])
    assert len(raw) % 2 == 0
    view = memoryview(raw).cast("H")
    assert B.verify(view) == B.verify(raw)
    assert [bytes(f.payload) for f in B.iter_frames(view)] == [b"abcd" * 3, b"zz"]


# --------------------------------------------------------------------------- build errors


def test_build_errors():
    with pytest.raises(InvalidFormat):
        B.build_batch([])
    with pytest.raises(InvalidFormat):
        B.build_batch([B.Message(b"", id=2**128)])
    with pytest.raises(InvalidFormat):
        B.build_batch([B.Message(b"", id=-1)])
    with pytest.raises(InvalidFormat):
        B.build_batch([B.Message(b"", origin_timestamp=-1)])
    with pytest.raises(InvalidFormat):
        B.build_batch([B.Message(b"", origin_timestamp=2**64)])


def test_timestamp_span_bound():
    ok = B.build_batch([B.Message(b"a", origin_timestamp=5), B.Message(b"b", origin_timestamp=5 + U32)])
    assert [f.timestamp_delta for f in B.iter_frames(ok)] == [0, U32]
    with pytest.raises(InvalidMessageTimestampDelta) as info:
        B.build_batch(
            [B.Message(b"a", origin_timestamp=5), B.Message(b"b", origin_timestamp=5 + U32 + 1)]
        )
    assert info.value.frame_index == 1
    assert info.value.code == 4038


def test_verify_rejects_producer_time_past_u64():
    batch = bytearray(
        B.build_batch([B.Message(b"a", origin_timestamp=10), B.Message(b"b", origin_timestamp=11)])
    )
    B.verify(batch)
    struct.pack_into("<Q", batch, 24, U64)  # origin + delta 1 overflows u64
    rechecksum(batch)
    with pytest.raises(InvalidMessageTimestampDelta) as info:
        B.verify(batch)
    assert info.value.frame_index == 1
    struct.pack_into("<Q", batch, 24, U64 - 1)  # origin + 1 == u64 max: fine
    rechecksum(batch)
    assert B.verify(batch).origin_timestamp == U64 - 1


# --------------------------------------------------------------------------- each admission check


def good_batch():
    return bytearray(
        B.build_batch(
            [
                B.Message(b"first", id=1),
                B.Message(b"", id=2, user_headers=b"hh"),
                B.Message(b"third" * 4, id=3),
            ]
        )
    )


def test_error_codes():
    assert TruncatedBatch.code == InvalidBatchLength.code == FrameOutOfBounds.code == 4
    assert InvalidOffsetDelta.code == InvalidFormat.code == 4
    assert InvalidMessagesCount.code == 4009
    assert InvalidMessageChecksum.code == 4027
    assert InvalidMessageTimestampDelta.code == 4038
    assert InvalidBatchChecksum.code == 4039
    assert InvalidReservedField.code == 4101
    for cls in (TruncatedBatch, InvalidBatchLength, FrameOutOfBounds, InvalidOffsetDelta):
        assert issubclass(cls, InvalidFormat)


def test_header_size():
    for n in (0, 1, 255):
        with pytest.raises(TruncatedBatch):
            B.verify(bytes(n))
        with pytest.raises(TruncatedBatch):
            B.read_header(bytes(n))


def test_batch_length_must_equal_bytes_given():
    batch = good_batch()
    with pytest.raises(InvalidBatchLength) as info:
        B.verify(batch + b"\0")
    assert info.value.offset == 32
    with pytest.raises(InvalidBatchLength):
        B.verify(batch[:-1])


def test_batch_reserved_bytes():
    for i in (52, 100, 255):
        batch = good_batch()
        batch[i] = 0x80
        with pytest.raises(InvalidReservedField) as info:
            B.verify(batch)
        assert info.value.offset == i


def test_frame_reserved_bytes():
    batch = good_batch()
    second = B.frame_positions(batch)[1]
    batch[second + 47] = 1
    with pytest.raises(InvalidReservedField) as info:
        B.verify(batch)
    assert (info.value.frame_index, info.value.offset) == (1, second + 40)


@pytest.mark.parametrize("check", [True, False])
def test_frame_reserved_bytes_even_with_good_checksums(check):
    frames = [hand_frame(b"x"), hand_frame(b"y", offset_delta=1, reserved=1 << 63)]
    with pytest.raises(InvalidReservedField) as info:
        B.verify(hand_batch(frames), check_offset_deltas=check)
    assert (info.value.frame_index, info.value.offset) == (1, 256 + 49 + 40)


def test_frame_checksum():
    batch = good_batch()
    third = B.frame_positions(batch)[2]
    batch[-1] ^= 0x01
    with pytest.raises(InvalidMessageChecksum) as info:
        B.verify(batch)
    assert (info.value.frame_index, info.value.offset) == (2, third)
    assert info.value.code == 4027


def test_offset_delta_must_be_the_index():
    frames = [hand_frame(b"a", offset_delta=0), hand_frame(b"b", offset_delta=7)]
    raw = hand_batch(frames)
    with pytest.raises(InvalidOffsetDelta) as info:
        B.verify(raw)
    assert (info.value.frame_index, info.value.offset) == (1, 256 + 49 + 24)
    assert B.verify(raw, check_offset_deltas=False).message_count == 2


def test_message_count():
    frames = [hand_frame(b"a"), hand_frame(b"b", offset_delta=1)]
    for count in (0, 1, 3, U32):
        with pytest.raises(InvalidMessagesCount) as info:
            B.verify(hand_batch(frames, count=count))
        assert info.value.offset == 48
    with pytest.raises(InvalidMessagesCount):
        B.verify(hand_batch([], count=0))  # an empty batch is refused, as Iggy does


def test_huge_message_count_is_refused_before_any_allocation():
    batch = good_batch()
    struct.pack_into("<I", batch, 48, U32)
    for fn in (
        B.verify,
        B.frame_positions,
        B.frame_checksums,
        B.compute_batch_checksum,
        lambda b: B.stamp(b, 1, 2, 3),
        lambda b: B.slice_batch(b, 1, U32),
    ):
        with pytest.raises(InvalidMessagesCount):
            fn(batch)


def test_frame_out_of_bounds():
    frames = [hand_frame(b"a" * 10)]
    raw = bytearray(hand_batch(frames))
    struct.pack_into("<I", raw, 256 + 36, 11)  # payload_length one past the blob
    with pytest.raises(FrameOutOfBounds) as info:
        B.verify(raw)
    assert (info.value.frame_index, info.value.offset) == (0, 256)
    # a crafted overrun whose checksum matches the bytes that are there
    for check in (True, False):
        crafted = bytearray(hand_batch([hand_frame(b"a"), hand_frame(b"b" * 10, offset_delta=1)]))
        last = 256 + 49
        struct.pack_into("<I", crafted, last + 36, 17)
        struct.pack_into("<Q", crafted, last, xxhash.xxh3_64_intdigest(bytes(crafted[last + 8 :])))
        with pytest.raises(FrameOutOfBounds) as info:
            B.verify(bytes(crafted), check_offset_deltas=check)
        assert (info.value.frame_index, info.value.offset) == (1, last)
    tail = bytearray(hand_batch(frames)) + bytes(20)  # 20 bytes: not a frame header
    struct.pack_into("<Q", tail, 32, len(tail))
    with pytest.raises(FrameOutOfBounds) as info:
        B.verify(tail)
    assert info.value.frame_index == 1


def test_batch_checksum():
    batch = good_batch()
    batch[8] ^= 0x10  # base_offset is covered by the batch checksum only
    with pytest.raises(InvalidBatchChecksum) as info:
        B.verify(batch)
    assert info.value.offset == 40


# --------------------------------------------------------------------------- stamp / walk errors


def test_stamp_needs_a_writable_buffer():
    raw = B.build_batch([B.Message(b"a")])
    with pytest.raises(TypeError):
        B.stamp(raw, 1, 2, 3)
    with pytest.raises(TypeError):
        B.verify_and_stamp(raw, 1, 2, 3)


def test_stamp_refuses_and_leaves_bytes_alone():
    batch = good_batch()
    before = bytes(batch)
    with pytest.raises(InvalidMessagesCount):
        B.stamp(batch, 1, 2, 3, b"\0" * 8)
    bad = bytearray(before)
    bad[60] = 1
    with pytest.raises(InvalidReservedField):
        B.stamp(bad, 1, 2, 3)
    short = bytearray(before)
    struct.pack_into("<I", short, 48, 4)  # one frame more than the blob holds
    with pytest.raises(InvalidMessagesCount):
        B.stamp(short, 1, 2, 3)
    with pytest.raises(TruncatedBatch):
        B.stamp(bytearray(10), 1, 2, 3)
    with pytest.raises(InvalidBatchLength):
        B.stamp(batch[:-1], 1, 2, 3)
    assert batch == before
    corrupt = bytearray(before)
    corrupt[-1] ^= 1
    with pytest.raises(InvalidMessageChecksum):
        B.verify_and_stamp(corrupt, 1, 2, 3)
    assert corrupt[:48] == before[:48]


def test_stamp_a_batch_inside_a_larger_buffer():
    raw = B.build_batch([B.Message(b"abc")])
    buf = bytearray(b"X" * 16 + raw + b"Y" * 16)
    view = memoryview(buf)[16 : 16 + len(raw)]
    B.verify_and_stamp(view, 3, 4, 5)
    assert buf[:16] == b"X" * 16 and buf[-16:] == b"Y" * 16
    assert B.verify(buf[16:-16]).base_offset == 4


def test_iter_frames_errors():
    with pytest.raises(TruncatedBatch):
        list(B.iter_frames(b"\0" * 10))
    raw = bytearray(good_batch())
    struct.pack_into("<Q", raw, 32, len(raw) + 1)
    with pytest.raises(InvalidBatchLength):
        list(B.iter_frames(raw))
    raw = bytearray(good_batch())
    struct.pack_into("<I", raw, 256 + 36, 10_000)
    walked = []
    with pytest.raises(FrameOutOfBounds):
        for frame in B.iter_frames(raw):
            walked.append(frame)
    assert walked == []


# --------------------------------------------------------------------------- fast path == reference


def both(buf, check=True):
    fast = outcome(B.verify_batch, buf, check_offset_deltas=check)
    ref = outcome(B._diagnose, memoryview(buf), check)
    return fast, ref


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(message_lists(max_size=5, max_payload=80), st.data(), st.booleans())
def test_fast_path_agrees_with_reference_on_mutations(messages, data, check):
    batch = bytearray(B.build_batch(messages))
    if data.draw(st.booleans()):
        B.stamp(batch, *data.draw(stamps))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(batch) - 1))
        batch[i] ^= data.draw(st.integers(1, 255))
    if data.draw(st.booleans()):
        rechecksum_ok = outcome(B.compute_batch_checksum, batch)
        if rechecksum_ok[0] == "ok":
            struct.pack_into("<Q", batch, 40, rechecksum_ok[1])
    fast, ref = both(bytes(batch), check)
    assert fast == ref


@given(st.binary(min_size=0, max_size=700), st.booleans())
def test_garbage_raises_only_codec_errors(data, check):
    fast, ref = both(data, check)
    assert fast == ref
    assert fast[0] != "ok"  # random bytes never form a valid batch


@st.composite
def plausible_garbage(draw):
    """Random frames behind a header whose batch_length is right, to reach the frame walk."""
    blob = draw(st.binary(min_size=0, max_size=600))
    count = draw(st.integers(0, 20))
    header = bytearray(256)
    stamps_and_origin = [draw(st.integers(0, U64)) for _ in range(4)]
    struct.pack_into("<QQQQQQI", header, 0, *stamps_and_origin, 256 + len(blob), 0, count)
    return bytes(header) + blob


@given(plausible_garbage(), st.booleans())
def test_plausible_garbage(buf, check):
    fast, ref = both(buf, check)
    assert fast == ref
    for fn in (
        B.frame_positions,
        B.frame_checksums,
        B.compute_batch_checksum,
        lambda b: list(B.iter_frames(b)),
    ):
        outcome(fn, buf)  # raises nothing but CodecError
    outcome(B.slice_batch, buf, 0, 1)
    outcome(B.stamp, bytearray(buf), 1, 2, 3)
    outcome(lambda b: list(B.split_batches(b)), buf)


@given(st.binary(max_size=600))
def test_walkers_on_garbage_raise_only_codec_errors(data):
    for fn in (
        B.read_header,
        B.frame_positions,
        B.frame_checksums,
        B.compute_batch_checksum,
        lambda b: list(B.iter_frames(b)),
        lambda b: list(B.split_batches(b)),
        lambda b: B.slice_batch(b, 0, 1),
        lambda b: B.stamp(bytearray(b), 1, 2, 3),
    ):
        outcome(fn, data)


def test_reference_accepts_what_fast_path_accepts():
    raw = bytes(good_batch())
    assert B._diagnose(memoryview(raw), True) == B.verify_batch(raw)
    # an origin near u64 max takes the reference path and still passes
    batch = bytearray(B.build_batch([B.Message(b"a", origin_timestamp=U64)]))
    assert B.verify(batch).origin_timestamp == U64


def test_fast_path_is_used_for_valid_batches(monkeypatch):
    raw = bytes(good_batch())

    def no_reference(*args):
        raise AssertionError("the reference walk ran on a valid batch")

    monkeypatch.setattr(B, "_diagnose", no_reference)
    B.verify(raw)
    B.verify(raw, check_offset_deltas=False)
