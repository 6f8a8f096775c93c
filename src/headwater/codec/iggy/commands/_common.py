"""Helpers shared by the command modules (not public API)."""

from __future__ import annotations

import struct

from ...errors import InvalidFormat
from ..primitives import Reader

U8 = struct.Struct("<B")
U16 = struct.Struct("<H")
U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")

Buffer = bytes | bytearray | memoryview


def expect_empty(body: Buffer, what: str) -> None:
    """Commands with an empty payload: any byte is an error."""
    if len(body):
        raise InvalidFormat(f"{what}: payload must be empty, got {len(body)} bytes", offset=0)


def read_flag(r: Reader, what: str) -> bool:
    """A 0/1 presence flag; anything else raises :class:`InvalidFormat`."""
    start = r.pos
    value = r.u8(what)
    if value > 1:
        raise InvalidFormat(f"{what}: flag must be 0 or 1, got {value}", offset=r.base + start)
    return value == 1


def read_options_prefixed(r: Reader, what: str = "options") -> bytes:
    """``[len u32][options TLV]`` as raw bytes (decoded by ``headwater.codec.headers``)."""
    return r.raw(r.u32(f"{what} length"), what)


def options_prefixed(options: Buffer) -> bytes:
    """``[len u32][options TLV]``."""
    return U32.pack(len(options)) + bytes(options)


def read_count(r: Reader, min_item_size: int, what: str) -> int:
    """A u32 element count, checked against the bytes left (each item needs ``min_item_size``)."""
    start = r.pos
    count = r.u32(what)
    if count * min_item_size > r.remaining:
        raise InvalidFormat(
            f"{what}: {count} items cannot fit in {r.remaining} bytes", offset=r.base + start
        )
    return count
