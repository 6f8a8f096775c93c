"""Compacted topics end to end: real Kafka clients and the Iggy SDK against a real server.

The server's cleaner runs every 0.1 s (``HEADWATER_COMPACTION_INTERVAL_S``) and the
topics roll segments after 300 ms (``segment.ms``), so compaction happens in seconds.
Waits are bounded loops on a condition (a deadline only stops a broken server).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import apache_iggy as ig
import pytest

from hw_server import ServerProcess, free_port
from test_hostile_connections import wait_for

CLEANER_ENV = {"HEADWATER_COMPACTION_INTERVAL_S": "0.1"}
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.ms": "300",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1500",
}
DEADLINE_S = 30


@pytest.fixture(scope="module")
def cserver(tmp_path_factory):
    base = tmp_path_factory.mktemp("headwater")
    s = ServerProcess(base / "data", free_port(), free_port(), extra_env=CLEANER_ENV).start()
    yield s
    if s.proc is not None:
        assert s.stop() == 0, s.log()


def create_topic(server, name: str, configs: dict, partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    a = AdminClient({"bootstrap.servers": server.kafka_address})
    for f in a.create_topics([NewTopic(name, partitions, 1, config=configs)]).values():
        f.result(10)


def produce(server, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> list[int]:
    """confluent-kafka; returns the acknowledged offsets in order."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": server.kafka_address, "linger.ms": 5})
    got: dict[int, int] = {}
    errors = []

    def done(i):
        def cb(err, msg):
            if err is not None:
                errors.append(err)
            else:
                got[i] = msg.offset()
        return cb

    for i, (k, v) in enumerate(records):
        p.produce(topic, key=k, value=v, on_delivery=done(i))
    p.flush(20)
    assert not errors, errors
    return [got[i] for i in range(len(records))]


