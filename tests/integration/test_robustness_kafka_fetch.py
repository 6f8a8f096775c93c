"""Fetch, ListOffsets and Metadata under abuse against a real ``headwater serve``: offsets out
of range, byte limits of 0 and below, a thousand partitions, unknown topic ids, long polls whose
client goes away, duplicated partitions, timestamps far in the future and past.

``xfail(strict=True)`` marks a known defect; its reason gives the Kafka broker's behaviour.
"""

from __future__ import annotations

import datetime
import os
import socket
import struct
import threading
import time
import uuid

import pytest

from kafka_wire import KafkaWire
from test_kafka_wire import create_topic, fetch_request, metadata_request, produce, record_batch, req
from test_robustness_kafka_wire import HealthyClient, alive, quick_metadata, server_fds

FETCH, LIST_OFFSETS, METADATA, DELETE_TOPICS = 1, 2, 3, 20
OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC, INVALID_TOPIC, UNSUPPORTED_VERSION, INVALID_REQUEST = 1, 3, 17, 35, 42
NOT_LEADER, UNKNOWN_TOPIC_ID = 6, 100
TOPIC = "robust-fetch"


@pytest.fixture(scope="module")
def topic(server):
    w = KafkaWire(server.kafka_address)
    try:
        assert create_topic(w, TOPIC, partitions=3).error_code == 0
        for i in range(5):
            assert produce(w, TOPIC, record_batch([b"m%d" % i])).error_code == 0
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


def fetch_parts_request(topic, parts, *, version: int = 12, max_bytes: int = 1 << 24,
                        partition_max_bytes: int = 1 << 20, max_wait_ms: int = 0):
    """A Fetch request for ``parts`` [(partition, offset)] of one topic (by name, or by id from v13)."""
    fps = tuple(req(FETCH, version, "FetchPartition", partition=p, fetch_offset=o, partition_max_bytes=partition_max_bytes)
                for p, o in parts)
    key = "topic_id" if version >= 13 else "topic"
    ft = req(FETCH, version, "FetchTopic", **{key: topic}, partitions=fps)
    fields = dict(max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=max_bytes,
                  isolation_level=0, topics=(ft,))
    if version >= 7:
        fields.update(session_id=0, session_epoch=-1, forgotten_topics_data=())
    if version < 15:
        fields["replica_id"] = -1
    return req(FETCH, version, **fields)


def fetch_parts(w: KafkaWire, topic, parts, *, version: int = 12, **kw):
    """Fetch ``parts`` [(partition, offset)] of one topic; returns the partition responses."""
    return w.call(FETCH, version, fetch_parts_request(topic, parts, version=version, **kw)).responses[0].partitions


def list_offsets(w: KafkaWire, topic: str, queries, version: int = 1):
    """ListOffsets for [(partition, timestamp)]: [(error, offset, timestamp)]."""
    parts = []
    for p, ts in queries:
        f = dict(partition_index=p, timestamp=ts)
        if version >= 4:
            f["current_leader_epoch"] = -1
        parts.append(req(LIST_OFFSETS, version, "ListOffsetsPartition", **f))
    fields = dict(replica_id=-1, topics=(req(LIST_OFFSETS, version, "ListOffsetsTopic", name=topic, partitions=tuple(parts)),))
    if version >= 2:
        fields["isolation_level"] = 0
    if version >= 10:
        fields["timeout"] = datetime.timedelta(seconds=5)
    r = w.call(LIST_OFFSETS, version, req(LIST_OFFSETS, version, **fields))
    return [(p.error_code, p.offset, p.timestamp) for p in r.topics[0].partitions]


# --------------------------------------------------------------------------- what holds


@pytest.mark.parametrize("offset", [-5, -1, 6, 2**63 - 1, -(2**63)])
def test_fetch_offsets_outside_the_log_are_offset_out_of_range(server, topic, wire, offset):
    for version in (4, 12, 16):
        t = topic if version < 13 else wire.call(METADATA, 12, metadata_request(12, [topic])).topics[0].topic_id
        p = fetch_parts(wire, t, [(0, offset)], version=version)[0]
        assert (p.error_code, p.high_watermark, p.records or b"") == (OFFSET_OUT_OF_RANGE, 5, b"")


def test_fetch_at_the_high_watermark_is_empty(server, topic, wire):
    p = fetch_parts(wire, topic, [(0, 5)])[0]
    assert (p.error_code, p.high_watermark, p.records or b"") == (0, 5, b"")


