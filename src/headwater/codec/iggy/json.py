"""JSON <-> Iggy command and reply dataclasses, for the HTTP REST API: one declarative table.

Each dataclass of :mod:`.commands` that travels over HTTP has a :class:`Shape` in
:data:`SHAPES`: per field, its JSON name, its *encoding* and where it comes from in a
request (the JSON body, the URL path, the query string). :func:`load` builds a request
dataclass from a request's parts and :func:`dump` renders a reply dataclass; both walk
the table, so no route has a mapping function of its own.

The encodings are Iggy's serde forms (apache/iggy ``core/common``, SDK 0.11.0):

=================  ==========================================================================
encoding           JSON form
=================  ==========================================================================
``U8``..``U64``    a number (also a decimal string in a query or path)
``TIMESTAMP_US``   ``IggyTimestamp``: u64 microseconds since the Unix epoch
``BYTE_SIZE``      ``IggyByteSize``: u64 bytes (a string ``"1 KB"``/``"123"`` is read too)
``EXPIRY_US``      ``IggyExpiry``: u64 µs, 0 = server default, 2**64-1 = never
``IDENTIFIER``     ``Identifier``: a number (numeric id) or a string (name); ``"7"`` is 7
``BASE64``         bytes as standard base64 (payloads, partitioning values, header values)
``USER_STATUS``    ``"active"`` (1) / ``"inactive"`` (2)
``COMPRESSION``    ``"none"`` (1) / ``"gzip"`` (2)
``PERMISSIONS``    ``{"global": {...10 flags}, "streams": {"<id>": {...6 flags, "topics":
                   {"<id>": {...4 flags}} | null}} | null}``
``OPTIONS``        an options block as ``{"key": {"value": "<text>", "explicit": bool}}``
                   (reply) or ``{"key": "<text>"}`` (request; strings become String kind)
=================  ==========================================================================

Errors: a body or parameter that does not fit its shape raises :class:`InvalidJson`
(an :class:`~..errors.InvalidFormat`, Iggy code 4) naming the field.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .. import headers as tlv
from ..errors import InvalidFormat
from .codes import ConsumerKind, PartitioningKind, PollingKind
from .commands import groups, messages, offsets, partitions, segments, streams, system, tokens, topics, users
from .primitives import (
    Consumer,
    GlobalPermissions,
    Partitioning,
    Permissions,
    PollingStrategy,
    StreamPermissions,
    TopicPermissions,
)

U64_MAX = (1 << 64) - 1


class InvalidJson(InvalidFormat):
    """A JSON body, path or query parameter that does not fit its shape (Iggy 4); ``field`` names it."""

    def __init__(self, message: str, field_name: str | None = None):
        super().__init__(message)
        self.field = field_name


# --------------------------------------------------------------------------- encodings


@dataclass(frozen=True)
class Enc:
    """One JSON encoding: ``dump(python) -> json`` and ``load(json, name) -> python``."""

    name: str
    dump: Callable[[Any], Any]
    load: Callable[[Any, str], Any]


def _int_loader(bits: int) -> Callable[[Any, str], int]:
    top = (1 << bits) - 1

    def load(value: Any, name: str) -> int:
        if isinstance(value, str) and value.isascii() and value.isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
            raise InvalidJson(f"{name}: expected an integer 0..{top}, got {value!r}", name)
        return value

    return load


def _uint(bits: int) -> Enc:
    return Enc(f"u{bits}", int, _int_loader(bits))


U8, U32, U64, U128 = _uint(8), _uint(32), _uint(64), _uint(128)
TIMESTAMP_US = Enc("timestamp_us", int, _int_loader(64))
EXPIRY_US = Enc("expiry_us", int, _int_loader(64))


def _load_bool(value: Any, name: str) -> bool:
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise InvalidJson(f"{name}: expected a boolean, got {value!r}", name)
    return value


def _load_str(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise InvalidJson(f"{name}: expected a string, got {value!r}", name)
    return value


def _load_float(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidJson(f"{name}: expected a number, got {value!r}", name)
    return float(value)


BOOL = Enc("bool", bool, _load_bool)
STR = Enc("string", str, _load_str)
F32 = Enc("f32", float, _load_float)

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGTPE]?)(i?)B?\s*", re.IGNORECASE)


def _load_byte_size(value: Any, name: str) -> int:
    if isinstance(value, str):
        m = _SIZE.fullmatch(value)
        if m is None:
            raise InvalidJson(f"{name}: {value!r} is not a byte size", name)
        power = "KMGTPE".find(m.group(2).upper()) + 1 if m.group(2) else 0
        value = int(float(m.group(1)) * (1024 if m.group(3) else 1000) ** power)
    return _int_loader(64)(value, name)


BYTE_SIZE = Enc("byte_size", int, _load_byte_size)


def _dump_identifier(value: int | str) -> int | str:
    return value


def _load_identifier(value: Any, name: str) -> int | str:
    if isinstance(value, str):
        if value.isascii() and value.isdigit():
            value = int(value)
        elif not 1 <= len(value.encode()) <= 255:
            raise InvalidJson(f"{name}: a name identifier is 1..255 bytes", name)
        else:
            return value
    return _int_loader(32)(value, name)


IDENTIFIER = Enc("identifier", _dump_identifier, _load_identifier)


def _load_base64(value: Any, name: str) -> bytes:
    try:
        return base64.b64decode(_load_str(value, name), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidJson(f"{name}: not standard base64", name) from None


BASE64 = Enc("base64", lambda b: base64.b64encode(bytes(b)).decode("ascii"), _load_base64)


def _named(values: Mapping[int, str], label: str) -> Enc:
    codes = {v: k for k, v in values.items()}

    def load(value: Any, name: str) -> int:
        code = codes.get(value.lower()) if isinstance(value, str) else None
        if code is None:
            raise InvalidJson(f"{name}: expected {label} ({', '.join(codes)}), got {value!r}", name)
        return code

    return Enc(label, lambda code: values[int(code)], load)


USER_STATUS = _named({1: "active", 2: "inactive"}, "user status")
COMPRESSION = _named({1: "none", 2: "gzip"}, "compression algorithm")
POLLING_KIND = _named({int(k): k.name.lower() for k in PollingKind}, "polling kind")
PARTITIONING_KIND = _named({1: "balanced", 2: "partition_id", 3: "messages_key"}, "partitioning kind")


def optional(enc: Enc) -> Enc:
    """``null`` (or absent) <-> None."""
    return Enc(
        f"optional {enc.name}",
        lambda v: None if v is None else enc.dump(v),
        lambda v, name: None if v is None else enc.load(v, name),
    )


def array(enc: Enc) -> Enc:
    def load(value: Any, name: str) -> tuple:
        if not isinstance(value, list):
            raise InvalidJson(f"{name}: expected an array", name)
        return tuple(enc.load(v, f"{name}[{i}]") for i, v in enumerate(value))

    return Enc(f"array of {enc.name}", lambda vs: [enc.dump(v) for v in vs], load)


def nested(cls: type) -> Enc:
    """Another table entry's dataclass as a JSON object."""
    return Enc(cls.__name__, lambda v: dump(v), lambda v, name: _load_object(cls, v, name))


