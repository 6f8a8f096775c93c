"""Block preallocation off the event loop (storage.local.prealloc) with real files and the real
kernel: blocks are reserved ahead of the appends without changing any file size, the next
segment is made ahead and used at the roll, sealed segments keep no reserved blocks past their
end, a SIGKILL loses no append that returned, and where nothing can be reserved (tmpfs, turned
off) the log works as before."""

from __future__ import annotations

import glob
import os
import random
import subprocess

import pytest

from headwater.codec.batch import verify
from headwater.storage.api import SegmentPolicy
from headwater.storage.local import prealloc
from headwater.storage.local.flusher import Flusher
from headwater.storage.local.log import LocalPartitionLog
from headwater.storage.local.segment import segment_name

from storage_batches import stamped_batch
from test_local_crash import crash_writer, run_writer_and_kill

MIB = 1 << 20
SEGMENT = 16 * MIB
OFF = SegmentPolicy(segment_size=SEGMENT, messages_required_to_save=16 << 20,
                    size_of_messages_required_to_save=1 << 30)


def reservable(directory) -> bool:
    return prealloc.available() and not prealloc.memory_backed(str(directory))


needs_fallocate = pytest.mark.skipif(not prealloc.available(), reason="needs Linux fallocate(2)")


@pytest.fixture
def flusher():
    f = Flusher(write_behind_cache_bytes=0)
    yield f
    f.close()


def one_mib_batch(offset: int) -> bytes:
    return stamped_batch(offset, 1_000_000 + offset, count=100, payload_size=10_000)


def fill(log: LocalPartitionLog, megabytes: int) -> list[bytes]:
    out = []
    for _ in range(megabytes):
        b = one_mib_batch(log.next_offset)
        log.append(b)
        out.append(b)
    return out


def allocated(path: str) -> int:
    return os.stat(path).st_blocks * 512


def spares(directory: str) -> list[str]:
    return sorted(glob.glob(os.path.join(directory, prealloc.SPARE_PREFIX + "*")))


def seg_path(directory: str, start: int, suffix: str = ".log") -> str:
    return os.path.join(directory, segment_name(start) + suffix)


@needs_fallocate
def test_reserve_allocates_blocks_and_keeps_the_size(tmp_path):
    if not reservable(tmp_path):
        pytest.skip("tmp_path is on tmpfs")
    path = str(tmp_path / "f")
    with open(path, "wb") as f:
        f.write(b"x" * 1000)
    fd = os.open(path, os.O_RDWR)
    try:
        assert prealloc.reserve(fd, 1000, 8 * MIB)
    finally:
        os.close(fd)
    assert os.path.getsize(path) == 1000
    assert allocated(path) >= 8 * MIB
    with open(path, "rb") as f:
        assert f.read() == b"x" * 1000


@needs_fallocate
def test_segments_are_reserved_ahead_and_the_spare_becomes_the_next_segment(tmp_path, flusher):
    if not reservable(tmp_path):
        pytest.skip("tmp_path is on tmpfs")
    d = str(tmp_path / "p")
    log = LocalPartitionLog.open(d, OFF, flusher)
    pre = flusher.preallocator
    try:
        first = seg_path(d, 0)
        written = fill(log, 2)
        pre.drain()
        assert allocated(first) < SEGMENT  # not written enough yet: nothing reserved
        assert spares(d) == []
        written += fill(log, 8)  # past ACTIVE_AFTER_BYTES (8 MiB): the rest reserved, a spare made
        pre.drain()
        assert allocated(first) >= SEGMENT
        assert os.path.getsize(first) == log.segments()[-1].size_bytes  # the size is the data's
        spare_log = [p for p in spares(d) if p.endswith(".log" + prealloc.SPARE_SUFFIX)]
        assert len(spare_log) == 1 and len(spares(d)) == 2
        assert os.path.getsize(spare_log[0]) == 0  # holds nothing: no segment
        assert allocated(spare_log[0]) >= SEGMENT
        spare_ino = os.stat(spare_log[0]).st_ino
        assert [s.start_offset for s in log.segments()] == [0]  # not a segment before the roll
        written += fill(log, 7)  # rolls at 16 MiB
        infos = log.segments()
        assert len(infos) == 2 and infos[0].sealed and not infos[1].sealed
        second = seg_path(d, infos[1].start_offset)
        assert os.stat(second).st_ino == spare_ino  # the spare, linked under the segment's name
        assert spares(d) == []
        assert os.path.getsize(second) == infos[1].size_bytes
        assert allocated(second) >= SEGMENT
        pre.drain()
        assert pre.spares == 1 and pre.errors == 0
        assert b"".join(bytes(v) for v in log.read(0, 1 << 40, 1 << 40)) == b"".join(written)
    finally:
        log.close()
    assert spares(d) == []  # close deletes a spare not used


