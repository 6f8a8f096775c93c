"""The whole admission path on one core: validate + stamp + append, then read back.

Usage: ``python benchmarks/bench_append.py [--dir DIR] [--mb 200] [--repeat 3]``

Producer-shaped (unstamped) batches of 1000 messages, 100 B and 1 KB
payloads, are built before timing. Each run opens a fresh partition through
the local engine and calls ``Partition.append`` (``verify_and_stamp`` then
``LocalPartitionLog.append``: one ``write``, the default sync policy) on a
private copy of every batch, then ``Partition.read`` of everything back with
checksum re-verification on (the default) and off. Prints a Markdown table:
messages/s and MB/s (10**6 bytes of batch bytes, headers included), best of
``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from headwater.codec.batch import Message, build_batch
from headwater.core.partition import Partition
from headwater.storage.api import SegmentPolicy
from headwater.storage.local.engine import LocalEngine

PER_BATCH = 1000


def producer_batches(size: int, total_bytes: int) -> list[bytes]:
    template = build_batch(
        Message(payload=os.urandom(size), id=i + 1, origin_timestamp=1_700_000_000_000_000 + i) for i in range(PER_BATCH)
    )
    return [template] * max(1, total_bytes // len(template))


def one_run(base: str, batches: list[bytes], validate: bool) -> tuple[float, float, float]:
    shutil.rmtree(base, ignore_errors=True)
    engine = LocalEngine(base)
    policy = SegmentPolicy(segment_size=256 << 20, validate_checksum=validate)
    p = Partition(0, 0, 0, 0, engine.open_partition(0, 0, 0, policy))
    copies = [bytearray(b) for b in batches]  # admission stamps in place: give it writable copies
    now = time.time_ns() // 1000
    t0 = time.perf_counter()
    for b in copies:
        p.append(b, now)
    p.log.sync()
    t_append = time.perf_counter() - t0
    t0 = time.perf_counter()
    offset, end, n = 0, p.high_watermark, 0
    while offset < end:
        out, got = p.read(offset, 100_000, 64 << 20)
        offset += got
        n += got
    t_read = time.perf_counter() - t0
    assert n == end
    engine.close()
    return t_append, t_read, float(end)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None)
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    root = args.dir or tempfile.mkdtemp(prefix="hw-bench-")
    print("| path | message size | msgs/s | MB/s |")
    print("|---|---:|---:|---:|")
    try:
        for size in (100, 1000):
            batches = producer_batches(size, args.mb * 1_000_000)
            total_bytes = sum(len(b) for b in batches)
            msgs = len(batches) * PER_BATCH
            one_run(os.path.join(root, "warm"), batches[:20], True)
            best_a = best_r = best_ru = float("inf")
            for _ in range(args.repeat):
                ta, tr, _ = one_run(os.path.join(root, "p"), batches, True)
                _, tru, _ = one_run(os.path.join(root, "p"), batches, False)
                best_a, best_r, best_ru = min(best_a, ta), min(best_r, tr), min(best_ru, tru)
            label = f"{size} B" if size < 1000 else "1 KB"
            for name, t in (("validate+stamp+append", best_a), ("read (re-verified)", best_r), ("read (unverified)", best_ru)):
                print(f"| {name} | {label} | {msgs / t:,.0f} | {total_bytes / t / 1e6:,.0f} |")
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
