"""``headwater.codec._xxh3_c``: the XXH3-64 the compiled hot loops cimport.

It is the xxHash library's own function (found with dlopen/dlsym in the
``xxhash`` package's extension, else ``libxxhash.so.0``), checked at import
against ``xxhash.xxh3_64_intdigest``. These tests check what it hashes with,
and that a library that disagrees is refused: the module then does not import,
the compiled loops that cimport it fall back to the pure-Python references,
which still work, and ``headwater --version`` says why. The hash itself is
compared with the ``xxhash`` package on every length class in
``test_batch_native.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import xxhash

from headwater import _native

if _native.DISABLED:
    pytest.skip("HEADWATER_NO_EXTENSIONS=1: the compiled modules are disabled", allow_module_level=True)
try:
    from headwater.codec import _xxh3_c
except ModuleNotFoundError:
    if os.environ.get("CI"):
        raise
    pytest.skip("headwater.codec._xxh3_c is not built (pip install -e . compiles it)", allow_module_level=True)


def test_the_hash_is_the_xxhash_packages_dispatched_function():
    where = _xxh3_c.source()
    # the package's extension is the first place looked in, and it has the dispatcher
    assert where == f"XXH3_64bits_dispatch in {xxhash._xxhash.__file__} (loaded)"
    assert _xxh3_c.xxh3_64(b"") == xxhash.xxh3_64_intdigest(b"") == 0x2D06800538D394C2


def test_bytes_like_inputs():
    data = bytes(range(256)) * 5
    assert _xxh3_c.xxh3_64(bytearray(data)) == xxhash.xxh3_64_intdigest(data)
    assert _xxh3_c.xxh3_64(memoryview(data)[7:1000]) == xxhash.xxh3_64_intdigest(data[7:1000])
    with pytest.raises(TypeError):
        _xxh3_c.xxh3_64("text")


# Run in a fresh interpreter: xxhash.xxh3_64_intdigest is replaced by one that is wrong on
# 5003-byte inputs only (one of the import check's lengths, never a length hashed below), so
# the library's XXH3 "disagrees" and every candidate is refused.
_DISAGREEING = textwrap.dedent("""
    import xxhash

    right = xxhash.xxh3_64_intdigest
    xxhash.xxh3_64_intdigest = lambda data, seed=0: right(data, seed) ^ (len(data) == 5003)

    from click.testing import CliRunner

    from headwater import _native
    from headwater.cli.main import main
    from headwater.codec import batch as B
    from headwater.codec.kafka import convert

    print("version:", CliRunner().invoke(main, ["--version"]).output.strip())
    assert B._compiled is None and convert._compiled is None, (B._compiled, convert._compiled)
    # the pure-Python references do the work, with the right hash
    raw = B.build_batch([B.Message(bytes(range(200)) * k, id=k + 1) for k in range(1, 6)])
    stamped = bytearray(raw)
    header = B.verify_and_stamp(stamped, 3, 100, 1_700_000_000_000_000)
    assert header.message_count == 5
    for frame in B.iter_frames(bytes(stamped)):
        assert frame.checksum == right(bytes(stamped[frame.position + 8:frame.position + 48 + len(frame.payload)]))
    records = convert.iggy_to_kafka(bytes(stamped))
    back, info = convert.kafka_to_iggy(records, now_ms=1_700_000_000_000)
    assert [bytes(f.payload) for f in B.iter_frames(back)] == [bytes(f.payload) for f in B.iter_frames(raw)]
    print("references: ok")
""")


def test_a_disagreeing_library_is_refused_and_the_references_are_used():
    env = {k: v for k, v in os.environ.items() if k != "HEADWATER_NO_EXTENSIONS"}
    proc = subprocess.run([sys.executable, "-c", _DISAGREEING], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    version = proc.stdout.split("version: ", 1)[1].split("\n", 1)[0]
    # the loops that hash fall back to their references; the page-cache read hashes nothing (stays compiled)
    assert version.startswith("headwater ") and "(hot loops: mixed (" in version
    for name in ("_batch_c", "_convert_c"):
        assert f"{name}=python (extension failed to import: " in version
    assert "_pread_c=compiled" in version
    assert "XXH3_64bits_dispatch in " in version and "disagrees with xxhash.xxh3_64_intdigest" in version
    assert "libxxhash.so.0" in version  # every candidate was tried
    assert "references: ok" in proc.stdout
