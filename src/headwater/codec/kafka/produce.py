"""Produce v3-v12 straight from and to bytes: the request body read without kio, the all-success response written without it.

The general path decodes every request with kio after ``guard.check`` and
encodes every response with kio; for Produce that is a walk and a copy of
the records blob per request, and a few entity objects per response. These
two functions do the common case over the bytes and leave everything else to
the general path (they return None), so errors and odd inputs keep exactly
the general path's answers.

Request body (Kafka ``ProduceRequest.json``; v9+ flexible: COMPACT_ lengths
are unsigned varints of length + 1, 0 = null, and each struct ends with a
tagged-field section)::

    transactional_id   NULLABLE_STRING   int16 length, -1 = null  | v9+: COMPACT_NULLABLE_STRING
    acks               INT16
    timeout_ms         INT32
    topic_data         ARRAY             int32 count               | v9+: COMPACT_ARRAY
      name             STRING            int16 length              | v9+: COMPACT_STRING
      partition_data   ARRAY
        index          INT32
        records        NULLABLE_BYTES    int32 length, -1 = null   | v9+: COMPACT_NULLABLE_BYTES
        (v9+ tagged fields)
      (v9+ tagged fields)
    (v9+ tagged fields)

:func:`parse_request` returns None (the general path then runs) for a null or
negative-length ``name``, a negative count, a name that is not UTF-8, any
tagged field (kio's path drops unknown ones; Produce v3-v12 defines none in
the request), or a body that runs past the frame. Bytes after the body are
ignored, as by the general path. ``records`` is a memoryview into the frame
(no copy): valid while the frame is.

Response body, all partitions successful (``ProduceResponse.json``)::

    responses          ARRAY                                      | v9+: COMPACT_ARRAY
      name             STRING                                     | v9+: COMPACT_STRING
      partition_responses ARRAY
        index          INT32
        error_code     INT16      0
        base_offset    INT64
        log_append_time_ms INT64  -1 (CreateTime topics)
        log_start_offset INT64    v5+
        record_errors  ARRAY      v8+, empty
        error_message  NULLABLE_STRING v8+, null
        (v9+ tagged fields: none; v10+ current_leader is tagged and left out)
      (v9+ tagged fields)
    throttle_time_ms   INT32      0
    (v9+ tagged fields: none; v10+ node_endpoints is tagged and left out)
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .framing import FrameError, read_uvarint
from .guard import uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_PART_OK = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time_ms
_Q = struct.Struct(">q")

FIRST_VERSION = 3
LAST_VERSION = 12
FLEXIBLE_FROM = 9


class PartitionData(NamedTuple):
    index: int
    records: memoryview | None


class TopicData(NamedTuple):
    name: str
    partition_data: tuple[PartitionData, ...]


class ProduceRequest(NamedTuple):
    """The fields the Produce handler reads, as kio's ``ProduceRequest`` names them (``timeout_ms``
    is milliseconds, where kio's ``timeout`` is a timedelta)."""

    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: tuple[TopicData, ...]


def _length(mv: memoryview, pos: int, flexible: bool, fixed: struct.Struct) -> tuple[int, int]:
    """An array or string length at ``pos`` and the position after it: a flexible version's
    compact form (unsigned varint, length + 1; 0 = null reads -1), else ``fixed`` (int16 for a
    string, int32 for an array or bytes; -1 = null)."""
    if flexible:
        n, pos = read_uvarint(mv, pos)
        return n - 1, pos
    return fixed.unpack_from(mv, pos)[0], pos + fixed.size


def parse_request(frame: bytes | memoryview, pos: int, version: int) -> ProduceRequest | None:
    """The Produce body at ``pos`` of ``frame`` (after the request header), or None when the
    general path must read it (see the module docstring)."""
    if not FIRST_VERSION <= version <= LAST_VERSION:
        return None
    mv = memoryview(frame)
    end = len(mv)
    flexible = version >= FLEXIBLE_FROM
    try:
        if flexible:
            n, pos = read_uvarint(mv, pos)
            if n == 0:
                txn = None
            else:
                txn = str(mv[pos : pos + n - 1], "utf-8")
                pos += n - 1
        else:
            (n,) = _I16.unpack_from(mv, pos)
            pos += 2
            if n == -1:
                txn = None
            elif n < 0:
                return None
            else:
                txn = str(mv[pos : pos + n], "utf-8")
                pos += n
        if pos > end:
            return None
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(mv, pos)
        pos += 6
        topics, pos = _length(mv, pos, flexible, _I32)
        if topics < 0 or topics > end - pos:
            return None
        topic_data = []
        for _ in range(topics):
            n, pos = _length(mv, pos, flexible, _I16)
            if n < 0 or pos + n > end:
                return None
            name = str(mv[pos : pos + n], "utf-8")
            pos += n
            parts, pos = _length(mv, pos, flexible, _I32)
            if parts < 0 or parts > end - pos:
                return None
            partition_data = []
            for _ in range(parts):
                (index,) = _I32.unpack_from(mv, pos)
                pos += 4
                n, pos = _length(mv, pos, flexible, _I32)
                if n < -1 or pos + n > end:
                    return None
                if n == -1:
                    records = None
                else:
                    records = mv[pos : pos + n]
                    pos += n
                if flexible:
                    if mv[pos] != 0:  # tagged fields
                        return None
                    pos += 1
                partition_data.append(PartitionData(index, records))
            if flexible:
                if mv[pos] != 0:
                    return None
                pos += 1
            topic_data.append(TopicData(name, tuple(partition_data)))
        if flexible:
            if mv[pos] != 0:
                return None
            pos += 1
        if pos > end:
            return None
    except (FrameError, IndexError, struct.error, UnicodeDecodeError):
        return None
    return ProduceRequest(txn, acks, timeout_ms, tuple(topic_data))


def encode_response(version: int, topics: list[tuple[str, list[tuple[int, int, int]]]]) -> bytes:
    """The ProduceResponse body of ``version`` (3-12) when every partition succeeded:
    ``topics`` is [(name, [(index, base_offset, log_start_offset), ...]), ...]."""
    flexible = version >= FLEXIBLE_FROM
    out = bytearray()
    # the partition's tail after log_append_time: log_start_offset (v5+), record_errors and
    # error_message (v8+), the tagged-field section (v9+)
    if flexible:
        tail = b"\x01\x00\x00"  # empty compact array, null compact string, no tagged fields
        out += uvarint(len(topics) + 1)
    else:
        tail = _I32.pack(0) + _I16.pack(-1) if version >= 8 else b""  # empty array, null string
        out += _I32.pack(len(topics))
    for name, parts in topics:
        raw = name.encode("utf-8")
        if flexible:
            out += uvarint(len(raw) + 1)
            out += raw
            out += uvarint(len(parts) + 1)
        else:
            out += _I16.pack(len(raw))
            out += raw
            out += _I32.pack(len(parts))
        for index, base_offset, log_start in parts:
            out += _PART_OK.pack(index, 0, base_offset, -1)
            if version >= 5:
                out += _Q.pack(log_start)
            out += tail
        if flexible:
            out.append(0)
    out += _I32.pack(0)  # throttle_time_ms
    if flexible:
        out.append(0)
    return bytes(out)
