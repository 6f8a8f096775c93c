"""QA, session 12, about out of fds at a roll (branch hw12-startstop's aim: EMFILE fences no
partition). The code at fault is main's since session 11 (b96e95a, the spare adoption in
``LocalPartitionLog._open_next_segment``), kept by hw12-prealloc and hw12-startstop.

At a roll ``LocalPartitionLog._rotate`` opens the partition directory (for the round's
directory sync); when that open is refused (EMFILE) it asks ``_open_next_segment`` to sync the
directory itself, which adopts the spare (links it under the new segment's names and opens
both files) and then calls ``fsync_dir``, which opens the directory again. Near
RLIMIT_NOFILE, with other threads (the preallocator, the flusher's pool) closing fds meanwhile,
the file opens can get fds and the directory's second open not: ``fsync_dir`` raises, the
adopted segment (its files under the segment's names, its two fds) is dropped without being
undone, and every later roll of the partition fails with "segment file already exists" until
a restart (seen on a real server held at its fd limit: 601 refused appends to one Kafka
partition in 7 s, tests/integration/test_qa_session12_fd.py).

The race is made deterministic here with a Python audit hook on ``open`` that refuses, with
EMFILE, the opens of this partition's directory while the test says so (the state where fds
are short at those two moments and free at the adoption's); the files and the log are real."""

from __future__ import annotations

import errno
import os
import sys

import pytest

from headwater.storage.api import SegmentPolicy
from headwater.storage.local import prealloc
from headwater.storage.local.flusher import Flusher
from headwater.storage.local.log import LocalPartitionLog

from storage_batches import stamped_batch

MIB = 1 << 20
POLICY = SegmentPolicy(segment_size=16 * MIB, messages_required_to_save=16 << 20,
                       size_of_messages_required_to_save=1 << 30)

_REFUSED: set[str] = set()  # directories whose opens the hook refuses (EMFILE) now


def _hook(event: str, args) -> None:
    if event == "open" and _REFUSED and len(args) >= 3 and isinstance(args[0], str):
        flags = args[2] if isinstance(args[2], int) else 0
        if args[0] in _REFUSED and flags & os.O_DIRECTORY:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), args[0])


sys.addaudithook(_hook)


@pytest.fixture
def flusher():
    f = Flusher(write_behind_cache_bytes=0)
    yield f
    f.close()


def append_mib(log: LocalPartitionLog) -> bytes:
    b = stamped_batch(log.next_offset, 1_000_000 + log.next_offset, count=100, payload_size=10_000)
    log.append(b)
    return b


@pytest.mark.skipif(not prealloc.available(), reason="needs Linux fallocate(2) for the spare")
def test_a_roll_whose_directory_sync_finds_no_fd_leaves_the_partition_writable(tmp_path, flusher):
    d = str(tmp_path / "p")
    log = LocalPartitionLog.open(d, POLICY, flusher)
    try:
        written = [append_mib(log) for _ in range(10)]  # past 8 MiB: a spare is made
        flusher.preallocator.drain()
        assert any(n.startswith(prealloc.SPARE_PREFIX) for n in os.listdir(d))
        refused = []
        _REFUSED.add(d)
        try:
            for _ in range(10):  # on to the roll (16 MiB): the directory cannot be opened there
                try:
                    written.append(append_mib(log))
                except Exception as exc:  # refused, not acknowledged
                    refused.append(exc)
                    break
        finally:
            _REFUSED.discard(d)
        # fds are back: the partition takes appends again (the roll is retried)
        for _ in range(3):
            written.append(append_mib(log))
        log.sync()
        assert b"".join(bytes(v) for v in log.read(0, 1 << 40, 1 << 40)) == b"".join(written)
    finally:
        log.close()
