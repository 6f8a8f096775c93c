"""Session 14's server-start benchmark in a tiny run, so it cannot rot: ``bench_serve_start.py`` (a real
server started on an empty data directory, a CLI command against it, ``--version``). It must finish and
print a summary per server; nothing here looks at a time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_bench_serve_start_prints_a_summary_per_server(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCH / "bench_serve_start.py"), "--rounds", "1", "--cwd", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert sum(line.startswith("server 0 (") for line in proc.stdout.splitlines()) == 1, proc.stdout
    assert "serve_cpu" in proc.stdout and "cli_cpu" in proc.stdout and "version_cpu" in proc.stdout, proc.stdout
