# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled twin of the per-record loops of :mod:`headwater.codec.kafka.convert`.

The pure-Python functions in ``convert.py`` are the specification; these loops
must give byte-identical results. They never raise for bad input: on anything
they do not handle (a structural error, a timestamp window to search, a
timestamp bound or missing key to report, a value the Python code would refuse)
they return ``None`` and the caller runs the reference code, which finds and
raises the precise error. Records and frames are walked in C over the buffer;
Python objects are made per *batch*, except for the records or frames whose
headers need the reference mapping (Kafka headers, typed or chunked Iggy
headers): for those the callables passed in (``convert.kafka_user_headers``,
``convert.kafka_fields_of`` and ``record_batch.encode_record``) are called.

Frame and batch checksums are XXH3-64 (seed 0), computed by the xxHash C
library's ``XXH3_64bits`` through ``headwater.codec._xxh3_c`` (the function the
``xxhash`` package's ``xxh3_64_intdigest`` runs); when that module cannot find
or verify the library it does not import, nor does this one, and the
pure-Python code is used; ``xxh3_64`` is that module's, re-exported for the
tests. Layouts: ``record_batch.py`` (RecordBatch v2 and its records) and
``headwater/codec/batch.py`` (the Iggy batch and frame).
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy, memset
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize

from headwater.codec._xxh3_c cimport xxh3_64_at

from headwater.codec._xxh3_c import xxh3_64  # the hash the loops use, for the tests

cdef enum:
    BATCH_HEADER = 256
    FRAME_HEADER = 48
    MAX_FIELD = 255
    KIND_RAW = 1
    KIND_STRING = 2
    KIND_INT64 = 7
    KIND_UINT8 = 9

cdef uint64_t MAX_TS_DELTA_US = 0xFFFFFFFFULL
cdef int64_t U64_MAX_MS = 18446744073709551LL  # (2**64 - 1) // 1000

cdef uint64_t U64_MAX = 0xFFFFFFFFFFFFFFFFULL


# --------------------------------------------------------------------------- output buffer

cdef struct Out:
    uint8_t *buf
    Py_ssize_t size
    Py_ssize_t cap


cdef int out_reserve(Out *o, Py_ssize_t extra) except -1:
    cdef Py_ssize_t want = o.size + extra
    cdef Py_ssize_t cap
    cdef uint8_t *p
    if want <= o.cap:
        return 0
    cap = o.cap * 2
    if cap < want:
        cap = want
    if cap < 4096:
        cap = 4096
    p = <uint8_t *>realloc(o.buf, cap)
    if p == NULL:
        raise MemoryError()
    o.buf = p
    o.cap = cap
    return 0


cdef inline void put_u32le(uint8_t *p, uint32_t v) nogil:
    p[0] = v & 0xFF
    p[1] = (v >> 8) & 0xFF
    p[2] = (v >> 16) & 0xFF
    p[3] = (v >> 24) & 0xFF


cdef inline void put_u64le(uint8_t *p, uint64_t v) nogil:
    cdef int i
    for i in range(8):
        p[i] = (v >> (8 * i)) & 0xFF


cdef inline uint32_t get_u32le(const uint8_t *p) nogil:
    return p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef inline uint64_t get_u64le(const uint8_t *p) nogil:
    return get_u32le(p) | (<uint64_t>get_u32le(p + 4) << 32)


# --------------------------------------------------------------------------- varints

cdef inline Py_ssize_t read_zz(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, int max_bytes,
                               int64_t *out) nogil:
    """A zigzag varint (max_bytes 5, int32) or varlong (10, int64) at pos: the next pos, or -1
    wherever ``record_batch._read_zigzag`` raises."""
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef Py_ssize_t start = pos
    cdef uint8_t c
    while True:
        if pos >= end:
            return -1
        c = b[pos]
        pos += 1
        if shift == 63 and c > 1:
            return -1  # bits past 64 (or an 11th byte)
        result |= (<uint64_t>(c & 0x7F)) << shift
        if c < 0x80:
            break
        shift += 7
        if pos - start >= max_bytes:
            return -1
    if max_bytes == 5 and (result >> 32):
        return -1
    out[0] = <int64_t>((result >> 1) ^ (<uint64_t>0 - (result & 1)))
    return pos


