"""Group commit: the disk's fdatasync bandwidth next to produce throughput with enforce_fsync.

Usage: ``python benchmarks/bench_fsync.py [--seconds 8] [--producers 4] [--sizes 100,1000]
[--partitions 1] [--only disk,iggy,kafka] [--data-dir DIR]``

- disk: in the data directory's filesystem, ``os.pwrite`` chunks of 64 KiB,
  256 KiB, 1 MiB and 4 MiB back to back and ``os.fdatasync`` after each one
  (``--disk-mb`` per chunk size). MB/s and syncs/s per chunk size; the best
  MB/s is the reference "sequential fdatasync bandwidth".
- iggy: a real ``headwater serve`` (fresh data directory), one topic with
  ``--partitions`` partitions and ``enforce_fsync`` off, then on; ``--producers``
  processes, each an apache-iggy client sending batches of 1000 messages of
  each ``--sizes`` to partition ``i % partitions`` for ``--seconds``. Reports
  msgs/s, payload MB/s, log MB/s (bytes the partition files grew by, i.e.
  what had to be fdatasync'ed) and the send-to-acknowledgement latency p50/p99.
- kafka: a confluent-kafka Producer (acks=all, linger.ms 5) sending messages of
  each size to a one-partition topic with ``enforce_fsync`` off, then on, for
  ``--seconds`` (throughput only: with the client's queue kept full, produce()
  to delivery measures that queue).
- latency: closed loop, one request in flight, ``--latency-sends`` times: an
  apache-iggy send of one 100-B message, and a confluent-kafka produce + flush
  (acks=all, linger 0); p50/p99 with ``enforce_fsync`` off and on.

Each Headwater run gets a fresh server whose group-commit counters (rounds,
acknowledgements per round, seconds the sync threads were busy) are printed
next to it. The disk table is measured before and after the runs (this VM's
disk varies a lot from minute to minute); "% of disk" is the log MB/s over the
best sequential fdatasync MB/s seen in either.

The server and clients share this machine's cores; figures are a floor.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_e2e import free_port  # noqa: E402

CHUNKS = (64 << 10, 256 << 10, 1 << 20, 4 << 20)
BATCH = 1000


# --------------------------------------------------------------------------- disk


def disk(directory: str, total_mb: int) -> list[tuple[int, float, float]]:
    """(chunk bytes, MB/s, syncs/s) of pwrite+fdatasync per chunk, sequential in one file."""
    path = os.path.join(directory, "fdatasync-probe.dat")
    rows = []
    for chunk in CHUNKS:
        data = os.urandom(chunk)
        n = max(16, (total_mb << 20) // chunk)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            t0 = time.perf_counter()
            for i in range(n):
                os.pwrite(fd, data, i * chunk)
                os.fdatasync(fd)
            dt = time.perf_counter() - t0
        finally:
            os.close(fd)
            os.unlink(path)
        rows.append((chunk, n * chunk / dt / 1e6, n / dt))
    return rows


# --------------------------------------------------------------------------- server


def _serve(data: str, tcp: int, kafka: int, stats_path: str) -> None:
    """The server, as ``headwater serve`` runs it, writing its group-commit counters
    (storage.local.flusher.Flusher.stats) to ``stats_path`` when SIGTERM stops it."""
    from headwater import app, config

    cfg = config.load(overrides={"system.data_dir": data, "tcp.address": f"127.0.0.1:{tcp}",
                                 "kafka.address": f"127.0.0.1:{kafka}", "logging.level": "warning",
                                 "http.address": "127.0.0.1:0"})
    started = {}
    try:
        import uvloop  # type: ignore

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    runner(app.serve(cfg, default_root=True, ready=lambda a: started.update(app=a)))
    flusher = getattr(started["app"].broker.engine, "flusher", None)  # absent before group commit
    stats = flusher.stats() if flusher is not None else {"rounds": 0, "acknowledged": 0, "sync_seconds": 0.0}
    with open(stats_path, "w") as f:
        json.dump(stats, f)


class Server:
    def __init__(self, parent: str):
        self.data = os.path.join(parent, "d")
        self.stats_path = os.path.join(parent, "stats.json")
        self.tcp, self.kafka = free_port(), free_port()
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", self.data, str(self.tcp),
                                      str(self.kafka), self.stats_path])
        for _ in range(400):
            try:
                socket.create_connection(("127.0.0.1", self.tcp), 0.2).close()
                socket.create_connection(("127.0.0.1", self.kafka), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("server did not start")

    def stop(self) -> dict:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(120)
        with open(self.stats_path) as f:
            stats = json.load(f)
        shutil.rmtree(self.data, ignore_errors=True)
        return stats


# --------------------------------------------------------------------------- iggy


def _iggy_producer(port: int, topic: str, partition: int, size: int, start: float, seconds: float, out) -> None:
    async def go():
        from apache_iggy import IggyClient, SendMessage

        c = IggyClient(f"127.0.0.1:{port}")
        await c.connect()
        await c.login_user("iggy", "iggy")
        batch = [SendMessage(os.urandom(size)) for _ in range(BATCH)]
        await asyncio.sleep(max(0.0, start - time.time()))
        latencies = []
        end = time.time() + seconds
        while time.time() < end:
            t0 = time.perf_counter()
            await c.send_messages("bench", topic, partition, batch)
            latencies.append(time.perf_counter() - t0)
        return latencies

    out.put(asyncio.run(go()))


async def _create_topic(port: int, topic: str, partitions: int, fsync: bool, stream: str = "bench") -> None:
    from apache_iggy import IggyClient

    c = IggyClient(f"127.0.0.1:{port}")
    await c.connect()
    await c.login_user("iggy", "iggy")
    if await c.get_stream(stream) is None:
        await c.create_stream(stream)
    await c.create_topic(stream, topic, partitions, options={"enforce_fsync": "true" if fsync else "false"})


def _log_bytes(data: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(data) for f in fs if f.endswith(".log"))


def iggy(port: int, data: str, fsync: bool, size: int, producers: int, partitions: int, seconds: float) -> dict:
    topic = f"t-{size}-{'fsync' if fsync else 'nofsync'}"
    asyncio.run(_create_topic(port, topic, partitions, fsync))
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    start = time.time() + 3.0  # every process connected and waiting
    before = _log_bytes(data)
    procs = [ctx.Process(target=_iggy_producer, args=(port, topic, i % partitions, size, start, seconds, out))
             for i in range(producers)]
    for p in procs:
        p.start()
    lat = [x for _ in procs for x in out.get()]
    for p in procs:
        p.join()
    grew = _log_bytes(data) - before
    return _row(len(lat) * BATCH, size, seconds, grew, lat)


def _row(messages: int, size: int, seconds: float, log_bytes: int, lat: list[float]) -> dict:
    return {
        "msgs_s": messages / seconds,
        "payload_mb_s": messages * size / seconds / 1e6,
        "log_mb_s": log_bytes / seconds / 1e6,
        "p50_ms": _pct(lat, 0.5),
        "p99_ms": _pct(lat, 0.99),
    }


# --------------------------------------------------------------------------- kafka


def kafka(port: int, tcp: int, data: str, fsync: bool, size: int, seconds: float) -> dict:
    """confluent-kafka throughput, acks=all, linger 5 ms (no latency: produce() to delivery
    is dominated by the client's own queue when it is kept full)."""
    from confluent_kafka import Producer

    topic = f"k-{size}-{'fsync' if fsync else 'nofsync'}"
    asyncio.run(_create_topic(tcp, topic, 1, fsync, stream="kafka"))
    payload = os.urandom(size)
    acked = 0

    def delivered(err, msg) -> None:
        nonlocal acked
        acked += err is None

    p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "linger.ms": 5, "acks": "all"})
    before = _log_bytes(data)
    t0 = time.perf_counter()
    i = 0
    while time.perf_counter() - t0 < seconds:
        try:
            p.produce(topic, payload, partition=0, on_delivery=delivered)
            i += 1
        except BufferError:
            p.poll(0.005)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(60)
    elapsed = time.perf_counter() - t0
    return _row(acked, size, elapsed, _log_bytes(data) - before, [])