def read_all(server, topic: str, isolation: str = "read_uncommitted") -> list[tuple[int, bytes, bytes | None]]:
    """Every record from offset 0 (confluent-kafka, ``isolation.level``), up to the end offset."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": server.kafka_address, "group.id": f"r{time.monotonic_ns()}",
                  "enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": isolation})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out = []
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    return out
                raise AssertionError(m.error())
            out.append((m.offset(), m.key(), m.value()))
        raise AssertionError("no end of partition")
    finally:
        c.close()


def wait_until(what: str, check):
    return wait_for(check, DEADLINE_S, what)


def rounds(keys: int, n: int, start: int = 0):
    return [(b"key-%d" % k, b"value-%d-%d" % (k, r)) for r in range(start, start + n) for k in range(keys)]


def test_changelog_compacted_while_consumers_read(cserver):
    topic = "changelog"
    create_topic(cserver, topic, COMPACTED)
    written: dict[int, tuple[bytes, bytes | None]] = {}
    seen_by_reader: list[tuple[int, bytes, bytes]] = []
    stop = threading.Event()

    def kafka_python_reader():  # reads the changelog from the start while it is compacted
        from kafka import KafkaConsumer, TopicPartition

        c = KafkaConsumer(bootstrap_servers=cserver.kafka_address, enable_auto_commit=False, fetch_max_wait_ms=100)
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, 0)
            while not stop.is_set():
                for records in c.poll(200).values():
                    seen_by_reader.extend((r.offset, r.key, r.value) for r in records)
        finally:
            c.close()

    reader = threading.Thread(target=kafka_python_reader)
    reader.start()
    try:
        for r in range(8):  # 8 rounds of 40 keys, each round in a new segment (segment.ms)
            batch = rounds(40, 1, r)
            if r == 0:
                batch.append((b"gone", b"soon deleted"))
            if r == 5:
                batch.append((b"gone", None))  # its tombstone; the key is never written again
            for off, rec in zip(produce(cserver, topic, batch), batch):
                written[off] = rec
            time.sleep(0.35)
        last_offset = max(written)
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        for off in sorted(written):
            latest[written[off][0]] = (off, written[off][1])

        def compacted():
            got = read_all(cserver, topic)
            return got if len(got) < len(written) * 0.5 else None

        got = wait_until("compaction", compacted)
        wait_until("the reader to reach the end", lambda: seen_by_reader and seen_by_reader[-1][0] >= last_offset)
    finally:
        stop.set()
        reader.join(10)
    # offsets are preserved: every record read is the one acknowledged at that offset
    assert all(written[o] == (k, v) for o, k, v in got)
    assert [o for o, *_ in got] == sorted(o for o, *_ in got)
    # the newest value of every key is there, at its offset
    stored = {o: (k, v) for o, k, v in got}
    for key, (off, value) in latest.items():
        if value is not None:
            assert stored[off] == (key, value)
    # the reader that raced the cleaner saw increasing offsets, each the acknowledged record,
    # and ended with the newest value per key
    offsets = [o for o, *_ in seen_by_reader]
    assert offsets == sorted(set(offsets))
    assert all(written[o] == (k, v) for o, k, v in seen_by_reader)
    final = {}
    for o, k, v in seen_by_reader:
        final[k] = v
    # a reader lagging more than delete.retention.ms may miss the tombstone (as in Kafka),
    # but never ends with the value it deleted
    assert final.pop(b"gone", None) is None
    assert final == {k: v for k, (_, v) in latest.items() if k != b"gone"}

    # the tombstone goes once delete.retention.ms passed (more rounds keep the cleaner busy)
    def tombstone_gone():
        produce(cserver, topic, rounds(40, 1, 99))
        time.sleep(0.35)
        return all(k != b"gone" for _, k, _ in read_all(cserver, topic))

    wait_until("the tombstone's removal", tombstone_gone)

    # Iggy SDK: a poll steps over the gaps; count counts messages, offsets are the Kafka ones
    async def iggy_side():
        c = ig.IggyClient(cserver.iggy_address)
        await c.connect()
        await c.login_user("iggy", "iggy")
        kafka_view = read_all(cserver, topic)
        first = await c.poll_messages("kafka", topic, consumer=ig.Consumer.Single(7),
                                      polling_strategy=ig.PollingStrategy.First(), count=10_000,
                                      auto_commit=False, partition_id=0)
        assert [m.offset() for m in first] == [o for o, *_ in kafka_view]
        walked = []
        for _ in range(len(kafka_view)):  # Next with auto-commit, 7 at a time, across the gaps
            msgs = await c.poll_messages("kafka", topic, consumer=ig.Consumer.Single(8),
                                         polling_strategy=ig.PollingStrategy.Next(), count=7,
                                         auto_commit=True, partition_id=0)
            if not msgs:
                break
            assert len(msgs) == min(7, len(kafka_view) - len(walked))
            walked += [m.offset() for m in msgs]
        assert walked == [o for o, *_ in kafka_view]

    asyncio.run(iggy_side())


def test_aborted_transaction_shadows_nothing(cserver):
    """A record an aborted transaction wrote (a newer value, a tombstone) never makes the
    cleaner remove a committed value: read_committed and Iggy polls still see it."""
    from confluent_kafka import Producer

    topic = "aborted-shadow"
    create_topic(cserver, topic, COMPACTED)
    produce(cserver, topic, [(b"K", b"v1"), (b"J", b"j1"), (b"old", b"o1"), (b"old", b"o2")])
    t = Producer({"bootstrap.servers": cserver.kafka_address, "transactional.id": f"tid-{topic}"})
    t.init_transactions(10)
    t.begin_transaction()
    t.produce(topic, key=b"K", value=b"v2-aborted")
    t.produce(topic, key=b"J", value=None)  # an aborted tombstone
    t.flush(10)
    t.abort_transaction(10)
    produce(cserver, topic, [(b"old", b"o3")])  # after the abort marker
    # o2 goes only in a pass whose map holds o3: every record before o3 has been cleaned by then
    wait_until("o1 and o2 compacted away",
               lambda: not any(v in (b"o1", b"o2") for _, _, v in read_all(cserver, topic)))
    expected = [(b"K", b"v1"), (b"J", b"j1"), (b"old", b"o3")]
    assert [(k, v) for _, k, v in read_all(cserver, topic, "read_committed")] == expected

    async def iggy_side():
        c = ig.IggyClient(cserver.iggy_address)
        await c.connect()
        await c.login_user("iggy", "iggy")
        msgs = await c.poll_messages("kafka", topic, consumer=ig.Consumer.Single(1), partition_id=0,
                                     polling_strategy=ig.PollingStrategy.First(), count=100, auto_commit=False)
        return [m.payload() for m in msgs]

    assert asyncio.run(iggy_side()) == [v for _, v in expected]


def test_keyless_records_refused_on_a_compacted_topic(cserver):
    from confluent_kafka import KafkaError, Producer

    topic = "compacted-keys"
    create_topic(cserver, topic, {"cleanup.policy": "compact,delete"})
    p = Producer({"bootstrap.servers": cserver.kafka_address, "retries": 0})
    results = []
    p.produce(topic, key=None, value=b"no key", on_delivery=lambda err, msg: results.append(err))
    p.flush(10)
    assert results[0] is not None and results[0].code() == KafkaError.INVALID_RECORD
    assert produce(cserver, topic, [(b"k", b"keyed")]) == [0]

    # Iggy: a message with neither a kafka.key header nor an id is refused (InvalidFormat, 4)
    from test_iggy_raw import RawConnection, batch_codec, wm, Partitioning

    with RawConnection(cserver.iggy_address) as conn:
        conn.login()
        keyless = batch_codec.build_batch([batch_codec.Message(b"keyed by id", id=5), batch_codec.Message(b"none")])
        answer = conn.call_request(wm.SendMessages("kafka", topic, Partitioning.by_partition(0), 2, memoryview(keyless)))
        assert answer.status == 4

    async def iggy_side():  # the SDK gives every message an id: its key
        c = ig.IggyClient(cserver.iggy_address)
        await c.connect()
        await c.login_user("iggy", "iggy")
        await c.send_messages("kafka", topic, 0, [ig.SendMessage(b"id as key", id=42)])
        await c.send_messages("kafka", topic, 0, [ig.SendMessage(b"kafka key", user_headers={"kafka.key": "k"})])

    asyncio.run(iggy_side())
    assert [(o, k, v) for o, k, v in read_all(cserver, topic)] == [
        (0, b"k", b"keyed"), (1, None, b"id as key"), (2, b"k", b"kafka key")
    ]


def test_topic_configs_kafka_accepts(cserver):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    from kafka_wire import KafkaWire
    from test_kafka_wire import fetch_request

    topic = "configs-accepted"
    create_topic(cserver, topic, {"compression.type": "gzip", "delete.retention.ms": "1000",
                                  "message.format.version": "2.8-IV1", "cleanup.policy": "delete"})
    a = AdminClient({"bootstrap.servers": cserver.kafka_address})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)

    def described():
        return {k: v.value for k, v in a.describe_configs([res])[res].result(10).items()}

    d = described()
    assert (d["compression.type"], d["delete.retention.ms"], d["message.format.version"]) == ("gzip", "1000", "2.8-IV1")
    for op, value, expected in ((AlterConfigOpType.APPEND, "compact", "delete,compact"),
                                (AlterConfigOpType.SUBTRACT, "delete", "compact")):
        res.incremental_configs = [ConfigEntry("cleanup.policy", value, incremental_operation=op)]
        a.incremental_alter_configs([res])[res].result(10)
        assert described()["cleanup.policy"] in (expected, ",".join(sorted(expected.split(","))))
    res.incremental_configs = [ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SUBTRACT)]
    with pytest.raises(Exception, match="INVALID_CONFIG|empty"):
        a.incremental_alter_configs([res])[res].result(10)

    # compression.type honoured: the producer sends uncompressed, a fetch gets gzip batches
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": cserver.kafka_address, "compression.type": "none"})
    p.produce(topic, key=b"k", value=b"v" * 1000)
    p.flush(10)
    w = KafkaWire(cserver.kafka_address)
    try:
        part = w.call(1, 12, fetch_request(12, topic, 0)).responses[0].partitions[0]
    finally:
        w.close()
    records = bytes(part.records)
    assert part.error_code == 0 and int.from_bytes(records[21:23], "big") & 0x07 == 1  # gzip
    assert b"v" * 100 not in records
    assert read_all(cserver, topic) == [(0, b"k", b"v" * 1000)]


def test_killed_mid_compaction_restarts_with_a_valid_log(tmp_path_factory):
    base = tmp_path_factory.mktemp("headwater")
    s = ServerProcess(base / "data", free_port(), free_port(), extra_env=CLEANER_ENV).start()
    try:
        topic = "killed"
        create_topic(s, topic, {**COMPACTED, "segment.ms": "200"})
        written = {}
        for r in range(6):
            batch = [(b"key-%d" % k, b"%d-%d-" % (k, r) + b"x" * 2000) for k in range(300)]
            for off, rec in zip(produce(s, topic, batch), batch):
                written[off] = rec
            time.sleep(0.25)
        produce(s, topic, [(b"last", b"roll")])  # rolls the last round into a sealed segment
        part_dir = next(os.path.join(d, f) for d, subs, fs in os.walk(s.data_dir) for f in subs if f == "0"
                        and any(n.endswith(".log") for n in os.listdir(os.path.join(d, f))))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # kill the moment a pass has files in flight (or after 10 s)
            if any(n.endswith((".cleaned", ".swap")) for n in os.listdir(part_dir)):
                break
            time.sleep(0.0005)
        s.kill()
        # restarted with the cleaner asleep: a .cleaned/.swap file now can only be one recovery
        # left behind, not a new pass's (a 0.1 s cleaner may start one before the listing)
        s.start(env={"HEADWATER_COMPACTION_INTERVAL_S": "3600"})
        assert not [n for n in os.listdir(part_dir) if n.endswith((".cleaned", ".swap"))]
        got = read_all(s, topic)
        assert all(written.get(o, (b"last", b"roll")) == (k, v) for o, k, v in got)
        latest = {}
        for off in sorted(written):
            latest[written[off][0]] = off
        assert set(latest.values()) <= {o for o, *_ in got}
    finally:
        if s.proc is not None:
            assert s.stop() == 0, s.log()