# -- options blocks ----------------------------------------------------------------


def _option_text(kind: int, data: bytes) -> str:
    value = tlv.unpack_value(kind, data)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def _dump_options(block: bytes, explicit: bool = True) -> dict[str, dict[str, Any]]:
    if not block:
        return {}
    return {
        key: {"value": _option_text(kind, data), "explicit": explicit}
        for key, (kind, data) in tlv.decode_options_block(block).items()
    }


def _load_options(value: Any, name: str) -> bytes:
    """``{"key": "text"}`` (request) or ``{"key": {"value": "text", ...}}`` (reply form) -> a
    block of String-kind values."""
    if value is None:
        return b""
    if not isinstance(value, dict):
        raise InvalidJson(f"{name}: expected an object of option strings", name)
    entries = {}
    for key, text in value.items():
        if isinstance(text, dict):
            text = text.get("value")
        text = _load_str(text, f"{name}.{key}")
        entries[key] = (int(tlv.Kind.STRING), text.encode())
    try:
        return tlv.encode_options_block(entries)
    except InvalidFormat as e:
        raise InvalidJson(f"{name}: {e}", name) from None


OPTIONS = Enc("options", _dump_options, _load_options)


# -- permissions ---------------------------------------------------------------------

_GLOBAL = [f.name for f in dataclasses.fields(GlobalPermissions)]
_STREAM = [f.name for f in dataclasses.fields(StreamPermissions) if f.name not in ("stream_id", "topics")]
_TOPIC = [f.name for f in dataclasses.fields(TopicPermissions) if f.name != "topic_id"]


def _flags(obj: Any, names: list[str]) -> dict[str, bool]:
    return {n: bool(getattr(obj, n)) for n in names}


def _load_flags(value: Any, names: list[str], name: str) -> dict[str, bool]:
    if not isinstance(value, dict):
        raise InvalidJson(f"{name}: expected an object", name)
    return {n: _load_bool(value.get(n, False), f"{name}.{n}") for n in names}


