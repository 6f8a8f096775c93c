#!/usr/bin/env python3
"""Soak: a real ``headwater serve`` under mixed Iggy and Kafka load, killed and restarted, then audited.

    .venv/bin/python tools/soak.py [--minutes 10] [--data-dir DIR] [--seed N] [--restart-every 60]

Runs concurrently, on 127.0.0.1 only, until ``--minutes`` have passed:

- an apache-iggy ``IggyProducer`` sending to stream ``soak`` (topics ``a``, 3 partitions, and
  ``b``, 1 partition with 1 MiB segments), PartitionId and Balanced partitioning, batches of 1
  to 400 messages, payloads of 1 B to 16 KiB, message ids, user headers (string, int, bool,
  bytes, float values);
- an apache-iggy consumer-group consumer (``IggyConsumer``, group ``soak-igroup`` on ``a``);
- a kafka-python idempotent producer (acks=all, lz4) to Kafka topics ``soak-k1`` (2
  partitions) and ``soak-k2`` (1 partition, 1 MiB segments), keys and headers;
- a confluent-kafka consumer group of two members (``soak-kgroup``) on both Kafka topics,
  committing after processing;
- every ``--restart-every`` seconds (jittered), a SIGKILL (first, then 2 in 3) or a SIGTERM
  of the server and a restart on the same data directory; the clients reconnect and retry.

Then the producers stop, the consumers get ``--drain-seconds`` to catch up, the server is
stopped with SIGTERM, started again, and audited with fresh clients. The oracle (any
violation makes the exit status 1):

- every acknowledged message (topic, partition, offset and a hash of id, payload and
  headers, or of key, value and headers, taken at acknowledgement) reads back identical at
  its offset (apache-iggy for stream ``soak``, confluent-kafka with CRC checks for Kafka);
- every partition of every stream holds offsets 0..n-1 with no gap, and every stored batch
  passes ``codec.batch.verify`` when read raw (nothing undecodable); Kafka reads agree;
- whatever a consumer was handed at an offset is what the log holds there;
- committed group offsets (Kafka and Iggy) are not past the end of their partition;
- a SIGTERM exits 0 within 20 s, and every restart comes up within 30 s;
- the server log has no traceback, no "exception never retrieved", no error-level line;
- the server's resident set (``VmRSS`` sampled every 0.5 s) stays under ``--max-rss-mb``.

Duplicates from the idempotent producer (a value stored at two offsets) are reported as a
warning. ``--inject lose-ack`` / ``--inject alter-ack`` break the audit's input on purpose
(one read-back record dropped or altered) to show that the oracle catches it.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import logging
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections import defaultdict
from pathlib import Path

import xxhash

sys.path.insert(0, str(Path(__file__).resolve().parent))

import apache_iggy as ig  # noqa: E402
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka import KafkaProducer  # noqa: E402

from _harness import IggyConn, Server, log_problems  # noqa: E402
from headwater.codec import batch as batch_codec  # noqa: E402
from headwater.codec.errors import CodecError  # noqa: E402
from headwater.codec.iggy.codes import Command, ConsumerKind, PollingKind  # noqa: E402
from headwater.codec.iggy.commands import messages as wm  # noqa: E402
from headwater.codec.iggy.commands import offsets as wo  # noqa: E402
from headwater.codec.iggy.commands import streams as ws  # noqa: E402
from headwater.codec.iggy.primitives import Consumer as WireConsumer  # noqa: E402
from headwater.codec.iggy.primitives import PollingStrategy as WireStrategy  # noqa: E402

MIB = 1024 * 1024
STREAM = "soak"
IGGY_TOPICS = {"a": 3, "b": 1}
KAFKA_TOPICS = {"soak-k1": 2, "soak-k2": 1}
IGGY_GROUP = "soak-igroup"
KAFKA_GROUP = "soak-kgroup"

_quiet = logging.getLogger("soak.rdkafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


def iggy_hash(msg_id: int, payload: bytes, headers: dict | None) -> int:
    items = repr(sorted((headers or {}).items())).encode()
    return xxhash.xxh3_64_intdigest(b"%d|" % msg_id + payload + b"|" + items)


def kafka_hash(key: bytes | None, value: bytes | None, headers) -> int:
    return xxhash.xxh3_64_intdigest(repr((key, value, tuple(tuple(h) for h in (headers or ())))).encode())


# --------------------------------------------------------------------------- bookkeeping


class Ledger:
    """What was acknowledged and what consumers were handed, and every violation seen."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: dict[tuple, dict[int, int]] = defaultdict(dict)  # (proto, topic, partition) -> offset -> hash
        self.observed: dict[tuple, dict[int, int]] = defaultdict(dict)
        self.kafka_sent: set[int] = set()  # hashes of every Kafka record handed to the producer
        self.violations: dict[str, list[str]] = defaultdict(list)
        self.warnings: dict[str, list[str]] = defaultdict(list)
        self.counts: dict[str, int] = defaultdict(int)
        self.errors: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def violation(self, kind: str, detail: str) -> None:
        with self.lock:
            self.violations[kind].append(detail)

    def warning(self, kind: str, detail: str) -> None:
        with self.lock:
            self.warnings[kind].append(detail)

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counts[name] += n

    def error(self, source: str, exc: BaseException | str) -> None:
        text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        with self.lock:
            self.errors[source][text[:160]] += 1

    def ack(self, key: tuple, offset: int, h: int) -> None:
        with self.lock:
            old = self.acked[key].get(offset)
            if old is not None and old != h:
                self.violations["offset acknowledged twice"].append(f"{key} offset {offset}")
            self.acked[key][offset] = h

    def observe(self, key: tuple, offset: int, h: int) -> None:
        with self.lock:
            old = self.observed[key].get(offset)
            if old is not None and old != h:
                self.violations["consumer handed two different messages at one offset"].append(f"{key} offset {offset}")
            self.observed[key][offset] = h


