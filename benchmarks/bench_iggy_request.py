"""Iggy per request: the server CPU of one SendMessages (1000 x 100 B) and one PollMessages (count 1000).

Usage::

    python benchmarks/bench_iggy_request.py --server-python /work/wt/before6/.venv/bin/python \\
        --server-python .venv/bin/python --passes 3

Starts one ``headwater serve`` per ``--server-python`` (that venv's code, 127.0.0.1, default
config), creates a one-partition topic on each (``--fsync off``, the default: no fdatasync within
the run, as compare.py's fsync-off rows, so the flusher's rounds do not blur the request's own
cost; ``default``: the topic defaults), then pass after pass and
server after server runs, one request at a time (each reply read before the next request leaves):

- ``send``: our raw sender (a blocking socket, the frame built once), ``--requests`` SendMessages
  of ``--batch`` messages of ``--size`` B to partition 0;
- ``sdk-send``: the apache-iggy SDK's ``send_messages`` of ``--batch`` messages, ``--requests`` times;
- ``poll``: our raw serial poller (``bench_iggy_poll.RawPoller``), by offset, ``--count`` per poll;
- ``sdk-poll``: the SDK's ``poll_messages``, the same polls.

Per pass, client and server it prints the server's CPU time per request (``/proc/<pid>/stat``,
user + system: the kernel's socket work in the server's calls counts) in µs, and per million
messages in s, the part of it on the event loop's thread (``/proc/<pid>/task/<pid>/stat``; the
rest is the other threads': group-commit fdatasyncs, write-behind, executors), with the wall time per request, and the machine's page-cache write cost measured
just before (``machine_state.page_cache_cost``: on this VM new memory costs a host fault per page,
and that, not the server, decides much of the system CPU; ``--warm-memory GIB`` touches and releases
that much memory before each measurement). Numbers only; nothing asserts a speed.
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
sys.path.insert(0, str(HERE.parent / "tools"))


class RawSender:
    """SendMessages one at a time on a blocking socket, each reply read before the next request."""

    def __init__(self, address: str, size: int, batch: int):
        from _harness import IggyConn

        from headwater.codec import batch as batch_codec
        from headwater.codec.iggy.codes import Command
        from headwater.codec.iggy.commands import messages as wm
        from headwater.codec.iggy.primitives import Partitioning

        self.conn = IggyConn(address, timeout=60)
        self.conn.login()
        raw = batch_codec.build_batch([batch_codec.Message(os.urandom(size)) for _ in range(batch)])
        self.body = wm.encode_send_messages(wm.SendMessages("bench", "poll", Partitioning.by_partition(0), batch,
                                                            memoryview(raw)))
        self.code = int(Command.SEND_MESSAGES)

    def run(self, requests: int) -> None:
        conn = self.conn
        for _ in range(requests):
            conn.send(conn.frame(self.code, self.body))
            reply = conn.read()
            if reply[:2] != ("reply", 0):
                raise RuntimeError(f"SendMessages answered {reply[:2]}")


async def sdk_send(c, requests: int, size: int, batch: int) -> None:
    from apache_iggy import Partitioning, SendMessage

    messages = [SendMessage(os.urandom(size)) for _ in range(batch)]
    for _ in range(requests):
        await c.send_messages("bench", "poll", Partitioning.partition_id(0), messages)


async def _create(sdk, options: dict) -> None:
    await sdk.create_stream("bench")
    await sdk.create_topic("bench", "poll", 1, options=options)


FSYNC_OFF = {"enforce_fsync": "false", "messages_required_to_save": str(16 * 1024 * 1024),
             "size_of_messages_required_to_save": str(1 << 30)}  # (compare.py's fsync off)


def main() -> None:
    from bench_iggy_poll import RawPoller, sdk_client, sdk_pass
    from compare_servers import Headwater, cpu_seconds
    from machine_state import page_cache_cost, warm_memory

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server-python", action="append", default=[],
                    help="interpreter of a venv whose headwater to serve (repeat to compare; default this one)")
    ap.add_argument("--requests", type=int, default=1000, help="requests per pass and client (default 1000)")
    ap.add_argument("--size", type=int, default=100, help="payload bytes (default 100)")
    ap.add_argument("--batch", type=int, default=1000, help="messages per send and per poll (default 1000)")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--clients", default="send,sdk-send,poll,sdk-poll")
    ap.add_argument("--fsync", choices=["off", "default"], default="off")
    ap.add_argument("--warm-memory", type=float, default=0.0, metavar="GIB",
                    help="before each measurement touch and release this much memory (machine_state.py)")
    ap.add_argument("--topic-option", action="append", default=[], metavar="KEY=VALUE",
                    help="a topic option on top of --fsync's (repeat), e.g. preallocate_segments=true")
    args = ap.parse_args()
    pythons = args.server_python or [sys.executable]
    clients = [c for c in args.clients.split(",") if c]
    base = Path(tempfile.mkdtemp(prefix="bench-iggy-request-"))
    servers = []
    try:
        for i, python in enumerate(pythons):
            server = Headwater(base / str(i), os.path.abspath(python)).start()
            servers.append(server)
            loop = asyncio.new_event_loop()
            sdk = loop.run_until_complete(sdk_client(server.iggy))
            options = dict(FSYNC_OFF if args.fsync == "off" else {})
            options.update(option.split("=", 1) for option in args.topic_option)
            loop.run_until_complete(_create(sdk, options))
            raw = RawSender(server.iggy, args.size, args.batch)
            raw.run(args.requests)  # something to poll, and a warm server
            server.clients = (loop, sdk, raw, RawPoller(server.iggy, args.size, args.batch))
        print("| pass | server | client | requests | wall µs/req | server CPU µs/req | of it loop thread | server CPU s/M | "
              "page cache ms/MiB | load |")
        print("|---|---|---|---:|---:|---:|---:|---:|---:|---|")
        for n in range(args.passes):
            for i, server in enumerate(servers):
                loop, sdk, raw, poller = server.clients
                for kind in clients:
                    warm_memory(args.warm_memory)
                    probe = page_cache_cost(str(base))
                    main = f"{server.pid}/task/{server.pid}"  # the event loop's thread
                    s0, m0, t0 = server.cpu(), cpu_seconds(main), time.perf_counter()
                    if kind == "send":
                        raw.run(args.requests)
                        requests = args.requests
                    elif kind == "sdk-send":
                        loop.run_until_complete(sdk_send(sdk, args.requests, args.size, args.batch))
                        requests = args.requests
                    elif kind == "poll":
                        requests = poller.run(args.requests * args.batch)
                    else:
                        requests = loop.run_until_complete(sdk_pass(sdk, args.requests * args.batch, args.batch))
                    wall, scpu, mcpu = time.perf_counter() - t0, server.cpu() - s0, cpu_seconds(main) - m0
                    print(f"| {n + 1} | {pythons[i]} | {kind} | {requests} | {wall / requests * 1e6:.0f} | "
                          f"{scpu / requests * 1e6:.0f} | {mcpu / requests * 1e6:.0f} | "
                          f"{scpu / (requests * args.batch) * 1e6:.3f} | "
                          f"{probe:.2f} | {os.getloadavg()[0]:.1f} |", flush=True)
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
