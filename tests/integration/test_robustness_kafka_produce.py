"""Produce under abuse against a real ``headwater serve``: record batches that lie about their
length, count, magic, CRC or compression; decompression bombs; bad acks, names and partitions;
idempotent producers out of step. After every refusal the partition must be unchanged, and a
kafka-python client keeps producing and consuming alongside.

Expected codes are Kafka's (``ProduceRequest.validateRecords``, ``LogValidator``,
``ByteBufferLogInputStream``); ``xfail(strict=True)`` marks a known difference, with the
Kafka behaviour in its reason.
"""

from __future__ import annotations

import datetime
import struct
import time

import cramjam
import pytest

from headwater.codec.kafka.record_batch import crc32c
from kafka_wire import KafkaWire
from test_kafka_wire import create_topic, fetch_request, produce, produce_request, record_batch, req
from test_robustness_kafka_wire import HealthyClient, alive, latest_offset, peak_rss_mb, raw_frame, tracebacks

PRODUCE, FETCH, INIT_PRODUCER_ID = 0, 1, 22
TOPIC = "robust-produce"

# RecordBatch v2 header: baseOffset i64, batchLength i32, partitionLeaderEpoch i32, magic i8, crc u32,
# attributes i16, lastOffsetDelta i32, baseTimestamp i64, maxTimestamp i64, producerId i64,
# producerEpoch i16, baseSequence i32, recordCount i32 (61 bytes); CRC-32C covers attributes..end.
_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE, LOG_OVERHEAD, CRC_AT, ATTRIBUTES_AT = 61, 12, 17, 21


def zigzag(n: int) -> bytes:
    """A Kafka record varint (signed, zigzag)."""
    u = (n << 1) ^ (n >> 63)
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def record(value: bytes = b"v", key: bytes | None = None, offset_delta: int = 0) -> bytes:
    body = b"\x00" + zigzag(0) + zigzag(offset_delta)
    body += zigzag(-1) if key is None else zigzag(len(key)) + key
    body += zigzag(len(value)) + value + zigzag(0)
    return zigzag(len(body)) + body


def batch(records: bytes, count: int, *, attributes: int = 0, last_offset_delta: int | None = None,
          producer_id: int = -1, epoch: int = -1, sequence: int = -1, batch_length: int | None = None,
          magic: int = 2, crc: int | None = None) -> bytes:
    """A RecordBatch v2 around ``records`` (already encoded, maybe compressed), any field forced."""
    ts = int(time.time() * 1000)
    out = bytearray(HEADER_SIZE) + records
    _HEADER.pack_into(out, 0, 0, len(out) - LOG_OVERHEAD if batch_length is None else batch_length, -1, magic, 0,
                      attributes, count - 1 if last_offset_delta is None else last_offset_delta, ts, ts,
                      producer_id, epoch, sequence, count)
    struct.pack_into(">I", out, CRC_AT, crc32c(memoryview(out)[ATTRIBUTES_AT:]) if crc is None else crc)
    return bytes(out)


GOOD = record(b"x")
CORRUPT_MESSAGE, UNKNOWN_TOPIC, MESSAGE_TOO_LARGE, INVALID_TOPIC, INVALID_ACKS = 2, 3, 10, 17, 21
INVALID_TIMESTAMP, OUT_OF_ORDER, INVALID_EPOCH, INVALID_TXN_STATE = 32, 45, 47, 48
UNSUPPORTED_COMPRESSION, INVALID_RECORD = 76, 87

