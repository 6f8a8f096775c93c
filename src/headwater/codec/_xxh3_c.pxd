# cython: language_level=3
"""XXH3-64 (seed 0) for the compiled hot loops: ``cimport`` this, see ``_xxh3_c.pyx``."""

from libc.stdint cimport uint64_t

# XXH3-64 with seed 0 and the default secret of the ``n`` bytes at ``p`` (``p`` may
# be NULL when ``n`` is 0): the xxHash library's own ``XXH3_64bits``, found at import.
cdef uint64_t xxh3_64_at(const void *p, size_t n) noexcept nogil
