"""The process CPU of one periodic group-commit round (storage/local/flusher.py), compiled workers against Python ones.

Usage::

    python benchmarks/bench_flusher_round.py --iterations 2000 --passes 3

One partition log (``LocalPartitionLog``, real files in a temporary directory, the
default policy: a round nobody waits for once 1024 messages are unsynced) takes
``--iterations`` appends of a stamped batch of ``--batch`` x ``--size`` B (1000 x
100 B: 148,256 bytes, one every ``--gap-ms`` on a uvloop loop, so the loop is idle
when a round's worker returns, as in the server), so a round starts at every second
append. Per pass and worker kind (``compiled``: ``_sync_c``, the round without the
GIL; ``python``: the pure-Python reference) it prints the process CPU (user +
system, every thread: the fdatasync's kernel work counts) per append and per round,
and the same loop with the sync thresholds at their maxima (no round) as ``none``;
the kinds alternate within a pass. Numbers only; nothing asserts a speed.
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
sys.path.insert(0, str(HERE.parent / "tests" / "unit" / "storage"))


def run(kind: str, base: str, iterations: int, batch: int, size: int, gap_s: float) -> tuple[float, int]:
    """CPU seconds of ``iterations`` appends, and the rounds they ran."""
    from storage_batches import stamped_batch

    from headwater.storage.api import SegmentPolicy
    from headwater.storage.local.flusher import Flusher
    from headwater.storage.local.log import LocalPartitionLog

    flusher = Flusher(native=(kind == "compiled")) if kind != "none" else Flusher()
    policy = SegmentPolicy() if kind != "none" else SegmentPolicy(messages_required_to_save=1 << 24,
                                                                  size_of_messages_required_to_save=1 << 30)
    directory = tempfile.mkdtemp(dir=base)
    log = LocalPartitionLog.open(directory, policy, flusher)
    batches = [stamped_batch(0, 1_000_000, batch, size)]

    async def go() -> float:
        cpu0 = time.process_time()
        for _ in range(iterations):
            b = bytearray(batches[0])
            b[8:16] = log.next_offset.to_bytes(8, "little")
            log.append(b)
            await asyncio.sleep(gap_s)
        while log._commit.round_in_flight and not log._commit._round_done:
            await asyncio.sleep(0.001)
        return time.process_time() - cpu0

    try:
        import uvloop

        cpu = uvloop.run(go())
    except ImportError:
        cpu = asyncio.run(go())
    log.close()
    flusher.close()
    shutil.rmtree(directory, ignore_errors=True)
    return cpu, flusher.rounds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--gap-ms", type=float, default=0.3)
    ap.add_argument("--passes", type=int, default=3)
    args = ap.parse_args()
    from headwater.storage.local import flusher as flusher_module

    kinds = ["none", "python"] + (["compiled"] if flusher_module._sync_c is not None else [])
    base = tempfile.mkdtemp(prefix="bench-flusher-round-")
    print("| pass | workers | appends | rounds | CPU µs per append | CPU µs per round over none | load |")
    print("|---|---|---:|---:|---:|---:|---|")
    try:
        for n in range(args.passes):
            order = kinds if n % 2 == 0 else [kinds[0], *reversed(kinds[1:])]
            none = None
            for kind in order:
                cpu, rounds = run(kind, base, args.iterations, args.batch, args.size, args.gap_ms / 1000)
                per_append = cpu / args.iterations * 1e6
                if kind == "none":
                    none = per_append
                over = "" if kind == "none" or not rounds else f"{(per_append - none) * args.iterations / rounds:.1f}"
                print(f"| {n + 1} | {kind} | {args.iterations} | {rounds} | {per_append:.1f} | {over} | "
                      f"{os.getloadavg()[0]:.1f} |", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
