"""A pre-validation walk of a Kafka request body, before kio parses it.

kio's native reader trusts the lengths it reads: it reserves room for an
array's claimed element count up front (``Vec::with_capacity``), so a 5-byte
Metadata v12 body claiming 2**35 topics makes the allocation fail and the
whole process abort. It also refuses unknown tagged fields (KIP-482 says a
receiver skips them), reads a null non-nullable array as None, reads a
bool byte other than 0/1 as an error (Kafka reads any nonzero byte as true),
and fails on millisecond durations past +-2**63 microseconds.

:func:`check` walks the body with the same schema kio compiles (the
request dataclass's fields: ``kafka_type`` metadata, tuple = array, ``| None``
= nullable, ``tag`` metadata = tagged field, the class's ``__flexible__``),
the way Kafka's generated readers do, and either refuses it with
:class:`MalformedRequest` or hands kio a body kio reads safely::

    kafka type                           legacy (v0 encoding)          flexible (compact)
    int8/16/32/64, uint*, float64, uuid  fixed size, big-endian        same
    bool                                 1 byte; nonzero = true        same (rewritten to 0/1)
    string                               int16 length, -1 = null       uvarint length + 1, 0 = null
    bytes, records                       int32 length, -1 = null       uvarint length + 1, 0 = null
    array                                int32 count, -1 = null        uvarint count + 1, 0 = null
    nullable struct                      int8 marker: -1 null, >= 0    same
    tagged fields (flexible only)        -                             uvarint n, then n x
                                                                       (uvarint tag, uvarint size, value)

Checks: every length and count is non-negative, or null where the field is
nullable (Kafka: "non-nullable field ... was serialized as null"); every
string, bytes and array fits in the bytes left, an array's count times its
element's smallest encoding included (Kafka: "Tried to allocate a
collection of size N, but there are only M bytes remaining"); strings are
UTF-8 (kio refuses others); varints end within 5 bytes and fit an int32; a
known tagged field's value takes exactly its declared size. The ``records``
field of Produce is one bytes blob: only its length is checked.

Rewrites (the body is then copied once, with the edits applied): unknown
tagged fields are dropped, at any depth, with the counts and the sizes of
enclosing tagged fields adjusted; bool bytes other than 0 and 1 become 1;
an int64 millisecond duration beyond +-(2**63 // 1000) is clamped to it (kio
counts microseconds in an int64; only OffsetCommit v2-4 ``retention_time_ms``,
which Headwater ignores, has such a field).

Bytes after the body are ignored, as by kio and Kafka's broker. Sources:
Kafka ``MessageDataGenerator`` (generated ``read`` methods),
``ByteUtils.readUnsignedVarint``, KIP-482; kio ``kio.serial._introspect``
and its native ``parse_entity``.
"""

from __future__ import annotations

import re
import struct
from dataclasses import fields
from functools import lru_cache
from typing import Any, Callable

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from .framing import FrameError

INT32_MAX = (1 << 31) - 1
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_NON_ASCII = re.compile(rb"[\x80-\xff]")
_DURATION_MAX_MS = (1 << 63) // 1000  # kio turns ms into an int64 of microseconds

_FIXED = {
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}

Edits = list  # [(start, stop, replacement bytes)], absolute positions in the buffer
Walk = Callable[[Any, int, int, Edits], int]


class MalformedRequest(FrameError):
    """A request body that must not reach kio: the connection is closed.

    ``offset`` is the byte offset in the buffer given to :func:`check`,
    ``field`` the schema field (``Entity.field``) being read."""

    def __init__(self, message: str, offset: int | None = None, field: str | None = None):
        super().__init__(message if field is None else f"{field}: {message}", offset)
        self.field = field


def check(cls: type, buf: bytes | bytearray | memoryview, offset: int = 0) -> tuple[Any, int]:
    """Walk the body of request entity ``cls`` in ``buf`` from ``offset``.

    Returns ``(buf, offset)`` unchanged when kio may read it as it is, else
    ``(rewritten body, 0)`` with unknown tagged fields dropped and bools and
    durations normalized (see the module docstring). Raises
    :class:`MalformedRequest`.
    """
    walk = _entity_walk(cls, False)
    edits: Edits = []
    try:
        walk(buf, offset, len(buf), edits)
    except (IndexError, struct.error):  # a read past the end that a bound check did not catch
        raise MalformedRequest("request body ends early", len(buf)) from None
    if not edits:
        return buf, offset
    edits.sort(key=lambda e: e[0])
    out = bytearray()
    pos = offset
    for start, stop, replacement in edits:
        out += buf[pos:start]
        out += replacement
        pos = stop
    out += buf[pos:]
    return bytes(out), 0


# ---------------------------------------------------------------------------
# reading helpers


