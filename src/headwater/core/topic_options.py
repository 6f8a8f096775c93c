"""The Iggy topic options catalog: parse, validate, update, persist, describe.

Source: Iggy ``server/topic-options.mdx`` and ``binary-protocol/encodings.mdx``
("Options block"); key names, value kinds and bounds as the Iggy server
checks them (``core/common/src/types/options``). Pure: no I/O, no clock.

Options arrive as a TLV block the Iggy front-end turns into a
``dict[str, str | int | bool]`` (String -> str, Bool -> bool, Uint8..Uint64
-> int). The catalog::

    key                                kind    default     bounds / forms
    compression_algorithm              String  "none"      "none"/"gzip" (any case) or 1/2
    message_expiry                     Uint64  never       µs (0 = default, 2**64-1 = never),
                                                           humantime ("7 days", "1h 30m"),
                                                           "none"/"unlimited"/"never_expire"
    max_topic_size                     Uint64  unlimited   bytes or "1 GiB"/"2GB"; 0 = default,
                                                           2**64-1 or "unlimited" = unlimited;
                                                           at least segment_size
    segment_size                       Uint64  1 GiB       bytes or "128 MiB"; 512-byte multiple,
                                                           1 MiB..1 GiB; 0 = default
    enforce_fsync                      Bool    false       bool or "true"/"false"
    messages_required_to_save          Uint32  1024        1..16777216
    size_of_messages_required_to_save  Uint64  1 MiB       bytes or byte string, <= 1 GiB; 0 = default
    preallocate_segments               Bool    false       segment_size x partitions <= 64 GiB
    cleanup_policy                     String  "delete"    "delete", "compact", "compact,delete"
                                                           (either order; Kafka cleanup.policy)
    min_cleanable_dirty_ratio          String  "0.5"       a decimal in 0..1 (Kafka's setting)
    min_compaction_lag                 Uint64  0           µs or humantime; records younger are kept
    max_compaction_lag                 Uint64  never       µs or humantime; "never"/"unlimited"
    delete_retention                   Uint64  1 day       µs or humantime: how long a tombstone
                                                           (Kafka null value) outlives its append
    segment_roll                       Uint64  never       µs or humantime (Kafka segment.ms): an
                                                           append to an active segment whose first
                                                           batch is older rolls it first

The last six are Headwater's (Iggy has no compaction); they map one to one to
the Kafka topic configs of the same meaning (``frontends/kafka/configs.py``).

Only ``compression_algorithm``, ``message_expiry``, ``max_topic_size`` and
the six compaction keys may change after creation (:meth:`TopicOptions.apply_update`, a patch).
Deliberate leniencies: a plain digit string is accepted for
``message_expiry`` (microseconds) and booleans are matched case-insensitively.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Mapping

from headwater.storage.api import SegmentPolicy

U64_MAX = (1 << 64) - 1
KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

COMPRESSION_ALGORITHM = "compression_algorithm"
MESSAGE_EXPIRY = "message_expiry"
MAX_TOPIC_SIZE = "max_topic_size"
SEGMENT_SIZE = "segment_size"
ENFORCE_FSYNC = "enforce_fsync"
MESSAGES_REQUIRED_TO_SAVE = "messages_required_to_save"
SIZE_OF_MESSAGES_REQUIRED_TO_SAVE = "size_of_messages_required_to_save"
PREALLOCATE_SEGMENTS = "preallocate_segments"
DURABILITY = "durability"
CONSUMER_OFFSET_DURABILITY = "consumer_offset_durability"
CLEANUP_POLICY = "cleanup_policy"
MIN_CLEANABLE_DIRTY_RATIO = "min_cleanable_dirty_ratio"
MIN_COMPACTION_LAG = "min_compaction_lag"
MAX_COMPACTION_LAG = "max_compaction_lag"
DELETE_RETENTION = "delete_retention"
SEGMENT_ROLL = "segment_roll"
CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
DEFAULT_DELETE_RETENTION_US = 86_400_000_000
COMPACTION_KEYS = (
    CLEANUP_POLICY,
    MIN_CLEANABLE_DIRTY_RATIO,
    MIN_COMPACTION_LAG,
    MAX_COMPACTION_LAG,
    DELETE_RETENTION,
    SEGMENT_ROLL,
)
DURABILITY_LEVELS = ("replicated", "persisted")

TOPIC_OPTION_KEYS = (
    COMPRESSION_ALGORITHM,
    MESSAGE_EXPIRY,
    MAX_TOPIC_SIZE,
    SEGMENT_SIZE,
    ENFORCE_FSYNC,
    MESSAGES_REQUIRED_TO_SAVE,
    SIZE_OF_MESSAGES_REQUIRED_TO_SAVE,
    PREALLOCATE_SEGMENTS,
    DURABILITY,
    CONSUMER_OFFSET_DURABILITY,
    *COMPACTION_KEYS,
)
UPDATABLE_TOPIC_OPTION_KEYS = (
    COMPRESSION_ALGORITHM,
    MESSAGE_EXPIRY,
    MAX_TOPIC_SIZE,
    # the durability keys apply from the next append on (the partition logs read the policy per
    # append), so a topic created without them (a Kafka CreateTopics, say) can get them later
    ENFORCE_FSYNC,
    MESSAGES_REQUIRED_TO_SAVE,
    SIZE_OF_MESSAGES_REQUIRED_TO_SAVE,
    DURABILITY,
    CONSUMER_OFFSET_DURABILITY,
    *COMPACTION_KEYS,
)
"""The keys an UpdateTopic options block may carry; the others (``segment_size``,
``preallocate_segments``) are create-only: they shape segments already on disk."""

DEFAULT_SEGMENT_SIZE = GIB
MIN_SEGMENT_SIZE = MIB
MAX_SEGMENT_SIZE = GIB
SEGMENT_SIZE_MULTIPLE = 512
DEFAULT_MESSAGES_REQUIRED_TO_SAVE = 1024
MAX_MESSAGES_REQUIRED_TO_SAVE = 16 * 1024 * 1024
DEFAULT_SIZE_OF_MESSAGES_REQUIRED_TO_SAVE = MIB
MAX_SIZE_OF_MESSAGES_REQUIRED_TO_SAVE = GIB
MAX_PREALLOCATED_TOPIC_BYTES = 64 * GIB
MAX_EXPIRY_SECONDS = 0xFFFFFFFF
COMPRESSION_CODES = {1: "none", 2: "gzip"}
COMPRESSION_NAMES = {name: code for code, name in COMPRESSION_CODES.items()}

# Header kind codes (encodings.mdx, "Header kinds")
KIND_STRING = 2
KIND_BOOL = 3
KIND_UINT32 = 11
KIND_UINT64 = 12
KIND_NAMES = {KIND_STRING: "string", KIND_BOOL: "bool", KIND_UINT32: "uint32", KIND_UINT64: "uint64"}

OPTION_KINDS = {
    COMPRESSION_ALGORITHM: KIND_STRING,
    MESSAGE_EXPIRY: KIND_UINT64,
    MAX_TOPIC_SIZE: KIND_UINT64,
    SEGMENT_SIZE: KIND_UINT64,
    ENFORCE_FSYNC: KIND_BOOL,
    MESSAGES_REQUIRED_TO_SAVE: KIND_UINT32,
    SIZE_OF_MESSAGES_REQUIRED_TO_SAVE: KIND_UINT64,
    PREALLOCATE_SEGMENTS: KIND_BOOL,
    DURABILITY: KIND_STRING,
    CONSUMER_OFFSET_DURABILITY: KIND_STRING,
    CLEANUP_POLICY: KIND_STRING,
    MIN_CLEANABLE_DIRTY_RATIO: KIND_STRING,
    MIN_COMPACTION_LAG: KIND_UINT64,
    MAX_COMPACTION_LAG: KIND_UINT64,
    DELETE_RETENTION: KIND_UINT64,
    SEGMENT_ROLL: KIND_UINT64,
}
"""The canonical kind of each key: what :meth:`TopicOptions.values` are encoded as."""


class TopicOptionError(ValueError):
    """Base of option errors; ``key`` names the offending option."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key[:64]}: {message}")
        self.key = key


