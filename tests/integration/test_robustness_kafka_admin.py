"""Admin APIs under abuse against a real ``headwater serve``: CreateTopics with impossible
partition counts, replication factors and configs; deletes of what does not exist; partition
counts that shrink; configs of unknown resource types; DeleteRecords past the end; the same
topic named twice in one request.

``xfail(strict=True)`` marks a known defect; its reason gives the Kafka broker's behaviour.
"""

from __future__ import annotations

import datetime
import uuid

import pytest

from kafka_wire import KafkaWire
from test_kafka_wire import produce, record_batch, req
from test_robustness_kafka_wire import HealthyClient, alive, latest_offset

CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS, DESCRIBE_CONFIGS, ALTER_CONFIGS = 19, 20, 21, 32, 33
CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS, METADATA = 37, 44, 3
OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC, INVALID_TOPIC, TOPIC_EXISTS, INVALID_PARTITIONS = 1, 3, 17, 36, 37
INVALID_REPLICATION_FACTOR, INVALID_CONFIG, INVALID_REQUEST, UNKNOWN_TOPIC_ID = 38, 40, 42, 100
TIMEOUT = datetime.timedelta(seconds=5)


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


def create(w: KafkaWire, name: str, partitions: int = 1, replication: int = 1, configs=(), version: int = 7):
    cfgs = tuple(req(CREATE_TOPICS, version, "CreatableTopicConfig", name=k, value=v) for k, v in configs)
    t = req(CREATE_TOPICS, version, "CreatableTopic", name=name, num_partitions=partitions,
            replication_factor=replication, assignments=(), configs=cfgs)
    r = w.call(CREATE_TOPICS, version, req(CREATE_TOPICS, version, topics=(t,), timeout=TIMEOUT, validate_only=False))
    return r.topics[0]


def partition_count(w: KafkaWire, name: str) -> int:
    from test_kafka_wire import metadata_request

    t = w.call(METADATA, 12, metadata_request(12, [name], auto=False)).topics[0]
    return -1 if t.error_code else len(t.partitions)


def grow(w: KafkaWire, *topics: tuple[str, int]):
    r = w.call(CREATE_PARTITIONS, 3, req(CREATE_PARTITIONS, 3, topics=tuple(
        req(CREATE_PARTITIONS, 3, "CreatePartitionsTopic", name=n, count=c, assignments=None) for n, c in topics),
        timeout=TIMEOUT, validate_only=False))
    return [(x.name, x.error_code) for x in r.results]


@pytest.mark.parametrize("partitions,code", [(0, INVALID_PARTITIONS), (-2, INVALID_PARTITIONS),
                                             (1001, INVALID_PARTITIONS), (100_000, INVALID_PARTITIONS),
                                             (2**31 - 1, INVALID_PARTITIONS), (-1, 0)])
def test_create_topics_partition_counts(server, wire, partitions, code):
    name = f"robust-parts{partitions}".replace("-", "m")
    r = create(wire, name, partitions=partitions)
    assert r.error_code == code, r.error_message
    assert partition_count(wire, name) == (1 if code == 0 else -1)  # -1 = kafka.default_partitions


@pytest.mark.parametrize("replication", [3, 2, 0, -2])
def test_create_topics_replication_factors_one_node_cannot_give(server, wire, replication):
    name = f"robust-rf{replication}".replace("-", "m")
    assert create(wire, name, replication=replication).error_code == INVALID_REPLICATION_FACTOR
    assert partition_count(wire, name) == -1


@pytest.mark.parametrize("configs", [
    [("unknown.config", "1")],
    [("retention.ms", "abc")],
    [("retention.ms", "-5")],
    [("retention.ms", None)],
    [("retention.ms", "99999999999999999999999")],
    [("max.message.bytes", "-1")],
    [("max.message.bytes", str(2**31))],  # an INT config in Kafka
    [("retention.bytes", str(2**63))],  # a LONG
    [("segment.bytes", "1")],
    [("segment.bytes", "abc")],
    [("retention.bytes", "1")],
    [("cleanup.policy", "compact,shred")],
    [("min.insync.replicas", "2")],
    [("compression.type", "brotli")],
    [("min.cleanable.dirty.ratio", "1.01")],
    [("max.compaction.lag.ms", "0")],
    [("message.timestamp.type", "LogAppendTime")],
], ids=lambda c: f"{c[0][0]}={c[0][1]}")
def test_create_topics_with_unknown_or_invalid_configs(server, wire, configs):
    name = "robust-cfg-" + str(abs(hash(str(configs))) % 10**8)
    r = create(wire, name, configs=configs)
    assert r.error_code == INVALID_CONFIG, r
    assert partition_count(wire, name) == -1


