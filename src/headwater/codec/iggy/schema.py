"""Declarative wire schemas of Iggy command bodies and reply payloads.

Each request and reply is described ONCE, as a :class:`Record`: the dataclass
it decodes to and its :class:`Field`\\ s in wire order, each with a wire type.
The binary decoder and encoder are derived from that description: declaring
a record compiles Python source for its reader, decoder and packer (runs of
fixed-size numbers become one ``struct``; see ``Record.source``), returned
by :meth:`Record.codec`. Other mappings are derived from the same
declaration: the JSON mapping of the HTTP API (``codec/iggy/json.py``
derives each record's JSON shape from its fields, their wire types and the
``json_name`` / ``json`` / ``json_default`` a field carries where Iggy's JSON
differs), the value walker (:func:`iter_fields`) and the byte inspector
(:func:`walk`, :func:`render`). Kafka's JSON message schemas drive kio's
codecs the same way.

Wire types (little-endian; sizes in bytes)
==========================================

==================  =====================================  =======================
type                layout                                 Python value
==================  =====================================  =======================
U8 U16 U32 U64      unsigned integer                       ``int``
U128, F32           u128 (two u64, low first), f32         ``int``, ``float``
FLAG                u8, any nonzero is true                ``bool``
IDENTIFIER          ``[kind u8][len u8][value]``           ``int`` or ``str``
NAME                ``[len u8][utf8]``, 1..255             ``str``
STR8                ``[len u8][utf8]``, 0..255             ``str``
STR32 / BYTES32     ``[len u32][utf8 / bytes]``            ``str`` / ``bytes``
OPTIONS             ``[len u32][options TLV]``, raw        ``bytes``
REST                every byte left (options to end)       ``bytes``
BATCH               every byte left, not copied            ``memoryview``
CONSUMER            ``[kind u8][Identifier]``              :class:`Consumer`
OPTIONAL_PARTITION  ``[flag u8][partition_id u32]``        ``int | None``
PARTITIONING        ``[kind u8][len u8][value]``           :class:`Partitioning`
POLLING_STRATEGY    ``[kind u8][value u64]``               :class:`PollingStrategy`
PERMISSIONS         the has-next linked block              :class:`Permissions`
Enum(t, E)          ``t`` checked against the enum ``E``   ``E``
Optional(t)         ``[flag u8 0/1]`` then ``t`` if 1      value or ``None``
Sized(t)            ``[len u32][t, exactly len bytes]``    as ``t``
NoneIfEmpty(t)      ``t``; an empty value reads ``None``   value or ``None``
ListOf(t, count)    ``count``: U8/U32 prefix, TO_END, or   ``tuple``
                    the name of an earlier count field
Record              its fields, back to back               the dataclass
==================  =====================================  =======================

A field whose ``count_of`` names a list field is on the wire only: its value
is ``len()`` of that list when encoding and it is not a dataclass attribute.

Errors: decoders raise :class:`~headwater.codec.errors.InvalidFormat` (or a
subclass such as :class:`~.errors.InvalidIdentifier`) naming the field and
carrying the absolute byte offset; a request record that does not end with a
REST field rejects trailing bytes, naming the command (``get_stream``).
Encoders raise ``ValueError`` or ``struct.error`` on values the wire cannot
carry.

Adding a command
================

1. Write its request dataclass (and reply dataclasses) in the family module
   under ``commands/``.
2. Declare ``NAME = request(Command.X, TheClass, [Field(...), ...], reply=...)``
   with the fields in wire order; give a field ``json_name=`` / ``json=`` /
   ``json_default=`` when the HTTP API spells, encodes or defaults it
   otherwise than its wire type implies (``codec/iggy/json.py`` derives the
   JSON mapping from these).
3. ``decode_x, encode_x = NAME.codec()``; ``COMMANDS`` picks the declaration
   up from :data:`REQUESTS`. Hypothesis round-trips go in
   ``tests/unit/codec/iggy/iggy_strategies.py``.
"""

from __future__ import annotations

import dataclasses
import linecache
import re
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Callable, Iterator

from ..errors import InvalidFormat
from . import primitives as P
from .codes import Command
from .primitives import Reader

__all__ = [
    "WireType",
    "Int",
    "U8",
    "U16",
    "U32",
    "U64",
    "U128",
    "F32",
    "FLAG",
    "IDENTIFIER",
    "NAME",
    "STR8",
    "STR32",
    "BYTES32",
    "OPTIONS",
    "REST",
    "BATCH",
    "CONSUMER",
    "OPTIONAL_PARTITION",
    "PARTITIONING",
    "POLLING_STRATEGY",
    "PERMISSIONS",
    "Enum",
    "Optional",
    "Sized",
    "NoneIfEmpty",
    "TO_END",
    "ListOf",
    "Field",
    "Record",
    "details",
    "payload_codec",
    "request",
    "REQUESTS",
    "RECORDS",
    "iter_fields",
    "Node",
    "walk",
    "render",
]

