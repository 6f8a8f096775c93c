"""SIGKILL a writer at random moments: every append that returned must survive, byte for byte."""

from __future__ import annotations

import importlib.util
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from headwater.codec.batch import iter_frames, read_header, verify
from headwater.storage.local.log import LocalPartitionLog

WRITER = os.path.join(os.path.dirname(__file__), "crash_writer.py")
_spec = importlib.util.spec_from_file_location("crash_writer", WRITER)
crash_writer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(crash_writer)


def run_writer_and_kill(directory: str, preallocate: bool, rng: random.Random, wait_ready: bool,
                        segment_size: int = 64 * 1024) -> set[int]:
    proc = subprocess.Popen(
        [sys.executable, WRITER, directory, "1" if preallocate else "0", str(segment_size)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        if wait_ready:
            first = proc.stdout.readline()
            assert first.startswith(b"ready"), (first, proc.stderr.read())
            time.sleep(rng.uniform(0.0, 0.25))
        else:
            time.sleep(rng.uniform(0.0, 0.4))  # maybe while it is still opening / recovering
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL, err
    return {int(line) for line in out.split() if line.isdigit()}


def check_log(directory: str, preallocate: bool, acked: set[int]) -> int:
    log = LocalPartitionLog.open(directory, crash_writer.policy(preallocate))
    try:
        expected = 0
        found = set()
        for view in log.read(0, 1 << 40, 1 << 40):
            header = verify(view)  # decodable, checksums right
            assert header.base_offset == expected
            assert bytes(view) == crash_writer.batch_for(expected)
            assert sum(1 for _ in iter_frames(view)) == header.message_count
            found.add(expected)
            expected = header.base_offset + header.message_count
        assert expected == log.next_offset
        missing = acked - found
        assert not missing, f"appends that returned were lost: {sorted(missing)[:10]}"
        if found:
            last = log.read(max(found), 1, 1 << 30)
            assert read_header(last[0]).base_offset == max(found)
        return len(found)
    finally:
        log.close()


@pytest.mark.slow
@pytest.mark.parametrize("preallocate", [False, True], ids=["plain", "preallocated"])
def test_sigkill_loses_no_returned_append(tmp_path, preallocate):
    rng = random.Random(20261114 + preallocate)
    directory = str(tmp_path / "p")
    acked: set[int] = set()
    batches = 0
    for round_no in range(7):
        acked |= run_writer_and_kill(directory, preallocate, rng, wait_ready=round_no != 3)
        batches = check_log(directory, preallocate, acked)
    assert len(acked) > 50 and batches >= len(acked)
