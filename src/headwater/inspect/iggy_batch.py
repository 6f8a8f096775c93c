"""Field trees of Iggy batches, their message frames and user headers, segment and index files.

Layouts: ``shared/spec/iggy-message-batches.md`` (batch header 256 bytes, frame
header 48 bytes, payload then user headers), ``encodings.mdx`` "User headers
block" (TLV: ``[kind u8][length u32][data]``, key then value), and
``server/storage-engine.mdx`` (a ``.log`` is stamped batches back to back, a
preallocated tail of zeros ends it; a ``.index`` is 24-byte entries
``offset u64, timestamp u64 (µs), position u64``). All little-endian.

Both checksums are recomputed and shown ``valid`` or ``INVALID`` (frame:
``xxh3_64(frame[8:])``; batch: ``xxh3_64`` of the six header fields then every
frame's stored checksum). Timestamps are microseconds since the Unix epoch.
"""

from __future__ import annotations

import datetime
import struct

import xxhash

from ..codec.headers import Kind
from .tree import Cursor, LayoutError, Node, building, describe_bytes

__all__ = ["batch", "batches", "segment_file", "index_file", "user_headers", "BATCH_HEADER_SIZE"]

BATCH_HEADER_SIZE = 256
FRAME_HEADER_SIZE = 48
INDEX_ENTRY_SIZE = 24


def _count(n: int, one: str, many: str) -> str:
    """``1 entry``, ``0 entries``, ``2 entries``."""
    return f"{n} {one if n == 1 else many}"


def _time_us(value: int) -> str:
    if value == 0:
        return "0"
    try:
        moment = datetime.datetime.fromtimestamp(value / 1e6, datetime.timezone.utc)
        return f"{value} ({moment.isoformat(timespec='microseconds').replace('+00:00', 'Z')})"
    except (OverflowError, OSError, ValueError):
        return str(value)


def _kind_name(kind: int) -> str:
    try:
        return Kind(kind).name.lower()
    except ValueError:
        return f"kind {kind}"


def _header_value(kind: int, data: bytes) -> str:
    ints = {Kind.INT8: "<b", Kind.INT16: "<h", Kind.INT32: "<i", Kind.INT64: "<q",
            Kind.UINT8: "<B", Kind.UINT16: "<H", Kind.UINT32: "<I", Kind.UINT64: "<Q",
            Kind.FLOAT32: "<f", Kind.FLOAT64: "<d"}
    if kind in ints and len(data) == struct.calcsize(ints[kind]):
        return str(struct.unpack(ints[kind], data)[0])
    if kind in (Kind.INT128, Kind.UINT128) and len(data) == 16:
        return str(int.from_bytes(data, "little", signed=kind == Kind.INT128))
    if kind == Kind.BOOL and len(data) == 1:
        return {0: "false", 1: "true"}.get(data[0], f"0x{data.hex()} (not a bool)")
    if kind == Kind.STRING:
        try:
            return repr(data.decode("utf-8"))
        except UnicodeDecodeError:
            return f"0x{data.hex()} (not UTF-8)"
    return describe_bytes(data)


def user_headers(c: Cursor, length: int) -> None:
    """The user headers block of ``length`` bytes as key/value pairs (TLV fields)."""
    end = c.pos + length
    pair = 0
    while c.pos < end:
        with c.group(f"header[{pair}]", "key/value") as node:
            names = []
            for part in ("key", "value"):
                if c.pos >= end:
                    raise c.fail(f"user header {pair} has a key and no value")
                with c.group(part, "TLV") as tlv:
                    kind = c.int("kind", "u8", show=_kind_name)
                    size = c.int("length", "u32")
                    if size > end - c.pos:
                        raise c.fail(f"user header {part} length {size} runs past the block ({end - c.pos} left)",
                                     c.pos - 4)
                    data = c.raw("data", size, show=lambda b, k=kind: _header_value(k, b))
                    tlv.value = _header_value(kind, data)
                    names.append(tlv.value)
            node.value = f"{names[0]}: {names[1]}"
            if names[0].startswith("'kafka."):
                node.about = "carries a Kafka record field (docs/kafka-mapping.md)"
        pair += 1


