"""Client worker processes of ``compare.py``: one client library, one target, several phases.

Run as ``python benchmarks/compare_clients.py '<json spec>'`` by ``compare.py``, never by hand.
Each worker is its own process (so a client's GIL is never shared with another client or the
harness). It sets its client up, prints ``@@READY``, then answers each ``RUN <json phase>`` line on
stdin with one ``@@DONE <json result>`` line on stdout, until ``EXIT`` or end of input.

Spec: ``{"client", "size", "target": {...}, "deadline_s"}``. Phase: ``{"op": "produce" |
"consume" | "latency", "duration_s", "max_messages", "expect", "rate"}``.

- produce: send as fast as the client goes, for ``duration_s`` or ``max_messages``, whichever
  comes first, and wait for every acknowledgement. Result ``count`` = messages acknowledged.
- consume: read back ``expect`` messages from the start (bounded by ``deadline_s``).
- consume_raw (the raw Iggy generator only): the same with our raw poller: PollMessages by
  offset, ``RAW_POLL_COUNT`` per poll, ``RAW_POLL_WINDOW`` polls in flight, each reply read
  into one preallocated buffer (``recv_into``); what the server can serve when the client
  costs little.
- latency: a paced producer at ``rate`` msg/s for ``duration_s``: every 5 ms tick it sends the
  messages due; it records send->ack either per message (``unit`` "message": confluent-kafka
  and nats-py, the send time travels in the first 8 payload bytes or in a callback) or per
  batch (``unit`` "batch": the raw Iggy generator and redis-py pipelines, one request per tick).
  The raw Iggy generator also takes ``tick_s`` (another tick: Iggy has no linger, so the
  batch a client sends per request is its own choice; its ``unit`` then names the tick).

Every loop is bounded in count and in time. Everything connects to 127.0.0.1 only.
Result: ``{"count", "bytes", "t0", "t1", "cpu_s"}`` (``time.monotonic``, shared by every process of
the machine; ``cpu_s``: this process's CPU seconds during the phase, ``time.process_time``, all its
threads) plus ``lat_us`` percentiles for latency, or ``{"error": text}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tools"))

TICK_S = 0.005
"""The paced producers' schedule: every 5 ms (the Kafka producers' linger.ms) send what is due."""
SDK_BATCH = 1000
"""Messages per SendMessages request of the SDK producer and of the raw generator, and the poll count."""
RAW_WINDOW = 8
"""SendMessages requests the raw generator keeps in flight on its connection."""
RAW_POLL_COUNT = 10000
RAW_POLL_WINDOW = 2
"""The raw poller's PollMessages count and the polls it keeps in flight (by offset, no commit)."""
REDIS_PIPELINE = 1000
KAFKA_PRODUCER = {"linger.ms": 5, "batch.num.messages": 10000, "acks": "all"}
"""The confluent-kafka producer settings of every Kafka-protocol run (Headwater and the mock)."""
CONFLUENT_CONSUMER = {"max.partition.fetch.bytes": 8 << 20, "queued.min.messages": 1_000_000,
                      "fetch.queue.backoff.ms": 10}
"""confluent-kafka's consumer settings, as a user chasing throughput sets them (see docs/benchmarks.md,
"Kafka consume path"): with librdkafka's defaults (2.x) the prefetch queue holds
``queued.min.messages`` 100000 records and, each time a fetch response leaves more than that
queued, the partition's next fetch waits ``fetch.queue.backoff.ms`` (1000 ms) even once the
application has drained it, so a fast reader idles most of each second (~200k msg/s, consumer and
server both mostly idle). 8 MiB per-partition fetches are what the kafka-python and aiokafka runs use
(``PY_KAFKA_CONSUMER``); every record still travels and is converted by the server."""
PY_KAFKA_CONSUMER = {"enable_auto_commit": False, "auto_offset_reset": "earliest",
                     "max_partition_fetch_bytes": 8 << 20}
"""kafka-python's and aiokafka's consumer settings (the same names in both)."""
_NS = struct.Struct("<Q")
_SIZE = struct.Struct("<I")
_POLL_PREFIX = struct.Struct("<IQI")


class Budget(Exception):
    """A phase ran past the worker's deadline."""


def percentiles(samples_us: list[float]) -> dict:
    if not samples_us:
        return {}
    s = sorted(samples_us)

    def q(p: float) -> float:
        return round(s[min(len(s) - 1, int(p * len(s)))], 1)

    return {"p50": q(0.50), "p99": q(0.99), "p999": q(0.999), "n": len(s)}