@pytest.mark.parametrize("max_bytes,partition_max_bytes", [(0, 1 << 20), (-1, 1 << 20), (-(2**31), 1 << 20),
                                                           (1 << 24, 0), (1 << 24, -1), (1, 1)])
def test_fetch_byte_limits_at_or_below_zero_still_return_one_batch(server, topic, wire, max_bytes, partition_max_bytes):
    p = fetch_parts(wire, topic, [(0, 0)], max_bytes=max_bytes, partition_max_bytes=partition_max_bytes)[0]
    assert p.error_code == 0 and b"m0" in p.records  # Kafka: at least one batch, even over the limits


def test_a_fetch_of_a_thousand_partitions(server, wire, healthy):
    assert create_topic(wire, "robust-wide", partitions=200).error_code == 0
    for p in range(0, 200, 7):
        assert produce(wire, "robust-wide", record_batch([b"w%d" % p]), partition=p).error_code == 0
    parts = [(p, 0) for p in range(1000)]  # 200 real partitions, 800 that do not exist
    started = time.monotonic()
    got = fetch_parts(wire, "robust-wide", parts, max_wait_ms=100)
    assert time.monotonic() - started < 5
    assert [p.partition_index for p in got] == list(range(1000))
    assert {p.error_code for p in got[:200]} == {0} and {p.error_code for p in got[200:]} == {UNKNOWN_TOPIC}
    assert all(b"w%d" % i in got[i].records for i in range(0, 200, 7))
    healthy.check()


def test_unknown_topics_by_name_and_by_id(server, wire):
    assert fetch_parts(wire, "robust-nope", [(0, 0)])[0].error_code == UNKNOWN_TOPIC
    for tid in (uuid.uuid4(), uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)):
        for version in (13, 17):
            assert fetch_parts(wire, tid, [(0, 0)], version=version)[0].error_code == UNKNOWN_TOPIC_ID
    r = wire.call(METADATA, 12, req(METADATA, 12, topics=(
        req(METADATA, 12, "MetadataRequestTopic", name=None, topic_id=uuid.uuid4()),), allow_auto_topic_creation=True,
        include_topic_authorized_operations=False))
    assert [t.error_code for t in r.topics] == [UNKNOWN_TOPIC_ID]


@pytest.mark.parametrize("name,code", [("c" * 249, 0), ("c" * 250, INVALID_TOPIC), ("bad$", INVALID_TOPIC),
                                       ("", INVALID_TOPIC), ("robust-not-created", UNKNOWN_TOPIC)])
def test_metadata_names(server, wire, name, code):
    r = wire.call(METADATA, 12, metadata_request(12, [name], auto=code == 0))
    assert [t.error_code for t in r.topics] == [code]


def test_list_offsets_far_future_and_past(server, topic, wire):
    now = int(time.time() * 1000)
    for version in (1, 7):
        # one query per request: a partition named twice in one request is INVALID_REQUEST (below)
        got = [list_offsets(wire, topic, [(0, ts)], version=version)[0]
               for ts in (2**63 - 1, now + 10**12, 0, 1, -1, -2)]
        assert [g[0] for g in got] == [0] * 6
        assert [g[1] for g in got] == [-1, -1, 0, 0, 5, 0]
    assert list_offsets(wire, topic, [(7, -1)]) == [(UNKNOWN_TOPIC, -1, -1)]
    assert list_offsets(wire, "robust-nope", [(0, -1)]) == [(UNKNOWN_TOPIC, -1, -1)]


def test_a_long_poll_is_answered_at_its_deadline(server, topic, wire):
    started = time.monotonic()
    p = fetch_parts(wire, topic, [(1, 0)], max_wait_ms=1500)[0]
    assert 1.2 < time.monotonic() - started < 5 and p.error_code == 0 and not p.records


# --------------------------------------------------------------------------- known defects


def test_a_long_poll_whose_client_left_does_not_hold_its_socket(server, topic):
    w = KafkaWire(server.kafka_address)
    assert create_topic(w, "robust-longpoll").error_code == 0
    baseline = server_fds(server)
    try:
        for _ in range(50):
            c = KafkaWire(server.kafka_address)
            frame, _ = c.frame(FETCH, 12, fetch_request(12, "robust-longpoll", 0, max_wait_ms=2**31 - 1))
            c.send_raw(frame)
            c.close()
        time.sleep(2)
        held = server_fds(server) - baseline
        assert held <= 3, f"{held} connections of departed clients are still open"
    finally:
        assert produce(w, "robust-longpoll", record_batch([b"wake"])).error_code == 0  # frees them today
        w.close()