# --------------------------------------------------------------------------- load: Iggy


def iggy_config(server: Server) -> ig.TcpConfig:
    return ig.TcpConfig(
        server_address=server.iggy_address,
        auto_login=ig.AutoLogin.username_password("iggy", "iggy"),
        reconnection=ig.TcpReconnectionConfig(enabled=True, max_retries=20,
                                              interval=datetime.timedelta(milliseconds=500)),
    )


def random_headers(rng: random.Random, seq: int) -> dict | None:
    if rng.random() < 0.3:
        return None
    h = {"seq": seq, "src": "iggy-soak"}
    if rng.random() < 0.5:
        h["flag"] = rng.random() < 0.5
    if rng.random() < 0.5:
        h["raw"] = rng.randbytes(rng.randint(1, 64))
    if rng.random() < 0.3:
        h["neg"] = -rng.randint(1, 2**40)
    if rng.random() < 0.3:
        h["ratio"] = rng.random()
    return h


async def iggy_producer(server: Server, ledger: Ledger, rng: random.Random, stop: threading.Event, rate: float) -> None:
    client = producer = None
    seq = 0
    failures = 0
    next_at = time.monotonic()
    while not stop.is_set():
        try:
            if producer is None:
                client = ig.IggyClient(iggy_config(server))
                await asyncio.wait_for(client.connect(), 30)
                producer = await asyncio.wait_for(client.producer(
                    STREAM, "a", mode=ig.DirectProducerConfig(batch_length=1000),
                    create_stream_if_not_exists=False, create_topic_if_not_exists=False), 30)
            topic = "a" if rng.random() < 0.7 else "b"
            partitions = IGGY_TOPICS[topic]
            if rng.random() < 0.5:
                partitioning, how = ig.Partitioning.balanced(), "balanced"
            else:
                partitioning, how = ig.Partitioning.partition_id(rng.randrange(partitions)), "partition_id"
            n = rng.randint(100, 400) if rng.random() < 0.05 else rng.randint(1, 20)
            msgs, hashes = [], []
            for j in range(n):
                seq += 1
                size = rng.randint(4096, 16384) if rng.random() < 0.03 else rng.randint(1, 1024)
                payload = b"I%d|" % seq + rng.randbytes(size)
                headers = random_headers(rng, seq)
                msg_id = (seq << 8) | 1
                msgs.append(ig.SendMessage(payload, user_headers=headers, id=msg_id))
                hashes.append(iggy_hash(msg_id, payload, headers))
            r = await asyncio.wait_for(producer.send_to(STREAM, topic, msgs, partitioning), 60)
            confirmations = r.confirmations
            if len(confirmations) != 1:
                ledger.violation("send acknowledged without exactly one confirmation",
                                 f"{topic} {how}: {len(confirmations)} confirmations for {n} messages")
            else:
                c = confirmations[0]
                for j, h in enumerate(hashes):
                    ledger.ack(("iggy", topic, c.partition_id), c.base_offset + j, h)
                ledger.count(f"iggy acked ({how})", n)
                ledger.count("iggy batches acked")
            failures = 0
            next_at = max(next_at + (n / rate if rate > 0 else 0), time.monotonic() - 1)
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        except Exception as e:  # noqa: BLE001 - the SDK raises RuntimeError, asyncio TimeoutError...
            ledger.error("iggy producer", e)
            ledger.count("iggy sends failed")
            failures += 1
            if failures >= 3 and producer is not None:
                producer = client = None  # start over with a fresh client
            await asyncio.sleep(0.3)