@needs_fallocate
def test_a_sealed_segment_keeps_no_reserved_blocks_past_its_end(tmp_path, flusher):
    if not reservable(tmp_path):
        pytest.skip("tmp_path is on tmpfs")
    d = str(tmp_path / "p")
    policy = SegmentPolicy(segment_size=SEGMENT, messages_required_to_save=16 << 20,
                           size_of_messages_required_to_save=1 << 30, segment_roll_us=10**12)
    log = LocalPartitionLog.open(d, policy, flusher)
    try:
        written = fill(log, 9)  # reserved to 16 MiB
        flusher.preallocator.drain()
        first = seg_path(d, 0)
        assert allocated(first) >= SEGMENT
        assert log.roll_if_due(1 << 62)  # a time-based roll at 9 MiB: 7 MiB reserved past the end
        flusher.preallocator.drain()
        size = log.segments()[0].size_bytes
        assert os.path.getsize(first) == size
        assert allocated(first) <= size + prealloc.SLACK_BYTES + 4096
        assert flusher.preallocator.released == 1
        assert b"".join(bytes(v) for v in log.read(0, 1 << 40, 1 << 40)) == b"".join(written)
    finally:
        log.close()


@needs_fallocate
def test_recovery_releases_what_a_crash_left_reserved_on_a_sealed_segment(tmp_path, flusher):
    if not reservable(tmp_path):
        pytest.skip("tmp_path is on tmpfs")
    d = str(tmp_path / "p")
    policy = SegmentPolicy(segment_size=4 * MIB, messages_required_to_save=16 << 20,
                           size_of_messages_required_to_save=1 << 30)
    log = LocalPartitionLog.open(d, policy, Flusher(write_behind_cache_bytes=0, preallocate=False))
    written = fill(log, 6)
    log.close()
    first = seg_path(d, 0)
    size = os.path.getsize(first)
    fd = os.open(first, os.O_RDWR)
    try:
        assert prealloc.reserve(fd, size, 32 * MIB)  # as if the roll's release never ran
    finally:
        os.close(fd)
    for name in ("spare-7.log.staging", "spare-7.index.staging"):  # a spare a crash left
        open(os.path.join(d, name), "wb").close()
    assert allocated(first) >= 32 * MIB
    log = LocalPartitionLog.open(d, policy, flusher)
    try:
        assert os.path.getsize(first) == size
        assert allocated(first) <= size + prealloc.SLACK_BYTES + 4096
        assert spares(d) == []
        assert sorted(log.recovery.removed_files) == ["spare-7.index.staging", "spare-7.log.staging"]
        assert b"".join(bytes(v) for v in log.read(0, 1 << 40, 1 << 40)) == b"".join(written)
    finally:
        log.close()


def test_on_tmpfs_spares_are_made_and_nothing_is_reserved(flusher):
    if not os.path.isdir("/dev/shm") or not prealloc.memory_backed("/dev/shm"):
        pytest.skip("no tmpfs at /dev/shm")
    import tempfile

    with tempfile.TemporaryDirectory(dir="/dev/shm") as base:
        d = os.path.join(base, "p")
        policy = SegmentPolicy(segment_size=4 * MIB, messages_required_to_save=16 << 20,
                               size_of_messages_required_to_save=1 << 30)
        log = LocalPartitionLog.open(d, policy, flusher)
        try:
            written = fill(log, 3)
            flusher.preallocator.drain()
            spare_log = [p for p in spares(d) if p.endswith(".log" + prealloc.SPARE_SUFFIX)]
            assert len(spare_log) == 1 and allocated(spare_log[0]) == 0  # made, nothing reserved
            assert allocated(seg_path(d, 0)) <= 4 * MIB
            written += fill(log, 6)
            assert len(log.segments()) >= 2
            assert flusher.preallocator.reserved == 0
            assert b"".join(bytes(v) for v in log.read(0, 1 << 40, 1 << 40)) == b"".join(written)
        finally:
            log.close()


def test_turned_off_the_log_works_as_before(tmp_path):
    flusher = Flusher(write_behind_cache_bytes=0, preallocate=False)
    d = str(tmp_path / "p")
    policy = SegmentPolicy(segment_size=4 * MIB, messages_required_to_save=16 << 20,
                           size_of_messages_required_to_save=1 << 30)
    log = LocalPartitionLog.open(d, policy, flusher)
    try:
        written = fill(log, 13)
        assert len(log.segments()) == 3
        assert spares(d) == []
        for info in log.segments():
            assert allocated(seg_path(d, info.start_offset)) <= info.size_bytes + prealloc.SLACK_BYTES + 4096
        assert b"".join(bytes(v) for v in log.read(0, 1 << 40, 1 << 40)) == b"".join(written)
    finally:
        log.close()
        flusher.close()


