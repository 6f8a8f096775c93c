"""``benchmarks/bench_catchup.py`` with a tiny topic (its Iggy reader, and two Kafka readers), so it cannot rot: it must read every message
back in each of its reads (it raises otherwise) and print its table. Nothing here looks at a rate."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_catchup.py"


@pytest.mark.parametrize("readers", [[], ["--protocol", "kafka", "--consumers", "2"]], ids=["iggy", "kafka-x2"])
def test_bench_catchup_tiny_run_reads_everything_back(tmp_path, readers):
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--gb", "0.004", "--budget", str(1 << 20), "--passes", "1", *readers],
        capture_output=True, text=True, timeout=240, env={**os.environ, "BENCH_DIR": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| 1 | 0 |")]
    assert [r.split("|")[3].strip() for r in rows] == ["as written", "cold", "warm"], proc.stdout
    assert not list(tmp_path.iterdir())  # its data directory is gone
