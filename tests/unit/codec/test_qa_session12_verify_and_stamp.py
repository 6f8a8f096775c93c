"""QA, session 12, about branch hw12-send: ``_batch_c.verify_and_stamp`` against its reference
``batch._py_verify_and_stamp``, with strategies of this file's own (not the branch's).

Batches are built from messages whose origin timestamps spread over the whole u64 range (near
the largest one whose u32 deltas still fit), then mutated by writes of odd values at the
header's and the frames' field positions and anywhere else, cut, or grown; the stamp
arguments range past u64 both ways and include bools; the buffer is a bytearray, a writable
memoryview (sliced out of a larger buffer, or of another item size), or read-only. The
public ``verify_and_stamp`` (compiled, then the reference when the compiled call declines)
must give what the reference gives (the same header, or the same error class, code, text
and place) and leave the same bytes; the compiled call alone returns the reference's
fields or None, and writes nothing when it returns None."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from headwater import _native
from headwater.codec import batch as B
from headwater.codec.errors import CodecError

if _native.DISABLED or B._compiled is None or B._verify_and_stamp is None:
    pytest.skip("the compiled verify_and_stamp is not in use here", allow_module_level=True)

U64 = (1 << 64) - 1
SAFE = U64 - 0xFFFFFFFF

origins = st.one_of(st.integers(0, 1 << 53), st.integers(SAFE - (1 << 33), U64), st.just(SAFE), st.just(SAFE + 1))
messages = st.lists(
    st.builds(B.Message, payload=st.binary(max_size=300), id=st.integers(0, (1 << 128) - 1),
              origin_timestamp=origins),
    min_size=1, max_size=6)
odd = st.sampled_from([0, 1, 2, 47, 48, 255, 256, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 1 << 32, SAFE, SAFE + 1, U64])
# field positions: batch header (0..52 and a reserved byte), then frame-relative ones
header_at = st.sampled_from([0, 8, 16, 24, 32, 40, 48, 52, 100, 255])
frame_at = st.sampled_from([0, 8, 24, 28, 32, 36, 40, 44, 47])
stamp_arg = st.one_of(st.integers(0, U64), st.sampled_from([-1, U64 + 1, 1 << 70, True, False]))


@st.composite
def mutated(draw):
    try:
        batch = bytearray(B.build_batch(draw(messages)))
    except CodecError:  # timestamps the builder refuses: a plain batch instead
        batch = bytearray(B.build_batch([B.Message(b"x")]))
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.integers(0, 5))
        if kind == 0:
            at, width = draw(header_at), draw(st.sampled_from([1, 4, 8]))
            value = draw(odd) & ((1 << (8 * width)) - 1)
            if at + width <= len(batch):
                batch[at:at + width] = value.to_bytes(width, "little")
        elif kind == 1:
            positions = B.frame_positions(batch) if _walkable(batch) else [256]
            at = draw(st.sampled_from(positions)) + draw(frame_at)
            value = draw(odd) & 0xFFFFFFFF
            if at + 4 <= len(batch):
                batch[at:at + 4] = value.to_bytes(4, "little")
        elif kind == 2 and batch:
            at = draw(st.integers(0, len(batch) - 1))
            batch[at] = draw(st.integers(0, 255))
        elif kind == 3:
            del batch[draw(st.integers(0, len(batch))):]
        elif kind == 4:
            batch += draw(st.binary(min_size=1, max_size=60))
        else:  # keep batch_length telling the truth after a cut or growth
            if len(batch) >= 40:
                struct.pack_into("<Q", batch, 32, len(batch))
    if draw(st.booleans()) and len(batch) >= 256 and _walkable(batch):  # a checksum that agrees again
        struct.pack_into("<Q", batch, 40, B.compute_batch_checksum(batch))
    return batch


def _walkable(batch) -> bool:
    try:
        B.frame_positions(batch)
        return True
    except Exception:
        return False


def outcome(fn, buf, *args):
    try:
        return ("ok", tuple(fn(buf, *args)))
    except CodecError as exc:
        return (type(exc), exc.code, str(exc), exc.offset, exc.frame_index)
    except (TypeError, struct.error, OverflowError, ValueError) as exc:
        return (type(exc),)


def buffers(raw: bytearray, kind: str):
    """(the buffer handed over, a function giving its bytes after the call)."""
    if kind == "bytearray":
        b = bytearray(raw)
        return b, lambda: bytes(b)
    if kind == "slice":
        outer = bytearray(b"\xaa" * 8 + raw + b"\xbb" * 8)
        return memoryview(outer)[8:8 + len(raw)], lambda: bytes(outer)
    if kind == "readonly":
        return bytes(raw), lambda: b""
    # another item size: a memoryview of 8-byte items over the same bytes
    pad = (-len(raw)) % 8
    outer = bytearray(raw + b"\0" * pad)
    mv = memoryview(outer).cast("Q")
    return (mv, lambda: bytes(outer)) if not pad else (memoryview(outer)[:len(raw)], lambda: bytes(outer))


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(raw=mutated(), pid=stamp_arg, base=stamp_arg, ts=stamp_arg, deltas=st.booleans(),
       kind=st.sampled_from(["bytearray", "slice", "readonly", "items"]))
def test_the_compiled_admission_is_the_reference(raw, pid, base, ts, deltas, kind):
    ref_buf, ref_after = buffers(raw, kind)
    expected = outcome(B._py_verify_and_stamp, ref_buf, pid, base, ts, deltas)
    event(f"{kind}: {expected[0] if expected[0] == 'ok' else expected[0].__name__}")
    ref_bytes = ref_after()

    pub_buf, pub_after = buffers(raw, kind)
    got = outcome(lambda b, *a: B.verify_and_stamp(b, *a[:3], check_offset_deltas=a[3]), pub_buf, pid, base, ts, deltas)
    assert got == expected
    assert pub_after() == ref_bytes

    c_buf, c_after = buffers(raw, kind)
    before = c_after()
    try:
        fields = B._verify_and_stamp(c_buf, pid, base, ts, deltas)
    except (TypeError, ValueError, OverflowError) as exc:  # the compiled call never raises on data
        pytest.fail(f"the compiled call raised {exc!r}")
    if fields is None:
        assert c_after() == before, "the compiled call declined but wrote"
    else:
        assert expected == ("ok", tuple(fields)), (fields, expected)
        assert c_after() == ref_bytes
