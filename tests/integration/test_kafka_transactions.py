"""Kafka transactions (KIP-98) with real clients against a real ``headwater serve``.

confluent-kafka (librdkafka) transactional producers and read_committed consumers:
commit, abort, the last stable offset, fencing by a second producer with the same
transactional.id, a SIGKILL mid-transaction, a consume-transform-produce loop with
``send_offsets_to_transaction``; kafka-python and aiokafka transactional producers;
an Iggy SDK poll never shows an aborted record, a marker, or anything past the LSO.
"""

from __future__ import annotations

import asyncio
import uuid

import apache_iggy as ig
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def admin_create(server, *names: str, partitions: int = 1) -> None:
    a = AdminClient({"bootstrap.servers": server.kafka_address})
    for f in a.create_topics([NewTopic(n, partitions) for n in names]).values():
        f.result(15)


def txn_producer(server, tid: str, **extra) -> Producer:
    p = Producer({"bootstrap.servers": server.kafka_address, "transactional.id": tid, **extra})
    p.init_transactions(15)
    return p


def read_all(server, topic: str, *, committed: bool = True, partitions: int = 1, start: int = 0,
             offsets: bool = False) -> list:
    """Every record value of ``topic`` from ``start`` (an offset or OFFSET_BEGINNING) up to its
    end for this isolation level; ``(offset, value)`` pairs with ``offsets``."""
    c = Consumer({
        "bootstrap.servers": server.kafka_address, "group.id": f"reader-{uuid.uuid4()}",
        "isolation.level": "read_committed" if committed else "read_uncommitted",
        "enable.auto.commit": False, "enable.partition.eof": True,
    })
    try:
        c.assign([TopicPartition(topic, p, start) for p in range(partitions)])
        out: list[bytes] = []
        eof: set[int] = set()
        for _ in range(200):
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    eof.add(m.partition())
                    if len(eof) == partitions:
                        return out
                    continue
                raise KafkaException(m.error())
            eof.discard(m.partition())
            out.append((m.offset(), m.value()) if offsets else m.value())
        raise AssertionError(f"{topic}: no end of partition reached; got {out}")
    finally:
        c.close()


def latest(server, topic: str, level: str) -> int:
    c = Consumer({"bootstrap.servers": server.kafka_address, "group.id": "wm", "isolation.level": level})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), 10)[1]
    finally:
        c.close()


async def _iggy_poll(server, topic: str, partition: int = 0) -> list[bytes]:
    c = ig.IggyClient(server.iggy_address)
    await c.connect()
    await c.login_user("iggy", "iggy")
    msgs = await c.poll_messages(
        "kafka", topic, consumer=ig.Consumer.Single(1), polling_strategy=ig.PollingStrategy.First(),
        count=1000, auto_commit=False, partition_id=partition,
    )
    return [m.payload() for m in msgs]


def iggy_poll(server, topic: str, partition: int = 0) -> list[bytes]:
    return asyncio.run(_iggy_poll(server, topic, partition))


async def _iggy_next(server, topic: str) -> list[bytes]:
    """Poll Next with auto-commit, two messages at a time, until a poll comes back empty."""
    c = ig.IggyClient(server.iggy_address)
    await c.connect()
    await c.login_user("iggy", "iggy")
    out: list[bytes] = []
    for _ in range(50):
        msgs = await c.poll_messages("kafka", topic, consumer=ig.Consumer.Single(7), partition_id=0,
                                     polling_strategy=ig.PollingStrategy.Next(), count=2, auto_commit=True)
        if not msgs:
            return out
        out += [m.payload() for m in msgs]
    raise AssertionError(f"no end: {out}")


def test_commit_abort_and_the_last_stable_offset(server):
    topic = "tx-basic"
    admin_create(server, topic)
    p = txn_producer(server, "tx-basic-1")
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, b"c%d" % i)
    p.commit_transaction(15)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, b"a%d" % i)
    p.flush(15)  # written, then aborted (librdkafka drops unsent records on abort)
    p.abort_transaction(15)
    # an open transaction: its records are written but past the LSO
    p.begin_transaction()
    p.produce(topic, b"open")
    p.flush(15)
    assert read_all(server, topic) == [b"c0", b"c1", b"c2"]
    assert iggy_poll(server, topic) == [b"c0", b"c1", b"c2"]
    assert read_all(server, topic, committed=False) == [b"c0", b"c1", b"c2", b"a0", b"a1", b"a2", b"open"]
    # ListOffsets latest: the LSO (8) for read_committed, the high watermark (9) otherwise
    assert [latest(server, topic, level) for level in ("read_committed", "read_uncommitted")] == [8, 9]
    p.commit_transaction(15)
    assert read_all(server, topic) == [b"c0", b"c1", b"c2", b"open"]
    # Iggy sees the committed records only, never a marker (offsets 3, 7 and 9) nor an aborted one
    assert iggy_poll(server, topic) == [b"c0", b"c1", b"c2", b"open"]
    # polling Next with auto-commit walks over the hidden stretches without stalling
    assert asyncio.run(_iggy_next(server, topic)) == [b"c0", b"c1", b"c2", b"open"]
    p.flush(5)


