"""Boot recovery tells a torn last batch (cut) from a whole batch whose ``batch_length``
was damaged at rest (refused), and ``headwater verify``'s checker says the same.

Real stamped batches (hypothesis picks their shape), written as a crash or a bad sector
would leave them, with and without a preallocated zero tail; see the rule in
``headwater.storage.local.walk``.
"""

from __future__ import annotations

import os
import struct
import tempfile

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from storage_batches import stamped_batch

from headwater.storage.api import CorruptSegment
from headwater.storage.local.check import CheckReport, check_partition
from headwater.storage.local.index import decode_entries, encode_entry
from headwater.storage.local.recovery import recover_partition

SEG0 = "00000000000000000000"
PREALLOCATED = st.sampled_from([0, 1, 4096, 1 << 16])  # zero bytes after the data


def _batches(count: int, payload_size: int) -> list[bytes]:
    """Two small batches, then the one under test (``count`` messages of ``payload_size`` bytes)."""
    return [stamped_batch(0, 100, 2, 30), stamped_batch(2, 101, 1, 5), stamped_batch(3, 102, count, payload_size)]


def _write(directory: str, log_bytes: bytes, index: bytes | None) -> str:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, SEG0 + ".log")
    with open(path, "wb") as f:
        f.write(log_bytes)
    if index is not None:
        with open(os.path.join(directory, SEG0 + ".index"), "wb") as f:
            f.write(index)
    return path


def _index(batches: list[bytes], upto: int) -> bytes:
    """Index entries for the first ``upto`` batches (every batch indexed)."""
    out, pos, offset = b"", 0, 0
    for i, b in enumerate(batches[:upto]):
        out += encode_entry(offset, 100 + i, pos)
        pos += len(b)
        offset += struct.unpack_from("<I", b, 48)[0]
    return out


def _findings(directory: str):
    report = CheckReport()
    check_partition(directory, report)
    return report.findings


def _files(directory: str) -> dict[str, bytes]:
    return {n: open(os.path.join(directory, n), "rb").read() for n in sorted(os.listdir(directory))}


@settings(max_examples=150, deadline=None)
@given(
    count=st.integers(1, 5),
    payload_size=st.integers(0, 300),
    cut_fraction=st.floats(0, 1, exclude_max=True),
    zeros=PREALLOCATED,
    indexed=st.booleans(),
)
def test_a_torn_last_batch_is_cut_at_any_prefix(count, payload_size, cut_fraction, zeros, indexed):
    batches = _batches(count, payload_size)
    last_start = len(batches[0]) + len(batches[1])
    cut = int(cut_fraction * len(batches[2]))  # bytes of the last batch that reached the disk: 0 .. len - 1
    # the preallocated zeros may supply exactly the bytes that are missing (a batch ending in zero
    # bytes, e.g. an empty payload's length): the file then holds the whole batch, which must be kept
    assume((batches[2][:cut] + bytes(zeros))[: len(batches[2])] != batches[2])
    with tempfile.TemporaryDirectory() as tmp:
        _torn_prefix_is_cut(tmp, batches, last_start, cut, zeros, indexed)


def test_a_last_batch_completed_by_preallocated_zeros_is_whole_and_kept():
    """The missing tail of the last batch was all zero bytes and the segment's preallocated zeros
    supply them: the bytes on disk are the whole batch, so recovery keeps it (and the checker agrees)."""
    batches = _batches(1, 0)  # one message with an empty payload: the batch ends in zero bytes
    assert batches[2].endswith(bytes(4))
    last_start = len(batches[0]) + len(batches[1])
    with tempfile.TemporaryDirectory() as tmp:
        data = b"".join(batches)[:-4] + bytes(4096)
        _write(tmp, data, _index(batches, 2))
        assert not [f for f in _findings(tmp) if f.damage]
        report = recover_partition(tmp, 1)
        (seg,) = report.segments
        assert (seg.size, seg.end_offset) == (last_start + len(batches[2]), 4), seg.stop_reason


def test_a_torn_last_batch_is_cut_at_every_prefix_with_and_without_preallocation():
    batches = _batches(2, 24)
    last_start = len(batches[0]) + len(batches[1])
    with tempfile.TemporaryDirectory() as tmp:
        for zeros in (0, 4096):
            for cut in range(len(batches[2])):
                _torn_prefix_is_cut(os.path.join(tmp, f"{zeros}-{cut}"), batches, last_start, cut, zeros, True)


def _torn_prefix_is_cut(directory, batches, last_start, cut, zeros, indexed):
    data = b"".join(batches)[: last_start + cut] + bytes(zeros)
    path = _write(directory, data, _index(batches, 2) if indexed else None)
    if not zeros:  # the checker calls the same bytes a torn tail, not damage
        assert not [f for f in _findings(directory) if f.damage], cut
    report = recover_partition(directory, 1)
    (seg,) = report.segments
    assert (seg.size, seg.end_offset) == (last_start, 3), (cut, zeros, seg.stop_reason)
    assert open(path, "rb").read() == b"".join(batches[:2]), cut  # whole batches kept byte for byte
    entries = decode_entries(open(path[: -len(".log")] + ".index", "rb").read())
    assert list(entries[2::3]) == [0, len(batches[0])]
    assert not [f for f in _findings(directory) if f.damage]  # nothing left to report


@settings(max_examples=150, deadline=None)
@given(
    count=st.integers(1, 5),
    payload_size=st.integers(0, 300),
    length=st.integers(0, (1 << 64) - 1) | st.integers(0, 2000),
    zeros=PREALLOCATED,
    which=st.sampled_from(["last, indexed", "last, no index", "middle, no index"]),
)
@example(count=3, payload_size=50, length=10**9, zeros=0, which="last, indexed")  # past the end of the file
@example(count=3, payload_size=50, length=0, zeros=4096, which="last, no index")  # reads as preallocated zeros
def test_a_whole_batch_with_a_damaged_batch_length_is_refused_not_cut(count, payload_size, length, zeros, which):
    batches = _batches(count, payload_size)
    target = 2 if which.startswith("last") else 1
    position = sum(len(b) for b in batches[:target])
    true_length = len(batches[target])
    if length == true_length:
        length ^= 1
    data = bytearray(b"".join(batches) + bytes(zeros))
    struct.pack_into("<Q", data, position + 32, length)  # bit rot in bytes 32..40, nothing else
    with tempfile.TemporaryDirectory() as directory:
        _write(directory, bytes(data), _index(batches, 3) if which == "last, indexed" else None)
        before = _files(directory)
        damage = [f for f in _findings(directory) if f.damage]
        assert damage and damage[0].position == position + 32, damage
        assert "is damaged" in damage[0].message
        with pytest.raises(CorruptSegment) as err:
            recover_partition(directory, 1)
        message = str(err.value)
        assert os.path.join(directory, SEG0 + ".log") in message and f"byte {position + 32}:" in message, message
        assert f"batch_length {length} is damaged" in message and f"at {true_length} bytes" in message
        assert "\n" not in message
        assert _files(directory) == before  # nothing cut, nothing rewritten