Buffer = bytes | bytearray | memoryview


class WireType:
    """A field's binary encoding.

    ``read(r, what)`` reads one value from a :class:`Reader` (``what`` names
    the field in errors); ``pack(value, what)`` returns its bytes. ``fmt`` is
    the ``struct`` code of a fixed-size number (runs of those are read and
    written with one ``struct``), ``min_size`` the fewest bytes a value takes,
    ``label`` the name used in layouts and by the inspector, ``json`` the
    default JSON encoding: ``int``, ``float``, ``bool``, ``string``,
    ``identifier``, ``base64``, ``options``, ``batch``, ``object``, ``array``.

    ``gen_read`` / ``gen_pack`` return the Python expression the record
    compiler inlines for this type (by default a call of ``read`` / ``pack``).
    """

    label = "?"
    fmt: str | None = None
    min_size = 0
    json = "string"
    payload_decoder: Callable[[Buffer], Any] | None = None
    """The decoder of this type as a whole reply payload, once one is derived."""

    def read(self, r: Reader, what: str) -> Any:
        raise NotImplementedError

    def pack(self, value: Any, what: str) -> bytes:
        raise NotImplementedError

    def gen_read(self, g: _Gen, ind: str, what: str) -> str:
        return f"{g.ref(self.read)}(r, {what!r})"

    def gen_pack(self, g: _Gen, expr: str, what: str) -> str:
        return f"{g.ref(self.pack)}({expr}, {what!r})"

    def __repr__(self) -> str:
        return self.label


class Int(WireType):
    """A fixed-size number; ``fmt`` is its ``struct`` code."""

    json = "int"

    def __init__(self, label: str, fmt: str, reader: str):
        self.label, self.fmt = label, fmt
        self.struct = struct.Struct("<" + fmt)
        self.min_size = self.struct.size
        self.read = getattr(Reader, reader)  # type: ignore[method-assign]
        if fmt == "f":
            self.json = "float"

    def pack(self, value: Any, what: str) -> bytes:
        return self.struct.pack(value)


class _U128(WireType):
    label, min_size, json = "u128", 16, "int"

    def read(self, r: Reader, what: str) -> int:
        return r.u128(what)

    def pack(self, value: int, what: str) -> bytes:
        return struct.pack("<QQ", value & 0xFFFFFFFFFFFFFFFF, value >> 64)


U8 = Int("u8", "B", "u8")
U16 = Int("u16", "H", "u16")
U32 = Int("u32", "I", "u32")
U64 = Int("u64", "Q", "u64")
F32 = Int("f32", "f", "f32")
U128 = _U128()


class _Flag(WireType):
    label, min_size, json = "flag u8", 1, "bool"

    def read(self, r: Reader, what: str) -> bool:
        return r.flag(what)

    def pack(self, value: Any, what: str) -> bytes:
        return b"\x01" if value else b"\x00"

    def gen_read(self, g: _Gen, ind: str, what: str) -> str:
        return f"r.flag({what!r})"

    def gen_pack(self, g: _Gen, expr: str, what: str) -> str:
        return f'(b"\\x01" if {expr} else b"\\x00")'


FLAG = _Flag()


class _Simple(WireType):
    """A type read by ``read_fn(r, what)`` and written by ``pack_fn(value[, what])``."""

    def __init__(self, label, min_size, json, read_fn, pack_fn, pack_what=True):
        self.label, self.min_size, self.json = label, min_size, json
        self.read_fn, self.pack_fn, self.pack_what = read_fn, pack_fn, pack_what

    def read(self, r: Reader, what: str) -> Any:
        return self.read_fn(r, what)

    def pack(self, value: Any, what: str) -> bytes:
        return self.pack_fn(value, what) if self.pack_what else self.pack_fn(value)

    def gen_read(self, g: _Gen, ind: str, what: str) -> str:
        return f"{g.ref(self.read_fn)}(r, {what!r})"

    def gen_pack(self, g: _Gen, expr: str, what: str) -> str:
        if self.pack_what:
            return f"{g.ref(self.pack_fn)}({expr}, {what!r})"
        return f"{g.ref(self.pack_fn)}({expr})"