def _id_map(value: Any, name: str) -> list[tuple[int, Any]]:
    if value is None:
        return []
    if not isinstance(value, dict):
        raise InvalidJson(f"{name}: expected an object keyed by id", name)
    return sorted((_int_loader(32)(k, f"{name} key"), v) for k, v in value.items())


def _dump_permissions(p: Permissions) -> dict[str, Any]:
    streams_json = {
        str(s.stream_id): {
            **_flags(s, _STREAM),
            "topics": {str(t.topic_id): _flags(t, _TOPIC) for t in s.topics} or None,
        }
        for s in p.streams
    }
    return {"global": _flags(p.global_, _GLOBAL), "streams": streams_json or None}


def _load_permissions(value: Any, name: str) -> Permissions:
    if not isinstance(value, dict):
        raise InvalidJson(f"{name}: expected an object", name)
    streams_out = []
    for sid, s in _id_map(value.get("streams"), f"{name}.streams"):
        where = f"{name}.streams.{sid}"
        flags = _load_flags(s, _STREAM, where)
        topics_out = tuple(
            TopicPermissions(topic_id=tid, **_load_flags(t, _TOPIC, f"{where}.topics.{tid}"))
            for tid, t in _id_map(s.get("topics"), f"{where}.topics")
        )
        streams_out.append(StreamPermissions(stream_id=sid, topics=topics_out, **flags))
    return Permissions(
        global_=GlobalPermissions(**_load_flags(value.get("global", {}), _GLOBAL, f"{name}.global")),
        streams=tuple(streams_out),
    )


PERMISSIONS = Enc("permissions", _dump_permissions, _load_permissions)


# -- consumer, polling strategy, partitioning ---------------------------------------


def _dump_partitioning(p: Partitioning) -> dict[str, Any]:
    if p.kind == PartitioningKind.PARTITION_ID:
        value = p.partition_id.to_bytes(4, "little")
    elif p.kind == PartitioningKind.MESSAGES_KEY:
        value = p.key
    else:
        value = b""
    return {"kind": PARTITIONING_KIND.dump(p.kind), "value": BASE64.dump(value)}


def _load_partitioning(value: Any, name: str) -> Partitioning:
    if not isinstance(value, dict):
        raise InvalidJson(f"{name}: expected an object", name)
    kind = PARTITIONING_KIND.load(value.get("kind"), f"{name}.kind")
    raw = BASE64.load(value.get("value", ""), f"{name}.value")
    if kind == PartitioningKind.PARTITION_ID:
        if len(raw) != 4:
            raise InvalidJson(f"{name}.value: a partition id is 4 bytes (u32 LE)", name)
        return Partitioning.by_partition(int.from_bytes(raw, "little"))
    if kind == PartitioningKind.MESSAGES_KEY:
        if not 1 <= len(raw) <= 255:
            raise InvalidJson(f"{name}.value: a messages key is 1..255 bytes", name)
        return Partitioning.by_key(raw)
    return Partitioning.balanced()


PARTITIONING = Enc("partitioning", _dump_partitioning, _load_partitioning)


# --------------------------------------------------------------------------- the table

BODY, PATH, QUERY = "body", "path", "query"
_MISSING: Any = type("_Missing", (), {"__repr__": lambda self: "MISSING"})()


@dataclass(frozen=True)
class F:
    """One field: dataclass attribute ``attr`` as JSON ``json`` (default: the same name) with
    encoding ``enc``, read from ``source`` in a request. ``compute`` derives a reply-only
    field from the object (``attr`` None). Two fields may share an ``attr`` (a consumer or
    polling strategy flattened into the query, Iggy's ``#[serde(flatten)]``): :func:`load`
    joins them."""

    attr: str | None
    enc: Enc
    json: str | None = None
    source: str = BODY
    compute: Callable[[Any], Any] | None = None
    default: Any = _MISSING

    @property
    def key(self) -> str:
        return self.json or self.attr or ""


@dataclass(frozen=True)
class Shape:
    """The JSON of one dataclass. ``fold`` maps extra JSON body fields into the options
    block: ``json name -> (option key, header kind, encoding, value meaning "unset")``."""

    cls: type
    fields: tuple[F, ...]
    fold: Mapping[str, tuple[str, int, Enc, Any]] = field(default_factory=dict)
    composite: Mapping[str, tuple[Callable[..., Any], Callable[[Any], tuple]]] = field(default_factory=dict)
    """``attr -> (join, split)`` for an attribute spread over several JSON fields: ``join(*values)``
    builds it from its fields' values in table order, ``split(value)`` gives them back."""


