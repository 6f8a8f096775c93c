"""Kafka conversion alone: RecordBatch v2 -> Iggy batch (produce) and back (fetch), per record.

Usage: ``python benchmarks/bench_kafka_convert.py [--records 10000] [--size 100] [--rounds 20]``

Times ``convert.kafka_to_iggy`` (CRC check included) and ``convert.iggy_to_kafka`` on one
batch of ``--records`` records of ``--size`` bytes, with the compiled loops
(``_convert_c``), their pure-Python twin (``_convert_py``) and the reference code alone,
for three record shapes: no key
and no headers (what the e2e benchmark sends), a 16-byte key, and a key plus two
headers (the compiled loop hands those records' headers to the Python mapping).
Prints the best of ``--rounds`` in µs per record.
"""

from __future__ import annotations

import argparse
import os
import time

from headwater.codec.batch import stamp
from headwater.codec.kafka import _convert_py, convert
from headwater.codec.kafka.record_batch import Record, build_record_batch

NOW_MS = 1_750_000_000_000


def best(fn, rounds: int) -> float:
    fn()  # warm up (the first large allocations are slower: glibc's mmap threshold adapts)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    n = args.records
    value = os.urandom(args.size)
    shapes = {
        "no key, no headers": lambda i: Record(i, i % 5, None, value),
        "16 B key": lambda i: Record(i, i % 5, b"key-%012d" % i, value),
        "key + 2 headers": lambda i: Record(i, i % 5, b"key-%012d" % i, value, [(b"trace", b"abc"), (b"n", b"1")]),
    }
    loops = {"compiled": convert._compiled, "pure-Python loops": _convert_py, "reference": None}
    saved = convert._loops
    print("| records | direction | " + " | ".join(f"{k} µs/record" for k in loops) + " |\n|---|---|---:|---:|---:|")
    for name, make in shapes.items():
        kafka = build_record_batch([make(i) for i in range(n)], base_timestamp=NOW_MS)
        iggy = bytearray(convert.kafka_to_iggy(kafka, NOW_MS)[0])
        stamp(iggy, 0, 0, NOW_MS * 1000)
        iggy = bytes(iggy)
        for direction, fn in (("Kafka -> Iggy", lambda: convert.kafka_to_iggy(kafka, NOW_MS)),
                              ("Iggy -> Kafka", lambda: convert.iggy_to_kafka(iggy))):
            cells = []
            for name_, impl in loops.items():
                if name_ == "compiled" and impl is None:
                    cells.append("not built")
                    continue
                convert._loops = impl
                cells.append(f"{best(fn, args.rounds) / n * 1e6:.3f}")
            convert._loops = saved
            print(f"| {name} | {direction} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
