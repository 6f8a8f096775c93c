"""Kafka RecordBatch v2 <-> Iggy batch: the one mapping between the two message models.

The full description, with a table, is ``docs/kafka-mapping.md``; this is
the reference the code follows.

Kafka -> Iggy (:func:`kafka_to_iggy`): one Kafka batch becomes one unstamped
Iggy batch, one record one frame, in order (frame ``offset_delta`` = index,
so the Kafka offset of a record is its Iggy offset ``base_offset +
offset_delta``). Frame ``id`` = 0. Frame payload = record value (``b""``
for a null value). Frame producer time (``origin_timestamp +
timestamp_delta``, µs) = record timestamp (ms) x 1000. Everything else rides
in the frame's user headers (Iggy TLV) under reserved keys starting with
``kafka.``, written only when needed::

    key                      kind          written when                       holds
    kafka.key (+ .1, .2 ...) String or Raw the key is non-empty               key bytes; String if one
                                                                              chunk of UTF-8, else Raw
                                                                              chunks of 255 bytes
    kafka.flags              Uint8         value null and/or key empty        bit 0 value is null,
                                                                              bit 1 key is b"" (not null)
    kafka.timestamp          Int64         the timestamp has no place in      the exact Kafka timestamp, ms
                                           the frame time (see below)
    kafka.h.<i> (+ .1 ...)   Raw           Kafka header i cannot be a plain   the header as Kafka encodes
                                           Iggy header                        it: varint key length, key,
                                                                              varint value length (-1 null),
                                                                              value; 255-byte chunks
    kafka.prefix             Uint32        the block above would pass Iggy's  N: the payload's first N bytes
                                           100 000-byte user-headers cap      are the key and headers (below),
                                                                              the rest is the value

Large keys and headers. Iggy caps a user-headers block at 100 000 bytes
(the SDK refuses a bigger one), but Kafka bounds only the whole batch. A
record whose block would pass the cap keeps only ``kafka.flags``,
``kafka.timestamp`` and ``kafka.prefix`` there; its key and every header
go in front of the value in the payload, as Kafka's record encodes them::

    [varint keyLength (-1 null)][key][varint headerCount]
    ([varint headerKeyLength][headerKey][varint headerValueLength (-1 null)][headerValue])*
    [value]

so an Iggy consumer sees the key and headers in the payload, and
``kafka.prefix`` says where the value starts.

A Kafka header becomes a *plain* Iggy header (same key, value String if
UTF-8 else Raw) when its key is 1..255 bytes of UTF-8 not starting with
``kafka.`` (any case), no earlier plain header has the same key ignoring
case (Iggy SDKs lowercase keys), and its value is 1..255 bytes. Any other
header (null or empty or long value, empty or long or reserved or repeated
key) is escaped as ``kafka.h.<i>``, ``i`` its index in the record's list.
The TLV keeps the Kafka order.

The batch origin is the start of the 2**32-1 µs window (Iggy's per-batch
span, about 71.6 minutes) holding the most record timestamps (the earliest
timestamp in the usual case; ``now_ms`` if no timestamp fits u64 µs). A
record whose timestamp is outside that window, negative or past u64 µs gets
the nearest window edge as frame time and its exact value in
``kafka.timestamp``.

Iggy -> Kafka (:func:`iggy_to_kafka`): one stored Iggy batch becomes one
RecordBatch v2; the reserved keys are read back, every other Iggy header is
a Kafka header, in TLV order. Kafka header value by Iggy kind: String and
Raw as their bytes, Bool ``true``/``false``, integers in decimal, floats in
the shortest text that reads back to the same bits (``nan``, ``inf``). When a
value's kind is not the one Kafka -> Iggy would pick by default (String for
UTF-8, Raw otherwise), a last Kafka header ``iggy.kinds`` lists
``<index>:<kind>`` entries, comma separated, ``<kind>`` a lowercase Iggy kind
name (``uint32``, ``raw``...), or the decimal kind code when the value is
passed as its raw bytes (unknown kinds, wrong widths, Bool bytes other than
0/1, non-canonical NaN). A produce reads it back (only when it is last,
canonical and applies to every entry), so Iggy -> Kafka -> Iggy keeps kinds.
If the last Iggy header is itself a user's ``iggy.kinds`` that would read as
a valid list, an empty ``iggy.kinds`` follows it so it stays a header.

Iggy producers may write the reserved keys themselves (``kafka.key`` of any
kind gives the Kafka key, in the text form above). Entries this module
cannot use (a flags or timestamp of the wrong kind or width, a null flag on
a non-empty payload, a chunk without its head, a second copy, an unknown
``kafka.`` name) reach Kafka as ordinary headers. An undecodable TLV block
reaches Kafka as one header ``iggy.headers`` with the raw block.

Implementation: the per-record work runs in tight loops over the bytes, compiled
(``_convert_c.pyx``) or their pure-Python twin (``_convert_py.py``, when the
extension is not built or ``HEADWATER_NO_EXTENSIONS=1``). The code in this module
is the reference they must match byte for byte: they hand it every record they do
not map themselves (Kafka or Iggy headers needing the full mapping below) and every
batch with anything wrong, which it then converts or rejects with the precise error.

Errors (Kafka codes): :class:`CorruptRecord` (2), :class:`MessageTooLarge`
(10), :class:`InvalidTimestamp` (32), :class:`UnsupportedCompressionType`
(76), :class:`InvalidRecord` (87); all from :mod:`.errors`.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Iterable, Sequence

from ... import _native
from ..batch import MAX_TIMESTAMP_DELTA_US, Message, build_batch, iter_frames, read_header
from ..errors import CodecError
from ..headers import MAX_FIELD_LENGTH, MAX_USER_HEADERS_SIZE, Kind, decode_user_headers
from . import _convert_py
from .compression import CompressionType
from .errors import (
    CorruptRecord,
    InvalidRecord,
    InvalidTimestamp,
    KafkaCodecError,
    MessageTooLarge,
    UnsupportedCompressionType,
)
from .record_batch import (
    CONTROL_MASK,
    CREATE_TIME,
    LOG_APPEND_TIME,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    RecordBatchView,
    encode_record,
    finish_record_batch,
    iter_record_fields,
    read_varint,
    split_batches,
    wrap_int64,
    write_varint,
)

KEY_HEADER = b"kafka.key"
FLAGS_HEADER = b"kafka.flags"
PREFIX_HEADER = b"kafka.prefix"
TIMESTAMP_HEADER = b"kafka.timestamp"
ESCAPED_HEADER_PREFIX = b"kafka.h."
RESERVED_PREFIX = "kafka."
KINDS_HEADER = b"iggy.kinds"
RAW_HEADERS_HEADER = b"iggy.headers"
FLAG_NULL_VALUE = 0x01
FLAG_EMPTY_KEY = 0x02
DEFAULT_MAX_UNCOMPRESSED_BYTES = 64 * 1024 * 1024
"""Cap on a decompressed records section in :func:`kafka_to_iggy` (MessageTooLarge past it)."""

_U64_MAX = (1 << 64) - 1
_U64_MAX_MS = _U64_MAX // 1000
_I64_LE = struct.Struct("<q")
_TLV_HEAD = struct.Struct("<BI")  # kind, length: the head of every TLV field
_F32 = struct.Struct("<f")
_F64 = struct.Struct("<d")
_ESCAPED_HEAD = re.compile(rb"kafka\.h\.(0|[1-9][0-9]*)\Z")

_INT_KINDS: dict[int, tuple[int, bool]] = {
    Kind.INT8: (1, True),
    Kind.INT16: (2, True),
    Kind.INT32: (4, True),
    Kind.INT64: (8, True),
    Kind.INT128: (16, True),
    Kind.UINT8: (1, False),
    Kind.UINT16: (2, False),
    Kind.UINT32: (4, False),
    Kind.UINT64: (8, False),
    Kind.UINT128: (16, False),
}
_TOKENS: dict[int, bytes] = {k: k.name.lower().encode() for k in Kind if k is not Kind.STRING}
_TOKEN_KINDS: dict[bytes, int] = {v: int(k) for k, v in _TOKENS.items()}
_RAW = int(Kind.RAW)
_STRING = int(Kind.STRING)
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

_compiled = _native.load("headwater.codec.kafka._convert_c")
_loops = _compiled if _compiled is not None else _convert_py
"""The per-record loops: compiled (``_convert_c.pyx``) when built, else the pure-Python twin
(``_convert_py.py``). The reference code below (``iter_record_fields`` + ``build_batch``,
``iter_frames`` + ``encode_record``) is the specification they must match byte for byte;
they hand anything unusual (and every error) back to it. None: the reference alone."""


@dataclass(frozen=True, slots=True)
class KafkaBatchInfo:
    """What a produced Kafka batch says beyond its records (for idempotence and the reply).

    ``max_timestamp_ms`` is the largest record timestamp (CreateTime, ms).
    ``compression`` is the producer's codec id (0..4).
    """

    record_count: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool
    compression: int
    max_timestamp_ms: int

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (wraps at int32 like Kafka), -1 without a producer id."""
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.record_count - 1) & 0x7FFFFFFF


