"""Kafka handlers driven in process (a real engine in ``tmp_path``, no socket): long polls whose
peer leaves or whose topic is deleted, partitions named twice, response byte caps, ListOffsets
scans that give the loop back, and the request checks Kafka makes before doing anything."""

from __future__ import annotations

import asyncio
import datetime
import glob
import inspect
import os
import uuid

import pytest

from headwater.codec.kafka import messages
from headwater.codec.kafka.convert import kafka_to_iggy
from headwater.codec.kafka.record_batch import Record, build_record_batch
from headwater.config import KafkaConfig
from headwater.core.broker import Broker
from headwater.frontends.kafka import configs, errors
from headwater.frontends.kafka.handlers import api_versions, delete_topics, fetch, list_offsets, produce
from headwater.frontends.kafka.names import topic_id
from headwater.frontends.kafka.registry import Context
from headwater.frontends.kafka.server import KafkaFrontend
from headwater.storage.api import open_engine
from headwater.storage.local import readahead

FETCH, LIST_OFFSETS, API_VERSIONS, DELETE_TOPICS = 1, 2, 18, 20


@pytest.fixture
def fe(tmp_path):
    broker = Broker(open_engine(str(tmp_path)))
    yield KafkaFrontend(broker, KafkaConfig())
    broker.close()


def append(fe, topic, partition: int, values, base_timestamp: int = 1_000) -> None:
    records = [Record(i, i, None, v) for i, v in enumerate(values)]
    batch, _ = kafka_to_iggy(build_record_batch(records, base_timestamp=base_timestamp), 1)
    fe.broker.append(topic.partitions[partition], bytearray(batch), verified=True)


def ctx_for(fe, api_key: int, version: int, peer_gone=None) -> Context:
    return Context(fe.broker, fe, api_key=api_key, version=version, closing=asyncio.Event(), peer_gone=peer_gone)


def fetch_request(parts, *, version: int = 12, max_wait_ms: int = 0, max_bytes: int = 1 << 20,
                  partition_max_bytes: int = 1 << 20):
    """A Fetch for [(topic key, partition, offset)], one FetchTopic per entry (so keys may repeat)."""
    mod = messages.request_module(FETCH, version)
    key = "topic_id" if version >= 13 else "topic"
    topics = tuple(
        mod.FetchTopic(**{key: t}, partitions=(mod.FetchPartition(partition=p, fetch_offset=o,
                                                                    partition_max_bytes=partition_max_bytes,
                                                                    current_leader_epoch=-1, last_fetched_epoch=-1,
                                                                    log_start_offset=-1),))
        for t, p, o in parts
    )
    return messages.build(messages.request_class(FETCH, version), replica_id=-1,
                          max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=max_bytes,
                          isolation_level=0, session_id=0, session_epoch=-1, topics=topics,
                          forgotten_topics_data=(), rack_id="")


def answered(out):
    """The Fetch handler's result: the body it answered at once, or its coroutine's, run."""
    return asyncio.run(out) if inspect.isawaitable(out) else out


def fetched(body: bytes, version: int = 12):
    """The Fetch handler's answer (the encoded response body) read back by kio."""
    assert isinstance(body, bytes)
    return messages.decode(messages.response_class(FETCH, version), body)


def _listeners(topic) -> int:
    return sum(len(p._listeners) for p in topic.partitions.values())


def test_a_long_poll_ends_without_an_answer_when_its_peer_leaves(fe):
    topic = fe.names.create("lp-gone", 2, {})

    async def go():
        gone = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(fetch.fetch(ctx_for(fe, FETCH, 12, lambda: gone),
                                                 fetch_request([("lp-gone", 0, 0), ("lp-gone", 1, 0)],
                                                               max_wait_ms=2**31 - 1)))
        for _ in range(10):
            await asyncio.sleep(0)
        assert not task.done() and _listeners(topic) == 2
        gone.set_exception(asyncio.IncompleteReadError(b"", 4))  # what the server's read-ahead does at EOF
        assert await asyncio.wait_for(task, 5) is None
        assert _listeners(topic) == 0

    asyncio.run(go())