async def iggy_group_consumer(server: Server, ledger: Ledger, stop_all: threading.Event) -> None:
    while not stop_all.is_set():
        try:
            client = ig.IggyClient(iggy_config(server))
            await asyncio.wait_for(client.connect(), 30)
            consumer = await asyncio.wait_for(client.consumer_group(
                IGGY_GROUP, STREAM, "a", polling_strategy=ig.PollingStrategy.Next(), batch_length=200,
                auto_commit=ig.AutoCommit.IntervalOrWhen(datetime.timedelta(seconds=1),
                                                         ig.AutoCommitWhen.PollingMessages()),
                poll_interval=datetime.timedelta(milliseconds=20), init_retries=5,
                init_retry_interval=datetime.timedelta(milliseconds=500)), 60)
            ledger.count("iggy consumer (re)joined")
            async for m in consumer.iter_messages():
                uh = m.user_headers()
                ledger.observe(("iggy", "a", m.partition_id()), m.offset(),
                               iggy_hash(m.id(), m.payload(), uh.to_scalar_dict() if uh else None))
                ledger.count("iggy consumed")
                if stop_all.is_set():
                    return
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001
            ledger.error("iggy consumer", e)
        await asyncio.sleep(0.5)


# --------------------------------------------------------------------------- load: Kafka


def kafka_producer(server: Server, ledger: Ledger, seed: int, stop: threading.Event, rate: float) -> None:
    rng = random.Random(seed)
    producer = KafkaProducer(
        bootstrap_servers=server.kafka_address, enable_idempotence=True, acks="all",
        compression_type="lz4", linger_ms=5, retries=1_000_000, delivery_timeout_ms=120_000,
        request_timeout_ms=10_000, max_block_ms=10_000, reconnect_backoff_ms=100,
        reconnect_backoff_max_ms=1000, max_in_flight_requests_per_connection=5,
    )
    seq = 0
    next_at = time.monotonic()
    try:
        while not stop.is_set():
            topic = "soak-k1" if rng.random() < 0.7 else "soak-k2"
            seq += 1
            value = b"K%d|" % seq + rng.randbytes(rng.randint(4096, 16384) if rng.random() < 0.02 else rng.randint(0, 1024))
            key = b"key-%d" % rng.randrange(1000)
            headers = [("seq", b"%d" % seq)] + ([("trace", rng.randbytes(8))] if rng.random() < 0.5 else [])
            h = kafka_hash(key, value, headers)
            partition = rng.randrange(KAFKA_TOPICS[topic]) if rng.random() < 0.3 else None
            try:
                future = producer.send(topic, value=value, key=key, headers=headers, partition=partition)
            except Exception as e:  # noqa: BLE001 - KafkaTimeoutError when the buffer stays full
                ledger.error("kafka producer", e)
                ledger.count("kafka sends failed")
                time.sleep(0.2)
                continue
            with ledger.lock:
                ledger.kafka_sent.add(h)

            def ok(md, h=h):
                ledger.ack(("kafka", md.topic, md.partition), md.offset, h)
                ledger.count("kafka acked")

            def bad(e):
                ledger.error("kafka producer", e)
                ledger.count("kafka sends failed")

            future.add_callback(ok)
            future.add_errback(bad)
            next_at = max(next_at + (1 / rate if rate > 0 else 0), time.monotonic() - 1)
            time.sleep(max(0.0, next_at - time.monotonic()))
        producer.flush(timeout=60)
    except Exception as e:  # noqa: BLE001
        ledger.error("kafka producer", e)
    finally:
        try:
            producer.close(timeout=10)
        except Exception as e:  # noqa: BLE001
            ledger.error("kafka producer", e)