def test_create_topics_names(server, wire):
    assert create(wire, "x" * 250).error_code == INVALID_TOPIC
    assert create(wire, "bad/name").error_code == INVALID_TOPIC
    assert create(wire, "robust-once").error_code == 0
    assert create(wire, "robust-once").error_code == TOPIC_EXISTS
    two = req(CREATE_TOPICS, 7, "CreatableTopic", name="robust-twice", num_partitions=1, replication_factor=1,
              assignments=(), configs=())
    r = wire.call(CREATE_TOPICS, 7, req(CREATE_TOPICS, 7, topics=(two, two), timeout=TIMEOUT, validate_only=False))
    assert [(t.name, t.error_code) for t in r.topics] == [("robust-twice", INVALID_REQUEST)]  # Kafka: one result
    assert partition_count(wire, "robust-twice") == -1


def test_delete_topics_that_do_not_exist(server, wire):
    for version in (1, 4, 5):
        r = wire.call(DELETE_TOPICS, version, req(DELETE_TOPICS, version, topic_names=("robust-nonexistent", "", "bad$"),
                                                   timeout=TIMEOUT))
        assert [x.error_code for x in r.responses] == [UNKNOWN_TOPIC] * 3
    r = wire.call(DELETE_TOPICS, 6, req(DELETE_TOPICS, 6, topics=(
        req(DELETE_TOPICS, 6, "DeleteTopicState", name="robust-nonexistent", topic_id=uuid.UUID(int=0)),
        req(DELETE_TOPICS, 6, "DeleteTopicState", name=None, topic_id=uuid.uuid4())), timeout=TIMEOUT))
    assert [x.error_code for x in r.responses] == [UNKNOWN_TOPIC, UNKNOWN_TOPIC_ID]


def test_create_partitions_never_shrinks(server, wire, healthy):
    assert create(wire, "robust-grow", partitions=3).error_code == 0
    for count in (2, 3, 0, -1, -(2**31)):
        assert grow(wire, ("robust-grow", count)) == [("robust-grow", INVALID_PARTITIONS)]
    assert grow(wire, ("robust-grow", 1001)) == [("robust-grow", INVALID_PARTITIONS)]
    assert grow(wire, ("robust-nonexistent", 5)) == [("robust-nonexistent", UNKNOWN_TOPIC)]
    assert partition_count(wire, "robust-grow") == 3
    assert grow(wire, ("robust-grow", 4)) == [("robust-grow", 0)]
    assert partition_count(wire, "robust-grow") == 4
    healthy.check()


@pytest.mark.parametrize("resource_type", [0, 1, 4, 8, 99, -1])
def test_alter_configs_on_resource_types_that_cannot_be_altered(server, wire, resource_type):
    assert create(wire, "robust-alter").error_code in (0, TOPIC_EXISTS)
    r = wire.call(ALTER_CONFIGS, 2, req(ALTER_CONFIGS, 2, resources=(
        req(ALTER_CONFIGS, 2, "AlterConfigsResource", resource_type=resource_type, resource_name="robust-alter",
            configs=(req(ALTER_CONFIGS, 2, "AlterableConfig", name="retention.ms", value="1000"),)),), validate_only=False))
    assert r.responses[0].error_code == INVALID_REQUEST
    r = wire.call(INCREMENTAL_ALTER_CONFIGS, 1, req(INCREMENTAL_ALTER_CONFIGS, 1, resources=(
        req(INCREMENTAL_ALTER_CONFIGS, 1, "AlterConfigsResource", resource_type=resource_type, resource_name="robust-alter",
            configs=(req(INCREMENTAL_ALTER_CONFIGS, 1, "AlterableConfig", name="retention.ms", config_operation=0,
                         value="1000"),)),), validate_only=False))
    assert r.responses[0].error_code == INVALID_REQUEST
    if resource_type != 4:  # the broker (4) can be described
        r = wire.call(DESCRIBE_CONFIGS, 4, req(DESCRIBE_CONFIGS, 4, resources=(
            req(DESCRIBE_CONFIGS, 4, "DescribeConfigsResource", resource_type=resource_type, resource_name="robust-alter",
                configuration_keys=None),), include_synonyms=False, include_documentation=False))
        assert r.results[0].error_code == INVALID_REQUEST


def test_alter_configs_of_an_unknown_topic_and_with_bad_values(server, wire):
    def alter(name, key, value):
        r = wire.call(ALTER_CONFIGS, 2, req(ALTER_CONFIGS, 2, resources=(
            req(ALTER_CONFIGS, 2, "AlterConfigsResource", resource_type=2, resource_name=name,
                configs=(req(ALTER_CONFIGS, 2, "AlterableConfig", name=key, value=value),)),), validate_only=False))
        return r.responses[0].error_code

    assert alter("robust-nonexistent", "retention.ms", "1000") == UNKNOWN_TOPIC
    assert create(wire, "robust-alter2").error_code == 0
    assert alter("robust-alter2", "retention.ms", "nope") == INVALID_CONFIG
    assert alter("robust-alter2", "no.such.config", "1") == INVALID_CONFIG
    assert alter("robust-alter2", "segment.bytes", "2097152") == INVALID_CONFIG  # fixed at creation here


