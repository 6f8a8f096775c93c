"""What a start of ``headwater serve`` on an empty data directory costs, and a CLI command.

Usage: ``python benchmarks/bench_serve_start.py [--rounds 5] [--server-python PY ...] [--cwd DIR]``

Per round, for each ``--server-python`` in turn (A/B alternating; the default is this
interpreter):

- *serve*: ``PY -m headwater serve`` on a fresh, empty data directory with every listener
  on (the default set, each on a port of its own): *wall* is the time from the spawn to its
  ``headwater started`` log line (its listeners accept by then), *cpu* the server's user +
  system CPU seconds at that moment (``/proc/<pid>/stat``; interpreter start and imports
  included). *cpu+1s* is the same figure one second later (work a start leaves to the loop
  after the line, e.g. a background warm-up, shows there). The server is then stopped.
- *version*: ``PY -m headwater --version`` (wall, and CPU from the child's rusage).
- *cli*: ``PY -m headwater stream list`` against the server of this round (while it runs),
  logged in as iggy/iggy.

Every process runs in ``--cwd`` (default: an empty temporary directory, as a user's). A
hypothesis installed in a server's venv matters there: kio registers hypothesis strategies
when it can import it, and hypothesis builds its character table into ``.hypothesis/`` of
the working directory unless one is there already (``--cwd`` of a checkout whose tests ran:
the test suite's case).

Prints one line per run and the median of each figure per interpreter. Keep the machine
quiet (``flock -x /work/bench.lock``); the load average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from ports import free_port  # noqa: E402  (a sibling module: benchmarks run as scripts)

STARTED = "headwater started"
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_of(pid: int) -> float:
    """User + system CPU seconds of a running process (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}


def _timed_command(args: list[str], cwd: str) -> tuple[float, float]:
    """Run ``args`` to its end; returns (wall, CPU) seconds. Raises on a non-zero exit."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env(), cwd=cwd)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode != 0:
        raise RuntimeError(f"{args} exited with {proc.returncode}: {err[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def one_round(python: str, root: str, cwd: str) -> dict[str, float]:
    data_dir = tempfile.mkdtemp(prefix="data-", dir=root)
    shutil.rmtree(data_dir)  # a data directory that does not exist yet: the first start's path
    log_path = os.path.join(root, "server.log")
    tcp = free_port()
    args = [
        python, "-m", "headwater", "serve", "--data-dir", data_dir,
        "--tcp-address", f"127.0.0.1:{tcp}", "--kafka-address", f"127.0.0.1:{free_port()}",
        "--http-address", f"127.0.0.1:{free_port()}", "--quic-address", f"127.0.0.1:{free_port()}",
        "--websocket-address", f"127.0.0.1:{free_port()}", "--with-default-root-credentials",
    ]
    out: dict[str, float] = {}
    with open(log_path, "wb") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=_env(), cwd=cwd)
    try:
        while True:
            with open(log_path, errors="replace") as f:
                text = f.read()
            if STARTED in text:
                out["serve_wall"] = time.perf_counter() - t0
                out["serve_cpu"] = _cpu_of(proc.pid)
                break
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.002)
        time.sleep(1.0)
        out["serve_cpu_1s"] = _cpu_of(proc.pid)
        out["cli_wall"], out["cli_cpu"] = _timed_command(
            [python, "-m", "headwater", "--server", f"127.0.0.1:{tcp}", "-u", "iggy", "-p", "iggy",
             "stream", "list"], cwd)
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait()
        shutil.rmtree(data_dir, ignore_errors=True)
    if rc != 0:
        raise RuntimeError(f"server exited with {rc}")
    out["version_wall"], out["version_cpu"] = _timed_command([python, "-m", "headwater", "--version"], cwd)
    return out


FIGURES = ("serve_wall", "serve_cpu", "serve_cpu_1s", "version_wall", "version_cpu", "cli_wall", "cli_cpu")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--server-python", action="append", help="interpreter(s) to run the server with (A/B)")
    ap.add_argument("--cwd", help="the processes' working directory (default: an empty temporary one, made per run)")
    args = ap.parse_args()
    pythons = args.server_python or [sys.executable]
    root = tempfile.mkdtemp(prefix="bench-serve-start-", dir="/work" if os.path.isdir("/work") else None)
    results: dict[str, dict[str, list[float]]] = {p: {k: [] for k in FIGURES} for p in pythons}
    try:
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        for r in range(args.rounds):
            for i, py in enumerate(pythons):
                cwd = args.cwd or tempfile.mkdtemp(prefix="cwd-", dir=root)
                got = one_round(py, root, cwd)
                for k, v in got.items():
                    results[py][k].append(v)
                print(f"round {r} server {i}: " + ", ".join(f"{k} {got[k]:.3f}" for k in FIGURES)
                      + f"; load {os.getloadavg()[0]:.2f}", flush=True)
        for i, py in enumerate(pythons):
            print(f"server {i} ({py}) medians: "
                  + ", ".join(f"{k} {statistics.median(results[py][k]):.3f} s" for k in FIGURES))
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