@pytest.mark.slow
def test_sigkill_with_spares_and_reservations_loses_no_returned_append(tmp_path, flusher):
    """crash_writer with 1 MiB segments: spares made and adopted, segments reserved and released
    while the writer is killed at random moments; every append that returned is there after
    each restart, byte for byte, and no spare is left over."""
    rng = random.Random(20261202)
    d = str(tmp_path / "p")
    acked: set[int] = set()
    policy = crash_writer.policy(False, 1 << 20)
    for _ in range(5):
        acked |= run_writer_and_kill(d, False, rng, True, 1 << 20)
        log = LocalPartitionLog.open(d, policy, flusher)
        try:
            assert spares(d) == []  # a leftover spare was swept by recovery
            found, expected = set(), 0
            for view in log.read(0, 1 << 40, 1 << 40):
                header = verify(view)
                assert header.base_offset == expected
                assert bytes(view) == crash_writer.batch_for(expected)
                found.add(expected)
                expected += header.message_count
            assert not acked - found, f"appends that returned were lost: {sorted(acked - found)[:10]}"
            for info in log.segments()[:-1]:
                path = seg_path(d, info.start_offset)
                assert os.path.getsize(path) == info.size_bytes
                assert allocated(path) <= info.size_bytes + prealloc.SLACK_BYTES + 4096
        finally:
            log.close()
    assert len(acked) > 50 and len(log.segments()) > 2


@pytest.fixture
def small_ext4(tmp_path):
    """A 64 MiB ext4 filesystem (no reserved blocks) on a loop device, mounted; needs root."""
    import shutil

    if os.geteuid() != 0 or not all(shutil.which(c) for c in ("losetup", "mkfs.ext4", "mount")):
        pytest.skip("needs root, losetup and mkfs.ext4")
    image, mnt = tmp_path / "disk.img", tmp_path / "mnt"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(64 * MIB)
    loop = None
    try:
        loop = subprocess.run(["losetup", "-f", "--show", str(image)], check=True, capture_output=True,
                              text=True).stdout.strip()
        subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", loop], check=True, capture_output=True)
        subprocess.run(["mount", loop, str(mnt)], check=True, capture_output=True)
    except (subprocess.CalledProcessError, OSError) as exc:
        if loop:
            subprocess.run(["losetup", "-d", loop], capture_output=True)
        pytest.skip(f"cannot mount a small ext4 here: {exc}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        subprocess.run(["losetup", "-d", loop], capture_output=True)


def fill_disk(directory) -> None:
    """Write a ballast file until the filesystem is full (ENOSPC), synced."""
    fd = os.open(os.path.join(directory, "ballast"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        chunk = b"\xab" * (256 << 10)
        while True:
            try:
                os.write(fd, chunk)
            except OSError:
                chunk = chunk[: len(chunk) // 2]
                if len(chunk) < 4096:
                    break
        os.fsync(fd)
    finally:
        os.close(fd)


@needs_fallocate
def test_an_append_refused_for_space_gets_the_reserved_blocks_back(small_ext4, flusher, monkeypatch):
    """Partition A holds a reserved spare and a reserved tail; the disk is then filled; an append
    to partition B (nothing reserved) that needs their room succeeds after they are given back,
    and once nothing is left to give back the disk's ENOSPC is raised as before."""
    monkeypatch.setattr(prealloc, "MIN_FREE_BYTES", 0)  # this 64 MiB disk: no free-space margin
    monkeypatch.setattr(prealloc, "MIN_FREE_SHARE", 1 << 40)
    from headwater.storage.api import StorageWriteError

    a = LocalPartitionLog.open(str(small_ext4 / "a"), OFF, flusher)
    b = LocalPartitionLog.open(str(small_ext4 / "b"), OFF, flusher)
    try:
        kept_a = fill(a, 9)  # its rest reserved (to 16 MiB), and a spare of 16 MiB
        flusher.preallocator.drain()
        assert len(spares(a.directory)) == 2 and flusher.preallocator.reserved >= 2 * SEGMENT - 9 * MIB
        fill_disk(small_ext4)
        kept_b = fill(b, 4)  # would need the blocks A reserved
        assert flusher.preallocator.released_all >= 1
        assert spares(a.directory) == []
        assert b"".join(bytes(v) for v in b.read(0, 1 << 40, 1 << 40)) == b"".join(kept_b)
        assert b"".join(bytes(v) for v in a.read(0, 1 << 40, 1 << 40)) == b"".join(kept_a)
        with pytest.raises(StorageWriteError):
            fill(b, 64)  # more than the disk holds: the disk's ENOSPC, not hidden
    finally:
        a.close()
        b.close()