class UnsupportedOptionKey(TopicOptionError):
    """A key outside the catalog, or not updatable (Iggy UnsupportedOptionKey, 4041)."""


class InvalidOptionValue(TopicOptionError):
    """A value of the wrong kind, unparsable, or out of bounds (Iggy InvalidOptionValue, 4042)."""


class InvalidTopicSize(InvalidOptionValue):
    """``max_topic_size`` below the topic's ``segment_size``. The Iggy TCP path
    answers InvalidTopicSize (1019) for this; its admission backstop 4042."""


# -- value parsers -------------------------------------------------------------

_DURATION_PART = re.compile(r"\s*(\d+)\s*([A-Za-zµ]+)")
_NS_PER_UNIT = {}
for _names, _ns in (
    (("nanos", "nsec", "ns"), 1),
    (("usec", "us", "µs"), 1_000),
    (("millis", "msec", "ms"), 1_000_000),
    (("seconds", "second", "secs", "sec", "s"), 1_000_000_000),
    (("minutes", "minute", "mins", "min", "m"), 60 * 1_000_000_000),
    (("hours", "hour", "hrs", "hr", "h"), 3_600 * 1_000_000_000),
    (("days", "day", "d"), 86_400 * 1_000_000_000),
    (("weeks", "week", "w"), 7 * 86_400 * 1_000_000_000),
    (("months", "month", "M"), 2_630_016 * 1_000_000_000),  # 30.44 days
    (("years", "year", "y"), 31_557_600 * 1_000_000_000),  # 365.25 days
):
    for _name in _names:
        _NS_PER_UNIT[_name] = _ns


