"""How long a segment seal blocks the event loop (storage only, one process).

Usage: ``python benchmarks/bench_seal_stall.py [--segment-mb 1024] [--segments 2] [--data-dir DIR]``

A :class:`LocalPartitionLog` with the fsync-off benchmark topic's policy (sync
thresholds at their maxima: ``messages_required_to_save`` 16777216,
``size_of_messages_required_to_save`` 1 GiB, ``enforce_fsync`` off) takes
stamped batches of 1000 x 1000 B (about 1 MB) back to back on a running event
loop until ``--segments`` segments were sealed. A timer task on the same loop
sleeps 1 ms at a time and records the longest gap between its wake-ups; the
longest single ``append`` call and the one that sealed a segment are timed too.
Run it with another checkout's interpreter (``/work/main/.venv/bin/python
benchmarks/bench_seal_stall.py``) for a before/after on the same disk.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time

from headwater.codec.batch import Message, build_batch, stamp
from headwater.storage.api import SegmentPolicy
from headwater.storage.local.flusher import Flusher
from headwater.storage.local.log import LocalPartitionLog


async def run(directory: str, segment_bytes: int, segments: int) -> dict[str, float]:
    policy = SegmentPolicy(
        segment_size=segment_bytes,
        messages_required_to_save=16_777_216,
        size_of_messages_required_to_save=1 << 30,
    )
    flusher = Flusher()
    log = LocalPartitionLog.open(directory, policy, flusher)
    template = build_batch(Message(payload=os.urandom(1000), id=i + 1, origin_timestamp=1) for i in range(1000))
    gaps = {"max_tick_gap_ms": 0.0}
    stop = False

    async def ticker():
        last = time.perf_counter()
        while not stop:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps["max_tick_gap_ms"] = max(gaps["max_tick_gap_ms"], (now - last) * 1000)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    longest = seal_calls = 0.0
    t_start = time.perf_counter()
    while len(log.segments()) <= segments:
        batch = bytearray(template)
        stamp(batch, 0, log.next_offset, int(time.time() * 1_000_000))
        before = len(log.segments())
        t0 = time.perf_counter()
        log.append(batch)
        took = time.perf_counter() - t0
        longest = max(longest, took)
        if len(log.segments()) != before:
            seal_calls = max(seal_calls, took)
        await asyncio.sleep(0)  # let the ticker (and sync rounds) run between appends
    elapsed = time.perf_counter() - t_start
    barrier = log.pending_sync()
    if barrier is not None:
        await barrier
    stop = True
    await tick
    log.close()
    flusher.close()
    return {
        **gaps,
        "longest_append_ms": longest * 1000,
        "sealing_append_ms": seal_calls * 1000,
        "seconds": elapsed,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--segment-mb", type=int, default=1024)
    ap.add_argument("--segments", type=int, default=2, help="seals to measure")
    ap.add_argument("--data-dir", default=None, help="parent of the temporary partition directory")
    args = ap.parse_args()
    parent = tempfile.mkdtemp(prefix="hw-seal-", dir=args.data_dir)
    try:
        out = asyncio.run(run(os.path.join(parent, "p"), args.segment_mb << 20, args.segments))
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    print(" ".join(f"{k}={v:.1f}" for k, v in out.items()))


if __name__ == "__main__":
    main()
