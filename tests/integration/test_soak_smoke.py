"""The soak tool (``tools/soak.py``), bounded for the default run: about 15 s of mixed Iggy and
Kafka load on a real server with one SIGKILL and restart, then the full audit.

The long run is ``.venv/bin/python tools/soak.py --minutes 10`` (README, "Soak and fuzz runs").
The audit's own checks are also driven directly with doctored inputs, so a soak that stopped
noticing lost or altered messages would fail here too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))

import soak  # noqa: E402

pytestmark = pytest.mark.slow


def test_soak_smoke_with_one_kill_and_restart(tmp_path):
    report_path = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, str(TOOLS / "soak.py"), "--minutes", "0.25", "--restart-every", "8",
         "--drain-seconds", "5", "--seed", "20261129", "--data-dir", str(tmp_path / "soak"),
         "--report", str(report_path), "--progress-every", "1000"],
        capture_output=True, text=True, timeout=150,
    )
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-4000:]
    report = json.loads(report_path.read_text())
    assert [r["signal"] for r in report["restarts"]] == ["SIGKILL"], report["restarts"]
    counts = report["counts"]
    assert counts["kafka acked"] > 0 and counts["iggy batches acked"] > 0, counts
    assert not report["violations"]
    # every partition was read back and every acknowledged message was there
    assert all(p["stored"] >= p["acked"] for p in report["partitions"].values()), report["partitions"]


def _ledger(acked: dict, observed: dict | None = None) -> soak.Ledger:
    ledger = soak.Ledger()
    for (key, offset), h in acked.items():
        ledger.ack(key, offset, h)
    for (key, offset), h in (observed or {}).items():
        ledger.observe(key, offset, h)
    return ledger


A0 = ("iggy", "a", 0)
RAW = {("soak", "a", 0): 3}


def test_the_audit_passes_a_faithful_log():
    ledger = _ledger({(A0, 0): 10, (A0, 1): 11}, {(A0, 2): 12})
    soak.audit(ledger, {A0: {0: 10, 1: 11, 2: 12}}, RAW)
    assert not ledger.violations


@pytest.mark.parametrize("stored, raw, violation", [
    ({0: 10, 2: 12}, {("soak", "a", 0): 2}, "acknowledged message lost"),
    ({0: 10, 1: 99, 2: 12}, RAW, "acknowledged message altered"),
    ({0: 10, 1: 11, 3: 12}, RAW, "offsets not contiguous"),
    ({0: 10, 1: 11, 2: 12}, {("soak", "a", 0): 2}, "client read and raw read disagree"),
    ({0: 10, 1: 11, 2: 77}, RAW, "consumer was handed a message the log holds differently"),
    ({0: 10, 1: 11}, {("soak", "a", 0): 2}, "consumer was handed a message the log does not hold"),
])
def test_the_audit_flags_a_broken_log(stored, raw, violation):
    ledger = _ledger({(A0, 0): 10, (A0, 1): 11}, {(A0, 2): 12})
    soak.audit(ledger, {A0: stored}, raw)
    assert violation in ledger.violations, dict(ledger.violations)


def test_two_acknowledgements_of_one_offset_are_a_violation():
    ledger = _ledger({(A0, 0): 10})
    ledger.ack(A0, 0, 11)
    assert "offset acknowledged twice" in ledger.violations