def parse_duration_us(text: str) -> int:
    """A humantime duration (``"7 days"``, ``"1h 30m"``, ``"5s"``) in microseconds.

    Components are an integer and a unit (ns, us, ms, s, m, h, d, w, M = 30.44
    days, y = 365.25 days, and their long names), optionally space-separated.
    Raises ValueError.
    """
    pos = 0
    total_ns = 0
    text = text.strip()
    if not text:
        raise ValueError("empty duration")
    while pos < len(text):
        m = _DURATION_PART.match(text, pos)
        if m is None:
            raise ValueError(f"cannot parse duration {text!r} at {pos}")
        unit = _NS_PER_UNIT.get(m.group(2))
        if unit is None:
            raise ValueError(f"unknown time unit {m.group(2)!r}")
        total_ns += int(m.group(1)) * unit
        pos = m.end()
    return total_ns // 1_000


_BYTE_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([A-Za-z]*)")
_BYTE_PREFIXES = "kmgtpe"


def parse_byte_size(text: str) -> int:
    """A byte size: ``"1048576"``, ``"128 MiB"``, ``"128MiB"``, ``"1 GB"``, ``"1.5 KiB"``.

    Units are case-insensitive: B; K/KB = 1000 ... E/EB = 1000**6; Ki/KiB =
    1024 ... Ei/EiB = 1024**6. ``"0"``, ``"none"`` and ``"unlimited"`` are 0.
    The result must be a whole number of bytes within u64. Raises ValueError.
    """
    stripped = text.strip()
    if stripped in ("0", "unlimited", "Unlimited", "none", "None"):
        return 0
    m = _BYTE_SIZE.fullmatch(stripped)
    if m is None:
        raise ValueError(f"cannot parse byte size {text!r}")
    unit = m.group(2).lower()
    if unit.endswith("b"):
        unit = unit[:-1]
    if unit == "":
        factor = 1
    elif len(unit) == 1 and unit in _BYTE_PREFIXES:
        factor = 1000 ** (_BYTE_PREFIXES.index(unit) + 1)
    elif len(unit) == 2 and unit[1] == "i" and unit[0] in _BYTE_PREFIXES:
        factor = 1024 ** (_BYTE_PREFIXES.index(unit[0]) + 1)
    else:
        raise ValueError(f"unknown byte unit {m.group(2)!r}")
    value = Fraction(m.group(1)) * factor
    if value.denominator != 1 or value > U64_MAX:
        raise ValueError(f"{text!r} is not a whole number of bytes within u64")
    return int(value)