def _p(attr: str, enc: Enc = IDENTIFIER) -> F:
    return F(attr, enc, source=PATH)


_TOPIC_FOLD = {
    "compression_algorithm": ("compression_algorithm", int(tlv.Kind.STRING), COMPRESSION, None),
    "message_expiry": ("message_expiry", int(tlv.Kind.UINT64), EXPIRY_US, 0),
    "max_topic_size": ("max_topic_size", int(tlv.Kind.UINT64), BYTE_SIZE, 0),
}

# consumer (kind is not in Iggy's HTTP JSON: ``Consumer.kind`` is ``#[serde(skip)]``, so every
# HTTP consumer is a single consumer) and polling strategy are flattened into the query.
_CONSUMER = F("consumer", IDENTIFIER, json="consumer_id", source=QUERY, default=1)
_STRATEGY_KIND = F("strategy", POLLING_KIND, json="kind", source=QUERY, default=int(PollingKind.OFFSET))
_STRATEGY_VALUE = F("strategy", U64, json="value", source=QUERY, default=0)

SHAPES: dict[type, Shape] = {}


def _shape(cls: type, *fields: F, fold: Mapping | None = None, composite: Mapping | None = None) -> None:
    SHAPES[cls] = Shape(cls, fields, fold or {}, composite or {})


_SINGLE_CONSUMER = {"consumer": (lambda ident: Consumer(ConsumerKind.CONSUMER, ident), lambda c: (c.id,))}
_POLL_COMPOSITE = {
    **_SINGLE_CONSUMER,
    "strategy": (lambda kind, value: PollingStrategy(PollingKind(kind), value), lambda p: (int(p.kind), p.value)),
}


# ---- requests
_shape(system.GetClient, _p("client_id", U32))
_shape(streams.GetStream, _p("stream_id"))
_shape(streams.CreateStream, F("name", STR), F("options", OPTIONS, default=b""))
_shape(streams.UpdateStream, _p("stream_id"), F("name", STR), F("options", OPTIONS, default=b""))
_shape(streams.DeleteStream, _p("stream_id"))
_shape(streams.PurgeStream, _p("stream_id"))
_shape(topics.GetTopic, _p("stream_id"), _p("topic_id"))
_shape(topics.GetTopics, _p("stream_id"))
_shape(
    topics.CreateTopic,
    _p("stream_id"),
    F("partitions_count", U32, default=1),
    F("name", STR),
    F("options", OPTIONS, default=b""),
    fold=_TOPIC_FOLD,
)
_shape(topics.UpdateTopic, _p("stream_id"), _p("topic_id"), F("name", STR), F("options", OPTIONS, default=b""), fold=_TOPIC_FOLD)
_shape(topics.DeleteTopic, _p("stream_id"), _p("topic_id"))
_shape(topics.PurgeTopic, _p("stream_id"), _p("topic_id"))
_shape(partitions.CreatePartitions, _p("stream_id"), _p("topic_id"), F("partitions_count", U32))
_shape(partitions.DeletePartitions, _p("stream_id"), _p("topic_id"), F("partitions_count", U32, source=QUERY))
_shape(segments.DeleteSegments, _p("stream_id"), _p("topic_id"), _p("partition_id", U32), F("segments_count", U32, source=QUERY))
_shape(groups.GetConsumerGroup, _p("stream_id"), _p("topic_id"), _p("group_id"))
_shape(groups.GetConsumerGroups, _p("stream_id"), _p("topic_id"))
_shape(groups.CreateConsumerGroup, _p("stream_id"), _p("topic_id"), F("name", STR))
_shape(groups.DeleteConsumerGroup, _p("stream_id"), _p("topic_id"), _p("group_id"))
_shape(
    offsets.GetConsumerOffset,
    _CONSUMER,
    _p("stream_id"),
    _p("topic_id"),
    F("partition_id", optional(U32), source=QUERY, default=None),
    composite=_SINGLE_CONSUMER,
)
_shape(
    offsets.StoreConsumerOffset,
    F("consumer", IDENTIFIER, json="consumer_id", default=1),
    _p("stream_id"),
    _p("topic_id"),
    F("partition_id", optional(U32), default=None),
    F("offset", U64),
    composite=_SINGLE_CONSUMER,
)
_shape(
    offsets.DeleteConsumerOffset,
    F("consumer", IDENTIFIER, json="consumer_id", source=PATH),
    _p("stream_id"),
    _p("topic_id"),
    F("partition_id", optional(U32), source=QUERY, default=None),
    composite=_SINGLE_CONSUMER,
)
_shape(
    messages.PollMessages,
    _CONSUMER,
    _p("stream_id"),
    _p("topic_id"),
    F("partition_id", optional(U32), source=QUERY, default=0),
    _STRATEGY_KIND,
    _STRATEGY_VALUE,
    F("count", U32, source=QUERY, default=10),
    F("auto_commit", BOOL, source=QUERY, default=False),
    composite=_POLL_COMPOSITE,
)
_shape(messages.FlushUnsavedBuffer, _p("stream_id"), _p("topic_id"), _p("partition_id", U32), _p("fsync", BOOL))
_shape(
    users.CreateUser,
    F("username", STR),
    F("password", STR),
    F("status", USER_STATUS, default=1),
    F("permissions", optional(PERMISSIONS), default=None),
)
_shape(users.GetUser, _p("user_id"))
_shape(users.DeleteUser, _p("user_id"))
_shape(
    users.UpdateUser,
    _p("user_id"),
    F("username", optional(STR), default=None),
    F("status", optional(USER_STATUS), default=None),
    F("options", OPTIONS, default=b""),
)
_shape(users.UpdatePermissions, _p("user_id"), F("permissions", optional(PERMISSIONS), default=None))
_shape(users.ChangePassword, _p("user_id"), F("current_password", STR), F("new_password", STR))
_shape(
    users.LoginUser,
    F("username", STR),
    F("password", STR),
    F("version", optional(STR), default=None),
    F("context", optional(STR), default=None),
)
_shape(tokens.CreatePersonalAccessToken, F("name", STR), F("expiry", EXPIRY_US, default=0))
_shape(tokens.DeletePersonalAccessToken, _p("name", STR))
_shape(tokens.LoginWithPersonalAccessToken, F("token", STR))

