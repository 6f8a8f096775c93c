"""Session 11's benchmark in a tiny run, so it cannot rot: ``bench_send_sizes.py`` (SDK sends of one
message each, by size, against a real server). It must finish and print a row per size; nothing
here looks at a time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_bench_send_sizes_prints_a_row_per_size():
    proc = subprocess.run([sys.executable, str(BENCH / "bench_send_sizes.py"), "--sizes", "100,20000",
                           "--sends", "3", "--passes", "1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    sizes = [line.split("|")[3].strip() for line in proc.stdout.splitlines() if line.startswith("| 1 |")]
    assert sizes == ["100", "20000"], proc.stdout
