"""apache-iggy SDK sends of one message each, by message size: the time a send takes and the server CPU.

Usage::

    python benchmarks/bench_send_sizes.py --server-python /work/main/.venv/bin/python \\
        --server-python /path/to/other/.venv/bin/python --passes 2

Starts one ``headwater serve`` per ``--server-python`` (that venv's code; default this one),
then per pass and server sends ``--sends`` messages of each of ``--sizes`` bytes, one message
per ``send_messages`` call, one call at a time, on one SDK connection (the servers alternate
within a pass). It prints wall ms per send and server CPU µs per send. Why it exists: the SDK
writes such a request in two writes with Nagle on, and a body of ~8-64 KiB used to wait for
Linux's delayed ACK (40 ms) before its second write went out (docs/benchmarks.md, "Sends of
8-64 KiB and the delayed ACK (session 11)"). Numbers only; nothing asserts a speed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


async def client(address: str, topic: str):
    from apache_iggy import IggyClient

    c = IggyClient(address)
    await c.connect()
    await c.login_user("iggy", "iggy")
    await c.create_stream(topic)
    await c.create_topic(topic, "t", 1)
    return c


async def sends(c, topic: str, size: int, count: int) -> None:
    from apache_iggy import SendMessage

    payload = os.urandom(size)
    for _ in range(count):
        await c.send_messages(topic, "t", 0, [SendMessage(payload)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server-python", action="append", default=[],
                    help="interpreter of a venv whose headwater to serve (repeat to compare; default this one)")
    ap.add_argument("--sizes", default="1000,8000,16000,30000,60000", help="message bytes, comma separated")
    ap.add_argument("--sends", type=int, default=50, help="sends per size and pass (default 50)")
    ap.add_argument("--passes", type=int, default=2)
    args = ap.parse_args()
    pythons = args.server_python or [sys.executable]
    sizes = [int(s) for s in args.sizes.split(",")]
    from compare_servers import Headwater

    base = Path(tempfile.mkdtemp(prefix="bench-send-sizes-"))
    servers, loop = [], asyncio.new_event_loop()
    try:
        for i, python in enumerate(pythons):
            server = Headwater(base / str(i), os.path.abspath(python)).start()
            servers.append((server, loop.run_until_complete(client(server.iggy, f"s{i}"))))
        print("| pass | server | size B | sends | wall ms/send | server CPU µs/send | load |")
        print("|---|---|---:|---:|---:|---:|---|")
        for n in range(args.passes):
            for i, (server, c) in enumerate(servers):
                for size in sizes:
                    s0, t0 = server.cpu(), time.perf_counter()
                    loop.run_until_complete(sends(c, f"s{i}", size, args.sends))
                    wall, scpu = time.perf_counter() - t0, server.cpu() - s0
                    print(f"| {n + 1} | {pythons[i]} | {size} | {args.sends} | {wall / args.sends * 1e3:.2f} | "
                          f"{scpu / args.sends * 1e6:.0f} | {os.getloadavg()[0]:.1f} |", flush=True)
    finally:
        for server, _ in servers:
            server.stop()
        loop.close()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
