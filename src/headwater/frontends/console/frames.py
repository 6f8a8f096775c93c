"""What the console's message browser shows of one stored frame: payload as text, JSON or hex,
Iggy user headers, the Kafka key, and a field tree of the frame's bytes.

The field tree is our own, small one: the 48-byte frame header fields (layout in
:mod:`headwater.codec.batch`: checksum u64, id u128, offset_delta u32, timestamp_delta u32,
user_headers_length u32, payload_length u32, reserved u64; all little-endian), then the payload
and the user-headers block with one node per TLV field (kind u8, length u32, data). Each node
gives the field name, its byte offset inside the frame, its size and its decoded value; the
checksum node says whether xxh3_64(frame[8:]) matches. (The byte inspector of issue 11, item 3,
is a separate module; the console does not depend on it.)

Kafka key and headers are read back the way a Kafka consumer would see them
(:func:`headwater.codec.kafka.convert.kafka_fields_of`).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

import xxhash

from ...codec import batch as batch_codec
from ...codec import headers as hdr
from ...codec.kafka.convert import kafka_fields_of

_FRAME = struct.Struct("<QQQIIIIQ")
_TLV = struct.Struct("<BI")
FORMATS = ("text", "json", "hex")


@dataclass
class Node:
    """One field of the tree: ``offset`` and ``size`` in bytes from the frame's first byte."""

    name: str
    offset: int
    size: int
    value: str
    children: list["Node"] = field(default_factory=list)


@dataclass
class Shown:
    """One message as the browser lists it."""

    offset: int
    timestamp_us: int
    origin_timestamp_us: int
    id: int
    payload: str
    payload_size: int
    headers: list[tuple[str, str, str]]  # (key, kind name, value)
    kafka_key: str | None
    tree: Node


def render_payload(data: bytes, fmt: str) -> str:
    """``text`` (UTF-8, undecodable bytes escaped), ``json`` (pretty, or the text when it is not
    JSON), ``hex`` (space-separated bytes)."""
    if fmt == "hex":
        return data.hex(" ")
    text = data.decode("utf-8", errors="backslashreplace")
    if fmt == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text


def _kind_name(kind: int) -> str:
    try:
        return hdr.Kind(kind).name.lower()
    except ValueError:
        return str(kind)


def _value_text(kind: int, value: bytes) -> str:
    if kind == hdr.Kind.RAW:
        return value.hex(" ")
    try:
        return str(hdr.unpack_value(kind, value))
    except Exception:  # a wrong-width value of a fixed kind: show its bytes
        return value.hex(" ")


def frame_tree(frame: bytes) -> Node:
    """The field tree of one frame (48-byte header, payload, user headers)."""
    checksum, id_lo, id_hi, od, td, uh_len, p_len, reserved = _FRAME.unpack_from(frame, 0)
    ok = xxhash.xxh3_64_intdigest(frame[8:]) == checksum
    head = [
        Node("checksum", 0, 8, f"0x{checksum:016x} ({'valid' if ok else 'INVALID'})"),
        Node("id", 8, 16, str(id_lo | (id_hi << 64))),
        Node("offset_delta", 24, 4, str(od)),
        Node("timestamp_delta", 28, 4, f"{td} µs"),
        Node("user_headers_length", 32, 4, str(uh_len)),
        Node("payload_length", 36, 4, str(p_len)),
        Node("reserved", 40, 8, str(reserved)),
    ]
    root = Node("frame", 0, len(frame), f"{len(frame)} bytes")
    root.children.append(Node("header", 0, 48, "48 bytes", head))
    root.children.append(Node("payload", 48, p_len, f"{p_len} bytes"))
    block = Node("user_headers", 48 + p_len, uh_len, f"{uh_len} bytes")
    pos, end = 48 + p_len, 48 + p_len + uh_len
    index = 0
    while pos + 5 <= end:
        kind, length = _TLV.unpack_from(frame, pos)
        data = frame[pos + 5 : pos + 5 + length]
        role = "key" if index % 2 == 0 else "value"
        block.children.append(
            Node(f"{role} [{_kind_name(kind)}]", pos, 5 + length, _value_text(kind, data),
                 [Node("kind", pos, 1, str(kind)), Node("length", pos + 1, 4, str(length)),
                  Node("data", pos + 5, length, data[:64].hex(" ") + (" ..." if length > 64 else ""))])
        )
        pos += 5 + length
        index += 1
    root.children.append(block)
    return root


def show_batches(batches, fmt: str, first: int, limit: int) -> list[Shown]:
    """The messages at offsets ``first`` .. in ``batches`` (stored bytes, as a partition read
    returns them), at most ``limit``."""
    out: list[Shown] = []
    for b in batches:
        h = batch_codec.read_header(b)
        mv = memoryview(b)
        for f in batch_codec.iter_frames(b):
            offset = h.base_offset + f.offset_delta
            if offset < first:
                continue
            if len(out) >= limit:
                return out
            frame = mv[f.position : f.position + f.size].tobytes()
            payload = bytes(f.payload)
            user_headers = bytes(f.user_headers)
            headers = []
            if user_headers:
                try:
                    headers = [
                        (u.key.decode("utf-8", "backslashreplace"), _kind_name(u.kind), _value_text(u.kind, u.value))
                        for u in hdr.decode_user_headers(user_headers)
                    ]
                except Exception as e:  # stored bytes passed admission; show rather than fail
                    headers = [("(undecodable)", "", str(e))]
            key = kafka_fields_of(payload, user_headers)[0]
            out.append(
                Shown(
                    offset=offset,
                    timestamp_us=h.base_timestamp,
                    origin_timestamp_us=h.origin_timestamp + f.timestamp_delta,
                    id=f.id,
                    payload=render_payload(payload, fmt),
                    payload_size=len(payload),
                    headers=headers,
                    kafka_key=None if key is None else render_payload(bytes(key), "text"),
                    tree=frame_tree(frame),
                )
            )
    return out
