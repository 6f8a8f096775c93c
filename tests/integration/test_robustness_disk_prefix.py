"""A batch damaged at rest in the middle of a segment, on a real server: the valid prefix is
served, the damage fails closed with its own code, everything else keeps being served.

Messages are written with the Iggy SDK into two Kafka topics (partitions of the ``kafka``
stream), the server is stopped, one byte inside a batch in the middle of the first segment of
``prefix`` partition 0 is flipped (the batch found by walking the file with our batch codec; an
index entry lies after it, so boot recovery does not walk over it and the partition is not
fenced), and the server is started again. Then, with raw frames, apache-iggy, kafka-python,
confluent-kafka and raw Kafka Fetch requests:

- a read from offset 0 returns exactly the batches before the damage, byte for byte as stored;
- a read at or past the damaged batch's first offset, up to its last, fails: Iggy 4027
  InvalidMessageChecksum, Kafka Fetch CORRUPT_MESSAGE (2) for that partition only;
- reads after the damaged batch, the other partition and the other topic are served whole;
  the server keeps serving (and logs the damage once, not once per request).
"""

from __future__ import annotations

import glob
import os

import apache_iggy as ig
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.errors import CorruptRecordError

from headwater.codec import batch as batch_codec
from headwater.codec.iggy.commands import messages as wm
from kafka_wire import KafkaWire
from test_kafka_transactions import admin_create
from test_kafka_wire import FETCH, fetch_request, req
from test_robustness_disk import flip, index_positions
from test_robustness_wire import Raw, healthy, poll_body, run, sdk_client

BATCHES = 40  # per partition, 3 messages each
INVALID_MESSAGE_CHECKSUM = 4027
CORRUPT_MESSAGE = 2


def value(topic: str, p: int, b: int, m: int) -> bytes:
    return b"%s-p%d-b%d-m%d-" % (topic.encode(), p, b, m) + b"v" * 60


async def _fill(server) -> dict:
    c = await sdk_client(server)
    ids = {}
    for topic, partitions in (("prefix", 2), ("other", 1)):
        for p in range(partitions):
            for b in range(BATCHES):
                await c.send_messages("kafka", topic, p, [ig.SendMessage(value(topic, p, b, m)) for m in range(3)])
        ids[topic] = (await c.get_topic("kafka", topic)).id
    stream = (await c.get_stream("kafka")).id
    return {t: (stream, i) for t, i in ids.items()}


def partition_log(server, ids, topic: str, p: int) -> str:
    stream, topic_id = ids[topic]
    d = os.path.join(server.data_dir, "streams", str(stream), "topics", str(topic_id), "partitions", str(p))
    return sorted(glob.glob(os.path.join(d, "*.log")))[0]


def stored_batches(log: str) -> list[tuple[int, bytes]]:
    """(byte position, bytes) of every batch in a segment file, walked with our batch codec."""
    data = open(log, "rb").read()
    out, pos = [], 0
    for b in batch_codec.split_batches(data):
        out.append((pos, bytes(b)))
        pos += len(b)
    assert pos == len(data)
    return out


def frames_of(batches: bytes) -> list[tuple[int, bytes]]:
    out = []
    for b in batch_codec.split_batches(batches):
        h = batch_codec.read_header(b)
        out += [(h.base_offset + f.offset_delta, bytes(f.payload)) for f in batch_codec.iter_frames(b)]
    return out


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """A server whose ``prefix`` partition 0 has batch ``k`` (offsets 3k..3k+2) damaged on disk;
    yields (server, k, the batches as stored before the damage, acked values)."""
    from hw_server import ServerProcess, free_port

    server = ServerProcess(tmp_path_factory.mktemp("prefix") / "data", free_port(), free_port()).start()
    try:
        admin_create(server, "prefix", partitions=2)
        admin_create(server, "other", partitions=1)
        ids = run(_fill(server))
        assert server.stop() == 0
        log = partition_log(server, ids, "prefix", 0)
        batches = stored_batches(log)
        assert len(batches) == BATCHES  # one segment
        k = BATCHES // 3
        position, damaged_batch = batches[k]
        assert batch_codec.read_header(damaged_batch).base_offset == 3 * k
        # an index entry after the damaged batch: recovery starts its walk past it (no fence)
        assert max(index_positions(log)) > position + len(damaged_batch)
        flip(log, position + 256 + 48 + 3)  # a payload byte of its first message
        server.start()
        yield server, k, batches
    finally:
        if server.proc is not None:
            assert server.stop() == 0, server.log()


