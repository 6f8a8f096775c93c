"""Shared encodings of Iggy command payloads, and a bounds-checked byte reader.

Source: ``encodings.mdx`` (apache/iggy-website, binary protocol 0.11.0) and the
crate ``core/binary_protocol/src/primitives/`` (``identifier.rs``,
``consumer.rs``, ``partitioning.rs``, ``polling_strategy.rs``,
``permissions.rs``). All integers little-endian.

=======================  ==================================================
Name                     ``[len u8][utf8, 1..255 bytes]``
Identifier               ``[kind u8][len u8][value]``: kind 1 numeric (len 4,
                         u32), kind 2 string (len 1..255, utf8)
Consumer                 ``[kind u8][Identifier]``: 1 consumer, 2 group
Optional partition id    ``[flag u8][partition_id u32]``: flag 1 set, 0 none
Partitioning             ``[kind u8][len u8][value]``: 1 balanced (len 0),
                         2 partition id (len 4, u32), 3 messages key (1..255)
Polling strategy         ``[kind u8][value u64]`` (9 bytes), kinds 1..5
Permissions              see :func:`decode_permissions`
=======================  ==================================================

In Python an Identifier is ``int`` (numeric) or ``str`` (string).

Decoders raise :class:`~headwater.codec.errors.InvalidFormat` (or a subclass)
carrying the absolute byte offset that failed; encoders raise ``ValueError``
(or ``struct.error``) on values the wire cannot carry.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Union

from ..errors import InvalidFormat
from .codes import ConsumerKind, PartitioningKind, PollingKind
from .errors import InvalidIdentifier

__all__ = [
    "Reader",
    "Identifier",
    "MAX_NAME_LENGTH",
    "decode_identifier",
    "encode_identifier",
    "identifier_size",
    "encode_name",
    "encode_str_u8",
    "encode_str_u32",
    "encode_bytes_u32",
    "Consumer",
    "decode_consumer",
    "encode_consumer",
    "decode_optional_partition_id",
    "encode_optional_partition_id",
    "Partitioning",
    "decode_partitioning",
    "encode_partitioning",
    "PollingStrategy",
    "decode_polling_strategy",
    "encode_polling_strategy",
    "GlobalPermissions",
    "TopicPermissions",
    "StreamPermissions",
    "Permissions",
    "decode_permissions",
    "encode_permissions",
]

MAX_NAME_LENGTH = 255

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_F32 = struct.Struct("<f")
_U128 = struct.Struct("<QQ")
_NUMERIC_ID = struct.Struct("<BBI")
_FLAG_U32 = struct.Struct("<BI")
_POLLING = struct.Struct("<BQ")

Identifier = Union[int, str]
"""A stream, topic, user or group identifier: ``int`` (numeric u32) or ``str`` (1..255 utf8 bytes)."""


class Reader:
    """Sequential little-endian reader over a buffer, with offset tracking.

    Every read checks bounds first and raises :class:`InvalidFormat` with the
    absolute offset (``base + position``) and the field name when the buffer
    is too short or a string is not UTF-8. Slices are ``memoryview``s into the
    original buffer (no copy) unless documented otherwise.
    """

    __slots__ = ("_buf", "pos", "_end", "base")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0, *, base: int = 0):
        view = data if isinstance(data, memoryview) else memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        self._buf = view
        self._end = len(view)
        self.pos = pos
        self.base = base
        """Added to positions in error messages (the body's offset inside the frame)."""

    @property
    def remaining(self) -> int:
        return self._end - self.pos

    @property
    def at_end(self) -> bool:
        return self.pos >= self._end

    def _need(self, n: int, what: str) -> int:
        start = self.pos
        if n < 0 or start + n > self._end:
            raise InvalidFormat(
                f"{what}: need {n} bytes, {max(self._end - start, 0)} left",
                offset=self.base + start,
            )
        self.pos = start + n
        return start

    def u8(self, what: str = "u8") -> int:
        return self._buf[self._need(1, what)]

    def u16(self, what: str = "u16") -> int:
        return _U16.unpack_from(self._buf, self._need(2, what))[0]

    def u32(self, what: str = "u32") -> int:
        return _U32.unpack_from(self._buf, self._need(4, what))[0]

    def u64(self, what: str = "u64") -> int:
        return _U64.unpack_from(self._buf, self._need(8, what))[0]

    def u128(self, what: str = "u128") -> int:
        lo, hi = _U128.unpack_from(self._buf, self._need(16, what))
        return lo | (hi << 64)

    def f32(self, what: str = "f32") -> float:
        return _F32.unpack_from(self._buf, self._need(4, what))[0]

    def flag(self, what: str = "flag") -> bool:
        """One byte; any nonzero value is true (as the crate reads it)."""
        return self._buf[self._need(1, what)] != 0

    def view(self, n: int, what: str = "bytes") -> memoryview:
        start = self._need(n, what)
        return self._buf[start : start + n]

    def raw(self, n: int, what: str = "bytes") -> bytes:
        """``n`` bytes, copied."""
        return bytes(self.view(n, what))

    def utf8(self, n: int, what: str = "string") -> str:
        start = self.pos
        raw = self.view(n, what)
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidFormat(
                f"{what}: invalid utf-8", offset=self.base + start + exc.start
            ) from None

    def name(self, what: str = "name") -> str:
        """``[len u8][utf8]`` with ``len`` 1..255 (``encodings.mdx`` "Name")."""
        start = self.pos
        n = self.u8(what)
        if n == 0:
            raise InvalidFormat(f"{what}: empty name", offset=self.base + start)
        return self.utf8(n, what)

    def str_u8(self, what: str = "string") -> str:
        """``[len u8][utf8]`` with ``len`` 0..255 (passwords, tokens)."""
        return self.utf8(self.u8(what), what)

    def str_u32(self, what: str = "string") -> str:
        """``[len u32][utf8]``."""
        return self.utf8(self.u32(what), what)

    def bytes_u32(self, what: str = "bytes") -> bytes:
        """``[len u32][bytes]``, copied."""
        return self.raw(self.u32(what), what)

    def rest(self) -> memoryview:
        """All remaining bytes (possibly empty); the reader ends up at the end."""
        start = self.pos
        self.pos = self._end
        return self._buf[start : self._end]

    def expect_end(self, what: str = "payload") -> None:
        """Raise :class:`InvalidFormat` when bytes are left over."""
        if self.pos != self._end:
            raise InvalidFormat(
                f"{what}: {self._end - self.pos} trailing bytes", offset=self.base + self.pos
            )


# ---------------------------------------------------------------- strings


def _utf8(value: str, what: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates
        raise ValueError(f"{what}: not encodable as utf-8") from exc


def encode_name(value: str, what: str = "name") -> bytes:
    """``[len u8][utf8]``, 1..255 bytes; raises ``ValueError`` otherwise."""
    raw = _utf8(value, what)
    if not 1 <= len(raw) <= MAX_NAME_LENGTH:
        raise ValueError(f"{what}: must be 1..255 utf-8 bytes, got {len(raw)}")
    return bytes((len(raw),)) + raw


def encode_str_u8(value: str, what: str = "string") -> bytes:
    """``[len u8][utf8]``, 0..255 bytes (passwords, tokens)."""
    raw = _utf8(value, what)
    if len(raw) > MAX_NAME_LENGTH:
        raise ValueError(f"{what}: must be at most 255 utf-8 bytes, got {len(raw)}")
    return bytes((len(raw),)) + raw


def encode_str_u32(value: str, what: str = "string") -> bytes:
    """``[len u32][utf8]``."""
    raw = _utf8(value, what)
    return _U32.pack(len(raw)) + raw


def encode_bytes_u32(value: bytes | bytearray | memoryview) -> bytes:
    """``[len u32][bytes]``."""
    return _U32.pack(len(value)) + bytes(value)


# ---------------------------------------------------------------- identifier

_KIND_NUMERIC = 1
_KIND_STRING = 2


def decode_identifier(r: Reader, what: str = "identifier") -> Identifier:
    """Read ``[kind u8][len u8][value]``; numeric -> ``int``, string -> ``str``.

    Raises :class:`~.errors.InvalidIdentifier` (Iggy 6) on an unknown kind, a
    numeric length other than 4 or an empty string; :class:`InvalidFormat` on
    a short buffer or invalid utf-8. Source: ``encodings.mdx`` "Identifier".
    """
    start = r.pos
    kind = r.u8(what)
    length = r.u8(what)
    if kind == _KIND_NUMERIC:
        if length != 4:
            raise InvalidIdentifier(
                f"{what}: numeric length {length}, expected 4", offset=r.base + start
            )
        return r.u32(what)
    if kind == _KIND_STRING:
        if length == 0:
            raise InvalidIdentifier(f"{what}: empty string identifier", offset=r.base + start)
        return r.utf8(length, what)
    raise InvalidIdentifier(f"{what}: unknown kind {kind}", offset=r.base + start)


def encode_identifier(value: Identifier, what: str = "identifier") -> bytes:
    """``int`` -> ``[1][4][u32]``; ``str`` -> ``[2][len][utf8]`` (1..255 bytes)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{what}: identifier must be int or str, got {type(value).__name__}")
    if isinstance(value, int):
        return _NUMERIC_ID.pack(_KIND_NUMERIC, 4, value)
    raw = _utf8(value, what)
    if not 1 <= len(raw) <= MAX_NAME_LENGTH:
        raise ValueError(f"{what}: string identifier must be 1..255 utf-8 bytes, got {len(raw)}")
    return bytes((_KIND_STRING, len(raw))) + raw


def identifier_size(value: Identifier) -> int:
    """Encoded size of an identifier in bytes."""
    return 6 if isinstance(value, int) else 2 + len(value.encode("utf-8"))


# ---------------------------------------------------------------- consumer


@dataclass(frozen=True, slots=True)
class Consumer:
    """``[kind u8][Identifier]``: kind 1 a single consumer, 2 a consumer group."""

    kind: ConsumerKind
    id: Identifier


def decode_consumer(r: Reader, what: str = "consumer") -> Consumer:
    """Read a Consumer; raises :class:`InvalidFormat` on a kind other than 1 or 2."""
    start = r.pos
    kind = r.u8(what)
    if kind not in (1, 2):
        raise InvalidFormat(f"{what}: unknown consumer kind {kind}", offset=r.base + start)
    return Consumer(ConsumerKind(kind), decode_identifier(r, f"{what} id"))


def encode_consumer(value: Consumer) -> bytes:
    return bytes((int(value.kind),)) + encode_identifier(value.id, "consumer id")


# ---------------------------------------------------------------- optional partition id


def decode_optional_partition_id(r: Reader, what: str = "partition_id") -> int | None:
    """Read ``[flag u8][partition_id u32]``: ``None`` when flag is 0.

    Raises :class:`InvalidFormat` on a flag other than 0 or 1. The value bytes
    are ignored when the flag is 0 (the docs say they are then zero).
    """
    start = r.pos
    flag = r.u8(what)
    value = r.u32(what)
    if flag == 1:
        return value
    if flag == 0:
        return None
    raise InvalidFormat(f"{what}: flag must be 0 or 1, got {flag}", offset=r.base + start)


def encode_optional_partition_id(value: int | None) -> bytes:
    return _FLAG_U32.pack(0, 0) if value is None else _FLAG_U32.pack(1, value)


# ---------------------------------------------------------------- partitioning


@dataclass(frozen=True, slots=True)
class Partitioning:
    """How SendMessages picks a partition (``encodings.mdx`` "Partitioning").

    ``partition_id`` is meaningful for kind 2 only, ``key`` for kind 3 only.
    Build one with :meth:`balanced`, :meth:`by_partition` or :meth:`by_key`.
    """

    kind: PartitioningKind
    partition_id: int = 0
    key: bytes = b""

    @classmethod
    def balanced(cls) -> Partitioning:
        return cls(PartitioningKind.BALANCED)

    @classmethod
    def by_partition(cls, partition_id: int) -> Partitioning:
        return cls(PartitioningKind.PARTITION_ID, partition_id=partition_id)

    @classmethod
    def by_key(cls, key: bytes) -> Partitioning:
        return cls(PartitioningKind.MESSAGES_KEY, key=bytes(key))


def decode_partitioning(r: Reader, what: str = "partitioning") -> Partitioning:
    """Read ``[kind u8][len u8][value]``.

    Raises :class:`InvalidFormat` when the kind is unknown or the length does
    not fit the kind (balanced 0, partition id 4, key 1..255).
    """
    start = r.pos
    kind = r.u8(what)
    length = r.u8(what)
    if kind == PartitioningKind.BALANCED:
        if length != 0:
            raise InvalidFormat(f"{what}: balanced with length {length}", offset=r.base + start)
        return Partitioning(PartitioningKind.BALANCED)
    if kind == PartitioningKind.PARTITION_ID:
        if length != 4:
            raise InvalidFormat(f"{what}: partition id with length {length}", offset=r.base + start)
        return Partitioning(PartitioningKind.PARTITION_ID, partition_id=r.u32(what))
    if kind == PartitioningKind.MESSAGES_KEY:
        if length == 0:
            raise InvalidFormat(f"{what}: empty messages key", offset=r.base + start)
        return Partitioning(PartitioningKind.MESSAGES_KEY, key=r.raw(length, what))
    raise InvalidFormat(f"{what}: unknown kind {kind}", offset=r.base + start)


def encode_partitioning(value: Partitioning) -> bytes:
    if value.kind == PartitioningKind.BALANCED:
        return b"\x01\x00"
    if value.kind == PartitioningKind.PARTITION_ID:
        return _NUMERIC_ID.pack(2, 4, value.partition_id)
    if value.kind == PartitioningKind.MESSAGES_KEY:
        if not 1 <= len(value.key) <= MAX_NAME_LENGTH:
            raise ValueError(f"messages key must be 1..255 bytes, got {len(value.key)}")
        return bytes((3, len(value.key))) + bytes(value.key)
    raise ValueError(f"unknown partitioning kind {value.kind!r}")


# ---------------------------------------------------------------- polling strategy


@dataclass(frozen=True, slots=True)
class PollingStrategy:
    """``[kind u8][value u64]``: offset (1), timestamp in µs (2), first (3), last (4), next (5).

    ``value`` is ignored by the server for kinds 3..5.
    """

    kind: PollingKind
    value: int = 0


def decode_polling_strategy(r: Reader, what: str = "strategy") -> PollingStrategy:
    """Read the 9-byte strategy; raises :class:`InvalidFormat` on a kind outside 1..5."""
    start = r.pos
    kind = r.u8(what)
    value = r.u64(what)
    if not 1 <= kind <= 5:
        raise InvalidFormat(f"{what}: unknown polling kind {kind}", offset=r.base + start)
    return PollingStrategy(PollingKind(kind), value)


def encode_polling_strategy(value: PollingStrategy) -> bytes:
    return _POLLING.pack(int(value.kind), value.value)


# ---------------------------------------------------------------- permissions


@dataclass(frozen=True, slots=True)
class GlobalPermissions:
    """Ten global flags, one byte each, in this order."""

    manage_servers: bool = False
    read_servers: bool = False
    manage_users: bool = False
    read_users: bool = False
    manage_streams: bool = False
    read_streams: bool = False
    manage_topics: bool = False
    read_topics: bool = False
    poll_messages: bool = False
    send_messages: bool = False


@dataclass(frozen=True, slots=True)
class TopicPermissions:
    """``[topic_id u32]`` + four flags (manage_topic, read_topic, poll, send)."""

    topic_id: int
    manage_topic: bool = False
    read_topic: bool = False
    poll_messages: bool = False
    send_messages: bool = False


@dataclass(frozen=True, slots=True)
class StreamPermissions:
    """``[stream_id u32]`` + six flags + the topic list."""

    stream_id: int
    manage_stream: bool = False
    read_stream: bool = False
    manage_topics: bool = False
    read_topics: bool = False
    poll_messages: bool = False
    send_messages: bool = False
    topics: tuple[TopicPermissions, ...] = ()


@dataclass(frozen=True, slots=True)
class Permissions:
    """A user's permissions: global flags and per-stream (then per-topic) overrides."""

    global_: GlobalPermissions = field(default_factory=GlobalPermissions)
    streams: tuple[StreamPermissions, ...] = ()


_GLOBAL_FLAGS = struct.Struct("<10B")
_STREAM_HEAD = struct.Struct("<I6B")
_TOPIC = struct.Struct("<I4B")


def _read_has_next(r: Reader, what: str) -> bool:
    return r.flag(what)


def decode_permissions(r: Reader, what: str = "permissions") -> Permissions:
    """Read a permissions block (crate ``primitives/permissions.rs``)::

        [10 global flags, u8 each]
        [has_streams u8]
        per stream, while the previous has_next was 1:
            [stream_id u32][manage_stream][read_stream][manage_topics][read_topics]
            [poll_messages][send_messages]            (u8 each)
            [has_topics u8]
            per topic, while the previous has_next was 1:
                [topic_id u32][manage_topic][read_topic][poll_messages][send_messages]
                [has_next_topic u8]
            [has_next_stream u8]

    Flags and continuation bytes read nonzero as true. Raises
    :class:`InvalidFormat` on a short buffer.
    """
    g = GlobalPermissions(*(r.flag(what) for _ in range(10)))
    streams: list[StreamPermissions] = []
    if _read_has_next(r, what):
        while True:
            stream_id = r.u32(f"{what} stream_id")
            flags = [r.flag(what) for _ in range(6)]
            topics: list[TopicPermissions] = []
            if _read_has_next(r, what):
                while True:
                    topic_id = r.u32(f"{what} topic_id")
                    tflags = [r.flag(what) for _ in range(4)]
                    topics.append(TopicPermissions(topic_id, *tflags))
                    if not _read_has_next(r, what):
                        break
            streams.append(StreamPermissions(stream_id, *flags, topics=tuple(topics)))
            if not _read_has_next(r, what):
                break
    return Permissions(g, tuple(streams))


def encode_permissions(value: Permissions) -> bytes:
    """Encode a permissions block (layout in :func:`decode_permissions`)."""
    g = value.global_
    out = bytearray(
        _GLOBAL_FLAGS.pack(
            g.manage_servers,
            g.read_servers,
            g.manage_users,
            g.read_users,
            g.manage_streams,
            g.read_streams,
            g.manage_topics,
            g.read_topics,
            g.poll_messages,
            g.send_messages,
        )
    )
    out.append(1 if value.streams else 0)
    for i, s in enumerate(value.streams):
        out += _STREAM_HEAD.pack(
            s.stream_id,
            s.manage_stream,
            s.read_stream,
            s.manage_topics,
            s.read_topics,
            s.poll_messages,
            s.send_messages,
        )
        out.append(1 if s.topics else 0)
        for j, t in enumerate(s.topics):
            out += _TOPIC.pack(
                t.topic_id, t.manage_topic, t.read_topic, t.poll_messages, t.send_messages
            )
            out.append(1 if j < len(s.topics) - 1 else 0)
        out.append(1 if i < len(value.streams) - 1 else 0)
    return bytes(out)
