"""Kafka framing under abuse, against a real ``headwater serve``: garbage, lying sizes and
headers, versions out of range, pipelines broken in the middle, clients that never read or
drip bytes, and request bodies a broker must refuse without falling over.

A kafka-python producer and consumer (``HealthyClient``) keep working alongside: after each
abuse they produce a record and read it back, byte for byte. Tests marked ``xfail(strict=True)``
are known defects: each reason says what goes wrong and what a Kafka broker does instead.

The helpers here (``HealthyClient``, ``raw_frame``, ``server_fds``, ``peak_rss_mb``...) are
shared by the other ``test_robustness_kafka_*`` modules.
"""

from __future__ import annotations

import os
import random
import resource
import socket
import struct
import time

import pytest

from kafka_wire import Closed, KafkaWire
from test_kafka_wire import create_topic, metadata_request, produce, produce_request, record_batch, req

PRODUCE, FETCH, LIST_OFFSETS, METADATA, DESCRIBE_GROUPS, API_VERSIONS, DELETE_TOPICS = 0, 1, 2, 3, 15, 18, 20
MAX_REQUEST_SIZE = 100 * 1024 * 1024  # kafka.max_request_size default (Kafka's socket.request.max.bytes)


# --------------------------------------------------------------------------- shared helpers


class HealthyClient:
    """A well-behaved kafka-python producer and consumer, kept open across a module's abuse."""

    def __init__(self, server, topic: str = "healthy-client"):
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition

        self.topic = topic
        self.producer = KafkaProducer(bootstrap_servers=server.kafka_address, acks="all", linger_ms=0,
                                      request_timeout_ms=15000)
        self.producer.send(topic, b"first").get(20)  # auto-creates the topic
        self.consumer = KafkaConsumer(bootstrap_servers=server.kafka_address, enable_auto_commit=False,
                                      fetch_max_wait_ms=100, request_timeout_ms=15000)
        self.tp = TopicPartition(topic, 0)
        self.consumer.assign([self.tp])
        self.consumer.seek_to_beginning(self.tp)
        self.n = 0

    def check(self) -> None:
        """Produce one record and read it back with its key and headers."""
        self.n += 1
        value = b"healthy-%d-" % self.n + os.urandom(8)
        md = self.producer.send(self.topic, value, key=b"k%d" % self.n, headers=[("h", b"%d" % self.n)]).get(20)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for records in self.consumer.poll(timeout_ms=200).values():
                for r in records:
                    if r.offset == md.offset:
                        assert (r.key, r.value, r.headers) == (b"k%d" % self.n, value, [("h", b"%d" % self.n)])
                        return
        raise AssertionError(f"the healthy consumer never saw offset {md.offset}")

    def close(self) -> None:
        self.producer.close(5)
        self.consumer.close()


def raw_frame(api_key: int, version: int, body: bytes, *, flexible: bool = False, correlation: int = 7,
              client_id: bytes | None = b"robust") -> bytes:
    """A size-prefixed request frame with a hand-made body (header v1, or v2 when ``flexible``)."""
    head = struct.pack(">hhi", api_key, version, correlation)
    head += struct.pack(">h", -1) if client_id is None else struct.pack(">h", len(client_id)) + client_id
    if flexible:
        head += b"\x00"
    return struct.pack(">i", len(head) + len(body)) + head + body


def quick_metadata(server) -> None:
    """One Metadata round trip on a new connection (cheaper than ``HealthyClient.check``)."""
    w = KafkaWire(server.kafka_address, timeout=10)
    try:
        r = w.call(METADATA, 12, metadata_request(12, None))
        assert r.brokers[0].node_id == 1
    finally:
        w.close()


def tracebacks(server) -> int:
    return server.log().count("Traceback")


def server_fds(server) -> int:
    return len(os.listdir(f"/proc/{server.proc.pid}/fd"))


