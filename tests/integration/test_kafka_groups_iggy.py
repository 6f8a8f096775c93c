"""One offset store for both protocols: a Kafka group and an Iggy consumer group of the same
name, on the same topic, read and write the same committed offsets.

Kafka commits the *next* offset to consume; Iggy stores the *last* offset consumed. So a
Kafka commit of N is an Iggy stored offset of N - 1 (and an Iggy ``Next`` poll starts at N),
and an Iggy stored offset of M is a Kafka committed offset of M + 1 (README, "Consumer groups
across Kafka and Iggy").
"""

from __future__ import annotations

import asyncio
import time

import apache_iggy as ig
import pytest

from hw_server import ServerProcess, free_port
from kafka_python_group import subscriber
from headwater.codec.iggy.codes import ConsumerKind
from headwater.codec.iggy.commands import encode_request_body
from headwater.codec.iggy.commands import offsets as wo
from headwater.codec.iggy.primitives import Consumer

KAFKA_STREAM = "kafka"
SESSION_MS = 6000


@pytest.fixture(scope="module")
def gserver(tmp_path_factory):
    base = tmp_path_factory.mktemp("headwater")
    s = ServerProcess(base / "data", free_port(), free_port(),
                      extra_env={"HEADWATER_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0"}).start()
    yield s
    if s.proc is not None:
        rc = s.stop()
        assert rc == 0, f"server exited with {rc} on SIGTERM:\n{s.log()}"


async def iggy_login(server) -> ig.IggyClient:
    c = ig.IggyClient(server.iggy_address)
    await c.connect()
    await c.login_user("iggy", "iggy")
    return c


async def raw(client: ig.IggyClient, request) -> bytes:
    code, body = encode_request_body(request)
    return await client.send_binary_request(int(code), body)


async def iggy_stored(client: ig.IggyClient, group: str, topic: str, partition: int) -> int | None:
    body = await raw(client, wo.GetConsumerOffset(Consumer(ConsumerKind.CONSUMER_GROUP, group), KAFKA_STREAM,
                                                  topic, partition))
    return None if body == b"" else wo.decode_consumer_offset(body).stored_offset


def kafka_setup(server, topic: str, partitions: int, count: int) -> None:
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=server.kafka_address)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()
    p = KafkaProducer(bootstrap_servers=server.kafka_address)
    try:
        for i in range(count):
            p.send(topic, value=b"m%d" % i, partition=i % partitions)
        p.flush(10)
    finally:
        p.close()


def kafka_committed(server, group: str) -> dict[int, tuple[int, str]]:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=server.kafka_address)
    try:
        return {tp.partition: (om.offset, om.metadata) for tp, om in admin.list_group_offsets(group)[group].items()}
    finally:
        admin.close()