# --------------------------------------------------------------------------- latency


def latency(tcp: int, kafka_port: int, fsync: bool, sends: int) -> dict[str, list[float]]:
    """Closed loop, one client at a time, one 100-B message per request: seconds from
    sending to the acknowledgement, for apache-iggy send_messages and confluent-kafka
    produce+flush (acks=all, linger 0)."""
    from confluent_kafka import Producer

    name = "lat-fsync" if fsync else "lat-nofsync"

    async def iggy_loop() -> list[float]:
        from apache_iggy import IggyClient, SendMessage

        await _create_topic(tcp, name, 1, fsync)
        c = IggyClient(f"127.0.0.1:{tcp}")
        await c.connect()
        await c.login_user("iggy", "iggy")
        out = []
        for _ in range(sends):
            t0 = time.perf_counter()
            await c.send_messages("bench", name, 0, [SendMessage(b"x" * 100)])
            out.append(time.perf_counter() - t0)
        return out

    iggy_lat = asyncio.run(iggy_loop())
    asyncio.run(_create_topic(tcp, name, 1, fsync, stream="kafka"))
    p = Producer({"bootstrap.servers": f"127.0.0.1:{kafka_port}", "linger.ms": 0, "acks": "all"})
    p.produce(name, b"warm-up", partition=0)
    p.flush(30)
    kafka_lat = []
    for _ in range(sends):
        t0 = time.perf_counter()
        p.produce(name, b"x" * 100, partition=0)
        p.flush(30)
        kafka_lat.append(time.perf_counter() - t0)
    return {"apache-iggy send_messages (1 x 100 B)": iggy_lat, "confluent-kafka produce+flush (acks=all)": kafka_lat}


