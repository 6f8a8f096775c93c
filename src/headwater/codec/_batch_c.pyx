# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled frame walks of :mod:`headwater.codec.batch` (optional; Cython).

Each function here has a pure-Python reference in ``batch.py`` with the same
name minus this module's prefix (``verify_frames`` <-> ``_py_verify_frames``,
``walk`` <-> ``_py_walk``, ``span`` <-> ``_py_span``) and returns exactly what
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

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport uint8_t, uint32_t, uint64_t

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


cdef object _verify(const uint8_t *buf, Py_ssize_t length, Py_ssize_t size, Py_ssize_t count, bint deltas):
    # the reference gives up (None) as soon as a frame cannot fit, so walking past
    # the data is the only early exit that needs care
    cdef Py_ssize_t pos = BATCH_HEADER_SIZE
    cdef Py_ssize_t index, start
    cdef const uint8_t *frame
    cdef uint64_t checksum
    if count < 0 or count * FRAME_HEADER_SIZE > length - BATCH_HEADER_SIZE:
        return None
    out = PyBytes_FromStringAndSize(NULL, count * 8)
    cdef uint8_t *sums = <uint8_t *>PyBytes_AS_STRING(out)
    for index in range(count):
        if pos + FRAME_HEADER_SIZE > length:
            return None
        frame = buf + pos
        checksum = hw_le64(frame)
        start = pos + 8
        pos = start + 40 + <Py_ssize_t>hw_le32(frame + 36) + <Py_ssize_t>hw_le32(frame + 32)
        if pos > length:
            return None
        if hw_le64(frame + 40) != 0:
            return None
        if deltas and hw_le32(frame + 24) != <uint32_t>index:
            return None
        if xxh3_64_at(buf + start, <size_t>(pos - start)) != checksum:
            return None
        hw_put_le64(sums + 8 * index, checksum)
    return out if pos == size else None


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