def _status_kb(server, key: str) -> int:
    with open(f"/proc/{server.proc.pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def peak_rss_mb(server) -> float:
    return _status_kb(server, "VmHWM") / 1024


def rss_mb(server) -> float:
    return _status_kb(server, "VmRSS") / 1024


def alive(server) -> bool:
    return server.proc is not None and server.proc.poll() is None


def latest_offset(w: KafkaWire, topic: str, partition: int = 0) -> int:
    r = w.call(LIST_OFFSETS, 1, req(LIST_OFFSETS, 1, replica_id=-1, topics=(
        req(LIST_OFFSETS, 1, "ListOffsetsTopic", name=topic, partitions=(
            req(LIST_OFFSETS, 1, "ListOffsetsPartition", partition_index=partition, timestamp=-1),)),)))
    return r.topics[0].partitions[0].offset


@pytest.fixture(scope="module")
def healthy(server):
    c = HealthyClient(server)
    yield c
    c.close()


# --------------------------------------------------------------------------- garbage and lying headers

_rng = random.Random(7)
GARBAGE = {
    "random bytes": _rng.randbytes(512),
    "size -1": struct.pack(">i", -1),
    "size -2**31": struct.pack(">i", -(2**31)),
    "size 0": struct.pack(">i", 0),
    "size 7 (shorter than a header)": struct.pack(">i", 7) + b"\x00\x03\x00\x01\x00\x00\x00",
    "size 2**31-1": struct.pack(">i", 2**31 - 1),
    "size max_request_size + 1": struct.pack(">i", MAX_REQUEST_SIZE + 1),
    "header without client_id": struct.pack(">i", 8) + struct.pack(">hhi", METADATA, 1, 1),
    "client_id length says 100, 3 bytes follow": struct.pack(">i", 13) + struct.pack(">hhih", METADATA, 1, 1, 100) + b"abc",
    "client_id length -2": struct.pack(">i", 14) + struct.pack(">hhih", METADATA, 1, 1, -2) + b"\x00" * 4,
    "flexible header: 5 tagged fields, none present":
        struct.pack(">i", 12) + struct.pack(">hhih", METADATA, 12, 1, 1) + b"x" + b"\x05",
    "flexible header: tagged field of 100 bytes, 2 present":
        struct.pack(">i", 16) + struct.pack(">hhih", METADATA, 12, 1, 1) + b"x" + b"\x01\x00\x64ab",
    "flexible header: tag count varint never ends":
        struct.pack(">i", 22) + struct.pack(">hhih", METADATA, 12, 1, 1) + b"x" + b"\xff" * 11,
    "flexible header: tag count varint cut short":
        struct.pack(">i", 12) + struct.pack(">hhih", METADATA, 12, 1, 1) + b"x" + b"\x80",
    "unknown api key 999": raw_frame(999, 0, b""),
    "api key -1": raw_frame(-1, 0, b""),
}


@pytest.mark.parametrize("name", list(GARBAGE))
def test_garbage_closes_only_its_connection(server, healthy, name):
    before = tracebacks(server)
    bad = KafkaWire(server.kafka_address)
    try:
        bad.send_raw(GARBAGE[name])
        assert bad.closed_by_server(5)
    finally:
        bad.close()
    quick_metadata(server)
    assert tracebacks(server) == before


def test_a_frame_announced_at_the_maximum_then_abandoned(server, healthy):
    s = socket.create_connection(("127.0.0.1", server.kafka_port))
    s.sendall(struct.pack(">i", MAX_REQUEST_SIZE) + b"\x00" * 4096)
    quick_metadata(server)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    healthy.check()


def test_every_api_refuses_versions_outside_its_advertised_range(server, healthy):
    w = KafkaWire(server.kafka_address)
    try:
        r = w.call(API_VERSIONS, 3, req(API_VERSIONS, 3, client_software_name="robust", client_software_version="1"))
    finally:
        w.close()
    ranges = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    assert len(ranges) >= 20
    before = tracebacks(server)
    for key, (lo, hi) in ranges.items():
        if key == API_VERSIONS:
            continue
        for version in {lo - 1, hi + 1, 32767, -1} - set(range(lo, hi + 1)):
            bad = KafkaWire(server.kafka_address)
            try:
                bad.send_raw(raw_frame(key, version, b"\x00" * 16))
                assert bad.closed_by_server(5), (key, version)
            finally:
                bad.close()
    for unknown in (4, 5, 6, 7, 17, 24, 57, 68, 1000, 32767):
        bad = KafkaWire(server.kafka_address)
        try:
            bad.send_raw(raw_frame(unknown, 0, b""))
            assert bad.closed_by_server(5), unknown
        finally:
            bad.close()
    assert tracebacks(server) == before
    healthy.check()


@pytest.mark.parametrize("version", [5, 100, 32767, -1])
def test_api_versions_out_of_range_is_answered_in_v0_with_error_35(server, version):
    w = KafkaWire(server.kafka_address)
    try:
        w.send_raw(raw_frame(API_VERSIONS, version, b"\x00\x00\x00", correlation=77))
        data = w.read_frame()
        assert data == struct.pack(">ihihhh", 77, 35, 1, API_VERSIONS, 0, 4)
    finally:
        w.close()


def test_unknown_header_tags_and_a_null_client_id_are_accepted(server):
    w = KafkaWire(server.kafka_address)
    try:
        frame, _ = w.frame(METADATA, 12, metadata_request(12, ["healthy-client"]))
        body = frame[4 + 8 + 2 + len(b"wire-test") + 1:]
        tagged = struct.pack(">hhih", METADATA, 12, 42, 1) + b"x" + b"\x02\x05\x02hi\x09\x00" + body
        w.send_raw(struct.pack(">i", len(tagged)) + tagged)
        got, r = w.read_response(METADATA, 12)
        assert got == 42 and r.topics[0].name == "healthy-client"
        null_id = struct.pack(">hhih", METADATA, 12, 43, -1) + b"\x00" + body
        w.send_raw(struct.pack(">i", len(null_id)) + null_id)
        got, r = w.read_response(METADATA, 12)
        assert got == 43 and r.topics[0].error_code == 0
    finally:
        w.close()


# --------------------------------------------------------------------------- pipelines, backpressure, slow clients


def test_pipelined_requests_before_a_garbage_frame_are_answered_in_order(server, healthy):
    w0 = KafkaWire(server.kafka_address)
    assert create_topic(w0, "robust-pipe").error_code == 0
    w0.close()
    w = KafkaWire(server.kafka_address)
    try:
        frames, expect = [], []
        f, c = w.frame(PRODUCE, 9, produce_request(9, "robust-pipe", record_batch([b"before-garbage"])))
        frames.append(f)
        expect.append((PRODUCE, 9, c))
        for v in (1, 9, 12):
            f, c = w.frame(METADATA, v, metadata_request(v, ["robust-pipe"]))
            frames.append(f)
            expect.append((METADATA, v, c))
        frames.append(raw_frame(999, 0, b"\xff\xff"))  # the garbage: an unknown API
        f, _ = w.frame(PRODUCE, 9, produce_request(9, "robust-pipe", record_batch([b"after-garbage"])))
        frames.append(f)
        w.send_raw(b"".join(frames))
        for key, version, correlation in expect:
            got, r = w.read_response(key, version)
            assert got == correlation
            if key == PRODUCE:
                assert r.responses[0].partition_responses[0].error_code == 0
        assert w.closed_by_server(5)
    finally:
        w.close()
    w = KafkaWire(server.kafka_address)
    try:
        assert latest_offset(w, "robust-pipe") == 1  # the produce before the garbage, not the one after
    finally:
        w.close()
    healthy.check()


def test_a_client_that_never_reads_is_backpressured_not_buffered(server, healthy):
    w0 = KafkaWire(server.kafka_address)
    assert create_topic(w0, "robust-bp").error_code == 0
    big = os.urandom(900_000)
    for _ in range(6):
        assert produce(w0, "robust-bp", record_batch([big])).error_code == 0
    w0.close()
    from test_kafka_wire import fetch_request

    rss_before = rss_mb(server)
    reader = KafkaWire(server.kafka_address)
    reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    request = fetch_request(12, "robust-bp", 0)
    frame, _ = reader.frame(FETCH, 12, request)
    reader.sock.settimeout(3)
    sent = 0
    try:
        for _ in range(200):  # 200 fetches of ~5.4 MB each, never read
            reader.sock.sendall(frame)
            sent += 1
    except socket.timeout:
        pass
    time.sleep(1)
    try:
        started = time.monotonic()
        quick_metadata(server)
        assert time.monotonic() - started < 2
        assert rss_mb(server) - rss_before < 100, "responses for an unread connection piled up in memory"
    finally:
        reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        reader.close()
    healthy.check()


def test_slowloris_and_hundreds_of_half_sent_frames(server, healthy):
    socks = []
    try:
        for i in range(300):
            s = socket.create_connection(("127.0.0.1", server.kafka_port))
            s.sendall(struct.pack(">i", 60) + b"\x00\x03"[: i % 3])
            socks.append(s)
        slow = KafkaWire(server.kafka_address)
        frame, correlation = slow.frame(METADATA, 1, metadata_request(1, ["healthy-client"]))
        for i in range(30):  # one byte every 50 ms
            slow.send_raw(frame[i:i + 1])
            time.sleep(0.05)
            if i % 10 == 0:
                started = time.monotonic()
                quick_metadata(server)
                assert time.monotonic() - started < 2
        slow.send_raw(frame[30:])
        got, r = slow.read_response(METADATA, 1)
        assert got == correlation and r.topics[0].name == "healthy-client"
        slow.close()
    finally:
        for s in socks:
            s.close()
    healthy.check()


# --------------------------------------------------------------------------- known defects


@pytest.mark.parametrize("api_key,version,body", [
    (METADATA, 12, bytes.fromhex("ffffffff7f")),  # compact array, 2**35-2 topics
    (METADATA, 1, bytes.fromhex("7fffffff")),  # legacy array, 2**31-1 topics (16 GiB)
    (PRODUCE, 9, bytes.fromhex("00ffff00001388ffffffff0f")),  # topic_data, 2**32-2 entries
], ids=["metadata-v12-compact", "metadata-v1-legacy", "produce-v9-topic-data"])
def test_a_huge_array_count_closes_only_its_connection(fresh_server, api_key, version, body):
    # An address-space cap on the server process makes "an allocation too large for this machine"
    # deterministic whatever the RAM and overcommit policy (16 GiB: far above what the server needs).
    cap = 16 << 30
    resource.prlimit(fresh_server.proc.pid, resource.RLIMIT_AS, (cap, cap))
    w = KafkaWire(fresh_server.kafka_address)
    try:
        w.send_raw(raw_frame(api_key, version, body, flexible=version >= 9))
        assert w.closed_by_server(10)
    finally:
        w.close()
    time.sleep(0.5)
    died = [line for line in fresh_server.log().splitlines() if "memory allocation" in line or "panicked" in line]
    assert alive(fresh_server), f"the server process died: {died}"
    quick_metadata(fresh_server)


def test_unknown_tagged_fields_in_a_request_body_are_skipped(server):
    w = KafkaWire(server.kafka_address)
    try:
        frame, _ = w.frame(METADATA, 12, metadata_request(12, ["healthy-client"]))
        body = frame[4 + 8 + 2 + len(b"wire-test") + 1:]
        assert body.endswith(b"\x00")  # the request's (empty) tagged-field section
        w.send_raw(raw_frame(METADATA, 12, body[:-1] + b"\x01\x63\x03abc", flexible=True, correlation=5))
        got, r = w.read_response(METADATA, 12)
        assert got == 5 and r.topics[0].name == "healthy-client"
    except Closed:
        pytest.fail("the server closed the connection")
    finally:
        w.close()


@pytest.mark.parametrize("api_key,version,body", [
    (DESCRIBE_GROUPS, 0, bytes.fromhex("ffffffff")),
    (LIST_OFFSETS, 1, bytes.fromhex("ffffffff" "ffffffff")),
    (DELETE_TOPICS, 1, bytes.fromhex("ffffffff" "00001388")),
], ids=["describe-groups-v0", "list-offsets-v1", "delete-topics-v1"])
def test_a_null_required_array_is_refused_without_a_traceback(server, api_key, version, body):
    before = tracebacks(server)
    w = KafkaWire(server.kafka_address)
    try:
        w.send_raw(raw_frame(api_key, version, body))
        assert w.closed_by_server(5)
    finally:
        w.close()
    time.sleep(0.2)
    assert tracebacks(server) == before, server.log()[-1500:]


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_v10_v11_with_a_null_topic_name_gets_invalid_request(server, version):
    import uuid

    before = tracebacks(server)
    w = KafkaWire(server.kafka_address)
    try:
        topic = req(METADATA, version, "MetadataRequestTopic", topic_id=uuid.UUID(int=0), name=None)
        fields = dict(topics=(topic,), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        if version == 10:
            fields["include_cluster_authorized_operations"] = False
        r = w.call(METADATA, version, req(METADATA, version, **fields))
        assert [t.error_code for t in r.topics] == [42]
    except Closed:
        pytest.fail("no answer: the connection was closed")
    finally:
        w.close()
        assert tracebacks(server) == before


@pytest.mark.parametrize("name,version", [("bad name!", "1.0"), ("", ""), ("ok", "-1-")])
def test_api_versions_with_an_invalid_software_name_gets_invalid_request(server, name, version):
    w = KafkaWire(server.kafka_address)
    try:
        r = w.call(API_VERSIONS, 3, req(API_VERSIONS, 3, client_software_name=name, client_software_version=version))
        assert r.error_code == 42
    finally:
        w.close()


def test_a_client_id_that_is_not_utf8_is_accepted(server):
    w = KafkaWire(server.kafka_address)
    try:
        frame, _ = w.frame(METADATA, 1, metadata_request(1, ["healthy-client"]))
        body = frame[4 + 8 + 2 + len(b"wire-test"):]
        w.send_raw(raw_frame(METADATA, 1, body, client_id=b"\xff\xfeclient", correlation=9))
        got, r = w.read_response(METADATA, 1)
        assert got == 9 and r.topics[0].name == "healthy-client"
    except Closed:
        pytest.fail("the server closed the connection")
    finally:
        w.close()


def test_the_healthy_client_survived_the_module(server, healthy):
    healthy.check()
    assert alive(server)