def _pct(lat: list[float], q: float) -> float:
    lat = sorted(lat)
    return lat[min(len(lat) - 1, int(len(lat) * q))] * 1e3 if lat else float("nan")


# --------------------------------------------------------------------------- main


def _print_disk(parent: str, total_mb: int) -> float:
    print("| chunk | fdatasync MB/s | syncs/s |\n|---:|---:|---:|")
    best = 0.0
    for chunk, mb_s, syncs in disk(parent, total_mb):
        print(f"| {chunk >> 10} KiB | {mb_s:,.0f} | {syncs:,.0f} |", flush=True)
        best = max(best, mb_s)
    print()
    return best


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        _serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--disk-mb", type=int, default=256)
    ap.add_argument("--latency-sends", type=int, default=1000)
    ap.add_argument("--only", default="disk,iggy,kafka,latency")
    ap.add_argument("--data-dir", default=None, help="parent of the server's data directory (default: a temp dir)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    parent = tempfile.mkdtemp(prefix="hw-fsync-", dir=args.data_dir)
    try:
        best = _print_disk(parent, args.disk_mb) if "disk" in args.only else 0.0
        rows = []
        for size in sizes:
            for fsync in (False, True):
                if "iggy" in args.only:
                    server = Server(parent)
                    try:
                        r = iggy(server.tcp, server.data, fsync, size, args.producers, args.partitions, args.seconds)
                    finally:
                        r_stats = server.stop()
                    plural = "s" if args.partitions > 1 else ""
                    rows.append((f"apache-iggy x{args.producers}, {args.partitions} partition{plural}", size, fsync, r, r_stats))
                if "kafka" in args.only:
                    server = Server(parent)
                    try:
                        r = kafka(server.kafka, server.tcp, server.data, fsync, size, args.seconds)
                    finally:
                        r_stats = server.stop()
                    rows.append(("confluent-kafka acks=all", size, fsync, r, r_stats))
        if "disk" in args.only:
            best = max(best, _print_disk(parent, args.disk_mb))  # again after: the disk's mood changes
        print("| client | size | enforce_fsync | msgs/s | payload MB/s | log MB/s | % of disk | ack p50 ms "
              "| ack p99 ms | syncs | acks per sync | sync busy |")
        print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, size, fsync, r, st in rows:
            per = st["acknowledged"] / st["rounds"] if st["rounds"] else 0.0
            share = f"{100 * r['log_mb_s'] / best:.0f} %" if best and fsync else "-"
            print(f"| {name} | {size} B | {'on' if fsync else 'off'} | {r['msgs_s']:,.0f} | {r['payload_mb_s']:,.1f} | "
                  f"{r['log_mb_s']:,.1f} | {share} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {st['rounds']:,} | "
                  f"{per:.1f} | {100 * st['sync_seconds'] / args.seconds:.0f} % |", flush=True)
        if "latency" in args.only:
            print("\n| client (closed loop, one request at a time) | enforce_fsync | ack p50 ms | ack p99 ms |")
            print("|---|---|---:|---:|")
            for fsync in (False, True):
                server = Server(parent)
                try:
                    lat = latency(server.tcp, server.kafka, fsync, args.latency_sends)
                finally:
                    server.stop()
                for name, values in lat.items():
                    print(f"| {name} | {'on' if fsync else 'off'} | {_pct(values, 0.5):.2f} | {_pct(values, 0.99):.2f} |",
                          flush=True)
    finally:
        shutil.rmtree(parent, ignore_errors=True)


if __name__ == "__main__":
    main()
