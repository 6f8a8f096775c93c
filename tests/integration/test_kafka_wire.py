"""The Kafka wire protocol byte by byte against a real ``headwater serve``.

Requests are kio entities (``kafka_wire.KafkaWire``); each test checks what
the broker answered, or that it closed that connection and only that one.
"""

from __future__ import annotations

import struct
import threading
import time
import uuid

import pytest
from kio.static.constants import EntityType

from headwater.codec.kafka.record_batch import Record, build_record_batch
from kafka_wire import KafkaWire, main_class, message_classes, record_batch

PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS = 0, 1, 2, 3, 18
CREATE_TOPICS, DELETE_RECORDS, INIT_PRODUCER_ID = 19, 21, 22


def req(api_key: int, version: int, cls_name: str | None = None, **fields):
    mod, _ = message_classes(api_key, version)
    cls = getattr(mod, cls_name) if cls_name else main_class(mod, EntityType.request)
    return cls(**fields)


def metadata_request(version: int, names, auto: bool = True):
    extra = {"topic_id": uuid.UUID(int=0)} if version >= 10 else {}
    topics = None if names is None else tuple(req(METADATA, version, "MetadataRequestTopic", name=n, **extra) for n in names)
    fields = {"topics": topics}
    if version >= 4:
        fields["allow_auto_topic_creation"] = auto
    if version >= 8:
        fields["include_topic_authorized_operations"] = False
        if version <= 10:
            fields["include_cluster_authorized_operations"] = False
    return req(METADATA, version, **fields)


def produce_request(version: int, topic: str, records: bytes | None, partition: int = 0, acks: int = -1):
    pd = req(PRODUCE, version, "PartitionProduceData", index=partition, records=records)
    td = req(PRODUCE, version, "TopicProduceData", name=topic, partition_data=(pd,))
    import datetime

    return req(PRODUCE, version, transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=5), topic_data=(td,))


def produce(w: KafkaWire, topic: str, records: bytes | None, version: int = 9, partition: int = 0):
    r = w.call(PRODUCE, version, produce_request(version, topic, records, partition))
    return r.responses[0].partition_responses[0]


def fetch_request(version: int, topic: str | uuid.UUID, offset: int, *, max_wait_ms: int = 0, partition: int = 0):
    import datetime

    fp = req(FETCH, version, "FetchPartition", partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20)
    if version >= 13:
        ft = req(FETCH, version, "FetchTopic", topic_id=topic, partitions=(fp,))
    else:
        ft = req(FETCH, version, "FetchTopic", topic=topic, partitions=(fp,))
    fields = dict(max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=1 << 24, isolation_level=0, topics=(ft,))
    if version >= 7:
        fields.update(session_id=0, session_epoch=-1, forgotten_topics_data=())
    if version < 15:
        fields["replica_id"] = -1
    return req(FETCH, version, **fields)


def create_topic(w: KafkaWire, name: str, partitions: int = 1, configs=()):
    v = 7
    cfgs = tuple(req(CREATE_TOPICS, v, "CreatableTopicConfig", name=k, value=val) for k, val in configs)
    t = req(CREATE_TOPICS, v, "CreatableTopic", name=name, num_partitions=partitions, replication_factor=1, assignments=(), configs=cfgs)
    import datetime

    r = w.call(CREATE_TOPICS, v, req(CREATE_TOPICS, v, topics=(t,), timeout=datetime.timedelta(seconds=5), validate_only=False))
    return r.topics[0]


@pytest.fixture
def wire(server):
    w = KafkaWire(server.kafka_address)
    yield w
    w.close()


# --------------------------------------------------------------------------- framing


