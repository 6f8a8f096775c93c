"""JSON <-> Iggy command and reply dataclasses, for the HTTP REST API, derived from the declarations.

Nothing here lists a command's fields: :data:`SHAPES` is derived at import from every
:class:`~.schema.Record` declared under :mod:`.commands` (:func:`shape_of`, which walks the
fields as :func:`~.schema.iter_fields` does). A field's JSON key is its ``json_name`` or
its name; its encoding the one its ``json`` names in :data:`ENCODINGS`, else the one its
wire type implies (:func:`_wire_enc`); a request may leave it out when it has a
``json_default`` or a dataclass default; ``json="skip"`` keeps it out of the JSON. Where a
request value comes from (path, query, body) is the route's (``frontends/http/routes.py``,
see :func:`load`). :func:`load` builds a request dataclass, :func:`dump` renders a reply,
:func:`unload` is what a client sends.

JSON-only, declared here because the binary has no twin: :data:`FOLDS` (typed topic
settings of the create/update topic bodies that the binary request keeps in its options
block), the reply forms of :data:`ENCODINGS` and :data:`WHOLE`, and the message lists of
send and poll (the binary carries a batch, not fields).

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
``POLLING_KIND``   ``"offset"``, ``"timestamp"``, ``"first"``, ``"last"``, ``"next"``
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
from typing import Any, Callable, Collection, Mapping

from .. import headers as tlv
from ..errors import InvalidFormat
from .codes import ConsumerKind, PartitioningKind, PollingKind
from . import schema
from .commands import messages, system, topics  # importing .commands declares every record
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


U8, U16, U32, U64, U128 = _uint(8), _uint(16), _uint(32), _uint(64), _uint(128)
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


# --------------------------------------------------------------------------- reply-only forms
#
# Encodings a declaration names with ``Field(json=...)`` where Iggy's serde form is not the
# one its wire type implies (the default of each wire type is in :func:`_wire_enc`).

_TRANSPORT = _named({1: "tcp", 2: "quic", 3: "http", 4: "websocket"}, "transport")


def _sentinel_is_null(name: str, sentinel: int, bits: int) -> Enc:
    """Iggy's ``Option<u..>`` where the binary form spells None as ``sentinel``."""
    load = _int_loader(bits)
    return Enc(
        name,
        lambda v: None if v in (None, sentinel) else v,
        lambda v, n: sentinel if v is None else load(v, n),
    )


def _dump_cache_metrics(ms: tuple) -> dict[str, dict[str, Any]]:
    return {f"{m.stream_id}-{m.topic_id}-{m.partition_id}": {"hits": m.hits, "misses": m.misses, "hit_ratio": m.hit_ratio} for m in ms}


_NODE_STATUS = ("healthy", "starting", "stopping", "unreachable", "maintenance")


def _dump_node(n: system.ClusterNode) -> dict[str, Any]:
    return {
        "name": n.name,
        "ip": n.ip,
        "endpoints": {"tcp": n.tcp_port, "quic": n.quic_port, "http": n.http_port, "websocket": n.websocket_port},
        "role": "leader" if n.role == 0 else "follower",
        "status": _NODE_STATUS[n.status] if n.status < len(_NODE_STATUS) else "unreachable",
    }


def _reply_only(name: str, dump_fn: Callable[[Any], Any]) -> Enc:
    """A form only replies use (nothing loads it): loading gives the empty value."""
    return Enc(name, dump_fn, lambda v, n: ())


ENCODINGS: dict[str, Enc] = {
    e.name: e
    for e in (
        TIMESTAMP_US,
        EXPIRY_US,
        BYTE_SIZE,
        USER_STATUS,
        COMPRESSION,
        _TRANSPORT,
        _sentinel_is_null("zero is null", 0, 64),  # PAT expiry_at, server semver: 0 = absent
        _sentinel_is_null("no user is null", system.NO_USER_ID, 32),  # a client before login
        _reply_only("cache metrics", _dump_cache_metrics),
        _reply_only("cluster nodes", lambda ns: [_dump_node(n) for n in ns]),
    )
}
"""The encodings a declaration can name with ``Field(json=...)``, by name."""

SKIP = "skip"
"""``Field(json=SKIP)``: the field is not in Iggy's JSON (load leaves the dataclass default)."""

WHOLE: dict[str, Callable[[Any], Any]] = {
    # a topic's JSON ``options`` is its client-set options and the resolved defaults
    # (``derived_options``, declared ``json="skip"``) in one object, the latter not explicit
    "topic options": lambda t: {**_dump_options(t.derived_options, explicit=False), **_dump_options(t.options)},
}
"""Reply encodings computed from the whole record rather than the field's own value."""


