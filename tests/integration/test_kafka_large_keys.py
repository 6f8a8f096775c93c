"""Keys and headers larger than Iggy's 100 000-byte user-headers cap, in both protocols."""

from __future__ import annotations

import asyncio

import apache_iggy as ig

from test_kafka_compaction import read_all

KEY = bytes(range(256)) * 386 + b"k" * 184  # 99 000 bytes
HEADERS = [("big-1", b"a" * 60_000), ("big-2", b"b" * 60_000), ("small", b"s")]


def zigzag(n: int) -> bytes:
    v = (n << 1) ^ (n >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def test_a_99000_byte_key_and_large_headers_round_trip(server):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from kafka import KafkaProducer

    topic = "large-keys"
    p = Producer({"bootstrap.servers": server.kafka_address})
    errors = []
    p.produce(topic, key=KEY, value=None, on_delivery=lambda err, msg: errors.append(err))
    p.flush(10)
    assert errors == [None]
    kp = KafkaProducer(bootstrap_servers=server.kafka_address, max_request_size=1 << 20)
    try:
        assert kp.send(topic, key=b"small", value=b"v", headers=HEADERS).get(10).offset == 1
    finally:
        kp.close()

    c = Consumer({"bootstrap.servers": server.kafka_address, "group.id": "large", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        while len(got) < 2:
            m = c.poll(5)
            assert m is not None and not m.error(), m and m.error()
            got.append(m)
    finally:
        c.close()
    assert (got[0].key(), got[0].value(), got[0].headers()) == (KEY, None, None)
    assert (got[1].key(), got[1].value(), got[1].headers()) == (b"small", b"v", HEADERS)

    async def iggy_side():
        c = ig.IggyClient(server.iggy_address)
        await c.connect()
        await c.login_user("iggy", "iggy")
        msgs = await c.poll_messages("kafka", topic, consumer=ig.Consumer.Single(1),
                                     polling_strategy=ig.PollingStrategy.First(), count=10,
                                     auto_commit=False, partition_id=0)
        # over Iggy the key (and the headers) lead the payload; kafka.prefix says how many bytes
        h = msgs[0].user_headers().to_scalar_dict()
        assert h["kafka.prefix"] == len(msgs[0].payload()) and h["kafka.flags"] == 1
        assert msgs[0].payload() == zigzag(len(KEY)) + KEY + zigzag(0)
        h1 = msgs[1].user_headers().to_scalar_dict()
        assert msgs[1].payload()[h1["kafka.prefix"]:] == b"v"
        # an Iggy producer carries a large key the same way
        prefix = zigzag(len(KEY)) + KEY + zigzag(0)
        await c.send_messages("kafka", topic, 0, [ig.SendMessage(
            prefix + b"from iggy", user_headers={"kafka.prefix": ig.HeaderValue.UnsignedInt32(len(prefix))})])

    asyncio.run(iggy_side())
    last = read_all(server, topic)[-1]
    assert last == (2, KEY, b"from iggy")