def test_api_versions_ranges_and_unsupported_version(server, wire):
    r = wire.call(API_VERSIONS, 3, req(API_VERSIONS, 3, client_software_name="t", client_software_version="1"))
    assert r.error_code == 0
    ranges = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    # the old-librdkafka feature probes (NOTES.md): Produce 0 and 7, Fetch 4 and 10, ApiVersions 0
    assert ranges[PRODUCE][0] == 0 and ranges[PRODUCE][1] >= 9
    assert ranges[FETCH][0] <= 4 and ranges[FETCH][1] >= 12
    assert ranges[METADATA] == (0, 13) and ranges[API_VERSIONS] == (0, 4)
    assert ranges[INIT_PRODUCER_ID][0] == 0
    for group_api in (8, 9, 10, 11, 12, 13, 14):  # consumer groups (issue 5; ranges in test_kafka_groups_wire.py)
        assert group_api in ranges

    # ApiVersions v9 (unknown): a v0 body with UNSUPPORTED_VERSION and ApiVersions' own range
    frame = struct.pack(">hhih", API_VERSIONS, 9, 77, 1) + b"x" + b"\x00"
    wire.send_raw(struct.pack(">i", len(frame)) + frame)
    data = wire.read_frame()
    assert data == struct.pack(">ihihhh", 77, 35, 1, API_VERSIONS, 0, 4)


def test_broken_frames_close_only_their_connection(server):
    healthy = KafkaWire(server.kafka_address)
    try:
        for garbage in (
            struct.pack(">i", -5),  # negative size
            struct.pack(">i", 1 << 30),  # over max_request_size
            struct.pack(">i", 4) + b"\x00\x03\x00\x05",  # shorter than a header
            struct.pack(">i", 10) + struct.pack(">hhi", 999, 0, 1) + b"\xff\xff",  # unknown API
        ):
            bad = KafkaWire(server.kafka_address)
            bad.send_raw(garbage)
            assert bad.closed_by_server()
            bad.close()
        # a Metadata body that does not decode
        bad = KafkaWire(server.kafka_address)
        frame = struct.pack(">hhih", METADATA, 12, 1, 0) + b"\x00" + b"\x05\xff"
        bad.send_raw(struct.pack(">i", len(frame)) + frame)
        assert bad.closed_by_server()
        bad.close()
        r = healthy.call(METADATA, 12, metadata_request(12, None))
        assert r.brokers[0].port == int(server.kafka_address.rsplit(":", 1)[1])
    finally:
        healthy.close()


def test_responses_in_order_and_acks_zero_sends_nothing(server, wire):
    assert create_topic(wire, "wire-acks0").error_code == 0
    frames = []
    f, c_prod = wire.frame(PRODUCE, 9, produce_request(9, "wire-acks0", record_batch([b"a"]), acks=0))
    frames.append(f)
    f, c_meta = wire.frame(METADATA, 1, metadata_request(1, ["wire-acks0"]))
    frames.append(f)
    f, c_list = wire.frame(LIST_OFFSETS, 1, req(LIST_OFFSETS, 1, replica_id=-1, topics=(
        req(LIST_OFFSETS, 1, "ListOffsetsTopic", name="wire-acks0", partitions=(
            req(LIST_OFFSETS, 1, "ListOffsetsPartition", partition_index=0, timestamp=-1),)),)))
    frames.append(f)
    wire.send_raw(b"".join(frames))  # pipelined
    got_meta, meta = wire.read_response(METADATA, 1)
    got_list, offsets = wire.read_response(LIST_OFFSETS, 1)
    assert (got_meta, got_list) == (c_meta, c_list)
    assert meta.topics[0].name == "wire-acks0"
    assert offsets.topics[0].partitions[0].offset == 1  # the acks=0 record was written


def test_metadata_auto_creation_and_topic_ids(server, wire):
    r = wire.call(METADATA, 12, metadata_request(12, ["wire-auto", "bad/name", "wire-nocreate"], auto=True))
    by_name = {t.name: t for t in r.topics}
    assert by_name["wire-auto"].error_code == 0 and len(by_name["wire-auto"].partitions) == 1
    assert by_name["wire-auto"].partitions[0].leader_epoch == 0
    assert by_name["bad/name"].error_code == 17  # INVALID_TOPIC_EXCEPTION
    r2 = wire.call(METADATA, 12, metadata_request(12, ["wire-nocreate2"], auto=False))
    assert r2.topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    tid = by_name["wire-auto"].topic_id
    assert tid.int != 0
    again = wire.call(METADATA, 12, metadata_request(12, ["wire-auto"]))
    assert again.topics[0].topic_id == tid

    # Fetch v13 addresses the topic by that id; an unknown id gets UNKNOWN_TOPIC_ID
    assert produce(wire, "wire-auto", record_batch([b"by-id"])).error_code == 0
    f = wire.call(FETCH, 13, fetch_request(13, tid, 0))
    assert f.responses[0].topic_id == tid
    part = f.responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 1 and b"by-id" in part.records
    f = wire.call(FETCH, 13, fetch_request(13, uuid.uuid4(), 0))
    assert f.responses[0].partitions[0].error_code == 100