def kafka_group_first_offsets(server, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The first offset a new member of Kafka group ``group`` reads from each partition."""
    c = subscriber(topic, bootstrap_servers=server.kafka_address, group_id=group, enable_auto_commit=False,
                   auto_offset_reset="earliest", session_timeout_ms=SESSION_MS, heartbeat_interval_ms=1000)
    first: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 30
        while len(first) < partitions and time.monotonic() < deadline:
            for tp, msgs in c.poll(timeout_ms=300).items():
                first.setdefault(tp.partition, msgs[0].offset)
    finally:
        c.close()
    return first


def test_kafka_commits_are_iggy_stored_offsets(gserver):
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    topic, group = "cross-k2i", "g-cross-k2i"
    kafka_setup(gserver, topic, 2, 20)  # 10 per partition
    # the consumer knows both partitions before it joins (kafka_python_group: without that, its
    # first assignment is empty and kafka-python can lose the rejoin that follows, under load)
    c = subscriber(topic, bootstrap_servers=gserver.kafka_address, group_id=group, enable_auto_commit=False,
                   auto_offset_reset="earliest", session_timeout_ms=SESSION_MS, heartbeat_interval_ms=1000)
    try:
        deadline = time.monotonic() + 30
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(timeout_ms=300)
        assert len(c.assignment()) == 2
        c.commit({TopicPartition(topic, 0): OffsetAndMetadata(7, "from-kafka", -1),
                  TopicPartition(topic, 1): OffsetAndMetadata(3, "", -1)})
    finally:
        c.close()

    async def iggy_side():
        admin = await iggy_login(gserver)
        assert await iggy_stored(admin, group, topic, 0) is None  # no Iggy group of that name yet
        await admin.create_consumer_group(KAFKA_STREAM, topic, group)
        assert await iggy_stored(admin, group, topic, 0) == 6  # Kafka's next offset 7 = last consumed 6
        assert await iggy_stored(admin, group, topic, 1) == 2
        member = await iggy_login(gserver)
        await member.join_consumer_group(KAFKA_STREAM, topic, group)
        got = await member.poll_messages(KAFKA_STREAM, topic, consumer=ig.Consumer.Group(group),
                                         polling_strategy=ig.PollingStrategy.Next(), count=100,
                                         auto_commit=True, partition_id=0)
        assert [m.offset() for m in got] == [7, 8, 9]  # Next resumes after the Kafka commit
        assert [m.payload() for m in got] == [b"m14", b"m16", b"m18"]
        assert await iggy_stored(admin, group, topic, 0) == 9

    asyncio.run(iggy_side())
    # ... and the Iggy consumer's auto-commit is Kafka's committed offset 10 (Iggy keeps no metadata)
    assert kafka_committed(gserver, group) == {0: (10, ""), 1: (3, "")}


def test_iggy_stored_offsets_are_kafka_commits(gserver):
    topic, group = "cross-i2k", "g-cross-i2k"
    kafka_setup(gserver, topic, 2, 20)

    async def iggy_side():
        admin = await iggy_login(gserver)
        await admin.create_consumer_group(KAFKA_STREAM, topic, group)
        member = await iggy_login(gserver)
        await member.join_consumer_group(KAFKA_STREAM, topic, group)  # alone: owns both partitions
        g = Consumer(ConsumerKind.CONSUMER_GROUP, group)
        await raw(member, wo.StoreConsumerOffset(g, KAFKA_STREAM, topic, 0, 4))
        await raw(member, wo.StoreConsumerOffset(g, KAFKA_STREAM, topic, 1, 0))
        await member.leave_consumer_group(KAFKA_STREAM, topic, group)

    asyncio.run(iggy_side())
    assert kafka_committed(gserver, group) == {0: (5, ""), 1: (1, "")}
    # a Kafka consumer of the same group name starts after what the Iggy group consumed
    assert kafka_group_first_offsets(gserver, group, topic, 2) == {0: 5, 1: 1}

    # and a Kafka DeleteGroups removes the offsets the Iggy group sees
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=gserver.kafka_address)
    try:
        assert admin.delete_groups([group]) == {group: "OK"}
    finally:
        admin.close()

    async def after_delete():
        c = await iggy_login(gserver)
        assert await iggy_stored(c, group, topic, 0) is None
        assert (await c.get_consumer_group(KAFKA_STREAM, topic, group)).name == group  # the Iggy group stays

    asyncio.run(after_delete())


def test_an_iggy_only_group_is_listed_and_described_by_kafka(gserver):
    from kafka.admin import KafkaAdminClient

    topic, group = "cross-list", "g-cross-list"
    kafka_setup(gserver, topic, 1, 5)

    async def iggy_side():
        c = await iggy_login(gserver)
        await c.create_consumer_group(KAFKA_STREAM, topic, group)
        await c.join_consumer_group(KAFKA_STREAM, topic, group)
        got = await c.poll_messages(KAFKA_STREAM, topic, consumer=ig.Consumer.Group(group),
                                    polling_strategy=ig.PollingStrategy.Next(), count=2, auto_commit=True,
                                    partition_id=0)
        assert [m.offset() for m in got] == [0, 1]

    asyncio.run(iggy_side())
    admin = KafkaAdminClient(bootstrap_servers=gserver.kafka_address)
    try:
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert (listed[group]["group_state"], listed[group]["protocol_type"]) == ("Empty", "")
        d = admin.describe_groups([group])[group]
        assert (d["group_state"], d["members"], d["error"]) == ("Empty", [], None)
        assert {tp.partition: om.offset for tp, om in admin.list_group_offsets(group)[group].items()} == {0: 2}
    finally:
        admin.close()
