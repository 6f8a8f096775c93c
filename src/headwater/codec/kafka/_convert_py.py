"""The per-record loops of :mod:`.convert` in pure Python: tight walks over bytes.

Same functions, arguments and results as the compiled twin ``_convert_c.pyx``
(used instead of this module when it is built). Records and frames are read with
``struct`` and byte indexing into flat per-field lists, and the output is written
straight into one buffer: no object per record. The loops carry no error
bookkeeping: for anything they do not handle, and wherever the input is wrong,
they return ``None`` and :mod:`.convert` runs its reference code
(``iter_record_fields`` + ``build_batch``, ``iter_frames`` + ``encode_record``),
which finds and raises the precise error. Layouts: ``record_batch.py`` and
``headwater/codec/batch.py``.
"""

from __future__ import annotations

import struct

import xxhash

from ..batch import BATCH_HEADER_SIZE, FRAME_HEADER_SIZE, MAX_TIMESTAMP_DELTA_US
from ..headers import MAX_FIELD_LENGTH
from .errors import InvalidRecord
from .record_batch import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    _SMALL_VARINTS,
    _read_zigzag,
    encode_varint,
    wrap_int64,
)

_U64_MAX = (1 << 64) - 1
_U64_MAX_MS = _U64_MAX // 1000
_FRAME_BODY = struct.Struct("<QQIIIIQ")  # frame bytes 8..48: id lo, id hi, deltas, lengths, reserved
_FRAME_FIELDS = struct.Struct("<IIII")  # frame bytes 24..40: offset_delta, timestamp_delta, lengths
_ORIGIN_LENGTH = struct.Struct("<24xQQ")  # batch header: origin_timestamp, batch_length
_BATCH_HEAD = struct.Struct("<QQQQQQI")  # batch header bytes 0..52
_CHECKSUM_FIELDS = struct.Struct("<QQQQQI")
_U64 = struct.Struct("<Q")
_TLV_HEAD = struct.Struct("<BI")
_I64_LE = struct.Struct("<q")
_ZERO_RESERVED = bytes(BATCH_HEADER_SIZE - 52)
_KEY_NAME = _TLV_HEAD.pack(2, 9) + b"kafka.key"
_FLAGS = [b""] + [_TLV_HEAD.pack(2, 11) + b"kafka.flags" + _TLV_HEAD.pack(9, 1) + bytes((f,)) for f in (1, 2, 3)]
_TIMESTAMP_NAME = _TLV_HEAD.pack(2, 15) + b"kafka.timestamp" + _TLV_HEAD.pack(7, 8)
_xxh3 = xxhash.xxh3_64_intdigest


def _varint(buf, pos: int, stop: int, max_bytes: int) -> tuple[int, int]:
    """A zigzag varint at ``pos`` as ``(value, next pos)``; next pos -1 where
    ``record_batch._read_zigzag`` raises (past ``stop``, too long, out of range)."""
    try:
        return _read_zigzag(buf, pos, stop, max_bytes, "")
    except InvalidRecord:
        return 0, -1


