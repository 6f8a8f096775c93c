"""Session 12's benchmark in a tiny run, so it cannot rot: ``bench_send_path.py`` (the Iggy send path
without sockets: Broker.append and the reply bytes, in a child process on real storage). It must
finish and print a row per round and a summary; nothing here looks at a time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_bench_send_path_prints_a_row_per_round():
    proc = subprocess.run([sys.executable, str(BENCH / "bench_send_path.py"), "--rounds", "2", "--requests", "20",
                           "--chunk", "10", "--batch", "10"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rounds = [line.split("|")[1].strip() for line in proc.stdout.splitlines() if line.startswith("| ") and
              line.split("|")[1].strip().isdigit()]
    assert rounds == ["1", "2"], proc.stdout
    assert "all rounds:" in proc.stdout