# ---------------------------------------------------------------------------
# typed Iggy values <-> Kafka header values


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _f32_text(data: bytes) -> bytes | None:
    (value,) = _F32.unpack(data)
    for precision in range(1, 10):
        text = f"{value:.{precision}g}"
        try:
            if _F32.pack(float(text)) == data:
                return text.encode()
        except OverflowError:
            continue
    return None


def kafka_header_value(kind: int, data: bytes) -> tuple[bytes, bytes | None]:
    """The Kafka header value for an Iggy value, and its ``iggy.kinds`` token (None: default kind).

    String -> its bytes (token only if not UTF-8: ``2``); Raw -> its bytes
    (token ``raw`` if the bytes are UTF-8); Bool -> ``true``/``false``;
    integer kinds -> decimal; Float32/Float64 -> shortest text reading back
    to the same bits. A value that does not fit its kind (width, Bool byte
    other than 0/1, a NaN other than the canonical one) or an unknown kind
    is passed as its bytes with the decimal kind code as token.
    """
    if kind == _STRING:
        return (data, None) if _is_utf8(data) else (data, b"2")
    if kind == _RAW:
        return (data, b"raw") if _is_utf8(data) else (data, None)
    spec = _INT_KINDS.get(kind)
    if spec is not None:
        size, signed = spec
        if len(data) == size:
            return str(int.from_bytes(data, "little", signed=signed)).encode(), _TOKENS[kind]
    elif kind == Kind.BOOL:
        if data == b"\x00":
            return b"false", b"bool"
        if data == b"\x01":
            return b"true", b"bool"
    elif kind == Kind.FLOAT32:
        if len(data) == 4:
            text = _f32_text(data)
            if text is not None:
                return text, b"float32"
    elif kind == Kind.FLOAT64:
        if len(data) == 8:
            text = repr(_F64.unpack(data)[0]).encode()
            if _F64.pack(float(text)) == data:
                return text, b"float64"
    return data, str(kind).encode()


