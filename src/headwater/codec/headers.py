"""Iggy user headers and options blocks: one key-value TLV encoding.

Source: Iggy binary protocol 0.11.0, ``encodings.mdx`` ("Header kinds", "User
headers block", "Options block"); checked against the Iggy crate
``core/binary_protocol/src/primitives/user_headers.rs`` and ``options.rs``,
and the typed kinds in ``core/common/src/types/message/user_headers.rs``.

A block is a flat run of TLV fields, pairing up as key then value::

    [kind u8][length u32 LE][data: length bytes]   (key)
    [kind u8][length u32 LE][data: length bytes]   (value)
    ...

Structural rules (``validate_user_headers``): every kind nonzero, every
length 1..=255, no field past the end, the block consumed exactly, an even
number of fields. Unknown kind codes (16..255) are preserved and forwarded.
An empty block holds no headers.

Where the docs and the crate differ: ``encodings.mdx`` says user-header keys
are ``String`` kind, but the crate's validator accepts a key of any nonzero
kind and its ``HeaderKey`` can be built from any typed value (an ``Int32``
key round-trips in its tests). We follow the crate: keys of any kind decode;
the friendly dict API (:func:`encode_headers` / :func:`decode_headers`)
uses string keys. Options keys *must* be strings.

Kinds (value encodings; integers and floats little-endian)::

    1 Raw      any bytes        9 Uint8    1 byte
    2 String   UTF-8           10 Uint16   2 bytes
    3 Bool     1 byte, 0 or 1  11 Uint32   4 bytes
    4 Int8     1 byte          12 Uint64   8 bytes
    5 Int16    2 bytes         13 Uint128 16 bytes
    6 Int32    4 bytes         14 Float32  4 bytes (IEEE 754)
    7 Int64    8 bytes         15 Float64  8 bytes (IEEE 754)
    8 Int128  16 bytes

Options block: the same TLV, running to the end of the request payload, with
at most 100 000 bytes, at most 1024 pairs, keys of kind String (2) that are
valid UTF-8, and no key twice (``options.rs``, ``validate_options``).
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Any, Iterable, Mapping, NamedTuple, Union

from .errors import (
    DuplicateOptionKey,
    InvalidFormat,
    InvalidHeaderKey,
    InvalidHeaderKind,
    InvalidHeaderValue,
    OptionsBlockTooLarge,
    TooBigUserHeaders,
)

MAX_FIELD_LENGTH = 255
"""Every key and value is 1..=255 bytes."""
MAX_USER_HEADERS_SIZE = 100_000
"""Iggy's ``MAX_USER_HEADERS_SIZE``: the SDK refuses to send a bigger block."""
MAX_OPTIONS = 1024
MAX_OPTIONS_BYTES = 100_000

_FIELD_HEAD = struct.Struct("<BI")  # kind, length
_FIELD_HEAD_SIZE = 5


class Kind(IntEnum):
    """Header kind codes (``encodings.mdx``, "Header kinds")."""

    RAW = 1
    STRING = 2
    BOOL = 3
    INT8 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    INT128 = 8
    UINT8 = 9
    UINT16 = 10
    UINT32 = 11
    UINT64 = 12
    UINT128 = 13
    FLOAT32 = 14
    FLOAT64 = 15


FIXED_SIZES: dict[int, int] = {
    Kind.BOOL: 1,
    Kind.INT8: 1,
    Kind.INT16: 2,
    Kind.INT32: 4,
    Kind.INT64: 8,
    Kind.INT128: 16,
    Kind.UINT8: 1,
    Kind.UINT16: 2,
    Kind.UINT32: 4,
    Kind.UINT64: 8,
    Kind.UINT128: 16,
    Kind.FLOAT32: 4,
    Kind.FLOAT64: 8,
}
"""Byte size each fixed-width kind must have (Raw and String vary)."""

_SIGNED = {Kind.INT8, Kind.INT16, Kind.INT32, Kind.INT64, Kind.INT128}
_UNSIGNED = {Kind.UINT8, Kind.UINT16, Kind.UINT32, Kind.UINT64, Kind.UINT128}
_FLOATS = {Kind.FLOAT32: struct.Struct("<f"), Kind.FLOAT64: struct.Struct("<d")}