cdef inline int zz_size(int64_t value) nogil:
    cdef uint64_t v = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    cdef int n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


cdef inline uint8_t *put_zz(uint8_t *p, int64_t value) nogil:
    cdef uint64_t v = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    while v >= 0x80:
        p[0] = (v & 0x7F) | 0x80
        p += 1
        v >>= 7
    p[0] = <uint8_t>v
    return p + 1


# --------------------------------------------------------------------------- UTF-8 (strict, as bytes.decode)

cdef bint is_utf8(const uint8_t *s, Py_ssize_t n) nogil:
    cdef Py_ssize_t i = 0
    cdef uint8_t c, c1
    while i < n:
        c = s[i]
        if c < 0x80:
            i += 1
        elif 0xC2 <= c <= 0xDF:
            if i + 1 >= n or (s[i + 1] & 0xC0) != 0x80:
                return False
            i += 2
        elif 0xE0 <= c <= 0xEF:
            if i + 2 >= n:
                return False
            c1 = s[i + 1]
            if (c1 & 0xC0) != 0x80 or (s[i + 2] & 0xC0) != 0x80:
                return False
            if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 > 0x9F):
                return False  # overlong, surrogate
            i += 3
        elif 0xF0 <= c <= 0xF4:
            if i + 3 >= n:
                return False
            c1 = s[i + 1]
            if (c1 & 0xC0) != 0x80 or (s[i + 2] & 0xC0) != 0x80 or (s[i + 3] & 0xC0) != 0x80:
                return False
            if (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 > 0x8F):
                return False  # overlong, past U+10FFFF
            i += 4
        else:
            return False
    return True


# --------------------------------------------------------------------------- Kafka -> Iggy

cdef struct Rec:
    int64_t ts            # record timestamp, ms (baseTimestamp + delta, wrapped at int64)
    uint64_t frame_us     # frame producer time, µs
    Py_ssize_t key_pos
    Py_ssize_t key_len    # -1: null key
    Py_ssize_t val_pos
    Py_ssize_t val_len    # -1: null value
    Py_ssize_t hdr_pos    # first header
    Py_ssize_t hdr_end    # end of the record
    int64_t hdr_count
    bint override         # the timestamp goes in kafka.timestamp


cdef inline Py_ssize_t read_span(const uint8_t *b, Py_ssize_t pos, Py_ssize_t stop, Py_ssize_t *at,
                                 Py_ssize_t *length) nogil:
    """A varint length then that many bytes (a key or value; negative: null, length -1): the
    next pos, or -1 where ``iter_record_fields`` raises."""
    cdef int64_t n
    pos = read_zz(b, pos, stop, 5, &n)
    if pos < 0:
        return -1
    if n < 0:
        at[0] = 0
        length[0] = -1
        return pos
    if n > stop - pos:
        return -1
    at[0] = pos
    length[0] = n
    return pos + n


cdef Py_ssize_t scan_records(const uint8_t *b, Py_ssize_t end, Py_ssize_t count, int64_t base_ts,
                             Rec *recs) nogil:
    """Walk ``count`` records as ``record_batch.iter_record_fields`` does; 0, or -1 wherever it raises."""
    cdef Py_ssize_t pos = 0, start, stop, i, h
    cdef int64_t length, tsd, od, hc, hl
    cdef Rec *r
    for i in range(count):
        r = &recs[i]
        pos = read_zz(b, pos, end, 5, &length)
        if pos < 0:
            return -1
        start = pos
        if length < 6 or length > end - start:
            return -1
        stop = start + length
        pos = read_zz(b, start + 1, stop, 10, &tsd)  # after the attributes byte
        if pos < 0:
            return -1
        pos = read_zz(b, pos, stop, 5, &od)
        if pos < 0:
            return -1
        pos = read_span(b, pos, stop, &r.key_pos, &r.key_len)
        if pos < 0:
            return -1
        pos = read_span(b, pos, stop, &r.val_pos, &r.val_len)
        if pos < 0:
            return -1
        pos = read_zz(b, pos, stop, 5, &hc)
        if pos < 0 or hc < 0 or hc * 2 > stop - pos:
            return -1
        r.hdr_pos = pos
        r.hdr_count = hc
        for h in range(hc):
            pos = read_zz(b, pos, stop, 5, &hl)
            if pos < 0 or hl < 0 or hl > stop - pos:
                return -1
            pos += hl
            pos = read_zz(b, pos, stop, 5, &hl)
            if pos < 0:
                return -1
            if hl >= 0:
                if hl > stop - pos:
                    return -1
                pos += hl
        if pos != stop:
            return -1
        r.hdr_end = stop
        r.ts = <int64_t>(<uint64_t>base_ts + <uint64_t>tsd)
    if pos != end:
        return -1
    return 0