# name -> (records field, Kafka's code)
REFUSED = {
    "CRC mismatch": (batch(GOOD, 1, crc=12345), CORRUPT_MESSAGE),
    "magic 3": (batch(GOOD, 1, magic=3), CORRUPT_MESSAGE),
    "batchLength 10 (below the v0 minimum 14)": (batch(GOOD, 1, batch_length=10), CORRUPT_MESSAGE),
    "batchLength 20 (below the v2 header)": (batch(GOOD, 1, batch_length=20), CORRUPT_MESSAGE),
    "batchLength -1": (batch(GOOD, 1, batch_length=-1), CORRUPT_MESSAGE),
    "recordCount 2, one record": (batch(GOOD, 2), INVALID_RECORD),
    "recordCount 2, lastOffsetDelta 0": (batch(GOOD, 2, last_offset_delta=0), INVALID_RECORD),
    "recordCount 1, two records": (batch(GOOD + GOOD, 1), INVALID_RECORD),
    "recordCount 0": (batch(b"", 0), INVALID_RECORD),
    "recordCount -1": (batch(GOOD, -1, last_offset_delta=0), INVALID_RECORD),
    "recordCount 2**31-1": (batch(GOOD, 2**31 - 1), INVALID_RECORD),
    "record truncated mid-varint": (batch(GOOD[:-1], 1), INVALID_RECORD),
    "record length varint never ends": (batch(b"\xff" * 20, 1), INVALID_RECORD),
    "value length varint never ends": (batch(b"\x20\x00\x00\x00\x01" + b"\xff" * 12, 1), INVALID_RECORD),
    "negative record length": (batch(b"\x01\x00\x00\x00\x01\x00\x00", 1), INVALID_RECORD),
    "header count 2**30": (batch(bytes([0x10, 0, 0, 0, 1, 2]) + b"x" + b"\xfe\xff\xff\xff\x07", 1), INVALID_RECORD),
    "two batches in one partition": (batch(GOOD, 1) + batch(GOOD, 1), INVALID_RECORD),
    "control batch": (batch(GOOD, 1, attributes=0x20), INVALID_RECORD),
    "producer id without a sequence": (batch(GOOD, 1, producer_id=123456, epoch=0, sequence=-1), INVALID_RECORD),
    "LogAppendTime from a producer": (batch(GOOD, 1, attributes=0x08), INVALID_TIMESTAMP),
    "compression id 5": (batch(GOOD, 1, attributes=5), UNSUPPORTED_COMPRESSION),
    "compression id 6": (batch(GOOD, 1, attributes=6), UNSUPPORTED_COMPRESSION),
    "compression id 7": (batch(GOOD, 1, attributes=7), UNSUPPORTED_COMPRESSION),
    "gzip that is not gzip": (batch(b"\x1f\x8b" + bytes(range(40)), 1, attributes=1), CORRUPT_MESSAGE),
    "snappy neither xerial nor raw": (batch(b"\x82SNAPPX\x00" + bytes(range(40)), 1, attributes=2), CORRUPT_MESSAGE),
    "xerial block longer than the data": (
        batch(b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, 1000) + b"abc", 1, attributes=2), CORRUPT_MESSAGE),
    "raw snappy claiming 4 GiB": (batch(b"\xff\xff\xff\xff\x0f\x00\x01a", 1, attributes=2), MESSAGE_TOO_LARGE),
    "lz4 garbage": (batch(bytes(range(40)), 1, attributes=3), CORRUPT_MESSAGE),
    "zstd garbage": (batch(bytes(range(40)), 1, attributes=4), CORRUPT_MESSAGE),
    "zstd frame declaring 1 TiB": (batch(struct.pack("<I", 0xFD2FB528) + b"\xe0" + struct.pack("<Q", 1 << 40)
                                         + b"\x11\x00\x00hi", 1, attributes=4), CORRUPT_MESSAGE),
    "empty gzip stream": (batch(b"", 1, attributes=1), CORRUPT_MESSAGE),
    "empty zstd stream": (batch(b"", 1, attributes=4), CORRUPT_MESSAGE),
    "no records at all": (b"", INVALID_RECORD),
    "null records": (None, INVALID_RECORD),
}


@pytest.fixture(scope="module")
def topic(server):
    w = KafkaWire(server.kafka_address)
    try:
        assert create_topic(w, TOPIC, partitions=2).error_code == 0
        assert produce(w, TOPIC, record_batch([b"seed"])).error_code == 0
    finally:
        w.close()
    return TOPIC


@pytest.fixture(scope="module")
def healthy(server):
    c = HealthyClient(server)
    yield c
    c.close()


@pytest.fixture
def wire(server):
    w = KafkaWire(server.kafka_address, timeout=30)
    yield w
    w.close()


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_bad_batch_gets_kafkas_code_and_nothing_is_appended(server, topic, wire, name):
    data, code = REFUSED[name]
    before = [latest_offset(wire, topic, p) for p in (0, 1)]
    r = produce(wire, topic, data)
    assert (r.error_code, r.base_offset) == (code, -1), r.error_message
    assert [latest_offset(wire, topic, p) for p in (0, 1)] == before


def test_after_the_refusals_the_partition_reads_back_unchanged(server, topic, wire, healthy):
    from test_kafka_wire import fetch_request

    part = wire.call(1, 12, fetch_request(12, topic, 0)).responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 1 and part.records.count(b"seed") == 1
    healthy.check()


