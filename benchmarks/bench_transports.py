"""Iggy's transports side by side: one ``headwater serve`` on loopback, apache-iggy over each.

Usage: ``python benchmarks/bench_transports.py [--pings 500] [--batches 200] [--batch 100] [--size 1024]``

Per transport (TCP, TLS over TCP with a throw-away CA, QUIC, WebSocket): the median
round trip of ``ping`` (sequential, µs), then ``send_messages`` of ``--batches`` batches of
``--batch`` messages of ``--size`` bytes to one partition, then ``poll_messages`` (count
``--batch``) until all are back; messages/s each way. Client and server share the
machine's cores, so figures are a floor and only comparable within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))

import apache_iggy as ig  # noqa: E402
from iggy_transports import Via, start_server  # noqa: E402


async def measure(via: Via, pings: int, batches: int, batch: int, size: int) -> dict:
    c = via.client()
    await c.connect()
    await c.login_user("iggy", "iggy")
    rtts = []
    for _ in range(pings):
        t = time.perf_counter()
        await c.ping()
        rtts.append(time.perf_counter() - t)
    stream = f"bench-{via.transport}"
    await c.create_stream(stream)
    await c.create_topic(stream, "t", 1)
    payload = b"x" * size
    messages = [ig.SendMessage(payload) for _ in range(batch)]
    t = time.perf_counter()
    for _ in range(batches):
        await c.send_messages(stream, "t", 0, messages)
    send_s = time.perf_counter() - t
    got, t = 0, time.perf_counter()
    while got < batches * batch:
        polled = await c.poll_messages(stream, "t", consumer=ig.Consumer.Single("bench"),
                                       polling_strategy=ig.PollingStrategy.Offset(got), count=batch,
                                       auto_commit=False, partition_id=0)
        got += len(polled)
    poll_s = time.perf_counter() - t
    n = batches * batch
    return {"ping_median_us": statistics.median(rtts) * 1e6, "send_msgs_per_s": n / send_s,
            "poll_msgs_per_s": n / poll_s}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pings", type=int, default=500)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--size", type=int, default=1024)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server, certs = start_server(Path(tmp), tls=True, env={"HEADWATER_WEBSOCKET_TLS_ENABLED": "false"})
        try:
            vias = [Via("tls-tcp", server, certs), Via("quic", server), Via("websocket", server)]
            (Path(tmp) / "plain").mkdir()
            plain, _ = start_server(Path(tmp) / "plain")
            try:
                vias.insert(0, Via("tcp", plain))
                print(f"{'transport':<10} {'ping median µs':>15} {'send msg/s':>12} {'poll msg/s':>12}")
                for via in vias:
                    r = asyncio.run(measure(via, args.pings, args.batches, args.batch, args.size))
                    print(f"{via.transport:<10} {r['ping_median_us']:>15.0f} {r['send_msgs_per_s']:>12.0f} "
                          f"{r['poll_msgs_per_s']:>12.0f}")
            finally:
                plain.stop()
        finally:
            server.stop()


if __name__ == "__main__":
    main()