def kafka_group_member(server: Server, ledger: Ledger, name: str, stop: threading.Event) -> None:
    c = Consumer({
        "bootstrap.servers": server.kafka_address, "group.id": KAFKA_GROUP, "client.id": name,
        "auto.offset.reset": "earliest", "enable.auto.commit": False, "check.crcs": True,
        "session.timeout.ms": 10_000, "heartbeat.interval.ms": 1000, "reconnect.backoff.max.ms": 1000,
        "logger": _quiet, "error_cb": lambda e: ledger.count("kafka consumer client errors"),
    })
    c.subscribe(list(KAFKA_TOPICS))
    since_commit = 0
    last_commit = time.monotonic()
    try:
        while not stop.is_set():
            m = c.poll(0.2)
            if m is not None:
                err = m.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        ledger.error(f"kafka consumer {name}", str(err))
                        if err.code() in (KafkaError._BAD_MSG, KafkaError.CORRUPT_MESSAGE):
                            ledger.violation("undecodable record handed to a consumer", f"{name}: {err}")
                else:
                    ledger.observe(("kafka", m.topic(), m.partition()), m.offset(),
                                   kafka_hash(m.key(), m.value(), m.headers()))
                    ledger.count("kafka consumed")
                    since_commit += 1
            if since_commit and (since_commit >= 200 or time.monotonic() - last_commit > 2):
                try:
                    c.commit(asynchronous=False)
                    ledger.count("kafka commits")
                except Exception as e:  # noqa: BLE001 - rebalance in progress, coordinator gone...
                    ledger.error(f"kafka consumer {name} commit", e)
                since_commit = 0
                last_commit = time.monotonic()
    finally:
        try:
            c.close()
        except Exception as e:  # noqa: BLE001
            ledger.error(f"kafka consumer {name}", e)


# --------------------------------------------------------------------------- the server's life