class UserHeader(NamedTuple):
    """One key-value pair as it sits on the wire.

    ``key`` and ``value`` are the raw field bytes; ``kind`` is the value's
    kind code and ``key_kind`` the key's (String unless told otherwise).
    Kind codes are plain ints so unknown codes survive a round trip.
    """

    key: bytes
    kind: int
    value: bytes
    key_kind: int = Kind.STRING

    @property
    def key_str(self) -> str:
        """The key as text. Raises :class:`InvalidHeaderKey` unless it is a UTF-8 String key."""
        if self.key_kind != Kind.STRING:
            raise InvalidHeaderKey(f"key kind {self.key_kind} is not String")
        try:
            return self.key.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidHeaderKey("key is not valid UTF-8") from None

    def to_python(self) -> Any:
        """The value as a Python object; see :func:`unpack_value`."""
        return unpack_value(self.kind, self.value)


HeaderEntry = Union[UserHeader, tuple]
"""What the encoders take: a :class:`UserHeader`, or ``(key, kind, value)`` /
``(key, kind, value, key_kind)`` with ``key`` as str (UTF-8) or bytes."""


# --------------------------------------------------------------------------- typed values


def pack_value(kind: int, value: Any) -> bytes:
    """Encode a Python value as the data bytes of ``kind``.

    Bool takes a bool (1 byte, 0 or 1); the integer kinds an int within their
    range (two's complement, little-endian); Float32/Float64 a float
    (IEEE 754, little-endian); String a str (UTF-8); Raw bytes-like. The
    result is not length-checked against 1..=255 here (the encoders do that).

    Raises :class:`InvalidHeaderKind` (4040) for a kind outside 1..15 and
    :class:`InvalidHeaderValue` (4019) for a value of the wrong type or range.
    """
    try:
        k = Kind(kind)
    except ValueError:
        raise InvalidHeaderKind(f"no typed encoding for kind {kind}") from None
    try:
        if k is Kind.RAW:
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise TypeError("Raw takes bytes")
            return bytes(value)
        if k is Kind.STRING:
            if not isinstance(value, str):
                raise TypeError("String takes a str")
            return value.encode("utf-8")
        if k is Kind.BOOL:
            if not isinstance(value, bool):
                raise TypeError("Bool takes a bool")
            return b"\x01" if value else b"\x00"
        if k in _FLOATS:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{k.name} takes a float")
            return _FLOATS[k].pack(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{k.name} takes an int")
        return value.to_bytes(FIXED_SIZES[k], "little", signed=k in _SIGNED)
    except (TypeError, ValueError, OverflowError, struct.error) as exc:
        raise InvalidHeaderValue(f"cannot encode {value!r} as {k.name}: {exc}") from None


def unpack_value(kind: int, data: bytes | bytearray | memoryview) -> Any:
    """Decode the data bytes of ``kind`` into a Python value.

    Raw -> bytes, String -> str, Bool -> bool, integer kinds -> int, floats
    -> float. Raises :class:`InvalidHeaderKind` (4040) for a kind outside
    1..15 (the value is still available raw), :class:`InvalidHeaderValue`
    (4019) for a wrong size, a Bool byte other than 0 or 1, or bad UTF-8.
    Mirrors ``HeaderField::as_*`` in ``iggy_common``.
    """
    try:
        k = Kind(kind)
    except ValueError:
        raise InvalidHeaderKind(f"no typed decoding for kind {kind}") from None
    data = bytes(data)
    size = FIXED_SIZES.get(k)
    if size is not None and len(data) != size:
        raise InvalidHeaderValue(f"{k.name} needs {size} bytes, got {len(data)}")
    if k is Kind.RAW:
        return data
    if k is Kind.STRING:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidHeaderValue("String value is not valid UTF-8") from None
    if k is Kind.BOOL:
        if data[0] > 1:
            raise InvalidHeaderValue(f"Bool byte {data[0]} is neither 0 nor 1")
        return data[0] == 1
    if k in _FLOATS:
        return _FLOATS[k].unpack(data)[0]
    return int.from_bytes(data, "little", signed=k in _SIGNED)


def infer_kind(value: Any) -> Kind:
    """The kind :func:`header` picks: bool -> Bool, int -> Int64, float -> Float64,
    str -> String, bytes-like -> Raw. Raises :class:`InvalidHeaderValue` otherwise."""
    if isinstance(value, bool):
        return Kind.BOOL
    if isinstance(value, int):
        return Kind.INT64
    if isinstance(value, float):
        return Kind.FLOAT64
    if isinstance(value, str):
        return Kind.STRING
    if isinstance(value, (bytes, bytearray, memoryview)):
        return Kind.RAW
    raise InvalidHeaderValue(f"no header kind for {type(value).__name__}")


def header(key: str, value: Any, kind: int | None = None) -> UserHeader:
    """A String-keyed :class:`UserHeader` from a Python value.

    ``kind`` defaults to :func:`infer_kind`; pass e.g. ``Kind.UINT32`` to pick
    a width. Raises like :func:`pack_value`.
    """
    if kind is None:
        kind = infer_kind(value)
    return UserHeader(key.encode("utf-8"), int(kind), pack_value(kind, value))


# --------------------------------------------------------------------------- user headers


def _walk(buf: memoryview) -> list[tuple[int, int, int, int]]:
    """Structural walk: ``(kind, start, end, field_offset)`` per field; raises on a bad block."""
    size = len(buf)
    fields = []
    pos = 0
    while pos < size:
        index = len(fields)
        kind = buf[pos]
        if kind == 0:
            raise InvalidHeaderKind(f"field {index} has kind 0 (reserved)", offset=pos)
        if pos + _FIELD_HEAD_SIZE > size:
            raise InvalidFormat(
                f"field {index} length needs 4 bytes, {size - pos - 1} left", offset=pos + 1
            )
        length = _FIELD_HEAD.unpack_from(buf, pos)[1]
        if not 1 <= length <= MAX_FIELD_LENGTH:
            error = InvalidHeaderKey if index % 2 == 0 else InvalidHeaderValue
            raise error(
                f"field {index} length {length} outside 1..={MAX_FIELD_LENGTH}", offset=pos + 1
            )
        start = pos + _FIELD_HEAD_SIZE
        end = start + length
        if end > size:
            raise InvalidFormat(
                f"field {index} needs {length} bytes, {size - start} left", offset=start
            )
        fields.append((kind, start, end, pos))
        pos = end
    if len(fields) % 2:
        raise InvalidHeaderValue(
            f"key (field {len(fields) - 1}) has no value", offset=fields[-1][3]
        )
    return fields


def validate_user_headers(buf: bytes | bytearray | memoryview) -> int:
    """Check a user-headers block's structure; returns the number of key-value pairs.

    Rules, checked field by field: kind nonzero (:class:`InvalidHeaderKind`,
    4040); a 4-byte length present and the data inside the block
    (:class:`InvalidFormat`, 4); length 1..=255 (:class:`InvalidHeaderKey`,
    4018, for a key field, :class:`InvalidHeaderValue`, 4019, for a value
    field); then an even field count (:class:`InvalidHeaderValue`). Errors
    carry the byte ``offset`` in ``buf``. Kind codes are not interpreted and
    no size cap applies: that is Iggy's ``validate_user_headers``.
    """
    return len(_walk(memoryview(buf).cast("B"))) // 2


def decode_user_headers(
    buf: bytes | bytearray | memoryview, *, strict: bool = False
) -> list[UserHeader]:
    """Decode a user-headers block into its pairs, in wire order, kinds preserved.

    Validates as :func:`validate_user_headers`. With ``strict``, a field of a
    known fixed-width kind must also have that width (:data:`FIXED_SIZES`):
    :class:`InvalidHeaderKey` (4018) for a key, :class:`InvalidHeaderValue`
    (4019) for a value, as ``iggy_common`` decodes them. Unknown kinds pass
    either way. Duplicate keys are kept (use :func:`decode_headers` for a dict).
    """
    mv = memoryview(buf).cast("B")
    fields = _walk(mv)
    out = []
    for i in range(0, len(fields), 2):
        key_kind, ks, ke, key_at = fields[i]
        kind, vs, ve, value_at = fields[i + 1]
        if strict:
            size = FIXED_SIZES.get(key_kind)
            if size is not None and ke - ks != size:
                raise InvalidHeaderKey(
                    f"{Kind(key_kind).name} key of {ke - ks} bytes, needs {size}", offset=key_at
                )
            size = FIXED_SIZES.get(kind)
            if size is not None and ve - vs != size:
                raise InvalidHeaderValue(
                    f"{Kind(kind).name} value of {ve - vs} bytes, needs {size}", offset=value_at
                )
        out.append(UserHeader(mv[ks:ke].tobytes(), kind, mv[vs:ve].tobytes(), key_kind))
    return out


def _normalize(entry: HeaderEntry, index: int) -> UserHeader:
    if isinstance(entry, UserHeader):
        key, kind, value, key_kind = entry
    elif len(entry) == 3:
        key, kind, value = entry
        key_kind = Kind.STRING
    elif len(entry) == 4:
        key, kind, value, key_kind = entry
    else:
        raise InvalidFormat(f"header entry {index} is not (key, kind, value[, key_kind])")
    if isinstance(key, str):
        key = key.encode("utf-8")
    return UserHeader(bytes(key), kind, bytes(value), key_kind)


def _encode_fields(entries: Iterable[HeaderEntry]) -> bytes:
    parts = []
    pack_head = _FIELD_HEAD.pack
    for index, entry in enumerate(entries):
        h = _normalize(entry, index)
        for role, kind, data, error in (
            ("key", h.key_kind, h.key, InvalidHeaderKey),
            ("value", h.kind, h.value, InvalidHeaderValue),
        ):
            if not isinstance(kind, int) or not 1 <= kind <= 255:
                raise InvalidHeaderKind(f"header {index} {role} kind {kind!r} outside 1..=255")
            if not 1 <= len(data) <= MAX_FIELD_LENGTH:
                raise error(
                    f"header {index} {role} of {len(data)} bytes, needs 1..={MAX_FIELD_LENGTH}"
                )
            size = FIXED_SIZES.get(kind)
            if size is not None and len(data) != size:
                raise error(
                    f"header {index} {role}: {Kind(kind).name} needs {size} bytes, got {len(data)}"
                )
            parts.append(pack_head(kind, len(data)))
            parts.append(data)
    return b"".join(parts)


def encode_user_headers(entries: Iterable[HeaderEntry]) -> bytes:
    """Encode pairs into a user-headers block, in the order given.

    ``entries``: :class:`UserHeader` values or ``(key, kind, value[, key_kind])``
    tuples (key str or bytes; value bytes already encoded for its kind, see
    :func:`pack_value`). Kinds may be any of 1..=255, so decoded blocks with
    unknown kinds re-encode byte-identical.

    Raises :class:`InvalidHeaderKind` (4040) for kind 0 or > 255;
    :class:`InvalidHeaderKey` (4018) / :class:`InvalidHeaderValue` (4019) for a
    field outside 1..=255 bytes or a known fixed-width kind of the wrong width;
    :class:`TooBigUserHeaders` (4017) for a block over 100 000 bytes.
    """
    block = _encode_fields(entries)
    if len(block) > MAX_USER_HEADERS_SIZE:
        raise TooBigUserHeaders(
            f"user headers block of {len(block)} bytes, max {MAX_USER_HEADERS_SIZE}"
        )
    return block


def encode_headers(headers: Mapping[str, Any]) -> bytes:
    """Encode ``{key: value}`` with String keys and typed values (the friendly API).

    A value is a Python value whose kind :func:`infer_kind` picks, or a
    ``(kind, python_value)`` pair to choose the kind (``(Kind.UINT16, 7)``).
    Raises like :func:`encode_user_headers` and :func:`pack_value`.
    """
    entries = []
    for key, value in headers.items():
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], int):
            entries.append(header(key, value[1], value[0]))
        else:
            entries.append(header(key, value))
    return encode_user_headers(entries)