def test_a_second_producer_fences_the_first_and_aborts_its_transaction(server):
    topic = "tx-fence"
    admin_create(server, topic)
    first = txn_producer(server, "tx-fence-id")
    first.begin_transaction()
    first.produce(topic, b"zombie")
    first.flush(15)
    second = txn_producer(server, "tx-fence-id")  # bumps the epoch, aborts the open transaction
    second.begin_transaction()
    second.produce(topic, b"winner")
    second.commit_transaction(15)
    with pytest.raises(KafkaException) as e:
        first.commit_transaction(15)
    assert e.value.args[0].fatal() or e.value.args[0].code() in (90, 47)  # PRODUCER_FENCED / INVALID_PRODUCER_EPOCH
    assert read_all(server, topic) == [b"winner"]
    assert iggy_poll(server, topic) == [b"winner"]


def test_sigkill_mid_transaction_is_never_half_visible(fresh_server):
    server = fresh_server
    topic = "tx-crash"
    admin_create(server, topic, partitions=2)
    p = txn_producer(server, "tx-crash-id")
    p.begin_transaction()
    p.produce(topic, b"kept-0", partition=0)
    p.produce(topic, b"kept-1", partition=1)
    p.commit_transaction(15)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, b"lost-%d" % i, partition=i % 2)
    p.flush(15)
    server.kill()
    del p
    server.start()
    # boot aborted the in-flight transaction: nothing of it is visible, the LSO is the end again
    assert sorted(read_all(server, topic, partitions=2)) == [b"kept-0", b"kept-1"]
    assert iggy_poll(server, topic, 0) == [b"kept-0"]
    assert iggy_poll(server, topic, 1) == [b"kept-1"]
    again = txn_producer(server, "tx-crash-id")
    again.begin_transaction()
    again.produce(topic, b"after", partition=0)
    again.commit_transaction(15)
    assert read_all(server, topic) == [b"kept-0", b"after"]


def test_consume_transform_produce_exactly_once(server):
    source, sink, group = "ctp-in", "ctp-out", "ctp-group"
    admin_create(server, source, sink)
    plain = Producer({"bootstrap.servers": server.kafka_address})
    for i in range(20):
        plain.produce(source, b"%d" % i)
    plain.flush(15)
    consumer = Consumer({
        "bootstrap.servers": server.kafka_address, "group.id": group, "enable.auto.commit": False,
        "isolation.level": "read_committed", "auto.offset.reset": "earliest",
    })
    consumer.assign([TopicPartition(source, 0)])
    producer = txn_producer(server, "ctp-txn")
    rounds = 0
    failed_once = False
    done = 0
    while done < 20 and rounds < 50:
        rounds += 1
        msgs = consumer.consume(5, 2.0)
        msgs = [m for m in msgs if not m.error()]
        if not msgs:
            continue
        producer.begin_transaction()
        for m in msgs:
            producer.produce(sink, b"out-" + m.value())
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 15)
        if not failed_once and int(msgs[0].value()) >= 5:
            failed_once = True  # a failure after producing: abort and reprocess from the committed offset
            producer.abort_transaction(15)
            committed = consumer.committed([TopicPartition(source, 0)], 15)
            consumer.seek(TopicPartition(source, 0, committed[0].offset))
            continue
        producer.commit_transaction(15)
        done = int(msgs[-1].value()) + 1
    consumer.close()
    assert failed_once and done == 20
    out = read_all(server, sink)
    assert out == [b"out-%d" % i for i in range(20)]
    check = Consumer({"bootstrap.servers": server.kafka_address, "group.id": group})
    assert check.committed([TopicPartition(source, 0)], 15)[0].offset == 20
    check.close()
    assert sorted(iggy_poll(server, sink), key=lambda v: int(v[4:])) == out


def test_kafka_python_transactional_producer(server):
    from kafka import KafkaProducer

    topic = "tx-kafka-python"
    admin_create(server, topic)
    p = KafkaProducer(bootstrap_servers=server.kafka_address, transactional_id="tx-kp")
    p.init_transactions()
    p.begin_transaction()
    p.send(topic, b"kp-committed")
    p.commit_transaction()
    p.begin_transaction()
    p.send(topic, b"kp-aborted")
    p.flush()
    p.abort_transaction()
    p.close()
    assert read_all(server, topic) == [b"kp-committed"]
    assert iggy_poll(server, topic) == [b"kp-committed"]


def test_aiokafka_transactional_producer(server):
    from aiokafka import AIOKafkaProducer

    topic = "tx-aiokafka"
    admin_create(server, topic)

    async def go():
        p = AIOKafkaProducer(bootstrap_servers=server.kafka_address, transactional_id="tx-aio")
        await p.start()
        try:
            async with p.transaction():
                await p.send_and_wait(topic, b"aio-committed")
            await p.begin_transaction()
            await p.send_and_wait(topic, b"aio-aborted")
            await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(go())
    assert read_all(server, topic) == [b"aio-committed"]
    assert iggy_poll(server, topic) == [b"aio-committed"]
