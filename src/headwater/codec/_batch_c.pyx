# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled frame walks of :mod:`headwater.codec.batch` (optional; Cython).

Each function here has a pure-Python reference in ``batch.py`` with the same
name minus this module's prefix (``verify_frames`` <-> ``_py_verify_frames``,
``walk`` <-> ``_py_walk``, ``span`` <-> ``_py_span``, ``verify_and_stamp`` <->
``_py_verify_and_stamp``) and returns exactly what
the reference returns, None included: like the references they never raise
on malformed frames, and ``batch.py`` then runs its reference diagnosis for the
precise error. ``tests/unit/codec/test_batch_native.py`` checks the two
against each other on valid and mutated batches.

Frame checksums are XXH3-64 with seed 0, computed by the xxHash C library
itself (``XXH3_64bits``, with its runtime SIMD dispatch) through
``headwater.codec._xxh3_c``: the same code the pure-Python references call as
``xxhash.xxh3_64_intdigest``. When that module cannot find or verify the
library it does not import, nor does this one, and ``batch.py`` uses its
references. ``xxh3_64`` (that module's, re-exported) exposes the hash for the
tests.

Layouts (all little-endian; see ``batch.py`` for the full tables): a frame
header is 48 bytes, ``checksum u64 @0``, ``offset_delta u32 @24``,
``user_headers_length u32 @32``, ``payload_length u32 @36``, ``reserved u64
@40``; the checksum covers ``frame[8:]``. Frames start at byte 256.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, memset

from headwater.codec._xxh3_c cimport xxh3_64_at

from headwater.codec._xxh3_c import xxh3_64  # the hash the walks use, for the tests

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>

    static inline uint64_t hw_le64(const uint8_t *p) {
        uint64_t v;
        memcpy(&v, p, 8);
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        v = __builtin_bswap64(v);
    #endif
        return v;
    }

    static inline uint32_t hw_le32(const uint8_t *p) {
        uint32_t v;
        memcpy(&v, p, 4);
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        v = __builtin_bswap32(v);
    #endif
        return v;
    }

    static inline void hw_put_le64(uint8_t *p, uint64_t v) {
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        v = __builtin_bswap64(v);
    #endif
        memcpy(p, &v, 8);
    }
    """
    uint64_t hw_le64(const uint8_t *p) nogil
    uint32_t hw_le32(const uint8_t *p) nogil
    void hw_put_le64(uint8_t *p, uint64_t v) nogil


DEF BATCH_HEADER_SIZE = 256
DEF FRAME_HEADER_SIZE = 48
DEF RESERVED_OFFSET = 52  # batch header reserved bytes 52..256, all zero
DEF CHECKSUM_FIELDS_SIZE = 44  # partition_id .. batch_length u64 x 5, message_count u32
# the largest origin_timestamp whose every u32 timestamp_delta still fits u64 µs (batch.py's
# _ORIGIN_SAFE_MAX: u64 max - MAX_TIMESTAMP_DELTA_US)
DEF ORIGIN_SAFE_MAX = 0xFFFFFFFFFFFFFFFF - 0xFFFFFFFF

cdef uint8_t _ZEROS[BATCH_HEADER_SIZE - RESERVED_OFFSET]
memset(_ZEROS, 0, BATCH_HEADER_SIZE - RESERVED_OFFSET)


cdef bint _walk_sums(const uint8_t *buf, Py_ssize_t length, Py_ssize_t size, Py_ssize_t count, bint deltas,
                     uint8_t *sums) noexcept nogil:
    """The frame walk of ``_py_verify_frames``: True when ``count`` frames tile ``[256, size)``
    of the ``length`` bytes at ``buf``, each checking out; their checksums (u64 LE) then
    fill ``sums`` (``8 * count`` bytes). False at the first thing off."""
    # the reference gives up (None) as soon as a frame cannot fit, so walking past
    # the data is the only early exit that needs care
    cdef Py_ssize_t pos = BATCH_HEADER_SIZE
    cdef Py_ssize_t index, start
    cdef const uint8_t *frame
    cdef uint64_t checksum
    for index in range(count):
        if pos + FRAME_HEADER_SIZE > length:
            return False
        frame = buf + pos
        checksum = hw_le64(frame)
        start = pos + 8
        pos = start + 40 + <Py_ssize_t>hw_le32(frame + 36) + <Py_ssize_t>hw_le32(frame + 32)
        if pos > length:
            return False
        if hw_le64(frame + 40) != 0:
            return False
        if deltas and hw_le32(frame + 24) != <uint32_t>index:
            return False
        if xxh3_64_at(buf + start, <size_t>(pos - start)) != checksum:
            return False
        hw_put_le64(sums + 8 * index, checksum)
    return pos == size


cdef object _verify(const uint8_t *buf, Py_ssize_t length, Py_ssize_t size, Py_ssize_t count, bint deltas):
    if count < 0 or count * FRAME_HEADER_SIZE > length - BATCH_HEADER_SIZE:
        return None
    out = PyBytes_FromStringAndSize(NULL, count * 8)
    if not _walk_sums(buf, length, size, count, deltas, <uint8_t *>PyBytes_AS_STRING(out)):
        return None
    return out


cdef object _verify_buffer(object batch, Py_ssize_t size, Py_ssize_t count, bint deltas):
    cdef Py_buffer view
    PyObject_GetBuffer(batch, &view, PyBUF_SIMPLE)
    try:
        return _verify(<const uint8_t *>view.buf, view.len, size, count, deltas)
    finally:
        PyBuffer_Release(&view)


def verify_frames(batch, Py_ssize_t size, Py_ssize_t count):
    """Compiled ``_py_verify_frames``: the concatenated u64 LE checksums of a blob
    that tiles ``[256, size)`` in exactly ``count`` frames, each with zero
    reserved bytes, a matching checksum and ``offset_delta == index``; else None."""
    return _verify_buffer(batch, size, count, True)


def verify_frames_any_delta(batch, Py_ssize_t size, Py_ssize_t count):
    """Compiled ``_py_verify_frames_any_delta``: :func:`verify_frames` without the
    offset_delta check."""
    return _verify_buffer(batch, size, count, False)


def walk(batch, Py_ssize_t size, Py_ssize_t stop):
    """Compiled ``_py_walk``: ``(positions, checksums)`` of the first ``stop`` frames
    (``stop + 1`` positions), or None when one does not lie inside ``size``."""
    cdef Py_buffer view
    cdef Py_ssize_t pos = BATCH_HEADER_SIZE
    cdef Py_ssize_t index
    cdef const uint8_t *buf
    if stop * FRAME_HEADER_SIZE > size - BATCH_HEADER_SIZE:
        return None
    PyObject_GetBuffer(batch, &view, PyBUF_SIMPLE)
    try:
        buf = <const uint8_t *>view.buf
        positions = [0] * (stop + 1)
        sums = [0] * stop
        for index in range(stop):
            if pos + 40 > view.len:
                return None
            positions[index] = pos
            sums[index] = hw_le64(buf + pos)
            pos += FRAME_HEADER_SIZE + <Py_ssize_t>hw_le32(buf + pos + 36) + <Py_ssize_t>hw_le32(buf + pos + 32)
            if pos > size:
                return None
        positions[stop] = pos
        return positions, sums
    finally:
        PyBuffer_Release(&view)


def span(batch, Py_ssize_t size, Py_ssize_t start, Py_ssize_t stop):
    """Compiled ``_py_span``: ``(first, end, checksum bytes)`` for frames ``[start, stop)``:
    where frame ``start`` begins, where frame ``stop - 1`` ends, and those frames'
    u64 LE checksums concatenated; None when a frame up to ``stop`` does not lie
    inside ``size``."""
    cdef Py_buffer view
    cdef Py_ssize_t pos = BATCH_HEADER_SIZE
    cdef Py_ssize_t first = BATCH_HEADER_SIZE
    cdef Py_ssize_t index
    cdef const uint8_t *buf
    cdef uint8_t *sums
    if stop * FRAME_HEADER_SIZE > size - BATCH_HEADER_SIZE or not 0 <= start <= stop:
        return None
    PyObject_GetBuffer(batch, &view, PyBUF_SIMPLE)
    try:
        buf = <const uint8_t *>view.buf
        out = PyBytes_FromStringAndSize(NULL, (stop - start) * 8)
        sums = <uint8_t *>PyBytes_AS_STRING(out)
        for index in range(stop):
            if pos + 40 > view.len:
                return None
            if index == start:
                first = pos
            if index >= start:
                hw_put_le64(sums + 8 * (index - start), hw_le64(buf + pos))
            pos += FRAME_HEADER_SIZE + <Py_ssize_t>hw_le32(buf + pos + 36) + <Py_ssize_t>hw_le32(buf + pos + 32)
            if pos > size:
                return None
        if start == stop:
            first = pos
        return first, pos, out
    finally:
        PyBuffer_Release(&view)


def verify_and_stamp(batch, partition_id, base_offset, base_timestamp, bint deltas):
    """Compiled ``_py_verify_and_stamp`` of one writable batch, in one call: the fast path
    of ``verify_batch`` (length, reserved bytes 52..256 zero, ``origin_timestamp`` at most
    u64 max - u32 max, ``0 < message_count``, the frame walk of :func:`verify_frames`
    (``deltas``: offset_delta == index checked), ``batch_checksum`` over the header fields
    and the frame checksums) then ``stamp``: ``partition_id``, ``base_offset``,
    ``base_timestamp`` (u64 LE at 0..24) and the recomputed ``batch_checksum`` (40..48).

    Returns the stamped header's fields ``(partition_id, base_offset, base_timestamp,
    origin_timestamp, batch_length, batch_checksum, message_count)``, or None, writing
    nothing, when anything is off (the buffer read-only or not one contiguous byte run,
    a stamp outside u64, any check failing): ``batch.py`` then runs the reference, which
    raises the precise error (or returns what it returns)."""
    cdef uint64_t pid, base, ts, origin, declared, checksum
    cdef Py_ssize_t size, count
    cdef uint8_t *buf
    cdef uint8_t *fields
    cdef Py_buffer view
    # exact ints only (Cython would truncate a float): anything else is the reference's to refuse
    if type(partition_id) is not int or type(base_offset) is not int or type(base_timestamp) is not int:
        return None
    try:
        pid = partition_id
        base = base_offset
        ts = base_timestamp
    except OverflowError:
        return None
    try:
        PyObject_GetBuffer(batch, &view, PyBUF_WRITABLE)
    except (BufferError, TypeError):
        return None
    try:
        buf = <uint8_t *>view.buf
        size = view.len
        if view.itemsize != 1 or size < BATCH_HEADER_SIZE:
            return None
        origin = hw_le64(buf + 24)
        declared = hw_le64(buf + 32)
        count = <Py_ssize_t>hw_le32(buf + 48)
        if (declared != <uint64_t>size or count == 0 or count * FRAME_HEADER_SIZE > size - BATCH_HEADER_SIZE
                or origin > ORIGIN_SAFE_MAX
                or memcmp(buf + RESERVED_OFFSET, _ZEROS, BATCH_HEADER_SIZE - RESERVED_OFFSET) != 0):
            return None
        # the checksum input: the six header fields, then every frame's checksum
        fields = <uint8_t *>PyMem_Malloc(CHECKSUM_FIELDS_SIZE + 8 * count)
        if fields == NULL:
            raise MemoryError()
        try:
            if not _walk_sums(buf, size, size, count, deltas, fields + CHECKSUM_FIELDS_SIZE):
                return None
            memcpy(fields, buf, 40)  # partition_id .. batch_length (u64 x 5) as sent
            memcpy(fields + 40, buf + 48, 4)  # message_count
            if xxh3_64_at(fields, CHECKSUM_FIELDS_SIZE + 8 * count) != hw_le64(buf + 40):
                return None
            hw_put_le64(fields, pid)
            hw_put_le64(fields + 8, base)
            hw_put_le64(fields + 16, ts)
            checksum = xxh3_64_at(fields, CHECKSUM_FIELDS_SIZE + 8 * count)
        finally:
            PyMem_Free(fields)
        hw_put_le64(buf, pid)
        hw_put_le64(buf + 8, base)
        hw_put_le64(buf + 16, ts)
        hw_put_le64(buf + 40, checksum)
        return (pid, base, ts, origin, <uint64_t>size, checksum, count)
    finally:
        PyBuffer_Release(&view)
