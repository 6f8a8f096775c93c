"""Kafka consume through a real ``headwater serve``: what limits the rate (server, client or protocol).

Usage: ``python benchmarks/bench_kafka_consume.py [--messages 2000000] [--size 100] [--repeat 2]
[--server-python PATH ...] [--profile DIR]``

For each ``--server-python`` (default: this interpreter; give several, e.g. main's venv and this
one, for an A/B in one run) a server is started with its defaults, ``--messages`` records of
``--size`` random bytes are produced to partition 0 with confluent-kafka (as in ``compare.py``),
then, ``--repeat`` times and alternating on the same data:

- ``kcat``: kcat (librdkafka's C consumer API, no Python) reads the partition from the beginning
  to the end (``-e``) into nothing: the C reference, timed from process start;
- ``confluent default``: confluent-kafka's Python ``Consumer`` with its defaults, the loop of
  ``compare_clients.Confluent.consume`` (``consume(10000, 0.5)``, ``m.error()`` per message);
- ``confluent tuned``: the same loop with ``compare_clients.CONFLUENT_CONSUMER`` (the settings
  ``compare.py`` uses, see there).

Each row: msg/s, the server's CPU seconds per million records (utime + stime from
``/proc/<pid>/stat``), and for the Python consumer its own CPU per million records split into the
Python thread (the loop) and librdkafka's threads (``rdk:broker*``: reading and parsing the fetch
responses), with the share of one core the process used. ``--profile DIR`` py-spies (raw format)
the server of each interpreter during its consume runs (``DIR/consume-server<N>.txt``, N counting
``--server-python`` from 1).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import HW_DEFAULT, TOPIC_OPTIONS, create_iggy_topic  # noqa: E402
from compare_clients import CONFLUENT_CONSUMER, KAFKA_PRODUCER  # noqa: E402
from compare_servers import Headwater, cpu_seconds  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def thread_cpu() -> dict[str, float]:
    """{thread name/tid: CPU seconds} of this process's threads."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[f"{comm}/{tid}"] = (int(fields[11]) + int(fields[12])) / TICKS
    return out


def produce(kafka: str, topic: str, n: int, size: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": kafka, **KAFKA_PRODUCER})
    value = os.urandom(size)
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.001)
        if i % 1000 == 0:
            p.poll(0)
    if p.flush(120):
        raise RuntimeError("produce did not finish")


def kcat(kafka: str, topic: str, n: int, pid: int) -> dict:
    c0, t0 = cpu_seconds(pid), time.monotonic()
    r = subprocess.run(["kcat", "-C", "-b", kafka, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
                        "-f", ""], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
    t1, c1 = time.monotonic(), cpu_seconds(pid)
    if r.returncode:
        raise RuntimeError(f"kcat failed: {r.stderr[-500:]!r}")
    return {"msg_s": n / (t1 - t0), "server_s_per_m": (c1 - c0) / n * 1e6}


def confluent(kafka: str, topic: str, n: int, pid: int, settings: dict) -> dict:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": kafka, "group.id": "bench", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", **settings})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    before = thread_cpu()
    c0, p0, t0 = cpu_seconds(pid), time.process_time(), time.monotonic()
    while got < n:
        for m in c.consume(min(10000, n - got), 0.5):
            if m.error() is None:
                got += 1
    t1, p1, c1 = time.monotonic(), time.process_time(), cpu_seconds(pid)
    after = thread_cpu()
    c.close()
    used = {k: v - before.get(k, 0.0) for k, v in after.items()}
    py = sum(v for k, v in used.items() if not k.startswith("rdk:"))
    rdk = sum(v for k, v in used.items() if k.startswith("rdk:"))
    return {"msg_s": n / (t1 - t0), "server_s_per_m": (c1 - c0) / n * 1e6,
            "client_core": (p1 - p0) / (t1 - t0), "python_s_per_m": py / n * 1e6, "rdkafka_s_per_m": rdk / n * 1e6}


def run(python: str, args, label: str, index: int) -> list[dict]:
    base = Path(tempfile.mkdtemp(prefix="hw-consume-"))
    server = Headwater(base, python).start()
    spy = None
    rows = []
    try:
        asyncio.run(create_iggy_topic(server.iggy, "consume", TOPIC_OPTIONS[HW_DEFAULT]))
        topic = "bench.consume"
        produce(server.kafka, topic, args.messages, args.size)
        if args.profile:
            Path(args.profile).mkdir(parents=True, exist_ok=True)
            spy = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "py-spy"), "record", "-p",
                                    str(server.pid), "-r", "200", "-f", "raw", "-o",
                                    os.path.join(args.profile, f"consume-server{index}.txt"), "--nonblocking"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1)
        for i in range(args.repeat):
            rows.append({"server": label, "run": i + 1, "client": "kcat",
                         **kcat(server.kafka, topic, args.messages, server.pid)})
            for name, settings in (("confluent default", {}), ("confluent tuned", CONFLUENT_CONSUMER)):
                rows.append({"server": label, "run": i + 1, "client": name,
                             **confluent(server.kafka, topic, args.messages, server.pid, settings)})
            for r in rows[-3:]:
                print(json.dumps(r), file=sys.stderr, flush=True)
    finally:
        if spy is not None:
            spy.send_signal(2)
            spy.wait(30)
        server.stop()
    return rows


def table(rows: list[dict]) -> str:
    out = ["| server | run | client | msg/s | server CPU s/M | client CPU (share of a core) "
           "| client Python thread s/M | client librdkafka threads s/M |", "|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        extra = ("|".join(f" {r[k]:.2f} " for k in ("client_core", "python_s_per_m", "rdkafka_s_per_m"))
                 if "client_core" in r else " - | - | - ")
        out.append(f"| {r['server']} | {r['run']} | {r['client']} | {r['msg_s']:,.0f} | {r['server_s_per_m']:.2f} |"
                   f"{extra}|")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--server-python", action="append", help="interpreter running `headwater serve` (repeatable)")
    ap.add_argument("--profile", metavar="DIR", help="py-spy the server during the consume runs")
    args = ap.parse_args()
    pythons = [os.path.abspath(p) for p in args.server_python or [sys.executable]]
    rows = []
    for i, python in enumerate(pythons):
        rows += run(python, args, f"{i + 1}: {python}", i + 1)
    print(f"<!-- {args.messages} records of {args.size} B; load average at end {os.getloadavg()} -->")
    print(table(rows))


if __name__ == "__main__":
    main()
