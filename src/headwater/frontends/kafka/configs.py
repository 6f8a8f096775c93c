"""Kafka topic configs <-> Iggy topic options (and the Kafka-only settings the broker keeps).

    Kafka config        Iggy / broker                     on create  alter   notes
    retention.ms        message_expiry (µs = ms x 1000)   yes        yes     -1 = never (the default)
    retention.bytes     max_topic_size = value x parts    yes        yes     -1 = unlimited (default); per
                                                                             partition, as Kafka; the topic
                                                                             total must be >= segment.bytes
                                                                             (on create without segment.bytes
                                                                             the segments shrink to fit)
    segment.bytes       segment_size                      yes        no      1 MiB..1 GiB, 512-byte multiple
    max.message.bytes   topic setting "max_batch_bytes"   yes        yes     largest accepted batch (1048588);
                                                                             0..2**31-1 (a Kafka INT)
    cleanup.policy      -                                 "delete"   no      compaction is not implemented
    compression.type    -                                 read-only          "producer" (stored uncompressed)
    message.timestamp.type  -                             read-only          "CreateTime"
    min.insync.replicas -                                 read-only          "1"

Any other name is INVALID_CONFIG (40), as is a value that does not parse or
is out of bounds, and an attempt to change segment.bytes after creation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core import topic_options as topt
from ...core.broker import Broker
from ...core.catalog import Topic

DEFAULT_MAX_MESSAGE_BYTES = 1048588
INT32_MAX = 2**31 - 1
MAX_BATCH_SETTING = "max_batch_bytes"

READ_ONLY = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "message.timestamp.type": "CreateTime",
    "min.insync.replicas": "1",
}
UPDATABLE = ("retention.ms", "retention.bytes", "max.message.bytes")
CREATE_ONLY = ("segment.bytes",)
TOPIC_CONFIGS = (*UPDATABLE, *CREATE_ONLY, *READ_ONLY)

DOCS = {
    "retention.ms": "Messages older than this (ms) are deleted a whole sealed segment at a time; -1 = never. Iggy message_expiry.",
    "retention.bytes": "Per-partition size cap in bytes (Iggy max_topic_size / partitions); -1 = unlimited.",
    "segment.bytes": "Segment size in bytes (Iggy segment_size); fixed at creation.",
    "max.message.bytes": "Largest record batch accepted from a producer, in bytes.",
    "cleanup.policy": "Only delete is supported.",
    "compression.type": "Batches are stored uncompressed; fetches return them uncompressed.",
    "message.timestamp.type": "Records keep the producer's CreateTime.",
    "min.insync.replicas": "Single node.",
}


class ConfigError(ValueError):
    """A config the broker refuses (Kafka INVALID_CONFIG, 40)."""


@dataclass(frozen=True)
class ConfigValue:
    name: str
    value: str | None
    read_only: bool
    is_default: bool


def max_message_bytes(broker: Broker, topic: Topic) -> int:
    return int(broker.topic_settings(topic).get(MAX_BATCH_SETTING, DEFAULT_MAX_MESSAGE_BYTES))


def _int(name: str, value: str | None) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{name}: {value!r} is not an integer") from None


def _long(name: str, value: str | None) -> int:
    """A Kafka LONG config value (ConfigError outside int64, as Kafka's parser)."""
    n = _int(name, value)
    if not -(2**63) <= n < 2**63:
        raise ConfigError(f"{name}: {value!r} is not a long")
    return n


def _translate(name: str, value: str | None, partitions: int) -> tuple[str, Any]:
    """(iggy option key or setting, value) for one Kafka config; ConfigError if refused."""
    if value is None:
        raise ConfigError(f"{name}: a value is required")
    if name == "retention.ms":
        ms = _long(name, value)
        if ms < -1:
            raise ConfigError(f"{name}: {ms} is below -1")
        return topt.MESSAGE_EXPIRY, "unlimited" if ms == -1 else max(ms, 1) * 1000
    if name == "retention.bytes":
        b = _long(name, value)
        if b < -1:
            raise ConfigError(f"{name}: {b} is below -1")
        return topt.MAX_TOPIC_SIZE, "unlimited" if b == -1 else max(b, 1) * max(partitions, 1)
    if name == "segment.bytes":
        return topt.SEGMENT_SIZE, _int(name, value)
    if name == "max.message.bytes":
        b = _int(name, value)
        if b < 0:
            raise ConfigError(f"{name}: {b} is negative")
        if b > INT32_MAX:
            raise ConfigError(f"{name}: {value!r} is not an int")  # a Kafka INT config
        return MAX_BATCH_SETTING, b
    if name in READ_ONLY:
        if value != READ_ONLY[name]:
            raise ConfigError(f"{name}: only {READ_ONLY[name]!r} is supported")
        return "", None
    raise ConfigError(f"unknown or unsupported topic config {name!r}")


def split(configs: dict[str, str | None], partitions: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Kafka configs -> (Iggy topic options, broker topic settings). Raises ConfigError."""
    options: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    for name, value in configs.items():
        key, v = _translate(name, value, partitions)
        if key == MAX_BATCH_SETTING:
            settings[key] = v
        elif key:
            options[key] = v
    size = options.get(topt.MAX_TOPIC_SIZE)
    if isinstance(size, int) and topt.SEGMENT_SIZE not in options and size < topt.DEFAULT_SEGMENT_SIZE:
        # Iggy wants max_topic_size >= segment_size: shrink the segments to fit the cap
        options[topt.SEGMENT_SIZE] = max(topt.MIN_SEGMENT_SIZE, size // topt.SEGMENT_SIZE_MULTIPLE * topt.SEGMENT_SIZE_MULTIPLE)
    return options, settings


def check_create_options(options: dict[str, Any], partitions: int) -> None:
    """Validate Iggy options as create would (ConfigError with the option's message)."""
    try:
        topt.TopicOptions.parse_create(options, partitions)
    except topt.TopicOptionError as e:
        raise ConfigError(str(e)) from e


def describe(broker: Broker, topic: Topic) -> list[ConfigValue]:
    o = topic.options
    n = max(len(topic.partitions), 1)
    retention_ms = "-1" if o.message_expiry_us is None else str(o.message_expiry_us // 1000)
    retention_bytes = "-1" if o.max_topic_size is None else str(o.max_topic_size // n)
    settings = broker.topic_settings(topic)
    out = [
        ConfigValue("retention.ms", retention_ms, False, topt.MESSAGE_EXPIRY not in o.explicit),
        ConfigValue("retention.bytes", retention_bytes, False, topt.MAX_TOPIC_SIZE not in o.explicit),
        ConfigValue("segment.bytes", str(o.segment_size), True, topt.SEGMENT_SIZE not in o.explicit),
        ConfigValue(
            "max.message.bytes",
            str(settings.get(MAX_BATCH_SETTING, DEFAULT_MAX_MESSAGE_BYTES)),
            False,
            MAX_BATCH_SETTING not in settings,
        ),
    ]
    out += [ConfigValue(k, v, True, True) for k, v in READ_ONLY.items()]
    return out


def alter(broker: Broker, topic: Topic, changes: dict[str, str | None], validate_only: bool) -> None:
    """Apply ``changes`` (a None value resets to the default). Raises ConfigError."""
    n = len(topic.partitions)
    options: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    for name, value in changes.items():
        if name in CREATE_ONLY:
            if value is not None and _int(name, value) == topic.options.segment_size:
                continue
            raise ConfigError(f"{name} cannot change after the topic is created")
        if name in READ_ONLY:
            if value is None or value == READ_ONLY[name]:
                continue
            raise ConfigError(f"{name}: only {READ_ONLY[name]!r} is supported")
        if name not in UPDATABLE:
            raise ConfigError(f"unknown or unsupported topic config {name!r}")
        if value is None:
            if name == "max.message.bytes":
                settings[MAX_BATCH_SETTING] = None
            else:
                options[topt.MESSAGE_EXPIRY if name == "retention.ms" else topt.MAX_TOPIC_SIZE] = "unlimited"
            continue
        key, v = _translate(name, value, n)
        (settings if key == MAX_BATCH_SETTING else options)[key] = v
    if options:
        try:
            updated = topic.options.apply_update(options)
        except topt.TopicOptionError as e:
            raise ConfigError(str(e)) from e
        if not validate_only:
            broker.update_topic(topic.stream_id, topic.id, topic.name, options)
            del updated
    if settings and not validate_only:
        broker.update_topic_settings(topic, settings)