def test_a_long_poll_keeps_waiting_when_the_next_request_arrives_early(fe):
    topic = fe.names.create("lp-early", 1, {})

    async def go():
        ahead = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(fetch.fetch(ctx_for(fe, FETCH, 12, lambda: ahead),
                                                 fetch_request([("lp-early", 0, 0)], max_wait_ms=60_000)))
        await asyncio.sleep(0.01)
        ahead.set_result(b"\x00\x00\x00\x10")  # the next request's size: it waits its turn
        await asyncio.sleep(0.01)
        assert not task.done()
        append(fe, topic, 0, [b"now"])
        response = fetched(await asyncio.wait_for(task, 5))
        assert b"now" in response.responses[0].partitions[0].records

    asyncio.run(go())


@pytest.mark.parametrize("version", [12, 13])
def test_a_long_poll_on_a_deleted_topic_is_woken_and_answered_gone(fe, version):
    topic = fe.names.create("lp-del", 1, {})
    key = "lp-del" if version < 13 else topic_id(topic)

    async def go():
        task = asyncio.ensure_future(fetch.fetch(ctx_for(fe, FETCH, version),
                                                 fetch_request([(key, 0, 0)], version=version, max_wait_ms=60_000)))
        await asyncio.sleep(0.01)
        fe.broker.delete_topic(topic.stream_id, topic.id)
        fe.names.create("lp-del", 1, {})  # created again at once: a different topic
        response = fetched(await asyncio.wait_for(task, 5), version)
        part = response.responses[0].partitions[0]
        assert part.error_code == (errors.UNKNOWN_TOPIC_OR_PARTITION if version < 13 else errors.UNKNOWN_TOPIC_ID)
        assert _listeners(topic) == 0

    asyncio.run(go())


def test_a_partition_named_twice_is_read_once_in_its_first_place(fe):
    topic = fe.names.create("dup", 2, {})
    for p in (0, 1):
        append(fe, topic, p, [b"p%d-a" % p, b"p%d-b" % p])
    ctx = ctx_for(fe, FETCH, 12)
    request = fetch_request([("dup", 0, 0), ("dup", 1, 0), ("dup", 0, 1), ("nope", 0, 0), ("nope", 0, 0)])
    response = fetched(answered(fetch.fetch(ctx, request)))
    got = [(t.topic, [(p.partition_index, int(p.error_code)) for p in t.partitions]) for t in response.responses]
    assert got == [("dup", [(0, 0), (1, 0)]), ("nope", [(0, errors.UNKNOWN_TOPIC_OR_PARTITION)])]
    records = response.responses[0].partitions[0].records
    assert records.count(b"p0-b") == 1 and b"p0-a" not in records  # one copy, from the last mention's offset 1


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="needs posix_fadvise")
@pytest.mark.parametrize("max_bytes", [1 << 20, 150_000])
def test_a_fetch_with_an_uncached_partition_answers_what_a_cached_one_does(fe, max_bytes):
    topic = fe.names.create("cold", 3, {})
    for p in range(3):
        for b in range(40):
            append(fe, topic, p, [b"p%d-b%02d-" % (p, b) + bytes([65 + b % 26]) * 1000] * 3)
    request = fetch_request([("cold", p, 0) for p in range(3)], max_bytes=max_bytes, partition_max_bytes=100_000)
    cached = fetch.fetch(ctx_for(fe, FETCH, 12), request)
    assert isinstance(cached, bytes)  # all in the page cache: answered at once, no coroutine
    for path in glob.glob(os.path.join(topic.partitions[1].log.directory, "*.log")):
        if not readahead.evict(path):
            pytest.skip("this filesystem keeps the pages in memory")
    later = fetch.fetch(ctx_for(fe, FETCH, 12), request)
    assert inspect.isawaitable(later)  # partition 1 is read off the loop
    assert asyncio.run(later) == cached  # the same partitions, order, budget and bytes


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="needs posix_fadvise")
def test_a_topic_deleted_while_a_fetch_reads_it_in_is_answered_gone(fe):
    topic = fe.names.create("cold-del", 1, {})
    for b in range(40):
        append(fe, topic, 0, [b"b%02d-" % b + b"x" * 1000] * 3)
    for path in glob.glob(os.path.join(topic.partitions[0].log.directory, "*.log")):
        if not readahead.evict(path):
            pytest.skip("this filesystem keeps the pages in memory")

    async def race():
        reading = fetch.fetch(ctx_for(fe, FETCH, 12), fetch_request([("cold-del", 0, 0)]))
        assert inspect.isawaitable(reading)
        task = asyncio.ensure_future(reading)
        await asyncio.sleep(0)  # the read misses and waits for the worker
        assert not task.done()
        fe.broker.delete_topic(topic.stream_id, topic.id)
        return fetched(await task)

    part = asyncio.run(race()).responses[0].partitions[0]
    assert part.error_code == errors.UNKNOWN_TOPIC_OR_PARTITION and part.records is None