cdef object header_list(const uint8_t *b, Rec *r):
    """The record's headers as ``[(key bytes, value bytes or None)]`` (already checked)."""
    cdef list out = []
    cdef Py_ssize_t pos = r.hdr_pos, h
    cdef int64_t kl, vl
    cdef object key
    for h in range(r.hdr_count):
        pos = read_zz(b, pos, r.hdr_end, 5, &kl)
        key = PyBytes_FromStringAndSize(<const char *>b + pos, kl)
        pos += kl
        pos = read_zz(b, pos, r.hdr_end, 5, &vl)
        if vl >= 0:
            out.append((key, PyBytes_FromStringAndSize(<const char *>b + pos, vl)))
            pos += vl
        else:
            out.append((key, None))
    return out


cdef inline uint8_t *put_tlv(uint8_t *p, int kind, const uint8_t *data, Py_ssize_t n) nogil:
    p[0] = kind
    put_u32le(p + 1, <uint32_t>n)
    memcpy(p + 5, data, n)
    return p + 5 + n


cdef const uint8_t *KEY_NAME = b"kafka.key"
cdef const uint8_t *FLAGS_NAME = b"kafka.flags"
cdef const uint8_t *TIMESTAMP_NAME = b"kafka.timestamp"


cdef enum:
    MAX_PLAIN_HEADERS = 32


cdef inline uint8_t ascii_lower(uint8_t c) nogil:
    return c + 32 if 0x41 <= c <= 0x5A else c


cdef bint same_ascii_folded(const uint8_t *a, Py_ssize_t na, const uint8_t *b, Py_ssize_t nb) nogil:
    cdef Py_ssize_t i
    if na != nb:
        return False
    for i in range(na):
        if ascii_lower(a[i]) != ascii_lower(b[i]):
            return False
    return True


cdef Py_ssize_t simple_user_headers(uint8_t *p, const uint8_t *b, Rec *r) nogil:
    """Write the user-headers block of a record (``convert.kafka_user_headers``) whose key is
    null, empty or 1..255 bytes and whose Kafka headers (at most 32) all become plain Iggy
    headers: ASCII keys of 1..255 bytes not starting with ``kafka.`` and not repeated (both
    ignoring case), values of 1..255 bytes, and no ``iggy.kinds`` last. Its size, or -1 for
    any other record (the reference mapping then writes it)."""
    cdef uint8_t *q = p
    cdef uint8_t flags = 0
    cdef uint8_t ts[8]
    cdef Py_ssize_t pos = r.hdr_pos, h, j, i
    cdef int64_t kl, vl
    cdef Py_ssize_t spans[4 * MAX_PLAIN_HEADERS]
    cdef const uint8_t *k
    if r.key_len > MAX_FIELD or r.hdr_count > MAX_PLAIN_HEADERS:
        return -1
    for h in range(r.hdr_count):  # checked by scan_records: lengths fit the record
        pos = read_zz(b, pos, r.hdr_end, 5, &kl)
        k = b + pos
        if kl < 1 or kl > MAX_FIELD:
            return -1
        for i in range(kl):
            if k[i] >= 0x80:
                return -1  # non-ASCII: the reference folds case by Unicode rules
        if kl >= 6 and same_ascii_folded(k, 6, <const uint8_t *>b"kafka.", 6):
            return -1
        for j in range(h):
            if same_ascii_folded(k, kl, b + spans[4 * j], spans[4 * j + 1]):
                return -1
        spans[4 * h] = pos
        spans[4 * h + 1] = kl
        pos = read_zz(b, pos + kl, r.hdr_end, 5, &vl)
        if vl < 1 or vl > MAX_FIELD:
            return -1
        spans[4 * h + 2] = pos
        spans[4 * h + 3] = vl
        pos += vl
    if r.hdr_count and kl == 10 and memcmp(k, b"iggy.kinds", 10) == 0:
        return -1  # a kinds list to check: the reference does that
    if r.val_len < 0:
        flags |= 1
    if r.key_len > 0:
        q = put_tlv(q, KIND_STRING, KEY_NAME, 9)
        q = put_tlv(q, KIND_STRING if is_utf8(b + r.key_pos, r.key_len) else KIND_RAW, b + r.key_pos, r.key_len)
    elif r.key_len == 0:
        flags |= 2
    if flags:
        q = put_tlv(q, KIND_STRING, FLAGS_NAME, 11)
        q = put_tlv(q, KIND_UINT8, &flags, 1)
    if r.override:
        q = put_tlv(q, KIND_STRING, TIMESTAMP_NAME, 15)
        put_u64le(ts, <uint64_t>r.ts)
        q = put_tlv(q, KIND_INT64, ts, 8)
    for h in range(r.hdr_count):
        q = put_tlv(q, KIND_STRING, b + spans[4 * h], spans[4 * h + 1])
        q = put_tlv(q, KIND_STRING if is_utf8(b + spans[4 * h + 2], spans[4 * h + 3]) else KIND_RAW,
                    b + spans[4 * h + 2], spans[4 * h + 3])
    return q - p


