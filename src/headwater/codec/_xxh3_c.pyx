# cython: language_level=3, boundscheck=False, wraparound=False
"""XXH3-64 for the compiled hot loops, from the xxHash C library (optional; Cython).

The compiled modules (``_batch_c``, ``kafka._convert_c``) ``cimport``
:c:func:`xxh3_64_at` (declared in ``_xxh3_c.pxd``) for frame and batch
checksums: XXH3-64 with seed 0 and the default secret, the hash Iggy uses
(``xxhash_spec.md`` of the xxHash project, "XXH3 Algorithm Description").

The hash is not ours: it is the xxHash C library's, resolved at import with
``dlopen``/``dlsym`` from, in order,

1. the extension module of the PyPI ``xxhash`` package (``xxhash._xxhash``,
   already loaded by ``import xxhash``; ``RTLD_NOLOAD``, then a plain
   ``RTLD_NOW`` open of the same path): it exports the library's C API, and
   ``XXH3_64bits_dispatch`` there (the library's x86 runtime dispatch:
   SSE2/AVX2/AVX-512 for the running CPU) is what the pure-Python code calls
   through ``xxhash.xxh3_64_intdigest``;
2. the system's ``libxxhash.so.0`` (Debian ``libxxhash0``).

In each, ``XXH3_64bits_dispatch`` is preferred, then ``XXH3_64bits``.

The pointer found is then checked against ``xxhash.xxh3_64_intdigest`` on inputs
of every length class of the algorithm (0, 1-3, 4-8, 9-16, 17-128, 129-240, over
240 bytes, several KB). When no library exports the symbol, or the check
fails, importing this module raises ImportError, and so do the modules that
cimport it: ``headwater._native.load`` then returns None for them and the
pure-Python references are used (``headwater --version`` says so).

:func:`xxh3_64` gives the same hash to Python, for the tests;
:func:`source` names the library file the pointer came from.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport uint64_t

import xxhash
import xxhash._xxhash

cdef extern from "<dlfcn.h>" nogil:
    void *dlopen(const char *filename, int flags)
    void *dlsym(void *handle, const char *symbol)
    int RTLD_NOW
    int RTLD_LOCAL
    int RTLD_NOLOAD

ctypedef uint64_t (*xxh3_fn)(const void *, size_t) noexcept nogil

cdef xxh3_fn _xxh3 = NULL


cdef uint64_t xxh3_64_at(const void *p, size_t n) noexcept nogil:
    return _xxh3(p, n)


cdef xxh3_fn _resolve(bytes path, int flags, const char *symbol):
    """``symbol`` of the library at ``path`` opened with ``flags``, or NULL. The handle
    is kept open for the life of the process (the pointer must stay valid)."""
    cdef void *handle = dlopen(path, flags)
    if handle == NULL:
        return NULL
    return <xxh3_fn>dlsym(handle, symbol)


def _sample(Py_ssize_t n) -> bytes:
    """``n`` bytes of a fixed, non-repeating-looking pattern."""
    return bytes((i * 167 + 13 + (i >> 8)) & 0xFF for i in range(n))


# one or more lengths from every branch of XXH3-64, block boundaries, and a few KB
_CHECK_LENGTHS = (0, 1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 64, 127, 128, 129, 200, 240, 241, 1023, 1024,
                  1025, 4096, 5003)


cdef bint _agrees(xxh3_fn fn):
    cdef bytes data
    for n in _CHECK_LENGTHS:
        data = _sample(n)
        if fn(<const char *>data, <size_t>n) != xxhash.xxh3_64_intdigest(data):
            return False
    return True


# the xxhash package builds xxHash's x86 dispatcher (xxh_x86dispatch.c) and calls its
# XXH3_64bits_dispatch, which picks SSE2/AVX2/AVX-512 for the running CPU; its plain
# XXH3_64bits is the SSE2 baseline. A library without the dispatcher has only the latter.
_SYMBOLS = (b"XXH3_64bits_dispatch", b"XXH3_64bits")


def _load():
    global _xxh3
    cdef xxh3_fn fn
    package = xxhash._xxhash.__file__.encode()
    tried = []
    for path, flags, how in (
        (package, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD, "loaded"),
        (package, RTLD_NOW | RTLD_LOCAL, "opened"),
        (b"libxxhash.so.0", RTLD_NOW | RTLD_LOCAL, "opened"),
    ):
        for symbol in _SYMBOLS:
            where = f"{symbol.decode()} in {path.decode()} ({how})"
            fn = _resolve(path, flags, symbol)
            if fn == NULL:
                tried.append(where + ": not found")
            elif not _agrees(fn):
                tried.append(where + ": disagrees with xxhash.xxh3_64_intdigest")
            else:
                _xxh3 = fn
                return where
    raise ImportError("no usable XXH3-64 in the xxHash library: " + "; ".join(tried))


_source = _load()


def source() -> str:
    """Which function hashes, from which file: ``"XXH3_64bits_dispatch in
    .../xxhash/_xxhash....so (loaded)"`` (or ``XXH3_64bits``, ``libxxhash.so.0``)."""
    return _source


def xxh3_64(data) -> int:
    """XXH3-64 (seed 0) of a bytes-like object through :c:func:`xxh3_64_at`; equals
    ``xxhash.xxh3_64_intdigest(data)``. For the tests."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return xxh3_64_at(view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