class Pacer:
    """The schedule of a paced producer (every ``tick_s``, default ``TICK_S``): how many
    messages are due at each tick."""

    def __init__(self, rate: float, duration_s: float, tick_s: float = TICK_S):
        self.per_tick = max(1, round(rate * tick_s))
        self.tick = self.per_tick / rate if rate > 0 else tick_s
        self.ticks = max(1, int(duration_s / self.tick))

    def wait(self, start: float, i: int) -> None:
        delay = start + i * self.tick - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    async def await_tick(self, start: float, i: int) -> None:
        delay = start + i * self.tick - time.monotonic()
        await asyncio.sleep(max(0.0, delay))


def latency_result(size: int, pacer: Pacer, t0: float, lat: list[float], unit: str) -> dict:
    """A latency phase's result; raises unless every paced send (message or batch) was acknowledged."""
    n = pacer.ticks * pacer.per_tick
    want = n if unit == "message" else pacer.ticks
    if len(lat) != want:
        raise RuntimeError(f"{len(lat)} of {want} paced sends acknowledged")
    return {"count": n, "bytes": n * size, "t0": t0, "t1": time.monotonic(), "lat_us": percentiles(lat),
            "unit": unit}


class ClientTrace:
    """Per-request timestamps of a paced latency phase (``"trace": true`` in the phase, for
    ``bench_ack_latency.py``): when each send was due, started and returned, when its ack was
    read, and this process's cyclic GC collections meanwhile (all ``time.monotonic_ns``, the
    machine-wide clock the server's probe uses too)."""

    def __init__(self) -> None:
        import gc

        self.sent: list[int] = []
        self.gc: list[tuple] = []
        self._gc_start = 0
        self._gc = gc
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        now = time.monotonic_ns()
        if phase == "start":
            self._gc_start = now
        else:
            self.gc.append((self._gc_start, now - self._gc_start, info.get("generation")))

    def result(self, start: float, tick: float, sends: list[int], lat_us: list[float]) -> dict:
        self._gc.callbacks.remove(self._on_gc)
        due = [int((start + i * tick) * 1e9) for i in range(len(sends))]
        return {"due": due, "send": sends, "sent": self.sent,
                "ack": [s + int(us * 1000) for s, us in zip(sends, lat_us)], "gc": self.gc}


def stamped(payload: bytes) -> bytes:
    """The payload with its first 8 bytes replaced by the send time (ns, monotonic clock)."""
    return _NS.pack(time.monotonic_ns()) + payload[8:]


def sent_ns(value: bytes) -> int:
    return _NS.unpack_from(value, 0)[0]


# --------------------------------------------------------------------------- Headwater: Iggy