def _u64(key: str, value: Any, from_text) -> int:
    """An int in u64 range, or a string through ``from_text``."""
    if isinstance(value, bool):
        raise InvalidOptionValue(key, f"expected a number or string, got bool {value}")
    if isinstance(value, int):
        if not 0 <= value <= U64_MAX:
            raise InvalidOptionValue(key, f"{value} is outside u64")
        return value
    if isinstance(value, str):
        try:
            result = from_text(value)
        except ValueError as exc:
            raise InvalidOptionValue(key, str(exc)) from None
        if not 0 <= result <= U64_MAX:
            raise InvalidOptionValue(key, f"{value!r} is outside u64")
        return result
    raise InvalidOptionValue(key, f"unsupported value type {type(value).__name__}")


def _expiry_from_text(text: str) -> int:
    t = text.strip()
    if t in ("unlimited", "none", "None", "Unlimited", "never_expire"):
        return U64_MAX
    if t in ("default", "server_default", "Default", "Server_default"):
        return 0
    if t.isdigit():
        return int(t)
    micros = parse_duration_us(t)
    if micros // 1_000_000 > MAX_EXPIRY_SECONDS:
        raise ValueError(f"expiry {text!r} is longer than {MAX_EXPIRY_SECONDS} seconds")
    return micros


def _topic_size_from_text(text: str) -> int:
    t = text.strip()
    if t == "unlimited":
        return U64_MAX
    if t in ("0", "server_default"):
        return 0
    return parse_byte_size(t)


def _parse_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise InvalidOptionValue(key, f"expected true or false, got {value!r}")


def _parse_compression(key: str, value: Any) -> str:
    if isinstance(value, bool):
        raise InvalidOptionValue(key, "expected 'none', 'gzip', 1 or 2")
    if isinstance(value, int):
        name = COMPRESSION_CODES.get(value)
    elif isinstance(value, str):
        name = value.strip().lower()
        name = name if name in COMPRESSION_NAMES else None
    else:
        name = None
    if name is None:
        raise InvalidOptionValue(key, f"expected 'none', 'gzip', 1 or 2, got {value!r}")
    return name


def _parse_messages(key: str, value: Any) -> int:
    if isinstance(value, bool):
        raise InvalidOptionValue(key, "expected a number")
    if isinstance(value, str):
        if not value.strip().isdigit():
            raise InvalidOptionValue(key, f"expected a number, got {value!r}")
        value = int(value.strip())
    if not isinstance(value, int) or not 1 <= value <= MAX_MESSAGES_REQUIRED_TO_SAVE:
        raise InvalidOptionValue(key, f"must be 1..{MAX_MESSAGES_REQUIRED_TO_SAVE}, got {value!r}")
    return value


def parse_cleanup_policy(key: str, value: Any) -> str:
    """``"delete"``, ``"compact"`` or ``"compact,delete"`` from a comma list in any
    order and case (Kafka's list form); InvalidOptionValue otherwise."""
    parts = {p.strip().lower() for p in str(value).split(",")} if isinstance(value, str) else set()
    if not parts or not parts <= {"delete", "compact"}:
        raise InvalidOptionValue(key, f"expected delete, compact or compact,delete, got {value!r}")
    return ",".join(p for p in ("compact", "delete") if p in parts)


def _parse_ratio(key: str, value: Any) -> str:
    try:
        ratio = Fraction(str(value).strip()) if not isinstance(value, bool) else None
    except (ValueError, ZeroDivisionError):
        ratio = None
    if ratio is None or not 0 <= ratio <= 1:
        raise InvalidOptionValue(key, f"expected a decimal in 0..1, got {value!r}")
    return str(value).strip()


def _lag_from_text(text: str) -> int:
    t = text.strip()
    if t.lower() in ("unlimited", "none", "never"):
        return U64_MAX
    if t.isdigit():
        return int(t)
    return parse_duration_us(t)


