# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled read of :mod:`headwater.storage.local.readahead` (optional; Cython).

``read_nowait`` has a pure-Python reference in ``readahead.py``
(``_py_read_nowait``) and returns what it returns: the bytes
``[position, position + length)`` of ``fd`` read with one ``preadv2(2)`` whose
``flags`` carry ``RWF_NOWAIT`` (the kernel returns fewer bytes, or EAGAIN,
rather than wait for the disk), as a read-only memoryview, when every byte came;
``False`` when fewer came or the call answered EAGAIN (some pages are not in the
page cache); ``None`` on any other error (EOPNOTSUPP: a filesystem without
``RWF_NOWAIT``; the caller then checks another way). EINTR is retried, as
Python's ``os.preadv`` does.

Why: the reference must hand ``os.preadv`` a zeroed ``bytearray`` (Python has no
uninitialised writable buffer); here the kernel writes straight into a new
``bytes`` object that nothing touched before, so a poll's ~156 KiB read costs no
``memset``. ``tests/unit/storage/test_pread_native.py`` checks the two against
each other.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.errno cimport EAGAIN, EINTR, errno


cdef extern from "<errno.h>":
    int EWOULDBLOCK  # (EAGAIN on Linux; Python's BlockingIOError covers both)


cdef extern from "<sys/uio.h>" nogil:
    struct iovec:
        void *iov_base
        size_t iov_len
    ssize_t preadv2(int fd, const iovec *iov, int iovcnt, long long offset, int flags)


def read_nowait(int fd, Py_ssize_t length, long long position, int flags):
    """``memoryview`` of ``length`` bytes (read-only), ``False`` (fewer or EAGAIN) or ``None``
    (another error); ``length`` must be positive (the caller's check)."""
    cdef object data = PyBytes_FromStringAndSize(NULL, length)
    cdef iovec vec
    cdef ssize_t got
    cdef int err
    vec.iov_base = PyBytes_AS_STRING(data)
    vec.iov_len = <size_t>length
    while True:
        with nogil:
            got = preadv2(fd, &vec, 1, position, flags)
            err = errno
        if got >= 0 or err != EINTR:
            break
    if got < 0:
        return False if err == EAGAIN or err == EWOULDBLOCK else None
    return memoryview(data) if got == length else False
