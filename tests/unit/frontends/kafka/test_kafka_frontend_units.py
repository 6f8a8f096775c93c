"""Pure parts of the Kafka front-end: the error table, framing, names, configs, the registry."""

from __future__ import annotations

import inspect
import struct

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from headwater.core import errors as core_errors
from headwater.core import producers
from headwater.core.broker import Broker
from headwater.codec.kafka import framing, messages
from headwater.frontends.kafka import configs, errors
from headwater.frontends.kafka.names import Names, is_valid_name, topic_id
from headwater.frontends.kafka import handlers, registry
from headwater.frontends.kafka.registry import APIS, HANDLERS, ApiKey
from headwater.frontends.kafka.server import KafkaFrontend
from headwater.storage.api import open_engine


def _core_error_classes():
    for module in (core_errors, producers):
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, core_errors.BrokerError):
                yield cls


def test_every_core_error_has_a_kafka_code():
    missing = [cls.__name__ for cls in _core_error_classes() if cls not in errors.ERROR_CODES]
    assert missing == []
    assert errors.code_for(core_errors.TopicNotFound("x")) == 3
    assert errors.code_for(producers.OutOfOrderSequence("x")) == 45
    assert errors.code_for(core_errors.CorruptBatch("damaged", (1, 2, 3), 15)) == 2  # CORRUPT_MESSAGE
    assert errors.code_for(core_errors.CorruptData("partition fenced")) == 56  # KAFKA_STORAGE_ERROR
    assert errors.code_for(ValueError("x")) == -1


def test_request_header_v1_v2_and_errors():
    body = struct.pack(">hhih", 3, 12, 42, 3) + b"cli" + b"\x01\x05\x02ab" + b"BODY"
    h, pos = framing.decode_request_header(body, True)
    assert h == framing.RequestHeader(3, 12, 42, "cli") and body[pos:] == b"BODY"
    h, pos = framing.decode_request_header(struct.pack(">hhih", 18, 0, 1, -1) + b"X", False)
    assert h.client_id is None and pos == 10
    for bad in (b"\x00\x03", struct.pack(">hhih", 3, 1, 1, 9) + b"ab", struct.pack(">hhih", 3, 9, 1, 0) + b"\x01\x00\x09"):
        with pytest.raises(framing.FrameError):
            framing.decode_request_header(bad, True)
    assert framing.response_prefix(7, 3, False) == struct.pack(">ii", 7, 7)
    assert framing.response_prefix(7, 3, True) == struct.pack(">ii", 8, 7) + b"\x00"


def test_registry_versions_have_schemas():
    for api in APIS.values():
        for v in range(api.min_version, api.max_version + 1):
            if (api.key, v) in {(0, 0), (0, 1), (0, 2)}:
                continue  # Produce v0-2: hand-encoded UNSUPPORTED_VERSION
            assert messages.has_schema(api.key, v), (api.key, v)


def test_every_listed_api_module_registers_exactly_its_apis():
    handlers.load_all()  # what the first request of each API does
    assert sorted(HANDLERS) == sorted(APIS)
    for key, fn in HANDLERS.items():
        assert fn.__module__ == f"{handlers.__name__}.{APIS[key].module}", key
        assert handlers.handler(APIS[key]) is fn
    assert sorted(APIS) == sorted(int(k) for k in ApiKey)  # every key named is served
    # a handler its module's entry does not list is refused (what is served is what APIS lists)
    with pytest.raises(RuntimeError, match="not listed"):
        registry.kafka_api(ApiKey.FETCH)(lambda ctx, request: None)


def test_build_fills_and_converts_fields():
    cls = messages.response_class(0, 9)
    mod = messages.response_module(0, 9)
    part = messages.build(mod.PartitionProduceResponse, index=1, error_code=10, base_offset=-1, log_append_time=-1, unknown=5)
    assert part.error_code.value == 10 and part.log_append_time is None and part.record_errors == ()
    resp = messages.build(cls, responses=(), throttle_time=0)
    assert messages.encode(resp)


def test_kafka_topic_names():
    assert is_valid_name("a.b-c_D9") and not is_valid_name("a b") and not is_valid_name("..")
    assert not is_valid_name("x" * 250) and is_valid_name("x" * 249)