def kafka_records_to_iggy(records, Py_ssize_t count, int64_t base_timestamp, int64_t now_ms,
                          bint require_key, bint has_low, int64_t low, bint has_high, int64_t high,
                          user_headers_of):
    """An uncompressed records section (``count`` records) -> ``(unstamped Iggy batch (a
    bytearray), max timestamp ms)``, as ``convert.kafka_to_iggy`` builds them after its header checks; None
    when the reference code must run (any error, a missing key with ``require_key``, a
    timestamp outside [low, high], record times spanning more than one Iggy batch window).
    ``user_headers_of`` is ``convert.user_headers_or_none``, called for records with headers
    or a key over 255 bytes (None: too big for user headers, the reference must run)."""
    cdef const uint8_t[::1] view = records
    cdef Py_ssize_t end = view.shape[0]
    cdef const uint8_t *b
    cdef Rec *recs
    cdef Rec *r
    cdef Out out
    cdef Py_ssize_t i, n, fpos, uh_len, p_len
    cdef uint64_t lo_us = U64_MAX, hi_us = 0, origin, window_end, batch_origin, us, checksum
    cdef int64_t max_ts
    cdef bint any_stamp = False
    cdef uint8_t *f
    cdef uint64_t *sums
    cdef object uh
    if count <= 0 or count > end // 7:
        return None
    b = &view[0]
    recs = <Rec *>malloc(count * sizeof(Rec))
    if recs == NULL:
        raise MemoryError()
    out.buf = NULL
    out.size = 0
    out.cap = 0
    sums = NULL
    try:
        if scan_records(b, end, count, base_timestamp, recs) < 0:
            return None
        max_ts = recs[0].ts
        for i in range(count):
            r = &recs[i]
            if require_key and r.key_len < 0:
                return None
            if r.ts != -1 and ((has_low and r.ts < low) or (has_high and r.ts > high)):
                return None
            if r.ts > max_ts:
                max_ts = r.ts
            if 0 <= r.ts <= U64_MAX_MS:
                us = <uint64_t>r.ts * 1000
                any_stamp = True
                if us < lo_us:
                    lo_us = us
                if us > hi_us:
                    hi_us = us
        if any_stamp:
            if hi_us - lo_us > MAX_TS_DELTA_US:
                return None  # the reference searches for the best window
            origin = lo_us
        else:
            origin = <uint64_t>(0 if now_ms < 0 else (U64_MAX_MS if now_ms > U64_MAX_MS else now_ms)) * 1000
        window_end = U64_MAX if origin > U64_MAX - MAX_TS_DELTA_US else origin + MAX_TS_DELTA_US
        batch_origin = U64_MAX
        for i in range(count):
            r = &recs[i]
            r.override = False
            if r.ts < 0:
                us = origin
                r.override = True
            elif r.ts > U64_MAX_MS:
                us = window_end
                r.override = True
            else:
                us = <uint64_t>r.ts * 1000
                if us < origin:
                    us = origin
                    r.override = True
                elif us > window_end:
                    us = window_end
                    r.override = True
            r.frame_us = us
            if us < batch_origin:
                batch_origin = us
        sums = <uint64_t *>malloc(count * 8 + 48)
        if sums == NULL:
            raise MemoryError()
        out_reserve(&out, BATCH_HEADER + count * FRAME_HEADER + end)
        memset(out.buf, 0, BATCH_HEADER)
        out.size = BATCH_HEADER
        for i in range(count):
            r = &recs[i]
            p_len = r.val_len if r.val_len > 0 else 0
            # a simple block: 329 bytes at most for key, flags and timestamp, plus per header
            # its key and value and 10 bytes of TLV heads
            out_reserve(&out, FRAME_HEADER + p_len + 400 + (r.hdr_end - r.hdr_pos) + 10 * r.hdr_count)
            fpos = out.size
            f = out.buf + fpos
            uh_len = 0
            if r.hdr_count or r.key_len >= 0 or r.val_len < 0 or r.override:
                uh_len = simple_user_headers(f + FRAME_HEADER + p_len, b, r)
            if uh_len < 0:
                uh = user_headers_of(
                    None if r.key_len < 0 else PyBytes_FromStringAndSize(<const char *>b + r.key_pos, r.key_len),
                    r.val_len < 0,
                    header_list(b, r) if r.hdr_count else (),
                    r.ts if r.override else None,
                )
                if uh is None:  # over the user-headers cap: the reference carries it in the payload
                    return None
                uh_len = len(uh)
                out_reserve(&out, FRAME_HEADER + p_len + uh_len)
                f = out.buf + fpos
                memcpy(f + FRAME_HEADER + p_len, PyBytes_AS_STRING(uh), uh_len)
            memset(f + 8, 0, 16)  # id
            put_u32le(f + 24, <uint32_t>i)
            put_u32le(f + 28, <uint32_t>(r.frame_us - batch_origin))
            put_u32le(f + 32, <uint32_t>uh_len)
            put_u32le(f + 36, <uint32_t>p_len)
            memset(f + 40, 0, 8)
            if p_len:
                memcpy(f + FRAME_HEADER, b + r.val_pos, p_len)
            n = FRAME_HEADER + p_len + uh_len
            checksum = xxh3_64_at(f + 8, n - 8)
            put_u64le(f, checksum)
            sums[i] = checksum
            out.size += n
        # batch header: partition_id, base_offset, base_timestamp zero (unstamped)
        put_u64le(out.buf + 24, batch_origin)
        put_u64le(out.buf + 32, <uint64_t>out.size)
        put_u32le(out.buf + 48, <uint32_t>count)
        f = <uint8_t *>malloc(44 + count * 8)
        if f == NULL:
            raise MemoryError()
        memset(f, 0, 24)
        memcpy(f + 24, out.buf + 24, 16)
        memcpy(f + 40, out.buf + 48, 4)
        for i in range(count):
            put_u64le(f + 44 + 8 * i, sums[i])
        checksum = xxh3_64_at(f, 44 + count * 8)
        free(f)
        put_u64le(out.buf + 40, checksum)
        # a bytearray: the caller stamps it in place (Partition.append) without another copy
        return PyByteArray_FromStringAndSize(<const char *>out.buf, out.size), max_ts
    finally:
        free(recs)
        free(sums)
        free(out.buf)