# ---- replies
_shape(
    topics.PartitionInfo,
    F("id", U32),
    F("created_at", TIMESTAMP_US),
    F("segments_count", U32),
    F("current_offset", U64),
    F("size_bytes", BYTE_SIZE, json="size"),
    F("messages_count", U64),
)
_IDENTITY = (F("id", U32), F("created_at", TIMESTAMP_US), F("name", STR), F("size_bytes", BYTE_SIZE, json="size"))
_TOPIC_COMMON = (
    *_IDENTITY,
    F("message_expiry", EXPIRY_US),
    F("compression_algorithm", COMPRESSION),
    F("max_topic_size", BYTE_SIZE),
    F("messages_count", U64),
)


def _all_options(t: Any) -> dict[str, Any]:
    return {**_dump_options(t.derived_options, explicit=False), **_dump_options(t.options)}


_shape(
    topics.TopicInfo,
    *_TOPIC_COMMON,
    F("partitions_count", U32),
    F(None, OPTIONS, json="options", compute=_all_options),
)
_shape(
    topics.TopicDetails,
    *_TOPIC_COMMON,
    F(None, U32, json="partitions_count", compute=lambda t: len(t.partitions)),
    F("partitions", array(nested(topics.PartitionInfo))),
    F(None, OPTIONS, json="options", compute=_all_options),
)
_STREAM_COMMON = (*_IDENTITY, F("messages_count", U64))
_shape(streams.StreamInfo, *_STREAM_COMMON, F("topics_count", U32), F("options", OPTIONS, default=b""))
_shape(
    streams.StreamDetails,
    *_STREAM_COMMON,
    F(None, U32, json="topics_count", compute=lambda s: len(s.topics)),
    F("topics", array(nested(topics.TopicInfo))),
    F("options", OPTIONS, default=b""),
)
_shape(groups.ConsumerGroupInfo, F("id", U32), F("name", STR), F("partitions_count", U32), F("members_count", U32))
_shape(
    groups.ConsumerGroupMember,
    F("id", U32),
    F(None, U32, json="partitions_count", compute=lambda m: len(m.partitions)),
    F("partitions", array(U32)),
)
_shape(
    groups.ConsumerGroupDetails,
    F("id", U32),
    F("name", STR),
    F("partitions_count", U32),
    F(None, U32, json="members_count", compute=lambda g: len(g.members)),
    F("members", array(nested(groups.ConsumerGroupMember))),
)
_shape(offsets.ConsumerOffsetInfo, F("partition_id", U32), F("current_offset", U64), F("stored_offset", U64))
_shape(
    users.UserInfo,
    F("id", U32),
    F("created_at", TIMESTAMP_US),
    F("status", USER_STATUS),
    F("username", STR),
    F("options", OPTIONS, default=b""),
)
_shape(
    users.UserDetails,
    F("id", U32),
    F("created_at", TIMESTAMP_US),
    F("status", USER_STATUS),
    F("username", STR),
    F("permissions", optional(PERMISSIONS)),
    F("options", OPTIONS, default=b""),
)
_shape(tokens.RawPersonalAccessToken, F("token", STR))
_shape(
    tokens.PersonalAccessTokenInfo,
    F("name", STR),
    # Iggy: ``expiry_at: Option<IggyTimestamp>``; the binary 0 means "never" -> null
    F("expiry_at", Enc("optional timestamp", lambda v: v or None, lambda v, n: 0 if v is None else _int_loader(64)(v, n))),
)
_shape(messages.SendConfirmation, F("stream_id", U32), F("topic_id", U32), F("partition_id", U32), F("base_offset", U64))
_shape(system.ClientGroupRef, F("stream_id", U32), F("topic_id", U32), F("group_id", U32))
_TRANSPORT = _named({1: "tcp", 2: "quic", 3: "http", 4: "websocket"}, "transport")
_CLIENT_COMMON = (
    F("client_id", U32),
    F("user_id", Enc("optional user id", lambda v: v if v not in (None, 0xFFFFFFFF) else None, lambda v, n: 0xFFFFFFFF if v is None else _int_loader(32)(v, n))),
    F("address", STR),
    F("transport", _TRANSPORT),
)
_shape(system.ClientInfo, *_CLIENT_COMMON, F("consumer_groups_count", U32))
_shape(
    system.ClientDetails,
    *_CLIENT_COMMON,
    F(None, U32, json="consumer_groups_count", compute=lambda c: len(c.consumer_groups)),
    F("consumer_groups", array(nested(system.ClientGroupRef))),
)
_shape(
    system.Stats,
    F("process_id", U32),
    F("cpu_usage", F32),
    F("total_cpu_usage", F32),
    F("memory_usage", BYTE_SIZE),
    F("total_memory", BYTE_SIZE),
    F("available_memory", BYTE_SIZE),
    F("run_time", U64),  # IggyDuration: u64 µs
    F("start_time", TIMESTAMP_US),
    F("read_bytes", BYTE_SIZE),
    F("written_bytes", BYTE_SIZE),
    F("messages_size_bytes", BYTE_SIZE),
    F("streams_count", U32),
    F("topics_count", U32),
    F("partitions_count", U32),
    F("segments_count", U32),
    F("messages_count", U64),
    F("clients_count", U32),
    F("consumer_groups_count", U32),
    F("hostname", STR),
    F("os_name", STR),
    F("os_version", STR),
    F("kernel_version", STR),
    F("iggy_server_version", STR),
    F("iggy_server_semver", Enc("optional u32", lambda v: v or None, lambda v, n: 0 if v is None else _int_loader(32)(v, n))),
    F(
        "cache_metrics",
        Enc(
            "cache metrics",
            lambda ms: {f"{m.stream_id}-{m.topic_id}-{m.partition_id}": {"hits": m.hits, "misses": m.misses, "hit_ratio": m.hit_ratio} for m in ms},
            lambda v, n: (),
        ),
    ),
    F("threads_count", U32),
    F("free_disk_space", BYTE_SIZE),
    F("total_disk_space", BYTE_SIZE),
)