def _read_options(r: Reader, what: str) -> bytes:
    return r.raw(r.u32(f"{what} length"), what)


def _read_rest(r: Reader, what: str) -> bytes:
    return bytes(r.rest())


def _read_view(r: Reader, what: str) -> memoryview:
    return r.rest()


IDENTIFIER = _Simple(
    "Identifier", 3, "identifier", P.decode_identifier, P.encode_identifier
)
NAME = _Simple("Name", 2, "string", Reader.name, P.encode_name)
STR8 = _Simple("str u8-len", 1, "string", Reader.str_u8, P.encode_str_u8)
STR32 = _Simple("str u32-len", 4, "string", Reader.str_u32, P.encode_str_u32)
BYTES32 = _Simple("bytes u32-len", 4, "base64", Reader.bytes_u32, P.encode_bytes_u32, False)
OPTIONS = _Simple("options u32-len", 4, "options", _read_options, P.encode_bytes_u32, False)
REST = _Simple("options to end", 0, "options", _read_rest, bytes, False)
BATCH = _Simple("batch (256-byte header + frames)", 256, "batch", _read_view, bytes, False)
"""The rest of the body as a ``memoryview`` (no copy): an Iggy batch."""
CONSUMER = _Simple("Consumer", 4, "object", P.decode_consumer, P.encode_consumer, False)
OPTIONAL_PARTITION = _Simple(
    "flag u8 + partition_id u32",
    5,
    "int",
    P.decode_optional_partition_id,
    P.encode_optional_partition_id,
    False,
)
PARTITIONING = _Simple(
    "Partitioning", 2, "object", P.decode_partitioning, P.encode_partitioning, False
)
POLLING_STRATEGY = _Simple(
    "PollingStrategy", 9, "object", P.decode_polling_strategy, P.encode_polling_strategy, False
)
PERMISSIONS = _Simple(
    "Permissions", 11, "object", P.decode_permissions, P.encode_permissions, False
)


class Enum(WireType):
    """``inner`` (a one-byte number) whose value must be a member of ``enum``.

    Raises :class:`InvalidFormat` naming the field at the byte's offset.
    """

    def __init__(self, inner: Int, enum: type[IntEnum]):
        self.inner, self.enum = inner, enum
        self.label = f"{inner.label} {enum.__name__}"
        self.min_size = inner.min_size
        self.json = "int"
        self._members = {int(m): m for m in enum}

    def read(self, r: Reader, what: str) -> Any:
        start = r.pos
        value = self.inner.read(r, what)
        member = self._members.get(value)
        if member is None:
            raise InvalidFormat(f"{what}: unknown {self.enum.__name__} {value}", offset=r.base + start)
        return member

    def pack(self, value: Any, what: str) -> bytes:
        return self.inner.pack(int(value), what)


class Optional(WireType):
    """``[flag u8][inner if flag]``; ``None`` is flag 0.

    ``flag``: the flag's name in errors (default ``has_<field>``). ``strict``:
    a flag other than 0 or 1 raises :class:`InvalidFormat` (else any nonzero
    means present). ``padding``: zero bytes that follow a 0 flag (nonzero
    padding raises :class:`InvalidFormat`).
    """

    def __init__(self, inner: WireType, *, flag: str = "", strict: bool = True, padding: int = 0):
        self.inner, self.flag, self.strict, self.padding = inner, flag, strict, padding
        self.label = f"Optional[{inner.label}]"
        self.min_size = 1 + padding
        self.json = inner.json
        self._absent = bytes(1 + padding)

    def read(self, r: Reader, what: str) -> Any:
        flag_what = self.flag or f"has_{what}"
        start = r.pos
        flag = r.u8(flag_what)
        if flag == 0:
            if self.padding and any(r.view(self.padding, f"{what} padding")):
                raise InvalidFormat(
                    f"{what}: nonzero padding after {flag_what} = 0", offset=r.base + start
                )
            return None
        if flag > 1 and self.strict:
            raise InvalidFormat(
                f"{flag_what}: flag must be 0 or 1, got {flag}", offset=r.base + start
            )
        return self.inner.read(r, what)

    def pack(self, value: Any, what: str) -> bytes:
        if value is None:
            return self._absent
        return b"\x01" + self.inner.pack(value, what)