# --------------------------------------------------------------------------- derived shapes

_MISSING: Any = type("_Missing", (), {"__repr__": lambda self: "MISSING"})()


@dataclass(frozen=True)
class F:
    """One JSON field of a :class:`Shape`: dataclass attribute ``attr`` as JSON ``key`` with
    encoding ``enc``; ``default`` when a request leaves it out (else it is required).
    ``get`` reads its value from a reply object (a count field: the length of its list,
    ``attr`` None). Two fields may share an ``attr`` (a polling strategy flattened into
    ``kind`` and ``value``, Iggy's ``#[serde(flatten)]``): :func:`load` joins them."""

    attr: str | None
    enc: Enc
    key: str
    default: Any = _MISSING
    get: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class Shape:
    """The JSON of one dataclass, derived from its declaration (:func:`shape_of`).

    ``composite``: ``attr -> (join, split)`` for an attribute spread over several JSON
    fields or wrapped (a consumer is only its id): ``join(*values)`` builds it from its
    fields' values in order, ``split(value)`` gives them back. ``fold``: JSON-only body
    fields kept in the options block, ``json name -> (header kind, encoding, "unset")``."""

    cls: type
    fields: tuple[F, ...]
    composite: Mapping[str, tuple[Callable[..., Any], Callable[[Any], tuple]]] = field(default_factory=dict)
    fold: Mapping[str, tuple[int, Enc, Any]] = field(default_factory=dict)


# Iggy's HTTP bodies of CreateTopic / UpdateTopic carry topic settings as typed fields that
# the binary request carries in its options block: JSON only, so declared here.
_TOPIC_FOLD = {
    "compression_algorithm": (int(tlv.Kind.STRING), COMPRESSION, None),
    "message_expiry": (int(tlv.Kind.UINT64), EXPIRY_US, 0),
    "max_topic_size": (int(tlv.Kind.UINT64), BYTE_SIZE, 0),
}
FOLDS: dict[type, Mapping[str, tuple[int, Enc, Any]]] = {topics.CreateTopic: _TOPIC_FOLD, topics.UpdateTopic: _TOPIC_FOLD}

# A consumer over HTTP is its id only (``Consumer.kind`` is ``#[serde(skip)]``): a single
# consumer. A polling strategy is flattened into ``kind`` and ``value``.
_COMPOSITE: dict[schema.WireType, tuple[tuple[tuple[str, Enc], ...], Callable[..., Any], Callable[[Any], tuple]]] = {
    schema.CONSUMER: ((("", IDENTIFIER),), lambda ident: Consumer(ConsumerKind.CONSUMER, ident), lambda c: (c.id,)),
    schema.POLLING_STRATEGY: (
        (("kind", POLLING_KIND), ("value", U64)),
        lambda kind, value: PollingStrategy(PollingKind(kind), value),
        lambda p: (int(p.kind), p.value),
    ),
}
_BY_TYPE: dict[schema.WireType, Enc] = {
    schema.U8: U8, schema.U16: U16, schema.U32: U32, schema.U64: U64, schema.U128: U128,
    schema.F32: F32, schema.FLAG: BOOL, schema.IDENTIFIER: IDENTIFIER,
    schema.NAME: STR, schema.STR8: STR, schema.STR32: STR, schema.BYTES32: BASE64,
    schema.OPTIONS: OPTIONS, schema.REST: OPTIONS, schema.OPTIONAL_PARTITION: optional(U32),
    schema.PARTITIONING: PARTITIONING, schema.PERMISSIONS: PERMISSIONS,
}


def _wire_enc(t: schema.WireType, name: str | None) -> Enc:
    """The JSON encoding of wire type ``t``: the one ``name`` names (``Field.json``), else
    the default its wire type implies. Raises TypeError for a type with no JSON form."""
    if isinstance(t, (schema.Optional, schema.NoneIfEmpty)):
        return optional(_wire_enc(t.inner, name))
    if isinstance(t, schema.Sized):
        return _wire_enc(t.inner, name)
    if name is not None:
        return ENCODINGS[name]
    if isinstance(t, schema.Enum):
        return _BY_TYPE[t.inner]
    if isinstance(t, schema.Record):
        return nested(t.cls)
    if isinstance(t, schema.ListOf):
        return array(_wire_enc(t.item, None))
    if t in _BY_TYPE:
        return _BY_TYPE[t]
    raise TypeError(f"{t.label} has no JSON form")


def _default(record: schema.Record, f: schema.Field) -> Any:
    if f.json_default is not ...:
        return f.json_default
    dc = next(x for x in dataclasses.fields(record.cls) if x.name == f.name)
    return _MISSING if dc.default is dataclasses.MISSING else dc.default


