"""The Iggy send path without sockets: loop-thread CPU per SendMessages from admission to reply bytes.

Usage::

    python benchmarks/bench_send_path.py --server-python /work/wt/base/.venv/bin/python \\
        --server-python .venv/bin/python --rounds 7

Per ``--server-python`` (run in turn, ``--rounds`` times, alternating), a child process opens a
broker over a fresh data directory (real local storage, a uvloop event loop running, so the group
commit works as in the server; ``--fsync default``: the topic defaults, ``off``: no sync within the
run), and appends one ``--batch`` x ``--size`` B batch ``--requests`` times in chunks of ``--chunk``:
``Broker.append`` (verify every frame's XXH3, stamp, pwrite, index, group commit request) and the
reply bytes (the one-pack ``encode_send_reply_to_head`` where that venv has it, else the confirmation
and ``encode_reply_to_head``). It prints, per chunk, this thread's CPU time (``time.thread_time``) per
request: the minimum and the median over the chunks. What it leaves out: the socket receive and the
reply's send, the frame reader and the session checks (``bench_iggy_request.py`` measures the whole
request). Numbers only; nothing asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import asyncio, json, os, sys, time
import uvloop
from headwater.codec import batch as B
from headwater.codec.iggy import framing
from headwater.codec.iggy.codes import Command
from headwater.codec.iggy.commands import messages as w
from headwater.core.broker import Broker
from headwater.storage.api import open_engine

data, size, count, requests, chunk, fsync = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6]
one_pack = getattr(w, "encode_send_reply_to_head", None)

async def main():
    broker = Broker(open_engine(data))
    s = broker.create_stream("bench")
    options = {} if fsync == "default" else {"enforce_fsync": "false", "messages_required_to_save": str(1 << 24),
                                            "size_of_messages_required_to_save": str(1 << 30)}
    t = broker.create_topic(s.id, "send", 1, options)
    p = t.partitions[0]
    batch = bytearray(B.build_batch([B.Message(os.urandom(size)) for _ in range(count)]))
    head = framing.encode_request(Command.SEND_MESSAGES, b"")[:framing.HEADER_SIZE]
    times = []
    for n in range(requests // chunk + 2):
        t0 = time.thread_time()
        for _ in range(chunk):
            done = broker.append(p, batch)
            if one_pack is not None:
                reply = one_pack(head, 1, t.stream_id, t.id, p.id, done.base_offset)
            else:
                reply = framing.encode_reply_to_head(head, w.encode_send_confirmation(t.stream_id, t.id, p.id,
                                                                                      done.base_offset), op=1)
        t1 = time.thread_time()
        if n >= 2:  # (two warm-up chunks)
            times.append((t1 - t0) / chunk)
        await asyncio.sleep(0)  # the group commit's rounds settle between chunks
    broker.close()
    print(json.dumps(times))

uvloop.run(main())
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server-python", action="append", default=[])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--chunk", type=int, default=100)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--fsync", choices=["off", "default"], default="default")
    args = ap.parse_args()
    pythons = args.server_python or [sys.executable]
    results: dict[str, list[float]] = {p: [] for p in pythons}
    print("| round | python | min µs/req | median µs/req | load |")
    print("|---|---|---:|---:|---|")
    for r in range(args.rounds):
        for python in pythons:
            base = tempfile.mkdtemp(prefix="bench-send-path-")
            try:
                out = subprocess.run([python, "-c", CHILD, base, str(args.size), str(args.batch), str(args.requests),
                                      str(args.chunk), args.fsync], check=True, capture_output=True, text=True).stdout
            finally:
                shutil.rmtree(base, ignore_errors=True)
            times = json.loads(out.strip().splitlines()[-1])
            results[python] += times
            print(f"| {r + 1} | {python} | {min(times) * 1e6:.1f} | {statistics.median(times) * 1e6:.1f} | "
                  f"{os.getloadavg()[0]:.1f} |", flush=True)
    for python, times in results.items():
        print(f"all rounds: {python}: min {min(times) * 1e6:.1f} µs, median {statistics.median(times) * 1e6:.1f} µs "
              f"per request ({len(times)} chunks)")


if __name__ == "__main__":
    main()
