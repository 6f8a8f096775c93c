"""Garbage in, only our errors out: every decoder, fed random or mutated bytes, returns or raises CodecError."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater.codec.errors import CodecError
from headwater.codec.iggy.codes import Command
from headwater.codec.iggy.commands import COMMANDS
from headwater.codec.iggy.framing import (
    Framer,
    decode_eviction,
    decode_reply_header,
    decode_request_header,
    encode_request,
    split_result,
)
from headwater.codec.iggy.version import decode_client_version_info, decode_login_register_any
from iggy_strategies import REPLIES, REQUESTS

pytestmark = pytest.mark.slow  # a file of long tests: handed out first (tests/conftest.py)

FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _only_codec_errors(fn, data):
    try:
        fn(data)
    except CodecError:
        pass


@st.composite
def mutated(draw, strategy, encode):
    """A valid encoding with a few bytes flipped, cut or appended."""
    data = bytearray(encode(draw(strategy)))
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["flip", "cut", "append", "set"]))
        if action == "flip" and data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif action == "set" and data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.sampled_from([0, 1, 2, 3, 0x7F, 0xFF]))
        elif action == "cut" and data:
            del data[draw(st.integers(0, len(data) - 1)) :]
        else:
            data += draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


@pytest.mark.parametrize("command", list(Command), ids=lambda c: c.name)
@FUZZ
@given(data=st.binary(max_size=300))
def test_request_decoders_on_random_bytes(command, data):
    _only_codec_errors(COMMANDS[command].decode, data)


@pytest.mark.parametrize("command", list(Command), ids=lambda c: c.name)
@FUZZ
@given(data=st.data())
def test_request_decoders_on_mutated_bytes(command, data):
    spec = COMMANDS[command]
    _only_codec_errors(spec.decode, data.draw(mutated(REQUESTS[command], spec.encode)))


@pytest.mark.parametrize("name,strategy,encode,decode", REPLIES, ids=[r[0] for r in REPLIES])
@FUZZ
@given(data=st.data())
def test_reply_decoders_on_garbage(name, strategy, encode, decode, data):
    _only_codec_errors(decode, data.draw(st.binary(max_size=300)))
    _only_codec_errors(decode, data.draw(mutated(strategy, encode)))


@FUZZ
@given(data=st.binary(max_size=300))
def test_login_and_header_decoders_on_garbage(data):
    for fn in (
        decode_login_register_any,
        decode_client_version_info,
        decode_request_header,
        decode_reply_header,
        decode_eviction,
        split_result,
    ):
        _only_codec_errors(fn, data)


@FUZZ
@given(data=st.data())
def test_framer_on_mutated_streams(data):
    frames = [
        encode_request(
            data.draw(st.sampled_from(list(Command))),
            data.draw(st.binary(max_size=64)),
            client=i + 1,
        )
        for i in range(data.draw(st.integers(1, 4)))
    ]
    stream = bytearray(b"".join(frames))
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(stream) - 1))
        stream[i] = data.draw(st.integers(0, 255))
    framer = Framer(max_frame_size=data.draw(st.integers(256, 1 << 16)))
    try:
        framer.feed(stream)
        while (frame := framer.next_frame()) is not None:
            header, body = frame
            spec = COMMANDS.get(header.command_code)
            if spec is not None:
                _only_codec_errors(spec.decode, body)
    except CodecError:
        pass
