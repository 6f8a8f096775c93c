"""Iggy's HTTP REST API end to end: a real ``headwater serve``, the official SDK over
``iggy+http://``, loopback.

Usage: ``python benchmarks/bench_http.py [--batches 200] [--batch 100] [--size 100]``

Sends ``--batches`` batches of ``--batch`` messages of ``--size`` bytes to one partition with
``send_messages`` (one POST each, base64 JSON), then polls them back with ``poll_messages``
(count = batch). Prints requests/s and messages/s per direction. Client and server share the
machine's cores, so the figures are a floor; compare with ``bench_e2e.py`` (binary TCP).
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
import urllib.request

from ports import free_port  # noqa: E402  (a sibling module: benchmarks run as scripts)


def start_server(data: str, http: int) -> subprocess.Popen:
    p = subprocess.Popen(
        [sys.executable, "-m", "headwater", "serve", "--data-dir", data, "--tcp-address", f"127.0.0.1:{free_port()}",
         "--kafka-address", f"127.0.0.1:{free_port()}", "--http-address", f"127.0.0.1:{http}",
         "--with-default-root-credentials", "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")},
    )
    for _ in range(400):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{http}/ping", timeout=1).read()
            return p
        except OSError:
            time.sleep(0.05)
    p.kill()
    raise RuntimeError("server did not start")


async def run(port: int, batches: int, batch: int, size: int) -> None:
    import apache_iggy as ig

    c = ig.IggyClient.from_connection_string(f"iggy+http://iggy:iggy@127.0.0.1:{port}")
    await c.connect()
    await c.login_user("iggy", "iggy")
    await c.create_stream("bench")
    await c.create_topic("bench", "t", 1)
    payload = os.urandom(size)
    t0 = time.perf_counter()
    for _ in range(batches):
        await c.send_messages("bench", "t", 0, [ig.SendMessage(payload) for _ in range(batch)])
    send_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    got, offset = 0, 0
    while got < batches * batch:
        ms = await c.poll_messages("bench", "t", consumer=ig.Consumer.Single("b"), polling_strategy=ig.PollingStrategy.Offset(offset),
                                   count=batch, auto_commit=False, partition_id=0)
        got += len(ms)
        offset += len(ms)
    poll_s = time.perf_counter() - t0
    n = batches * batch
    print(f"send: {batches / send_s:,.0f} requests/s, {n / send_s:,.0f} messages/s ({batch} x {size} B per request)")
    print(f"poll: {batches / poll_s:,.0f} requests/s, {n / poll_s:,.0f} messages/s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--size", type=int, default=100)
    args = ap.parse_args()
    data = tempfile.mkdtemp(prefix="hw-bench-http-")
    port = free_port()
    server = start_server(data, port)
    try:
        asyncio.run(run(port, args.batches, args.batch, args.size))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