def _parse_field(key: str, value: Any) -> tuple[str, Any] | None:
    """(field name, parsed value) for one catalog key, or None when the value is
    the "server default" sentinel (the key then counts as absent)."""
    if key == COMPRESSION_ALGORITHM:
        return "compression_algorithm", _parse_compression(key, value)
    if key == MESSAGE_EXPIRY:
        us = _u64(key, value, _expiry_from_text)
        if us == 0:
            return None
        return "message_expiry_us", None if us == U64_MAX else us
    if key == MAX_TOPIC_SIZE:
        size = _u64(key, value, _topic_size_from_text)
        if size == 0:
            return None
        return "max_topic_size", None if size == U64_MAX else size
    if key == SEGMENT_SIZE:
        size = _u64(key, value, parse_byte_size)
        if size == 0:
            return None
        if not MIN_SEGMENT_SIZE <= size <= MAX_SEGMENT_SIZE or size % SEGMENT_SIZE_MULTIPLE:
            raise InvalidOptionValue(
                key,
                f"{size} must be a {SEGMENT_SIZE_MULTIPLE}-byte multiple in {MIN_SEGMENT_SIZE}..{MAX_SEGMENT_SIZE}",
            )
        return "segment_size", size
    if key == ENFORCE_FSYNC:
        return "enforce_fsync", _parse_bool(key, value)
    if key == MESSAGES_REQUIRED_TO_SAVE:
        return "messages_required_to_save", _parse_messages(key, value)
    if key == SIZE_OF_MESSAGES_REQUIRED_TO_SAVE:
        size = _u64(key, value, parse_byte_size)
        if size == 0:
            return None
        if size > MAX_SIZE_OF_MESSAGES_REQUIRED_TO_SAVE:
            raise InvalidOptionValue(key, f"{size} is above {MAX_SIZE_OF_MESSAGES_REQUIRED_TO_SAVE}")
        return "size_of_messages_required_to_save", size
    if key == PREALLOCATE_SEGMENTS:
        return "preallocate_segments", _parse_bool(key, value)
    if key in (DURABILITY, CONSUMER_OFFSET_DURABILITY):
        level = str(value).strip().lower()
        if level not in DURABILITY_LEVELS:
            raise InvalidOptionValue(key, f"{value!r} is not one of {', '.join(DURABILITY_LEVELS)}")
        return key, level
    if key == CLEANUP_POLICY:
        return "cleanup_policy", parse_cleanup_policy(key, value)
    if key == MIN_CLEANABLE_DIRTY_RATIO:
        return "min_cleanable_dirty_ratio", _parse_ratio(key, value)
    if key in (MIN_COMPACTION_LAG, DELETE_RETENTION):
        return key + "_us", _u64(key, value, _lag_from_text)
    if key in (MAX_COMPACTION_LAG, SEGMENT_ROLL):
        us = _u64(key, value, _lag_from_text)
        if us == 0:
            raise InvalidOptionValue(key, "must be at least 1 µs (or never)")
        return key + "_us", None if us == U64_MAX else us
    raise UnsupportedOptionKey(key, "not a topic option")


def _parse_block(raw: Mapping[str, Any], allowed: tuple[str, ...]) -> tuple[dict[str, Any], set[str]]:
    fields: dict[str, Any] = {}
    explicit: set[str] = set()
    for key, value in raw.items():
        if not isinstance(key, str) or key not in allowed:
            create_only = isinstance(key, str) and key in TOPIC_OPTION_KEYS
            raise UnsupportedOptionKey(
                str(key), "create-only: set it when the topic is created" if create_only else "not accepted here"
            )
    for key, value in raw.items():
        parsed = _parse_field(key, value)
        if parsed is not None:
            fields[parsed[0]] = parsed[1]
            explicit.add(key)
    return fields, explicit


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """One catalog entry as DESCRIBE_OPTIONS reports it.

    ``kind`` is the header kind code (2 String, 3 Bool, 11 Uint32, 12 Uint64);
    ``default_bytes`` is the default encoded in that kind (LE integers, one
    byte for Bool, UTF-8 for String).
    """

    key: str
    kind: int
    kind_name: str
    default: str | int | bool
    default_bytes: bytes
    description: str


