"""Catch-up reads over Kafka and by timestamp, on a real server with a small page-cache budget
(``[system] write_behind_cache_bytes`` 1 MiB) and a backlog several times larger, its pages then
dropped (``posix_fadvise(DONTNEED)``), so every read of it comes from the disk:

- a Kafka consumer (confluent-kafka) reads the whole backlog from offset 0, every value in order,
  while another client's produce and fetch on another topic keep being answered;
- Kafka ListOffsets by timestamp and Iggy PollMessages by timestamp on the uncached backlog find
  the right offsets and messages;
- each read that waited for storage's worker counts in ``headwater_catchup_reads_total`` and
  ``headwater_catchup_read_bytes_total`` under its protocol label.
"""

from __future__ import annotations

import asyncio
import glob
import os
import threading

import apache_iggy as ig
import pytest

from headwater.storage.local import readahead
from hw_server import ServerProcess, free_port
from test_metrics_endpoint import scrape, value, wait_for_port

pytestmark = pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="needs posix_fadvise")

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")

BACKLOG = 6000  # messages of ~1 KB: about 6 MB, six times the page-cache budget
T0 = 1_700_000_000_000  # Kafka record timestamps of the backlog: T0 + i ms


def value_of(i: int) -> bytes:
    return b"backlog-%05d-" % i + bytes([65 + i % 26]) * 1000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = ServerProcess(tmp_path_factory.mktemp("headwater") / "data", free_port(), free_port())
    # reads through the page cache (catchup_direct_io off): with it on, the workers read 4 MiB and
    # more at a time and hold them, so after the first read the 6 MB backlog is held whole and
    # the later lookups (by timestamp) never wait for a worker; test_catchup_direct.py covers
    # the direct reads, lookups by timestamp included
    s.start(env={"HEADWATER_SYSTEM_WRITE_BEHIND_CACHE_BYTES": str(1 << 20),
                 "HEADWATER_SYSTEM_CATCHUP_DIRECT_IO": "false"})
    wait_for_port(s.http_port)
    yield s
    assert s.stop() == 0, s.log()


def drop_cache(server) -> None:
    """Write every segment file back and drop its pages from the page cache."""
    for path in glob.glob(os.path.join(server.data_dir, "streams", "**", "*.log"), recursive=True):
        if not readahead.evict(path):
            pytest.skip("this filesystem keeps the pages in memory")


def catchup_counts(server, protocol: str) -> tuple[float, float]:
    families = scrape(server)
    try:
        return (value(families, "headwater_catchup_reads_total", protocol=protocol),
                value(families, "headwater_catchup_read_bytes_total", protocol=protocol))
    except KeyError:
        return 0.0, 0.0  # no catch-up read of that protocol yet


@pytest.fixture(scope="module")
def backlog(server):
    """Topic ``backlog`` (one partition): BACKLOG records, value_of(i) at offset i, timestamp T0 + i."""
    admin = kafka.KafkaAdminClient(bootstrap_servers=server.kafka_address)
    admin.create_topics([kafka.admin.NewTopic("backlog", 1, 1), kafka.admin.NewTopic("other", 1, 1)])
    admin.close()
    producer = confluent_kafka.Producer({"bootstrap.servers": server.kafka_address, "linger.ms": 5})
    for i in range(BACKLOG):
        producer.produce("backlog", value_of(i), partition=0, timestamp=T0 + i)
        if i % 500 == 499:
            producer.flush(30)
    assert producer.flush(30) == 0
    return "backlog"


