"""``benchmarks/bench_ack_latency.py`` in a tiny run with its server probe, so the bench and the
probe (``benchmarks/ack_probe``) cannot rot: it must measure a peak, pace one window, get the
probe's frames back from the server's clean exit and write its JSON. Nothing here looks at a
rate or a latency."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_ack_latency.py"


def test_bench_ack_latency_tiny_run_with_the_probe(tmp_path):
    out = tmp_path / "ack.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--windows", "1", "--duration", "0.3", "--peak-duration", "0.3",
         "--warm-memory", "0", "--probe", "--json", str(out)],
        capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "# peak " in proc.stdout and "# server probe: " in proc.stdout, proc.stdout
    assert "ack ms p50 " in proc.stdout, proc.stdout
    result = json.loads(out.read_text())
    (window,) = result["windows"]
    assert window["tick_ms"] == 5.0 and window["rate"] > 0
    analysis = window["analysis"]
    assert analysis["n"] > 0, analysis  # acks were timed
    assert analysis["serve_ms"], analysis  # and joined with the probe's frames from the server
    # session 13's split of serve (the probe's wrappers of verify_and_stamp and the log's append ran:
    # a value of 0 everywhere would mean they were never called) and the slowest 1 %'s make-up
    assert analysis["serve_verify_ms"][2] > 0 and analysis["serve_append_ms"][2] > 0, analysis
    assert {"serve_rest_ms", "receiving_cpu_ms", "receiving_runq_ms"} <= analysis.keys(), analysis
    assert {"ack", "to_first_byte", "serve", "verify", "append"} <= analysis["tail_median_ms"].keys(), analysis
