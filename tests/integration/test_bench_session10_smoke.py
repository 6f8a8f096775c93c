"""Session 10's in-process benchmarks in tiny runs, so they cannot rot: ``bench_flusher_round.py``
(a periodic group-commit round with each kind of worker) and ``bench_poll_pieces.py`` (one Iggy poll
on the listener's fast path, and the page-cache chunk read each way). Each must finish and print
every row it measures; nothing here looks at a time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _run(script: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout


def test_bench_flusher_round_measures_each_kind_of_worker():
    out = _run("bench_flusher_round.py", "--iterations", "40", "--passes", "1")
    kinds = [line.split("|")[2].strip() for line in out.splitlines() if line.startswith("| 1 |")]
    assert sorted(kinds) in (["compiled", "none", "python"], ["none", "python"]), out  # (compiled: when built)
    rounds = {line.split("|")[2].strip(): int(line.split("|")[4]) for line in out.splitlines() if line.startswith("| 1 |")}
    assert rounds["none"] == 0 and rounds["python"] > 0, out  # the thresholds did start rounds


def test_bench_poll_pieces_serves_polls_and_reads_chunks():
    out = _run("bench_poll_pieces.py", "--batches", "3", "--rounds", "1")
    assert "CPU µs per poll: median " in out, out
    chunks = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ") and "KiB" in line]
    assert chunks == ["32 KiB", "156 KiB", "256 KiB", "512 KiB", "1024 KiB"], out