class Life:
    """Restarts on a schedule and RSS sampling, in threads."""

    def __init__(self, server: Server, ledger: Ledger, rng: random.Random):
        self.server = server
        self.ledger = ledger
        self.rng = rng
        self.rss_max_kb = 0
        self.rss_by_life: list[int] = [0]
        self.restarts: list[dict] = []
        self.rss_timeline: list[tuple[float, float]] = []  # (seconds since start, MiB), every 5 s
        self.down = threading.Event()

    def sample_rss(self, stop: threading.Event) -> None:
        t0 = last = time.monotonic()
        while not stop.wait(0.5):
            kb = self.server.rss_kb()
            if kb:
                self.rss_max_kb = max(self.rss_max_kb, kb)
                self.rss_by_life[-1] = max(self.rss_by_life[-1], kb)
                if time.monotonic() - last >= 5:
                    last = time.monotonic()
                    self.rss_timeline.append((round(last - t0, 1), round(kb / 1024, 1)))

    def restart(self, sig: int) -> bool:
        name = signal.Signals(sig).name
        started = time.monotonic()
        self.down.set()
        if sig == signal.SIGKILL:
            self.server.kill()
            rc, in_time = -9, True
        else:
            rc, in_time = self.server.stop(sig, timeout=20)
            if not in_time:
                self.ledger.violation("SIGTERM did not stop the server within 20 s", f"restart {len(self.restarts) + 1}")
            elif rc != 0:
                self.ledger.violation("SIGTERM exit status not 0", f"restart {len(self.restarts) + 1}: exit {rc}")
        time.sleep(self.rng.uniform(0.0, 1.0))
        try:
            up_s = self.server.start(timeout=30)
        except RuntimeError as e:
            self.ledger.violation("server did not restart", str(e))
            return False
        finally:
            self.down.clear()
        self.rss_by_life.append(0)
        self.restarts.append({"signal": name, "exit": rc, "down_s": round(time.monotonic() - started, 2),
                              "start_s": round(up_s, 2)})
        return True

    def schedule(self, duration_s: float, every_s: float, stop: threading.Event, t0: float) -> None:
        k = int(duration_s // every_s) if every_s > 0 else 0
        slot = duration_s / (k + 1) if k else 0
        times = sorted(t0 + (i + 1) * slot + self.rng.uniform(-0.25, 0.25) * slot for i in range(k))
        for i, at in enumerate(times):
            if stop.wait(max(0.0, at - time.monotonic())):
                return
            sig = signal.SIGKILL if i == 0 or self.rng.random() < 2 / 3 else signal.SIGTERM
            if not self.restart(sig):
                stop.set()
                return


# --------------------------------------------------------------------------- setup and audit


async def setup(server: Server) -> None:
    c = ig.IggyClient(iggy_config(server))
    await c.connect()
    await c.create_stream(STREAM)
    await c.create_topic(STREAM, "a", IGGY_TOPICS["a"])
    await c.create_topic(STREAM, "b", IGGY_TOPICS["b"], segment_size=MIB)
    admin = AdminClient({"bootstrap.servers": server.kafka_address, "logger": _quiet})
    futures = admin.create_topics([NewTopic("soak-k1", KAFKA_TOPICS["soak-k1"], 1),
                                   NewTopic("soak-k2", KAFKA_TOPICS["soak-k2"], 1, config={"segment.bytes": str(MIB)})])
    for f in futures.values():
        f.result(20)


async def read_iggy(server: Server, ledger: Ledger) -> dict[tuple, dict[int, int]]:
    """Everything in stream ``soak`` through a fresh apache-iggy client, from offset 0."""
    c = ig.IggyClient(iggy_config(server))
    await asyncio.wait_for(c.connect(), 30)
    stored: dict[tuple, dict[int, int]] = {}
    for topic, partitions in IGGY_TOPICS.items():
        for p in range(partitions):
            out: dict[int, int] = {}
            offset = 0
            while True:
                got = await asyncio.wait_for(c.poll_messages(
                    STREAM, topic, consumer=ig.Consumer.Single("soak-audit"),
                    polling_strategy=ig.PollingStrategy.Offset(offset), count=1000, auto_commit=False,
                    partition_id=p), 60)
                if not got:
                    break
                for m in got:
                    uh = m.user_headers()
                    out[m.offset()] = iggy_hash(m.id(), m.payload(), uh.to_scalar_dict() if uh else None)
                offset = got[-1].offset() + 1
            stored[("iggy", topic, p)] = out
    return stored


def read_kafka(server: Server, ledger: Ledger) -> dict[tuple, dict[int, int]]:
    """Everything in the Kafka topics through a fresh confluent-kafka consumer, from offset 0."""
    c = Consumer({"bootstrap.servers": server.kafka_address, "group.id": "soak-audit",
                  "enable.auto.commit": False, "check.crcs": True, "logger": _quiet})
    stored: dict[tuple, dict[int, int]] = {}
    try:
        ends = {}
        for topic, partitions in KAFKA_TOPICS.items():
            for p in range(partitions):
                lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=20)
                ends[(topic, p)] = hi
                stored[("kafka", topic, p)] = {}
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for (t, p) in ends])
        remaining = {k for k, hi in ends.items() if hi > 0}
        deadline = time.monotonic() + 300
        while remaining and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error() is not None:
                ledger.violation("undecodable record in the final Kafka read", str(m.error()))
                continue
            k = (m.topic(), m.partition())
            stored[("kafka",) + k][m.offset()] = kafka_hash(m.key(), m.value(), m.headers())
            if m.offset() + 1 >= ends[k]:
                remaining.discard(k)
        if remaining:
            ledger.violation("final Kafka read did not reach the high watermark", str(sorted(remaining)))
        committed = Consumer({"bootstrap.servers": server.kafka_address, "group.id": KAFKA_GROUP,
                              "enable.auto.commit": False, "logger": _quiet})
        try:
            for tp in committed.committed([TopicPartition(t, p) for (t, p) in ends], timeout=20):
                if tp.offset > ends[(tp.topic, tp.partition)]:
                    ledger.violation("committed offset past the end of the partition",
                                     f"kafka {tp.topic}/{tp.partition}: {tp.offset} > {ends[(tp.topic, tp.partition)]}")
        finally:
            committed.close()
    finally:
        c.close()
    return stored