def test_the_response_is_capped_at_max_bytes_but_returns_one_batch(fe):
    topic = fe.names.create("cap", 3, {})
    for p in range(3):
        for _ in range(3):
            append(fe, topic, p, [bytes([65 + p]) * 1000])
    one = len(fetched(answered(fetch.fetch(ctx_for(fe, FETCH, 12), fetch_request(
        [("cap", 0, 0)], max_bytes=1)))).responses[0].partitions[0].records)
    assert 1000 < one < 1200  # max_bytes 1: still the first batch

    def sizes(max_bytes, partition_max_bytes=1 << 20):
        r = fetched(answered(fetch.fetch(ctx_for(fe, FETCH, 12), fetch_request(
            [("cap", p, 0) for p in range(3)], max_bytes=max_bytes, partition_max_bytes=partition_max_bytes))))
        return [len(p.records or b"") for t in r.responses for p in t.partitions]

    assert sizes(1 << 20) == [3 * one] * 3
    assert sizes(4 * one) == [3 * one, one, 0]  # whole batches only, the total within max_bytes
    assert all(one <= n <= 2 * one for n in sizes(1 << 20, partition_max_bytes=2 * one))
    assert sizes(1, partition_max_bytes=1) == [one, 0, 0]
    assert fetch.FETCH_MAX_BYTES == 57671680


def _list_request(version: int, queries):
    mod = messages.request_module(LIST_OFFSETS, version)
    by_topic: dict[str, list] = {}
    for name, p, ts in queries:
        by_topic.setdefault(name, []).append(messages.build(mod.ListOffsetsPartition, partition_index=p, timestamp=ts,
                                                            current_leader_epoch=-1))
    topics = tuple(messages.build(mod.ListOffsetsTopic, name=n, partitions=tuple(ps)) for n, ps in by_topic.items())
    return messages.build(messages.request_class(LIST_OFFSETS, version), replica_id=-1, isolation_level=0,
                          topics=topics, timeout=datetime.timedelta(seconds=5))


def _answers(response):
    return [(int(p.error_code), p.offset) for t in response.topics for p in t.partitions]


def test_list_offsets_refuses_duplicates_and_timestamps_of_later_versions(fe):
    topic = fe.names.create("lo", 2, {})
    append(fe, topic, 0, [b"a", b"b"])

    def ask(version, queries):
        return _answers(asyncio.run(list_offsets.list_offsets(ctx_for(fe, LIST_OFFSETS, version),
                                                              _list_request(version, queries))))

    assert ask(1, [("lo", 0, -1), ("lo", 1, -1), ("lo", 0, -2)]) == [(42, -1), (0, 0), (42, -1)]
    for version, ts in ((1, -3), (6, -3), (7, -4), (8, -5), (10, -6), (10, -100), (10, -(2**63))):
        assert ask(version, [("lo", 0, ts)]) == [(35, -1)], (version, ts)
    assert ask(7, [("lo", 0, -3)]) == [(0, 1)]
    assert ask(8, [("lo", 0, -4)]) == [(0, 0)]
    assert ask(9, [("lo", 0, -5)]) == [(0, -1)]
    assert ask(9, [("lo", 7, -6), ("nope", 0, -1)]) == [(35, -1), (3, -1)]  # the version check comes first


