"""QA, session 11: a crash in the middle of adopting a spare segment (``Segment.adopt``: the
spare's .log linked under the segment's name, then its .index, then the spare names removed),
and spares of another process left in a partition directory, with real files.

Each state is made as a crash would leave it (the log is abandoned without ``close``: its
files are copied as they are, then the links the roll had made so far are made on the copy);
reopening must serve every batch appended, sweep the spare names (a name only: the inode may be
the new segment's), keep offsets contiguous, and take appends and rolls on."""

from __future__ import annotations

import glob
import os
import shutil

import pytest

from headwater.storage.api import SegmentPolicy
from headwater.storage.local import prealloc
from headwater.storage.local.flusher import Flusher
from headwater.storage.local.log import LocalPartitionLog
from headwater.storage.local.segment import segment_name

from storage_batches import stamped_batch

MIB = 1 << 20
SEGMENT = 16 * MIB
POLICY = SegmentPolicy(segment_size=SEGMENT, messages_required_to_save=16 << 20,
                       size_of_messages_required_to_save=1 << 30)


@pytest.fixture
def flusher():
    f = Flusher(write_behind_cache_bytes=0)
    yield f
    f.close()


def fill(log: LocalPartitionLog, megabytes: int) -> list[bytes]:
    out = []
    for _ in range(megabytes):
        b = stamped_batch(log.next_offset, 1_000_000 + log.next_offset, count=100, payload_size=10_000)
        log.append(b)
        out.append(b)
    return out


def spares(directory: str) -> list[str]:
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(directory, prealloc.SPARE_PREFIX + "*")))


def read_all(log: LocalPartitionLog) -> bytes:
    return b"".join(bytes(v) for v in log.read(0, 1 << 40, 1 << 40))


@pytest.mark.parametrize("state", ["log linked", "both linked", "both linked, a batch in it"])
def test_a_crash_while_a_spare_is_adopted_loses_nothing(tmp_path, flusher, state):
    d, crashed = str(tmp_path / "p"), str(tmp_path / "crashed")
    log = LocalPartitionLog.open(d, POLICY, flusher)
    written = fill(log, 10)  # past 8 MiB: a spare is made
    flusher.preallocator.drain()
    log.sync()
    names = spares(d)
    assert len(names) == 2, names
    next_offset = log.next_offset
    shutil.copytree(d, crashed)  # the files as a SIGKILL at the roll leaves them
    log.close()
    spare_log = os.path.join(crashed, next(n for n in names if n.endswith(".log.staging")))
    spare_index = os.path.join(crashed, next(n for n in names if n.endswith(".index.staging")))
    new_log = os.path.join(crashed, segment_name(next_offset) + ".log")
    os.link(spare_log, new_log)
    if state != "log linked":
        os.link(spare_index, os.path.join(crashed, segment_name(next_offset) + ".index"))
    if state.endswith("a batch in it"):  # appended through the new name before the crash
        extra = stamped_batch(next_offset, 2_000_000, count=100, payload_size=10_000)
        fd = os.open(new_log, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, extra)
        finally:
            os.close(fd)
        written.append(extra)
    log = LocalPartitionLog.open(crashed, POLICY, flusher)
    try:
        assert spares(crashed) == []
        assert read_all(log) == b"".join(written)
        starts = [s.start_offset for s in log.segments()]
        assert starts == [0, next_offset]
        written += fill(log, 24)  # rolls again, from a spare made by this process
        flusher.preallocator.drain()
        assert read_all(log) == b"".join(written)
        infos = log.segments()
        assert all(a.end_offset == b.start_offset for a, b in zip(infos, infos[1:]))
    finally:
        log.close()
    assert spares(crashed) == []


def test_spares_named_as_this_process_names_its_own_are_swept_first(tmp_path, flusher):
    """A previous process's ``spare-1`` / ``spare-2`` (each process counts from 1): reopening
    sweeps them, so this process's first spares are made under the same names and used."""
    d = str(tmp_path / "p")
    log = LocalPartitionLog.open(d, POLICY, flusher)
    written = fill(log, 2)
    log.close()
    for n in (1, 2):
        for suffix in (".log", ".index"):
            with open(os.path.join(d, f"{prealloc.SPARE_PREFIX}{n}{suffix}{prealloc.SPARE_SUFFIX}"), "wb") as f:
                f.write(b"\xff" * 4096)  # not even empty: it must never be read as data
    log = LocalPartitionLog.open(d, POLICY, flusher)
    try:
        assert spares(d) == []
        written += fill(log, 40)  # two rolls, each from a spare
        flusher.preallocator.drain()
        assert read_all(log) == b"".join(written)
        assert len(log.segments()) == 3
        if prealloc.available():
            assert flusher.preallocator.errors == 0
    finally:
        log.close()
