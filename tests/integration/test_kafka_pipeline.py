"""Pipelined Kafka requests: a connection reads the next Produce while one waits, and answers in order.

librdkafka sends up to ``max.in.flight.requests.per.connection`` (5) requests before it
reads an answer; the server appends each Produce as soon as its frame is in and lets the
ones waiting for their fdatasync (``enforce_fsync`` topics) be answered by a task, one after
another in request order (``frontends/kafka/server._Pipeline``). These tests send requests
back to back on a raw socket (with a refused batch and, separately, a request that closes the
connection in the middle), produce with confluent-kafka at max.in.flight 5, and close a
connection while its requests are pending: the answers keep the request order, every offset
matches the order of the requests, and the server keeps serving others.
"""

from __future__ import annotations

import socket
import struct

import pytest

from kafka_wire import KafkaWire, record_batch
from test_kafka_wire import PRODUCE, metadata_request, produce, produce_request
from test_robustness_wire import healthy, no_traceback, run, sdk_client

METADATA = 3
CORRUPT_MESSAGE = 2
STREAM = "kafka"  # [kafka] stream: where Kafka topic names live


async def _topics(server, fsync: tuple[str, ...], plain: tuple[str, ...]) -> None:
    c = await sdk_client(server)
    if await c.get_stream(STREAM) is None:
        await c.create_stream(STREAM)
    for name in fsync:
        await c.create_topic(STREAM, name, 1, options={"enforce_fsync": "true"})
        topic = await c.get_topic(STREAM, name)
        assert topic.options.to_scalar_dict()["enforce_fsync"] is True  # answers wait for a sync
    for name in plain:
        await c.create_topic(STREAM, name, 1)


@pytest.fixture(scope="module")
def topics(server):
    run(_topics(server, ("pipe-sync", "pipe-close", "pipe-gone", "pipe-confluent"), ("pipe-plain",)))
    return server


def _corrupt(batch: bytes) -> bytes:
    out = bytearray(batch)
    out[-1] ^= 0xFF  # the CRC-32C no longer matches
    return bytes(out)


def test_back_to_back_requests_are_answered_in_order(topics):
    """Eight requests in one write: Produce to a synced topic, to a plain one, a Metadata (which
    waits for everything before it), a refused batch: every answer in order, offsets in order."""
    w = KafkaWire(topics.kafka_address)
    try:
        plan = [  # (topic, values, refused) or None for a Metadata
            ("pipe-sync", [b"a0", b"a1"], False),
            ("pipe-sync", [b"b0"], False),
            ("pipe-plain", [b"c0", b"c1", b"c2"], False),
            ("pipe-sync", [b"bad"], True),
            None,
            ("pipe-sync", [b"d0"], False),
            ("pipe-plain", [b"e0"], False),
            ("pipe-sync", [b"f0", b"f1", b"f2"], False),
        ]
        frames, sent = [], []
        for item in plan:
            if item is None:
                frame, corr = w.frame(METADATA, 9, metadata_request(9, ["pipe-sync"]))
            else:
                topic, values, refused = item
                batch = _corrupt(record_batch(values)) if refused else record_batch(values)
                frame, corr = w.frame(PRODUCE, 9, produce_request(9, topic, batch))
            frames.append(frame)
            sent.append(corr)
        w.send_raw(b"".join(frames))
        next_offset = {"pipe-sync": 0, "pipe-plain": 0}
        for corr, item in zip(sent, plan):
            got, response = w.read_response(METADATA if item is None else PRODUCE, 9)
            assert got == corr, "answers must follow the order of the requests"
            if item is None:
                assert response.topics[0].name == "pipe-sync"
                continue
            topic, values, refused = item
            part = response.responses[0].partition_responses[0]
            if refused:
                assert part.error_code == CORRUPT_MESSAGE
                continue
            assert (part.error_code, part.base_offset) == (0, next_offset[topic])
            next_offset[topic] += len(values)
        assert next_offset == {"pipe-sync": 7, "pipe-plain": 4}  # the refused batch took no offset
        # the connection goes on serving
        assert produce(w, "pipe-sync", record_batch([b"g0"])).base_offset == 7
    finally:
        w.close()


def test_a_request_that_closes_the_connection_mid_pipeline(topics):
    """Three Produce, an undecodable request, two more Produce in one write: the three are
    answered in order, then the connection closes; the two after it get no answer."""
    w = KafkaWire(topics.kafka_address)
    try:
        frames, corrs = [], []
        for i in range(3):
            frame, corr = w.frame(PRODUCE, 9, produce_request(9, "pipe-close", record_batch([b"v%d" % i])))
            frames.append(frame)
            corrs.append(corr)
        bad = struct.pack(">hhih", PRODUCE, 9, 999, 1) + b"x" + b"\x00" + b"\xff\xff\xff"  # body cut short
        frames.append(struct.pack(">i", len(bad)) + bad)
        for i in range(2):
            frames.append(w.frame(PRODUCE, 9, produce_request(9, "pipe-close", record_batch([b"late%d" % i])))[0])
        w.send_raw(b"".join(frames))
        for i, corr in enumerate(corrs):
            got, response = w.read_response(PRODUCE, 9)
            assert got == corr
            part = response.responses[0].partition_responses[0]
            assert (part.error_code, part.base_offset) == (0, i)
        assert w.closed_by_server(), "an undecodable request closes the connection"
    finally:
        w.close()
    w = KafkaWire(topics.kafka_address)
    try:  # nothing after the bad request was appended: the next offset is 3
        assert produce(w, "pipe-close", record_batch([b"next"])).base_offset == 3
    finally:
        w.close()