def test_names_resolution_order_and_shadowing(tmp_path):
    broker = Broker(open_engine(str(tmp_path)))
    try:
        names = Names(broker, "kafka")
        own = names.create("orders.eu", 1, {})  # before any Iggy "orders" stream: allowed
        s = broker.create_stream("orders")
        iggy_eu = broker.create_topic(s.id, "eu", 1, {})
        iggy_us = broker.create_topic(s.id, "us", 1, {})
        assert names.resolve("orders.eu") is own  # the Kafka stream wins
        assert names.resolve("orders.us") is iggy_us
        assert names.name_of(iggy_eu) is None  # hidden behind the Kafka topic
        with pytest.raises(core_errors.TopicNameExists):
            names.create("orders.us", 1, {})
        with pytest.raises(core_errors.InvalidTopicName):
            names.create("bad name", 1, {})
        assert names.resolve("kafka.orders.eu") is None  # the Kafka stream is never S in S.T
        assert [n for n, _ in names.visible()] == ["orders.eu", "orders.us"]
        assert names.by_id(topic_id(iggy_us)) == ("orders.us", iggy_us)
        assert topic_id(own) != topic_id(iggy_us)
    finally:
        broker.close()


def test_config_mapping(tmp_path):
    options, settings = configs.split({"retention.ms": "1000", "retention.bytes": str(4 << 20), "max.message.bytes": "77"}, 2)
    assert options == {"message_expiry": 1_000_000, "max_topic_size": 8 << 20, "segment_size": 8 << 20}
    assert settings == {"max_batch_bytes": 77}
    for bad in ({"retention.ms": "x"}, {"cleanup.policy": "shred"}, {"nope": "1"}, {"retention.bytes": "-5"},
                {"compression.type": "brotli"}, {"min.cleanable.dirty.ratio": "2"}, {"segment.ms": "0"},
                {"message.format.version": "latest"}, {"delete.retention.ms": "-1"}):
        with pytest.raises(configs.ConfigError):
            configs.split(bad, 1)
    broker = Broker(open_engine(str(tmp_path)))
    try:
        s = broker.create_stream("kafka")
        t = broker.create_topic(s.id, "t", 2, options)
        broker.update_topic_settings(t, settings)
        described = {c.name: c.value for c in configs.describe(broker, t)}
        assert described["retention.ms"] == "1000" and described["retention.bytes"] == str(4 << 20)
        assert described["max.message.bytes"] == "77"
        configs.alter(broker, t, {"retention.ms": None, "max.message.bytes": None}, False)
        described = {c.name: c.value for c in configs.describe(broker, t)}
        assert described["retention.ms"] == "-1" and described["max.message.bytes"] == "1048588"
        with pytest.raises(configs.ConfigError):
            configs.alter(broker, t, {"segment.bytes": str(2 << 20)}, False)
    finally:
        broker.close()


def test_fetch_long_poll_parks_until_an_append(tmp_path):
    """In-process: a Fetch with max_wait 120 s stays pending on an empty partition and
    returns the record as soon as one is appended (Partition listeners)."""
    import asyncio
    import datetime

    from headwater.codec.kafka.convert import kafka_to_iggy
    from headwater.codec.kafka.record_batch import Record, build_record_batch
    from headwater.config import KafkaConfig
    from headwater.frontends.kafka.handlers.fetch import fetch
    from headwater.frontends.kafka.registry import Context

    broker = Broker(open_engine(str(tmp_path)))
    try:
        fe = KafkaFrontend(broker, KafkaConfig())
        topic = fe.names.create("lp", 1, {})
        mod = messages.request_module(1, 12)
        fp = mod.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
        request = mod.FetchRequest(
            replica_id=-1, max_wait=datetime.timedelta(seconds=120), min_bytes=1, max_bytes=1 << 20,
            isolation_level=0, session_id=0, session_epoch=-1,
            topics=(mod.FetchTopic(topic="lp", partitions=(fp,)),), forgotten_topics_data=(),
        )

        async def go():
            ctx = Context(broker, fe, api_key=1, version=12, closing=asyncio.Event())
            task = asyncio.ensure_future(fetch(ctx, request))
            for _ in range(20):
                await asyncio.sleep(0)
            assert not task.done()  # parked: no data yet
            batch, _ = kafka_to_iggy(build_record_batch([Record(0, 0, None, b"wake")], base_timestamp=1), 1)
            broker.append(topic.partitions[0], bytearray(batch), verified=True)
            body = await asyncio.wait_for(task, 10)
            response = messages.decode(messages.response_class(1, 12), body)  # the encoded response body
            part = response.responses[0].partitions[0]
            assert part.high_watermark == 1 and b"wake" in part.records

        asyncio.run(go())
    finally:
        broker.close()


