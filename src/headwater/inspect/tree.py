"""The field tree the byte inspector builds, the cursor that builds it, and its text rendering.

A :class:`Node` is one field or group of fields: its ``name``, wire ``type``,
decoded ``value`` (text), absolute byte ``offset`` and ``size`` in the input,
an ``about`` note, and a ``check`` (``"valid"``/``"INVALID"``) for checksums.
A :class:`Cursor` reads little- or big-endian integers, varints and byte runs
from a buffer, appending a leaf per field to the group it is in; a field that
runs past the end (or a value a layout forbids) raises :class:`LayoutError`
with the offset of the first byte that breaks the layout. The nodes built up
to that point stay in the tree, so the partial tree can still be printed.

Rendering (:func:`render`) follows ``shared/spec/kafka-produce-v12.txt``'s
"object tree": one line per node, ``+--`` branches, then the type, ``= value``,
``[0xOFFSET, SIZEB]`` and the note, each in its own column.
"""

from __future__ import annotations

import struct
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

__all__ = ["Node", "Cursor", "LayoutError", "building", "render", "walk"]


@dataclass
class Node:
    """One field (leaf) or group (with ``children``) at ``[offset, offset + size)`` of the input."""

    name: str
    type: str = ""
    value: str = ""
    offset: int = 0
    size: int = 0
    about: str = ""
    check: str = ""
    children: list["Node"] = field(default_factory=list)

    def add(self, node: "Node") -> "Node":
        self.children.append(node)
        return node

    def find(self, path: str) -> "Node":
        """The descendant at ``a/b/c`` (child names); raises KeyError."""
        node = self
        for part in path.split("/"):
            for child in node.children:
                if child.name == part:
                    node = child
                    break
            else:
                raise KeyError(f"{path}: no {part!r} under {node.name!r}")
        return node


class LayoutError(ValueError):
    """The input breaks the layout at byte ``offset`` (absolute), for ``reason``."""

    def __init__(self, offset: int, reason: str):
        super().__init__(f"at byte {offset} (0x{offset:04x}): {reason}")
        self.offset = offset
        self.reason = reason


_INTS = {
    "u8": "B", "u16": "H", "u32": "I", "u64": "Q",
    "i8": "b", "i16": "h", "i32": "i", "i64": "q",
}


class Cursor:
    """Reads fields of ``data`` from ``pos``, adding a leaf for each to the innermost open group.

    ``order`` is ``"<"`` (Iggy: little-endian) or ``">"`` (Kafka: big-endian).
    ``base`` is added to every offset shown (a cursor over a decompressed or
    nested buffer shows offsets in that buffer)."""

    def __init__(self, data: bytes | bytearray | memoryview, root: Node, *, order: str = "<", pos: int = 0,
                 end: int | None = None, base: int = 0, type_names: dict[str, str] | None = None):
        self.data = memoryview(data).cast("B") if not isinstance(data, bytes) else data
        self.pos = pos
        self.end = len(self.data) if end is None else end
        self.order = order
        self.base = base
        self._stack = [root]
        self.type_names = type_names or {}

    # -- structure ---------------------------------------------------------------------------
    @property
    def parent(self) -> Node:
        return self._stack[-1]

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def at(self, pos: int | None = None) -> int:
        """The absolute offset of ``pos`` (default: the cursor)."""
        return self.base + (self.pos if pos is None else pos)

    @contextmanager
    def group(self, name: str, type: str = "", value: str = "", about: str = "") -> Iterator[Node]:
        """A group node spanning every field read inside the ``with`` (also when it fails)."""
        node = self.parent.add(Node(name, type, value, self.at(), 0, about))
        self._stack.append(node)
        start = self.pos
        try:
            yield node
        finally:
            self._stack.pop()
            node.size = self.pos - start

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.end:
            raise LayoutError(
                self.at(), f"{what} needs {n} bytes, {max(self.remaining, 0)} left"
            )

    def fail(self, reason: str, pos: int | None = None) -> "LayoutError":
        return LayoutError(self.at(pos), reason)

    def leaf(self, name: str, type: str, value: str, size: int, about: str = "", check: str = "",
             pos: int | None = None) -> Node:
        start = self.pos if pos is None else pos
        return self.parent.add(Node(name, type, value, self.at(start), size, about, check))

    # -- primitives ------------------------------------------------------------------------
    def peek_int(self, kind: str, pos: int | None = None) -> int:
        fmt = self.order + _INTS[kind]
        at = self.pos if pos is None else pos
        if at + struct.calcsize(fmt) > self.end:
            raise LayoutError(self.at(at), f"{kind} needs {struct.calcsize(fmt)} bytes")
        return struct.unpack_from(fmt, self.data, at)[0]

    def int(self, name: str, kind: str, about: str = "", show=None) -> int:
        """Read a fixed-width integer (``u8`` .. ``i64``; ``u128`` little-endian only)."""
        if kind == "u128":
            self.need(16, name)
            lo, hi = struct.unpack_from("<QQ", self.data, self.pos)
            value = lo | hi << 64
            size = 16
        else:
            size = struct.calcsize(_INTS[kind])
            self.need(size, name)
            value = struct.unpack_from(self.order + _INTS[kind], self.data, self.pos)[0]
        self.leaf(name, self.type_names.get(kind, kind), str(value) if show is None else show(value), size, about)
        self.pos += size
        return value

    def raw(self, name: str, n: int, type: str = "bytes", about: str = "", show=None) -> bytes:
        """``n`` bytes, shown as text when printable, else hex (long runs abbreviated)."""
        self.need(n, name)
        value = bytes(self.data[self.pos:self.pos + n])
        self.leaf(name, type, (show or describe_bytes)(value), n, about)
        self.pos += n
        return value

    def uvarint(self, name: str, about: str = "", show=None) -> int:
        """An unsigned LEB128 varint (Kafka's compact lengths, tag counts)."""
        value, size = self._varint(name, 5)
        self.leaf(name, "uvarint", str(value) if show is None else show(value), size, about)
        self.pos += size
        return value

    def varint(self, name: str, about: str = "", long: bool = False, show=None) -> int:
        """A zigzag signed varint (``varlong`` when ``long``): Kafka record fields."""
        raw, size = self._varint(name, 10 if long else 5)
        value = (raw >> 1) ^ -(raw & 1)
        self.leaf(name, "varlong" if long else "varint", str(value) if show is None else show(value), size, about)
        self.pos += size
        return value

    def _varint(self, name: str, max_bytes: int) -> tuple[int, int]:
        value = shift = 0
        for i in range(max_bytes):
            if self.pos + i >= self.end:
                raise LayoutError(self.at(self.pos + i), f"{name}: varint runs past the end")
            byte = self.data[self.pos + i]
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value, i + 1
        raise LayoutError(self.at(), f"{name}: varint longer than {max_bytes} bytes")


