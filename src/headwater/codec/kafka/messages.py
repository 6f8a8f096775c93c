"""Kafka message types from ``kio``: (api_key, version) -> request/response classes, and a builder.

kio generates one dataclass per message *version* (``kio.schema.<api>.v<N>``),
with nested entity classes of stable names across versions
(``MetadataResponseTopic``, ``PartitionData``...). A handler is written once
for all its versions: it asks :func:`build` for an entity of the version at
hand, passing every field it knows; :func:`build` drops fields the version
lacks, fills required fields it was not given with their zero value, and
turns plain ints into kio's ``ErrorCode`` and ``timedelta`` types.
"""

from __future__ import annotations

import datetime
import io
import types
import uuid
from dataclasses import MISSING, fields
from functools import lru_cache
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from . import guard

_ZERO_TD = datetime.timedelta(0)
_ERROR_CODES = {int(c.value): c for c in ErrorCode}


def error_code(code: int) -> ErrorCode:
    """kio's enum member for a Kafka error code (unknown codes fall back to -1)."""
    return _ERROR_CODES.get(int(code), ErrorCode.unknown_server_error)


def has_schema(api_key: int, version: int) -> bool:
    name = api_key_map.get(api_key)
    return name is not None and version in schema_name_map.get(name, {})


@lru_cache(maxsize=None)
def request_module(api_key: int, version: int) -> types.ModuleType:
    return load_payload_module(api_key, version, EntityType.request)


@lru_cache(maxsize=None)
def response_module(api_key: int, version: int) -> types.ModuleType:
    return load_payload_module(api_key, version, EntityType.response)


def _main_class(module: types.ModuleType, kind: EntityType) -> type:
    for value in vars(module).values():
        if isinstance(value, type) and getattr(value, "__type__", None) is kind:
            return value
    raise LookupError(f"no {kind.name} class in {module.__name__}")


@lru_cache(maxsize=None)
def request_class(api_key: int, version: int) -> type:
    return _main_class(request_module(api_key, version), EntityType.request)


@lru_cache(maxsize=None)
def response_class(api_key: int, version: int) -> type:
    return _main_class(response_module(api_key, version), EntityType.response)


@lru_cache(maxsize=None)
def is_flexible(api_key: int, version: int) -> bool:
    """Whether (api_key, version) uses the flexible encoding (request header v2, response header v1)."""
    return bool(request_class(api_key, version).__flexible__)


@lru_cache(maxsize=None)
def reader(cls: type):
    return entity_reader(cls)


@lru_cache(maxsize=None)
def writer(cls: type):
    return entity_writer(cls)


def decode(cls: type, body: bytes | memoryview, offset: int = 0) -> Any:
    """Decode one request entity, after :func:`guard.check` walked it.

    kio's reader trusts array counts (it reserves memory for them up front)
    and refuses unknown tagged fields, so the body is checked first and, if
    need be, rewritten (see ``guard.py``). Raises :class:`guard.MalformedRequest`
    (a ``FrameError``) for a body kio must not see, and kio's ``SerialError``
    family for what kio itself refuses.

    Bytes left after the entity are ignored, as Kafka's broker ignores them:
    librdkafka (2.x) sends a Metadata v9+ "all topics" request with a 4-byte
    placeholder where a 1-byte null array belongs, i.e. 3 extra bytes.
    """
    body, offset = guard.check(cls, body, offset)
    entity, _size = reader(cls)(body, offset)
    return entity


def encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    writer(type(entity))(buf, entity)
    return buf.getvalue()


def _zero(f) -> Any:
    kafka_type = f.metadata.get("kafka_type")
    text = str(f.type)
    if text.startswith("tuple"):
        return None if "None" in text.rsplit("]", 1)[-1] else ()
    if "| None" in text or "Optional" in text:
        return None
    if kafka_type == "error_code":
        return ErrorCode.none
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return _ZERO_TD
    if kafka_type == "datetime_i64":
        return datetime.datetime.fromtimestamp(0, datetime.timezone.utc)
    if kafka_type == "string":
        return ""
    if kafka_type in ("bytes", "records"):
        return b""
    if kafka_type == "bool":
        return False
    if kafka_type == "uuid":
        return uuid.UUID(int=0)
    if kafka_type == "float64":
        return 0.0
    return 0


@lru_cache(maxsize=None)
def _field_specs(cls: type) -> tuple[dict[str, str | None], dict[str, Any]]:
    kinds: dict[str, str | None] = {}
    required: dict[str, Any] = {}
    for f in fields(cls):
        kinds[f.name] = f.metadata.get("kafka_type")
        if f.default is MISSING and f.default_factory is MISSING:  # type: ignore[misc]
            required[f.name] = _zero(f)
    return kinds, required


def build(cls: type, **values: Any) -> Any:
    """An instance of kio entity ``cls`` from ``values``: unknown names are dropped,
    missing required fields get zero values, ``error_code``s and millisecond
    ``timedelta`` fields may be given as ints."""
    kinds, required = _field_specs(cls)
    kw: dict[str, Any] = {}
    for name, value in values.items():
        kind = kinds.get(name, MISSING)
        if kind is MISSING:
            continue
        if kind == "error_code" and not isinstance(value, ErrorCode):
            value = error_code(value)
        elif kind in ("timedelta_i32", "timedelta_i64") and isinstance(value, int):
            value = datetime.timedelta(milliseconds=value)
        elif kind == "datetime_i64" and isinstance(value, int):
            value = None if value < 0 else datetime.datetime.fromtimestamp(value / 1000, datetime.timezone.utc)
        kw[name] = value
    for name, zero in required.items():
        if name not in kw:
            kw[name] = zero
    return cls(**kw)


def has_field(cls: type, name: str) -> bool:
    return name in _field_specs(cls)[0]


def ms(value: datetime.timedelta | int) -> int:
    """Milliseconds of a kio ``timedelta`` field (ints pass through)."""
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)