class Sized(WireType):
    """``[len u32][inner]``: ``inner`` must take exactly ``len`` bytes (else :class:`InvalidFormat`)."""

    def __init__(self, inner: WireType):
        self.inner = inner
        self.label = f"u32-len {inner.label}"
        self.min_size = 4 + inner.min_size
        self.json = inner.json

    def read(self, r: Reader, what: str) -> Any:
        length = r.u32(f"{what}_len")
        start = r.pos
        sub = Reader(r.view(length, what), base=r.base + start)
        value = self.inner.read(sub, what)
        sub.expect_end(f"{what} ({what}_len larger than the block)")
        return value

    def pack(self, value: Any, what: str) -> bytes:
        block = self.inner.pack(value, what)
        return P._U32.pack(len(block)) + block


class NoneIfEmpty(WireType):
    """``inner`` (a string), read as ``None`` when empty; ``None`` is written empty."""

    def __init__(self, inner: WireType):
        self.inner, self.label, self.min_size, self.json = inner, inner.label, inner.min_size, inner.json

    def read(self, r: Reader, what: str) -> Any:
        return self.inner.read(r, what) or None

    def pack(self, value: Any, what: str) -> bytes:
        return self.inner.pack(value or "", what)


TO_END = "to end"
"""``ListOf`` count: items back to back until the buffer ends (no count on the wire)."""


def _too_many(r: Reader, count: int, start: int, what: str) -> None:
    raise InvalidFormat(
        f"{what}: {count} items cannot fit in {r.remaining} bytes", offset=r.base + start
    )


class ListOf(WireType):
    """Repeated ``item``\\ s, read as a ``tuple``.

    ``count`` is ``U8`` or ``U32`` (a count prefix), :data:`TO_END`, or the
    name of an earlier field of the same record holding the count (that field
    declares ``count_of``). A count whose items cannot fit in the bytes left
    raises :class:`InvalidFormat` before anything is read.
    """

    json = "array"

    def __init__(self, item: WireType, count: Int | str = U32):
        self.item, self.count = item, count
        prefix = count.label if isinstance(count, Int) else ""
        self.label = f"[{prefix + ' count' if prefix else count}] {item.label}*"
        self.min_size = count.min_size if isinstance(count, Int) else 0
        self.by_field = isinstance(count, str) and count != TO_END
        """The count is an earlier field of the record."""

    # -- interpreted (walker, and the generic path)

    def read_items(self, r: Reader, count: int, what: str, start: int | None = None) -> tuple:
        size = self.item.min_size
        if count * size > r.remaining:
            _too_many(r, count, r.pos if start is None else start, what)
        if self.item.fmt is not None:
            values = struct.unpack_from(f"<{count}{self.item.fmt}", r.view(count * size, what))
            return values
        read = self.item.read
        return tuple([read(r, what) for _ in range(count)])

    def read(self, r: Reader, what: str) -> tuple:
        if self.count == TO_END:
            read = self.item.read
            out = []
            while not r.at_end:
                out.append(read(r, what))
            return tuple(out)
        assert isinstance(self.count, Int), "a count field is read by its record"
        start = r.pos
        return self.read_items(r, self.count.read(r, f"{what} count"), what, start)

    def pack(self, value: Any, what: str) -> bytes:
        head = b""
        if isinstance(self.count, Int):
            if self.count is U8 and len(value) > 255:
                raise ValueError(f"{what}: at most 255 items, got {len(value)}")
            head = self.count.pack(len(value), what)
        if self.item.fmt is not None:
            return head + struct.pack(f"<{len(value)}{self.item.fmt}", *value)
        pack = self.item.pack
        return head + b"".join([pack(item, what) for item in value])

    # -- compiled

    def gen_read(self, g: _Gen, ind: str, what: str, count: str | None = None) -> str:
        start = g.var()
        g.emit(f"{ind}{start} = r.pos")
        if self.count == TO_END:
            acc = g.var()
            g.emit(f"{ind}{acc} = []")
            g.emit(f"{ind}while r.pos < r._end:")
            g.emit(f"{ind}    {acc}.append({self._item_read(g, what)})")
            return f"tuple({acc})"
        if count is None:  # a count prefix
            count = g.var()
            g.emit(f"{ind}{count} = {self.count.gen_read(g, ind, what + ' count')}")  # type: ignore[union-attr]
        size = self.item.min_size
        if size:
            g.emit(f"{ind}if {count} * {size} > r._end - r.pos:")
            g.emit(f"{ind}    _too_many(r, {count}, {start}, {what!r})")
        if self.item.fmt is not None:
            out = g.var()
            g.emit(f"{ind}{out} = _unpack_from('<%d{self.item.fmt}' % {count}, r._buf, r.pos)")
            g.emit(f"{ind}r.pos += {count} * {size}")
            return out
        return f"tuple([{self._item_read(g, what)} for _ in range({count})])"

    def _item_read(self, g: _Gen, what: str) -> str:
        if isinstance(self.item, ListOf):
            return WireType.gen_read(self.item, g, "", what)
        return self.item.gen_read(g, "", what)

    def gen_pack(self, g: _Gen, expr: str, what: str) -> str:
        if self.count is U8:  # checked: at most 255 items
            return WireType.gen_pack(self, g, expr, what)
        parts = []
        if isinstance(self.count, Int):
            parts.append(f"{g.ref(self.count.struct)}.pack(len({expr}))")
        if self.item.fmt is not None:
            parts.append(f"_pack('<%d{self.item.fmt}' % len({expr}), *{expr})")
        else:
            x = g.var()
            parts.append(f'b"".join([{self.item.gen_pack(g, x, what)} for {x} in {expr}])')
        return "(" + " + ".join(parts) + ")"