def uvarint(value: int) -> bytes:
    """An unsigned varint (Kafka ``ByteUtils.writeUnsignedVarint``)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_uvarint(buf, pos: int, end: int, where: str) -> tuple[int, int]:
    """(value, next position): at most 5 bytes and an int32, as Kafka reads them."""
    if pos >= end:
        raise MalformedRequest("varint runs past the end", pos, where)
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    start = pos
    value = b & 0x7F
    shift = 7
    pos += 1
    while True:
        if pos >= end:
            raise MalformedRequest("varint runs past the end", start, where)
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift >= 35:
            raise MalformedRequest("varint longer than 5 bytes", start, where)
    if value > INT32_MAX:
        raise MalformedRequest(f"varint {value} does not fit an int32", start, where)
    return value, pos


def _underflow(pos: int, where: str, need: int, end: int) -> MalformedRequest:
    return MalformedRequest(f"needs {need} bytes, {max(end - pos, 0)} left", pos, where)


# ---------------------------------------------------------------------------
# compiling kio's schema into walkers
#
# A compiled field is (walk, min_size): walk(buf, pos, end, edits) -> next pos,
# or an int: a fixed number of bytes that needs no look (walks merge runs of them).


def _skip(n: int, where: str) -> Walk:
    def walk(buf, pos, end, edits):
        if pos + n > end:
            raise _underflow(pos, where, n, end)
        return pos + n

    return walk


def _bool(where: str) -> Walk:
    def walk(buf, pos, end, edits):
        if pos >= end:
            raise _underflow(pos, where, 1, end)
        if buf[pos] > 1:
            edits.append((pos, pos + 1, b"\x01"))  # Kafka: readByte() != 0
        return pos + 1

    return walk


def _duration_i64(where: str) -> Walk:
    def walk(buf, pos, end, edits):
        if pos + 8 > end:
            raise _underflow(pos, where, 8, end)
        (ms,) = _I64.unpack_from(buf, pos)
        if not -_DURATION_MAX_MS <= ms <= _DURATION_MAX_MS:
            edits.append((pos, pos + 8, _I64.pack(_DURATION_MAX_MS if ms > 0 else -_DURATION_MAX_MS)))
        return pos + 8

    return walk


def _check_utf8(buf, start: int, stop: int, where: str) -> None:
    if _NON_ASCII.search(buf, start, stop) is None:  # the usual case: no copy, no decode
        return
    try:
        str(buf[start:stop], "utf-8")
    except UnicodeDecodeError:
        raise MalformedRequest("string is not UTF-8", start, where) from None


def _compact_blob(nullable: bool, text: bool, where: str) -> Walk:
    def walk(buf, pos, end, edits):
        n, p = _read_uvarint(buf, pos, end, where)
        if n == 0:
            if not nullable:
                raise MalformedRequest("non-nullable field sent as null", pos, where)
            return p
        stop = p + n - 1
        if stop > end:
            raise _underflow(p, where, n - 1, end)
        if text:
            _check_utf8(buf, p, stop, where)
        return stop

    return walk


def _legacy_blob(nullable: bool, text: bool, where: str) -> Walk:
    length_struct, width = (_I16, 2) if text else (_I32, 4)

    def walk(buf, pos, end, edits):
        if pos + width > end:
            raise _underflow(pos, where, width, end)
        (n,) = length_struct.unpack_from(buf, pos)
        p = pos + width
        if n < 0:
            if n != -1 or not nullable:
                raise MalformedRequest(f"length {n}", pos, where)
            return p
        stop = p + n
        if stop > end:
            raise _underflow(p, where, n, end)
        if text:
            _check_utf8(buf, p, stop, where)
        return stop

    return walk


def _array(compact: bool, nullable: bool, item, item_min: int, where: str) -> Walk:
    item_min = max(item_min, 1)

    def walk(buf, pos, end, edits):
        if compact:
            n, p = _read_uvarint(buf, pos, end, where)
            count = n - 1
        else:
            if pos + 4 > end:
                raise _underflow(pos, where, 4, end)
            (count,) = _I32.unpack_from(buf, pos)
            p = pos + 4
            if count < -1:
                raise MalformedRequest(f"array length {count}", pos, where)
        if count == -1:
            if not nullable:
                raise MalformedRequest("non-nullable array sent as null", pos, where)
            return p
        if count * item_min > end - p:
            raise MalformedRequest(
                f"array of {count} elements, only {end - p} bytes left", pos, where
            )
        if item.__class__ is int:
            return p + count * item
        for _ in range(count):
            p = item(buf, p, end, edits)
        return p

    return walk


def _primitive(kafka_type: str, flexible: bool, nullable: bool, where: str) -> tuple[Any, int]:
    size = _FIXED.get(kafka_type)
    if size is not None:
        return size, size
    if kafka_type == "bool":
        return _bool(where), 1
    if kafka_type == "timedelta_i64":
        return _duration_i64(where), 8
    if kafka_type in ("string", "bytes", "records"):
        text = kafka_type == "string"
        if flexible:
            return _compact_blob(nullable, text, where), 1
        return _legacy_blob(nullable, text, where), 2 if text else 4
    raise TypeError(f"{where}: unknown kafka_type {kafka_type!r}")


def _field(f, flexible: bool, tagged: bool, where: str) -> tuple[Any, int]:
    """Mirror of kio's ``build_field_schema``: how kio reads this field."""
    shape = classify_field(f)
    if isinstance(shape, PrimitiveField):
        return _primitive(get_schema_field_type(f), flexible, is_optional(f) and not tagged, where)
    if isinstance(shape, PrimitiveTupleField):
        item, item_min = _primitive(get_schema_field_type(f), flexible, False, where)
        return _array(flexible, is_optional(f), item, item_min, where), 1 if flexible else 4
    if isinstance(shape, EntityField):
        return _entity(shape.type_, is_optional(f))
    if isinstance(shape, EntityTupleField):
        item, item_min = _entity(shape.type_, False)
        return _array(flexible, is_optional(f), item, item_min, where), 1 if flexible else 4
    raise TypeError(f"{where}: unsupported field shape {shape!r}")


