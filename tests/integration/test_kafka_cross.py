"""Kafka <-> Iggy on one server: what one protocol writes the other reads (docs/kafka-mapping.md),
topic names across the two (section "Topic names"), and what survives a restart."""

from __future__ import annotations

import asyncio
import datetime

import apache_iggy as ig
import pytest

from kafka_wire import KafkaWire, main_class, message_classes, record_batch
from kio.static.constants import EntityType


async def iggy_client(server) -> ig.IggyClient:
    c = ig.IggyClient(server.iggy_address)
    await c.connect()
    await c.login_user("iggy", "iggy")
    return c


async def iggy_poll(c: ig.IggyClient, stream: str, topic: str, count: int = 100, partition: int = 0):
    return await c.poll_messages(
        stream, topic, consumer=ig.Consumer.Single(1), polling_strategy=ig.PollingStrategy.First(),
        count=count, auto_commit=False, partition_id=partition,
    )


def kafka_read(server, topic: str, expected: int, partition: int = 0):
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=server.kafka_address, enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        c.seek(tp, 0)
        out = []
        for m in c:
            out.append(m)
            if len(out) >= expected:
                break
        return out
    finally:
        c.close()


def test_kafka_produce_iggy_poll(server):
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=server.kafka_address, compression_type="gzip")
    try:
        futures = [
            p.send("x-k2i", key=b"user-1", value=b"hello", headers=[("trace", b"t-1")], timestamp_ms=1_700_000_000_123),
            p.send("x-k2i", key=None, value=b"plain"),
            p.send("x-k2i", key=b"tomb", value=None),
        ]
        p.flush(10)
        offsets = [f.get(10).offset for f in futures]
    finally:
        p.close()
    assert offsets == [0, 1, 2]

    async def go():
        c = await iggy_client(server)
        msgs = await iggy_poll(c, "kafka", "x-k2i")
        assert [m.offset() for m in msgs] == [0, 1, 2]
        assert [m.payload() for m in msgs] == [b"hello", b"plain", b""]
        h0 = msgs[0].user_headers().to_scalar_dict()
        # The exact Kafka timestamp survives either way kafka-python batched the three sends:
        # in one batch the old timestamp is outside the batch's 71.6-minute window (the other
        # two records are "now"), so its exact value rides in kafka.timestamp; alone in its
        # batch it is the frame's own producer time (origin_timestamp, µs).
        exact = h0.pop("kafka.timestamp", None)
        assert h0 == {"kafka.key": "user-1", "trace": "t-1"}
        if exact is None:
            assert msgs[0].origin_timestamp() == 1_700_000_000_123_000
        else:
            assert exact == 1_700_000_000_123
        assert msgs[1].user_headers() is None  # null key, plain value, no headers: no user headers at all
        h2 = msgs[2].user_headers().to_scalar_dict()
        assert h2["kafka.key"] == "tomb" and h2["kafka.flags"] == 1  # bit 0: null value

    asyncio.run(go())


def test_iggy_send_kafka_consume_as_stream_dot_topic(server):
    async def go():
        c = await iggy_client(server)
        await c.create_stream("orders")
        await c.create_topic("orders", "eu", 2)
        await c.send_messages("orders", "eu", 1, [
            ig.SendMessage(b"first", user_headers={"trace": "abc", "n": ig.HeaderValue.UnsignedInt32(7)}),
            ig.SendMessage(b"second"),
        ])
        await c.create_stream("my.app")  # a stream name with a dot: not reachable from Kafka
        await c.create_topic("my.app", "t", 1)

    asyncio.run(go())
    got = kafka_read(server, "orders.eu", 2, partition=1)
    assert [(m.offset, m.key, m.value) for m in got] == [(0, None, b"first"), (1, None, b"second")]
    headers = got[0].headers  # the SDK sends its header map in its own order
    assert sorted(headers[:-1]) == [("n", b"7"), ("trace", b"abc")]
    n_index = [k for k, _ in headers].index("n")
    assert headers[-1] == ("iggy.kinds", b"%d:uint32" % n_index)
    assert got[1].headers == []

    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    a = KafkaAdminClient(bootstrap_servers=server.kafka_address)
    try:
        topics = a.list_topics()
        assert "orders.eu" in topics and not any(t.startswith("my.app") for t in topics)
        with pytest.raises(TopicAlreadyExistsError):  # would shadow the Iggy topic
            a.create_topics([NewTopic("orders.eu", 1, 1)])
    finally:
        a.close()

    # a Kafka record produced into the Iggy topic keeps the Iggy header kinds (iggy.kinds read back)
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=server.kafka_address)
    try:
        p.send("orders.eu", value=got[0].value, headers=got[0].headers, partition=1).get(10)
    finally:
        p.close()

    async def check():
        c = await iggy_client(server)
        msgs = await iggy_poll(c, "orders", "eu", partition=1)
        assert [m.payload() for m in msgs] == [b"first", b"second", b"first"]
        assert msgs[2].user_headers() == msgs[0].user_headers()

    asyncio.run(check())


def _init_pid(w: KafkaWire) -> tuple[int, int]:
    mod, _ = message_classes(22, 4)
    r = w.call(22, 4, main_class(mod, EntityType.request)(
        transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1, producer_epoch=-1))
    assert r.error_code == 0
    return r.producer_id, r.producer_epoch


def _produce(w: KafkaWire, topic: str, records: bytes):
    mod, _ = message_classes(0, 9)
    pd = mod.PartitionProduceData(index=0, records=records)
    td = mod.TopicProduceData(name=topic, partition_data=(pd,))
    r = w.call(0, 9, mod.ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5), topic_data=(td,)))
    return r.responses[0].partition_responses[0]


def test_messages_and_idempotent_state_survive_a_restart(fresh_server):
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=fresh_server.kafka_address, compression_type="snappy")
    try:
        for i in range(4):
            p.send("x-restart", key=b"k%d" % i, value=b"v%d" % i, headers=[("i", b"%d" % i)])
        p.flush(10)
    finally:
        p.close()
    w = KafkaWire(fresh_server.kafka_address)
    try:
        pid, epoch = _init_pid(w)
        first = record_batch([b"a", b"b"], producer_id=pid, producer_epoch=epoch, base_sequence=0)
        assert (_produce(w, "x-restart", first).base_offset) == 4
        second = record_batch([b"c"], producer_id=pid, producer_epoch=epoch, base_sequence=2)
        assert (_produce(w, "x-restart", second).base_offset) == 6
    finally:
        w.close()

    fresh_server.restart()

    got = kafka_read(fresh_server, "x-restart", 7)
    assert [(m.offset, m.key, m.value) for m in got[:4]] == [(i, b"k%d" % i, b"v%d" % i) for i in range(4)]
    assert [m.value for m in got[4:]] == [b"a", b"b", b"c"]
    assert got[3].headers == [("i", b"3")]
    w = KafkaWire(fresh_server.kafka_address)
    try:
        dup = _produce(w, "x-restart", second)  # a retry after the restart: still a duplicate
        assert (dup.error_code, dup.base_offset) == (0, 6)
        gap = _produce(w, "x-restart", record_batch([b"z"], producer_id=pid, producer_epoch=epoch, base_sequence=9))
        assert gap.error_code == 45
        nxt = _produce(w, "x-restart", record_batch([b"d"], producer_id=pid, producer_epoch=epoch, base_sequence=3))
        assert (nxt.error_code, nxt.base_offset) == (0, 7)
        new_pid, _ = _init_pid(w)
        assert new_pid > pid  # producer ids are never handed out twice
    finally:
        w.close()