def shape_of(record: schema.Record) -> Shape:
    """The JSON of a declared record, walked like :func:`..schema.iter_fields`: one
    :class:`F` per field but those declared ``json="skip"`` or computed on the wire,
    named ``json_name`` or the field's name, encoded as ``json`` names or as its wire
    type implies; a count field (``count_of``) is the length of its list."""
    fields: list[F] = []
    composite = {}
    for f in record.fields:
        if f.json == SKIP or f.computed is not None:
            continue
        if f.count_of is not None:
            fields.append(F(None, _BY_TYPE[f.type], f.json_key, get=lambda o, n=f.count_of: len(getattr(o, n))))
        elif f.type in _COMPOSITE:
            parts, join, split = _COMPOSITE[f.type]
            default = _default(record, f)
            defaults = split(default) if default is not _MISSING else [_MISSING] * len(parts)
            for (key, enc), d in zip(parts, defaults):
                fields.append(F(f.name, enc, key or f.json_key, d))
            composite[f.name] = (join, split)
        elif f.json in WHOLE:
            fields.append(F(f.name, Enc(f.json, lambda v: v, _load_options), f.json_key, get=WHOLE[f.json]))
        else:
            fields.append(F(f.name, _wire_enc(f.type, f.json), f.json_key, _default(record, f)))
    return Shape(record.cls, tuple(fields), composite, FOLDS.get(record.cls, {}))


SHAPES: dict[type, Shape] = {
    cls: shape_of(record)
    for cls, record in schema.RECORDS.items()
    # a batch travels as Iggy's message list (below), not as fields
    if not any(f.type is schema.BATCH for f in record.fields)
}
"""The JSON shape of every declared dataclass, derived at import."""


# --------------------------------------------------------------------------- load / dump


def dump(obj: Any) -> Any:
    """A reply dataclass (or a list/tuple of them) -> its JSON value, by :data:`SHAPES`."""
    if isinstance(obj, (list, tuple)):
        return [dump(o) for o in obj]
    return {
        f.key: f.enc.dump(f.get(obj) if f.get is not None else getattr(obj, f.attr))  # type: ignore[arg-type]
        for f in SHAPES[type(obj)].fields
    }


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
    """Build a ``cls`` dataclass from a request, by :data:`SHAPES`. Raises :class:`InvalidJson`.

    Where a field comes from is the route's business (``frontends/http/routes.py``): a
    field named by a ``path`` parameter is read from it; any other from the JSON ``body``
    when the request has one (POST, PUT), else from the ``query`` string (GET, DELETE;
    an empty value is absent, ``null`` is None)."""
    shape = SHAPES[cls]
    if body is not None and not isinstance(body, dict):
        raise InvalidJson("the request body must be a JSON object")
    path, query = path or {}, query or {}
    values: dict[str, Any] = {}
    for f in shape.fields:
        if f.attr is None or f.get is not None:
            continue
        src = path if f.key in path else body if body is not None else query
        raw = src.get(f.key, _MISSING)
        if src is query and raw in ("", "null"):
            raw = _MISSING if raw == "" else None
        if raw is not _MISSING:
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
    for key, (kind, enc, unset) in shape.fold.items():
        if body.get(key) is None:
            continue
        value = enc.load(body[key], key)
        if value == unset:
            continue
        if kind == tlv.Kind.STRING:
            entries[key] = (kind, enc.dump(value).encode())
        else:
            entries[key] = (kind, tlv.pack_value(kind, value))
    return tlv.encode_options_block(entries) if entries else b""


def unload(obj: Any, path: Collection[str] = (), has_body: bool = True) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """A request dataclass -> (JSON body, path parameters, query parameters): what a client
    sends to a route with the ``path`` parameters named (with a body or, ``has_body``
    false, a query string), the inverse of :func:`load` (tests and clients)."""
    shape = SHAPES[type(obj)]
    body: dict[str, Any] = {}
    params: dict[str, str] = {}
    query: dict[str, str] = {}
    spread = {attr: list(split(getattr(obj, attr))) for attr, (_, split) in shape.composite.items()}
    for f in shape.fields:
        if f.attr is None or f.get is not None:
            continue
        value = spread[f.attr].pop(0) if f.attr in spread else getattr(obj, f.attr)
        encoded = f.enc.dump(value)
        if f.key not in path and has_body:
            body[f.key] = encoded
        elif encoded is not None:
            (params if f.key in path else query)[f.key] = str(encoded).lower() if isinstance(encoded, bool) else str(encoded)
    return body, params, query



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