def test_a_partition_named_many_times_in_one_fetch_is_read_once(server, wire):
    assert create_topic(wire, "robust-dup-fetch").error_code == 0
    big = os.urandom(900_000)
    for _ in range(6):
        assert produce(wire, "robust-dup-fetch", record_batch([big])).error_code == 0
    one = sum(len(p.records) for p in fetch_parts(wire, "robust-dup-fetch", [(0, 0)], max_bytes=2**31 - 1,
                                                   partition_max_bytes=2**31 - 1))
    c = KafkaWire(server.kafka_address, timeout=60)
    try:
        dup = fetch_parts_request("robust-dup-fetch", [(0, 0)] * 20, max_bytes=2**31 - 1, partition_max_bytes=2**31 - 1)
        frame, _ = c.frame(FETCH, 12, dup)
        c.send_raw(frame)
        (size,) = struct.unpack(">i", c._exactly(4))  # only the size: the body is not read
    finally:
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()
    assert size < 2 * one + 4096, f"{size} bytes for 20 copies of a {one}-byte partition"


def test_list_offsets_with_a_duplicated_partition_gets_invalid_request(server, topic, wire):
    got = list_offsets(wire, topic, [(0, -1), (0, -1), (1, -1)])
    assert [g[0] for g in got] == [INVALID_REQUEST, INVALID_REQUEST, 0]


@pytest.mark.parametrize("version,timestamp", [(1, -3), (6, -3), (7, -4), (9, -6), (10, -100)])
def test_list_offsets_special_timestamps_follow_their_versions(server, topic, wire, version, timestamp):
    assert list_offsets(wire, topic, [(0, timestamp)], version=version)[0][0] == UNSUPPORTED_VERSION


def test_list_offsets_by_timestamp_does_not_stall_other_clients(server, wire):
    assert create_topic(wire, "robust-scan", partitions=4).error_code == 0
    for p in range(4):
        for _ in range(30):
            assert produce(wire, "robust-scan", record_batch([b"s"] * 5000), partition=p).error_code == 0
    latencies, stop = [], threading.Event()

    def ping():
        while not stop.is_set():
            started = time.monotonic()
            quick_metadata(server)
            latencies.append(time.monotonic() - started)
            time.sleep(0.02)

    t = threading.Thread(target=ping)
    t.start()
    try:
        time.sleep(0.3)
        started = time.monotonic()
        got = list_offsets(wire, "robust-scan", [(p, 2**62) for p in range(4)])
        scan = time.monotonic() - started
        time.sleep(0.1)
    finally:
        stop.set()
        t.join(30)
    assert [g[:2] for g in got] == [(0, -1)] * 4
    # Relative to the scan, not to the clock: a scan that kept the loop to itself would make a
    # ping sent early in it wait about as long as the scan (600k records: a good part of a
    # second). Load slows the scan and the pings alike, so the ratio holds on a busy machine
    # where a fixed bound (0.3 s, once) did not.
    assert len(latencies) >= 2
    assert max(latencies) < scan / 2, f"another client waited {max(latencies):.2f} s of a {scan:.2f} s scan"


def test_a_long_poll_on_a_topic_deleted_meanwhile_reports_the_topic_gone(server, wire):
    assert create_topic(wire, "robust-gone").error_code == 0
    assert produce(wire, "robust-gone", record_batch([b"old"])).error_code == 0
    poller = KafkaWire(server.kafka_address, timeout=20)
    try:
        frame, _ = poller.frame(FETCH, 12, fetch_request(12, "robust-gone", 1, max_wait_ms=2500))
        poller.send_raw(frame)
        time.sleep(0.5)
        r = wire.call(DELETE_TOPICS, 4, req(DELETE_TOPICS, 4, topic_names=("robust-gone",),
                                             timeout=datetime.timedelta(seconds=5)))
        assert r.responses[0].error_code == 0
        _, answer = poller.read_response(FETCH, 12)
        p = answer.responses[0].partitions[0]
        assert p.error_code in (UNKNOWN_TOPIC, NOT_LEADER), (p.error_code, p.high_watermark)
    finally:
        poller.close()


def test_the_server_is_still_whole(server, healthy):
    healthy.check()
    assert alive(server)
