"""Field trees of captured Kafka requests and responses, RecordBatch v2 and its records included.

The message layouts come from kio's generated schema classes (one per API and
version, from Kafka's ``clients/src/main/resources/common/message/*.json``):
their field order, ``kafka_type`` and tagged-field numbers drive the walk, and
their field docstrings (Kafka's ``about``) are the notes. Encoding rules
(``shared/spec/kafka-produce-v12.txt``): big-endian integers; in flexible
versions strings, bytes, arrays and record sets carry an unsigned varint
``length + 1`` (0 = null) and every struct ends with tagged fields; otherwise
int16 string lengths and int32 byte/array lengths (-1 = null). Request header
v2 (flexible) keeps an int16 ``client_id``; ApiVersions responses always use
response header v0.

RecordBatch v2 (``DefaultRecordBatch.java``): the 61-byte header, the CRC-32C
recomputed over ``attributes`` to the end and shown valid or not, then each
record's varint fields (``DefaultRecord.java``). A compressed batch's records
are shown as one compressed run. A batch cut short at the end of a fetch
response is shown as a partial batch, as clients skip it.
"""

from __future__ import annotations

import ast
import struct
import inspect as pyinspect
import sys
import types
import uuid
from dataclasses import fields, is_dataclass
from functools import lru_cache
from typing import Union, get_args, get_origin

import crc32c
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map

from ..codec.kafka import compression, messages
from ..codec.kafka.errors import KafkaCodecError
from .tree import Cursor, LayoutError, Node, building, describe_bytes

__all__ = ["request", "response", "record_set", "looks_like_request"]

