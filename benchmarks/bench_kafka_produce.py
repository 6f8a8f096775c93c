"""Kafka produce, A/B: confluent-kafka against one or more server codes and librdkafka's mock, in one run.

Usage::

    .venv/bin/python benchmarks/bench_kafka_produce.py [--server-python PATH ...] [--fsync default,off,on]
        [--duration 3] [--size 100] [--repeat 2] [--profile DIR]

Each repeat runs, in turn, the mock cluster (``test.mock.num.brokers=1``) and then every
``--server-python`` (default: this interpreter; pass ``/work/main/.venv/bin/python`` too for a
before/after of another checkout) with every fsync mode, each on a fresh ``headwater serve``:

- ``default``: the topic's defaults (an fdatasync, in the flusher's thread, once 1024 messages or
  1 MiB are unsynced);
- ``off``: ``messages_required_to_save`` and ``size_of_messages_required_to_save`` at their maxima
  (16 Mi messages, 1 GiB): no fdatasync during the run;
- ``on``: ``enforce_fsync`` (each Produce answered once a group-commit fdatasync covers it).

The producer is the one of ``compare.py`` and ``bench_kafka_cpu.py``: 100 B records (no key,
no headers), ``linger.ms`` 5, ``batch.num.messages`` 10000, ``acks`` all, partition 0, for
``--duration`` seconds, then a flush. Prints msg/s, the ratio to the mock of the same repeat and
the server's CPU seconds (utime + stime of ``/proc/<pid>/stat``) per million records. With
``--profile DIR`` py-spy records (``--native``, raw format) the first server of each fsync mode.

``--raw N`` replaces confluent-kafka by a fixed load that does not depend on the client's speed:
Produce v9 requests (acks -1) of one RecordBatch of N records of ``--size`` bytes, built once,
sent on one connection with up to 5 unanswered (as librdkafka's max.in.flight), for
``--duration`` seconds; no mock. Server CPU per record is then comparable between servers even
on a loaded machine (the records per request are the same).
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

import compare  # noqa: E402
from compare import create_iggy_topic  # noqa: E402
from compare_servers import Headwater, cpu_seconds  # noqa: E402

MODES = {  # fsync mode -> topic options: compare.py's own (its rows "on", "1024 msgs", "off")
    "default": compare.TOPIC_OPTIONS[compare.HW_DEFAULT],
    "off": compare.TOPIC_OPTIONS[compare.HW_OFF],
    "on": compare.TOPIC_OPTIONS["on"],
}


def produce(conf: dict, topic: str, duration: float, size: int, cap: int = 20_000_000) -> tuple[int, float]:
    """Records produced for ``duration`` seconds and flushed: (count, seconds including the flush)."""
    from confluent_kafka import Producer

    payload = os.urandom(size)
    p = Producer({**conf, "linger.ms": 5, "batch.num.messages": 10000, "acks": "all"})
    failed: list = []

    def report(err, _msg):
        if err is not None:
            failed.append(err)

    t0 = time.perf_counter()
    end = t0 + duration
    n = 0
    while n < cap:
        try:
            p.produce(topic, payload, partition=0, on_delivery=report)
        except BufferError:
            p.poll(0.01)
            continue
        n += 1
        if n % 10000 == 0:
            p.poll(0)
            if time.perf_counter() > end:
                break
    left = p.flush(120)
    elapsed = time.perf_counter() - t0
    if left or failed:
        raise RuntimeError(f"{left} undelivered, {len(failed)} failed: {failed[:3]}")
    return n, elapsed


def produce_raw(address: str, topic: str, duration: float, size: int, records: int) -> tuple[int, float]:
    """Produce v9 requests of ``records`` records, up to 5 unanswered: (records, seconds)."""
    import socket
    import struct

    from headwater.codec.kafka.record_batch import Record, build_record_batch
    from headwater.codec.kafka.guard import uvarint

    payload = os.urandom(size)
    batch = build_record_batch([Record(i, 0, None, payload, ()) for i in range(records)],
                               base_timestamp=int(time.time() * 1000))
    name = topic.encode()
    body = (b"\x00" + struct.pack(">hi", -1, 30_000) + b"\x02" + uvarint(len(name) + 1) + name + b"\x02"
            + struct.pack(">i", 0) + uvarint(len(batch) + 1) + batch + b"\x00\x00\x00")
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reader = sock.makefile("rb")

    def frame(corr: int) -> bytes:
        head = struct.pack(">hhih", 0, 9, corr, 3) + b"raw\x00"
        return struct.pack(">i", len(head) + len(body)) + head + body

    def answer(corr: int) -> None:
        (n,) = struct.unpack(">i", reader.read(4))
        data = reader.read(n)
        got, = struct.unpack_from(">i", data, 0)
        # body after the v1 header: responses (1), name, partitions (1), index, error_code
        code, = struct.unpack_from(">h", data, 5 + 1 + 1 + len(name) + 1 + 4)
        if got != corr or code != 0:
            raise RuntimeError(f"answer {got} (expected {corr}), error code {code}")

    sent = done = 0
    t0 = time.perf_counter()
    end = t0 + duration
    while True:
        while sent - done < 5 and time.perf_counter() < end:
            sock.sendall(frame(sent))
            sent += 1
        if done == sent:
            break
        answer(done)
        done += 1
    elapsed = time.perf_counter() - t0
    sock.close()
    return done * records, elapsed


def run_headwater(python: str, mode: str, args, base: Path, profile: str | None) -> tuple[int, float, float]:
    server = Headwater(base, python).start()
    spy = None
    try:
        asyncio.run(create_iggy_topic(server.iggy, "t", MODES[mode]))
        conf = {"bootstrap.servers": server.kafka}
        if args.raw:
            produce_raw(server.kafka, "bench.t", 0.3, args.size, args.raw)  # warm-up
        else:
            produce(conf, "bench.t", 0.3, args.size)  # metadata, warm-up
        c0 = cpu_seconds(server.proc.pid)
        if profile:
            spy = subprocess.Popen([str(Path(sys.executable).with_name("py-spy")), "record", "--native", "-r", "200", "-f", "raw", "-o", profile,
                                    "-p", str(server.proc.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if args.raw:
            n, t = produce_raw(server.kafka, "bench.t", args.duration, args.size, args.raw)
        else:
            n, t = produce(conf, "bench.t", args.duration, args.size)
        c1 = cpu_seconds(server.proc.pid)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        return n, t, (c1 - c0) / n * 1e6
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server-python", action="append", help="interpreter running headwater serve (repeatable)")
    ap.add_argument("--fsync", default="default,off", help="modes, comma separated: default,off,on")
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--profile", metavar="DIR", help="py-spy --native raw profiles of the first repeat")
    ap.add_argument("--raw", type=int, default=0, metavar="N",
                    help="our fixed load instead of confluent-kafka: Produce requests of N records, 5 in flight")
    args = ap.parse_args()
    pythons = args.server_python or [sys.executable]
    modes = [m for m in args.fsync.split(",") if m]
    rows = []
    for r in range(args.repeat):
        mock = float("nan")
        if not args.raw:
            n, t = produce({"test.mock.num.brokers": 1}, "mock", args.duration, args.size)
            mock = n / t
            rows.append((r, "mock", "memory", mock, 1.0, None))
            print(f"# repeat {r}: mock {mock:,.0f} msg/s", file=sys.stderr, flush=True)
        for python in pythons:
            for mode in modes:
                base = Path(tempfile.mkdtemp(prefix="hw-kprod-"))
                prof = None
                if args.profile and r == 0:
                    os.makedirs(args.profile, exist_ok=True)
                    prof = os.path.join(args.profile, f"{Path(python).parent.parent.parent.name}-{mode}.txt")
                try:
                    n, t, cpu = run_headwater(python, mode, args, base, prof)
                finally:
                    shutil.rmtree(base, ignore_errors=True)
                rows.append((r, python, mode, n / t, n / t / mock, cpu))
                print(f"# repeat {r}: {python} {mode}: {n / t:,.0f} msg/s, {cpu:.2f} s/M", file=sys.stderr, flush=True)
    print("| repeat | server | fsync | msg/s | / mock | server CPU s/M |")
    print("|---:|---|---|---:|---:|---:|")
    for r, who, mode, rate, ratio, cpu in rows:
        shown = "-" if ratio != ratio else f"{ratio:.2f}"  # NaN: no mock in a --raw run
        print(f"| {r} | {who} | {mode} | {rate:,.0f} | {shown} | {'-' if cpu is None else f'{cpu:.2f}'} |")


if __name__ == "__main__":
    main()