def _iggy_value_of(token: bytes, value: bytes) -> tuple[int, bytes] | None:
    """Inverse of :func:`kafka_header_value` for a token; None when the text does not parse."""
    kind = _TOKEN_KINDS.get(token)
    try:
        if kind is None:
            if token.isdigit() and len(token) <= 3 and 1 <= int(token) <= 255:
                return int(token), value
            return None
        if kind == _RAW:
            return kind, value
        if kind == Kind.BOOL:
            return {b"true": (kind, b"\x01"), b"false": (kind, b"\x00")}.get(value)
        spec = _INT_KINDS.get(kind)
        if spec is not None:
            size, signed = spec
            return kind, int(value).to_bytes(size, "little", signed=signed)
        if kind == Kind.FLOAT32:
            return kind, _F32.pack(float(value))
        if kind == Kind.FLOAT64:
            return kind, _F64.pack(float(value))
    except (ValueError, OverflowError):
        return None
    return None


def _format_kinds(entries: Sequence[tuple[int, bytes]]) -> bytes:
    return b",".join(b"%d:%s" % (index, token) for index, token in entries)


def _plain_names(headers: Sequence[tuple[bytes, bytes | None]]) -> list[bytes | None]:
    """Per Kafka header: its key if it can be a plain Iggy header, else None."""
    out: list[bytes | None] = []
    seen: set[str] = set()
    for hkey, hvalue in headers:
        name = None
        fits = hvalue is not None and 1 <= len(hvalue) <= MAX_FIELD_LENGTH
        if fits and 1 <= len(hkey) <= MAX_FIELD_LENGTH:
            try:
                folded = bytes(hkey).decode("utf-8").lower()
            except UnicodeDecodeError:
                folded = None
            if folded is not None and not folded.startswith(RESERVED_PREFIX) and folded not in seen:
                seen.add(folded)
                name = bytes(hkey)
        out.append(name)
    return out


def _kinds_of(
    headers: Sequence[tuple[bytes, bytes | None]], plain: Sequence[bytes | None], at: int
) -> dict[int, tuple[int, bytes]] | None:
    """If ``headers[at]`` is a valid non-empty ``iggy.kinds`` list over ``headers[:at]``,
    the Iggy value of each listed header: ``{index: (kind, data)}``; else None."""
    hkey, hvalue = headers[at]
    if bytes(hkey) != KINDS_HEADER or not hvalue:
        return None
    value = bytes(hvalue)
    entries = []
    for part in value.split(b","):
        index, sep, token = part.partition(b":")
        if not sep or not index.isdigit() or not token:
            return None
        entries.append((int(index), token))
    if _format_kinds(entries) != value:
        return None
    typed: dict[int, tuple[int, bytes]] = {}
    previous = -1
    for index, token in entries:
        if index <= previous or index >= at or plain[index] is None:
            return None
        previous = index
        kafka_value = bytes(headers[index][1])  # type: ignore[arg-type]
        iggy = _iggy_value_of(token, kafka_value)
        if iggy is None or kafka_header_value(*iggy) != (kafka_value, token):
            return None
        typed[index] = iggy
    return typed


# ---------------------------------------------------------------------------
# Kafka record -> Iggy user headers


def _add_chunked(entries: list, name: bytes, data: bytes, allow_string: bool) -> None:
    if len(data) <= MAX_FIELD_LENGTH:
        kind = _STRING if allow_string and _is_utf8(data) else _RAW
        entries.append((name, kind, data))
        return
    entries.append((name, _RAW, data[:MAX_FIELD_LENGTH]))
    part = 1
    for start in range(MAX_FIELD_LENGTH, len(data), MAX_FIELD_LENGTH):
        entries.append((b"%s.%d" % (name, part), _RAW, data[start : start + MAX_FIELD_LENGTH]))
        part += 1


