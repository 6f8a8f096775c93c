"""The compaction key and tombstone mark of a stored message (frame).

Compaction (``storage/local/compaction.py``) keeps the newest message per key.
A message's key, read from its frame's user headers (TLV, see
:mod:`headwater.codec.headers`) and 16-byte ``id`` (frame bytes 8..24)::

    source                                  key identity (bytes)
    kafka.key (+ kafka.key.1, .2 ... in     b"k" + the concatenated value bytes of those
    TLV order), any kind                    fields (the Kafka key; an Iggy producer may
                                            write kafka.key itself)
    kafka.prefix (Uint32 N) and no          b"k" + the key at the start of the payload
    kafka.key                               (a key too big for user headers: zigzag varint
                                            keyLength, key; -1 = null: no Kafka key)
    kafka.flags (Uint8) bit 1 set           b"k" (the empty Kafka key b"", not null)
    neither, and a nonzero frame id         b"i" + the id, 16 bytes LE (an Iggy message's
                                            key is its message id)
    neither, and id 0                       None: no key (refused on a compacted topic)

A message whose ``kafka.flags`` has bit 0 set (the Kafka record's value is
null) is a *tombstone*. The reserved names are those ``codec/kafka/convert.py``
writes; they are part of the stored layout, so this module reads them without
the Kafka codec.
"""

from __future__ import annotations

import struct

KEY_HEADER = b"kafka.key"
FLAGS_HEADER = b"kafka.flags"
PREFIX_HEADER = b"kafka.prefix"
FLAG_NULL_VALUE = 0x01
FLAG_EMPTY_KEY = 0x02
_FIELD_HEAD = struct.Struct("<BI")  # kind, length
_KEY_PART = KEY_HEADER + b"."


def _prefix_key(payload: memoryview, n: int) -> bytes | None:
    """The key at the start of a ``kafka.prefix`` payload (None: null or unreadable)."""
    value = shift = pos = 0
    while pos < min(n, 10):
        b = payload[pos]
        value |= (b & 0x7F) << shift
        pos += 1
        if not b & 0x80:
            length = (value >> 1) ^ -(value & 1)
            if length < 0 or pos + length > n:
                return None
            return bytes(payload[pos : pos + length])
        shift += 7
    return None


def compaction_key(
    user_headers: bytes | memoryview, message_id: int, payload: bytes | memoryview = b""
) -> tuple[bytes | None, bool]:
    """``(key identity or None, is_tombstone)`` of one message (see the module doc).

    ``user_headers`` is the frame's TLV block (possibly empty), ``message_id``
    its u128 id, ``payload`` its payload (read only for ``kafka.prefix``). A malformed block (a field running past the end) is read up to
    the damage: the stored frame passed admission, so this does not happen for
    stored data.
    """
    mv = memoryview(user_headers)
    size = len(mv)
    pos = 0
    parts: list[bytes] = []
    flags = 0
    prefix = -1
    unpack = _FIELD_HEAD.unpack_from
    while pos + 5 <= size:
        _, klen = unpack(mv, pos)
        kstart = pos + 5
        vpos = kstart + klen
        if vpos + 5 > size:
            break
        _, vlen = unpack(mv, vpos)
        vstart = vpos + 5
        vend = vstart + vlen
        if vend > size:
            break
        name = mv[kstart:vpos]
        if name[:9] == KEY_HEADER:
            if klen == 9 or (name[9:10] == b"." and bytes(name[10:]).isdigit()):
                parts.append(bytes(mv[vstart:vend]))
        elif klen == 11 and name == FLAGS_HEADER and vlen == 1:
            flags = mv[vstart]
        elif klen == 12 and name == PREFIX_HEADER and vlen == 4:
            prefix = int.from_bytes(mv[vstart:vend], "little")
        pos = vend
    tombstone = bool(flags & FLAG_NULL_VALUE)
    if parts:
        return b"k" + b"".join(parts), tombstone
    if prefix >= 0 and prefix <= len(payload):
        key = _prefix_key(memoryview(payload), prefix)
        if key is not None:
            return b"k" + key, tombstone
    if flags & FLAG_EMPTY_KEY:
        return b"k", tombstone
    if message_id:
        return b"i" + message_id.to_bytes(16, "little"), tombstone
    return None, tombstone
