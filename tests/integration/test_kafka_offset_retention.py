"""Committed offsets expire (Kafka's ``offsets.retention.minutes``, KIP-211) on a real
``headwater serve`` with a tiny retention, seen through confluent-kafka: a simple
(standalone) group's offsets go once not committed for the retention; a Stable group's
stay while it has members and go after it became Empty (the group is then no longer
listed); offsets an Iggy consumer group of the same name shares never expire."""

from __future__ import annotations

import asyncio
import time

import apache_iggy as ig
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from hw_server import ServerProcess, free_port

TOPIC = "ret"


@pytest.fixture
def server(tmp_path_factory):
    s = ServerProcess(tmp_path_factory.mktemp("headwater") / "data", free_port(), free_port(), extra_env={
        "HEADWATER_KAFKA_OFFSETS_RETENTION_MINUTES": "0.005",  # 300 ms
        "HEADWATER_KAFKA_OFFSETS_RETENTION_CHECK_INTERVAL_MS": "100"}).start()
    yield s
    assert s.stop() == 0


def committed(server, group: str) -> int:
    """The group's committed offset of partition 0 (OffsetFetch; -1001 when none)."""
    c = Consumer({"bootstrap.servers": server.kafka_address, "group.id": group})
    try:
        return c.committed([TopicPartition(TOPIC, 0)], 10)[0].offset
    finally:
        c.close()


def simple_commit(server, group: str, offset: int) -> None:
    c = Consumer({"bootstrap.servers": server.kafka_address, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(TOPIC, 0, offset)], asynchronous=False)
    finally:
        c.close()


def wait_for(condition) -> None:
    """Until ``condition()`` holds (the cleanup runs every 100 ms past a 300 ms retention)."""
    for _ in range(600):
        if condition():
            return
        time.sleep(0.05)
    assert condition()


async def _iggy_group(server) -> None:
    c = ig.IggyClient(server.iggy_address)
    await c.connect()
    await c.login_user("iggy", "iggy")
    await c.create_consumer_group("kafka", TOPIC, "iggy-g")


def test_offsets_expire_for_groups_not_in_use(server):
    a = AdminClient({"bootstrap.servers": server.kafka_address})
    a.create_topics([NewTopic(TOPIC, 1)])[TOPIC].result(15)
    p = Producer({"bootstrap.servers": server.kafka_address})
    for i in range(3):
        p.produce(TOPIC, b"m%d" % i)
    p.flush(15)
    asyncio.run(_iggy_group(server))
    member = Consumer({"bootstrap.servers": server.kafka_address, "group.id": "og", "enable.auto.commit": False,
                       "auto.offset.reset": "earliest"})
    member.subscribe([TOPIC])
    got = []
    for _ in range(300):
        m = member.poll(0.2)
        if m is not None and not m.error():
            got.append(m.value())
            if len(got) == 3:
                break
    assert got == [b"m0", b"m1", b"m2"]
    member.commit(asynchronous=False)
    simple_commit(server, "simple", 2)
    simple_commit(server, "iggy-g", 1)
    # the standalone group's offset expires; the Stable group's (same age) does not
    wait_for(lambda: committed(server, "simple") < 0)
    assert committed(server, "og") == 3
    member.close()  # the last member leaves: the group is Empty, its offsets expire in turn
    wait_for(lambda: committed(server, "og") < 0)
    listed = a.list_consumer_groups().result(15).valid
    assert "og" not in {g.group_id for g in listed}
    assert committed(server, "iggy-g") == 1  # an Iggy consumer group shares it: kept