def test_peer_closing_mid_pipeline_leaves_the_server_serving(topics):
    """A peer sends Produce requests back to back and resets the connection before any answer:
    the server keeps serving others, and the partition's offsets stay dense."""
    for _ in range(3):
        w = KafkaWire(topics.kafka_address)
        frames = [w.frame(PRODUCE, 9, produce_request(9, "pipe-gone", record_batch([b"g%d" % i] * 50)))[0]
                  for i in range(6)]
        w.send_raw(b"".join(frames))
        w.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, not FIN
        w.close()
    healthy(topics)
    w = KafkaWire(topics.kafka_address)
    try:
        part = produce(w, "pipe-gone", record_batch([b"after"]))
        assert part.error_code == 0
        assert part.base_offset % 50 == 0, "each request's batch is appended whole or not at all"
        assert part.base_offset <= 3 * 6 * 50
    finally:
        w.close()
    no_traceback(topics)  # the answers that could not be written ended quietly


def test_confluent_kafka_max_in_flight_5_keeps_the_order(topics):
    """confluent-kafka with max.in.flight 5 and acks all, to a synced topic: every delivery
    report's offset follows the produce order, and the log reads back in that order."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    address = topics.kafka_address
    p = Producer({"bootstrap.servers": address, "acks": "all", "linger.ms": 1, "batch.num.messages": 200,
                  "max.in.flight.requests.per.connection": 5, "enable.idempotence": False, "retries": 0})
    delivered: list[tuple[bytes, int]] = []

    def report(err, msg):
        assert err is None, err
        delivered.append((msg.value(), msg.offset()))

    total = 20_000
    for i in range(total):
        while True:
            try:
                p.produce("pipe-confluent", b"m%06d" % i, partition=0, on_delivery=report)
                break
            except BufferError:
                p.poll(0.01)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    assert len(delivered) == total
    assert [v for v, _ in delivered] == [b"m%06d" % i for i in range(total)], "reports in produce order"
    assert [o for _, o in delivered] == list(range(total)), "offsets in produce order"
    c = Consumer({"bootstrap.servers": address, "group.id": "pipe-check", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition("pipe-confluent", 0, 0)])
        got: list[bytes] = []
        while len(got) < total:
            batch = c.consume(5000, 10)
            assert batch, f"only {len(got)} of {total} records read back"
            for m in batch:
                assert m.error() is None, m.error()
                got.append(m.value())
        assert got == [b"m%06d" % i for i in range(total)]
    finally:
        c.close()


def test_frames_either_side_of_the_in_place_size_are_stored_exactly(server):
    """A Produce frame under ``IN_PLACE_MAX`` (2 MiB: received in place) and one over it (read
    1 MiB at a time), written back to back with a Metadata behind them: answered in order, and a
    Fetch of every partition gives back exactly the values sent."""
    import os

    from headwater.codec.kafka.record_batch import RecordBatchView, iter_record_fields, split_batches
    from test_kafka_wire import FETCH, create_topic, fetch_request, req

    w = KafkaWire(server.kafka_address, timeout=60)
    try:
        assert create_topic(w, "frame-sizes", partitions=4).error_code == 0
        sent = {p: [os.urandom(450_000), os.urandom(450_000)] for p in range(4)}  # under max.message.bytes
        small = produce_request(9, "frame-sizes", record_batch(sent[0]), partition=0)
        parts = tuple(req(PRODUCE, 9, "PartitionProduceData", index=p, records=record_batch(sent[p])) for p in (1, 2, 3))
        big = req(PRODUCE, 9, transactional_id=None, acks=-1, timeout=small.timeout,
                  topic_data=(req(PRODUCE, 9, "TopicProduceData", name="frame-sizes", partition_data=parts),))
        frames = [w.frame(PRODUCE, 9, small), w.frame(PRODUCE, 9, big), w.frame(METADATA, 9, metadata_request(9, None))]
        assert len(frames[0][0]) < 2 << 20 < len(frames[1][0])  # one of each kind (IN_PLACE_MAX)
        w.send_raw(b"".join(f for f, _ in frames))
        for (_, correlation), api in zip(frames, (PRODUCE, PRODUCE, METADATA)):
            got, response = w.read_response(api, 9)
            assert got == correlation
            if api == PRODUCE:
                assert all(p.error_code == 0 for t in response.responses for p in t.partition_responses)
        for p in range(4):
            f = w.call(FETCH, 12, fetch_request(12, "frame-sizes", 0, partition=p))
            blob = f.responses[0].partitions[0].records
            values = []
            for b in split_batches(blob):
                view = RecordBatchView(b)
                values += [bytes(r.value) for r in iter_record_fields(view.records_section(), view.header().record_count)]
            assert values == sent[p]
    finally:
        w.close()
    healthy(server)
