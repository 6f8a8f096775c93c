"""The compiled frame walks (``headwater.codec._batch_c``) against the pure-Python references.

The references in ``batch.py`` are the specification: on valid batches and on
mutated ones (bit flips, truncations, frame lengths and counts that lie, dirty
reserved bytes, wrong offset deltas) both implementations must give identical
results, identical bytes written, and identical errors (class, code, message,
offset and frame index). The XXH3-64 the walks call (``headwater.codec._xxh3_c``,
the xxHash library's own function) is checked against the ``xxhash`` package on
every input-length class of the algorithm.

Skipped only when the extension is disabled (HEADWATER_NO_EXTENSIONS=1) or not
built outside CI; in CI (``CI`` set) a missing extension is a failure.
"""

from __future__ import annotations

import os
import struct
from contextlib import contextmanager

import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater import _native
from headwater.codec import batch as B
from headwater.codec.errors import CodecError

pytestmark = pytest.mark.slow  # a file of long tests: handed out first (tests/conftest.py)

if _native.DISABLED:
    pytest.skip("HEADWATER_NO_EXTENSIONS=1: the compiled walks are disabled", allow_module_level=True)
if B._compiled is None:
    if os.environ.get("CI"):
        raise RuntimeError("headwater.codec._batch_c is not built; CI must build it (pip install -e .)")
    pytest.skip("headwater.codec._batch_c is not built (pip install -e . compiles it)", allow_module_level=True)

C = B._compiled
U64 = 2**64 - 1
U32 = 2**32 - 1


@contextmanager
def switched(use, name: str):
    """``use(name)`` (a setter returning the previous choice) for the block, then back."""
    previous = use(name)
    try:
        yield
    finally:
        use(previous)


def using(name: str):
    """The batch codec on the ``name`` frame walks ("python" or "compiled") for the block."""
    return switched(B.use_implementation, name)


def outcome(fn, *args):
    """A call's result, or its error's class, code, text and location."""
    try:
        return ("ok", fn(*args))
    except CodecError as exc:
        return (type(exc), exc.code, str(exc), exc.offset, exc.frame_index)


def both(fn, buf, *args, writable=False, compare=None):
    """``fn`` under each implementation on its own copy of ``buf``: (outcome, bytes after);
    ``compare`` is the outcome function (default :func:`outcome`)."""
    results = []
    for name in ("python", "compiled"):
        copy = bytearray(buf) if writable else bytes(buf)
        with using(name):
            results.append(((compare or outcome)(fn, copy, *args), bytes(copy)))
    return results


# --------------------------------------------------------------------------- the hash


# every path of XXH3-64: empty, 1-3, 4-8, 9-16, 17-128, 129-240, and over 240 bytes
# (one block, block boundaries at 1024, several blocks, last stripe overlapping)
LENGTHS = sorted(
    set(range(0, 300))
    | {511, 512, 513, 1023, 1024, 1025, 1040, 2047, 2048, 2049, 4096, 4159, 65536, 148_000}
)


def test_the_walks_hash_with_the_shared_xxh3_module():
    from headwater.codec import _xxh3_c

    assert C.xxh3_64 is _xxh3_c.xxh3_64
    # the library's own function, from the xxhash package's extension (or the system library)
    assert _xxh3_c.source().startswith(("XXH3_64bits_dispatch in ", "XXH3_64bits in ")), _xxh3_c.source()


@pytest.mark.parametrize("n", LENGTHS)
def test_xxh3_matches_the_xxhash_package_on_every_length_class(n):
    data = bytes((i * 131 + n) & 0xFF for i in range(n))
    assert C.xxh3_64(data) == xxhash.xxh3_64_intdigest(data)


@settings(max_examples=300)
@given(st.binary(max_size=3000), st.integers(0, 7))
def test_xxh3_matches_on_random_bytes(data, skip):
    assert C.xxh3_64(data) == xxhash.xxh3_64_intdigest(data)
    # any start alignment, as frames lie at arbitrary offsets in a batch
    assert C.xxh3_64(memoryview(data)[skip:]) == xxhash.xxh3_64_intdigest(data[skip:])


# --------------------------------------------------------------------------- batches


@st.composite
def batches(draw, max_frames=8, max_payload=1300):
    """A valid batch, stamped or not (payloads long enough to reach the long hash path)."""
    n = draw(st.integers(1, max_frames))
    origin = draw(st.integers(0, U64 - U32))
    messages = [
        B.Message(
            payload=draw(st.binary(max_size=draw(st.sampled_from([0, 16, 200, max_payload])))),
            id=draw(st.integers(0, 2**128 - 1)),
            origin_timestamp=origin + draw(st.integers(0, 1000)),
            user_headers=draw(st.binary(max_size=30)),
        )
        for _ in range(n)
    ]
    raw = bytearray(B.build_batch(messages))
    if draw(st.booleans()):
        B.stamp(raw, draw(st.integers(0, U64)), draw(st.integers(0, U64)), draw(st.integers(0, U64)))
    return bytes(raw)