# ---------------------------------------------------------------- fields and records


class _Gen:
    """Collects generated source and the objects it refers to."""

    def __init__(self) -> None:
        self.ns: dict[str, Any] = {
            "Reader": Reader,
            "InvalidFormat": InvalidFormat,
            "_short": _short,
            "_too_many": _too_many,
            "_unpack_from": struct.unpack_from,
            "_pack": struct.pack,
        }
        self.lines: list[str] = []
        self._ids: dict[int, str] = {}
        self._n = 0

    def ref(self, obj: Any) -> str:
        name = self._ids.get(id(obj))
        if name is None:
            name = self._ids[id(obj)] = f"_r{len(self._ids)}"
            self.ns[name] = obj
        return name

    def var(self) -> str:
        self._n += 1
        return f"v{self._n}"

    def emit(self, line: str) -> None:
        self.lines.append(line)

    def build(self, filename: str) -> dict[str, Any]:
        source = "\n".join(self.lines) + "\n"
        exec(compile(source, filename, "exec"), self.ns)  # noqa: S102  (our own declarations)
        # tracebacks through generated code show its lines
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        self.ns["__source__"] = source
        return self.ns


def _short(r: Reader, fields: tuple) -> None:
    """A run of fixed-size fields is short: read them one by one so the error names the field."""
    for read, name in fields:
        read(r, name)
    raise InvalidFormat("short run of fixed fields", offset=r.base + r.pos)  # unreachable


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a record, in wire order.

    ``name``: the dataclass attribute (and the name errors use).
    ``type``: its :class:`WireType`. ``json_name`` / ``json``: how the HTTP
    API spells and encodes it (default: ``name`` and ``type.json``; an
    encoding named here is one of ``codec.iggy.json.ENCODINGS``, and
    ``"skip"`` keeps the field out of the JSON). ``json_default``: the value
    of a request field its JSON may leave out (default: the dataclass
    default, if any; else the field is required; ``...``: not given).
    ``count_of``: this field is the length of that (later) list field; it is
    on the wire only. ``computed``: likewise on the wire only, its value is
    ``computed(record)`` (e.g. a byte length). ``doc``: units and meaning,
    for docs and inspectors.
    """

    name: str
    type: WireType
    json_name: str | None = None
    json: str | None = None
    count_of: str | None = None
    doc: str = ""
    computed: Callable[[Any], Any] | None = None
    json_default: Any = ...

    @property
    def wire_only(self) -> bool:
        """Not a dataclass attribute: derived from the others when encoding."""
        return self.count_of is not None or self.computed is not None

    @property
    def json_key(self) -> str:
        return self.json_name or self.name

    @property
    def json_encoding(self) -> str:
        return self.json or self.type.json


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class Record(WireType):
    """A dataclass laid out as its :class:`Field`\\ s back to back.

    Declaring one compiles its codec: ``read(r)`` (from a :class:`Reader`,
    no end check), ``pack(value)`` (bytes), ``decode(body)`` and
    ``encode(value)`` (a whole body or payload). The generated Python is kept
    in ``source``. A whole body with bytes left after the last field raises
    :class:`InvalidFormat` naming ``what`` (default: the class name in snake
    case), unless the last field is REST. ``command``, ``reply``,
    ``empty_reply`` are set by :func:`request`.
    """

    json = "object"

    def __init__(
        self,
        cls: type,
        fields: list[Field] | tuple[Field, ...],
        *,
        what: str | None = None,
        label: str | None = None,
    ):
        self.cls = cls
        self.fields = tuple(fields)
        self.what = what or _snake(cls.__name__)
        self.label = label or cls.__name__
        self.command: Command | None = None
        self.reply: WireType | None = None
        self.empty_reply = ""
        self.hand_codec: tuple[Callable[[Buffer], Any], Callable[[Any], bytes]] | None = None
        self.min_size = sum(f.type.min_size for f in self.fields)
        self.strict = not (self.fields and self.fields[-1].type in (REST, BATCH))
        self._check()
        self._compile()
        RECORDS.setdefault(cls, self)

    def _check(self) -> None:
        attrs = [f.name for f in dataclasses.fields(self.cls)]
        declared = [f.name for f in self.fields if not f.wire_only]
        if sorted(attrs) != sorted(declared):
            raise TypeError(f"{self.cls.__name__}: fields {declared} do not match {attrs}")
        seen: set[str] = set()
        for i, f in enumerate(self.fields):
            if f.count_of is not None and f.count_of not in {x.name for x in self.fields}:
                raise TypeError(f"{self.cls.__name__}.{f.name}: count_of unknown {f.count_of}")
            if isinstance(f.type, ListOf) and f.type.by_field and f.type.count not in seen:
                raise TypeError(f"{self.cls.__name__}.{f.name}: count {f.type.count} not before it")
            if f.type in (REST, BATCH) and i != len(self.fields) - 1:
                raise TypeError(f"{self.cls.__name__}.{f.name}: {f.type.label} must be last")
            seen.add(f.name)

    # -- the binary codec, compiled from the fields

    def _gen_reads(self, g: _Gen, ind: str) -> str:
        """Emit the reads of every field; return the constructor call."""
        names: dict[str, str] = {}
        run: list[Field] = []

        def flush() -> None:
            if not run:
                return
            layout = struct.Struct("<" + "".join(f.type.fmt for f in run))  # type: ignore[misc]
            out = [g.var() for _ in run]
            short = g.ref(tuple((f.type.read, f.name) for f in run))
            g.emit(f"{ind}p = r.pos")
            g.emit(f"{ind}if r._end - p < {layout.size}:")
            g.emit(f"{ind}    _short(r, {short})")
            g.emit(f"{ind}{', '.join(out)}, = {g.ref(layout)}.unpack_from(r._buf, p)")
            g.emit(f"{ind}r.pos = p + {layout.size}")
            names.update(zip([f.name for f in run], out))
            run.clear()

        for f in self.fields:
            if f.type.fmt is not None:
                run.append(f)
                continue
            flush()
            t = f.type
            if isinstance(t, ListOf) and t.by_field:
                expr = t.gen_read(g, ind, f.name, names[t.count])  # type: ignore[index]
            else:
                expr = t.gen_read(g, ind, f.name)
            names[f.name] = g.var()
            g.emit(f"{ind}{names[f.name]} = {expr}")
        flush()
        args = ", ".join(names[f.name] for f in dataclasses.fields(self.cls))
        return f"{g.ref(self.cls)}({args})"

    def _gen_pack(self, g: _Gen) -> str:
        parts: list[str] = []
        run: list[str] = []
        fmt: list[str] = []

        def flush() -> None:
            if run:
                parts.append(f"{g.ref(struct.Struct('<' + ''.join(fmt)))}.pack({', '.join(run)})")
                run.clear()
                fmt.clear()

        for f in self.fields:
            if f.computed is not None:
                get = f"{g.ref(f.computed)}(v)"
            elif f.count_of is not None:
                get = f"len(v.{f.count_of})"
            else:
                get = f"v.{f.name}"
            if f.type.fmt is not None:
                run.append(get)
                fmt.append(f.type.fmt)
            else:
                flush()
                parts.append(f.type.gen_pack(g, get, f.name))
        flush()
        if len(parts) <= 3:
            return " + ".join(parts)
        return 'b"".join((' + ", ".join(parts) + ",))"

    def _compile(self) -> None:
        g = _Gen()
        if self.fields:
            g.emit("def read(r, what=None):")
            g.emit(f"    return {self._gen_reads(g, '    ')}")
            g.emit("def decode(body):")
            g.emit("    r = Reader(body)")
            ctor = self._gen_reads(g, "    ")
            if self.strict:
                g.emit(f"    value = {ctor}")
                g.emit(f"    r.expect_end({self.what!r})")
                g.emit("    return value")
            else:
                g.emit(f"    return {ctor}")
            g.emit("def pack(v, what=None):")
            g.emit(f"    return {self._gen_pack(g)}")
        else:
            g.emit("def read(r, what=None):")
            g.emit(f"    return {g.ref(self.cls)}()")
            g.emit("def decode(body):")
            g.emit("    if len(body):")
            g.emit(
                f"        raise InvalidFormat(f'{self.what}: payload must be empty, "
                "got {len(body)} bytes', offset=0)"
            )
            g.emit(f"    return {g.ref(self.cls)}()")
            g.emit("def pack(v, what=None):")
            g.emit("    return b''")
        ns = g.build(f"<schema {self.cls.__name__}>")
        self.source: str = ns["__source__"]
        """The generated Python (read, decode, pack), for reading and debugging."""
        self.read = ns["read"]  # type: ignore[method-assign]
        self.pack = ns["pack"]  # type: ignore[method-assign]
        self.decode: Callable[[Buffer], Any] = ns["decode"]
        self.encode: Callable[[Any], bytes] = ns["pack"]

    def gen_read(self, g: _Gen, ind: str, what: str) -> str:
        return f"{g.ref(self.read)}(r)"

    def gen_pack(self, g: _Gen, expr: str, what: str) -> str:
        return f"{g.ref(self.pack)}({expr})"

    def layout(self) -> str:
        """The wire layout as the docs write it: ``[stream_id Identifier][name Name]...``."""
        if not self.fields:
            return "empty"
        return "".join(f"[{f.name} {f.type.label}]" for f in self.fields)

    def codec(self) -> tuple[Callable[[Buffer], Any], Callable[[Any], bytes]]:
        """``(decode_<what>, encode_<what>)``: module-level functions with docstrings.

        A record declared with a hand-written codec (a hot path) returns that.
        """
        if self.hand_codec is not None:
            return self.hand_codec
        decode, encode = self.decode, self.encode
        self.payload_decoder = decode
        decode.__name__ = decode.__qualname__ = f"decode_{self.what.replace(' ', '_')}"
        encode.__name__ = encode.__qualname__ = f"encode_{self.what.replace(' ', '_')}"
        decode.__doc__ = (
            f"Decode ``{self.layout()}`` into :class:`{self.cls.__name__}`; "
            "raises :class:`InvalidFormat` (or a subclass) naming the field and offset."
        )
        encode.__doc__ = (
            f"Encode :class:`{self.cls.__name__}` as ``{self.layout()}``; "
            "raises ``ValueError`` / ``struct.error`` on values the wire cannot carry."
        )
        return decode, encode


def details(info: Record, cls: type, items: str, item: WireType, **kw: Any) -> Record:
    """``info``'s fields followed by a list of ``item``: the "details" reply shape.

    ``info``'s ``<items>_count`` field becomes the count of the new list
    field ``items`` (on the wire only); e.g. StreamDetails is StreamInfo then
    ``topics_count`` TopicInfo records.
    """
    count = f"{items}_count"
    fields = [dataclasses.replace(f, count_of=items) if f.name == count else f for f in info.fields]
    return Record(cls, [*fields, Field(items, ListOf(item, count))], **kw)


def payload_codec(
    t: WireType, what: str, *, empty: Any = ...
) -> tuple[Callable[[Buffer], Any], Callable[[Any], bytes]]:
    """``(decode, encode)`` of a reply payload that is not a record (a list).

    The decoder reads ``t`` and rejects trailing bytes naming ``what``;
    ``empty``: the value an empty payload decodes to without reading.
    """
    g = _Gen()
    g.emit("def decode(payload):")
    if empty is not ...:
        g.emit(f"    if not len(payload): return {g.ref(empty)}")
    g.emit("    r = Reader(payload)")
    expr = t.gen_read(g, "    ", what)
    g.emit(f"    value = {expr}")
    g.emit(f"    r.expect_end({what!r})")
    g.emit("    return value")
    g.emit("def encode(v):")
    g.emit(f"    return {t.gen_pack(g, 'v', what)}")
    ns = g.build(f"<schema payload {what}>")
    decode, encode = ns["decode"], ns["encode"]
    t.payload_decoder = decode
    decode.__doc__ = f"Decode ``{t.label}``; raises :class:`InvalidFormat`."
    encode.__doc__ = f"Encode ``{t.label}``."
    return decode, encode


REQUESTS: dict[Command, Record] = {}
"""Every request declaration, by command code (filled by :func:`request`)."""

RECORDS: dict[type, Record] = {}
"""The declaration of each dataclass (its first), for :func:`iter_fields`."""


def request(
    command: Command,
    cls: type,
    fields: list[Field] | tuple[Field, ...] = (),
    *,
    reply: WireType | None = None,
    empty_reply: str = "",
    codec: tuple[Callable[[Buffer], Any], Callable[[Any], bytes]] | None = None,
) -> Record:
    """Declare a command's request body (and its reply payload type) and register it.

    ``reply``: the payload a success carries (``None``: empty). ``empty_reply``:
    what an empty payload means for a command that also has a typed one.
    ``codec``: a hand-written ``(decode, encode)`` pair kept for a hot path or
    checks the declaration cannot say; the fields still drive the walkers.
    """
    record = Record(cls, fields)
    record.command, record.reply, record.empty_reply = command, reply, empty_reply
    record.hand_codec = codec
    if command in REQUESTS:
        raise TypeError(f"{command!r} declared twice")
    REQUESTS[command] = record
    return record


# ---------------------------------------------------------------- walkers


def iter_fields(value: Any, record: Record | None = None) -> Iterator[tuple[Field, Any]]:
    """``(Field, value)`` for each declared field of a decoded dataclass, in wire order.

    Count fields (``count_of``) yield the length of their list. Raises
    ``KeyError`` for a type without a declaration. This is what a JSON
    mapping walks: ``{f.json_key: convert(f.json_encoding, v) for f, v in iter_fields(x)}``.
    """
    record = record or RECORDS[type(value)]
    for f in record.fields:
        if f.computed is not None:
            yield f, f.computed(value)
        elif f.count_of is not None:
            yield f, len(getattr(value, f.count_of))
        else:
            yield f, getattr(value, f.name)


@dataclass(frozen=True, slots=True)
class Node:
    """One field found by :func:`walk`: where it sits in the body and what it holds.

    ``path``: dotted, lists indexed (``topics[1].name``); ``offset`` and
    ``size`` in bytes from the start of the body; ``depth``: nesting level.
    """

    path: str
    type: WireType
    offset: int
    size: int
    value: Any
    depth: int


def walk(t: WireType, body: Buffer) -> list[Node]:
    """Decode ``body`` as ``t`` and list every field, each parent before its parts.

    For a byte inspector: each :class:`Node` has the field's path, declared
    type, offset, size and value; a list's count prefix is a node
    ``<list>.count``. Raises what the decoder raises
    (:class:`InvalidFormat`...), except that trailing bytes are listed as a
    last node ``<trailing>`` rather than rejected. Interpreted, not compiled:
    for tools, not for serving.
    """
    r = Reader(body)
    nodes: list[Node] = []
    _walk(t, r, "", 0, nodes, "body", None)
    if not r.at_end:
        start = r.pos
        nodes.append(Node("<trailing>", REST, start, r.remaining, bytes(r.rest()), 0))
    return nodes


def _walk(
    t: WireType, r: Reader, path: str, depth: int, nodes: list[Node], what: str, count: int | None
) -> Any:
    start = r.pos
    at = len(nodes)
    if isinstance(t, Record):
        vals: dict[str, Any] = {}
        for f in t.fields:
            c = vals[f.type.count] if isinstance(f.type, ListOf) and f.type.by_field else None  # type: ignore[index]
            vals[f.name] = _walk(f.type, r, f"{path}.{f.name}", depth + 1, nodes, f.name, c)
        value = t.cls(**{f.name: vals[f.name] for f in t.fields if not f.wire_only})
    elif isinstance(t, ListOf):
        items: list[Any] = []
        if t.count == TO_END:
            while not r.at_end:
                items.append(_walk(t.item, r, f"{path}[{len(items)}]", depth + 1, nodes, what, None))
        else:
            if count is None:
                count = t.count.read(r, f"{what} count")  # type: ignore[union-attr]
                nodes.append(Node(f"{path}.count".lstrip("."), t.count, start, r.pos - start, count, depth + 1))  # type: ignore[arg-type]
            if count * t.item.min_size > r.remaining:
                _too_many(r, count, start, what)
            for i in range(count):
                items.append(_walk(t.item, r, f"{path}[{i}]", depth + 1, nodes, what, None))
        value = tuple(items)
    else:
        value = t.read(r, what)
    nodes.insert(at, Node(path.lstrip(".") or "<body>", t, start, r.pos - start, value, depth))
    return value


def render(nodes: list[Node]) -> str:
    """The nodes of :func:`walk` as a text tree: ``offset size  path  type  value`` per line."""
    lines = []
    for n in nodes:
        leaf = not isinstance(n.type, (Record, ListOf))
        value = f"  {_short_repr(n.value)}" if leaf else ""
        name = n.path.rsplit(".", 1)[-1] if n.depth else n.path
        lines.append(f"{n.offset:6} {n.size:6}  {'  ' * n.depth}{name}  {n.type.label}{value}")
    return "\n".join(lines)


def _short_repr(value: Any, limit: int = 60) -> str:
    text = repr(bytes(value) if isinstance(value, memoryview) else value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
