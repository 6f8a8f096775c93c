"""Fixtures shared by the unit tests of every layer."""

from __future__ import annotations

import resource
import signal
from contextlib import contextmanager

import pytest


@contextmanager
def _file_size_limit(limit: int):
    """Inside: the kernel refuses any write or ``posix_fallocate`` past ``limit`` bytes of a
    file with EFBIG (``RLIMIT_FSIZE``, SIGXFSZ ignored), a real refusal like a full disk's."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)


@pytest.fixture
def file_size_limit():
    """``with file_size_limit(n): ...`` makes writes past byte ``n`` of any file fail (EFBIG)."""
    return _file_size_limit