def read_raw(server: Server, ledger: Ledger) -> dict[tuple, int]:
    """Every partition of every stream through the raw protocol: each batch verified, offsets
    contiguous from 0. Returns (stream, topic, partition) -> messages."""
    counts: dict[tuple, int] = {}
    with IggyConn(server.iggy_address, timeout=60) as conn:
        conn.login()
        streams = ws.decode_streams(conn.ok(int(Command.GET_STREAMS)))
        for s in streams:
            details = ws.decode_stream_details(conn.ok(int(Command.GET_STREAM), ws.encode_get_stream(ws.GetStream(s.id))))
            for t in details.topics:
                for p in range(t.partitions_count):
                    expected = 0
                    while True:
                        body = wm.encode_poll_messages(wm.PollMessages(
                            WireConsumer(ConsumerKind.CONSUMER, "soak-raw"), s.id, t.id, p,
                            WireStrategy(PollingKind.OFFSET, expected), 5000, False))
                        kind, status, reply = conn.call(int(Command.POLL_MESSAGES), body)
                        where = f"{s.name}/{t.name}/{p} at {expected}"
                        if (kind, status) != ("reply", 0):
                            ledger.violation("raw poll refused", f"{where}: {kind} {status}")
                            break
                        _, batches = wm.decode_poll_reply(reply)
                        if not len(batches):
                            break
                        try:
                            for b in batch_codec.split_batches(batches):
                                h = batch_codec.verify(b, check_offset_deltas=False)
                                for f in batch_codec.iter_frames(b):
                                    offset = h.base_offset + f.offset_delta
                                    if offset != expected:
                                        ledger.violation("offsets not contiguous", f"{where}: found {offset}")
                                    expected = offset + 1
                        except CodecError as e:
                            ledger.violation("undecodable batch in the log", f"{where}: {e}")
                            break
                    counts[(s.name, t.name, p)] = expected
        # Iggy group offsets must not point past the end
        for p in range(IGGY_TOPICS["a"]):
            body = wo.encode_get_consumer_offset(wo.GetConsumerOffset(
                WireConsumer(ConsumerKind.CONSUMER_GROUP, IGGY_GROUP), STREAM, "a", p))
            kind, status, reply = conn.call(int(Command.GET_CONSUMER_OFFSET), body)
            if (kind, status) == ("reply", 0) and len(reply):
                info = wo.decode_consumer_offset(reply)
                if info.stored_offset > info.current_offset:
                    ledger.violation("committed offset past the end of the partition",
                                     f"iggy a/{p}: stored {info.stored_offset} > current {info.current_offset}")
    return counts


def audit(ledger: Ledger, stored: dict[tuple, dict[int, int]], raw_counts: dict[tuple, int]) -> dict:
    """Compare what was acknowledged and observed with what the log holds."""
    report = {}
    for key, offsets in stored.items():
        n = len(offsets)
        if sorted(offsets) != list(range(n)):
            ledger.violation("offsets not contiguous", f"{key}: {n} messages, max offset {max(offsets, default=-1)}")
        raw_key = ("kafka" if key[0] == "kafka" else STREAM, key[1], key[2])
        if raw_counts.get(raw_key) != n:
            ledger.violation("client read and raw read disagree", f"{key}: {n} vs {raw_counts.get(raw_key)}")
        acked = ledger.acked.get(key, {})
        lost = [o for o in acked if o not in offsets]
        altered = [o for o in acked if o in offsets and offsets[o] != acked[o]]
        if lost:
            ledger.violation("acknowledged message lost", f"{key}: {len(lost)} offsets, first {sorted(lost)[:5]}")
        if altered:
            ledger.violation("acknowledged message altered", f"{key}: {len(altered)} offsets, first {sorted(altered)[:5]}")
        observed = ledger.observed.get(key, {})
        beyond = [o for o in observed if o not in offsets]
        differ = [o for o in observed if o in offsets and offsets[o] != observed[o]]
        if beyond:
            ledger.violation("consumer was handed a message the log does not hold",
                             f"{key}: {len(beyond)} offsets, first {sorted(beyond)[:5]}")
        if differ:
            ledger.violation("consumer was handed a message the log holds differently",
                             f"{key}: {len(differ)} offsets, first {sorted(differ)[:5]}")
        report["/".join(map(str, key))] = {"stored": n, "acked": len(acked), "consumed": len(observed)}
    # idempotent Kafka producer: a value stored twice is a duplicate
    seen: dict[int, int] = defaultdict(int)
    for key, offsets in stored.items():
        if key[0] == "kafka":
            for h in offsets.values():
                seen[h] += 1
    dups = sum(c - 1 for h, c in seen.items() if c > 1 and h in ledger.kafka_sent)
    if dups:
        ledger.warning("idempotent producer duplicates", f"{dups} Kafka records stored more than once")
    return report


# --------------------------------------------------------------------------- main