def frame_starts(raw: bytes) -> list[int]:
    return B._py_walk(memoryview(raw), len(raw), struct.unpack_from("<I", raw, 48)[0])[0]


def reseal_frame(raw: bytearray, frame: int) -> None:
    """Give the frame at ``frame`` the checksum its (tampered) bytes call for, when it fits,
    so the walk gets past the checksum to the lie itself."""
    if frame + 48 > len(raw):
        return
    uh_len, p_len = struct.unpack_from("<II", raw, frame + 32)
    end = frame + 48 + p_len + uh_len
    if end <= len(raw):
        struct.pack_into("<Q", raw, frame, xxhash.xxh3_64_intdigest(bytes(raw[frame + 8 : end])))


def lie(draw, truth: int, top: int) -> int:
    """A wrong value for a field: close to the truth (off by a little), or anywhere in range."""
    value = draw(st.one_of(st.integers(-9, 9).map(lambda d: truth + d), st.integers(0, top), st.just(top)))
    return value if 0 <= value <= top and value != truth else (truth + 1) % (top + 1)


@st.composite
def mutated(draw):
    """A valid batch with one to three lies told about it."""
    raw = bytearray(draw(batches()))
    starts = frame_starts(bytes(raw))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "truncate", "extend", "frame_length", "count", "batch_length",
                                     "reserved", "offset_delta", "recount_checksum"]))
        frame = starts[draw(st.integers(0, len(starts) - 2))]
        if kind == "flip" and raw:
            i = draw(st.integers(0, len(raw) - 1))
            raw[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del raw[draw(st.integers(0, len(raw))):]
        elif kind == "extend":
            raw += draw(st.binary(min_size=1, max_size=100))
        elif kind == "frame_length" and frame + 40 <= len(raw):
            at = frame + draw(st.sampled_from([32, 36]))
            struct.pack_into("<I", raw, at, lie(draw, struct.unpack_from("<I", raw, at)[0], U32))
        elif kind == "count" and len(raw) >= 52:
            struct.pack_into("<I", raw, 48, lie(draw, struct.unpack_from("<I", raw, 48)[0], U32))
        elif kind == "batch_length" and len(raw) >= 40:
            struct.pack_into("<Q", raw, 32, lie(draw, struct.unpack_from("<Q", raw, 32)[0], U64))
        elif kind == "reserved" and frame + 48 <= len(raw):
            struct.pack_into("<Q", raw, frame + 40, lie(draw, struct.unpack_from("<Q", raw, frame + 40)[0], U64))
        elif kind == "offset_delta" and frame + 28 <= len(raw):
            struct.pack_into("<I", raw, frame + 24, lie(draw, struct.unpack_from("<I", raw, frame + 24)[0], U32))
        if kind in ("frame_length", "reserved", "offset_delta") and draw(st.booleans()):
            reseal_frame(raw, frame)
        if kind == "recount_checksum" and len(raw) >= 256:
            # re-seal the header so the walk, not the batch checksum, finds the lie
            fixed = outcome(B.compute_batch_checksum, bytes(raw))
            if fixed[0] == "ok":
                struct.pack_into("<Q", raw, 40, fixed[1])
    return bytes(raw)


any_batch = st.one_of(batches(), mutated())


def walk_arguments(raw: bytes):
    size = len(raw)
    count = struct.unpack_from("<I", raw, 48)[0] if size >= 52 else 0
    return size, count


# --------------------------------------------------------------------------- the walks themselves


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(any_batch)
def test_verify_walks_agree(raw):
    mv = memoryview(raw)
    size, count = walk_arguments(raw)
    assert C.verify_frames(mv, size, count) == B._py_verify_frames(mv, size, count)
    assert C.verify_frames_any_delta(mv, size, count) == B._py_verify_frames_any_delta(mv, size, count)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(any_batch, st.data())
def test_position_walks_agree(raw, data):
    mv = memoryview(raw)
    size, count = walk_arguments(raw)
    length = data.draw(st.integers(0, size))  # a batch_length that may sit inside the buffer
    stop = data.draw(st.one_of(st.just(count), st.integers(0, count + 2)))
    start = data.draw(st.integers(0, stop + 1))
    assert C.walk(mv, length, stop) == B._py_walk(mv, length, stop)
    assert C.span(mv, length, start, stop) == B._py_span(mv, length, start, stop)


def test_walks_on_frames_past_a_short_batch_length():
    raw = bytes(B.build_batch([B.Message(b"x" * 10), B.Message(b"y" * 20)]))
    mv = memoryview(raw + bytes(300))  # the buffer runs past batch_length
    for length in (256, 300, len(raw) - 1, len(raw), len(raw) + 50):
        for stop in (0, 1, 2, 3):
            assert C.walk(mv, length, stop) == B._py_walk(mv, length, stop), (length, stop)
            for start in range(stop + 2):
                assert C.span(mv, length, start, stop) == B._py_span(mv, length, start, stop)
        assert C.verify_frames(mv, length, 2) == B._py_verify_frames(mv, length, 2)


# --------------------------------------------------------------------------- the public functions


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(any_batch, st.booleans())
def test_verify_batch_gives_identical_results_and_errors(raw, check):
    python, compiled = both(lambda b: B.verify_batch(b, check_offset_deltas=check), raw)
    assert python == compiled


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(any_batch, st.tuples(st.integers(0, U64), st.integers(0, U64), st.integers(0, U64)))
def test_verify_and_stamp_writes_identical_bytes(raw, stamps):
    python, compiled = both(lambda b: B.verify_and_stamp(b, *stamps), raw, writable=True)
    assert python == compiled


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(any_batch, st.tuples(st.integers(0, U64), st.integers(0, U64), st.integers(0, U64)))
def test_stamp_without_checksums_writes_identical_bytes(raw, stamps):
    python, compiled = both(lambda b: B.stamp(b, *stamps), raw, writable=True)
    assert python == compiled


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(any_batch, st.data())
def test_walkers_and_slices_agree(raw, data):
    count = walk_arguments(raw)[1]
    stop = data.draw(st.integers(0, min(count, 12) + 1))
    start = data.draw(st.integers(0, stop))
    for fn, args in (
        (B.frame_positions, ()),
        (B.frame_checksums, ()),
        (B.compute_batch_checksum, ()),
        (B.slice_batch, (start, stop)),
        (B.last_offset, ()),
    ):
        python, compiled = both(fn, raw, *args, compare=outcome_any)
        assert python == compiled, fn.__name__


def positions_last_offset(batch) -> int:
    """The specification of ``last_offset``: base_offset + the offset_delta of the frame
    that ``frame_positions`` says starts last."""
    positions = B.frame_positions(batch)
    if len(positions) < 2:  # message_count 0 (the walk checked out): no last frame
        raise B.InvalidMessagesCount("message_count is 0: the batch has no last frame", offset=48)
    return B.read_header(batch).base_offset + struct.unpack_from("<I", batch, positions[-2] + 24)[0]


def outcome_any(fn, *args):
    """``outcome``, also naming a non-codec error (a count of 0 has no last frame)."""
    try:
        return outcome(fn, *args)
    except IndexError:
        return ("IndexError",)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(any_batch)
def test_last_offset_matches_the_walk_of_every_position(raw):
    for name in ("python", "compiled"):
        with using(name):
            assert outcome_any(B.last_offset, raw) == outcome_any(positions_last_offset, raw), name


def test_the_compiled_walks_are_in_use():
    assert B.implementation() == "compiled"
    assert _native.implementations()["headwater.codec._batch_c"] == "compiled"
    with using("python"):
        assert B.implementation() == "python"
    assert B.implementation() == "compiled"


def test_unknown_implementation_is_refused():
    with pytest.raises(ValueError):
        B.use_implementation("fortran")
    assert B.implementation() == "compiled"


# --------------------------------------------------------------------------- exhaustive on a small batch


def small_batch() -> bytes:
    messages = [
        B.Message(b"", id=1, origin_timestamp=1_700_000_000_000_000),
        B.Message(b"p" * 150, id=2**127 + 5, origin_timestamp=1_700_000_000_000_007, user_headers=b"\x01" * 9),
        B.Message(b"q" * 300, id=3, origin_timestamp=1_700_000_000_000_003),
    ]
    raw = bytearray(B.build_batch(messages))
    B.stamp(raw, 9, 1_000_000, 1_700_000_000_123_456)
    return bytes(raw)


SMALL = small_batch()
SMALL_STARTS = frame_starts(SMALL)


def sealed_flip(byte: int, bit: int) -> bytes:
    """``SMALL`` with one bit flipped, then its frame re-sealed and the batch re-checksummed:
    only the flipped field itself is wrong."""
    raw = bytearray(SMALL)
    raw[byte] ^= 1 << bit
    frames = [s for s in SMALL_STARTS[:-1] if s <= byte]
    if frames and byte >= frames[-1] + 8:
        reseal_frame(raw, frames[-1])
    fixed = outcome(B.compute_batch_checksum, bytes(raw))
    if fixed[0] == "ok" and not 40 <= byte < 48:
        struct.pack_into("<Q", raw, 40, fixed[1])
    return bytes(raw)


@pytest.mark.parametrize("byte", range(len(SMALL)))
def test_every_sealed_bit_flip_gives_identical_outcomes(byte):
    for bit in range(8):
        raw = sealed_flip(byte, bit)
        mv = memoryview(raw)
        size, count = walk_arguments(raw)
        assert C.verify_frames(mv, size, count) == B._py_verify_frames(mv, size, count), bit
        assert C.verify_frames_any_delta(mv, size, count) == B._py_verify_frames_any_delta(mv, size, count), bit
        for check in (True, False):
            python, compiled = both(lambda b: B.verify_batch(b, check_offset_deltas=check), raw)
            assert python == compiled, (bit, check)
        python, compiled = both(B.frame_positions, raw)
        assert python == compiled, bit


@pytest.mark.parametrize("cut", range(len(SMALL) + 1))
def test_every_truncation_gives_identical_outcomes(cut):
    raw = SMALL[:cut]
    for fn, args in ((B.verify_batch, ()), (B.frame_checksums, ()), (B.slice_batch, (1, 3)), (B.last_offset, ())):
        python, compiled = both(fn, raw, *args)
        assert python == compiled, fn.__name__


def test_last_offset_of_a_batch_of_no_frames_is_invalid_messages_count():
    """A 256-byte batch whose message_count is 0 has no last frame: the codec's 4009 under both
    implementations (recovery and the segment checker ask last_offset of batches from disk)."""
    raw = bytearray(B.build_batch([B.Message(b"x")])[:256])
    struct.pack_into("<Q", raw, 32, 256)
    struct.pack_into("<I", raw, 48, 0)
    for name in ("python", "compiled"):
        with using(name):
            with pytest.raises(B.InvalidMessagesCount) as info:
                B.last_offset(bytes(raw))
            assert info.value.code == 4009 and info.value.offset == 48, name


# --------------------------------------------------------------------------- the one-call admission


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(any_batch, st.tuples(st.integers(0, U64), st.integers(0, U64), st.integers(0, U64)), st.booleans())
def test_compiled_verify_and_stamp_is_the_reference_or_nothing(raw, stamps, check):
    """``_batch_c.verify_and_stamp`` either does exactly what the reference does (same fields,
    same bytes written) or returns None having written nothing (the reference then answers)."""
    mine, ref = bytearray(raw), bytearray(raw)
    fields = C.verify_and_stamp(mine, *stamps, check)
    expected = outcome(lambda b: B._py_verify_and_stamp(b, *stamps, check), ref)
    if fields is None:
        # (it also declines a few batches the reference's slow diagnosis accepts, e.g. an
        # origin_timestamp within u32 max of u64 max: verify_and_stamp then answers as the reference)
        assert bytes(mine) == raw
    else:
        assert expected == ("ok", B.BatchHeader(*fields))
        assert bytes(mine) == bytes(ref)


@pytest.mark.parametrize("stamps", [(-1, 0, 0), (0, 2**64, 0), (0, 0, 1.5), (True, 3, 4), (0, 0, "7")])
def test_verify_and_stamp_of_odd_stamps_is_identical(stamps):
    raw = SMALL
    python, compiled = both(lambda b: outcome_exc(B.verify_and_stamp, b, *stamps), raw, writable=True,
                            compare=lambda fn, *a: fn(*a))
    assert python == compiled


def outcome_exc(fn, *args):
    """``outcome``, also naming a non-codec error's class (struct.error, TypeError)."""
    try:
        return outcome(fn, *args)
    except Exception as exc:  # noqa: BLE001 - the class is the outcome
        return (type(exc).__name__,)


@pytest.mark.parametrize("kind", ["bytes", "readonly view", "view slice", "int view", "strided view"])
def test_verify_and_stamp_of_every_buffer_kind_is_identical(kind):
    results = []
    for name in ("python", "compiled"):
        backing = bytearray(b"\xee" * 8 + SMALL + b"\xee" * 8)
        if kind == "bytes":
            batch = bytes(SMALL)
        elif kind == "readonly view":
            batch = memoryview(bytes(SMALL))
        elif kind == "view slice":
            batch = memoryview(backing)[8:8 + len(SMALL)]
        elif kind == "int view":
            batch = memoryview(backing)[8:8 + len(SMALL)].cast("I") if len(SMALL) % 4 == 0 else \
                memoryview(backing)[8:8 + len(SMALL)]
        else:
            batch = memoryview(bytearray(SMALL * 2))[::2]
        with using(name):
            results.append((outcome_exc(B.verify_and_stamp, batch, 1, 2, 3), bytes(backing)))
    assert results[0] == results[1]
