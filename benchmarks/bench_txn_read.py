"""Iggy poll path with and without Kafka transactions: ``Broker.read_visible``.

Usage: ``python benchmarks/bench_txn_read.py [--batches 200] [--repeat 3]``

Fills one partition (real local engine in a temporary directory) with
``--batches`` batches of 50 messages of 100 B: ``plain`` appends them all
without transactions; ``txn`` makes every other batch a transaction of its own
(half of those committed, half aborted, each closed by a marker), so a quarter
of the batches and every marker are hidden. Then reads the partition from
offset 0 to the end 200 times, 1000 messages per call, as an Iggy poll does.
Prints visible messages/s, the best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

from headwater.codec.batch import Message, build_batch
from headwater.core.broker import Broker
from headwater.storage.api import open_engine


def fill(b: Broker, batches: int, txn: bool):
    t = b.create_topic(b.create_stream("s").id, "t", 1, {})
    p = t.partitions[0]
    key = (p.stream_id, p.topic_id, p.id)
    co = b.transactions
    pid = epoch = -1
    if txn:
        pid, epoch = co.init("bench", 60_000, b.bump_producer, b.producers.init_producer, b.write_marker,
                             b.commit_txn_offsets)
    for i in range(batches):
        data = bytearray(build_batch([Message(b"x" * 100)] * 50))
        if txn and i % 2 == 0:
            co.add_partitions("bench", pid, epoch, [key])
            b.append_transactional(t, p, data, pid, epoch, (i // 2) * 50)
            co.end("bench", pid, epoch, i % 4 == 0, b.write_marker, b.commit_txn_offsets)
        else:
            b.append(p, data)
    return p


def run(batches: int, txn: bool) -> tuple[float, int]:
    d = tempfile.mkdtemp()
    b = Broker(open_engine(d))
    try:
        p = fill(b, batches, txn)
        n = 0
        t0 = time.perf_counter()
        for _ in range(200):
            pos = 0
            while True:
                got, k, pos = b.read_visible(p, pos, 1000)
                n += k
                if not got:
                    break
        return time.perf_counter() - t0, n
    finally:
        b.close()
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print("| partition | visible messages read | msgs/s |\n|---|---|---|")
    for txn in (False, True):
        best = min(run(args.batches, txn) for _ in range(args.repeat))
        print(f"| {'txn' if txn else 'plain'} | {best[1]} | {best[1] / best[0]:,.0f} |")


if __name__ == "__main__":
    main()