def test_compaction_and_kafka_only_configs(tmp_path):
    options, settings = configs.split(
        {"cleanup.policy": "compact,delete", "segment.ms": "100", "delete.retention.ms": "250",
         "min.cleanable.dirty.ratio": "0.01", "max.compaction.lag.ms": "9223372036854775807",
         "compression.type": "zstd", "message.format.version": "2.8-IV1"}, 1)
    assert options["cleanup_policy"] == "compact,delete" and options["segment_roll"] == 100_000
    assert options["delete_retention"] == 250_000 and options["max_compaction_lag"] == "never"
    assert settings == {"compression_type": "zstd", "message_format_version": "2.8-IV1"}
    broker = Broker(open_engine(str(tmp_path)))
    try:
        s = broker.create_stream("kafka")
        t = broker.create_topic(s.id, "t", 1, options)
        broker.update_topic_settings(t, settings)
        d = {c.name: c for c in configs.describe(broker, t)}
        assert d["cleanup.policy"].value == "compact,delete" and not d["cleanup.policy"].is_default
        assert d["segment.ms"].value == "100" and d["delete.retention.ms"].value == "250"
        assert d["max.compaction.lag.ms"].value == str(2**63 - 1)
        assert d["compression.type"].value == "zstd" and configs.fetch_compression(broker, t) == 4
        assert d["message.format.version"].value == "2.8-IV1"
        assert configs.apply_list_op(broker, t, "cleanup.policy", False, "delete") == "compact"
        assert configs.apply_list_op(broker, t, "cleanup.policy", True, "delete") == "compact,delete"
        with pytest.raises(configs.ConfigError):
            configs.apply_list_op(broker, t, "cleanup.policy", False, "compact,delete")  # empty
        with pytest.raises(configs.ConfigError):
            configs.apply_list_op(broker, t, "retention.ms", True, "5")  # not a list
        configs.alter(broker, t, {"cleanup.policy": None, "segment.ms": None, "compression.type": None}, False)
        d = {c.name: c for c in configs.describe(broker, t)}
        assert d["cleanup.policy"].value == "delete" and d["segment.ms"].value == str(2**63 - 1)
        assert d["compression.type"].value == "producer" and configs.fetch_compression(broker, t) == 0
        assert not t.options.compact
    finally:
        broker.close()


_NAME_PARTS = ("kafka", "a", "b", "a.b", "c")
_OPS = st.lists(st.tuples(st.sampled_from(("stream+", "stream-", "stream=", "topic+", "topic-", "topic=")),
                          st.sampled_from(_NAME_PARTS), st.sampled_from(_NAME_PARTS),
                          st.sampled_from(_NAME_PARTS)), max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS)
@example(ops=[("stream+", "a", "a", "a"), ("topic+", "a", "b", "a"), ("stream+", "kafka", "a", "a"),
              ("topic+", "kafka", "a.b", "a"), ("topic=", "kafka", "a.b", "c"), ("stream=", "a", "a", "c"),
              ("stream+", "a", "a", "a"), ("topic+", "a", "c", "a"), ("topic-", "kafka", "c", "a"),
              ("stream-", "c", "a", "a"), ("topic=", "a", "c", "a.b")])
def test_names_resolve_kept_topics_follow_every_catalog_change(tmp_path_factory, ops):
    """resolve() keeps what it found between catalog changes: after any sequence of stream and topic
    creations, deletions and renames (through the broker, as either protocol makes them) it answers
    what the rules, walked afresh, answer, for every name (shadowing included: a Kafka-stream topic
    "a.b" created after "a.b" resolved to the Iggy topic b of stream a)."""
    broker = Broker(open_engine(str(tmp_path_factory.mktemp("names"))))
    try:
        names = Names(broker, "kafka")
        candidates = ["a.b", "b.a", "a.a.b", "c", "a.c", "b.b", "b.a.b", "kafka.a", "c.a", "c.b", "c.c"]
        for kind, x, y, z in ops:
            try:
                if kind == "stream+":
                    broker.create_stream(x)
                elif kind == "stream-":
                    broker.delete_stream(x)
                elif kind == "stream=":
                    broker.update_stream(x, z)
                elif kind == "topic+":
                    broker.create_topic(x, y, 1, {})
                elif kind == "topic-":
                    broker.delete_topic(x, y)
                else:
                    broker.update_topic(x, y, z, {})
            except core_errors.BrokerError:
                pass
            for n in candidates:
                assert names.resolve(n) is names._lookup(n), (kind, x, y, z, n)
    finally:
        broker.close()
