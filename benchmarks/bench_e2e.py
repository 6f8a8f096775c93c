"""End to end: a real ``headwater serve`` process, real clients, loopback.

Usage: ``python benchmarks/bench_e2e.py [--messages 200000] [--size 100] [--only iggy,kafka]``

- iggy: apache-iggy ``send_messages`` of batches of 1000 messages to one
  partition, then ``poll_messages`` (count 1000) until everything is back.
- kafka: confluent-kafka (librdkafka) Producer (linger 5 ms, acks=all,
  idempotent by its defaults off) then a Consumer reading the topic from the
  beginning.

Prints messages/s and MB/s (payload bytes) per direction. The server runs
with its default settings in a temporary data directory; client and server
share the machine's cores, so figures are a floor.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from ports import free_port  # noqa: E402  (a sibling module: benchmarks run as scripts)


def start_server(data: str, tcp: int, kafka: int) -> subprocess.Popen:
    p = subprocess.Popen(
        [sys.executable, "-m", "headwater", "serve", "--data-dir", data, "--tcp-address", f"127.0.0.1:{tcp}",
         "--kafka-address", f"127.0.0.1:{kafka}", "--http-address", "127.0.0.1:0", "--quic-address", "127.0.0.1:0", "--websocket-address", "127.0.0.1:0", "--with-default-root-credentials", "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", tcp), 0.2).close()
            socket.create_connection(("127.0.0.1", kafka), 0.2).close()
            return p
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not start")


async def iggy(tcp: int, total: int, size: int) -> tuple[float, float]:
    from apache_iggy import Consumer, IggyClient, PollingStrategy, SendMessage

    c = IggyClient(f"127.0.0.1:{tcp}")
    await c.connect()
    await c.login_user("iggy", "iggy")
    await c.create_stream("bench")
    await c.create_topic("bench", "t", 1)
    payload = os.urandom(size)
    batch = [SendMessage(payload) for _ in range(1000)]
    t0 = time.perf_counter()
    for _ in range(total // 1000):
        await c.send_messages("bench", "t", 0, batch)
    t_send = time.perf_counter() - t0
    t0 = time.perf_counter()
    got, offset = 0, 0
    while got < total:
        msgs = await c.poll_messages(
            "bench", "t", consumer=Consumer.Single(1), polling_strategy=PollingStrategy.Offset(offset),
            count=1000, auto_commit=False, partition_id=0,
        )
        got += len(msgs)
        offset += len(msgs)
    return t_send, time.perf_counter() - t0


def kafka(port: int, total: int, size: int) -> tuple[float, float]:
    from confluent_kafka import Consumer, Producer

    payload = os.urandom(size)
    p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "linger.ms": 5, "acks": "all"})
    t0 = time.perf_counter()
    for i in range(total):
        while True:
            try:
                p.produce("bench-k", payload)
                break
            except BufferError:
                p.poll(0.01)
        if i % 10000 == 0:
            p.poll(0)
    p.flush(60)
    t_send = time.perf_counter() - t0
    c = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "bench", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.assign([__import__("confluent_kafka").TopicPartition("bench-k", 0, 0)])
    t0 = time.perf_counter()
    got = 0
    while got < total:
        for m in c.consume(10000, 1.0):
            if m.error() is None:
                got += 1
    t_read = time.perf_counter() - t0
    c.close()
    return t_send, t_read


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--only", default="iggy,kafka")
    args = ap.parse_args()
    data = tempfile.mkdtemp(prefix="hw-e2e-")
    tcp, kport = free_port(), free_port()
    server = start_server(os.path.join(data, "d"), tcp, kport)
    rows = []
    try:
        if "iggy" in args.only:
            s, r = asyncio.run(iggy(tcp, args.messages, args.size))
            rows += [("apache-iggy send (batches of 1000)", s), ("apache-iggy poll (count 1000)", r)]
        if "kafka" in args.only:
            s, r = kafka(kport, args.messages, args.size)
            rows += [("confluent-kafka produce (linger 5 ms)", s), ("confluent-kafka consume", r)]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        shutil.rmtree(data, ignore_errors=True)
    print(f"| path | message size | msgs/s | MB/s (payload) |\n|---|---:|---:|---:|")
    for name, t in rows:
        print(f"| {name} | {args.size} B | {args.messages / t:,.0f} | {args.messages * args.size / t / 1e6:,.1f} |")


if __name__ == "__main__":
    main()