@pytest.mark.parametrize("acks", [2, -2, 5, 32767])
def test_invalid_acks(server, topic, wire, acks):
    before = latest_offset(wire, topic)
    r = wire.call(PRODUCE, 9, produce_request(9, topic, record_batch([b"acks"]), acks=acks))
    assert r.responses[0].partition_responses[0].error_code == INVALID_ACKS
    assert latest_offset(wire, topic) == before


@pytest.mark.parametrize("name,code", [
    ("a" * 249, UNKNOWN_TOPIC),  # a legal name that does not exist
    ("a" * 250, INVALID_TOPIC),
    ("b" * 1000, INVALID_TOPIC),
    ("bad/name", INVALID_TOPIC),
    ("spa ce", INVALID_TOPIC),
    ("ünïcode", INVALID_TOPIC),
    ("..", INVALID_TOPIC),
    ("", INVALID_TOPIC),
])
def test_topic_names(server, wire, name, code):
    assert produce(wire, name, record_batch([b"n"])).error_code == code


@pytest.mark.parametrize("partition", [-1, 2, 10**6, 2**31 - 1, -(2**31)])
def test_partitions_that_do_not_exist(server, topic, wire, partition):
    assert produce(wire, topic, record_batch([b"p"]), partition=partition).error_code == UNKNOWN_TOPIC


def test_a_batch_over_max_message_bytes(server, wire):
    assert create_topic(wire, "robust-small", configs=[("max.message.bytes", "1000")]).error_code == 0
    assert produce(wire, "robust-small", record_batch([b"y" * 2000])).error_code == MESSAGE_TOO_LARGE
    assert produce(wire, "robust-small", record_batch([b"y" * 100] * 20)).error_code == MESSAGE_TOO_LARGE
    # over the default (1048588) on a default topic
    assert create_topic(wire, "robust-default").error_code == 0
    assert produce(wire, "robust-default", record_batch([b"z" * 1_100_000])).error_code == MESSAGE_TOO_LARGE
    assert latest_offset(wire, "robust-small") == latest_offset(wire, "robust-default") == 0


def _init_pid(w: KafkaWire) -> tuple[int, int]:
    r = w.call(INIT_PRODUCER_ID, 4, req(INIT_PRODUCER_ID, 4, transactional_id=None,
                                        transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1, producer_epoch=-1))
    assert r.error_code == 0
    return r.producer_id, r.producer_epoch


def test_an_idempotent_producer_out_of_step(server, wire, healthy):
    assert create_topic(wire, "robust-idem").error_code == 0
    pid, epoch = _init_pid(wire)

    def send(seq, values, e=epoch, p=pid):
        r = produce(wire, "robust-idem", record_batch(values, producer_id=p, producer_epoch=e, base_sequence=seq))
        return r.error_code, r.base_offset

    assert send(0, [b"a", b"b"]) == (0, 0)
    assert send(2, [b"c"]) == (0, 2)
    assert send(0, [b"a", b"b"]) == (0, 0)  # a retry of the first batch: its original offsets
    assert send(2, [b"c"]) == (0, 2)
    assert send(0, [b"a"])[0] == OUT_OF_ORDER  # not a retry (other length) and not next
    assert send(9, [b"gap"])[0] == OUT_OF_ORDER
    assert send(3, [b"d"], e=epoch + 1)[0] == OUT_OF_ORDER  # a new epoch starts at sequence 0
    assert send(0, [b"d"], e=epoch + 1) == (0, 3)
    assert send(4, [b"late"], e=epoch)[0] == INVALID_EPOCH  # fenced by the newer epoch
    assert send(1, [b"e"], e=epoch + 1) == (0, 4)
    assert latest_offset(wire, "robust-idem") == 5
    from test_kafka_wire import fetch_request

    records = wire.call(1, 12, fetch_request(12, "robust-idem", 0)).responses[0].partitions[0].records
    for v in (b"a", b"b", b"c", b"d", b"e"):
        assert records.count(v) >= 1
    assert b"gap" not in records and b"late" not in records
    healthy.check()


