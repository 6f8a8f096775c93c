"""The compiled ``read_nowait`` (``headwater.storage.local._pread_c``) against its pure-Python
reference (``readahead._py_read_nowait``) on real files: the same bytes for every range of a
cached file (ranges running past the end included), the same miss for pages not in the page
cache, the same None for a descriptor the call refuses, and neither copy can be written.

Skipped only when the extension is disabled (HEADWATER_NO_EXTENSIONS=1), the platform has no
``RWF_NOWAIT``, or outside CI when it is not built; in CI a missing extension is a failure.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater import _native
from headwater.storage.local import readahead

if _native.DISABLED:
    pytest.skip("HEADWATER_NO_EXTENSIONS=1: the compiled read is disabled", allow_module_level=True)
if not readahead._NOWAIT:
    pytest.skip("no RWF_NOWAIT here: read_nowait always answers None", allow_module_level=True)
if readahead._built is None:
    if os.environ.get("CI"):
        raise RuntimeError("headwater.storage.local._pread_c is not built; CI must build it (pip install -e .)")
    pytest.skip("headwater.storage.local._pread_c is not built (pip install -e . compiles it)", allow_module_level=True)

SIZE = 300 * 1024 + 123  # past NOWAIT_READ_MAX, not a whole number of pages


def both(fd: int, length: int, position: int):
    """(reference answer, compiled answer) of ``read_nowait``: "missed", None, or the bytes."""
    answers = []
    for name in ("python", "compiled"):
        previous = readahead.use_implementation(name)
        try:
            got = readahead.read_nowait(fd, length, position)
        finally:
            readahead.use_implementation(previous)
        if got is readahead.MISSED:
            answers.append("missed")
        elif got is None:
            answers.append(None)
        else:
            assert isinstance(got, memoryview) and got.readonly
            answers.append(bytes(got))
    return answers


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("pread") / "segment.log"
    data = os.urandom(SIZE)
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    os.pread(fd, SIZE, 0)  # in the page cache
    yield str(path), fd, data
    os.close(fd)


def test_the_compiled_read_gives_the_reference_bytes(data_file):
    path, fd, data = data_file

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.integers(1, readahead.NOWAIT_READ_MAX), st.integers(0, SIZE + 5000))
    def check(length, position):
        reference, compiled = both(fd, length, position)
        assert reference == compiled
        if position + length <= SIZE:  # all there: the bytes themselves
            assert compiled == data[position:position + length]
        else:  # cut by the end of the file: fewer bytes than asked, a miss for both
            assert compiled == "missed"

    check()


def test_sizes_over_the_limit_and_empty_ranges_are_not_read(data_file):
    _, fd, _ = data_file
    for length, position in ((readahead.NOWAIT_READ_MAX + 1, 0), (0, 0), (-1, 0)):
        assert both(fd, length, position) == [None, None]


def test_pages_not_in_the_page_cache_are_a_miss_for_both(data_file):
    path, fd, data = data_file
    if not readahead.evict(path):
        pytest.skip("this filesystem keeps the pages in memory")
    assert both(fd, 64 * 1024, 128 * 1024) == ["missed", "missed"]
    os.pread(fd, SIZE, 0)  # cached again
    assert both(fd, 64 * 1024, 128 * 1024) == [data[128 * 1024:192 * 1024]] * 2


def test_a_descriptor_the_call_refuses_is_none_for_both(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY)  # a directory: EISDIR
    try:
        assert both(fd, 4096, 0) == [None, None]
    finally:
        os.close(fd)


def test_the_implementations_switch_and_report():
    assert _native.implementations()["headwater.storage.local._pread_c"] == "compiled"
    previous = readahead.use_implementation("python")
    try:
        assert readahead._compiled is None
    finally:
        readahead.use_implementation(previous)
    assert readahead._compiled is readahead._built
    with pytest.raises(ValueError):
        readahead.use_implementation("fortran")
