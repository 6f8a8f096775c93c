"""SIGKILL under a kafka-python idempotent producer: after each restart every acknowledged record
is at the offset its future reported, with the same key, value and headers, and the producer's
retries of the batches in flight when the server died are not written twice."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

from kafka_wire import KafkaWire
from test_kafka_wire import create_topic

TOPIC = "robust-crash"
PARTITIONS = 2


def test_sigkill_during_an_idempotent_produce_loop(fresh_server):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    w = KafkaWire(fresh_server.kafka_address)
    assert create_topic(w, TOPIC, partitions=PARTITIONS).error_code == 0
    w.close()

    rng = random.Random(20261129)
    acked: dict[tuple[int, int], tuple] = {}
    errors: list = []
    lock = threading.Lock()
    producer = KafkaProducer(
        bootstrap_servers=fresh_server.kafka_address, enable_idempotence=True, acks="all", linger_ms=2,
        max_in_flight_requests_per_connection=5, retries=2**31 - 1, request_timeout_ms=10_000,
        delivery_timeout_ms=120_000, reconnect_backoff_ms=50, reconnect_backoff_max_ms=300, retry_backoff_ms=50,
    )
    stop = threading.Event()

    def on_ok(record):
        def ok(md):
            with lock:
                assert (md.partition, md.offset) not in acked, "one offset acknowledged twice"
                acked[(md.partition, md.offset)] = record
        return ok

    def send_loop():
        i = 0
        while not stop.is_set():
            key = b"k%d" % i
            value = b"v%d:" % i + rng.randbytes(rng.randint(0, 400))
            headers = [("i", b"%d" % i), ("dup", b"a"), ("dup", b""), ("bin", bytes([i % 256, 0, 255]))]
            record = (key, value, headers)
            future = producer.send(TOPIC, key=key, value=value, headers=headers, partition=i % PARTITIONS)
            future.add_callback(on_ok(record)).add_errback(lambda e, i=i: errors.append((i, repr(e))))
            i += 1
            if i % 25 == 0:
                time.sleep(0.005)

    sender = threading.Thread(target=send_loop)
    sender.start()
    try:
        for _ in range(3):
            time.sleep(rng.uniform(0.6, 1.4))
            fresh_server.kill()
            time.sleep(0.3)
            fresh_server.start()
        time.sleep(1.0)
    finally:
        stop.set()
        sender.join(30)
    producer.flush(90)
    producer.close(10)
    assert not errors, errors[:5]
    assert len(acked) > 1000

    consumer = KafkaConsumer(bootstrap_servers=fresh_server.kafka_address, enable_auto_commit=False,
                             max_partition_fetch_bytes=4 << 20)
    stored: dict[tuple[int, int], tuple] = {}
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        # read until every partition's position reaches its end offset (not until an idle gap,
        # which a loaded machine can stretch past any fixed wait); the deadline only bounds a hang
        deadline = time.monotonic() + 120
        while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                for m in records:
                    stored[(m.partition, m.offset)] = (m.key, m.value, m.headers)
    finally:
        consumer.close()

    assert sum(ends.values()) == len(acked), f"{sum(ends.values())} records stored, {len(acked)} acknowledged"
    missing = [k for k in acked if k not in stored]
    altered = [k for k in acked if k in stored and stored[k] != acked[k]]
    assert not missing and not altered, (missing[:5], altered[:5])
    for p in range(PARTITIONS):
        offsets = sorted(o for (pp, o) in stored if pp == p)
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets not contiguous"
    dup = [k for k, n in Counter(v[0] for v in stored.values()).items() if n > 1]
    assert not dup, f"records written twice (retries after a restart): {dup[:5]}"
    assert "Traceback" not in fresh_server.log()
