"""The side-by-side benchmark (``benchmarks/compare.py``) in ``--quick`` mode with tiny counts, so
it cannot rot: every system it ran must have produced and consumed exactly the expected number of
messages, and its output must parse. Nothing here looks at a time or a rate.

The Iggy reference peer (``iggyref``: ``benchmarks/iggy_reference_peer.py``, ours, so never
skipped) runs the same apache-iggy send and poll rows; its rows must move every message too and
the report must set them beside Headwater's.

Peers missing on the machine (redis-server, nats-server, redis-py, nats-py) are skipped by the
harness with a note; the test checks that each system either ran or was skipped with a reason
(without redis-py only Redis's own C ``redis-benchmark`` row runs, its count checked with XLEN).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

COMPARE = Path(__file__).resolve().parents[2] / "benchmarks" / "compare.py"
SYSTEMS = {"headwater", "iggyref", "mock", "redis", "nats"}
MESSAGES = 4000  # a multiple of 4 producers x 1000-message batches, so every producer stops by count

pytestmark = pytest.mark.slow


def test_compare_quick_run_moves_every_message(tmp_path):
    out = tmp_path / "results.json"
    # a long --duration with a small --max-messages: every produce run ends by count, never by time
    proc = subprocess.Popen(
        [sys.executable, str(COMPARE), "--quick", "--duration", "120", "--latency-duration", "0.2",
         "--max-messages", str(MESSAGES), "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=280)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the harness, its servers and its client workers
        stdout, stderr = proc.communicate()
        pytest.fail("compare.py --quick did not finish: " + stdout[-6000:] + stderr[-4000:])
    assert proc.returncode == 0, stdout[-6000:] + stderr[-4000:]
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert not [r for r in rows if r["error"]], [f"{r['system']} {r['label']} {r['op']}: {r['error']}"
                                                  for r in rows if r["error"]]

    ran = {r["system"] for r in rows}
    skipped = {s["system"]: s for s in result["skipped"]}
    assert ran | set(skipped) == SYSTEMS, (ran, skipped)
    assert {"headwater", "iggyref", "mock"} <= ran, skipped  # their clients are test dependencies
    assert not ({"headwater", "iggyref", "mock"} & set(skipped)), skipped
    assert all(s["why"] and s["rows"] for s in skipped.values())

    produced = {(r["system"], r["label"], r["fsync"]): r for r in rows if r["op"] == "produce"}
    # Headwater's Iggy produce rows at each fsync setting: its default, enforce_fsync, no sync within the run
    assert {f for (system, label, f) in produced if system == "headwater" and label.startswith("Iggy")} == \
        {"1024 msgs", "on", "off"}
    for key, r in produced.items():
        assert r["count"] == MESSAGES and r["stopped_by"] == "count", (key, r["count"])
    consumed = [r for r in rows if r["op"] == "consume"]
    for r in consumed:
        assert r["count"] == r["expected"] == MESSAGES, (r["system"], r["label"], r["count"], r["expected"])
    # every system that ran read its messages back (unless only its consuming client is missing)
    partly = {name for name, s in skipped.items() if s["rows"] != "all"}
    assert {r["system"] for r in consumed} >= ran - partly
    labels = {r["label"] for r in consumed}
    assert {"Iggy: apache-iggy poll", "Iggy: raw poller (count 10000, 2 in flight)", "Kafka: confluent-kafka",
            "Kafka: kafka-python", "Kafka: aiokafka"} <= labels
    # the reference peer: the SDK's x1 and x4 sends and its poll against the verifying peer, x1
    # against the one that does not verify; it answered every command the SDK sent
    peer = {(r["label"], r["op"]) for r in rows if r["system"] == "iggyref"}
    assert peer == {("Iggy: apache-iggy x1", "produce"), ("Iggy: apache-iggy x4", "produce"),
                    ("Iggy: apache-iggy poll", "consume"), ("Iggy: apache-iggy x1 (no verify)", "produce"),
                    ("Iggy: raw generator", "produce"), ("Iggy: raw generator", "latency"),
                    ("Iggy: raw generator (1 ms tick)", "latency")}, peer
    # the peer's ack latency is measured at the rate Headwater's fsync-off latency rows ran at
    hw_off_rates = {r["label"]: r["rate"] for r in rows
                    if r["system"] == "headwater" and r["op"] == "latency" and r["fsync"] == "off"}
    assert {r["label"]: r["rate"] for r in rows if r["system"] == "iggyref" and r["op"] == "latency"} == \
        hw_off_rates, hw_off_rates
    assert len(result["notes"]) == 2 and all("unanswered: none" in n for n in result["notes"]), result["notes"]
    # every row run by client worker processes carries their CPU per message (a figure, not a bound)
    assert all(r["client_cpu_us"] is not None for r in rows if r["count"]), rows
    # the raw generator's ack latency on an fsync-off topic, at the 5 ms and at the 1 ms tick
    off = {r["label"]: r for r in rows if r["op"] == "latency" and r["fsync"] == "off"}
    assert set(off) == {"Iggy: raw generator", "Iggy: raw generator (1 ms tick)"}, off
    assert off["Iggy: raw generator (1 ms tick)"]["lat_unit"].endswith("every 1 ms")
    for r in (r for r in rows if r["op"] == "latency"):
        assert r["count"] > 0 and set(r["lat_us"]) == {"p50", "p99", "p999", "n"}, r
        assert r["lat_us"]["p50"] <= r["lat_us"]["p99"] <= r["lat_us"]["p999"]

    # the printed table has one line per client row, and the JSON re-renders
    table_lines = [line for line in stdout.splitlines() if line.startswith("| ")]
    assert len(table_lines) >= 2 + len(produced)
    sys.path.insert(0, str(COMPARE.parent))
    import compare_report

    assert compare_report.tables(result).splitlines()[0] == table_lines[0]
    # Headwater beside the peer: x1, x4 (each at the fsync settings Headwater ran them), the poll,
    # and x1 beside the peer that does not verify
    reference = compare_report.reference_lines(rows)
    assert reference and reference[0] in table_lines, reference
    workloads = {tuple(line.split(" | ")[1:3]) for line in reference[2:]}
    assert workloads == {("apache-iggy x1 produce", "verify"), ("apache-iggy x4 produce", "verify"),
                         ("apache-iggy poll consume", "verify"), ("apache-iggy x1 produce", "no verify"),
                         ("raw generator produce", "verify")}, reference
    # and Headwater's fsync-off ack times beside the peer's at the same rate, at both ticks
    latency = compare_report.latency_reference_lines(rows)
    assert latency and latency[0] in table_lines, latency
    assert sorted(line.split(" | ")[1] for line in latency[2:]) == ["raw generator", "raw generator (1 ms tick)"]