# --------------------------------------------------------------------------- Iggy -> Kafka

cdef int simple_fields(const uint8_t *uh, Py_ssize_t n, Py_ssize_t p_len, Py_ssize_t *key_pos,
                       Py_ssize_t *key_len, bint *value_null, bint *has_ts, int64_t *ts,
                       Py_ssize_t *spans, int *nh) nogil:
    """Read a user-headers block that ``convert.kafka_fields_of`` maps without a kinds list:
    well-formed ``kafka.key`` (String or Raw), ``kafka.flags`` and ``kafka.timestamp``, each at
    most once and all consumed, and at most 32 plain headers (String key not starting with
    ``kafka.``, not ``iggy.kinds``; String value in UTF-8 or Raw value not in UTF-8), whose
    key and value offsets go to ``spans``. 0, or -1 for any other block (the reference then runs)."""
    cdef Py_ssize_t pos = 0, klen, vlen, vpos
    cdef const uint8_t *k
    cdef int vkind
    cdef int flags = -1
    cdef bint seen_key = False, utf8
    key_len[0] = -1
    has_ts[0] = False
    value_null[0] = False
    nh[0] = 0
    while pos < n:
        if n - pos < 12 or uh[pos] != KIND_STRING:
            return -1
        klen = get_u32le(uh + pos + 1)
        if klen < 1 or klen > MAX_FIELD or klen > n - pos - 11:
            return -1
        k = uh + pos + 5
        vkind = uh[pos + 5 + klen]
        vlen = get_u32le(uh + pos + 5 + klen + 1)
        vpos = pos + 5 + klen + 5
        if vkind == 0 or vlen < 1 or vlen > MAX_FIELD or vlen > n - vpos:
            return -1
        if klen == 9 and memcmp(k, KEY_NAME, 9) == 0:
            if seen_key or (vkind != KIND_STRING and vkind != KIND_RAW):
                return -1
            seen_key = True
            key_pos[0] = vpos
            key_len[0] = vlen
        elif klen == 11 and memcmp(k, FLAGS_NAME, 11) == 0:
            if flags >= 0 or vkind != KIND_UINT8 or vlen != 1 or uh[vpos] < 1 or uh[vpos] > 3:
                return -1
            flags = uh[vpos]
        elif klen == 15 and memcmp(k, TIMESTAMP_NAME, 15) == 0:
            if has_ts[0] or vkind != KIND_INT64 or vlen != 8:
                return -1
            has_ts[0] = True
            ts[0] = <int64_t>get_u64le(uh + vpos)
        elif (klen >= 6 and memcmp(k, b"kafka.", 6) == 0) or (klen == 10 and memcmp(k, b"iggy.kinds", 10) == 0):
            return -1
        else:
            if vkind != KIND_STRING and vkind != KIND_RAW:
                return -1
            utf8 = is_utf8(uh + vpos, vlen)
            if (vkind == KIND_STRING) != utf8 or nh[0] == MAX_PLAIN_HEADERS:
                return -1  # a value Kafka -> Iggy would give another kind: it needs a kinds list
            spans[4 * nh[0]] = pos + 5
            spans[4 * nh[0] + 1] = klen
            spans[4 * nh[0] + 2] = vpos
            spans[4 * nh[0] + 3] = vlen
            nh[0] += 1
        pos = vpos + vlen
    if flags > 0:
        if (flags & 1) and p_len:
            return -1  # a null flag on a payload: kafka_fields_of passes it on as a header
        if flags & 2:
            if key_len[0] >= 0:
                return -1
            key_len[0] = 0
        value_null[0] = (flags & 1) != 0
    return 0