def _dump_node(n: system.ClusterNode) -> dict[str, Any]:
    return {
        "name": n.name,
        "ip": n.ip,
        "endpoints": {"tcp": n.tcp_port, "quic": n.quic_port, "http": n.http_port, "websocket": n.websocket_port},
        "role": "leader" if n.role == 0 else "follower",
        "status": ("healthy", "starting", "stopping", "unreachable", "maintenance")[n.status] if n.status < 5 else "unreachable",
    }


_shape(system.ClusterMetadata, F("name", STR), F("nodes", Enc("nodes", lambda ns: [_dump_node(n) for n in ns], lambda v, n: ())))


# --------------------------------------------------------------------------- load / dump


def dump(obj: Any) -> Any:
    """A reply dataclass (or a list/tuple of them) -> its JSON value, by :data:`SHAPES`."""
    if isinstance(obj, (list, tuple)):
        return [dump(o) for o in obj]
    shape = SHAPES[type(obj)]
    out: dict[str, Any] = {}
    for f in shape.fields:
        value = f.compute(obj) if f.compute is not None else getattr(obj, f.attr)  # type: ignore[arg-type]
        out[f.key] = f.enc.dump(value) if f.compute is None or f.enc is not OPTIONS else value
    return out


def _load_object(cls: type, value: Any, name: str) -> Any:
    if not isinstance(value, dict):
        raise InvalidJson(f"{name}: expected an object", name)
    return load(cls, body=value)