def test_a_timestamp_scan_gives_the_loop_back_and_notices_a_deletion(fe, monkeypatch):
    monkeypatch.setattr(list_offsets, "_PAUSE_EVERY", 100)
    topic = fe.names.create("scan", 1, {})
    for _ in range(10):
        append(fe, topic, 0, [b"s"] * 500)

    async def go(delete: bool):
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                if delete and ticks == 5:
                    fe.broker.delete_topic(topic.stream_id, topic.id)
                await asyncio.sleep(0)

        t = asyncio.ensure_future(ticker())
        response = await list_offsets.list_offsets(ctx_for(fe, LIST_OFFSETS, 7), _list_request(7, [("scan", 0, 2**62)]))
        t.cancel()
        return _answers(response), ticks

    answers, ticks = asyncio.run(go(False))
    assert answers == [(0, -1)] and ticks >= 40  # 5000 records: a pause every 100
    answers, _ = asyncio.run(go(True))
    assert answers == [(errors.UNKNOWN_TOPIC_OR_PARTITION, -1)]


def test_delete_topics_refuses_duplicates_and_ambiguous_entries(fe):
    a = fe.names.create("del-a", 1, {})
    b = fe.names.create("del-b", 1, {})
    mod = messages.request_module(DELETE_TOPICS, 6)
    zero = uuid.UUID(int=0)

    def delete(*entries):
        request = messages.build(messages.request_class(DELETE_TOPICS, 6), timeout=datetime.timedelta(seconds=5),
                                 topics=tuple(mod.DeleteTopicState(name=n, topic_id=i) for n, i in entries))
        r = delete_topics.delete_topics(ctx_for(fe, DELETE_TOPICS, 6), request)
        return [(x.name, int(x.error_code), x.error_message) for x in r.responses]

    assert delete(("del-a", zero), ("del-a", zero)) == [("del-a", 42, "Duplicate topic name.")]
    assert delete((None, topic_id(a)), (None, topic_id(a))) == [(None, 42, "Duplicate topic id.")]
    assert delete((None, zero)) == [(None, 42, "Neither topic name nor id were specified.")]
    assert delete(("del-a", topic_id(a))) == [("del-a", 42, "You may not specify both topic name and topic id.")]
    assert delete((None, topic_id(a)), ("del-a", zero)) == [
        ("del-a", 42, "The provided topic name maps to an ID that was already supplied.")]
    assert fe.names.resolve("del-a") is a
    assert delete(("del-a", zero), (None, topic_id(b))) == [("del-a", 0, None), ("del-b", 0, None)]
    assert fe.names.resolve("del-a") is None and fe.names.resolve("del-b") is None


@pytest.mark.parametrize("name,version,ok", [
    ("apache-kafka-java", "3.7.0", True), ("confluent-kafka-python", "2.5.0-rdkafka-2.5.0", True), ("a", "1", True),
    ("bad name!", "1.0", False), ("", "", False), ("ok", "-1-", False), ("ok", "1.0.", False), ("ok", "é", False),
])
def test_api_versions_v3_checks_the_client_software_name(fe, name, version, ok):
    request = messages.build(messages.request_class(API_VERSIONS, 3), client_software_name=name,
                             client_software_version=version)
    r = api_versions.api_versions(ctx_for(fe, API_VERSIONS, 3), request)
    assert (int(r.error_code), bool(r.api_keys)) == ((0, True) if ok else (42, False))


def test_config_integer_bounds():
    assert configs.split({"max.message.bytes": str(2**31 - 1)}, 1)[1] == {"max_batch_bytes": 2**31 - 1}
    for bad in ({"max.message.bytes": str(2**31)}, {"retention.bytes": str(2**63)},
                {"retention.ms": str(-(2**63) - 1)}):
        with pytest.raises(configs.ConfigError):
            configs.split(bad, 1)