@dataclass(frozen=True, slots=True)
class TopicOptions:
    """A topic's effective options.

    ``message_expiry_us`` None = never expire; ``max_topic_size`` None =
    unlimited (bytes otherwise); sizes in bytes. ``explicit`` holds the keys
    the client chose (the rest were resolved from defaults: Iggy's GetTopic
    reports the two sets as separate blocks).
    """

    compression_algorithm: str = "none"
    message_expiry_us: int | None = None
    max_topic_size: int | None = None
    segment_size: int = DEFAULT_SEGMENT_SIZE
    enforce_fsync: bool = False
    messages_required_to_save: int = DEFAULT_MESSAGES_REQUIRED_TO_SAVE
    size_of_messages_required_to_save: int = DEFAULT_SIZE_OF_MESSAGES_REQUIRED_TO_SAVE
    preallocate_segments: bool = False
    durability: str = "replicated"
    consumer_offset_durability: str = "replicated"
    cleanup_policy: str = "delete"
    min_cleanable_dirty_ratio: str = "0.5"
    min_compaction_lag_us: int = 0
    max_compaction_lag_us: int | None = None
    delete_retention_us: int = DEFAULT_DELETE_RETENTION_US
    segment_roll_us: int | None = None
    explicit: frozenset[str] = field(default_factory=frozenset)

    @property
    def compact(self) -> bool:
        """Whether the cleanup policy includes ``compact``."""
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """Whether the cleanup policy includes ``delete`` (expiry and size caps apply)."""
        return "delete" in self.cleanup_policy

    @classmethod
    def parse_create(cls, raw: Mapping[str, str | int | bool], partitions_count: int) -> "TopicOptions":
        """Resolve a CreateTopic options block: absent keys (and the 0 "server
        default" sentinels) take the defaults.

        Raises UnsupportedOptionKey for a key outside the catalog;
        InvalidOptionValue for a bad value, a preallocating topic reserving
        more than 64 GiB (``segment_size`` x ``partitions_count``);
        InvalidTopicSize (an InvalidOptionValue) for ``max_topic_size`` below
        ``segment_size``.
        """
        fields, explicit = _parse_block(raw, TOPIC_OPTION_KEYS)
        options = cls(**fields, explicit=frozenset(explicit))
        if options.preallocate_segments and options.segment_size * max(partitions_count, 0) > MAX_PREALLOCATED_TOPIC_BYTES:
            raise InvalidOptionValue(
                PREALLOCATE_SEGMENTS,
                f"segment_size x {partitions_count} partitions exceeds {MAX_PREALLOCATED_TOPIC_BYTES} bytes",
            )
        options._check_size_floor()
        return options

    def apply_update(self, raw: Mapping[str, str | int | bool]) -> "TopicOptions":
        """Patch with an UpdateTopic options block: the keys of
        :data:`UPDATABLE_TOPIC_OPTION_KEYS` (compression, expiry, size cap, the durability
        keys, compaction); absent keys (and 0 sentinels) keep their current values.

        Raises UnsupportedOptionKey for any other key (create-only or unknown),
        InvalidOptionValue / InvalidTopicSize as :meth:`parse_create`.
        """
        fields, explicit = _parse_block(raw, UPDATABLE_TOPIC_OPTION_KEYS)
        updated = replace(self, **fields, explicit=self.explicit | explicit)
        updated._check_size_floor()
        return updated

    def _check_size_floor(self) -> None:
        if self.max_topic_size is not None and self.max_topic_size < self.segment_size:
            raise InvalidTopicSize(
                MAX_TOPIC_SIZE, f"{self.max_topic_size} is below segment_size {self.segment_size}"
            )

    def to_segment_policy(self, partitions_count: int, validate_checksum: bool = True) -> SegmentPolicy:
        """The storage policy for one of the topic's partitions.

        ``max_partition_bytes`` = ``max_topic_size // partitions_count``,
        floored at one ``segment_size`` (0 when unlimited);
        ``message_expiry_us`` 0 when never. Without ``delete`` in the cleanup
        policy neither expiry nor the size cap deletes anything (as Kafka).
        """
        if self.max_topic_size is None or not self.delete:
            max_partition_bytes = 0
        else:
            max_partition_bytes = max(self.max_topic_size // max(partitions_count, 1), self.segment_size)
        return SegmentPolicy(
            segment_size=self.segment_size,
            enforce_fsync=self.enforce_fsync or self.durability == "persisted",
            messages_required_to_save=self.messages_required_to_save,
            size_of_messages_required_to_save=self.size_of_messages_required_to_save,
            message_expiry_us=(self.message_expiry_us or 0) if self.delete else 0,
            max_partition_bytes=max_partition_bytes,
            preallocate_segments=self.preallocate_segments,
            validate_checksum=validate_checksum,
            segment_roll_us=self.segment_roll_us or 0,
            compact=self.compact,
            min_cleanable_dirty_ratio=float(Fraction(self.min_cleanable_dirty_ratio)),
            min_compaction_lag_us=self.min_compaction_lag_us,
            max_compaction_lag_us=self.max_compaction_lag_us or 0,
            delete_retention_us=self.delete_retention_us,
        )

    def values(self) -> dict[str, str | int | bool]:
        """Every key's effective value in its canonical kind (:data:`OPTION_KINDS`):
        expiry never and size unlimited are ``2**64 - 1``."""
        return {
            COMPRESSION_ALGORITHM: self.compression_algorithm,
            MESSAGE_EXPIRY: U64_MAX if self.message_expiry_us is None else self.message_expiry_us,
            MAX_TOPIC_SIZE: U64_MAX if self.max_topic_size is None else self.max_topic_size,
            SEGMENT_SIZE: self.segment_size,
            ENFORCE_FSYNC: self.enforce_fsync,
            MESSAGES_REQUIRED_TO_SAVE: self.messages_required_to_save,
            SIZE_OF_MESSAGES_REQUIRED_TO_SAVE: self.size_of_messages_required_to_save,
            PREALLOCATE_SEGMENTS: self.preallocate_segments,
            DURABILITY: self.durability,
            CONSUMER_OFFSET_DURABILITY: self.consumer_offset_durability,
            CLEANUP_POLICY: self.cleanup_policy,
            MIN_CLEANABLE_DIRTY_RATIO: self.min_cleanable_dirty_ratio,
            MIN_COMPACTION_LAG: self.min_compaction_lag_us,
            MAX_COMPACTION_LAG: U64_MAX if self.max_compaction_lag_us is None else self.max_compaction_lag_us,
            DELETE_RETENTION: self.delete_retention_us,
            SEGMENT_ROLL: U64_MAX if self.segment_roll_us is None else self.segment_roll_us,
        }

    def explicit_values(self) -> dict[str, str | int | bool]:
        """The keys the client chose, as :meth:`values`."""
        return {k: v for k, v in self.values().items() if k in self.explicit}

    def derived_values(self) -> dict[str, str | int | bool]:
        """The keys resolved from defaults, as :meth:`values`."""
        return {k: v for k, v in self.values().items() if k not in self.explicit}

    @property
    def compression_code(self) -> int:
        """1 = none, 2 = gzip (encodings.mdx, "Compression")."""
        return COMPRESSION_NAMES[self.compression_algorithm]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for the metadata store (inverse: :meth:`from_dict`)."""
        out: dict[str, Any] = dict(self.values())
        out["explicit"] = sorted(self.explicit)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TopicOptions":
        """Rebuild from :meth:`to_dict` output. Raises UnsupportedOptionKey,
        InvalidOptionValue for data that does not parse."""
        body = {k: v for k, v in data.items() if k != "explicit"}
        fields, _ = _parse_block(body, TOPIC_OPTION_KEYS)
        explicit = data.get("explicit", [])
        if not isinstance(explicit, (list, tuple)) or any(k not in TOPIC_OPTION_KEYS for k in explicit):
            raise InvalidOptionValue("explicit", f"bad explicit key list {explicit!r}")
        return cls(**fields, explicit=frozenset(explicit))


def parse_create(raw: Mapping[str, str | int | bool], partitions_count: int) -> TopicOptions:
    """Module-level alias of :meth:`TopicOptions.parse_create`."""
    return TopicOptions.parse_create(raw, partitions_count)


def _encode_default(kind: int, value: str | int | bool) -> bytes:
    if kind == KIND_STRING:
        return str(value).encode()
    if kind == KIND_BOOL:
        return bytes([1 if value else 0])
    if kind == KIND_UINT32:
        return struct.pack("<I", value)
    return struct.pack("<Q", value)


_DESCRIPTIONS = {
    COMPRESSION_ALGORITHM: "Compression algorithm (none, gzip); stored and reported, not applied",
    MESSAGE_EXPIRY: "Message expiry in microseconds, or a humantime string (e.g. 7 days); "
    "sealed segments whose newest message is older are deleted",
    MAX_TOPIC_SIZE: "Topic size cap in bytes, or a byte-size string (e.g. 1 GiB); must be at least "
    "the segment size; the oldest sealed segments are deleted past it",
    SEGMENT_SIZE: f"Segment size in bytes, or a byte-size string (e.g. 128 MiB); a 512-byte multiple "
    f"within {MIN_SEGMENT_SIZE}..={MAX_SEGMENT_SIZE}",
    ENFORCE_FSYNC: "Whether every write to this topic's partitions is fsynced before it is acknowledged",
    MESSAGES_REQUIRED_TO_SAVE: f"Flush once this many messages are unsynced; 1..={MAX_MESSAGES_REQUIRED_TO_SAVE}",
    SIZE_OF_MESSAGES_REQUIRED_TO_SAVE: "Flush once this many bytes are unsynced, or a byte-size string; "
    f"whichever threshold trips first flushes. At most {MAX_SIZE_OF_MESSAGES_REQUIRED_TO_SAVE}",
    DURABILITY: "When a send is acknowledged: replicated (written to the OS on this single node) or "
    "persisted (fsynced first, as enforce_fsync)",
    CONSUMER_OFFSET_DURABILITY: "The same choice for stored consumer offsets (both levels are fsynced here)",
    CLEANUP_POLICY: "delete (expiry and size caps), compact (keep the newest message per key) or compact,delete",
    MIN_CLEANABLE_DIRTY_RATIO: "Compact once uncompacted bytes are at least this share of the sealed bytes (0..1)",
    MIN_COMPACTION_LAG: "Messages younger than this (µs or humantime) are never compacted away",
    MAX_COMPACTION_LAG: "Compact a sealed segment at the latest this long (µs or humantime) after its "
    "messages were appended, whatever the dirty ratio; 2**64-1 = never",
    DELETE_RETENTION: "How long (µs or humantime) a tombstone (a message whose kafka.flags marks a null "
    "value) is kept after its append before compaction removes it",
    SEGMENT_ROLL: "Roll the active segment on the next append once its first message is this old "
    "(µs or humantime; Kafka segment.ms); 2**64-1 = never",
    PREALLOCATE_SEGMENTS: "Reserve each segment's bytes up front where the filesystem supports it; "
    f"segment_size * partitions_count is capped at {MAX_PREALLOCATED_TOPIC_BYTES} bytes",
}


def describe() -> list[OptionSpec]:
    """The topic catalog for DESCRIBE_OPTIONS (scope 1), in catalog order."""
    defaults = TopicOptions().values()
    return [
        OptionSpec(
            key=key,
            kind=OPTION_KINDS[key],
            kind_name=KIND_NAMES[OPTION_KINDS[key]],
            default=defaults[key],
            default_bytes=_encode_default(OPTION_KINDS[key], defaults[key]),
            description=_DESCRIPTIONS[key],
        )
        for key in TOPIC_OPTION_KEYS
    ]