cdef int put_record(Out *o, int64_t od, int64_t tsd, const uint8_t *key, Py_ssize_t key_len,
                    const uint8_t *value, Py_ssize_t value_len, const uint8_t *hb,
                    const Py_ssize_t *spans, int nh) except -1:
    """Append a record (``record_batch.encode_record``); lengths -1 for null; ``nh`` headers
    whose key and value offsets into ``hb`` are in ``spans``."""
    cdef Py_ssize_t size = 1 + zz_size(tsd) + zz_size(od) + zz_size(nh), n
    cdef uint8_t *p
    cdef int h, j
    size += 1 if key_len < 0 else zz_size(key_len) + key_len
    size += 1 if value_len < 0 else zz_size(value_len) + value_len
    for j in range(2 * nh):
        size += zz_size(spans[2 * j + 1]) + spans[2 * j + 1]
    out_reserve(o, size + 5)
    p = put_zz(o.buf + o.size, size)
    p[0] = 0
    p = put_zz(p + 1, tsd)
    p = put_zz(p, od)
    p = put_zz(p, key_len)
    if key_len > 0:
        memcpy(p, key, key_len)
        p += key_len
    p = put_zz(p, value_len)
    if value_len > 0:
        memcpy(p, value, value_len)
        p += value_len
    p = put_zz(p, nh)
    for j in range(2 * nh):  # key, value, key, value...
        n = spans[2 * j + 1]
        p = put_zz(p, n)
        memcpy(p, hb + spans[2 * j], n)
        p += n
    o.size = p - o.buf
    return 0