def run(args) -> int:
    rng = random.Random(args.seed)
    ledger = Ledger()
    own_dir = args.data_dir is None
    base = Path(tempfile.mkdtemp(prefix="hw-soak-")) if own_dir else Path(args.data_dir)
    data_dir = base / "data"
    if data_dir.exists():
        shutil.rmtree(data_dir)
    log_path = base / "server.log"
    if log_path.exists():
        log_path.unlink()
    server = Server(data_dir, log_path=log_path)
    print(f"soak: seed={args.seed} minutes={args.minutes} data={data_dir} log={log_path}", flush=True)
    life = Life(server, ledger, rng)
    stop_rss = threading.Event()
    duration = args.minutes * 60
    load_s = 0.0
    report: dict = {}
    stop_load, stop_consumers, stop_restarts = threading.Event(), threading.Event(), threading.Event()
    try:
        server.start()
        threading.Thread(target=life.sample_rss, args=(stop_rss,), daemon=True).start()
        asyncio.run(setup(server))
        t0 = time.monotonic()
        threads = [threading.Thread(target=kafka_producer, name="kafka-producer", daemon=True,
                                    args=(server, ledger, rng.randrange(2**32), stop_load, args.rate / 2))]
        threads += [threading.Thread(target=kafka_group_member, name=f"kafka-member-{i}", daemon=True,
                                     args=(server, ledger, f"member-{i}", stop_consumers)) for i in range(2)]
        restarts = threading.Thread(target=life.schedule, name="restarts", daemon=True,
                                    args=(duration, args.restart_every, stop_restarts, t0))
        for t in threads:
            t.start()
        restarts.start()

        async def load() -> None:
            consumer = asyncio.create_task(iggy_group_consumer(server, ledger, stop_consumers))
            producer = asyncio.create_task(iggy_producer(server, ledger, random.Random(rng.randrange(2**32)),
                                                         stop_load, args.rate / 2))
            last = time.monotonic()
            while time.monotonic() - t0 < duration and not stop_restarts.is_set():
                await asyncio.sleep(0.5)
                if time.monotonic() - last >= args.progress_every:
                    last = time.monotonic()
                    print(f"  t={last - t0:5.0f}s restarts={len(life.restarts)} "
                          f"acked iggy={sum(v for k, v in ledger.counts.items() if k.startswith('iggy acked'))} "
                          f"kafka={ledger.counts['kafka acked']} consumed iggy={ledger.counts['iggy consumed']} "
                          f"kafka={ledger.counts['kafka consumed']} rss_max={life.rss_max_kb // 1024} MiB", flush=True)
            stop_restarts.set()
            stop_load.set()
            await asyncio.wait_for(producer, 120)
            # drain: consumers catch up with what was acknowledged on their topics, for a while
            deadline = time.monotonic() + args.drain_seconds
            while time.monotonic() < deadline:
                with ledger.lock:
                    behind = sum(1 for k, offs in ledger.acked.items()
                                 if (k[0] == "kafka" or k[1] == "a")
                                 and any(o not in ledger.observed.get(k, {}) for o in offs))
                if not behind:
                    break
                await asyncio.sleep(0.5)
            stop_consumers.set()
            consumer.cancel()
            try:
                await consumer
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass

        asyncio.run(load())
        restarts.join(120)
        for t in threads:
            t.join(180)
        load_s = time.monotonic() - t0

        # a clean stop and start, then the audit with fresh clients
        if server.alive():
            rc, in_time = server.stop(signal.SIGTERM, timeout=20)
            if not in_time or rc != 0:
                ledger.violation("SIGTERM exit status not 0", f"final stop: exit {rc}, in time {in_time}")
        server.start()
        life.rss_by_life.append(0)
        stored = asyncio.run(read_iggy(server, ledger))
        stored.update(read_kafka(server, ledger))
        raw_counts = read_raw(server, ledger)
        if args.inject:
            inject(args.inject, ledger, stored)
        report = audit(ledger, stored, raw_counts)
    except Exception as e:  # noqa: BLE001 - the run could not complete: that is a finding too
        traceback.print_exc()
        ledger.violation("the soak could not complete", f"{type(e).__name__}: {e}")
    finally:
        for event in (stop_rss, stop_load, stop_consumers, stop_restarts):
            event.set()
        if server.alive():
            rc, in_time = server.stop(signal.SIGTERM, timeout=20)
            if not in_time or rc != 0:
                ledger.violation("SIGTERM exit status not 0", f"end of run: exit {rc}, in time {in_time}")

    # progress: an oracle over nothing proves nothing
    iggy_acked = sum(v for k, v in ledger.counts.items() if k.startswith("iggy acked"))
    if not iggy_acked or not ledger.counts["kafka acked"]:
        ledger.violation("no progress", f"acked iggy={iggy_acked} kafka={ledger.counts['kafka acked']}")
    if args.minutes >= 1 and (not ledger.counts["iggy consumed"] or not ledger.counts["kafka consumed"]):
        ledger.violation("no progress", f"consumed iggy={ledger.counts['iggy consumed']} "
                                        f"kafka={ledger.counts['kafka consumed']}")
    problems = log_problems(server.log_text())
    for p in problems:
        ledger.violation("server log problem", p)
    if life.rss_max_kb > args.max_rss_mb * 1024:
        ledger.violation("server RSS over the bound", f"max {life.rss_max_kb // 1024} MiB > {args.max_rss_mb} MiB")

    summary = {
        "seed": args.seed, "minutes": args.minutes, "load_s": round(load_s, 1),
        "restarts": life.restarts, "rss_max_mib": round(life.rss_max_kb / 1024, 1),
        "rss_max_mib_per_life": [round(k / 1024, 1) for k in life.rss_by_life],
        "rss_timeline_mib": life.rss_timeline,
        "counts": dict(sorted(ledger.counts.items())), "partitions": report,
        "client_errors": {s: dict(sorted(e.items(), key=lambda kv: -kv[1])[:5]) for s, e in ledger.errors.items()},
        "warnings": {k: v[:5] for k, v in ledger.warnings.items()},
        "violations": {k: v[:5] for k, v in ledger.violations.items()},
        "data_dir": str(data_dir), "log": str(log_path),
    }
    print_summary(summary)
    if args.report:
        Path(args.report).write_text(json.dumps(summary, indent=2, default=str))
    ok = not ledger.violations
    if ok and own_dir and not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if ok else 1


