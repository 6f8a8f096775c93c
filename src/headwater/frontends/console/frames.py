"""What the console's message browser shows of one stored frame: payload as text, JSON or hex,
Iggy user headers, the Kafka key, and the byte inspector's field tree of the frame.

The field tree comes from :mod:`headwater.inspect` (the batch is inspected once and each frame
gets its ``frame[i]`` node: the 48-byte frame header fields, payload, each user-header TLV field,
with type, decoded value, byte offset and size inside the batch as read, and the frame checksum
shown valid or not). Kafka key and headers are read back the way a Kafka consumer would see them
(:func:`headwater.codec.kafka.convert.kafka_fields_of`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ...codec import batch as batch_codec
from ...codec import headers as hdr
from ...codec.kafka.convert import kafka_fields_of
from ...inspect import LayoutError, Node, inspect_bytes

FORMATS = ("text", "json", "hex")


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
    tree: Node | None  # None only if the inspector refused a batch storage accepted


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


def show_batches(batches, fmt: str, first: int, limit: int) -> list[Shown]:
    """The messages at offsets ``first`` .. in ``batches`` (stored bytes, as a partition read
    returns them), at most ``limit``."""
    out: list[Shown] = []
    for b in batches:
        h = batch_codec.read_header(b)
        trees = _frame_trees(b)
        for i, f in enumerate(batch_codec.iter_frames(b)):
            offset = h.base_offset + f.offset_delta
            if offset < first:
                continue
            if len(out) >= limit:
                return out
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
                    tree=trees[i] if i < len(trees) else None,
                )
            )
    return out


def _frame_trees(batch) -> list[Node]:
    """The inspector's ``frame[i]`` nodes of one batch, in frame order."""
    try:
        root = inspect_bytes(bytes(batch), "batch")
    except (LayoutError, ValueError):
        return []
    return [n for n in root.children if n.name.startswith("frame[")]