def decode_headers(buf: bytes | bytearray | memoryview) -> dict[str, Any]:
    """Decode a block into ``{key: python value}`` (the friendly API).

    Strict decode (:func:`decode_user_headers`), then every key must be a
    UTF-8 String (:class:`InvalidHeaderKey`, 4018) and every value of a known
    kind (:class:`InvalidHeaderKind`, 4040; use :func:`decode_user_headers` to
    keep unknown kinds). A repeated key keeps its last value.
    """
    return {h.key_str: h.to_python() for h in decode_user_headers(buf, strict=True)}


# --------------------------------------------------------------------------- options block


def validate_options_block(buf: bytes | bytearray | memoryview) -> int:
    """Check an options block; returns the number of key-value pairs.

    In order: at most 100 000 bytes (:class:`OptionsBlockTooLarge`, 4043);
    the TLV structure (as :func:`validate_user_headers`); at most 1024 pairs
    (:class:`OptionsBlockTooLarge`); every key kind String (2) and valid UTF-8
    (:class:`InvalidHeaderKey`, 4018); then no key twice
    (:class:`DuplicateOptionKey`, 4018). Value kinds are not restricted.
    Source: ``options.rs``, ``validate_options``.
    """
    return len(_decode_options(memoryview(buf).cast("B")))