def test_produce_errors(server, wire):
    assert create_topic(wire, "wire-errors", configs=[("max.message.bytes", "2000")]).error_code == 0
    good = record_batch([b"x"])
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    assert produce(wire, "wire-errors", bytes(bad_crc)).error_code == 2  # CORRUPT_MESSAGE
    assert produce(wire, "wire-errors", good + good).error_code == 87  # two batches: INVALID_RECORD
    assert produce(wire, "wire-errors", record_batch([b"y" * 5000])).error_code == 10  # MESSAGE_TOO_LARGE
    assert produce(wire, "no-such-topic", good).error_code == 3
    assert produce(wire, "bad name!", good).error_code == 17
    assert produce(wire, "wire-errors", good, partition=7).error_code == 3
    # lastOffsetDelta that does not match the record count: INVALID_RECORD
    lying = build_record_batch([Record(0, 0, None, b"a")], base_timestamp=1, last_offset_delta=3)
    assert produce(wire, "wire-errors", lying).error_code == 87
    ok = produce(wire, "wire-errors", good)
    assert ok.error_code == 0 and ok.base_offset == 0

    # Produce v0-2 is advertised (old librdkafka) but answered UNSUPPORTED_VERSION per partition
    body = struct.pack(">hi", 1, 1000) + struct.pack(">i", 1) + struct.pack(">h", 11) + b"wire-errors"
    body += struct.pack(">i", 1) + struct.pack(">ii", 0, 3) + b"abc"
    frame, corr = wire.frame(PRODUCE, 2, body)
    wire.send_raw(frame)
    data = wire.read_frame()
    expected = struct.pack(">ii", corr, 1) + struct.pack(">h", 11) + b"wire-errors" + struct.pack(">i", 1)
    expected += struct.pack(">ihqq", 0, 35, -1, -1) + struct.pack(">i", 0)
    assert data == expected


def test_fetch_long_poll_is_woken_by_a_produce(server, wire):
    assert create_topic(wire, "wire-poll").error_code == 0
    # max_wait 120 s: without a wake-up the 20 s socket timeout fails the test
    frame, corr = wire.frame(FETCH, 12, fetch_request(12, "wire-poll", 0, max_wait_ms=120_000))
    wire.send_raw(frame)
    errors = []

    def later():
        other = KafkaWire(server.kafka_address)
        try:
            # a round trip on another connection first, so the fetch (sent before) is normally parked
            # by the time the record arrives; the deterministic version of this check is the unit
            # test test_fetch_long_poll_parks_until_an_append
            other.call(METADATA, 1, metadata_request(1, ["wire-poll"]))
            errors.append(produce(other, "wire-poll", record_batch([b"wake"])).error_code)
        finally:
            other.close()

    t = threading.Thread(target=later)
    t.start()
    got, r = wire.read_response(FETCH, 12)
    t.join(20)
    assert got == corr and errors == [0]
    part = r.responses[0].partitions[0]
    assert part.error_code == 0 and b"wake" in part.records and part.high_watermark == 1