def test_raw_polls_serve_the_prefix_byte_for_byte_and_refuse_the_damage(damaged):
    server, k, batches = damaged
    with Raw(server.iggy_address) as r:
        r.login()
        kind, status, body = r.call(100, poll_body("kafka", "prefix", 0, 0, 100_000))
        assert (kind, status) == ("reply", 0)
        _, got = wm.decode_poll_reply(body)
        assert bytes(got) == b"".join(b for _, b in batches[:k])  # exactly the batches before it, unchanged
        for start in (1, 3 * k - 1):  # from inside the prefix: up to the damage (the first batch sliced)
            kind, status, body = r.call(100, poll_body("kafka", "prefix", 0, start, 100_000))
            assert (kind, status) == ("reply", 0)
            assert [o for o, _ in frames_of(wm.decode_poll_reply(body)[1])] == list(range(start, 3 * k))
        for start in (3 * k, 3 * k + 1, 3 * k + 2):  # the damaged batch: refused, for every count
            for count in (1, 100_000):
                assert r.call(100, poll_body("kafka", "prefix", 0, start, count))[:2] == (
                    "reply", INVALID_MESSAGE_CHECKSUM), (start, count)
        kind, status, body = r.call(100, poll_body("kafka", "prefix", 0, 3 * k + 3, 100_000))
        assert (kind, status) == ("reply", 0)
        assert bytes(wm.decode_poll_reply(body)[1]) == b"".join(b for _, b in batches[k + 1:])  # after it: whole
        for topic, p in (("prefix", 1), ("other", 0)):
            kind, status, body = r.call(100, poll_body("kafka", topic, p, 0, 100_000))
            assert (kind, status) == ("reply", 0)
            assert frames_of(wm.decode_poll_reply(body)[1]) == [
                (3 * b + m, value(topic, p, b, m)) for b in range(BATCHES) for m in range(3)]
    assert server.log().count("damaged data refused") == 1  # once a minute per partition, not per request
    healthy(server)


def test_the_iggy_sdk_polls_the_prefix_and_gets_the_checksum_error(damaged):
    server, k, _ = damaged

    async def polls():
        c = await sdk_client(server)
        got = []
        offset = 0
        while True:  # a consumer following the partition: stops at the damage
            try:
                msgs = await c.poll_messages("kafka", "prefix", consumer=ig.Consumer.Single(1), partition_id=0,
                                             polling_strategy=ig.PollingStrategy.Offset(offset), count=7,
                                             auto_commit=False)
            except RuntimeError as e:
                return got, offset, str(e)
            assert msgs, offset  # never an empty answer before the damage
            got += [(m.offset(), m.payload()) for m in msgs]
            offset = got[-1][0] + 1

    got, stopped_at, error = run(polls())
    assert got == [(3 * b + m, value("prefix", 0, b, m)) for b in range(k) for m in range(3)]
    assert stopped_at == 3 * k
    assert "4027" in error or "checksum" in error.lower(), error

    async def others():
        c = await sdk_client(server)
        after = await c.poll_messages("kafka", "prefix", consumer=ig.Consumer.Single(1), partition_id=0,
                                      polling_strategy=ig.PollingStrategy.Offset(3 * k + 3), count=1000,
                                      auto_commit=False)
        p1 = await c.poll_messages("kafka", "prefix", consumer=ig.Consumer.Single(1), partition_id=1,
                                   polling_strategy=ig.PollingStrategy.First(), count=1000, auto_commit=False)
        return [m.payload() for m in after], [m.payload() for m in p1]

    after, p1 = run(others())
    assert after == [value("prefix", 0, b, m) for b in range(k + 1, BATCHES) for m in range(3)]
    assert p1 == [value("prefix", 1, b, m) for b in range(BATCHES) for m in range(3)]