def _frame(c: Cursor, index: int, batch_end: int) -> bytes:
    """One frame; returns its stored checksum bytes."""
    start = c.pos
    with c.group(f"frame[{index}]", "message frame") as node:
        if batch_end - c.pos < FRAME_HEADER_SIZE:
            raise c.fail(f"frame {index} needs a {FRAME_HEADER_SIZE}-byte header, {batch_end - c.pos} left")
        stored = bytes(c.data[c.pos:c.pos + 8])
        headers_len = c.peek_int("u32", c.pos + 32)
        payload_len = c.peek_int("u32", c.pos + 36)
        total = FRAME_HEADER_SIZE + payload_len + headers_len
        fits = total <= batch_end - start
        checksum = c.int("checksum", "u64", "xxh3_64 of frame bytes 8.. to the end of the user headers",
                         show=lambda v: f"0x{v:016x}")
        if fits:
            actual = xxhash.xxh3_64_intdigest(bytes(c.data[start + 8:start + total]))
            node.children[-1].check = "valid" if actual == checksum else f"INVALID (computed 0x{actual:016x})"
        c.int("id", "u128", "message id", show=lambda v: f"0x{v:032x}" if v else "0")
        c.int("offset_delta", "u32", "offset = base_offset + offset_delta")
        c.int("timestamp_delta", "u32", "µs after origin_timestamp")
        c.int("user_headers_length", "u32")
        c.int("payload_length", "u32")
        reserved = c.int("reserved", "u64", "must be zero")
        if reserved:
            raise c.fail("frame reserved bytes are not zero", c.pos - 8)
        if not fits:
            raise c.fail(
                f"frame {index} is {total} bytes (48 + payload {payload_len} + headers {headers_len}) "
                f"but only {batch_end - start} are left in the batch", start + 32)
        c.raw("payload", payload_len)
        if headers_len:
            with c.group("user_headers", "TLV block"):
                user_headers(c, headers_len)
        node.value = f"{payload_len} B payload"
    return stored


def batch(c: Cursor, name: str = "batch") -> Node:
    """One batch at the cursor (header, then every frame)."""
    start = c.pos
    with c.group(name, "Iggy batch") as node:
        if c.remaining < BATCH_HEADER_SIZE:
            raise c.fail(f"a batch header is {BATCH_HEADER_SIZE} bytes, {c.remaining} left")
        partition_id = c.int("partition_id", "u64", "server-stamped")
        base_offset = c.int("base_offset", "u64", "server-stamped; first message's offset")
        base_timestamp = c.int("base_timestamp", "u64", "server-stamped, µs", show=_time_us)
        origin = c.int("origin_timestamp", "u64", "earliest producer time, µs", show=_time_us)
        length = c.int("batch_length", "u64", "256 + frames")
        checksum_node_at = len(node.children)
        checksum = c.int("batch_checksum", "u64", "xxh3_64 of the header fields and frame checksums",
                         show=lambda v: f"0x{v:016x}")
        count = c.int("message_count", "u32")
        reserved = c.raw("reserved", BATCH_HEADER_SIZE - 52, about="must be zero",
                         show=lambda b: "zero" if not any(b) else "NOT ZERO")
        if any(reserved):
            first = next(i for i, b in enumerate(reserved) if b)
            raise c.fail("batch reserved bytes are not zero", start + 52 + first)
        if length < BATCH_HEADER_SIZE or length > c.end - start:
            raise c.fail(f"batch_length {length} is outside 256..{c.end - start} (bytes available)", start + 32)
        end = start + length
        sums = []
        for i in range(count):
            sums.append(_frame(c, i, end))
        if c.pos != end:
            raise c.fail(f"{end - c.pos} bytes after message {count - 1} inside batch_length", c.pos)
        digest = xxhash.xxh3_64_intdigest(
            struct.pack("<5QI", partition_id, base_offset, base_timestamp, origin, length, count) + b"".join(sums)
        )
        node.children[checksum_node_at].check = (
            "valid" if digest == checksum else f"INVALID (computed 0x{digest:016x})"
        )
        last = base_offset + count - 1 if count else base_offset
        node.value = f"offsets {base_offset}..{last}, {count} message{'s' if count != 1 else ''}"
    return node


def batches(c: Cursor, *, allow_zero_tail: bool = False) -> int:
    """Batches back to back to the end (a ``.log``, a poll reply). Returns how many."""
    n = 0
    while c.remaining > 0:
        if allow_zero_tail and c.remaining >= 40 and c.peek_int("u64", c.pos + 32) == 0:
            tail = bytes(c.data[c.pos:c.end])
            if not any(tail):
                c.leaf("preallocated", "zeros", f"{len(tail)} bytes", len(tail), "unused end of the file")
                c.pos = c.end
                break
        batch(c, f"batch[{n}]")
        n += 1
    return n


def segment_file(data: bytes, name: str = "segment") -> Node:
    root = Node(name, "segment .log")
    c = Cursor(data, root)
    with building(root, c):
        n = batches(c, allow_zero_tail=True)
        root.value = _count(n, "batch", "batches")
    return root


def index_file(data: bytes, name: str = "index") -> Node:
    root = Node(name, "segment .index", _count(len(data) // INDEX_ENTRY_SIZE, "entry", "entries"), 0, len(data))
    c = Cursor(data, root)
    i = 0
    while c.remaining >= INDEX_ENTRY_SIZE:
        with c.group(f"entry[{i}]", "index entry"):
            c.int("offset", "u64", "base_offset of the batch")
            c.int("timestamp", "u64", "its base_timestamp, µs", show=_time_us)
            c.int("position", "u64", "byte position in the .log")
        i += 1
    if c.remaining:
        error = LayoutError(c.pos, f"{c.remaining} bytes left over: an index is whole 24-byte entries")
        error.tree = root
        raise error
    return root