def test_extreme_timestamps_are_stored_and_read_back_exactly(server, wire):
    from headwater.codec.kafka.record_batch import Record, RecordBatchView, build_record_batch, split_batches
    from test_kafka_wire import fetch_request

    assert create_topic(wire, "robust-times").error_code == 0
    now = int(time.time() * 1000)
    cases = [(-(2**63), [0, 1, 2**63 - 1]), (2**63 - 1, [0, -(2**63)]), (-1, [0, 0]), (0, [10**15, -5]),
             (now, [0, 2**40, -(2**40)])]
    expected = []
    for base, deltas in cases:
        records = [Record(i, d, b"k%d" % i, b"v%d" % i, ((b"h", b"x"), (b"h", None))) for i, d in enumerate(deltas)]
        assert produce(wire, "robust-times", build_record_batch(records, base_timestamp=base)).error_code == 0
        expected += [((base + d + 2**63) % 2**64 - 2**63, b"k%d" % i, b"v%d" % i) for i, d in enumerate(deltas)]
    data = wire.call(1, 12, fetch_request(12, "robust-times", 0)).responses[0].partitions[0].records
    got = []
    for b in split_batches(data, allow_partial=True):
        view = RecordBatchView(b)
        view.verify_crc()
        got += [(view.timestamp_of(r), r.key, r.value, r.headers) for r in view.records()]
    assert [g[:3] for g in got] == expected
    assert {g[3] for g in got} == {((b"h", b"x"), (b"h", None))}


def test_acks_zero_garbage_does_not_disturb_others(server, topic, healthy):
    w = KafkaWire(server.kafka_address)
    try:
        bad = bytearray(record_batch([b"zero"]))
        bad[-1] ^= 0xFF
        for _ in range(20):
            frame, _ = w.frame(PRODUCE, 9, produce_request(9, topic, bytes(bad), acks=0))
            try:
                w.send_raw(frame)
            except OSError:
                break
    finally:
        w.close()
    w = KafkaWire(server.kafka_address)
    try:
        assert latest_offset(w, topic) == 1
    finally:
        w.close()
    healthy.check()


# --------------------------------------------------------------------------- known defects


@pytest.mark.parametrize("magic", [0, 1])
def test_a_magic_0_or_1_batch_gets_invalid_record(server, topic, wire, magic):
    r = produce(wire, topic, batch(GOOD, 1, magic=magic))
    assert r.error_code == INVALID_RECORD
    assert latest_offset(wire, topic) == 1


@pytest.mark.parametrize("length", [500, 1 << 20])
def test_a_batch_length_past_the_data_gets_invalid_record(server, topic, wire, length):
    r = produce(wire, topic, batch(GOOD, 1, batch_length=length))
    assert r.error_code == INVALID_RECORD
    assert latest_offset(wire, topic) == 1


def test_a_transactional_batch_outside_a_transaction(server, topic, wire):
    # KIP-890 verification: the producer never added the partition (it has no transaction at all)
    r = produce(wire, topic, batch(GOOD, 1, attributes=0x10, producer_id=77, epoch=0, sequence=0))
    assert r.error_code == INVALID_TXN_STATE
    assert latest_offset(wire, topic) == 1


@pytest.mark.parametrize("version", [3, 9, 12])
@pytest.mark.parametrize("transactional_id", ["", "not-a-transaction"])
def test_a_transactional_id_with_a_non_transactional_batch_is_appended(server, wire, version, transactional_id):
    # Kafka (KafkaApis.handleProduceRequest) looks at transactional_id only when the batch is
    # transactional: "" (not null) or any id with a plain batch is appended
    name = f"txn-id-{version}-{len(transactional_id)}"
    assert create_topic(wire, name).error_code == 0
    value = b"plain batch, transactional_id=%r" % transactional_id.encode()
    request = produce_request(version, name, batch(record(value), 1))
    r = wire.call(PRODUCE, version, type(request)(
        transactional_id=transactional_id, acks=request.acks, timeout=request.timeout, topic_data=request.topic_data))
    part = r.responses[0].partition_responses[0]
    assert (part.error_code, part.base_offset) == (0, 0)
    assert latest_offset(wire, name) == 1
    fetched = wire.call(FETCH, 12, fetch_request(12, name, 0)).responses[0].partitions[0]
    assert fetched.error_code == 0 and value in fetched.records


def test_an_acks_zero_produce_that_fails_closes_the_connection(server, topic):
    w = KafkaWire(server.kafka_address)
    try:
        bad = bytearray(record_batch([b"zero"]))
        bad[-1] ^= 0xFF
        frame, _ = w.frame(PRODUCE, 9, produce_request(9, topic, bytes(bad), acks=0))
        w.send_raw(frame)
        assert w.closed_by_server(3)
    finally:
        w.close()


