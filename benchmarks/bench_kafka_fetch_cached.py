"""The cost of a small Kafka Fetch answered from the page cache, per request and per partition.

Usage::

    .venv/bin/python benchmarks/bench_kafka_fetch_cached.py --partitions 1 4 16
    PYTHONPATH=/work/main/src .venv/bin/python benchmarks/bench_kafka_fetch_cached.py   # main's code

In-process, no sockets: a broker on a temporary directory, one topic with ``--partitions``
partitions holding ``--batches`` small batches (10 records of 100 bytes) each, all in the page
cache (just written). A Fetch v12 from offset 0 of every partition (max_wait 0) is handed to
the Fetch handler ``--requests`` times on a running event loop, its result awaited when the
handler returns an awaitable (as the Kafka server's dispatch does); the response is encoded but
never decoded. Prints µs per request and µs per partition, the best of ``--repeats`` runs.
The conversion cache is warm after the first request (as for consumers following the tail),
so this times the handler's own per-partition path: the lookup, the read, the cache hit, the
encoding. Times are the process's CPU time (``time.process_time``: user + system), so other
processes sharing the cores change them less than they would wall time.

Numbers only; nothing here asserts a speed (docs/benchmarks.md keeps the results).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import inspect
import tempfile
import time

from headwater.codec.kafka import messages
from headwater.codec.kafka.convert import kafka_to_iggy
from headwater.codec.kafka.record_batch import Record, build_record_batch
from headwater.config import KafkaConfig
from headwater.core.broker import Broker
from headwater.frontends.kafka.handlers import fetch
from headwater.frontends.kafka.registry import Context
from headwater.frontends.kafka.server import KafkaFrontend
from headwater.storage.api import open_engine

FETCH = 1


def _request(name: str, partitions: int):
    mod = messages.request_module(FETCH, 12)
    parts = tuple(mod.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20, current_leader_epoch=-1,
                                     last_fetched_epoch=-1, log_start_offset=-1) for p in range(partitions))
    return messages.build(messages.request_class(FETCH, 12), replica_id=-1, max_wait=datetime.timedelta(0),
                          min_bytes=1, max_bytes=50 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                          topics=(mod.FetchTopic(topic=name, partitions=parts),), forgotten_topics_data=(), rack_id="")


async def _time(fe: KafkaFrontend, request, requests: int) -> float:
    handler = fetch.fetch
    closing = asyncio.Event()
    t0 = time.process_time()
    for _ in range(requests):
        out = handler(Context(fe.broker, fe, api_key=FETCH, version=12, closing=closing), request)
        if inspect.isawaitable(out):
            out = await out
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as data:
        broker = Broker(open_engine(data))
        try:
            fe = KafkaFrontend(broker, KafkaConfig())
            print(f"{'partitions':>10} {'us/request':>11} {'us/partition':>13}")
            for n in args.partitions:
                name = f"t{n}"
                topic = fe.names.create(name, n, {})
                for p in range(n):
                    for _ in range(args.batches):
                        records = [Record(i, i, None, b"v" * 100) for i in range(10)]
                        batch, _ = kafka_to_iggy(build_record_batch(records, base_timestamp=1_000), 1)
                        broker.append(topic.partitions[p], bytearray(batch), verified=True)
                request = _request(name, n)
                best = min(asyncio.run(_time(fe, request, args.requests)) for _ in range(args.repeats))
                per_request = best / args.requests * 1e6
                print(f"{n:>10} {per_request:>11.2f} {per_request / n:>13.2f}")
        finally:
            broker.close()


if __name__ == "__main__":
    main()