def kafka_records_to_iggy(
    records, count, base_timestamp, now_ms, require_key, has_low, low, has_high, high, user_headers_of
):
    """See ``_convert_c.kafka_records_to_iggy``: an uncompressed records section -> ``(unstamped
    Iggy batch, max timestamp ms)``, or None where the reference code must run."""
    buf = records
    end = len(buf)
    if count <= 0 or count > end // 7:
        return None
    varint = _varint
    ts_of = [0] * count
    key_at = [0] * count
    key_len = [0] * count
    value_at = [0] * count
    value_len = [0] * count
    headers_at = [0] * count  # position of the header count; -1: no headers
    record_end = [0] * count
    pos = 0
    try:
        for i in range(count):
            # Every varint takes the one- or two-byte path inline when it can. A field read
            # past the record's end leaves pos past it for good, so the last check catches it.
            b = buf[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                b = (b & 0x7F) | (buf[pos + 1] << 7)
                length = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                length, pos = varint(buf, pos, end, 5)
                if pos < 0:
                    return None
            stop = pos + length
            if length < 6 or stop > end:
                return None
            b = buf[pos + 1]  # after the attributes byte
            if b < 0x80:
                delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                delta, pos = varint(buf, pos + 1, stop, 10)
                if pos < 0:
                    return None
            ts = base_timestamp + delta
            ts_of[i] = ts if INT64_MIN <= ts <= INT64_MAX else wrap_int64(ts)
            b = buf[pos]
            if b < 0x80:
                pos += 1
            else:
                _, pos = varint(buf, pos, stop, 5)  # offsetDelta: renumbered, only checked
                if pos < 0:
                    return None
            for lengths, places in ((key_len, key_at), (value_len, value_at)):
                b = buf[pos]
                if b < 0x80:
                    n = (b >> 1) ^ -(b & 1)
                    pos += 1
                elif buf[pos + 1] < 0x80:
                    b = (b & 0x7F) | (buf[pos + 1] << 7)
                    n = (b >> 1) ^ -(b & 1)
                    pos += 2
                else:
                    n, pos = varint(buf, pos, stop, 5)
                    if pos < 0:
                        return None
                if n < 0:
                    lengths[i] = -1
                else:
                    if pos + n > stop:
                        return None
                    lengths[i] = n
                    places[i] = pos
                    pos += n
            if buf[pos] == 0:
                headers_at[i] = -1
                pos += 1
            else:
                headers_at[i] = pos
                header_count, pos = varint(buf, pos, stop, 5)
                if pos < 0 or header_count < 0 or header_count * 2 > stop - pos:
                    return None
                for _ in range(header_count):
                    n, pos = varint(buf, pos, stop, 5)
                    if pos < 0 or n < 0 or pos + n > stop:
                        return None
                    n, pos = varint(buf, pos + n, stop, 5)
                    if pos < 0:
                        return None
                    if n >= 0:
                        if pos + n > stop:
                            return None
                        pos += n
                if header_count == 0:
                    headers_at[i] = -1
            if pos != stop:
                return None
            record_end[i] = stop
    except IndexError:
        return None
    if pos != end:
        return None
    if require_key and -1 in key_len:
        return None
    if has_low or has_high:
        for ts in ts_of:
            if ts != -1 and ((has_low and ts < low) or (has_high and ts > high)):
                return None
    stamps = [ts for ts in ts_of if 0 <= ts <= _U64_MAX_MS]
    if stamps:
        origin = min(stamps) * 1000
        if max(stamps) * 1000 - origin > MAX_TIMESTAMP_DELTA_US:
            return None  # the reference searches for the best window
    else:
        origin = min(max(now_ms, 0), _U64_MAX_MS) * 1000
    window_end = min(origin + MAX_TIMESTAMP_DELTA_US, _U64_MAX)
    frame_us = [0] * count
    for i, ts in enumerate(ts_of):
        us = ts * 1000
        frame_us[i] = origin if us < origin else (window_end if us > window_end else us)
    batch_origin = min(frame_us)

    parts: list = [b""]  # [0] becomes the batch header
    append = parts.append
    pack_body = _FRAME_BODY.pack
    pack_u64 = _U64.pack
    pack_tlv = _TLV_HEAD.pack
    xxh = _xxh3
    sums = [0] * count
    size = BATCH_HEADER_SIZE
    for i in range(count):
        kl = key_len[i]
        vl = value_len[i]
        ts = ts_of[i]
        us = frame_us[i]
        override = us != ts * 1000
        if headers_at[i] >= 0 or kl > MAX_FIELD_LENGTH:
            key = None if kl < 0 else bytes(buf[key_at[i] : key_at[i] + kl])
            headers = () if headers_at[i] < 0 else _header_list(buf, headers_at[i], record_end[i])
            user_headers = user_headers_of(key, vl < 0, headers, ts if override else None)
            if user_headers is None:  # over the user-headers cap: the reference carries it in the payload
                return None
        elif kl < 0 and vl >= 0 and not override:
            user_headers = b""
        else:
            flags = 1 if vl < 0 else 0
            user_headers = b""
            if kl > 0:
                key = bytes(buf[key_at[i] : key_at[i] + kl])
                try:
                    key.decode("utf-8")
                    kind = 2
                except UnicodeDecodeError:
                    kind = 1
                user_headers = _KEY_NAME + pack_tlv(kind, kl) + key
            elif kl == 0:
                flags |= 2
            user_headers += _FLAGS[flags]
            if override:
                user_headers += _TIMESTAMP_NAME + _I64_LE.pack(ts)
        payload = buf[value_at[i] : value_at[i] + vl] if vl > 0 else b""
        body = b"".join((pack_body(0, 0, i, us - batch_origin, len(user_headers), len(payload), 0), payload, user_headers))
        checksum = xxh(body)
        sums[i] = checksum
        append(pack_u64(checksum))
        append(body)
        size += 8 + len(body)
    sum_bytes = struct.pack(f"<{count}Q", *sums)
    checksum = _xxh3(_CHECKSUM_FIELDS.pack(0, 0, 0, batch_origin, size, count) + sum_bytes)
    parts[0] = _BATCH_HEAD.pack(0, 0, 0, batch_origin, size, checksum, count) + _ZERO_RESERVED
    return b"".join(parts), max(ts_of)


def _header_list(buf, pos: int, stop: int) -> list:
    """The record's headers (already checked) as ``[(key bytes, value bytes or None)]``."""
    count, pos = _varint(buf, pos, stop, 5)
    out = []
    for _ in range(count):
        n, pos = _varint(buf, pos, stop, 5)
        key = bytes(buf[pos : pos + n])
        n, pos = _varint(buf, pos + n, stop, 5)
        if n < 0:
            out.append((key, None))
        else:
            out.append((key, bytes(buf[pos : pos + n])))
            pos += n
    return out


def iggy_to_kafka_records(batch, fields_of, encode_record):
    """See ``_convert_c.iggy_to_kafka_records``: one stored Iggy batch -> ``(records section,
    count, first offset_delta, last offset delta, baseTimestamp ms, maxTimestamp ms)``, or
    None where the reference code must run."""
    mv = batch
    size = len(mv)
    if size < BATCH_HEADER_SIZE:
        return None
    origin, end = _ORIGIN_LENGTH.unpack_from(mv, 0)
    if end > size or end < BATCH_HEADER_SIZE:
        return None
    unpack = _FRAME_FIELDS.unpack_from
    small = _SMALL_VARINTS
    body = bytearray()
    count = 0
    first = 0
    od = -1
    base_ms = max_ms = -1
    pos = BATCH_HEADER_SIZE
    while pos < end:
        if pos + FRAME_HEADER_SIZE > end:
            return None
        delta, ts_delta, uh_len, p_len = unpack(mv, pos + 24)
        payload_at = pos + FRAME_HEADER_SIZE
        frame_end = payload_at + p_len + uh_len
        if frame_end > end:
            return None
        if count == 0:
            first = delta
        od = delta - first
        if not INT32_MIN <= od <= INT32_MAX:
            return None
        ts_ms = (origin + ts_delta) // 1000
        payload = mv[payload_at : payload_at + p_len]
        if uh_len:
            key, value, headers, override = fields_of(payload, mv[payload_at + p_len : frame_end])
            if override is not None:
                ts_ms = override
        if count == 0:
            base_ms = max_ms = ts_ms
        elif ts_ms > max_ms:
            max_ms = ts_ms
        t = ts_ms - base_ms
        if not INT64_MIN <= t <= INT64_MAX:
            t = wrap_int64(t)
        if uh_len:
            encode_record(body, od, t, key, value, headers)
        else:  # null key, no headers: attributes, deltas, key -1, value, header count 0
            head = b"".join((
                b"\x00",
                small[t + 64] if -64 <= t < 64 else encode_varint(t),
                small[od + 64] if -64 <= od < 64 else encode_varint(od),
                b"\x01",
                small[p_len + 64] if p_len < 64 else encode_varint(p_len),
            ))
            n = len(head) + p_len + 1
            body += small[n + 64] if n < 64 else encode_varint(n)
            body += head
            body += payload
            body.append(0)
        count += 1
        pos = frame_end
    return body, count, first, od, base_ms, max_ms