class IggyRaw:
    """Our load generator: prebuilt batches (``headwater.codec.batch``) in SendMessages frames
    (``headwater.codec.iggy``) over a blocking socket, ``RAW_WINDOW`` requests in flight."""

    def __init__(self, spec: dict):
        from _harness import IggyConn

        from headwater.codec import batch as batch_codec
        from headwater.codec.iggy.codes import Command
        from headwater.codec.iggy.commands import messages as wm
        from headwater.codec.iggy.primitives import Partitioning

        t = spec["target"]
        self.spec, self.t = spec, t
        self.conn = IggyConn(t["iggy"], timeout=30)
        self.conn.login()
        self.code = int(Command.SEND_MESSAGES)
        self._batch_codec, self._wm = batch_codec, wm
        self._ids = (t["stream"], t["topic"])
        self._partitioning = Partitioning.by_partition(0)
        self.payload = os.urandom(spec["size"])
        self.poller = None
        if "consume" in spec.get("phases", ()):
            self.loop = asyncio.new_event_loop()
            self.poller = self.loop.run_until_complete(iggy_login(t))

    def body(self, count: int, payload: bytes | None = None) -> bytes:
        batch = self._batch_codec.build_batch([self._batch_codec.Message(payload or self.payload)] * count)
        return self._wm.encode_send_messages(self._wm.SendMessages(
            self._ids[0], self._ids[1], self._partitioning, count, memoryview(batch)))

    def _ack(self) -> None:
        kind, status, _ = self.conn.read()
        if (kind, status) != ("reply", 0):
            raise RuntimeError(f"SendMessages answered {kind} {status}")

    def produce(self, ph: dict) -> dict:
        body = self.body(SDK_BATCH)
        end = time.monotonic() + ph["duration_s"]
        sent = acked = 0
        t0 = time.monotonic()
        while sent < ph["max_messages"] and time.monotonic() < end:
            self.conn.send(self.conn.frame(self.code, body))
            sent += SDK_BATCH
            if sent - acked >= RAW_WINDOW * SDK_BATCH:
                self._ack()
                acked += SDK_BATCH
        while acked < sent:
            self._ack()
            acked += SDK_BATCH
        return {"count": acked, "bytes": acked * self.spec["size"], "t0": t0, "t1": time.monotonic()}

    def latency(self, ph: dict) -> dict:
        tick_s = ph.get("tick_s", TICK_S)
        pacer = Pacer(ph["rate"], ph["duration_s"], tick_s)
        body = self.body(pacer.per_tick)
        sends: list[int] = []
        lat: list[float] = []
        done = threading.Event()
        failure: list[str] = []

        def reader() -> None:
            try:
                for i in range(pacer.ticks):
                    self._ack()
                    lat.append((time.monotonic_ns() - sends[i]) / 1000)
            except Exception as e:  # reported in the result
                failure.append(f"{type(e).__name__}: {e}")
            done.set()

        trace = ClientTrace() if ph.get("trace") else None
        threading.Thread(target=reader, daemon=True).start()
        start = t0 = time.monotonic()
        for i in range(pacer.ticks):
            pacer.wait(start, i)
            frame = self.conn.frame(self.code, body)
            sends.append(time.monotonic_ns())
            self.conn.send(frame)
            if trace is not None:
                trace.sent.append(time.monotonic_ns())
        done.wait(ph["duration_s"] + 30)
        if failure:
            raise RuntimeError(failure[0])
        unit = f"batch of {pacer.per_tick}" + ("" if tick_s == TICK_S else f" every {tick_s * 1000:g} ms")
        result = latency_result(self.spec["size"], pacer, t0, lat, unit)
        if trace is not None:
            result["trace"] = trace.result(start, pacer.tick, sends, lat)
        return result

    def consume_raw(self, ph: dict) -> dict:
        """``expect`` messages polled from offset 0 by our raw poller (see the module doc);
        counts the messages each reply's poll prefix announces."""
        from headwater.codec.iggy import framing
        from headwater.codec.iggy.codes import Command, ConsumerKind, PollingKind
        from headwater.codec.iggy.primitives import Consumer, PollingStrategy

        wm, conn, expect = self._wm, self.conn, ph["expect"]
        code, consumer = int(Command.POLL_MESSAGES), Consumer(ConsumerKind.CONSUMER, 1)
        buf = bytearray(framing.HEADER_SIZE + (self.spec["size"] + 128) * RAW_POLL_COUNT + (1 << 20))
        view = memoryview(buf)

        def ask(offset: int) -> None:
            conn.send(conn.frame(code, wm.encode_poll_messages(wm.PollMessages(
                consumer, self._ids[0], self._ids[1], 0, PollingStrategy(PollingKind.OFFSET, offset),
                RAW_POLL_COUNT, False))))

        def answer() -> int:  # the reply's message count; its bytes land in ``buf``
            got = 0
            while got < framing.HEADER_SIZE or got < _SIZE.unpack_from(buf, framing.SIZE_OFFSET)[0]:
                want = framing.HEADER_SIZE if got < framing.HEADER_SIZE else \
                    _SIZE.unpack_from(buf, framing.SIZE_OFFSET)[0]
                n = conn.sock.recv_into(view[got:want])
                if not n:
                    raise RuntimeError("connection closed mid-reply")
                got += n
            status = _SIZE.unpack_from(buf, framing.STATUS_OFFSET)[0]
            if status or got < framing.HEADER_SIZE + wm.POLL_PREFIX_SIZE:
                raise RuntimeError(f"PollMessages answered status {status}")
            return _POLL_PREFIX.unpack_from(buf, framing.HEADER_SIZE)[2]  # partition, current offset, count

        asked = got = 0
        end = time.monotonic() + ph["deadline_s"]
        t0 = time.monotonic()
        while asked < expect and asked < RAW_POLL_WINDOW * RAW_POLL_COUNT:
            ask(asked)
            asked += RAW_POLL_COUNT
        in_flight = -(-asked // RAW_POLL_COUNT)
        while in_flight:
            n = answer()
            got += n
            in_flight -= 1
            if asked < expect and time.monotonic() < end:
                ask(asked)
                asked += RAW_POLL_COUNT
                in_flight += 1
        return {"count": got, "bytes": got * self.spec["size"], "t0": t0, "t1": time.monotonic()}

    def consume(self, ph: dict) -> dict:
        if self.poller is None:  # logged in before the measured window (login hashes a password)
            self.loop = asyncio.new_event_loop()
            self.poller = self.loop.run_until_complete(iggy_login(self.t))
        return self.loop.run_until_complete(iggy_poll(self.poller, self.t, ph, self.spec["size"]))


async def iggy_login(t: dict):
    from apache_iggy import IggyClient

    c = IggyClient(t["iggy"])
    await c.connect()
    await c.login_user("iggy", "iggy")
    return c


async def iggy_poll(c, t: dict, ph: dict, size: int) -> dict:
    """The apache-iggy poll consumer ``c``: PollMessages by offset, ``SDK_BATCH`` per poll."""
    from apache_iggy import Consumer, PollingStrategy

    got = 0
    end = time.monotonic() + ph["deadline_s"]
    t0 = time.monotonic()
    while got < ph["expect"] and time.monotonic() < end:
        msgs = await c.poll_messages(t["stream"], t["topic"], consumer=Consumer.Single(1),
                                     polling_strategy=PollingStrategy.Offset(got), count=SDK_BATCH,
                                     auto_commit=False, partition_id=0)
        got += len(msgs)
    return {"count": got, "bytes": got * size, "t0": t0, "t1": time.monotonic()}


class IggySdk:
    """apache-iggy ``send_messages`` of ``SDK_BATCH`` messages per call, one call at a time."""

    def __init__(self, spec: dict):
        self.spec, self.t = spec, spec["target"]
        self.loop = asyncio.new_event_loop()
        self.client = self.loop.run_until_complete(iggy_login(self.t))

    def produce(self, ph: dict) -> dict:
        return self.loop.run_until_complete(self._produce(ph))

    async def _produce(self, ph: dict) -> dict:
        from apache_iggy import SendMessage

        batch = [SendMessage(os.urandom(self.spec["size"])) for _ in range(SDK_BATCH)]
        end = time.monotonic() + ph["duration_s"]
        sent = 0
        t0 = time.monotonic()
        while sent < ph["max_messages"] and time.monotonic() < end:
            await self.client.send_messages(self.t["stream"], self.t["topic"], 0, batch)
            sent += SDK_BATCH
        return {"count": sent, "bytes": sent * self.spec["size"], "t0": t0, "t1": time.monotonic()}

    def consume(self, ph: dict) -> dict:
        return self.loop.run_until_complete(iggy_poll(self.client, self.t, ph, self.spec["size"]))


# --------------------------------------------------------------------------- Kafka protocol


class Confluent:
    """confluent-kafka (librdkafka) producer and consumer; with ``target.mock`` the producer runs
    librdkafka's in-process mock cluster and the consumer is pointed at that cluster's broker."""

    def __init__(self, spec: dict):
        from confluent_kafka import Producer

        self.spec, self.t = spec, spec["target"]
        conf = dict(KAFKA_PRODUCER)  # queue.buffering.max.messages stays at its 100000 default
        if self.t.get("mock"):
            conf["test.mock.num.brokers"] = 1
        else:
            conf["bootstrap.servers"] = self.t["kafka"]
        self.producer = Producer(conf, logger=_quiet_logger())
        self.payload = os.urandom(spec["size"])
        md = self.producer.list_topics(self.t["kafka_topic"], timeout=20)
        self.bootstrap = ",".join(f"{b.host}:{b.port}" for b in md.brokers.values())

    def _produce_one(self, value: bytes, **kw) -> None:
        p = self.producer
        for _ in range(100_000):
            try:
                p.produce(self.t["kafka_topic"], value, partition=0, **kw)
                return
            except BufferError:
                p.poll(0.001)
        raise RuntimeError("producer queue stayed full")

    def produce(self, ph: dict) -> dict:
        acked = [0]
        errors: list[str] = []

        def on_delivery(err, _msg) -> None:
            if err is None:
                acked[0] += 1
            elif len(errors) < 5:
                errors.append(str(err))

        end = time.monotonic() + ph["duration_s"]
        sent = 0
        t0 = time.monotonic()
        while sent < ph["max_messages"] and time.monotonic() < end:
            for _ in range(1000):
                self._produce_one(self.payload, on_delivery=on_delivery)
            sent += 1000
            self.producer.poll(0)
        left = self.producer.flush(max(30.0, ph["duration_s"] * 10))
        if errors or left:
            raise RuntimeError(f"delivery errors {errors}, {left} undelivered")
        return {"count": acked[0], "bytes": acked[0] * self.spec["size"], "t0": t0, "t1": time.monotonic()}

    def latency(self, ph: dict) -> dict:
        lat: list[float] = []

        def on_delivery(err, msg) -> None:
            if err is None:
                lat.append((time.monotonic_ns() - sent_ns(msg.value())) / 1000)

        pacer = Pacer(ph["rate"], ph["duration_s"])
        start = t0 = time.monotonic()
        for i in range(pacer.ticks):
            pacer.wait(start, i)
            for _ in range(pacer.per_tick):
                self._produce_one(stamped(self.payload), on_delivery=on_delivery)
            self.producer.poll(0)
        self.producer.flush(30)
        return latency_result(self.spec["size"], pacer, t0, lat, "message")

    def consume(self, ph: dict) -> dict:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", **CONFLUENT_CONSUMER}, logger=_quiet_logger())
        c.assign([TopicPartition(self.t["kafka_topic"], 0, 0)])
        got = 0
        end = time.monotonic() + ph["deadline_s"]
        t0 = time.monotonic()
        try:
            while got < ph["expect"] and time.monotonic() < end:
                for m in c.consume(min(10000, ph["expect"] - got), 0.5):
                    if m.error() is None:
                        got += 1
            t1 = time.monotonic()
        finally:
            c.close()
        return {"count": got, "bytes": got * self.spec["size"], "t0": t0, "t1": t1}


def _quiet_logger():
    import logging

    log = logging.getLogger("bench.rdkafka")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    return log


def from_start(consumer, tp):
    """Assign kafka-python's or aiokafka's ``consumer`` to partition ``tp`` at offset 0."""
    consumer.assign([tp])
    consumer.seek(tp, 0)
    return tp


class KafkaPython:
    """kafka-python (pure Python) producer (acks all, linger 5 ms) and consumer, for reference."""

    def __init__(self, spec: dict):
        self.spec, self.t = spec, spec["target"]

    def produce(self, ph: dict) -> dict:
        from kafka import KafkaProducer

        p = KafkaProducer(bootstrap_servers=self.t["kafka"], acks="all", linger_ms=5, batch_size=1 << 20)
        payload = os.urandom(self.spec["size"])
        futures = []
        end = time.monotonic() + ph["duration_s"]
        t0 = time.monotonic()
        while len(futures) < ph["max_messages"] and time.monotonic() < end:
            for _ in range(1000):
                futures.append(p.send(self.t["kafka_topic"], payload, partition=0))
        p.flush(max(10.0, ph["duration_s"] * 4))
        t1 = time.monotonic()
        ok = sum(1 for f in futures if f.succeeded())
        p.close(5)
        return {"count": ok, "bytes": ok * self.spec["size"], "t0": t0, "t1": t1}

    def consume(self, ph: dict) -> dict:
        from kafka import KafkaConsumer, TopicPartition

        c = KafkaConsumer(bootstrap_servers=self.t["kafka"], **PY_KAFKA_CONSUMER)
        tp = from_start(c, TopicPartition(self.t["kafka_topic"], 0))
        got = 0
        end = time.monotonic() + ph["deadline_s"]
        t0 = time.monotonic()
        while got < ph["expect"] and time.monotonic() < end:
            for records in c.poll(timeout_ms=500, max_records=min(10000, ph["expect"] - got)).values():
                got += len(records)
        t1 = time.monotonic()
        c.close()
        return {"count": got, "bytes": got * self.spec["size"], "t0": t0, "t1": t1}


class AioKafka:
    """aiokafka producer (acks all, linger 5 ms) and consumer, for reference."""

    def __init__(self, spec: dict):
        self.spec, self.t = spec, spec["target"]

    def produce(self, ph: dict) -> dict:
        return asyncio.run(self._produce(ph))

    async def _produce(self, ph: dict) -> dict:
        from aiokafka import AIOKafkaProducer

        p = AIOKafkaProducer(bootstrap_servers=self.t["kafka"], acks="all", linger_ms=5,
                             max_batch_size=1 << 20, max_request_size=8 << 20)
        await p.start()
        payload = os.urandom(self.spec["size"])
        sent = ok = 0
        end = time.monotonic() + ph["duration_s"]
        t0 = time.monotonic()
        try:
            while sent < ph["max_messages"] and time.monotonic() < end:
                futures = [await p.send(self.t["kafka_topic"], payload, partition=0) for _ in range(1000)]
                sent += len(futures)
                ok += sum(1 for r in await asyncio.gather(*futures, return_exceptions=True)
                          if not isinstance(r, BaseException))
            t1 = time.monotonic()
        finally:
            await p.stop()
        return {"count": ok, "bytes": ok * self.spec["size"], "t0": t0, "t1": t1}

    def consume(self, ph: dict) -> dict:
        return asyncio.run(self._consume(ph))

    async def _consume(self, ph: dict) -> dict:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        c = AIOKafkaConsumer(bootstrap_servers=self.t["kafka"], **PY_KAFKA_CONSUMER)
        await c.start()
        tp = from_start(c, TopicPartition(self.t["kafka_topic"], 0))
        got = 0
        end = time.monotonic() + ph["deadline_s"]
        t0 = time.monotonic()
        try:
            while got < ph["expect"] and time.monotonic() < end:
                for records in (await c.getmany(tp, timeout_ms=500,
                                                max_records=min(10000, ph["expect"] - got))).values():
                    got += len(records)
            t1 = time.monotonic()
        finally:
            await c.stop()
        return {"count": got, "bytes": got * self.spec["size"], "t0": t0, "t1": t1}


# --------------------------------------------------------------------------- Redis Streams


class RedisPy:
    """redis-py: pipelines of ``REDIS_PIPELINE`` XADDs (no MULTI); XRANGE pages of 10000 back."""

    def __init__(self, spec: dict):
        import redis

        self.spec, self.t = spec, spec["target"]
        host, port = self.t["redis"].rsplit(":", 1)
        self.r = redis.Redis(host=host, port=int(port))
        self.key = self.t["topic"]
        self.payload = os.urandom(spec["size"])

    def produce(self, ph: dict) -> dict:
        pipe = self.r.pipeline(transaction=False)
        for _ in range(REDIS_PIPELINE):
            pipe.xadd(self.key, {"f": self.payload})
        sent = 0
        end = time.monotonic() + ph["duration_s"]
        t0 = time.monotonic()
        while sent < ph["max_messages"] and time.monotonic() < end:
            ids = pipe.execute(raise_on_error=True)
            for _ in range(REDIS_PIPELINE):  # execute() empties the pipeline
                pipe.xadd(self.key, {"f": self.payload})
            sent += len(ids)
        return {"count": sent, "bytes": sent * self.spec["size"], "t0": t0, "t1": time.monotonic()}

    def latency(self, ph: dict) -> dict:
        pacer = Pacer(ph["rate"], ph["duration_s"])
        lat: list[float] = []
        start = t0 = time.monotonic()
        for i in range(pacer.ticks):
            pacer.wait(start, i)
            pipe = self.r.pipeline(transaction=False)
            for _ in range(pacer.per_tick):
                pipe.xadd(self.key, {"f": self.payload})
            t = time.monotonic_ns()
            pipe.execute(raise_on_error=True)
            lat.append((time.monotonic_ns() - t) / 1000)
        return latency_result(self.spec["size"], pacer, t0, lat, f"pipeline of {pacer.per_tick}")

    def consume(self, ph: dict) -> dict:
        got = 0
        start = "-"
        end = time.monotonic() + ph["deadline_s"]
        t0 = time.monotonic()
        while got < ph["expect"] and time.monotonic() < end:
            entries = self.r.xrange(self.key, min=start, max="+", count=10000)
            if not entries:
                break
            got += len(entries)
            start = b"(" + entries[-1][0]
        return {"count": got, "bytes": got * self.spec["size"], "t0": t0, "t1": time.monotonic()}


# --------------------------------------------------------------------------- NATS JetStream


class NatsPy:
    """nats-py JetStream: ``publish_async`` (each publish acknowledged by the stream), then a pull
    consumer (AckPolicy none) fetching 1000 at a time."""

    PENDING = 4000

    def __init__(self, spec: dict):
        self.spec, self.t = spec, spec["target"]
        self.loop = asyncio.new_event_loop()
        self.subject = f"{self.t['topic']}.m"
        self.nc, self.js = self.loop.run_until_complete(self._connect())
        self.payload = os.urandom(spec["size"])

    async def _connect(self):
        import nats

        nc = await nats.connect(f"nats://{self.t['nats']}", max_reconnect_attempts=0)
        js = nc.jetstream(publish_async_max_pending=self.PENDING)
        await js.add_stream(name=self.t["topic"], subjects=[self.subject])
        return nc, js

    def produce(self, ph: dict) -> dict:
        return self.loop.run_until_complete(self._produce(ph))

    async def _produce(self, ph: dict) -> dict:
        acked = [0]

        def done(f: asyncio.Future) -> None:
            if not f.cancelled() and f.exception() is None:
                acked[0] += 1

        sent = 0
        end = time.monotonic() + ph["duration_s"]
        t0 = time.monotonic()
        while sent < ph["max_messages"] and time.monotonic() < end:
            for _ in range(1000):
                (await self.js.publish_async(self.subject, self.payload)).add_done_callback(done)
            sent += 1000
        await asyncio.wait_for(self.js.publish_async_completed(), max(10.0, ph["duration_s"] * 4))
        await asyncio.sleep(0)  # let the last done-callbacks run
        return {"count": acked[0], "bytes": acked[0] * self.spec["size"], "t0": t0, "t1": time.monotonic()}

    def latency(self, ph: dict) -> dict:
        return self.loop.run_until_complete(self._latency(ph))

    async def _latency(self, ph: dict) -> dict:
        lat: list[float] = []
        pacer = Pacer(ph["rate"], ph["duration_s"])

        def timed(t: int):
            return lambda f: lat.append((time.monotonic_ns() - t) / 1000) if f.exception() is None else None

        start = t0 = time.monotonic()
        for i in range(pacer.ticks):
            await pacer.await_tick(start, i)
            for _ in range(pacer.per_tick):
                t = time.monotonic_ns()
                (await self.js.publish_async(self.subject, self.payload)).add_done_callback(timed(t))
        await asyncio.wait_for(self.js.publish_async_completed(), 30)
        await asyncio.sleep(0)
        return latency_result(self.spec["size"], pacer, t0, lat, "message")

    def consume(self, ph: dict) -> dict:
        return self.loop.run_until_complete(self._consume(ph))

    async def _consume(self, ph: dict) -> dict:
        import nats.errors
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        sub = await self.js.pull_subscribe(self.subject, durable="bench", config=ConsumerConfig(
            ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL))
        got = 0
        end = time.monotonic() + ph["deadline_s"]
        t0 = time.monotonic()
        while got < ph["expect"] and time.monotonic() < end:
            try:
                got += len(await sub.fetch(min(1000, ph["expect"] - got), timeout=1))
            except nats.errors.TimeoutError:
                pass
        t1 = time.monotonic()
        await sub.unsubscribe()
        return {"count": got, "bytes": got * self.spec["size"], "t0": t0, "t1": t1}

    def close(self) -> None:
        self.loop.run_until_complete(self.nc.close())


CLIENTS = {
    "iggy-raw": IggyRaw,
    "iggy-sdk": IggySdk,
    "confluent": Confluent,
    "kafka-python": KafkaPython,
    "aiokafka": AioKafka,
    "redis-py": RedisPy,
    "nats-py": NatsPy,
}


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> int:
    spec = json.loads(sys.argv[1])
    hard_end = time.monotonic() + spec["deadline_s"]
    try:
        client = CLIENTS[spec["client"]](spec)
    except Exception as e:
        _say("@@DONE " + json.dumps({"error": f"setup: {type(e).__name__}: {e}"}))
        return 1
    _say("@@READY")
    for _ in range(16):  # a worker runs a handful of phases
        line = sys.stdin.readline()
        if not line.startswith("RUN ") or time.monotonic() > hard_end:
            break
        phase = json.loads(line[4:])
        phase.setdefault("deadline_s", max(1.0, hard_end - time.monotonic()))
        cpu0 = time.process_time()
        try:
            result = getattr(client, phase["op"])(phase)
            result["cpu_s"] = time.process_time() - cpu0
        except Exception as e:
            result = {"error": f"{phase['op']}: {type(e).__name__}: {e}"}
        _say("@@DONE " + json.dumps(result))
    close = getattr(client, "close", None)
    if close:
        close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