def read_all(server, topic: str, count: int) -> list[bytes]:
    """Every value of partition 0 from offset 0, with confluent-kafka (bounded by polls, not time)."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": server.kafka_address, "group.id": "catchup-reader", "enable.auto.commit": False,
        "fetch.max.bytes": 1 << 20, "max.partition.fetch.bytes": 256 << 10,
    })
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        for _ in range(2000):
            for m in consumer.consume(500, timeout=1.0):
                assert m.error() is None, m.error()
                got.append(m.value())
            if len(got) >= count:
                break
    finally:
        consumer.close()
    return got


def test_a_kafka_consumer_reads_an_uncached_backlog_while_others_are_served(server, backlog):
    drop_cache(server)
    before = catchup_counts(server, "kafka")
    done = threading.Event()
    answered: list[bytes] = []
    failures: list[BaseException] = []

    def other_client() -> None:
        """Produce one record to ``other`` and fetch it back, again and again, until the backlog is read."""
        producer = kafka.KafkaProducer(bootstrap_servers=server.kafka_address, acks=1)
        consumer = kafka.KafkaConsumer(bootstrap_servers=server.kafka_address, enable_auto_commit=False)
        tp = kafka.TopicPartition("other", 0)
        consumer.assign([tp])
        try:
            i = 0
            while not done.is_set() or i < 3:
                sent = b"other-%d" % i
                offset = producer.send("other", sent, partition=0).get(timeout=30).offset
                consumer.seek(tp, offset)
                records = []
                for _ in range(120):  # each poll returns once the record is there
                    records = consumer.poll(timeout_ms=1000).get(tp, [])
                    if records:
                        break
                assert records and records[0].offset == offset and records[0].value == sent
                answered.append(sent)
                i += 1
        except BaseException as e:  # reported by the test's thread
            failures.append(e)
        finally:
            producer.close()
            consumer.close()

    other = threading.Thread(target=other_client)
    other.start()
    try:
        got = read_all(server, backlog, BACKLOG)
    finally:
        done.set()
        other.join(120)
    assert not other.is_alive()
    assert not failures, failures
    assert len(got) == BACKLOG
    assert got == [value_of(i) for i in range(BACKLOG)]  # every value, in order
    assert len(answered) >= 3 and answered == [b"other-%d" % i for i in range(len(answered))]
    after = catchup_counts(server, "kafka")
    assert after[0] > before[0]  # the backlog's reads waited for the worker, not the loop
    assert after[1] > before[1]


def test_list_offsets_by_timestamp_on_an_uncached_backlog(server, backlog):
    drop_cache(server)
    before = catchup_counts(server, "kafka")
    consumer = kafka.KafkaConsumer(bootstrap_servers=server.kafka_address)
    tp = kafka.TopicPartition(backlog, 0)
    try:
        for target in (BACKLOG - 7, 0, 4321):
            found = consumer.offsets_for_times({tp: T0 + target})[tp]
            assert (found.offset, found.timestamp) == (target, T0 + target)
            drop_cache(server)
        assert consumer.offsets_for_times({tp: T0 + BACKLOG})[tp] is None  # past the newest record
    finally:
        consumer.close()
    assert catchup_counts(server, "kafka")[0] > before[0]


def test_iggy_poll_by_timestamp_on_an_uncached_backlog(server):
    async def go() -> None:
        c = ig.IggyClient(ig.TcpConfig(server_address=server.iggy_address,
                                       reconnection=ig.TcpReconnectionConfig(enabled=False)))
        await c.connect()
        await c.login_user("iggy", "iggy")
        await c.create_stream("catchup")
        await c.create_topic("catchup", "t", 1)
        for b in range(60):  # 60 batches of 100 messages of ~1 KB: 6 MB
            await c.send_messages("catchup", "t", 0, [ig.SendMessage(b"b%02d-m%03d-" % (b, m) + b"x" * 1000)
                                                      for m in range(100)])

        async def poll(strategy, count):
            return await c.poll_messages("catchup", "t", consumer=ig.Consumer.Single("ts"), polling_strategy=strategy,
                                         count=count, auto_commit=False, partition_id=0)

        firsts = []  # (offset, timestamp) of each batch's first message
        offset = 0
        while offset < 6000:
            got = await poll(ig.PollingStrategy.Offset(offset), 1000)
            firsts += [(m.offset(), m.timestamp()) for m in got if m.offset() % 100 == 0]
            offset = got[-1].offset() + 1
        assert len(firsts) == 60
        before = catchup_counts(server, "iggy")
        for b in (37, 0, 59, 12):
            drop_cache(server)
            first_offset, stamp = firsts[b]
            got = await poll(ig.PollingStrategy.Timestamp(stamp), 150)
            assert [m.offset() for m in got] == list(range(first_offset, min(first_offset + 150, 6000)))
            assert [m.payload()[:9] for m in got] == [b"b%02d-m%03d-" % divmod(o, 100) for o in
                                                     range(first_offset, min(first_offset + 150, 6000))]
        after = catchup_counts(server, "iggy")
        assert after[0] > before[0] and after[1] > before[1]

    asyncio.run(asyncio.wait_for(go(), 120))