def load(
    cls: type,
    *,
    body: Mapping[str, Any] | None = None,
    path: Mapping[str, str] | None = None,
    query: Mapping[str, str] | None = None,
) -> Any:
    """Build a ``cls`` dataclass from a request's JSON ``body``, ``path`` parameters and
    ``query`` parameters, by :data:`SHAPES`. Raises :class:`InvalidJson`."""
    shape = SHAPES[cls]
    sources = {BODY: body or {}, PATH: path or {}, QUERY: query or {}}
    if body is not None and not isinstance(body, dict):
        raise InvalidJson("the request body must be a JSON object")
    values: dict[str, Any] = {}
    for f in shape.fields:
        if f.compute is not None or f.attr is None:
            continue
        src = sources[f.source]
        if f.key in src and not (f.source == QUERY and src[f.key] == ""):
            raw = src[f.key]
            if f.source == QUERY and raw == "null":
                raw = None
            value = f.enc.load(raw, f.key)
        elif f.default is not _MISSING:
            value = f.default
        else:
            raise InvalidJson(f"missing field {f.key!r}", f.key)
        values.setdefault(f.attr, []).append(value)
    kwargs = {attr: shape.composite[attr][0](*vs) if attr in shape.composite else vs[0] for attr, vs in values.items()}
    if shape.fold:
        kwargs["options"] = _fold(shape, body or {}, kwargs.get("options", b""))
    return cls(**kwargs)


def _fold(shape: Shape, body: Mapping[str, Any], block: bytes) -> bytes:
    """Add the typed JSON fields Iggy keeps beside ``options`` into the options block."""
    entries = dict(tlv.decode_options_block(block)) if block else {}
    for json_name, (key, kind, enc, unset) in shape.fold.items():
        if body.get(json_name) is None:
            continue
        value = enc.load(body[json_name], json_name)
        if value == unset:
            continue
        if kind == tlv.Kind.STRING:
            entries[key] = (kind, enc.dump(value).encode())
        else:
            entries[key] = (kind, tlv.pack_value(kind, value))
    return tlv.encode_options_block(entries) if entries else b""


# --------------------------------------------------------------------------- messages
#
# SendMessages and the poll reply carry a batch, not fields: their JSON is Iggy's
# message list. Send: ``{"partitioning": PARTITIONING, "messages": [{"id": u128, "payload":
# BASE64, "user_headers": [HEADER_ENTRY] | BASE64 (raw block), optional}]}``. Poll reply:
# ``{"partition_id", "current_offset", "count", "messages": [{"header": {"checksum", "id",
# "offset", "timestamp", "origin_timestamp", "user_headers_length", "payload_length",
# "reserved"}, "payload": BASE64, "user_headers": [HEADER_ENTRY]}]}``, where ``timestamp``
# is the batch's server-stamped ``base_timestamp`` and ``origin_timestamp`` the batch
# origin plus the frame's delta (iggy-message-batches.md). HEADER_ENTRY is ``{"key":
# {"kind": "<kind>", "value": BASE64}, "value": {"kind": "<kind>", "value": BASE64}}``
# with kinds in snake case (``raw``, ``string``, ``uint64``...).

_HEADER_KIND = _named({int(k): k.name.lower() for k in tlv.Kind}, "header kind")
_KIND_CODES = {k.name.lower(): int(k) for k in tlv.Kind}


def _dump_header_field(kind: int, data: bytes) -> dict[str, Any]:
    return {"kind": _HEADER_KIND.dump(kind) if kind in _HEADER_KIND_CODES else "raw", "value": BASE64.dump(data)}


_HEADER_KIND_CODES = frozenset(int(k) for k in tlv.Kind)


def dump_user_headers(block: bytes | memoryview) -> list[dict[str, Any]] | str:
    """A user-headers block -> Iggy's entry list (the block in base64 if it does not decode)."""
    if not len(block):
        return []
    try:
        entries = tlv.decode_user_headers(block)
    except InvalidFormat:
        return BASE64.dump(block)
    return [{"key": _dump_header_field(h.key_kind, h.key), "value": _dump_header_field(h.kind, h.value)} for h in entries]