def test_a_kafka_fetch_gets_corrupt_message_for_that_partition_only(damaged):
    server, k, _ = damaged
    w = KafkaWire(server.kafka_address)
    try:
        for version in (4, 12):
            resp = w.call(FETCH, version, _fetch_both(version, 3 * k))
            by_partition = {p.partition_index: p for p in resp.responses[0].partitions}
            assert by_partition[0].error_code == CORRUPT_MESSAGE and not by_partition[0].records
            assert by_partition[0].high_watermark == 3 * BATCHES  # the partition itself is not fenced
            assert by_partition[1].error_code == 0 and by_partition[1].records  # the same Fetch, served
            ok = w.call(FETCH, version, fetch_request(version, "prefix", 0)).responses[0].partitions[0]
            assert ok.error_code == 0 and ok.records
    finally:
        w.close()


def _fetch_both(version: int, offset0: int):
    """One Fetch of ``prefix`` partitions 0 (at ``offset0``) and 1 (at 0)."""
    import datetime

    parts = tuple(req(FETCH, version, "FetchPartition", partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
                  for p, o in ((0, offset0), (1, 0)))
    ft = req(FETCH, version, "FetchTopic", topic="prefix", partitions=parts)
    fields = dict(max_wait=datetime.timedelta(milliseconds=0), min_bytes=1, max_bytes=1 << 24, isolation_level=0,
                  topics=(ft,))
    if version >= 7:
        fields.update(session_id=0, session_epoch=-1, forgotten_topics_data=())
    fields["replica_id"] = -1
    return req(FETCH, version, **fields)


def test_kafka_python_reads_the_prefix_then_gets_corrupt_record_error(damaged):
    server, k, _ = damaged
    consumer = KafkaConsumer(bootstrap_servers=server.kafka_address, enable_auto_commit=False,
                             group_id=None)
    try:
        tp = KTopicPartition("prefix", 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = []
        with pytest.raises(CorruptRecordError):
            while True:
                batch = consumer.poll(timeout_ms=10_000)
                records = batch.get(tp, [])
                assert records or got, "nothing before the damage"
                got += [(r.offset, r.value) for r in records]
                assert len(got) <= 3 * k
        assert got == [(3 * b + m, value("prefix", 0, b, m)) for b in range(k) for m in range(3)]
        assert consumer.position(tp) == 3 * k
    finally:
        consumer.close()


def test_confluent_kafka_reads_the_prefix_then_gets_the_error(damaged):
    server, k, _ = damaged
    consumer = Consumer({"bootstrap.servers": server.kafka_address, "group.id": "prefix-reader",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition("prefix", 0, 0), TopicPartition("other", 0, 0)])
        got: dict[str, list] = {"prefix": [], "other": []}
        error = None
        other_done = False
        for _ in range(200):  # polls, not a clock: the loop ends when both outcomes are in
            msg = consumer.poll(5.0)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    assert msg.topic() == "other", (msg.topic(), msg.partition(), msg.offset())
                    other_done = True
                else:
                    assert msg.topic() == "prefix" and msg.partition() == 0, msg.error()
                    error = msg.error()
            else:
                got[msg.topic()].append((msg.offset(), msg.value()))
            if error is not None and other_done:
                break
        assert error is not None and error.code() == CORRUPT_MESSAGE, error
        assert got["prefix"] == [(3 * b + m, value("prefix", 0, b, m)) for b in range(k) for m in range(3)]
        assert got["other"] == [(3 * b + m, value("other", 0, b, m)) for b in range(BATCHES) for m in range(3)]
    finally:
        consumer.close()


def test_the_server_keeps_serving_writes_and_reads(damaged):
    server, _, _ = damaged

    async def write_and_read():
        c = await sdk_client(server)
        await c.send_messages("kafka", "prefix", 0, [ig.SendMessage(b"after-the-damage")])
        got = await c.poll_messages("kafka", "prefix", consumer=ig.Consumer.Single(1), partition_id=0,
                                    polling_strategy=ig.PollingStrategy.Offset(3 * BATCHES), count=10,
                                    auto_commit=False)
        return [(m.offset(), m.payload()) for m in got]

    assert run(write_and_read()) == [(3 * BATCHES, b"after-the-damage")]
    healthy(server)