def _escape_header(hkey: bytes, hvalue: bytes | None) -> bytes:
    out = bytearray()
    write_varint(out, len(hkey))
    out += hkey
    if hvalue is None:
        out.append(1)  # varint -1
    else:
        write_varint(out, len(hvalue))
        out += hvalue
    return bytes(out)


def kafka_user_headers(
    key: bytes | memoryview | None,
    value_is_null: bool,
    headers: Sequence[tuple[bytes, bytes | None]] = (),
    timestamp_ms: int | None = None,
) -> bytes:
    """The Iggy user-headers block carrying a Kafka record's key, nulls and headers.

    ``timestamp_ms`` is written as ``kafka.timestamp`` (pass it only when the
    frame time cannot hold it). Returns ``b""`` for a record with a null key,
    a non-null value and no headers. See the module docstring for the keys.

    Raises :class:`MessageTooLarge` (10) for a block over 100 000 bytes.
    """
    entries: list[tuple[bytes, int, bytes]] = []
    flags = FLAG_NULL_VALUE if value_is_null else 0
    if key is not None:
        if len(key):
            _add_chunked(entries, KEY_HEADER, bytes(key), True)
        else:
            flags |= FLAG_EMPTY_KEY
    if flags:
        entries.append((FLAGS_HEADER, int(Kind.UINT8), bytes((flags,))))
    if timestamp_ms is not None:
        entries.append((TIMESTAMP_HEADER, int(Kind.INT64), _I64_LE.pack(timestamp_ms)))
    if headers:
        plain = _plain_names(headers)
        last = len(headers) - 1
        typed = _kinds_of(headers, plain, last)
        skip = last if typed is not None else -1
        if typed is None:
            typed = {}
            if (
                last >= 1
                and bytes(headers[last][0]) == KINDS_HEADER
                and headers[last][1] is not None
                and len(headers[last][1]) == 0  # type: ignore[arg-type]
                and _kinds_of(headers, plain, last - 1) is not None
            ):
                skip = last  # an empty iggy.kinds protecting the one before it
        for index, (hkey, hvalue) in enumerate(headers):
            if index == skip:
                continue
            name = plain[index]
            if name is not None:
                iggy = typed.get(index)
                if iggy is None:
                    data = bytes(hvalue)  # type: ignore[arg-type]
                    iggy = (_STRING if _is_utf8(data) else _RAW, data)
                entries.append((name, iggy[0], iggy[1]))
            else:
                _add_chunked(
                    entries,
                    b"%s%d" % (ESCAPED_HEADER_PREFIX, index),
                    _escape_header(bytes(hkey), None if hvalue is None else bytes(hvalue)),
                    False,
                )
    if not entries:
        return b""
    # Our own TLV writer (headers.encode_user_headers insists on fixed widths,
    # but a numeric-token value must come back with the width it had).
    out = bytearray()
    pack = _TLV_HEAD.pack
    for name, kind, data in entries:
        out += pack(_STRING, len(name))
        out += name
        out += pack(kind, len(data))
        out += data
    if len(out) > MAX_USER_HEADERS_SIZE:
        raise MessageTooLarge(
            f"key and headers need {len(out)} bytes of Iggy user headers, max {MAX_USER_HEADERS_SIZE}"
        )
    return bytes(out)


def user_headers_or_none(
    key: bytes | memoryview | None,
    value_is_null: bool,
    headers: Sequence[tuple[bytes, bytes | None]] = (),
    timestamp_ms: int | None = None,
) -> bytes | None:
    """:func:`kafka_user_headers`, or None when the block would pass the cap (the fast
    loops then hand the batch to the reference code, which uses :func:`kafka_frame_parts`)."""
    try:
        return kafka_user_headers(key, value_is_null, headers, timestamp_ms)
    except MessageTooLarge:
        return None


def kafka_frame_parts(
    key: bytes | memoryview | None,
    value_is_null: bool,
    headers: Sequence[tuple[bytes, bytes | None]] = (),
    timestamp_ms: int | None = None,
) -> tuple[bytes, bytes]:
    """``(user headers, payload prefix)`` of one record: the prefix is ``b""`` unless
    the key and headers do not fit the 100 000-byte user-headers cap, and then holds
    them in Kafka's record encoding (module doc, "Large keys and headers")."""
    block = user_headers_or_none(key, value_is_null, headers, timestamp_ms)
    if block is not None:
        return block, b""
    prefix = bytearray()
    if key is None:
        prefix.append(1)  # varint -1
    else:
        write_varint(prefix, len(key))
        prefix += key
    write_varint(prefix, len(headers))
    for hkey, hvalue in headers:
        prefix += _escape_header(bytes(hkey), None if hvalue is None else bytes(hvalue))
    out = bytearray()
    entries = [(PREFIX_HEADER, int(Kind.UINT32), struct.pack("<I", len(prefix)))]
    if value_is_null:
        entries.append((FLAGS_HEADER, int(Kind.UINT8), bytes((FLAG_NULL_VALUE,))))
    if timestamp_ms is not None:
        entries.append((TIMESTAMP_HEADER, int(Kind.INT64), _I64_LE.pack(timestamp_ms)))
    for name, kind, data in entries:
        out += _TLV_HEAD.pack(_STRING, len(name)) + name + _TLV_HEAD.pack(kind, len(data)) + data
    return bytes(out), bytes(prefix)


