"""Kafka topic configs <-> Iggy topic options (and the Kafka-only settings the broker keeps).

    Kafka config              Iggy / broker                    on create  alter  notes
    retention.ms              message_expiry (µs = ms x 1000)  yes        yes    -1 = never (the default)
    retention.bytes           max_topic_size = value x parts   yes        yes    -1 = unlimited (default); per
                                                                                 partition, as Kafka; the topic
                                                                                 total must be >= segment.bytes
                                                                                 (on create without segment.bytes
                                                                                 the segments shrink to fit)
    segment.bytes             segment_size                     yes        no     1 MiB..1 GiB, 512-byte multiple
    max.message.bytes         topic setting "max_batch_bytes"  yes        yes    largest accepted batch (1048588);
                                                                                 0..2**31-1 (a Kafka INT)
    cleanup.policy            cleanup_policy                   yes        yes    delete, compact, or both (a LIST:
                                                                                 IncrementalAlterConfigs APPEND and
                                                                                 SUBTRACT; the result must not be empty)
    min.cleanable.dirty.ratio min_cleanable_dirty_ratio        yes        yes    0..1 (0.5)
    min.compaction.lag.ms     min_compaction_lag (µs)          yes        yes    >= 0 (0)
    max.compaction.lag.ms     max_compaction_lag (µs)          yes        yes    >= 1 (9223372036854775807 = never)
    delete.retention.ms       delete_retention (µs)            yes        yes    >= 0 (86400000): tombstone lifetime
    segment.ms                segment_roll (µs)                yes        yes    >= 1; Kafka's default is 7 days,
                                                                                 here never (as Iggy topics)
    compression.type          topic setting "compression_type" yes        yes    producer (default), uncompressed,
                                                                                 gzip, snappy, lz4, zstd: batches are
                                                                                 stored uncompressed and a Fetch
                                                                                 returns them compressed with this
                                                                                 codec (producer/uncompressed: none)
    message.format.version    topic setting                    yes        yes    accepted and reported, no effect
                                                                                 (deprecated in Kafka 3.x as well)
    message.timestamp.type    -                                read-only         "CreateTime"
    min.insync.replicas       -                                read-only         "1"

Any other name is INVALID_CONFIG (40), as is a value that does not parse or
is out of bounds, and an attempt to change segment.bytes after creation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ...codec.kafka.compression import CompressionType
from ...core import topic_options as topt
from ...core.broker import Broker
from ...core.catalog import Topic

DEFAULT_MAX_MESSAGE_BYTES = 1048588
INT32_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
MAX_BATCH_SETTING = "max_batch_bytes"
COMPRESSION_SETTING = "compression_type"
FORMAT_SETTING = "message_format_version"
COMPRESSION_TYPES = {
    "producer": CompressionType.NONE,
    "uncompressed": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}
DEFAULT_FORMAT_VERSION = "3.0-IV1"
_FORMAT_VERSION = re.compile(r"\d+\.\d+(\.\d+)?(-IV\d+)?")

# Kafka config -> (Iggy option, unit): "ms" values are turned into µs; "never" marks a
# Long.MAX_VALUE-means-never config; the reset value is the Iggy default.
DURATION_OPTIONS = {
    "min.compaction.lag.ms": (topt.MIN_COMPACTION_LAG, 0, False),
    "max.compaction.lag.ms": (topt.MAX_COMPACTION_LAG, 1, True),
    "delete.retention.ms": (topt.DELETE_RETENTION, 0, False),
    "segment.ms": (topt.SEGMENT_ROLL, 1, True),
}
SETTINGS = {"max.message.bytes": MAX_BATCH_SETTING, "compression.type": COMPRESSION_SETTING,
            "message.format.version": FORMAT_SETTING}
RESET_OPTIONS = {
    "retention.ms": (topt.MESSAGE_EXPIRY, "unlimited"),
    "retention.bytes": (topt.MAX_TOPIC_SIZE, "unlimited"),
    "cleanup.policy": (topt.CLEANUP_POLICY, "delete"),
    "min.cleanable.dirty.ratio": (topt.MIN_CLEANABLE_DIRTY_RATIO, "0.5"),
    "min.compaction.lag.ms": (topt.MIN_COMPACTION_LAG, 0),
    "max.compaction.lag.ms": (topt.MAX_COMPACTION_LAG, "never"),
    "delete.retention.ms": (topt.DELETE_RETENTION, topt.DEFAULT_DELETE_RETENTION_US),
    "segment.ms": (topt.SEGMENT_ROLL, "never"),
}
LIST_CONFIGS = ("cleanup.policy",)

READ_ONLY = {
    "message.timestamp.type": "CreateTime",
    "min.insync.replicas": "1",
}
UPDATABLE = (*RESET_OPTIONS, *SETTINGS)
CREATE_ONLY = ("segment.bytes",)
TOPIC_CONFIGS = (*UPDATABLE, *CREATE_ONLY, *READ_ONLY)

DOCS = {
    "retention.ms": "Messages older than this (ms) are deleted a whole sealed segment at a time; -1 = never. Iggy message_expiry.",
    "retention.bytes": "Per-partition size cap in bytes (Iggy max_topic_size / partitions); -1 = unlimited.",
    "segment.bytes": "Segment size in bytes (Iggy segment_size); fixed at creation.",
    "max.message.bytes": "Largest record batch accepted from a producer, in bytes.",
    "cleanup.policy": "delete (retention.ms / retention.bytes), compact (keep the newest record per key), or both.",
    "min.cleanable.dirty.ratio": "Compact once uncompacted bytes are this share of the sealed segments' bytes.",
    "min.compaction.lag.ms": "Records younger than this (ms) are not compacted away.",
    "max.compaction.lag.ms": "Compact a sealed segment at the latest this long (ms) after its records were appended.",
    "delete.retention.ms": "How long (ms) a tombstone (null value) is kept after its append on a compacted topic.",
    "segment.ms": "Roll the active segment once its first record is this old (ms); default never.",
    "compression.type": "Batches are stored uncompressed; fetches return them compressed with this codec "
    "(producer and uncompressed: none).",
    "message.format.version": "Accepted and reported; has no effect (deprecated in Kafka 3.x).",
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


def fetch_compression(broker: Broker, topic: Topic) -> int:
    """The codec (RecordBatch attributes id) a Fetch of ``topic`` compresses batches with."""
    return int(COMPRESSION_TYPES.get(broker.topic_settings(topic).get(COMPRESSION_SETTING, "producer"), 0))


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
    if name == "cleanup.policy":
        try:
            return topt.CLEANUP_POLICY, topt.parse_cleanup_policy(topt.CLEANUP_POLICY, value)
        except topt.InvalidOptionValue:
            raise ConfigError(f"{name}: {value!r} is not a list of delete and compact") from None
    if name == "min.cleanable.dirty.ratio":
        try:
            ratio = float(value)
        except ValueError:
            raise ConfigError(f"{name}: {value!r} is not a double") from None
        if not 0 <= ratio <= 1:
            raise ConfigError(f"{name}: {value!r} is not in [0,...,1]")
        return topt.MIN_CLEANABLE_DIRTY_RATIO, str(value).strip()
    if name in DURATION_OPTIONS:
        key, low, never = DURATION_OPTIONS[name]
        ms = _long(name, value)
        if ms < low:
            raise ConfigError(f"{name}: {ms} is below {low}")
        if ms >= topt.U64_MAX // 1000:
            return key, "never" if never else topt.U64_MAX - 1
        return key, ms * 1000
    if name == "compression.type":
        if value not in COMPRESSION_TYPES:
            raise ConfigError(f"{name}: {value!r} is not one of {', '.join(COMPRESSION_TYPES)}")
        return COMPRESSION_SETTING, value
    if name == "message.format.version":
        if not _FORMAT_VERSION.fullmatch(value):
            raise ConfigError(f"{name}: {value!r} is not a Kafka message format version")
        return FORMAT_SETTING, value
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
        if name in SETTINGS:
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
        ConfigValue("cleanup.policy", o.cleanup_policy, False, topt.CLEANUP_POLICY not in o.explicit),
        ConfigValue(
            "min.cleanable.dirty.ratio", o.min_cleanable_dirty_ratio, False, topt.MIN_CLEANABLE_DIRTY_RATIO not in o.explicit
        ),
    ]
    for name, (key, _, _) in DURATION_OPTIONS.items():
        us = o.values()[key]
        out.append(ConfigValue(name, str(LONG_MAX if us == topt.U64_MAX else us // 1000), False, key not in o.explicit))
    out += [
        ConfigValue("compression.type", settings.get(COMPRESSION_SETTING, "producer"), False, COMPRESSION_SETTING not in settings),
        ConfigValue(
            "message.format.version", settings.get(FORMAT_SETTING, DEFAULT_FORMAT_VERSION), False, FORMAT_SETTING not in settings
        ),
    ]
    out += [ConfigValue(k, v, True, True) for k, v in READ_ONLY.items()]
    return out


def apply_list_op(broker: Broker, topic: Topic, name: str, append: bool, value: str | None) -> str:
    """The value of list config ``name`` after an IncrementalAlterConfigs APPEND
    (``append``) or SUBTRACT of the comma-separated ``value``. ConfigError for a
    config that is not a list (as Kafka) or an empty result."""
    if name not in LIST_CONFIGS:
        raise ConfigError(f"{name}: APPEND and SUBTRACT apply to list configs only")
    current = next(c.value for c in describe(broker, topic) if c.name == name) or ""
    items = [v for v in current.split(",") if v]
    for v in (x.strip() for x in (value or "").split(",")):
        if not v:
            continue
        if append and v not in items:
            items.append(v)
        elif not append and v in items:
            items.remove(v)
    if not items:
        raise ConfigError(f"{name}: the list would be empty")
    return ",".join(items)


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
            if name in SETTINGS:
                settings[SETTINGS[name]] = None
            else:
                key, default = RESET_OPTIONS[name]
                options[key] = default
            continue
        key, v = _translate(name, value, n)
        (settings if name in SETTINGS else options)[key] = v
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