def test_a_transactional_batch_outside_a_transaction_fails_alone(server, topic, wire):
    # each partition is answered on its own: the plain batch is written, the unverified one refused
    txn = batch(GOOD, 1, attributes=0x10, producer_id=77, epoch=0, sequence=0)
    parts = tuple(req(PRODUCE, 9, "PartitionProduceData", index=i, records=r)
                  for i, r in ((0, batch(GOOD, 1)), (1, txn), (9, batch(GOOD, 1))))
    r = wire.call(PRODUCE, 9, req(PRODUCE, 9, transactional_id=None, acks=-1,
                                  timeout=datetime.timedelta(seconds=5),
                                  topic_data=(req(PRODUCE, 9, "TopicProduceData", name=topic, partition_data=parts),)))
    assert [p.error_code for p in r.responses[0].partition_responses] == [0, INVALID_TXN_STATE, 3]
    assert latest_offset(wire, topic) == 2


@pytest.mark.parametrize("version,body", [
    (0, struct.pack(">hiih", -1, 1000, 1, 1) + b"x" + struct.pack(">i", -5)),  # partition count -5
    (2, struct.pack(">hiih", 1, 1000, 1, 1) + b"x" + struct.pack(">i", 1)),  # cut short
    (1, struct.pack(">hiih", 0, 1000, 1, 1) + b"x" + struct.pack(">iii", 1, 0, 0)),  # acks=0: answered 35
])
def test_a_produce_v0_2_that_cannot_be_answered_closes_the_connection(server, version, body):
    before = tracebacks(server)
    w = KafkaWire(server.kafka_address)
    try:
        w.send_raw(raw_frame(PRODUCE, version, body))
        assert w.closed_by_server(5)
    finally:
        w.close()
    time.sleep(0.2)
    assert tracebacks(server) == before, server.log()[-1500:]


def _bomb(codec: int, megabytes: int) -> bytes:
    """One record whose value is ``megabytes`` MiB of zeros, compressed as concatenated frames
    (one frame per MiB: a few dozen bytes each for zstd, ~4 KiB for lz4)."""
    n = megabytes << 20
    value_len = zigzag(n)
    head = b"\x00" + zigzag(0) + zigzag(0) + zigzag(-1) + value_len
    body_len = len(head) + n + 1
    prefix = zigzag(body_len) + head
    compress = cramjam.zstd.compress if codec == 4 else cramjam.lz4.compress
    mib = bytes(compress(b"\x00" * (1 << 20)))
    return bytes(compress(prefix)) + mib * megabytes + bytes(compress(zigzag(0)))


def test_a_zstd_bomb_under_max_message_bytes_does_not_kill_the_server(fresh_server):
    import resource

    cap = 4 << 30
    resource.prlimit(fresh_server.proc.pid, resource.RLIMIT_AS, (cap, cap))
    w = KafkaWire(fresh_server.kafka_address, timeout=120)
    try:
        assert create_topic(w, "bomb").error_code == 0
        records = _bomb(4, 8192)
        assert len(records) < 1_048_588
        try:
            r = produce(w, "bomb", batch(records, 1, attributes=4))
            assert r.error_code in (MESSAGE_TOO_LARGE, CORRUPT_MESSAGE)
        except Exception:
            pass  # judged below: the process must still be there
    finally:
        w.close()
    time.sleep(0.5)
    died = [line for line in fresh_server.log().splitlines() if "memory allocation" in line]
    assert alive(fresh_server), f"the server process died: {died}"


@pytest.mark.parametrize("codec,megabytes,max_message_bytes", [(4, 512, None), (3, 900, "4194304")],
                         ids=["zstd-512MiB", "lz4-900MiB"])
def test_a_decompression_bomb_is_refused_within_bounded_memory(fresh_server, codec, megabytes, max_message_bytes):
    w = KafkaWire(fresh_server.kafka_address, timeout=60)
    try:
        configs = [("max.message.bytes", max_message_bytes)] if max_message_bytes else []
        assert create_topic(w, "bomb", configs=configs).error_code == 0
        records = _bomb(codec, megabytes)
        peak_before = peak_rss_mb(fresh_server)
        r = produce(w, "bomb", batch(records, 1, attributes=codec))
        grown = peak_rss_mb(fresh_server) - peak_before
        assert r.error_code in (MESSAGE_TOO_LARGE, CORRUPT_MESSAGE)
        assert latest_offset(w, "bomb") == 0
        assert alive(fresh_server)
        assert grown < 256, f"peak RSS grew by {grown:.0f} MiB for a {len(records)}-byte batch"
    finally:
        w.close()