def _parse_prefix(payload: bytes | memoryview, length: int) -> tuple[bytes | None, list] | None:
    """(key, headers) from the first ``length`` payload bytes, or None when they do not parse."""
    if length > len(payload):
        return None
    content = bytes(payload[:length])
    try:
        key_length, pos = read_varint(content, 0)
        key = None
        if key_length >= 0:
            if pos + key_length > length:
                return None
            key = content[pos : pos + key_length]
            pos += key_length
        elif key_length != -1:
            return None
        count, pos = read_varint(content, pos)
        headers = []
        for _ in range(max(count, 0)):
            hlen, pos = read_varint(content, pos)
            if hlen < 0 or pos + hlen > length:
                return None
            hkey = content[pos : pos + hlen]
            pos += hlen
            vlen, pos = read_varint(content, pos)
            if vlen < -1 or pos + max(vlen, 0) > length:
                return None
            headers.append((hkey, None if vlen < 0 else content[pos : pos + vlen]))
            pos += max(vlen, 0)
    except InvalidRecord:
        return None
    return (key, headers) if count >= 0 and pos == length else None


# ---------------------------------------------------------------------------
# Iggy frame -> Kafka record


def _chunks(pairs: list, reserved: dict[bytes, int], name: bytes) -> list[int]:
    indices = []
    part = 1
    while True:
        index = reserved.get(b"%s.%d" % (name, part))
        if index is None or pairs[index].kind not in (_RAW, _STRING):
            return indices
        indices.append(index)
        part += 1


def _parse_escaped(content: bytes) -> tuple[bytes, bytes | None] | None:
    try:
        key_length, pos = read_varint(content, 0)
        if key_length < 0 or pos + key_length > len(content):
            return None
        hkey = content[pos : pos + key_length]
        pos += key_length
        value_length, pos = read_varint(content, pos)
    except InvalidRecord:
        return None
    if value_length < 0:
        return (hkey, None) if value_length == -1 and pos == len(content) else None
    if pos + value_length != len(content):
        return None
    return hkey, content[pos:]


KafkaFields = tuple[
    bytes | None, bytes | memoryview | None, list[tuple[bytes, bytes | None]], int | None
]
"""``(key, value, headers, timestamp_ms override)`` as :func:`kafka_fields_of` returns them."""


def kafka_fields_of(payload: bytes | memoryview, user_headers: bytes | memoryview) -> KafkaFields:
    """What a Kafka consumer sees of an Iggy frame: ``(key, value, headers, timestamp_ms)``.

    ``timestamp_ms`` is the ``kafka.timestamp`` override or None (use the
    frame time). ``payload`` is returned as given (or None for a null value).
    Never raises for any block: what cannot be read reaches Kafka as headers.
    """
    if not len(user_headers):
        return None, payload, [], None
    try:
        pairs = decode_user_headers(user_headers)
    except CodecError:
        return None, payload, [(RAW_HEADERS_HEADER, bytes(user_headers))], None
    reserved: dict[bytes, int] = {}
    for index, pair in enumerate(pairs):
        if pair.key_kind == _STRING and pair.key.startswith(b"kafka.") and pair.key not in reserved:
            reserved[pair.key] = index
    consumed: set[int] = set()
    escaped: dict[int, tuple[bytes, bytes | None]] = {}
    key: bytes | None = None
    value: bytes | memoryview | None = payload
    timestamp_ms = None
    prefixed: list = []
    if reserved:
        at = reserved.get(PREFIX_HEADER)
        if at is not None and pairs[at].kind == Kind.UINT32 and len(pairs[at].value) == 4 and KEY_HEADER not in reserved:
            n = struct.unpack("<I", pairs[at].value)[0]
            parsed_prefix = _parse_prefix(payload, n)
            if parsed_prefix is not None:
                key, prefixed = parsed_prefix
                payload = value = payload[n:]
                consumed.add(at)
        head = reserved.get(KEY_HEADER)
        if head is not None:
            parts = _chunks(pairs, reserved, KEY_HEADER)
            key = kafka_header_value(pairs[head].kind, pairs[head].value)[0] + b"".join(
                pairs[i].value for i in parts
            )
            consumed.add(head)
            consumed.update(parts)
        at = reserved.get(FLAGS_HEADER)
        if at is not None:
            pair = pairs[at]
            if pair.kind == Kind.UINT8 and pair.value in (b"\x01", b"\x02", b"\x03"):
                flags = pair.value[0]
                null_ok = not (flags & FLAG_NULL_VALUE) or not len(payload)
                empty_ok = not (flags & FLAG_EMPTY_KEY) or (key is None and not prefixed and PREFIX_HEADER not in reserved)
                if null_ok and empty_ok:
                    if flags & FLAG_NULL_VALUE:
                        value = None
                    if flags & FLAG_EMPTY_KEY:
                        key = b""
                    consumed.add(at)
        at = reserved.get(TIMESTAMP_HEADER)
        if at is not None and pairs[at].kind == Kind.INT64 and len(pairs[at].value) == 8:
            timestamp_ms = _I64_LE.unpack(pairs[at].value)[0]
            consumed.add(at)
        for name, at in reserved.items():
            if at in consumed or not _ESCAPED_HEAD.match(name) or pairs[at].kind not in (_RAW, _STRING):
                continue
            parts = _chunks(pairs, reserved, name)
            parsed = _parse_escaped(pairs[at].value + b"".join(pairs[i].value for i in parts))
            if parsed is not None:
                escaped[at] = parsed
                consumed.add(at)
                consumed.update(parts)
    headers: list[tuple[bytes, bytes | None]] = list(prefixed)
    kinds: list[tuple[int, bytes]] = []
    for index, pair in enumerate(pairs):
        if index in consumed:
            if index in escaped:
                headers.append(escaped[index])
            continue
        hkey = pair.key if pair.key_kind == _STRING else kafka_header_value(pair.key_kind, pair.key)[0]
        hvalue, token = kafka_header_value(pair.kind, pair.value)
        if token is not None:
            kinds.append((len(headers), token))
        headers.append((hkey, hvalue))
    if kinds:
        # List only headers a produce would make plain again (not a repeated or
        # reserved key): a kind elsewhere could not be applied and would void
        # the whole list.
        plain = _plain_names(headers)
        kinds = [(index, token) for index, token in kinds if plain[index] is not None]
    if kinds:
        headers.append((KINDS_HEADER, _format_kinds(kinds)))
    elif headers and headers[-1][0] == KINDS_HEADER:
        if _kinds_of(headers, _plain_names(headers), len(headers) - 1) is not None:
            headers.append((KINDS_HEADER, b""))
    return key, value, headers, timestamp_ms


