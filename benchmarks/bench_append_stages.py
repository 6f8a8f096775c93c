"""One large produce request's stages on the append side, in one process (µs per stage).

Usage: ``python benchmarks/bench_append_stages.py [--messages 11240] [--size 100]
[--requests 300] [--gap-ms 5] [--policy off|default] [--write-behind-bytes N]``

What compare.py's raw Iggy generator sends at half its peak rate at the 5 ms tick
is one request of ~11,240 messages of 100 B (~1.8 MB with the 64-byte message
headers, 48 B frame header + 16 B id). This takes such a batch through the
stages the server runs for it, on a running uvloop/asyncio loop, with the
request spacing of the tick (``--gap-ms``), and times each with
``time.perf_counter_ns``:

* ``recv``: the body's bytes read from a connected socket (a Unix socket pair,
  loopback TCP with ``--tcp``) into a fresh ``bytearray`` with ``recv_into``,
  as the frame reader does; a sender thread writes them during the tick's idle
  time before, so this is the copy out of the socket (plus waiting for the
  rest when the socket buffer holds less than the request);
* ``verify+stamp``: ``Partition.append``'s ``batch_codec.verify_and_stamp``
  (every frame's XXH3, the batch checksum, the stamp);
* ``log.append``: ``LocalPartitionLog.append`` (the ``.log`` ``pwrite``, the
  sparse index entry, the sync policy's request, write-behind's hand-over);
* ``total``: the three together.

Each stage is timed twice: wall time and the loop thread's own CPU time
(``time.thread_time_ns``), which the other processes on a shared machine move
much less than the wall time (preemption is not in it; cache misses are).

Each stage's p50 / p99 / max over ``--requests`` requests is printed, with the
process CPU time per request. The policy is compare.py's fsync-off topic
(sync thresholds at their maxima) or the server default (an fdatasync round
every 1024 messages or 1 MiB, nobody waiting). Run it with another
checkout's interpreter for a before/after on the same disk.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import tempfile
import threading
import time

from headwater.codec.batch import Message, build_batch, verify_and_stamp
from headwater.storage.api import SegmentPolicy
from headwater.storage.local.flusher import Flusher
from headwater.storage.local.log import LocalPartitionLog


def pct(values: list[int], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] / 1000


async def run(args) -> dict[str, list[int]]:
    directory = tempfile.mkdtemp(prefix="hw-stages-", dir=args.data_dir)
    if args.policy == "off":
        policy = SegmentPolicy(messages_required_to_save=16_777_216, size_of_messages_required_to_save=1 << 30)
    else:
        policy = SegmentPolicy()
    flusher = Flusher(write_behind_cache_bytes=args.write_behind_bytes)
    log = LocalPartitionLog.open(directory, policy, flusher)
    template = bytes(build_batch([Message(payload=os.urandom(args.size), id=i + 1) for i in range(args.messages)]))
    n = len(template)
    a, b = socket.socketpair()
    if args.tcp:
        srv = socket.create_server(("127.0.0.1", 0))
        a = socket.create_connection(srv.getsockname())
        b, _ = srv.accept()
        srv.close()
    go = threading.Semaphore(0)

    def sender() -> None:
        for _ in range(args.requests):
            go.acquire()
            a.sendall(template)

    t = threading.Thread(target=sender, daemon=True)
    t.start()
    stages: dict[str, list[int]] = {}
    for name in ("recv", "verify+stamp", "log.append", "total"):
        stages[name], stages[name + " (thread CPU)"] = [], []
    clock, cpu_clock = time.perf_counter_ns, time.thread_time_ns
    cpu0 = time.process_time()
    for i in range(args.requests):
        go.release()  # the sender writes the request while the loop idles for the tick
        await asyncio.sleep(args.gap_ms / 1000)
        buf = bytearray(n)
        mv = memoryview(buf)
        got = 0
        t0, c0 = clock(), cpu_clock()
        while got < n:
            got += b.recv_into(mv[got:], n - got)
        t1, c1 = clock(), cpu_clock()
        verify_and_stamp(buf, 0, log.next_offset, time.time_ns() // 1000)
        t2, c2 = clock(), cpu_clock()
        log.append(buf)
        t3, c3 = clock(), cpu_clock()
        for name, wall, cpu_ns in (("recv", t1 - t0, c1 - c0), ("verify+stamp", t2 - t1, c2 - c1),
                                   ("log.append", t3 - t2, c3 - c2), ("total", t3 - t0, c3 - c0)):
            stages[name].append(wall)
            stages[name + " (thread CPU)"].append(cpu_ns)
    cpu = time.process_time() - cpu0
    t.join()
    a.close()
    b.close()
    log.close()
    flusher.close()
    shutil.rmtree(directory, ignore_errors=True)
    stages["cpu_us_per_request"] = [int(cpu / args.requests * 1e9)]
    return stages


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=11240)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--gap-ms", type=float, default=5.0)
    p.add_argument("--policy", choices=("off", "default"), default="off")
    p.add_argument("--write-behind-bytes", type=int, default=2 << 30)
    p.add_argument("--tcp", action="store_true", help="loopback TCP instead of a Unix socket pair")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--no-fdatasync", action="store_true",
                   help="os.fdatasync made a no-op (measures the rounds' own bookkeeping only; never durable)")
    args = p.parse_args()
    if args.no_fdatasync:
        os.fdatasync = lambda fd: None
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    stages = asyncio.run(run(args))
    print(f"# {args.messages} x {args.size} B per request, {args.requests} requests, policy {args.policy}, "
          f"load {os.getloadavg()[0]:.1f}")
    print("| stage | p50 µs | p99 µs | max µs |")
    print("|---|---:|---:|---:|")
    for name, v in stages.items():
        if name == "cpu_us_per_request":
            continue
        print(f"| {name} | {pct(v, 0.5):.0f} | {pct(v, 0.99):.0f} | {max(v) / 1000:.0f} |")
    print(f"process CPU per request: {stages['cpu_us_per_request'][0] / 1000:.0f} µs")


if __name__ == "__main__":
    main()
