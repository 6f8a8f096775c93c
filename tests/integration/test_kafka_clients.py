"""Real Kafka clients against a real ``headwater serve``: kcat, kafka-python, aiokafka, confluent-kafka.

Every client produces and consumes with every compression codec, headers,
null keys and values; acks 0/1/all; seeks to offsets and timestamps.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time

import pytest

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
KCAT = shutil.which("kcat")


def kcat(server, *args: str, stdin: bytes | None = None, timeout: float = 30) -> str:
    proc = subprocess.run(
        [KCAT, "-b", server.kafka_address, *args], input=stdin, capture_output=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc.stdout.decode()


# --------------------------------------------------------------------------- kcat (librdkafka 2.0.2)


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (.ci/run installs it as root)")
def test_kcat_metadata_produce_consume_every_codec(server):
    for codec in CODECS:
        lines = b"".join(b"key-%d:%s-value-%d\n" % (i, codec.encode(), i) for i in range(3))
        kcat(server, "-P", "-t", "kcat-codecs", "-K:", "-z", codec, "-H", f"codec={codec}", "-H", "n=1", stdin=lines)
    out = kcat(server, "-C", "-t", "kcat-codecs", "-o", "beginning", "-e", "-f", "%p|%o|%k|%s|%h\n")
    expected = [
        f"0|{n * 3 + i}|key-{i}|{codec}-value-{i}|codec={codec},n=1"
        for n, codec in enumerate(CODECS)
        for i in range(3)
    ]
    assert out.splitlines() == expected
    meta = kcat(server, "-L", "-t", "kcat-codecs")
    assert 'topic "kcat-codecs" with 1 partitions' in meta
    assert f"broker 1 at {server.kafka_address}" in meta


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (.ci/run installs it as root)")
def test_kcat_acks_offsets_and_null_values(server):
    kcat(server, "-P", "-t", "kcat-acks", "-X", "acks=0", stdin=b"zero\n")
    kcat(server, "-P", "-t", "kcat-acks", "-X", "acks=1", stdin=b"one\n")
    kcat(server, "-P", "-t", "kcat-acks", "-X", "acks=all", "-X", "enable.idempotence=true", stdin=b"all\n")
    kcat(server, "-P", "-t", "kcat-acks", "-K:", "-Z", stdin=b"tomb:\n")  # -Z: empty value is NULL
    out = kcat(server, "-C", "-t", "kcat-acks", "-o", "1", "-e", "-f", "%o:%k:%s:%S\n")
    assert out.splitlines() == ["1::one:3", "2::all:3", "3:tomb::-1"]


# --------------------------------------------------------------------------- kafka-python 3.x


def _kp_records(topic: str, server, start: int = 0, count: int | None = None, **kw):
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=server.kafka_address, enable_auto_commit=False, consumer_timeout_ms=3000, **kw)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, start)
        out = []
        for m in c:
            out.append(m)
            if count is not None and len(out) >= count:
                break
        return out
    finally:
        c.close()


def test_kafka_python_defaults_every_codec(server):
    from kafka import KafkaProducer

    for codec in CODECS:
        p = KafkaProducer(bootstrap_servers=server.kafka_address, compression_type=None if codec == "none" else codec)
        try:
            assert p.config["enable_idempotence"] is True  # kafka-python 3 default: needs InitProducerId
            futures = [
                p.send("kp-codecs", key=b"k", value=b"v-" + codec.encode(), headers=[("a", b"1"), ("a", b"2"), ("n", b"")]),
                p.send("kp-codecs", key=None, value=b"no-key"),
                p.send("kp-codecs", key=b"tombstone", value=None),
                p.send("kp-codecs", key=b"", value=b""),
            ]
            p.flush(10)
            offsets = [f.get(10).offset for f in futures]
        finally:
            p.close()
        assert offsets == list(range(offsets[0], offsets[0] + 4))
    got = _kp_records("kp-codecs", server)
    assert [m.offset for m in got] == list(range(4 * len(CODECS)))
    for n, codec in enumerate(CODECS):
        m = got[4 * n : 4 * n + 4]
        assert (m[0].key, m[0].value, m[0].headers) == (b"k", b"v-" + codec.encode(), [("a", b"1"), ("a", b"2"), ("n", b"")])
        assert (m[1].key, m[1].value) == (None, b"no-key")
        assert (m[2].key, m[2].value) == (b"tombstone", None)
        assert (m[3].key, m[3].value) == (b"", b"")


def test_kafka_python_acks_and_seek_by_offset_and_time(server):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    base = int(time.time() * 1000) - 3_600_000  # one hour ago, 10 s apart
    for acks in (0, 1, "all"):
        p = KafkaProducer(bootstrap_servers=server.kafka_address, acks=acks, enable_idempotence=acks == "all")
        try:
            for i in range(3):
                p.send("kp-time", value=b"%s-%d" % (str(acks).encode(), i), timestamp_ms=base + len(str(acks)) * 100_000 + i * 10_000)
            p.flush(10)
        finally:
            p.close()
    got = _kp_records("kp-time", server)
    assert [m.value for m in got] == [b"0-0", b"0-1", b"0-2", b"1-0", b"1-1", b"1-2", b"all-0", b"all-1", b"all-2"]
    assert [m.timestamp for m in got[:3]] == [base + 100_000, base + 110_000, base + 120_000]

    c = KafkaConsumer(bootstrap_servers=server.kafka_address, enable_auto_commit=False)
    try:
        tp = TopicPartition("kp-time", 0)
        found = c.offsets_for_times({tp: base + 105_000})[tp]
        assert (found.offset, found.timestamp) == (1, base + 110_000)
        assert c.offsets_for_times({tp: base + 300_001 + 20_000})[tp] is None  # after every record
        assert c.offsets_for_times({tp: 0})[tp].offset == 0
        assert c.beginning_offsets([tp]) == {tp: 0} and c.end_offsets([tp]) == {tp: 9}
    finally:
        c.close()
    assert [m.value for m in _kp_records("kp-time", server, start=7)] == [b"all-1", b"all-2"]


# --------------------------------------------------------------------------- aiokafka


def test_aiokafka_every_codec_and_offsets_for_times(server):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def go():
        for codec in CODECS:
            p = AIOKafkaProducer(bootstrap_servers=server.kafka_address, compression_type=None if codec == "none" else codec)
            await p.start()
            try:
                batch = [
                    await p.send("ak-codecs", b"v-" + codec.encode(), key=b"k", headers=[("h", b"x")], timestamp_ms=1_000_000 + len(codec)),
                    await p.send("ak-codecs", None, key=b"null-value", timestamp_ms=1_000_000),
                ]
                offsets = [(await f).offset for f in batch]
            finally:
                await p.stop()
            assert offsets[1] == offsets[0] + 1
        c = AIOKafkaConsumer(bootstrap_servers=server.kafka_address, enable_auto_commit=False)
        await c.start()
        try:
            tp = TopicPartition("ak-codecs", 0)
            c.assign([tp])
            c.seek(tp, 0)
            got = []
            while len(got) < 2 * len(CODECS):
                records = await c.getmany(tp, timeout_ms=5000)
                assert records, "no records within 5 s"
                got += records[tp]
            assert [(m.offset, m.key, m.value) for m in got[:2]] == [(0, b"k", b"v-none"), (1, b"null-value", None)]
            assert [m.value for m in got[::2]] == [b"v-" + c_.encode() for c_ in CODECS]
            assert got[0].headers == (("h", b"x"),) and got[0].timestamp == 1_000_004
            found = await c.offsets_for_times({tp: 1_000_004})
            assert found[tp].offset == 0
            # timestamps by offset: 1_000_000 + len(codec) for values, 1_000_000 for null values
            found = await c.offsets_for_times({tp: 1_000_005})
            assert (found[tp].offset, found[tp].timestamp) == (4, 1_000_006)  # snappy, the only one past 5
            assert (await c.offsets_for_times({tp: 1_000_007}))[tp] is None
        finally:
            await c.stop()

    asyncio.run(go())


# --------------------------------------------------------------------------- confluent-kafka (librdkafka 2.16)


def test_confluent_kafka_every_codec_idempotent(server):
    from confluent_kafka import Consumer, Producer, TopicPartition

    delivered = []
    for codec in CODECS:
        p = Producer({"bootstrap.servers": server.kafka_address, "compression.type": codec, "enable.idempotence": True, "acks": "all"})
        for i in range(3):
            p.produce("ck-codecs", key=None if i == 2 else b"k%d" % i, value=None if i == 1 else codec.encode(),
                      headers=[("codec", codec.encode())], timestamp=2_000_000 + i,
                      on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
        assert p.flush(15) == 0
    assert [e for e, _ in delivered] == [None] * 15
    assert [o for _, o in delivered] == list(range(15))

    c = Consumer({"bootstrap.servers": server.kafka_address, "group.id": "unused", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition("ck-codecs", 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 15 and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m)
        assert len(got) == 15
        for n, codec in enumerate(CODECS):
            a, b, d = got[3 * n : 3 * n + 3]
            assert (a.key(), a.value(), a.headers()) == (b"k0", codec.encode(), [("codec", codec.encode())])
            assert (b.key(), b.value()) == (b"k1", None)
            assert (d.key(), d.value(), d.timestamp()[1]) == (None, codec.encode(), 2_000_002)
        found = c.offsets_for_times([TopicPartition("ck-codecs", 0, 2_000_001)], 10)
        assert found[0].offset == 1
        assert c.get_watermark_offsets(TopicPartition("ck-codecs", 0), 10) == (0, 15)
    finally:
        c.close()