# ---------------------------------------------------------------------------
# batches


def _origin_us(times: list[int], now_ms: int) -> int:
    """The batch origin (µs): the start of the 2**32-1 µs window holding the most
    representable timestamps (the earliest such window), or ``now_ms`` if none is."""
    stamps = sorted(ts * 1000 for ts in times if 0 <= ts <= _U64_MAX_MS)
    if not stamps:
        return min(max(now_ms, 0), _U64_MAX_MS) * 1000
    if stamps[-1] - stamps[0] <= MAX_TIMESTAMP_DELTA_US:
        return stamps[0]
    best_start, best_count = stamps[0], 0
    end = 0
    for start_index, start in enumerate(stamps):
        while end < len(stamps) and stamps[end] - start <= MAX_TIMESTAMP_DELTA_US:
            end += 1
        if end - start_index > best_count:
            best_start, best_count = start, end - start_index
    return best_start


def kafka_to_iggy(
    record_batch: bytes | bytearray | memoryview,
    now_ms: int,
    *,
    verify_crc: bool = True,
    require_key: bool = False,
    timestamp_before_max_ms: int | None = None,
    timestamp_after_max_ms: int | None = None,
    max_uncompressed_bytes: int | None = DEFAULT_MAX_UNCOMPRESSED_BYTES,
) -> tuple[bytes | bytearray, KafkaBatchInfo]:
    """Convert one produced RecordBatch v2 into one unstamped Iggy batch.

    ``record_batch`` must be exactly one batch (see :func:`kafka_records_to_iggy`
    for a Produce ``records`` field). ``now_ms`` is the broker clock (ms),
    used for timestamp bounds and as the batch origin when no record
    timestamp fits u64 µs. Checks, in order: the frame (:class:`RecordBatchView`), the
    CRC-32C, the compression id, no control batch, CreateTime, record count
    >= 1 and equal to lastOffsetDelta + 1, a sequence when there is a
    producer id, then every record's structure; then per record (all failing
    indices in ``record_errors``) a key when ``require_key`` (compacted
    topic) and ``now - before_max <= timestamp <= now + after_max`` (records
    with timestamp -1 exempt), as Kafka's LogValidator. Record offset deltas
    need not be consecutive: frames are renumbered 0..n-1, as Kafka does.

    Returns the batch (``build_batch`` layout: offsets, partition and
    base_timestamp zero; a bytearray from the compiled loop, bytes otherwise)
    and a :class:`KafkaBatchInfo`.

    Raises :class:`CorruptRecord` (2), :class:`MessageTooLarge` (10),
    :class:`InvalidTimestamp` (32), :class:`UnsupportedCompressionType` (76)
    or :class:`InvalidRecord` (87).
    """
    view = RecordBatchView(record_batch)
    given = memoryview(record_batch).nbytes
    if view.size != given:
        raise CorruptRecord(
            f"{given - view.size} bytes after the record batch", offset=view.size
        )
    h = view.header()
    if verify_crc:
        view.verify_crc()
    attributes = h.attributes
    compression = attributes & 0x07
    if compression > CompressionType.ZSTD:
        raise UnsupportedCompressionType(f"unknown compression id {compression}", field="attributes")
    if attributes & CONTROL_MASK:
        raise InvalidRecord("clients may not write control batches", field="attributes")
    count = h.record_count
    if count <= 0:
        raise InvalidRecord(f"invalid record count {count}", field="recordCount")
    if h.last_offset_delta != count - 1:
        raise InvalidRecord(
            f"lastOffsetDelta {h.last_offset_delta} does not match {count} records",
            field="lastOffsetDelta",
        )
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise InvalidRecord(
            f"producer id {h.producer_id} with sequence {h.base_sequence}", field="baseSequence"
        )
    if attributes & TIMESTAMP_TYPE_MASK:
        raise InvalidTimestamp(
            "producers may not set the LogAppendTime timestamp type",
            field="attributes",
            record_errors=tuple((i, "LogAppendTime set by the producer") for i in range(count)),
        )
    section = view.records_section(max_bytes=max_uncompressed_bytes)
    if _loops is not None:
        fast = _fast_kafka_records(
            section, count, h.base_timestamp, now_ms, require_key, timestamp_before_max_ms, timestamp_after_max_ms
        )
        if fast is not None:
            return fast[0], _batch_info(h, compression, fast[1])
    records = list(iter_record_fields(section, count, copy=False))

    base = h.base_timestamp
    times = [wrap_int64(base + r.timestamp_delta) for r in records]
    if require_key:
        missing = tuple(
            (i, "compacted topic needs a key") for i, r in enumerate(records) if r.key is None
        )
        if missing:
            raise InvalidRecord("records without a key on a compacted topic", record_errors=missing)
    errors: list[tuple[int, str]] = []
    if timestamp_before_max_ms is not None or timestamp_after_max_ms is not None:
        low = None if timestamp_before_max_ms is None else now_ms - timestamp_before_max_ms
        high = None if timestamp_after_max_ms is None else now_ms + timestamp_after_max_ms
        for i, ts in enumerate(times):
            if ts == NO_TIMESTAMP:
                continue
            if (low is not None and ts < low) or (high is not None and ts > high):
                errors.append((i, f"timestamp {ts} out of range [{low}, {high}]"))
        if errors:
            raise InvalidTimestamp(
                "one or more records have an invalid timestamp", record_errors=tuple(errors)
            )

    origin_us = _origin_us(times, now_ms)
    window_end = min(origin_us + MAX_TIMESTAMP_DELTA_US, _U64_MAX)
    messages = []
    for record, ts in zip(records, times):
        frame_us = ts * 1000
        override = None
        if not origin_us <= frame_us <= window_end:
            frame_us = origin_us if frame_us < origin_us else window_end
            override = ts
        key = record.key
        value = record.value
        prefix = b""
        if key is None and value is not None and not record.headers and override is None:
            user_headers = b""
        else:
            user_headers, prefix = kafka_frame_parts(key, value is None, record.headers, override)
        payload = b"" if value is None else value
        messages.append(
            Message(prefix + bytes(payload) if prefix else payload, 0, frame_us, user_headers)  # type: ignore[arg-type]
        )
    return build_batch(messages), _batch_info(h, compression, max(times))