API_VERSIONS = 18
RECORD_BATCH_HEADER_SIZE = 61
DECOMPRESSED_LIMIT = 64 * 1024 * 1024
"""The most a compressed record run may decompress to in the inspector (a bomb stops there)."""
_COMPRESSION = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
KAFKA_TYPE_NAMES = {"i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "u16": "uint16", "u32": "uint32"}
"""Kafka's names for the integer widths (the schemas' and the spec's)."""
_FIXED = {"int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint16": "u16",
          "timedelta_i32": "i32", "timedelta_i64": "i64", "datetime_i64": "i64", "error_code": "i16"}


@lru_cache(maxsize=None)
def _docs(cls: type) -> dict[str, str]:
    """Field name -> docstring (Kafka's ``about``) of a kio schema class, read from its source."""
    try:
        tree = ast.parse(pyinspect.getsource(sys.modules[cls.__module__]))
    except (OSError, TypeError, KeyError, SyntaxError):
        return {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            out = {}
            body = node.body
            for here, after in zip(body, body[1:]):
                if (isinstance(here, ast.AnnAssign) and isinstance(here.target, ast.Name)
                        and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                        and isinstance(after.value.value, str)):
                    out[here.target.id] = " ".join(after.value.value.split())
            return out
    return {}


def _unwrap(annotation) -> tuple[object, bool, bool]:
    """(element type, is_array, nullable) of a kio field annotation."""
    nullable = False
    if get_origin(annotation) in (types.UnionType, Union):
        args = [a for a in get_args(annotation) if a is not type(None)]
        nullable = len(args) < len(get_args(annotation))
        annotation = args[0]
    if get_origin(annotation) is tuple:
        return get_args(annotation)[0], True, nullable
    return annotation, False, nullable


def _length(c: Cursor, flexible: bool, name: str, *, wide: bool) -> int:
    """A string/bytes/array length: compact uvarint N+1 when flexible, else int16 (strings) or
    int32; returns -1 for null."""
    if flexible:
        raw = c.uvarint(name, show=lambda v: f"{v} (compact, {'null' if v == 0 else f'n+1'})")
        return raw - 1
    return c.int(name, "i32" if wide else "i16", show=lambda v: f"{v}" + (" (null)" if v == -1 else ""))


def _primitive(c: Cursor, name: str, kafka_type: str, flexible: bool, about: str) -> None:
    if kafka_type in _FIXED:
        kind = _FIXED[kafka_type]
        show = None
        if kafka_type == "error_code":
            show = _error_name
        elif kafka_type.startswith("timedelta"):
            show = lambda v: f"{v} ms"  # noqa: E731
        c.int(name, kind, about, show=show)
        c.parent.children[-1].type = kafka_type
        return
    if kafka_type == "bool":
        c.int(name, "i8", about, show=lambda v: "true" if v else "false")
        c.parent.children[-1].type = "bool"
        return
    if kafka_type == "float64":
        c.need(8, name)
        value = struct.unpack_from(">d", c.data, c.pos)[0]
        c.leaf(name, "float64", repr(value), 8, about)
        c.pos += 8
        return
    if kafka_type == "uuid":
        c.raw(name, 16, "uuid", about, show=lambda b: str(uuid.UUID(bytes=b)))
        return
    if kafka_type == "records":
        with c.group(name, kafka_type, about=about) as node:
            size = _length(c, flexible, "length", wide=True)
            if size < -1:
                raise c.fail(f"{name}: length {size} is negative", c.pos - 1)
            node.value = "null" if size == -1 else record_set(c, size)
        return
    if kafka_type in ("string", "bytes"):
        _string(c, name, kafka_type, about, compact=flexible, wide=kafka_type == "bytes")
        return
    raise LayoutError(c.at(), f"{name}: unknown kafka_type {kafka_type!r}")


def _string(c: Cursor, name: str, kafka_type: str, about: str, *, compact: bool, wide: bool) -> None:
    """A string or bytes field as one line: its length prefix and data together."""
    start = c.pos
    if compact:
        raw, prefix = c._varint(name, 5)
        size, how = raw - 1, f"compact, len+1={raw}"
    else:
        width = 4 if wide else 2
        c.need(width, name)
        size = c.peek_int("i32" if wide else "i16")
        prefix, how = width, f"int{width * 8} len={size}"
    if size < -1:
        raise c.fail(f"{name}: length {size} is negative")
    c.pos += prefix
    if size == -1:
        shown = f"null ({how})"
    else:
        c.need(size, name)
        data = bytes(c.data[c.pos:c.pos + size])
        c.pos += size
        shown = (repr(data.decode("utf-8", "replace")) if kafka_type == "string" else describe_bytes(data))
        shown += f" ({how})"
    c.leaf(name, kafka_type if compact or kafka_type == "bytes" else "nullable_string" if size == -1 else kafka_type,
           shown, c.pos - start, about, pos=start)


def _error_name(value: int) -> str:
    try:
        return f"{value} ({ErrorCode(value).name.upper()})" if value else "0 (NONE)"
    except ValueError:
        return f"{value} (unknown)"


def _field(c: Cursor, f, flexible: bool, about: str) -> None:
    element, is_array, _nullable = _unwrap(f.type)
    if not is_array:
        if is_dataclass(element):
            _entity(c, element, f.name, flexible, about)
        else:
            _primitive(c, f.name, f.metadata["kafka_type"], flexible, about)
        return
    type_name = f"[]{element.__name__ if is_dataclass(element) else f.metadata.get('kafka_type', '?')}"
    with c.group(f.name, type_name, about=about) as node:
        n = _length(c, flexible, "length", wide=True)
        if n < -1:
            raise c.fail(f"{f.name}: array length {n} is negative", c.pos - 1)
        node.value = "null" if n == -1 else f"{n} element{'s' if n != 1 else ''}"
        for i in range(max(n, 0)):
            if is_dataclass(element):
                _entity(c, element, f"{element.__name__}[{i}]", flexible, "")
            else:
                _primitive(c, f"[{i}]", f.metadata["kafka_type"], flexible, "")


def _entity(c: Cursor, cls: type, name: str, flexible: bool, about: str, *, header: bool = False) -> Node:
    docs = _docs(cls)
    with c.group(name, cls.__name__, about=about) as node:
        tagged = {}
        for f in fields(cls):
            if "tag" in f.metadata:
                tagged[f.metadata["tag"]] = f
            elif header and f.name == "client_id":  # always int16-prefixed (KIP-482)
                _string(c, "client_id", "nullable_string", docs.get(f.name, ""), compact=False, wide=False)
            else:
                _field(c, f, flexible, docs.get(f.name, ""))
        if flexible:
            _tagged(c, tagged, docs)
    return node


def _tagged(c: Cursor, tagged: dict, docs: dict[str, str]) -> None:
    count = c.uvarint("tagged_fields", "number of tagged fields in this struct")
    for i in range(count):
        with c.group(f"tagged_field[{i}]", "tagged field"):
            tag = c.uvarint("tag")
            size = c.uvarint("size")
            end = c.pos + size
            c.need(size, f"tagged field {tag}")
            f = tagged.get(tag)
            if f is None:
                c.raw("data", size, about="a tag this version does not define")
            else:
                _field(c, f, True, docs.get(f.name, ""))
                if c.pos != end:
                    raise c.fail(f"tagged field {tag} ({f.name}) is {size} bytes but its value is {c.pos - end + size}")


def _attributes(value: int) -> str:
    parts = [_COMPRESSION.get(value & 7, f"codec {value & 7}")]
    parts.append("log-append time" if value & 8 else "create time")
    if value & 16:
        parts.append("transactional")
    if value & 32:
        parts.append("control")
    if value & 64:
        parts.append("delete horizon")
    return f"{value} ({', '.join(parts)})"


def _record(c: Cursor, index: int) -> None:
    with c.group(f"Record[{index}]", "Record", about="DefaultRecord.java") as node:
        length = c.varint("length", "bytes after this field")
        end = c.pos + length
        c.need(length, "record")
        c.int("attributes", "i8", "unused")
        c.varint("timestampDelta", "ms after baseTimestamp", long=True)
        delta = c.varint("offsetDelta", "offset = baseOffset + offsetDelta")
        key_len = c.varint("keyLength", "-1 = null")
        if key_len >= 0:
            c.raw("key", key_len)
        value_len = c.varint("valueLength", "-1 = null")
        if value_len >= 0:
            c.raw("value", value_len)
        headers = c.varint("headersCount")
        for h in range(headers):
            with c.group(f"Header[{h}]", "Header"):
                n = c.varint("headerKeyLength")
                c.raw("headerKey", max(n, 0), "utf8")
                n = c.varint("headerValueLength", "-1 = null")
                if n >= 0:
                    c.raw("headerValue", n)
        if c.pos != end:
            raise c.fail(f"record {index} is {length} bytes but its fields take {length + c.pos - end}")
        node.value = f"offsetDelta {delta}"


def _record_batch(c: Cursor, index: int) -> None:
    start = c.pos
    with c.group(f"RecordBatch[{index}]", "v2", about="DefaultRecordBatch.java") as node:
        c.int("baseOffset", "i64", "offset of the first record")
        length = c.int("batchLength", "i32", "bytes after this field to the end of the batch")
        end = start + 12 + length
        if length < RECORD_BATCH_HEADER_SIZE - 12 or end > c.end:
            raise c.fail(f"batchLength {length} is outside 49..{c.end - start - 12}", start + 8)
        c.int("partitionLeaderEpoch", "i32")
        magic = c.int("magic", "i8", "record format version, 2")
        if magic != 2:
            raise c.fail(f"magic {magic}: only RecordBatch v2 (magic 2) is read", c.pos - 1)
        crc = c.int("crc", "u32", "CRC-32C over attributes .. end of batch", show=lambda v: f"0x{v:08x}")
        actual = crc32c.crc32c(bytes(c.data[c.pos:end]))
        c.parent.children[-1].check = "valid" if actual == crc else f"INVALID (computed 0x{actual:08x})"
        attributes = c.int("attributes", "i16", show=_attributes)
        c.int("lastOffsetDelta", "i32")
        c.int("baseTimestamp", "i64", "ms")
        c.int("maxTimestamp", "i64", "ms")
        c.int("producerId", "i64", "-1 when non-idempotent")
        c.int("producerEpoch", "i16")
        c.int("baseSequence", "i32")
        count = c.int("recordsCount", "i32")
        if attributes & 7:
            blob = c.raw("records", end - c.pos, f"compressed ({_COMPRESSION.get(attributes & 7, '?')})",
                         show=lambda b: f"{len(b)} bytes")
            _decompressed(c.parent.children[-1], attributes & 7, blob, count)
        else:
            for i in range(count):
                _record(c, i)
        if c.pos != end:
            raise c.fail(f"{end - c.pos} bytes left in the batch after {count} records")
        node.value = f"{count} record{'s' if count != 1 else ''}"


def _decompressed(node: Node, codec: int, blob: bytes, count: int) -> None:
    """The records inside a compressed run, as children of its node; their offsets count
    from the start of the decompressed bytes (said in the node's note)."""
    try:
        plain = compression.decompress(codec, blob, max_bytes=DECOMPRESSED_LIMIT)
    except KafkaCodecError as e:
        node.about = f"does not decompress: {e}"
        return
    node.about = f"{len(plain)} bytes decompressed; the records below count offsets from their start"
    inner = Cursor(bytes(plain), node, order=">", type_names=KAFKA_TYPE_NAMES)
    try:
        for i in range(count):
            _record(inner, i)
        if inner.remaining:
            raise inner.fail(f"{inner.remaining} decompressed bytes after {count} records")
    except LayoutError as e:
        node.about = f"decompressed records break at their byte {e.offset}: {e.reason}"


def record_set(c: Cursor, size: int) -> str:
    """The record batches of a ``records`` field of ``size`` bytes; returns a summary."""
    end = c.pos + size
    c.need(size, "records")
    outer_end, c.end = c.end, end
    n = 0
    try:
        while c.pos < end:
            left = end - c.pos
            if left < 12 or 12 + c.peek_int("i32", c.pos + 8) > left:
                c.raw("partial", left, "bytes", "a batch cut short by the fetch size; clients skip it",
                      show=lambda b: f"{len(b)} bytes")
                break
            _record_batch(c, n)
            n += 1
    finally:
        c.end = outer_end
    return f"{n} RecordBatch{'es' if n != 1 else ''}" if n else ("empty" if size == 0 else "partial batch")


def _frame(c: Cursor) -> int:
    with c.group("Frame", about="length-delimited framing"):
        size = c.int("size", "i32", "number of bytes that follow")
    if size < 0 or size > c.remaining:
        raise c.fail(f"size {size} does not match the {c.remaining} bytes that follow", c.pos - 4)
    return size


def _body(c: Cursor, root: Node, cls: type, flexible: bool, version: int) -> None:
    _entity(c, cls, cls.__name__, flexible, f"message body, version {version}")
    root.name, root.type = cls.__name__, f"message v{version}"
    if c.pos != c.end:
        raise c.fail(f"{c.end - c.pos} bytes left after the body")


def request(data: bytes) -> Node:
    """A Kafka request: size, request header (v1, or v2 when flexible), body."""
    root = Node("request", "Kafka request")
    c = Cursor(data, root, order=">", type_names=KAFKA_TYPE_NAMES)
    with building(root, c):
        size = _frame(c)
        c.end = c.pos + size
        api_key = c.peek_int("i16")
        version = c.peek_int("i16", c.pos + 2)
        if not messages.has_schema(api_key, version):
            raise c.fail(f"no Kafka schema for api key {api_key} version {version}")
        cls = messages.request_class(api_key, version)
        flexible = bool(cls.__flexible__)
        header = _entity(c, cls.__header_schema__, "RequestHeader", flexible, "common request header", header=True)
        header.type = f"v{2 if flexible else 1}"
        key_line = header.children[0]
        key_line.value = f"{api_key} ({api_key_map.get(api_key, '?')})"
        _body(c, root, cls, flexible, version)
    return root


def response(data: bytes, api_key: int, version: int) -> Node:
    """A Kafka response to ``api_key`` at ``version`` (a response does not name its API)."""
    root = Node("response", "Kafka response")
    c = Cursor(data, root, order=">", type_names=KAFKA_TYPE_NAMES)
    with building(root, c):
        if not messages.has_schema(api_key, version):
            raise c.fail(f"no Kafka schema for api key {api_key} version {version}")
        cls = messages.response_class(api_key, version)
        flexible = bool(cls.__flexible__)
        size = _frame(c)
        c.end = c.pos + size
        header_flexible = flexible and api_key != API_VERSIONS
        with c.group("ResponseHeader", f"v{1 if header_flexible else 0}", about="common response header"):
            c.int("correlation_id", "i32", "echoed from the request")
            if header_flexible:
                c.uvarint("tagged_fields", "number of tagged fields in the header")
        _body(c, root, cls, flexible, version)
    return root


def looks_like_request(data: bytes) -> bool:
    """A size prefix that matches and a known (api key, version)."""
    if len(data) < 12:
        return False
    size = int.from_bytes(data[:4], "big", signed=True)
    api_key = int.from_bytes(data[4:6], "big", signed=True)
    version = int.from_bytes(data[6:8], "big", signed=True)
    return size == len(data) - 4 and messages.has_schema(api_key, version)