def inject(fault: str, ledger: Ledger, stored: dict) -> None:
    """Break the audit's input on purpose, to show the oracle notices (see --inject)."""
    for key, acked in ledger.acked.items():
        if acked and key in stored:
            offset = max(acked)
            if fault == "lose-ack":
                stored[key].pop(offset, None)
            else:
                stored[key][offset] ^= 1
            print(f"soak: injected {fault} at {key} offset {offset}", flush=True)
            return


def print_summary(s: dict) -> None:
    print("\n=== soak summary ===")
    print(f"seed {s['seed']}, load {s['load_s']} s, restarts {len(s['restarts'])}: "
          + ", ".join(f"{r['signal']}(exit {r['exit']}, down {r['down_s']} s, start {r['start_s']} s)"
                      for r in s["restarts"]))
    print(f"server RSS max {s['rss_max_mib']} MiB; per life {s['rss_max_mib_per_life']}")
    print("counts: " + ", ".join(f"{k}={v}" for k, v in s["counts"].items()))
    for k, v in s["partitions"].items():
        print(f"  {k}: stored {v['stored']}, acked {v['acked']}, consumed {v['consumed']}")
    for source, errs in s["client_errors"].items():
        print(f"client errors ({source}): " + "; ".join(f"{n}x {e}" for e, n in errs.items()))
    for k, v in s["warnings"].items():
        print(f"WARNING {k}: {v}")
    if s["violations"]:
        for k, v in s["violations"].items():
            print(f"VIOLATION {k}:")
            for d in v:
                print("    " + d.replace("\n", "\n    "))
        print(f"soak: FAILED (data and log kept: {s['data_dir']}, {s['log']})")
    else:
        print("soak: OK")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0, help="how long the load runs (default 10)")
    ap.add_argument("--data-dir", help="working directory (data/ and server.log inside; default: a new temp dir, "
                                       "deleted after a passing run)")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: random, printed)")
    ap.add_argument("--restart-every", type=float, default=60.0,
                    help="seconds between server restarts, jittered (default 60; 0 = never)")
    ap.add_argument("--rate", type=float, default=400.0, help="target messages/s, half Iggy, half Kafka (default 400)")
    ap.add_argument("--drain-seconds", type=float, default=30.0,
                    help="how long consumers may catch up after the load (default 30)")
    ap.add_argument("--max-rss-mb", type=float, default=512.0, help="bound on the server's VmRSS (default 512)")
    ap.add_argument("--progress-every", type=float, default=30.0, help="seconds between progress lines")
    ap.add_argument("--report", help="also write the summary as JSON to this file")
    ap.add_argument("--keep", action="store_true", help="keep the temp data directory after a passing run")
    ap.add_argument("--inject", choices=["lose-ack", "alter-ack"], help="break the audit's input on purpose")
    args = ap.parse_args(argv)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(2**32)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
