"""Micro-benchmark of the Iggy batch codec (headwater.codec.batch) on one core.

Paths, each over one batch of N messages per call:

    build           build_batch: producer side, what the Kafka edge does per produce
    verify          verify: admission checks (every frame checksum, the batch checksum)
    verify+stamp    verify_and_stamp: admission, then stamp partition/offset/time in place
    stamp           stamp with the checksums verify returned (no frame walk)
    stamp(walk)     stamp without them (walks the frames to collect checksums)
    walk            iter_frames, touching every payload: the read/convert side
    positions       frame_positions: offsets of every frame (what a poll slice needs)
    slice           slice_batch of the middle half: a poll that starts mid-batch

Reports messages/s and MB/s (whole batch bytes, headers included, 10**6 B).
Each figure is the best of --repeat runs of at least --seconds each.

Each path runs on the compiled frame walks (``headwater.codec._batch_c``) and on
the pure-Python references (``--implementation`` picks; the "walks" column says
which). ``build`` and ``walk`` (``iter_frames``) have no compiled form: their
figures differ only by noise.

    .venv/bin/python benchmarks/bench_batch.py                   # table, both implementations
    .venv/bin/python benchmarks/bench_batch.py --implementation python
    .venv/bin/python benchmarks/bench_batch.py --profile verify+stamp
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import xxhash

from headwater.codec import batch as B


def make_batch(size: int, count: int) -> bytes:
    rng = os.urandom
    base = 1_700_000_000_000_000
    return B.build_batch(
        B.Message(rng(size), id=i + 1, origin_timestamp=base + i) for i in range(count)
    )


def paths(size: int, count: int):
    raw = make_batch(size, count)
    msgs = [B.Message(bytes(f.payload), f.id, f.timestamp_delta) for f in B.iter_frames(raw)]
    stamped = bytearray(raw)
    sums = B.verify_batch(raw).frame_checksums
    lo, hi = count // 4, count - count // 4

    def walk():
        total = 0
        for frame in B.iter_frames(raw):
            total += len(frame.payload)
        return total

    return raw, {
        "build": (lambda: B.build_batch(msgs), count),
        "verify": (lambda: B.verify(raw), count),
        "verify+stamp": (lambda: B.verify_and_stamp(stamped, 1, 1000, 1_700_000_000_000_000), count),
        "stamp": (lambda: B.stamp(stamped, 1, 1000, 1_700_000_000_000_000, sums), count),
        "stamp(walk)": (lambda: B.stamp(stamped, 1, 1000, 1_700_000_000_000_000), count),
        "walk": (walk, count),
        "positions": (lambda: B.frame_positions(raw), count),
        "slice": (lambda: B.slice_batch(raw, lo, hi), hi - lo),
    }


def measure(fn, seconds: float, repeat: int) -> float:
    """Best seconds per call."""
    calls = 1
    while True:  # calibrate: enough calls to fill `seconds`
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - t
        if elapsed >= seconds / 4:
            break
        calls *= 2
    calls = max(1, int(calls * seconds / elapsed))
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t) / calls)
    return best


def machine_note() -> str:
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()} "
        f"({platform.python_implementation()}), xxhash {xxhash.VERSION}, "
        f"{platform.system()} {platform.release()}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100,1000", help="payload sizes in bytes, comma-separated")
    parser.add_argument("--count", type=int, default=1000, help="messages per batch")
    parser.add_argument("--seconds", type=float, default=0.5, help="minimum time per run")
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure (best is kept)")
    parser.add_argument("--only", default="", help="comma-separated path names to run")
    parser.add_argument("--profile", metavar="PATH", help="profile one path (pyinstrument, else cProfile)")
    parser.add_argument(
        "--implementation",
        default="compiled,python",
        help="frame walks to measure, comma-separated: compiled (headwater.codec._batch_c), python",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    implementations = [i for i in args.implementation.split(",") if i]
    if "compiled" in implementations and B._compiled is None:
        print("compiled walks not available (not built, or HEADWATER_NO_EXTENSIONS=1): python only", file=sys.stderr)
        implementations.remove("compiled")

    if args.profile:
        B.use_implementation(implementations[0])
        _, table = paths(sizes[0], args.count)
        fn, _ = table[args.profile]
        return profile(fn, args.seconds * 4)

    only = set(filter(None, args.only.split(",")))
    print(f"<!-- {machine_note()} -->")
    print("| path | walks | message size | batch | msgs/s | MB/s | µs/batch |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for size in sizes:
        raw, table = paths(size, args.count)
        for name, (fn, n) in table.items():
            if only and name not in only:
                continue
            for implementation in implementations:
                B.use_implementation(implementation)
                per_call = measure(fn, args.seconds, args.repeat)
                batch_bytes = len(raw) if name != "slice" else len(fn())
                print(
                    f"| {name} | {implementation} | {size} B | {args.count} | {n / per_call:,.0f} | "
                    f"{batch_bytes / per_call / 1e6:,.0f} | {per_call * 1e6:,.1f} |",
                    flush=True,
                )
    return 0


def profile(fn, seconds: float) -> int:
    deadline = time.perf_counter() + seconds

    def loop():
        while time.perf_counter() < deadline:
            fn()

    try:
        from pyinstrument import Profiler
    except ImportError:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(loop)
        pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(12)
        return 0
    profiler = Profiler(interval=0.0001)
    profiler.start()
    loop()
    profiler.stop()
    print(profiler.output_text(unicode=True, color=False, show_all=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
