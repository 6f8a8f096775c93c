"""The read-only data-directory check (``headwater verify``) on segment files written by the engine's
own writer, with every kind of single-byte damage (hypothesis) and the tails a crash leaves."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storage_batches import stamped_batch

from headwater.storage.api import SegmentPolicy
from headwater.storage.local.check import CheckReport, check_partition
from headwater.storage.local.engine import LocalEngine
from headwater.storage.local.recovery import CLEAN_SHUTDOWN

BATCHES = [(0, 3), (3, 5), (8, 2)]  # (base_offset, count)


def _write_partition(tmp_path) -> tuple[str, list[tuple[int, int]]]:
    """Three batches appended through the engine; returns the partition dir and (start, end) byte spans."""
    engine = LocalEngine(str(tmp_path / "data"))
    log = engine.open_partition(0, 0, 0, SegmentPolicy())
    spans, position = [], 0
    for base, count in BATCHES:
        batch = stamped_batch(base, 1_700_000_000_000_000 + base, count, payload_size=40)
        log.append(batch)
        spans.append((position, position + len(batch)))
        position += len(batch)
    engine.close()
    return str(tmp_path / "data" / "streams" / "0" / "topics" / "0" / "partitions" / "0"), spans


def _check(directory: str) -> CheckReport:
    report = CheckReport()
    check_partition(directory, report)
    return report


def _log(directory: str) -> str:
    (name,) = [n for n in os.listdir(directory) if n.endswith(".log")]
    return os.path.join(directory, name)


def test_an_intact_partition_has_no_findings(tmp_path):
    directory, _ = _write_partition(tmp_path)
    report = _check(directory)
    assert report.findings == [] and report.batches == 3 and report.messages == 10


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_flipped_byte_is_damage_reported_inside_its_batch(tmp_path_factory, data):
    directory, spans = _write_partition(tmp_path_factory.mktemp("flip"))
    path = _log(directory)
    size = os.path.getsize(path)
    target = data.draw(st.integers(0, size - 1), label="byte")
    mask = data.draw(st.integers(1, 255), label="mask")
    with open(path, "r+b") as f:
        f.seek(target)
        byte = f.read(1)[0]
        f.seek(target)
        f.write(bytes([byte ^ mask]))
    damaged = [f for f in _check(directory).findings if f.damage and f.path == path]
    assert damaged, f"flip at {target} not reported"
    start, end = next(span for span in spans if span[0] <= target < span[1])
    assert start <= damaged[0].position < end, (target, damaged[0])


def test_a_partial_last_batch_is_a_torn_tail_note(tmp_path):
    directory, spans = _write_partition(tmp_path)
    os.unlink(os.path.join(directory, CLEAN_SHUTDOWN))  # a crash leaves no clean-close marker
    path = _log(directory)
    os.truncate(path, spans[-1][1] - 10)
    (note,) = _check(directory).findings
    assert (note.damage, note.position) == (False, spans[-1][0]) and "torn tail" in note.message


def test_a_partial_last_batch_after_a_clean_close_is_damage(tmp_path):
    directory, spans = _write_partition(tmp_path)  # closed cleanly: the marker is there
    path = _log(directory)
    os.truncate(path, spans[-1][1] - 10)
    (finding,) = _check(directory).findings
    assert (finding.damage, finding.position) == (True, spans[-1][0]) and "after a clean close" in finding.message


def test_nonzero_bytes_after_a_zero_batch_length_are_damage(tmp_path):
    directory, spans = _write_partition(tmp_path)
    path = _log(directory)
    with open(path, "ab") as f:
        f.write(bytes(300) + b"\x01" + bytes(100))
    (finding,) = _check(directory).findings
    assert finding.damage and finding.position == spans[-1][1] + 32
    assert f"byte {spans[-1][1] + 300} is not" in finding.message


def test_preallocated_zeros_are_the_clean_end(tmp_path):
    directory, _ = _write_partition(tmp_path)
    with open(_log(directory), "ab") as f:
        f.write(bytes(4096))
    assert _check(directory).findings == []
