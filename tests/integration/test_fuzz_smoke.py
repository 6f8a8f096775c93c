"""The wire fuzzers (``tools/fuzz_iggy.py``, ``tools/fuzz_kafka.py``), bounded for the default
run: each about 8 s with a fixed seed against a real server, a healthy client alongside.

The long runs are ``tools/fuzz_iggy.py --seconds 600`` and ``tools/fuzz_kafka.py --seconds 600``
(README, "Soak and fuzz runs"). The reply checkers are also fed garbage directly, so a fuzzer
that stopped noticing bad answers fails here too.

The findings of the long runs (``tools/README.md``, "Findings"): the Kafka ones are fixed, with
regression tests in ``test_robustness_kafka_wire.py``; the Iggy one (finding 5) is
fixed, with its regression test below.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))

import fuzz_iggy  # noqa: E402
import fuzz_kafka  # noqa: E402
from _harness import IggyConn, kafka_build  # noqa: E402
from headwater import _native  # noqa: E402
from headwater.codec.iggy import framing  # noqa: E402
from headwater.codec.iggy.commands import tokens as wt  # noqa: E402
from headwater.codec.kafka import messages as kmsg  # noqa: E402

pytestmark = pytest.mark.slow

KAFKA_KNOWN: list[str] = []
"""``--known`` signatures for the Kafka smoke run: empty, the run is strict. Put an open
finding's signature here (``tools/README.md``, "Findings") only while a strict-xfail test pins it."""


def _run(tool: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(TOOLS / tool), "--seconds", "6", "--seed", "20261129", "--out", str(tmp_path), *extra],
        capture_output=True, text=True, timeout=120,
    )


def _compiled_available() -> bool:
    """Whether a server started here can run the compiled frame walks (CI always builds them)."""
    from headwater.codec import batch

    return batch._compiled is not None or bool(os.environ.get("CI"))


@pytest.mark.parametrize("implementation", [
    "python",
    pytest.param("compiled", marks=pytest.mark.skipif(
        not _compiled_available(), reason="headwater.codec._batch_c is not built or is disabled")),
])
def test_fuzz_iggy_smoke(tmp_path, implementation):
    """The server's batch frame walks in either implementation survive the same inputs."""
    proc = _run("fuzz_iggy.py", tmp_path, "--implementation", implementation)
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-4000:]
    assert "health checks=" in proc.stdout and "OK" in proc.stdout
    assert f"implementation={implementation}" in proc.stdout


@pytest.mark.parametrize("implementation", ["compiled", "python"])
def test_fuzz_kafka_smoke(tmp_path, implementation):
    if implementation == "compiled" and _native.load("headwater.codec.kafka._convert_c") is None:
        pytest.skip("the compiled Kafka conversion is not built (or HEADWATER_NO_EXTENSIONS=1)")
    proc = _run("fuzz_kafka.py", tmp_path, "--implementation", implementation,
                *(a for k in KAFKA_KNOWN for a in ("--known", k)))
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-4000:]
    assert "health checks=" in proc.stdout and "OK" in proc.stdout
    loops = proc.stdout.split("server hot loops: ", 1)[1].split("\n", 1)[0]
    assert loops.startswith("python") == (implementation == "python"), loops


# --------------------------------------------------------------------------- the checkers themselves


def _request(code: int = 1) -> bytes:
    return framing.encode_request_header(size=256, client=5, request=3, operation=2, session=0, command_code=code)


def test_iggy_checker_accepts_a_proper_reply_and_eviction():
    request = _request()
    assert fuzz_iggy.check_answer(request, "frame", framing.encode_reply(framing.decode_request_header(request)),
                                  b"") == ("reply", None)
    assert fuzz_iggy.check_answer(request, "frame", framing.encode_eviction(5, 4), b"") == ("eviction", None)


def _with_status(head: bytes, status: int) -> bytes:
    return head[:framing.STATUS_OFFSET] + struct.pack("<I", status) + head[framing.STATUS_OFFSET + 4:]


@pytest.mark.parametrize("name", ["garbage", "wrong request echo", "status with body", "unknown status",
                                  "eviction for another client", "undecodable success body"])
def test_iggy_checker_flags_a_bad_answer(name):
    request = _request(201)  # GetStreams
    header = framing.decode_request_header(request)
    head, body = {
        "garbage": (bytes(range(256)), b""),
        "wrong request echo": (framing.encode_reply_header(body_length=0, client=5, request=4, operation=2), b""),
        "status with body": (_with_status(framing.reply_header_for(header, 1), 1009), b"x"),
        "unknown status": (framing.reply_header_for(header, 0, status=9999), b""),
        "eviction for another client": (framing.encode_eviction(6, 4), b""),
        "undecodable success body": (framing.reply_header_for(header, 3), b"\x01\x02\x03"),
    }[name]
    _, problem = fuzz_iggy.check_answer(request, "frame", head, body)
    assert problem, name


def test_kafka_checker_flags_a_bad_response():
    item = {"api": 18, "version": 3, "correlation": 7, "answer": "response"}
    good = kmsg.encode(kafka_build(kmsg.response_class(18, 3), error_code=0, api_keys=(), throttle_time=0))
    assert fuzz_kafka.response_problem(item, struct.pack(">i", 7) + good) is None
    assert fuzz_kafka.response_problem(item, struct.pack(">i", 8) + good)  # another correlation id
    assert fuzz_kafka.response_problem(item, struct.pack(">i", 7) + good[:-1])  # cut short
    assert fuzz_kafka.response_problem(item, struct.pack(">i", 7) + good + b"\x00")  # bytes left over


# --------------------------------------------------------------------------- findings of the long runs
# Kafka findings 1-4 are fixed (regression tests in test_robustness_kafka_wire.py); finding 5
# (a token expiry past u64 microseconds) is fixed: such a token never expires.


def test_a_token_expiring_near_u64_max_does_not_break_the_token_list(server):
    with IggyConn(server.iggy_address) as c:
        c.login()
        name = "far-future"
        c.call(42, wt.encode_create_personal_access_token(wt.CreatePersonalAccessToken(name, 2**64 - 2)))
        try:
            assert c.call(41)[:2] == ("reply", 0)
        finally:
            c.call(43, wt.encode_delete_personal_access_token(wt.DeletePersonalAccessToken(name)))