@contextmanager
def building(root: Node, c: "Cursor") -> Iterator[Node]:
    """Fill ``root`` through ``c``: on a :class:`LayoutError` the partial tree rides on the
    error (``error.tree``); ``root.size`` is what was read either way."""
    try:
        yield root
    except LayoutError as e:
        e.tree = root
        raise
    finally:
        root.size = c.pos


def describe_bytes(value: bytes, limit: int = 24) -> str:
    """``"text"`` when printable UTF-8, else hex; longer than ``limit`` bytes: the head and the size."""
    if not value:
        return '""'
    try:
        text = value.decode("utf-8")
        if text.isprintable():
            return repr(text if len(text) <= limit else text[:limit] + "...")
    except UnicodeDecodeError:
        pass
    head = value[:limit].hex(" ")
    return f"0x{head}{' ...' if len(value) > limit else ''}"


def walk(node: Node, depth: int = 0) -> Iterator[tuple[int, Node]]:
    """Every node with its depth, parents before children."""
    yield depth, node
    for child in node.children:
        yield from walk(child, depth + 1)


def _lines(node: Node, prefix: str, child_prefix: str) -> Iterator[tuple[str, Node]]:
    yield prefix + node.name, node
    for i, child in enumerate(node.children):
        last = i == len(node.children) - 1
        yield from _lines(child, child_prefix + "+-- ", child_prefix + ("    " if last else "|   "))


def render(root: Node, *, about_width: int = 80) -> str:
    """The tree as text, one node per line (see the module docstring)."""
    rows = list(_lines(root, "", ""))
    name_w = max(len(label) for label, _ in rows) + 2
    type_w = max(len(n.type) for _, n in rows) + 2
    value_w = max((len(n.value) + 2 for _, n in rows if n.value), default=0) + 2
    out = []
    for label, node in rows:
        value = f"= {node.value}" if node.value else ""
        span = f"[0x{node.offset:04x}, {node.size}B]"
        about = node.about
        if node.check:
            about = f"checksum {node.check}" + (f"; {about}" if about else "")
        if len(about) > about_width:
            about = about[:about_width - 3] + "..."
        line = f"{label:<{name_w}}{node.type:<{type_w}}{value:<{value_w}}{span:<16}{about}"
        out.append(line.rstrip())
    return "\n".join(out) + "\n"
