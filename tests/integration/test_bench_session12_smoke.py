"""Session 12's benchmarks in tiny runs, so they cannot rot: ``bench_startstop.py`` (a real server
started and stopped over a data directory of many partitions, with a busy-disk writer) and
``bench_send_path.py`` (the Iggy send path without sockets). Each must finish and print its
summary; nothing here looks at a time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_bench_startstop_prints_a_summary_per_server(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCH / "bench_startstop.py"), "--partitions", "3", "--rounds", "1",
                           "--busy", "fsync", "--evict", "--data-dir", str(tmp_path / "data")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "setup: 3 partitions made" in proc.stdout, proc.stdout
    assert sum(line.startswith("server 0 (") for line in proc.stdout.splitlines()) == 1, proc.stdout


def test_bench_send_path_prints_a_row_per_round():
    proc = subprocess.run([sys.executable, str(BENCH / "bench_send_path.py"), "--rounds", "2", "--requests", "20",
                           "--chunk", "10", "--batch", "10"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rounds = [line.split("|")[1].strip() for line in proc.stdout.splitlines() if line.startswith("| ") and
              line.split("|")[1].strip().isdigit()]
    assert rounds == ["1", "2"], proc.stdout
    assert "all rounds:" in proc.stdout
