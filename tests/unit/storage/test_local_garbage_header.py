"""Garbage over a batch header with whole valid batches after it: boot recovery refuses
the partition, and ``headwater verify``'s checker and ``dump``'s reader call it damage at
the same place (one decision, ``headwater.storage.local.walk.tail_refusal``), never a
torn tail. Real stamped batches on real files; hypothesis picks the garbage.
"""

from __future__ import annotations

import os
import struct
import tempfile

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from storage_batches import stamped_batch

from headwater.storage.api import CorruptSegment
from headwater.storage.local.check import CheckReport, check_partition, read_partition
from headwater.storage.local.recovery import recover_partition

SEG0 = "00000000000000000000"


def _batches(n: int) -> list[bytes]:
    out, offset = [], 0
    for i in range(n):
        count = 1 + i % 3
        out.append(stamped_batch(offset, 100 + i, count, 40 + 10 * i))
        offset += count
    return out


def _verdicts(directory: str) -> tuple[str | None, list, list]:
    """(recovery's refusal or None, verify's damage findings, all findings); recovery last,
    as it may cut the file."""
    report = CheckReport()
    check_partition(directory, report)
    damage = [f for f in report.findings if f.damage]
    try:
        recover_partition(directory, 1 << 30)
    except CorruptSegment as e:
        return str(e), damage, report.findings
    return None, damage, report.findings


@settings(max_examples=120, deadline=None)
@given(
    n=st.integers(2, 5),
    target=st.sampled_from(["first", "middle"]),
    garbage=st.binary(min_size=1, max_size=256),
    at=st.integers(0, 255),
)
@example(n=3, target="first", garbage=b"\xde\xad\xbe\xef" * 16, at=0)  # the QA reproduction
@example(n=3, target="middle", garbage=b"\xff" * 8, at=32)  # a huge batch_length: looks torn
@example(n=2, target="first", garbage=b"\x00\x00\x00\x00\x00\x010", at=26)  # a shorter batch_length: frame 0 overruns it
def test_recovery_and_verify_agree_on_garbage_over_a_header(n, target, garbage, at):
    batches = _batches(n)
    k = 0 if target == "first" else n // 2 if n > 2 else 0
    start = sum(len(b) for b in batches[:k])
    raw = bytearray(b"".join(batches))
    end = min(start + at + len(garbage), start + 256)  # over the header only: the batches after stay whole
    raw[start + at : end] = garbage[: end - start - at]
    if raw == bytearray(b"".join(batches)):
        return  # the garbage equals the bytes it covers: nothing was damaged
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, SEG0 + ".log")
        with open(log, "wb") as f:
            f.write(raw)  # no index: recovery walks the whole log, as verify does
        refusal, damage, findings = _verdicts(tmp)
        assert refusal is not None, findings  # a whole valid batch follows: never a torn tail
        assert damage, (refusal, findings)
        assert all(f.path == log for f in damage)
        # found within the damaged batch as its header now reads: at the header, or at a frame
        # inside the batch_length the garbage left (longer or shorter than the real batch)
        claimed = struct.unpack_from("<Q", raw, start + 32)[0]
        assert start <= damage[0].position < start + max(len(batches[k]), claimed), (damage, start, claimed)
        with open(log, "rb") as f:
            assert f.read() == raw  # refused: nothing cut
        with pytest.raises(ValueError, match=f"{log}: byte "):
            list(read_partition(tmp, 0))


def test_the_repro_is_damage_with_the_byte_of_the_valid_batch_that_follows(tmp_path):
    batches = _batches(4)
    raw = bytearray(b"".join(batches))
    raw[:64] = b"\xde\xad\xbe\xef" * 16
    log = tmp_path / (SEG0 + ".log")
    log.write_bytes(raw)
    report = CheckReport()
    check_partition(str(tmp_path), report)
    (finding,) = [f for f in report.findings if f.damage]
    assert (finding.path, finding.position) == (str(log), 0)
    assert f"a whole valid batch follows at byte {len(batches[0])}" in finding.message
    assert "not a torn tail" in finding.message
    with pytest.raises(CorruptSegment, match=f"whole valid batch follows at byte {len(batches[0])}"):
        recover_partition(str(tmp_path), 1 << 30)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 4), cut_fraction=st.floats(0, 1, exclude_min=True, exclude_max=True))
def test_a_torn_last_batch_is_a_note_for_both(n, cut_fraction):
    """The counter-case: a last batch cut short by a crash (nothing whole after it) is a
    torn tail recovery cuts and verify notes, not damage."""
    batches = _batches(n + 1)
    cut = max(1, int(cut_fraction * len(batches[-1])))
    raw = b"".join(batches[:-1]) + batches[-1][:cut]
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, SEG0 + ".log"), "wb") as f:
            f.write(raw)
        refusal, damage, findings = _verdicts(tmp)
        assert refusal is None and not damage, (refusal, findings)
        assert [f.message for f in findings if "torn tail" in f.message], findings
