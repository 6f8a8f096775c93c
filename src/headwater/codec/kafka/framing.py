"""Kafka framing, sans-I/O: the size prefix, request headers v1/v2, response headers v0/v1.

Source: Kafka protocol guide ("Common Request and Response Structure") and
``RequestHeader.json`` / ``ResponseHeader.json``. All integers big-endian::

    frame            size int32 (bytes after this field), then header + body
    request header   v1: api_key int16 | api_version int16 | correlation_id int32 |
                         client_id nullable string (int16 length, -1 = null)
                     v2: v1 + tagged fields (unsigned varint count, then per field
                         tag uvarint | size uvarint | bytes)
    response header  v0: correlation_id int32
                     v1: v0 + tagged fields (a single 0 byte when empty)

A flexible request version uses request header v2 and response header v1,
except ApiVersions, whose response header is always v0 (clients read it
before they know which versions the broker speaks). The client_id is a
legacy (int16-length) string in both header versions; request bodies are
checked by ``guard.py`` before kio reads them.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_RESPONSE_V0 = struct.Struct(">ii")  # size, correlation_id


class FrameError(Exception):
    """A request frame that cannot be read: the connection is closed (``offset``: where it failed)."""

    def __init__(self, message: str, offset: int | None = None):
        super().__init__(message if offset is None else f"{message} (byte {offset})")
        self.offset = offset


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the first 8 bytes of a request frame body."""
    if len(frame) < _HEAD.size:
        raise FrameError(f"request shorter than the 8-byte header start: {len(frame)} bytes", 0)
    return _HEAD.unpack_from(frame, 0)


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint at ``pos``: (value, next position). Raises FrameError."""
    result = 0
    shift = 0
    start = pos
    while True:
        if pos >= len(buf):
            raise FrameError("unsigned varint runs past the end of the request", start)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise FrameError("unsigned varint longer than 10 bytes", start)


def decode_request_header(frame: bytes | memoryview, flexible: bool) -> tuple[RequestHeader, int]:
    """The request header (v2 when ``flexible``, else v1) and the offset of the body.

    Raises FrameError for a header that does not fit the frame. A client_id
    that is not UTF-8 is read with U+FFFD for its bad bytes, as Kafka reads it.
    """
    api_key, api_version, correlation_id = peek_header(frame)
    pos = _HEAD.size
    if len(frame) < pos + 2:
        raise FrameError("request header ends before client_id", pos)
    (length,) = _I16.unpack_from(frame, pos)
    pos += 2
    client_id: str | None
    if length < 0:
        if length != -1:
            raise FrameError(f"client_id length {length}", pos - 2)
        client_id = None
    else:
        if pos + length > len(frame):
            raise FrameError(f"client_id of {length} bytes runs past the request", pos)
        # Kafka decodes header strings leniently (new String(bytes, UTF_8)): bad bytes become U+FFFD
        client_id = bytes(frame[pos : pos + length]).decode("utf-8", "replace")
        pos += length
    if flexible:
        count, pos = read_uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = read_uvarint(frame, pos)
            size, pos = read_uvarint(frame, pos)
            pos += size
            if pos > len(frame):
                raise FrameError("request header tagged field runs past the request", pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def response_prefix(correlation_id: int, body_length: int, flexible_header: bool) -> bytes:
    """Size prefix + response header v0 (or v1 with an empty tagged-field section)."""
    if flexible_header:
        return _RESPONSE_V0.pack(body_length + 5, correlation_id) + b"\x00"
    return _RESPONSE_V0.pack(body_length + 4, correlation_id)