def _load_header_field(value: Any, name: str) -> tuple[int, bytes]:
    if not isinstance(value, dict):
        raise InvalidJson(f"{name}: expected {{kind, value}}", name)
    return _HEADER_KIND.load(value.get("kind"), f"{name}.kind"), BASE64.load(value.get("value"), f"{name}.value")


def load_user_headers(value: Any, name: str = "user_headers") -> bytes:
    """Iggy's entry list (or a base64 raw block, or null) -> a user-headers block.
    Raises :class:`InvalidJson` or the block's own header errors."""
    if value is None:
        return b""
    if isinstance(value, str):
        block = BASE64.load(value, name)
        tlv.validate_user_headers(block)
        return block
    if not isinstance(value, list):
        raise InvalidJson(f"{name}: expected an array of header entries", name)
    entries = []
    for i, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise InvalidJson(f"{name}[{i}]: expected {{key, value}}", name)
        key_kind, key = _load_header_field(entry.get("key"), f"{name}[{i}].key")
        kind, data = _load_header_field(entry.get("value"), f"{name}[{i}].value")
        entries.append(tlv.UserHeader(key, kind, data, key_kind))
    return tlv.encode_user_headers(entries) if entries else b""


@dataclass(frozen=True)
class JsonMessage:
    """One message of a send body: what :func:`headwater.codec.batch.build_batch` takes."""

    id: int
    payload: bytes
    user_headers: bytes = b""


def load_send_messages(body: Any) -> tuple[Partitioning, list[JsonMessage]]:
    """A send body -> (partitioning, messages). Raises :class:`InvalidJson`."""
    if not isinstance(body, dict):
        raise InvalidJson("the request body must be a JSON object")
    partitioning = _load_partitioning(body.get("partitioning", {"kind": "balanced", "value": ""}), "partitioning")
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise InvalidJson("messages: expected a non-empty array", "messages")
    out = []
    for i, m in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise InvalidJson(f"{where}: expected an object", where)
        out.append(
            JsonMessage(
                id=U128.load(m.get("id", 0), f"{where}.id"),
                payload=BASE64.load(m.get("payload"), f"{where}.payload"),
                user_headers=load_user_headers(m.get("user_headers"), f"{where}.user_headers"),
            )
        )
    return partitioning, out


def dump_send_messages(partitioning: Partitioning, msgs: list[JsonMessage]) -> dict[str, Any]:
    """The inverse of :func:`load_send_messages` (what the SDK sends)."""
    return {
        "partitioning": _dump_partitioning(partitioning),
        "messages": [
            {"id": m.id, "payload": BASE64.dump(m.payload), **({"user_headers": dump_user_headers(m.user_headers)} if m.user_headers else {})}
            for m in msgs
        ],
    }


def dump_polled_messages(prefix: messages.PollPrefix, batches: bytes | memoryview) -> dict[str, Any]:
    """A poll reply (prefix and back-to-back stored batches) -> Iggy's ``PolledMessages`` JSON."""
    from ..batch import iter_frames, read_header, split_batches

    out = []
    for b in split_batches(batches):
        head = read_header(b)
        for f in iter_frames(b):
            out.append(
                {
                    "header": {
                        "checksum": f.checksum,
                        "id": f.id,
                        "offset": head.base_offset + f.offset_delta,
                        "timestamp": head.base_timestamp,
                        "origin_timestamp": head.origin_timestamp + f.timestamp_delta,
                        "user_headers_length": len(f.user_headers),
                        "payload_length": len(f.payload),
                        "reserved": 0,
                    },
                    "payload": BASE64.dump(f.payload),
                    "user_headers": dump_user_headers(f.user_headers),
                }
            )
    return {
        "partition_id": prefix.partition_id,
        "current_offset": prefix.current_offset,
        "count": len(out),
        "messages": out,
    }


def unload(obj: Any) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """A request dataclass -> (JSON body, path parameters, query parameters): what a client
    sends, the inverse of :func:`load` (tests and clients)."""
    shape = SHAPES[type(obj)]
    parts: dict[str, dict[str, Any]] = {BODY: {}, PATH: {}, QUERY: {}}
    spread = {attr: list(split(getattr(obj, attr))) for attr, (_, split) in shape.composite.items()}
    for f in shape.fields:
        if f.attr is None:
            continue
        value = spread[f.attr].pop(0) if f.attr in spread else getattr(obj, f.attr)
        encoded = f.enc.dump(value)
        if f.source == BODY:
            parts[BODY][f.key] = encoded
        elif encoded is not None:
            parts[f.source][f.key] = str(encoded).lower() if isinstance(encoded, bool) else str(encoded)
    return parts[BODY], parts[PATH], parts[QUERY]