def _decode_options(mv: memoryview) -> dict[str, tuple[int, bytes]]:
    if len(mv) > MAX_OPTIONS_BYTES:
        raise OptionsBlockTooLarge(
            f"options block of {len(mv)} bytes, max {MAX_OPTIONS_BYTES}", offset=MAX_OPTIONS_BYTES
        )
    fields = _walk(mv)
    pairs = len(fields) // 2
    if pairs > MAX_OPTIONS:
        raise OptionsBlockTooLarge(f"options block of {pairs} entries, max {MAX_OPTIONS}")
    keyed = []
    for i in range(0, len(fields), 2):
        key_kind, ks, ke, key_at = fields[i]
        if key_kind != Kind.STRING:
            raise InvalidHeaderKey(f"option key kind {key_kind} is not String", offset=key_at)
        try:
            key = mv[ks:ke].tobytes().decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidHeaderKey("option key is not valid UTF-8", offset=key_at) from None
        keyed.append((key, key_at, fields[i + 1]))
    options: dict[str, tuple[int, bytes]] = {}
    for key, key_at, (kind, vs, ve, _) in keyed:
        if key in options:
            raise DuplicateOptionKey(f"option key {key!r} appears twice", offset=key_at)
        options[key] = (kind, mv[vs:ve].tobytes())
    return options