def _batch_info(h, compression: int, max_timestamp_ms: int) -> KafkaBatchInfo:
    return KafkaBatchInfo(
        record_count=h.record_count,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        is_transactional=bool(h.attributes & TRANSACTIONAL_MASK),
        compression=compression,
        max_timestamp_ms=max_timestamp_ms,
    )


def _fast_kafka_records(
    section: memoryview,
    count: int,
    base_timestamp: int,
    now_ms: int,
    require_key: bool,
    before_max_ms: int | None,
    after_max_ms: int | None,
) -> tuple[bytes | bytearray, int] | None:
    """The records loop of :func:`kafka_to_iggy` (``_loops``), or None when it declines (then
    the reference loop runs and raises or converts)."""
    low = None if before_max_ms is None else now_ms - before_max_ms
    high = None if after_max_ms is None else now_ms + after_max_ms
    for bound in (now_ms, low, high):
        if bound is not None and not _INT64_MIN <= bound <= _INT64_MAX:
            return None
    return _loops.kafka_records_to_iggy(
        section,
        count,
        base_timestamp,
        now_ms,
        require_key,
        low is not None,
        0 if low is None else low,
        high is not None,
        0 if high is None else high,
        user_headers_or_none,
    )


def kafka_records_to_iggy(
    records: bytes | bytearray | memoryview, now_ms: int, **options
) -> list[tuple[bytes | bytearray, KafkaBatchInfo]]:
    """Convert every batch of a Produce ``records`` field (see :func:`split_batches`).

    Kafka's Produce v3+ accepts exactly one batch per partition; callers that
    enforce it check ``len(result) == 1``. ``options`` as for :func:`kafka_to_iggy`.
    Raises like :func:`split_batches` and :func:`kafka_to_iggy`.
    """
    return [kafka_to_iggy(batch, now_ms, **options) for batch in split_batches(records)]