def test_idempotent_sequences_on_the_wire(server, wire):
    assert create_topic(wire, "wire-idem").error_code == 0
    init = wire.call(INIT_PRODUCER_ID, 4, req(INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout=__import__("datetime").timedelta(seconds=60), producer_id=-1, producer_epoch=-1))
    assert init.error_code == 0 and init.producer_id >= 0 and init.producer_epoch == 0
    pid, epoch = init.producer_id, init.producer_epoch

    def batch(seq, values):
        return record_batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq)

    first = produce(wire, "wire-idem", batch(0, [b"a", b"b"]))
    second = produce(wire, "wire-idem", batch(2, [b"c"]))
    assert (first.error_code, first.base_offset, second.error_code, second.base_offset) == (0, 0, 0, 2)
    dup = produce(wire, "wire-idem", batch(0, [b"a", b"b"]))  # a retry of the first batch
    assert (dup.error_code, dup.base_offset) == (0, 0)
    gap = produce(wire, "wire-idem", batch(7, [b"z"]))
    assert gap.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    old = produce(wire, "wire-idem", record_batch([b"q"], producer_id=pid, producer_epoch=epoch - 1 if epoch else -2, base_sequence=3))
    assert old.error_code in (47, 87)
    lo = wire.call(LIST_OFFSETS, 1, req(LIST_OFFSETS, 1, replica_id=-1, topics=(
        req(LIST_OFFSETS, 1, "ListOffsetsTopic", name="wire-idem", partitions=(
            req(LIST_OFFSETS, 1, "ListOffsetsPartition", partition_index=0, timestamp=-1),)),)))
    assert lo.topics[0].partitions[0].offset == 3  # the duplicate and the rejected batches wrote nothing
    tx = wire.call(INIT_PRODUCER_ID, 4, req(INIT_PRODUCER_ID, 4, transactional_id="tx", transaction_timeout=__import__("datetime").timedelta(seconds=60), producer_id=-1, producer_epoch=-1))
    assert tx.error_code == 0 and tx.producer_id > pid and tx.producer_epoch == 0
    again = wire.call(INIT_PRODUCER_ID, 4, req(INIT_PRODUCER_ID, 4, transactional_id="tx", transaction_timeout=__import__("datetime").timedelta(seconds=60), producer_id=-1, producer_epoch=-1))
    assert (again.error_code, again.producer_id, again.producer_epoch) == (0, tx.producer_id, 1)  # the epoch bumps
    long = wire.call(INIT_PRODUCER_ID, 4, req(INIT_PRODUCER_ID, 4, transactional_id="tx", transaction_timeout=__import__("datetime").timedelta(minutes=16), producer_id=-1, producer_epoch=-1))
    assert long.error_code == 50  # INVALID_TRANSACTION_TIMEOUT: over transaction.max.timeout.ms (15 minutes)


def test_delete_records_moves_the_log_start(server, wire):
    assert create_topic(wire, "wire-delrec").error_code == 0
    for i in range(5):
        assert produce(wire, "wire-delrec", record_batch([b"m%d" % i])).error_code == 0
    import datetime

    r = wire.call(DELETE_RECORDS, 2, req(DELETE_RECORDS, 2, topics=(
        req(DELETE_RECORDS, 2, "DeleteRecordsTopic", name="wire-delrec", partitions=(
            req(DELETE_RECORDS, 2, "DeleteRecordsPartition", partition_index=0, offset=3),)),), timeout=datetime.timedelta(seconds=5)))
    part = r.topics[0].partitions[0]
    assert (part.error_code, part.low_watermark) == (0, 3)
    earliest = wire.call(LIST_OFFSETS, 1, req(LIST_OFFSETS, 1, replica_id=-1, topics=(
        req(LIST_OFFSETS, 1, "ListOffsetsTopic", name="wire-delrec", partitions=(
            req(LIST_OFFSETS, 1, "ListOffsetsPartition", partition_index=0, timestamp=-2),)),)))
    assert earliest.topics[0].partitions[0].offset == 3
    below = wire.call(FETCH, 12, fetch_request(12, "wire-delrec", 1)).responses[0].partitions[0]
    assert below.error_code == 1 and below.log_start_offset == 3  # OFFSET_OUT_OF_RANGE
    at = wire.call(FETCH, 12, fetch_request(12, "wire-delrec", 3)).responses[0].partitions[0]
    assert at.error_code == 0 and b"m3" in at.records and b"m2" not in at.records
    past = wire.call(DELETE_RECORDS, 2, req(DELETE_RECORDS, 2, topics=(
        req(DELETE_RECORDS, 2, "DeleteRecordsTopic", name="wire-delrec", partitions=(
            req(DELETE_RECORDS, 2, "DeleteRecordsPartition", partition_index=0, offset=99),)),), timeout=datetime.timedelta(seconds=5)))
    assert past.topics[0].partitions[0].error_code == 1