def iggy_to_kafka_records(batch, fields_of, encode_record):
    """The records section of the RecordBatch v2 for one stored Iggy batch, as
    ``convert.iggy_to_kafka`` builds it: ``(records bytes, count, first offset_delta, last
    offset delta, baseTimestamp ms, maxTimestamp ms)``, or None where the reference code
    must run (a header or frame that does not fit, an offset delta outside int32).
    ``fields_of`` (``convert.kafka_fields_of``) and ``encode_record`` are called for frames
    whose user headers are more than a Kafka key, null flags and a timestamp."""
    cdef const uint8_t[::1] view = batch
    cdef Py_ssize_t size = view.shape[0]
    cdef const uint8_t *b
    cdef const uint8_t *fr
    cdef Py_ssize_t end, pos, p_len, uh_len, payload, key_pos, key_len, count = 0
    cdef uint64_t origin, first_delta = 0, delta
    cdef int64_t ts_ms, tsd, od = -1, base_ms = -1, max_ms = -1, override
    cdef bint value_null, has_ts, simple
    cdef int nh
    cdef Py_ssize_t spans[4 * MAX_PLAIN_HEADERS]
    cdef Out out
    cdef object scratch, key, value, headers, override_obj
    cdef object mv = memoryview(batch)
    if size < BATCH_HEADER:
        return None
    b = &view[0]
    end = <Py_ssize_t>get_u64le(b + 32) if get_u64le(b + 32) <= <uint64_t>size else -1
    if end < BATCH_HEADER:
        return None
    origin = get_u64le(b + 24)
    out.buf = NULL
    out.size = 0
    out.cap = 0
    try:
        out_reserve(&out, end - BATCH_HEADER + 16)
        pos = BATCH_HEADER
        while pos < end:
            if end - pos < FRAME_HEADER:
                return None
            fr = b + pos
            uh_len = get_u32le(fr + 32)
            p_len = get_u32le(fr + 36)
            if p_len + uh_len > end - pos - FRAME_HEADER:
                return None
            payload = pos + FRAME_HEADER
            delta = get_u32le(fr + 24)
            # (origin + delta) // 1000 without overflowing u64
            ts_ms = <int64_t>(origin // 1000 + (origin % 1000 + get_u32le(fr + 28)) // 1000)
            if count == 0:
                first_delta = delta
            od = <int64_t>delta - <int64_t>first_delta
            if od < -2147483648 or od > 2147483647:
                return None
            key_len = -1
            value_null = False
            has_ts = False
            nh = 0
            simple = uh_len == 0 or simple_fields(b + payload + p_len, uh_len, p_len, &key_pos, &key_len,
                                                  &value_null, &has_ts, &override, spans, &nh) == 0
            if simple:
                if has_ts:
                    ts_ms = override
            else:
                key, value, headers, override_obj = fields_of(
                    mv[payload:payload + p_len], mv[payload + p_len:payload + p_len + uh_len]
                )
                if override_obj is not None:
                    ts_ms = override_obj
            if count == 0:
                base_ms = max_ms = ts_ms
            elif ts_ms > max_ms:
                max_ms = ts_ms
            tsd = <int64_t>(<uint64_t>ts_ms - <uint64_t>base_ms)  # wrapping, as wrap_int64
            if simple:
                put_record(&out, od, tsd, b + payload + p_len + key_pos, key_len, b + payload,
                           -1 if value_null else p_len, b + payload + p_len, spans, nh)
            else:
                scratch = bytearray()
                encode_record(scratch, od, tsd, key, value, headers)
                out_reserve(&out, len(scratch))
                memcpy(out.buf + out.size, PyByteArray_AS_STRING(scratch), len(scratch))
                out.size += len(scratch)
            count += 1
            pos = payload + p_len + uh_len
        return (PyBytes_FromStringAndSize(<const char *>out.buf, out.size), count, first_delta,
                od if count else -1, base_ms, max_ms)
    finally:
        free(out.buf)
