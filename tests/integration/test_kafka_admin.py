"""Kafka admin APIs with real admin clients (kafka-python, confluent-kafka) against ``headwater serve``."""

from __future__ import annotations

import pytest


def test_kafka_python_admin_topics_partitions_configs(server):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic
    from kafka.errors import InvalidConfigurationError, InvalidPartitionsError, InvalidTopicError, TopicAlreadyExistsError, UnknownTopicOrPartitionError

    a = KafkaAdminClient(bootstrap_servers=server.kafka_address)
    try:
        a.create_topics([NewTopic("adm-a", 2, 1, topic_configs={"retention.ms": "600000", "segment.bytes": str(8 << 20)})])
        with pytest.raises(TopicAlreadyExistsError):
            a.create_topics([NewTopic("adm-a", 1, 1)])
        with pytest.raises(InvalidTopicError):
            a.create_topics([NewTopic("bad name", 1, 1)])
        with pytest.raises(InvalidConfigurationError):
            a.create_topics([NewTopic("adm-badcfg", 1, 1, topic_configs={"cleanup.policy": "shred"})])
        assert "adm-a" in a.list_topics() and "adm-badcfg" not in a.list_topics()

        def configs(name):
            res = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)], config_filter="all")
            return {k: v["value"] for k, v in res["topic"][name].items()}

        cfg = configs("adm-a")
        assert cfg["retention.ms"] == "600000" and cfg["segment.bytes"] == str(8 << 20)
        assert cfg["retention.bytes"] == "-1" and cfg["cleanup.policy"] == "delete"

        a.create_partitions({"adm-a": NewPartitions(4)})
        with pytest.raises(InvalidPartitionsError):
            a.create_partitions({"adm-a": NewPartitions(3)})
        meta = a.describe_topics(["adm-a"])
        assert len(meta[0]["partitions"]) == 4

        a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "adm-a", configs={"retention.ms": "1200000", "max.message.bytes": "5000"})])
        cfg = configs("adm-a")
        assert cfg["retention.ms"] == "1200000" and cfg["max.message.bytes"] == "5000"
        # kafka-python 3 uses IncrementalAlterConfigs when advertised: only the named config changes
        a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "adm-a", configs={"max.message.bytes": "6000"})])
        assert (configs("adm-a")["retention.ms"], configs("adm-a")["max.message.bytes"]) == ("1200000", "6000")
        # reset (IncrementalAlterConfigs DELETE) goes back to the default
        a.reset_configs([ConfigResource(ConfigResourceType.TOPIC, "adm-a", configs=["retention.ms"])])
        assert configs("adm-a")["retention.ms"] == "-1"
        # AlterConfigs (legacy; kafka-python resends the other modified keys itself)
        a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "adm-a", configs={"retention.bytes": str(64 << 20)})], incremental=False)
        cfg = configs("adm-a")
        assert (cfg["retention.bytes"], cfg["max.message.bytes"]) == (str(64 << 20), "6000")
        res = a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "adm-a", configs={"segment.bytes": str(2 << 20)})], raise_on_unknown=False)
        err = res["topic"]["adm-a"]
        assert str(err).startswith("[Error 40] InvalidConfigurationError: segment.bytes cannot change"), res

        a.delete_topics(["adm-a"])
        assert "adm-a" not in a.list_topics()
        with pytest.raises(UnknownTopicOrPartitionError):
            a.delete_topics(["adm-a"])
    finally:
        a.close()


def test_confluent_admin_configs_partitions_records_cluster(server):
    from confluent_kafka import KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic

    a = AdminClient({"bootstrap.servers": server.kafka_address})
    for f in a.create_topics([NewTopic("adm-c", 1, 1, config={"retention.bytes": str(32 << 20)})]).values():
        assert f.result(10) is None

    res = ConfigResource(ConfigResource.Type.TOPIC, "adm-c")
    described = a.describe_configs([res])[res].result(10)
    assert described["retention.bytes"].value == str(32 << 20)
    assert described["segment.bytes"].is_read_only

    inc = ConfigResource(ConfigResource.Type.TOPIC, "adm-c", incremental_configs=[
        ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    a.incremental_alter_configs([inc])[inc].result(10)
    described = a.describe_configs([res])[res].result(10)
    assert (described["retention.ms"].value, described["retention.bytes"].value) == ("86400000", "-1")
    bad = ConfigResource(ConfigResource.Type.TOPIC, "adm-c", incremental_configs=[
        ConfigEntry("segment.bytes", str(2 << 20), incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as info:
        a.incremental_alter_configs([bad])[bad].result(10)
    assert "INVALID_CONFIG" in str(info.value) or "segment.bytes" in str(info.value)

    for f in a.create_partitions([NewPartitions("adm-c", 3)]).values():
        assert f.result(10) is None
    assert len(a.list_topics("adm-c", timeout=10).topics["adm-c"].partitions) == 3

    p = Producer({"bootstrap.servers": server.kafka_address})
    for i in range(6):
        p.produce("adm-c", value=b"r%d" % i, partition=0)
    assert p.flush(10) == 0
    done = a.delete_records([TopicPartition("adm-c", 0, 4)])
    low = list(done.values())[0].result(10)
    assert low.low_watermark == 4
    assert a.list_topics("adm-c", timeout=10).topics["adm-c"].partitions[0].id == 0
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": server.kafka_address, "group.id": "unused"})
    try:
        assert c.get_watermark_offsets(TopicPartition("adm-c", 0), 10) == (4, 6)
    finally:
        c.close()

    cluster = a.describe_cluster().result(10)
    assert [n.id for n in cluster.nodes] == [1] and cluster.controller.id == 1 and cluster.cluster_id

    for f in a.delete_topics(["adm-c"]).values():
        assert f.result(10) is None
    assert "adm-c" not in a.list_topics(timeout=10).topics


def test_kafka_python_describe_log_dirs_reports_the_data_directory(server):
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    a = KafkaAdminClient(bootstrap_servers=server.kafka_address)
    try:
        a.create_topics([NewTopic("adm-logdirs", 2, 1)])
        p = KafkaProducer(bootstrap_servers=server.kafka_address)
        p.send("adm-logdirs", b"x" * 1000, partition=1).get(timeout=20)
        p.close()
        dirs = a.describe_log_dirs({"adm-logdirs": [1], "adm-missing": [0]})
    finally:
        a.close()
    (broker,) = dirs
    assert broker["broker"] == 1
    (result,) = broker["log_dirs"]
    assert result["error_code"] == 0 and result["log_dir"] == str(server.data_dir.resolve())
    assert result["total_bytes"] > 0 and 0 < result["usable_bytes"] <= result["total_bytes"]
    (topic,) = result["topics"]  # the unknown topic is left out, as in Kafka
    assert topic["name"] == "adm-logdirs"
    (part,) = topic["partitions"]
    assert part["partition_index"] == 1 and part["partition_size"] > 1000 and part["offset_lag"] == 0