def decode_options_block(buf: bytes | bytearray | memoryview) -> dict[str, tuple[int, bytes]]:
    """Decode an options block into ``{key: (value kind, value bytes)}`` in wire order.

    Validates as :func:`validate_options_block`; unknown value kinds are kept.
    Interpret values with :func:`unpack_value`.
    """
    return _decode_options(memoryview(buf).cast("B"))


def encode_options_block(
    options: Mapping[str, tuple[int, bytes]] | Iterable[tuple[str, int, bytes]],
) -> bytes:
    """Encode options into a block, in the order given (Iggy itself writes keys sorted).

    ``options``: ``{key: (kind, value bytes)}`` or ``(key, kind, value bytes)``
    triples. Raises like :func:`encode_user_headers` for bad fields, and like
    :func:`validate_options_block` for a repeated key, more than 1024 entries
    or more than 100 000 bytes.
    """
    if isinstance(options, Mapping):
        triples: Iterable[tuple[str, int, bytes]] = (
            (key, kind, value) for key, (kind, value) in options.items()
        )
    else:
        triples = options
    entries = []
    for index, (key, kind, value) in enumerate(triples):
        if not isinstance(key, str):
            raise InvalidHeaderKey(f"option {index} key {key!r} is not a str")
        entries.append((key, kind, value))
    block = _encode_fields(entries)
    validate_options_block(block)
    return block
