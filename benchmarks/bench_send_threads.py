"""Where an SDK send's server CPU goes by thread, with the syscalls that drive it (default policy).

Usage::

    python benchmarks/bench_send_threads.py --server-python <venv A>/bin/python \\
        --server-python <venv B>/bin/python --passes 4 --requests 4000 --warm-memory 2

Starts one ``headwater serve`` per ``--server-python``, pass after pass and server after
server (alternating), and times ``--requests`` apache-iggy SDK ``send_messages`` of 1000 x
100 B to a one-partition topic at the topic defaults (``--fsync default``: an fdatasync nobody
waits for every 1024 messages) or compare.py's fsync off. Per run it prints, per request:
the server's CPU (``/proc/<pid>/task/*/stat``, user + system), the event loop thread's part,
the other threads' part (group-commit workers: their CPU is almost all the kernel's
``fdatasync``; write-behind; preallocation), and, when ``perf`` can count tracepoints (root),
the calls of ``fdatasync``, ``futex`` and ``fcntl`` (``os.dup``) and the context switches of
the whole server, plus the other threads' CPU per ``fdatasync``. The number of fdatasyncs per
request follows the disk's speed (a round covers every ask made while the one before it
ran), and the other threads' CPU follows it: read the two together. Numbers only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tools"))

EVENTS = ("syscalls:sys_enter_fdatasync", "syscalls:sys_enter_futex", "syscalls:sys_enter_fcntl", "context-switches")


def thread_ticks(pid: int) -> dict[str, int]:
    """utime + stime in clock ticks of every thread of ``pid``."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[tid] = int(fields[11]) + int(fields[12])
    return out


def start_counting(pid: int) -> subprocess.Popen | None:
    if shutil.which("perf") is None:
        return None
    return subprocess.Popen(["perf", "stat", "-x,", "-e", ",".join(EVENTS), "-p", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop_counting(proc: subprocess.Popen | None) -> dict[str, int]:
    if proc is None:
        return {}
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=30)[1]
    counts = {}
    for line in err.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[0].strip().isdigit():
            counts[parts[2].split(":")[-1].replace("sys_enter_", "")] = int(parts[0])
    return counts


def main() -> None:
    from bench_iggy_poll import sdk_client
    from bench_iggy_request import FSYNC_OFF, _create, sdk_send
    from compare_servers import Headwater
    from machine_state import warm_memory

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server-python", action="append", default=[],
                    help="interpreter of a venv whose headwater to serve (repeat to compare; default this one)")
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--fsync", choices=["off", "default"], default="default")
    ap.add_argument("--warm-memory", type=float, default=0.0, metavar="GIB",
                    help="before each measurement touch and release this much memory (machine_state.py)")
    args = ap.parse_args()
    pythons = args.server_python or [sys.executable]
    base = Path(tempfile.mkdtemp(prefix="bench-send-threads-"))
    tick = os.sysconf("SC_CLK_TCK")
    n = args.requests
    print("| pass | server | wall µs/req | server CPU µs/req | loop thread | other threads | fdatasync/req | "
          "futex/req | fcntl/req | switches/req | other threads µs per fdatasync | load |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    try:
        for p in range(args.passes):
            for i, python in enumerate(pythons):
                server = Headwater(base / f"{p}-{i}", os.path.abspath(python)).start()
                pid = server.pid
                try:
                    loop = asyncio.new_event_loop()
                    sdk = loop.run_until_complete(sdk_client(server.iggy))
                    loop.run_until_complete(_create(sdk, dict(FSYNC_OFF) if args.fsync == "off" else {}))
                    loop.run_until_complete(sdk_send(sdk, 500, 100, 1000))  # warm
                    warm_memory(args.warm_memory)
                    counting = start_counting(pid)
                    time.sleep(0.3)  # perf attached
                    a, t0 = thread_ticks(pid), time.perf_counter()
                    loop.run_until_complete(sdk_send(sdk, n, 100, 1000))
                    wall, b = time.perf_counter() - t0, thread_ticks(pid)
                    counts = stop_counting(counting)
                    loop.close()
                finally:
                    server.stop()
                us = {tid: (b[tid] - a.get(tid, 0)) / tick / n * 1e6 for tid in b}
                total, main_thread = sum(us.values()), us.get(str(pid), 0.0)
                fds = counts.get("fdatasync", 0) / n
                per_fd = f"{(total - main_thread) / fds:.0f}" if fds else "-"

                def c(k: str) -> str:
                    return f"{counts[k] / n:.2f}" if k in counts else "-"

                print(f"| {p + 1} | {python} | {wall / n * 1e6:.0f} | {total:.0f} | {main_thread:.0f} | "
                      f"{total - main_thread:.0f} | {c('fdatasync')} | {c('futex')} | {c('fcntl')} | "
                      f"{c('context-switches')} | {per_fd} | {os.getloadavg()[0]:.1f} |", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
