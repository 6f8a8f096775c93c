"""headwater.metrics and its instrumentation, over a real broker on a real local engine: what the
exposition says after appends, reads, syncs and connections (parsed with prometheus_client's own
parser), and that a closed broker leaves the registry."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client.parser import text_string_to_metric_families

from headwater import metrics
from headwater.codec.batch import Message, build_batch
from headwater.core import errors
from headwater.core.broker import Broker
from headwater.frontends.listener import Listener
from headwater.storage.api import open_engine


def scrape() -> dict[tuple[str, tuple], float]:
    """Every sample of the exposition: (sample name, sorted labels) -> value."""
    body, content_type = metrics.exposition()
    assert content_type.startswith("text/plain; version=")
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def labels(stream: str, topic: str, partition: int) -> tuple:
    return tuple(sorted({"stream": stream, "topic": topic, "partition": str(partition)}.items()))


def batch(*payloads: bytes) -> bytearray:
    return bytearray(build_batch([Message(p) for p in payloads]))


def test_partition_counters_count_messages_and_batch_bytes_in_and_out(tmp_path):
    b = Broker(open_engine(str(tmp_path)))
    try:
        s = b.create_stream("metered")
        t = b.create_topic(s.id, "events", 2, {})
        p0, p1 = t.partitions[0], t.partitions[1]
        first, second = batch(b"a", b"bb", b"ccc"), batch(b"dddd")
        sizes = len(first) + len(second)
        b.append(p0, first)
        b.append(p0, second)
        b.append(p1, batch(b"other"))
        read, n = p0.read(1, 10)  # offsets 1..3: a slice of the first batch, then the second whole
        assert n == 3
        got = scrape()
        lab = labels("metered", "events", 0)
        assert got[("headwater_partition_messages_in_total", lab)] == 4
        assert got[("headwater_partition_bytes_in_total", lab)] == sizes
        assert got[("headwater_partition_messages_out_total", lab)] == 3
        assert got[("headwater_partition_bytes_out_total", lab)] == sum(len(x) for x in read)
        assert got[("headwater_partition_high_watermark", lab)] == 4
        assert got[("headwater_partition_segments", lab)] == 1
        assert got[("headwater_partition_size_bytes", lab)] == sizes
        assert got[("headwater_partition_messages_in_total", labels("metered", "events", 1))] == 1
        assert got[("headwater_partition_messages_out_total", labels("metered", "events", 1))] == 0
        # a refused batch counts nothing
        bad = batch(b"x")
        bad[0:8] = b"\xff" * 8  # partition_id/... reserved fields aside, break the length
        bad[32:36] = (1).to_bytes(4, "little")
        with pytest.raises(errors.InvalidBatch):
            b.append(p0, bad)
        assert scrape()[("headwater_partition_messages_in_total", lab)] == 4
    finally:
        b.close()
    # a closed broker's partitions are gone from the exposition
    assert not any(name.startswith("headwater_partition_") for name, lab in scrape() if dict(lab).get("stream") == "metered")


def test_enforce_fsync_rounds_are_timed(tmp_path):
    def count(kind: str) -> float:
        return scrape().get(("headwater_fsync_duration_seconds_count", (("kind", kind),)), 0.0)

    before_rounds, before_inline = count("group_commit"), count("inline")
    b = Broker(open_engine(str(tmp_path)))
    try:
        s = b.create_stream("s")
        p = b.create_topic(s.id, "durable", 1, {"enforce_fsync": True}).partitions[0]

        async def go():
            done = b.append(p, batch(b"a"))
            await done.durable

        asyncio.run(go())
        rounds = b.engine.flusher.rounds
        assert rounds >= 1
        assert count("group_commit") - before_rounds == rounds
        p.log.sync()  # an inline fdatasync
        assert count("inline") - before_inline >= 1
    finally:
        b.close()


def test_connections_gauge_follows_accept_and_close():
    def open_now() -> float:
        return scrape().get(("headwater_connections", (("protocol", "probe"), ("transport", "tcp"))), 0.0)

    async def go():
        accepted = asyncio.Event()
        release = asyncio.Event()

        async def serve(reader, writer, conn):
            accepted.set()
            await release.wait()

        listener = Listener("probe-listener", "127.0.0.1", 0, serve, protocol="probe")
        await listener.start()
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", listener.bound_port)
            await accepted.wait()
            assert open_now() == 1
            release.set()
            writer.close()
            for _ in range(200):  # the serve task's finally runs on the next loop turns
                if open_now() == 0:
                    break
                await asyncio.sleep(0.01)
            assert open_now() == 0
        finally:
            await listener.stop()

    asyncio.run(go())


def test_request_histograms_are_per_protocol_transport_and_request():
    h = metrics.request_histogram("iggy", "tcp", metrics.PRODUCE)
    before = scrape().get(
        ("headwater_request_duration_seconds_count", (("protocol", "iggy"), ("request", "produce"), ("transport", "tcp"))), 0.0
    )
    h.observe(0.002)
    got = scrape()
    key = (("protocol", "iggy"), ("request", "produce"), ("transport", "tcp"))
    assert got[("headwater_request_duration_seconds_count", key)] == before + 1
    assert got[("headwater_request_duration_seconds_bucket", tuple(sorted(key + (("le", "0.0025"),))))] >= 1


def test_process_metrics_are_exposed():
    names = {name for name, _ in scrape()}
    assert "process_cpu_seconds_total" in names and "process_resident_memory_bytes" in names


def test_histogram_buckets_are_cumulative_and_inclusive_of_their_bound():
    h = metrics.request_histogram("bucket-probe", "tcp", metrics.FETCH)
    for seconds in (0.0025, 0.003, 100.0):
        h.observe(seconds)
    got = scrape()
    key = (("protocol", "bucket-probe"), ("request", "fetch"), ("transport", "tcp"))

    def bucket(le: str) -> float:
        return got[("headwater_request_duration_seconds_bucket", tuple(sorted(key + (("le", le),))))]

    assert bucket("0.001") == 0
    assert bucket("0.0025") == 1  # le: a value on the bound is in its bucket
    assert bucket("0.005") == 2
    assert bucket("30.0") == 2
    assert bucket("+Inf") == 3 == got[("headwater_request_duration_seconds_count", key)]
    assert got[("headwater_request_duration_seconds_sum", key)] == 0.0025 + 0.003 + 100.0