@pytest.mark.parametrize("offset", [4, 99, 2**63 - 1, -2, -5, -(2**63)])
def test_delete_records_outside_the_log(server, wire, offset):
    if partition_count(wire, "robust-delrec") < 0:
        assert create(wire, "robust-delrec").error_code == 0
        assert produce(wire, "robust-delrec", record_batch([b"a", b"b", b"c"])).error_code == 0
    r = wire.call(DELETE_RECORDS, 2, req(DELETE_RECORDS, 2, topics=(
        req(DELETE_RECORDS, 2, "DeleteRecordsTopic", name="robust-delrec", partitions=(
            req(DELETE_RECORDS, 2, "DeleteRecordsPartition", partition_index=0, offset=offset),)),), timeout=TIMEOUT))
    p = r.topics[0].partitions[0]
    assert (p.error_code, p.low_watermark) == (OFFSET_OUT_OF_RANGE, -1)
    assert latest_offset(wire, "robust-delrec") == 3


def test_delete_records_of_what_does_not_exist(server, wire):
    r = wire.call(DELETE_RECORDS, 2, req(DELETE_RECORDS, 2, topics=(
        req(DELETE_RECORDS, 2, "DeleteRecordsTopic", name="robust-nonexistent", partitions=(
            req(DELETE_RECORDS, 2, "DeleteRecordsPartition", partition_index=0, offset=1),)),), timeout=TIMEOUT))
    assert r.topics[0].partitions[0].error_code == UNKNOWN_TOPIC


# --------------------------------------------------------------------------- known defects


def test_create_partitions_with_a_topic_named_twice(server, wire):
    assert create(wire, "robust-grow-twice", partitions=2).error_code == 0
    got = grow(wire, ("robust-grow-twice", 6), ("robust-grow-twice", 8))
    count = partition_count(wire, "robust-grow-twice")
    assert got == [("robust-grow-twice", INVALID_REQUEST)] and count == 2, (got, count)  # one result per name


def test_delete_topics_with_a_topic_named_twice(server, wire):
    assert create(wire, "robust-del-twice").error_code == 0
    r = wire.call(DELETE_TOPICS, 4, req(DELETE_TOPICS, 4, topic_names=("robust-del-twice", "robust-del-twice"),
                                         timeout=TIMEOUT))
    got = [x.error_code for x in r.responses]
    assert got == [INVALID_REQUEST] and partition_count(wire, "robust-del-twice") == 1, got


def test_delete_topics_v6_with_neither_name_nor_id(server, wire):
    r = wire.call(DELETE_TOPICS, 6, req(DELETE_TOPICS, 6, topics=(
        req(DELETE_TOPICS, 6, "DeleteTopicState", name=None, topic_id=uuid.UUID(int=0)),), timeout=TIMEOUT))
    assert [x.error_code for x in r.responses] == [INVALID_REQUEST]


def test_delete_topics_v6_refuses_both_name_and_id_and_an_id_given_twice(server, wire):
    # Kafka (ControllerApis.deleteTopics): INVALID_REQUEST for each, and nothing is deleted
    assert create(wire, "robust-del-both").error_code == 0
    tid = wire.call(METADATA, 12, req(METADATA, 12, topics=(
        req(METADATA, 12, "MetadataRequestTopic", name="robust-del-both", topic_id=uuid.UUID(int=0)),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False)).topics[0].topic_id

    def state(name, topic_id):
        return req(DELETE_TOPICS, 6, "DeleteTopicState", name=name, topic_id=topic_id)

    for topics in ((state("robust-del-both", tid),), (state(None, tid), state(None, tid)),
                   (state("robust-del-both", uuid.UUID(int=0)), state(None, tid))):
        r = wire.call(DELETE_TOPICS, 6, req(DELETE_TOPICS, 6, topics=topics, timeout=TIMEOUT))
        assert [x.error_code for x in r.responses] == [INVALID_REQUEST], r
        assert partition_count(wire, "robust-del-both") == 1
    r = wire.call(DELETE_TOPICS, 6, req(DELETE_TOPICS, 6, topics=(state(None, tid),), timeout=TIMEOUT))
    assert [(x.name, x.error_code) for x in r.responses] == [("robust-del-both", 0)]
    assert partition_count(wire, "robust-del-both") == -1


def test_the_server_is_still_whole(server, healthy):
    healthy.check()
    assert alive(server)
