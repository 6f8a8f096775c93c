"""``/metrics`` of a real ``headwater serve``: the Prometheus text parses with prometheus_client's
parser, and its counters match what was sent and read over Iggy TCP (apache-iggy) and Kafka
(kafka-python)."""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.error
import urllib.request

import apache_iggy as ig
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hw_server import ServerProcess, free_port


def wait_for_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


async def logged_in(address: str) -> ig.IggyClient:
    """An apache-iggy client logged in as the root user (``address``: HOST:PORT or a connection string)."""
    c = ig.IggyClient.from_connection_string(address) if "://" in address else ig.IggyClient(address)
    await c.connect()
    await c.login_user("iggy", "iggy")
    return c


def scrape(server, path: str = "/metrics") -> dict[str, list]:
    """Family name -> its samples."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}{path}", timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=")
        text = r.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def value(families, sample_name: str, **labels) -> float:
    family = sample_name.removesuffix("_total").removesuffix("_count").removesuffix("_sum")
    for s in families.get(family, []):
        if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise KeyError(f"{sample_name} {labels} not exposed")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = ServerProcess(tmp_path_factory.mktemp("headwater") / "data", free_port(), free_port()).start()
    wait_for_port(s.http_port)
    yield s
    assert s.stop() == 0, s.log()


def test_iggy_counts_match_what_was_sent_and_polled(server):
    payloads = [b"m-%03d" % i for i in range(25)]

    async def go():
        c = await logged_in(server.iggy_address)
        await c.create_stream("metered")
        await c.create_topic("metered", "events", 2)
        for i in range(0, 25, 5):  # five batches of five to partition 1
            await c.send_messages("metered", "events", 1, [ig.SendMessage(p) for p in payloads[i : i + 5]])
        got = await c.poll_messages("metered", "events", consumer=ig.Consumer.Single("m"),
                                    polling_strategy=ig.PollingStrategy.Offset(0), count=100, auto_commit=False,
                                    partition_id=1)
        assert [m.payload() for m in got] == payloads
        return scrape(server)  # while the client is still connected

    f = asyncio.run(go())
    p1 = {"stream": "metered", "topic": "events", "partition": "1"}
    p0 = {"stream": "metered", "topic": "events", "partition": "0"}
    assert value(f, "headwater_partition_messages_in_total", **p1) == 25
    assert value(f, "headwater_partition_messages_out_total", **p1) == 25
    assert value(f, "headwater_partition_messages_in_total", **p0) == 0
    stored = value(f, "headwater_partition_size_bytes", **p1)
    # five Iggy batches: a 256-byte header each, a 48-byte frame header and the payload per message
    assert value(f, "headwater_partition_bytes_in_total", **p1) == stored == 5 * 256 + sum(48 + len(p) for p in payloads)
    assert value(f, "headwater_partition_bytes_out_total", **p1) == stored  # the one poll read all five batches
    assert value(f, "headwater_partition_high_watermark", **p1) == 25
    assert value(f, "headwater_partition_segments", **p1) == 1
    iggy = {"protocol": "iggy", "transport": "tcp"}
    assert value(f, "headwater_request_duration_seconds_count", request="produce", **iggy) == 5
    assert value(f, "headwater_request_duration_seconds_count", request="fetch", **iggy) == 1
    assert value(f, "headwater_connections", **iggy) >= 1
    assert value(f, "process_resident_memory_bytes") > 0


def test_kafka_counts_match_what_was_produced_and_fetched(server):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    before = scrape(server)

    def kafka_count(families, request):
        try:
            return value(families, "headwater_request_duration_seconds_count", protocol="kafka", transport="tcp",
                         request=request)
        except KeyError:
            return 0.0

    producer = KafkaProducer(bootstrap_servers=server.kafka_address, linger_ms=0)
    for i in range(12):
        producer.send("metered-kafka", key=b"k", value=b"v-%d" % i, partition=0)
        producer.flush()  # one Produce request per record
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=server.kafka_address, enable_auto_commit=False, consumer_timeout_ms=3000)
    tp = TopicPartition("metered-kafka", 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 12 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(r.value for r in records)
    consumer.close()
    assert got == [b"v-%d" % i for i in range(12)]

    f = scrape(server)
    labels = {"stream": "kafka", "topic": "metered-kafka", "partition": "0"}
    assert value(f, "headwater_partition_messages_in_total", **labels) == 12
    assert value(f, "headwater_partition_messages_out_total", **labels) >= 12  # a fetch may re-read a tail
    assert value(f, "headwater_partition_high_watermark", **labels) == 12
    assert kafka_count(f, "produce") - kafka_count(before, "produce") == 12
    assert kafka_count(f, "fetch") - kafka_count(before, "fetch") >= 1


def test_metrics_endpoint_is_configurable_and_can_be_turned_off(tmp_path):
    moved = ServerProcess(tmp_path / "a", free_port(), free_port())
    moved.start("--config", str(_config(tmp_path / "a.toml", 'metrics_endpoint = "/prom"')))
    try:
        wait_for_port(moved.http_port)
        assert "process_cpu_seconds" in scrape(moved, "/prom")
        with pytest.raises(urllib.error.HTTPError) as e:
            scrape(moved, "/metrics")
        assert e.value.code == 404
    finally:
        moved.stop()
    off = ServerProcess(tmp_path / "b", free_port(), free_port())
    off.start("--config", str(_config(tmp_path / "b.toml", "metrics_enabled = false\nconsole_enabled = false")))
    try:
        wait_for_port(off.http_port)
        for path in ("/metrics", "/console/login"):
            with pytest.raises(urllib.error.HTTPError) as e:
                scrape(off, path)
            assert e.value.code == 404
    finally:
        off.stop()


def _config(path, body: str):
    path.write_text(f"[http]\n{body}\n")
    return path


def test_iggy_over_http_is_timed_per_transport(server):
    async def go():
        c = await logged_in(f"iggy+http://iggy:iggy@127.0.0.1:{server.http_port}")
        await c.create_stream("metered-http")
        await c.create_topic("metered-http", "t", 1)
        for i in range(3):
            await c.send_messages("metered-http", "t", 0, [ig.SendMessage(b"h-%d" % i), ig.SendMessage(b"x")])
        got = await c.poll_messages("metered-http", "t", consumer=ig.Consumer.Single("m"),
                                    polling_strategy=ig.PollingStrategy.Offset(0), count=10, auto_commit=False,
                                    partition_id=0)
        assert len(got) == 6

    asyncio.run(go())
    f = scrape(server)
    http = {"protocol": "iggy", "transport": "http"}
    assert value(f, "headwater_request_duration_seconds_count", request="produce", **http) == 3
    assert value(f, "headwater_request_duration_seconds_count", request="fetch", **http) == 1
    labels = {"stream": "metered-http", "topic": "t", "partition": "0"}
    assert value(f, "headwater_partition_messages_in_total", **labels) == 6
    assert value(f, "headwater_partition_messages_out_total", **labels) == 6


def test_http_and_quic_connections_are_counted(server):
    """uvicorn's HTTP connections and aioquic's QUIC connections appear in headwater_connections
    (read from their own tables at scrape time) and leave it when they close."""
    import http.client

    def count(transport: str) -> float:
        return value(scrape(server), "headwater_connections", protocol="iggy", transport=transport)

    kept = []
    for _ in range(2):  # keep-alive connections that stay open after their request
        conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)
        conn.request("GET", "/ping")
        conn.getresponse().read()
        kept.append(conn)
    assert count("http") >= 3  # the two kept plus the scrape's own
    for conn in kept:
        conn.close()
    deadline = time.monotonic() + 10
    while count("http") > 1 and time.monotonic() < deadline:  # uvicorn sees the close on its next read
        time.sleep(0.05)
    assert count("http") == 1  # the scrape's own connection only

    async def over_quic() -> float:
        c = ig.IggyClient(ig.QuicConfig(server_address=f"127.0.0.1:{server.quic_port}", validate_certificate=False))
        await c.connect()
        await c.login_user("iggy", "iggy")
        await c.ping()
        return count("quic")

    assert asyncio.run(asyncio.wait_for(over_quic(), 30)) == 1


def test_the_serving_process_runs_the_cyclic_collector(tmp_path):
    """``headwater serve`` imports its modules with the cyclic collector off and turns it on
    again once they are in (``headwater.__main__.server_imported``): a server left with it off
    would grow by every reference cycle its requests make. ``python_gc_collections_total`` of
    generation 0 must move while the server takes on objects that stay (gen 0 runs once 700
    more container objects were made than freed: 16 topics of 8 partitions, each partition its
    log, segment and index objects, are thousands)."""
    s = ServerProcess(tmp_path / "data", free_port(), free_port()).start()
    try:
        wait_for_port(s.http_port)

        def gen0() -> float:
            return value(scrape(s), "python_gc_collections_total", generation="0")

        async def grow():
            c = await logged_in(s.iggy_address)
            await c.create_stream("gc")
            for t in range(16):
                await c.create_topic("gc", f"t{t}", 8)

        before = gen0()
        asyncio.run(grow())
        assert gen0() > before
    finally:
        assert s.stop() == 0, s.log()