def iggy_to_kafka(
    batch: bytes | bytearray | memoryview,
    *,
    timestamp_type: int = CREATE_TIME,
    compression: int = CompressionType.NONE,
    xerial: bool = True,
    level: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """Build the RecordBatch v2 a Fetch returns for one stored Iggy batch (all its frames).

    ``baseOffset`` = the batch ``base_offset`` + the first frame's
    ``offset_delta`` (so a :func:`~headwater.codec.batch.slice_batch` result
    works too); record offset deltas follow the frames'. Record timestamp =
    the ``kafka.timestamp`` override, else producer time
    (``origin_timestamp + timestamp_delta``, µs) // 1000; ``baseTimestamp`` is
    the first record's, ``maxTimestamp`` the largest. With
    ``timestamp_type=LOG_APPEND_TIME`` the attribute bit is set and
    ``maxTimestamp`` is the batch's server ``base_timestamp`` // 1000, which
    Kafka consumers then report for every record. Producer fields default to
    "none" (-1); pass them when the broker kept them. ``compression``,
    ``xerial`` and ``level`` choose the records encoding (default none).

    Raises the batch codec's :class:`~headwater.codec.errors.InvalidFormat`
    family (Iggy errors) for a batch whose frames do not fit; an empty batch
    gives an empty RecordBatch (count 0, lastOffsetDelta -1).
    """
    header = read_header(batch)
    fast = None
    if _loops is not None:
        mv = memoryview(batch)
        fast = _loops.iggy_to_kafka_records(
            mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B"), kafka_fields_of, encode_record
        )
    if fast is not None:
        body, count, first_delta, last_delta, base_ms, max_ms = fast
    else:
        body, count, first_delta, last_delta, base_ms, max_ms = _frames_to_records(batch, header.origin_timestamp)
    if timestamp_type == LOG_APPEND_TIME:
        max_ms = header.base_timestamp // 1000
    return finish_record_batch(
        body,
        count,
        base_offset=header.base_offset + first_delta,
        last_offset_delta=last_delta,
        base_timestamp=base_ms,
        max_timestamp=max_ms,
        compression=compression,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        partition_leader_epoch=partition_leader_epoch,
        xerial=xerial,
        level=level,
    )


def _frames_to_records(batch, origin: int) -> tuple[bytearray, int, int, int, int, int]:
    """The reference loop of :func:`iggy_to_kafka`: ``(records section, count, first frame
    offset_delta, last record offset delta, baseTimestamp ms, maxTimestamp ms)``."""
    body = bytearray()
    count = 0
    first_delta = 0
    last_delta = -1
    base_ms = NO_TIMESTAMP
    max_ms = NO_TIMESTAMP
    encode = encode_record
    for frame in iter_frames(batch):
        ts_ms = (origin + frame.timestamp_delta) // 1000
        if len(frame.user_headers):
            key, value, headers, override = kafka_fields_of(frame.payload, frame.user_headers)
            if override is not None:
                ts_ms = override
        else:
            key, value, headers = None, frame.payload, ()
        if count == 0:
            first_delta = frame.offset_delta
            base_ms = max_ms = ts_ms
        elif ts_ms > max_ms:
            max_ms = ts_ms
        last_delta = frame.offset_delta - first_delta
        encode(body, last_delta, wrap_int64(ts_ms - base_ms), key, value, headers)
        count += 1
    return body, count, first_delta, last_delta, base_ms, max_ms


def iggy_batches_to_kafka(batches: Iterable[bytes | bytearray | memoryview], **options) -> list[bytes]:
    """:func:`iggy_to_kafka` over several stored batches: a Fetch ``records`` field as a buffer list.

    ``options`` as for :func:`iggy_to_kafka` (the same for every batch).
    """
    return [iggy_to_kafka(batch, **options) for batch in batches]


__all__ = [
    "DEFAULT_MAX_UNCOMPRESSED_BYTES",
    "ESCAPED_HEADER_PREFIX",
    "FLAGS_HEADER",
    "FLAG_EMPTY_KEY",
    "FLAG_NULL_VALUE",
    "KEY_HEADER",
    "KINDS_HEADER",
    "KafkaBatchInfo",
    "KafkaCodecError",
    "KafkaFields",
    "RAW_HEADERS_HEADER",
    "TIMESTAMP_HEADER",
    "iggy_batches_to_kafka",
    "iggy_to_kafka",
    "kafka_fields_of",
    "kafka_header_value",
    "kafka_records_to_iggy",
    "kafka_to_iggy",
    "kafka_frame_parts",
    "kafka_user_headers",
    "user_headers_or_none",
    "PREFIX_HEADER",
]
