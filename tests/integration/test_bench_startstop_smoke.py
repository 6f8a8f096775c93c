"""Session 12's start/stop benchmark in a tiny run, so it cannot rot: ``bench_startstop.py`` (a real server
started and stopped over a data directory of many partitions, with a busy-disk writer). It must
finish and print a summary per server; nothing here looks at a time."""

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
