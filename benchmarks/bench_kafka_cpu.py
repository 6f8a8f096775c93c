"""Kafka produce and consume through a real ``headwater serve``: rate and the server's CPU time.

Usage: ``python benchmarks/bench_kafka_cpu.py [--messages 1000000] [--size 100] [--no-mock]
[--profile DIR]``

- produce: confluent-kafka Producer (linger.ms 5, batch.num.messages 10000, acks all)
  of ``--messages`` records of ``--size`` random bytes (no key, no headers) to
  partition 0; the same run against librdkafka's own mock cluster
  (``test.mock.num.brokers=1``) for the ratio.
- consume: confluent-kafka Consumer assigned to that partition from offset 0 until
  every record is back (the mock cluster keeps only a short log, so it gives no
  consume reference).

Server CPU is utime + stime of the server process from ``/proc/<pid>/stat``, read
before and after each phase, reported in seconds per million records. With
``--profile DIR`` py-spy records the server (raw format) during each phase.
The server runs with its defaults in a temporary data directory; client and
server share the machine's cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_e2e import free_port, start_server  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14, 15)


def produce(conf: dict, topic: str, total: int, size: int) -> float:
    from confluent_kafka import Producer

    payload = os.urandom(size)
    p = Producer({**conf, "linger.ms": 5, "batch.num.messages": 10000, "acks": "all"})
    failed = []
    t0 = time.perf_counter()
    for i in range(total):
        while True:
            try:
                p.produce(topic, payload, partition=0, on_delivery=lambda err, _m: err and failed.append(err))
                break
            except BufferError:
                p.poll(0.01)
        if i % 10000 == 0:
            p.poll(0)
    left = p.flush(120)
    elapsed = time.perf_counter() - t0
    if left or failed:
        raise RuntimeError(f"{left} undelivered, {len(failed)} failed: {failed[:3]}")
    return elapsed


def consume(address: str, topic: str) -> tuple[int, float]:
    """Read partition 0 of ``topic`` from its log start to its end: (records, seconds)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": address, "group.id": "bench", "enable.auto.commit": False})
    low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    total = high - low
    c.assign([TopicPartition(topic, 0, low)])
    t0 = time.perf_counter()
    left = total
    idle = 0
    while left > 0:
        batch = c.consume(10000, 1.0)
        idle = 0 if batch else idle + 1
        if idle > 30:
            raise RuntimeError(f"nothing consumed for 30 s, {left} records missing")
        errors = [m.error() for m in batch if m.error() is not None]
        if errors:
            raise RuntimeError(f"consume failed: {errors[0]}")
        left -= len(batch)
    elapsed = time.perf_counter() - t0
    c.close()
    return total, elapsed


def spy(pid: int, out: str | None) -> subprocess.Popen | None:
    if out is None:
        return None
    return subprocess.Popen(["py-spy", "record", "-r", "200", "-f", "raw", "-o", out, "-p", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_spy(proc: subprocess.Popen | None) -> None:
    if proc is not None:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--no-mock", action="store_true")
    ap.add_argument("--profile", default=None, help="directory for py-spy raw profiles")
    args = ap.parse_args()
    n = args.messages
    rows = []
    if not args.no_mock:
        mock = produce({"test.mock.num.brokers": 1}, "bench-mock", n, args.size)
        rows.append(("mock cluster produce", n / mock, None))
    data = tempfile.mkdtemp(prefix="hw-kcpu-")
    tcp, kport = free_port(), free_port()
    server = start_server(os.path.join(data, "d"), tcp, kport)
    prof = args.profile
    if prof:
        os.makedirs(prof, exist_ok=True)
    try:
        conf = {"bootstrap.servers": f"127.0.0.1:{kport}"}
        produce(conf, "bench-k", 1000, args.size)  # creates the topic, warms up
        c0 = cpu_seconds(server.pid)
        s = spy(server.pid, prof and os.path.join(prof, "produce.txt"))
        t = produce(conf, "bench-k", n, args.size)
        stop_spy(s)
        c1 = cpu_seconds(server.pid)
        rows.append(("headwater produce", n / t, (c1 - c0) / n * 1e6))
        s = spy(server.pid, prof and os.path.join(prof, "consume.txt"))
        got, t = consume(f"127.0.0.1:{kport}", "bench-k")
        stop_spy(s)
        c2 = cpu_seconds(server.pid)
        rows.append(("headwater consume", got / t, (c2 - c1) / got * 1e6))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        shutil.rmtree(data, ignore_errors=True)
    print(f"| path ({args.size} B) | msgs/s | server CPU s per M records |\n|---|---:|---:|")
    for name, rate, cpu in rows:
        print(f"| {name} | {rate:,.0f} | {'' if cpu is None else f'{cpu:.2f}'} |")
    if not args.no_mock:
        rate = {name: r for name, r, _ in rows}
        print(f"produce ratio headwater / mock: {rate['headwater produce'] / rate['mock cluster produce']:.2f}")


if __name__ == "__main__":
    main()