@lru_cache(maxsize=None)
def _entity(cls: type, nullable: bool) -> tuple[Any, int]:
    """The compiled entity: an int when it is a fixed run of bytes, else a walk."""
    flexible = bool(cls.__flexible__)
    name = cls.__name__
    steps: list[Any] = []
    known: dict[int, Walk] = {}
    min_size = 0
    for f in fields(cls):
        where = f"{name}.{f.name}"
        tag = get_field_tag(f)
        step, step_min = _field(f, flexible, tag is not None, where)
        if tag is not None:
            known[int(tag)] = step if step.__class__ is not int else _skip(step, where)
            continue
        min_size += step_min
        if step.__class__ is int and steps and steps[-1].__class__ is int:
            steps[-1] += step
        else:
            steps.append(step)
    if flexible:
        min_size += 1
    if not flexible and not nullable and all(s.__class__ is int for s in steps):
        return sum(steps), min_size
    walks = tuple(s if s.__class__ is not int else _skip(s, name) for s in steps)
    tagged_where = f"{name}._tagged_fields"

    def walk(buf, pos, end, edits):
        if nullable:
            if pos >= end:
                raise _underflow(pos, name, 1, end)
            (marker,) = _I8.unpack_from(buf, pos)
            pos += 1
            if marker < 0:
                if marker != -1:  # Kafka reads any negative marker as null, kio only -1
                    raise MalformedRequest(f"struct marker {marker}", pos - 1, name)
                return pos
        for step in walks:
            pos = step(buf, pos, end, edits)
        if flexible:
            if pos < end and buf[pos] == 0:
                return pos + 1
            pos = _tagged_section(buf, pos, end, edits, known, tagged_where)
        return pos

    return walk, (1 if nullable else min_size)


@lru_cache(maxsize=None)
def _entity_walk(cls: type, nullable: bool) -> Walk:
    step, _ = _entity(cls, nullable)
    if step.__class__ is int:
        return _skip(step, cls.__name__)
    return step


def _tagged_section(buf, pos: int, end: int, edits: Edits, known: dict[int, Walk], where: str) -> int:
    """A tagged-field section: known tags are walked within their declared
    size, unknown ones dropped (edits), the count rewritten to match."""
    start = pos
    count, p = _read_uvarint(buf, pos, end, where)
    count_stop = p
    if count * 2 > end - p:
        raise MalformedRequest(f"{count} tagged fields, only {end - p} bytes left", start, where)
    unknown = []
    for _ in range(count):
        tag_start = p
        tag, p = _read_uvarint(buf, p, end, where)
        size_start = p
        size, p = _read_uvarint(buf, p, end, where)
        stop = p + size
        if stop > end:
            raise MalformedRequest(f"tagged field {tag} of {size} bytes runs past the end", tag_start, where)
        value = known.get(tag)
        if value is None:
            unknown.append((tag_start, stop, b""))
        else:
            before = len(edits)
            got = value(buf, p, stop, edits)
            if got != stop:
                raise MalformedRequest(
                    f"tagged field {tag} declares {size} bytes, its value takes {got - p}", tag_start, where
                )
            if len(edits) > before:  # the value was rewritten: its size changes with it
                delta = sum(len(r) - (b - a) for a, b, r in edits[before:])
                edits.append((size_start, p, uvarint(size + delta)))
        p = stop
    if unknown:
        edits.append((start, count_stop, uvarint(count - len(unknown))))
        edits.extend(unknown)
    return p
