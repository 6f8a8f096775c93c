"""Protocol version gate, login-register bodies and the login reply."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.codec.errors import InvalidFormat
from headwater.codec.iggy.errors import MalformedLogin, eviction_reason_of
from headwater.codec.iggy.framing import RESULT_OK, split_result
from headwater.codec.iggy.version import (
    PROTOCOL_VERSION,
    PROTOCOL_VERSION_MIN,
    ClientVersionInfo,
    LoginRegister,
    LoginRegisterWithPat,
    LoginReply,
    decode_client_version_info,
    decode_login_register,
    decode_login_register_any,
    decode_login_register_with_pat,
    decode_login_reply,
    encode_login_register,
    encode_login_register_with_pat,
    encode_login_reply,
    encode_login_reply_body,
    format_version,
    is_protocol_compatible,
    pack_version,
    unpack_version,
)
from iggy_strategies import login_replies, version_infos

# The login body the apache-iggy 0.9.0 SDK sends for login_user("iggy", "iggy").
SDK_LOGIN = bytes.fromhex("002c000008727573742d73646b06302e31312e300469676779046967677900000000")


def test_packed_version():
    assert PROTOCOL_VERSION == pack_version(0, 11, 0) == 0x2C00
    assert PROTOCOL_VERSION_MIN == 0x2C00
    assert unpack_version(0x2C05) == (0, 11, 5)
    assert format_version(pack_version(1, 2, 3)) == "1.2.3"
    assert pack_version(0, 9, 1023) < pack_version(0, 10, 0) < pack_version(1, 0, 0)
    with pytest.raises(ValueError):
        pack_version(0, 1024, 0)


@pytest.mark.parametrize(
    "version,ok",
    [
        ((0, 11, 0), True),
        ((0, 11, 7), True),  # a newer patch of our minor: same wire
        ((0, 10, 9), False),
        ((0, 12, 0), False),
        ((1, 11, 0), False),
    ],
)
def test_compatibility_gate(version, ok):
    assert is_protocol_compatible(pack_version(*version)) is ok


def test_compatibility_gate_rejects_reserved_bits():
    assert not is_protocol_compatible(PROTOCOL_VERSION | (1 << 30))


def test_sdk_login_body_golden():
    login = decode_login_register(SDK_LOGIN)
    assert login == LoginRegister(
        ClientVersionInfo(0x2C00, "rust-sdk", "0.11.0"), "iggy", "iggy", None
    )
    assert encode_login_register(login) == SDK_LOGIN
    info, used = decode_client_version_info(SDK_LOGIN)
    assert info.protocol_version == 0x2C00 and used == 4 + 9 + 7


def test_login_any_picks_the_shape():
    pat = LoginRegisterWithPat(
        ClientVersionInfo(0x2C00, "rust-sdk", "0.11.0"), "token-value", "ctx"
    )
    assert decode_login_register_any(SDK_LOGIN) == decode_login_register(SDK_LOGIN)
    assert decode_login_register_any(encode_login_register_with_pat(pat)) == pat


@given(
    version=version_infos,
    username=st.text(min_size=1, max_size=20),
    password=st.text(max_size=20),
    ctx=st.none() | st.text(min_size=1, max_size=20),
)
def test_login_round_trip(version, username, password, ctx):
    login = LoginRegister(version, username, password, ctx)
    assert decode_login_register(encode_login_register(login)) == login
    pat = LoginRegisterWithPat(version, password, ctx)
    assert decode_login_register_with_pat(encode_login_register_with_pat(pat)) == pat
    assert decode_login_register_any(encode_login_register_with_pat(pat)) == pat


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\x00\x2c\x00",
        b"\x00\x2c\x00\x00\x00",
        b"\x00\x2c\x00\x00\x02ab",
        b"\x00\x2c\x00\x00\x02\xff\xfe\x01a",
    ],
)
def test_malformed_prefix_asks_for_eviction_15(body):
    for decode in (decode_login_register_any, decode_login_register, decode_client_version_info):
        with pytest.raises(MalformedLogin) as err:
            decode(body)
        assert eviction_reason_of(err.value) == 15


def test_body_matching_neither_shape_is_malformed_login():
    with pytest.raises(MalformedLogin):
        decode_login_register_any(SDK_LOGIN[:-1])
    with pytest.raises(InvalidFormat):
        decode_login_register(SDK_LOGIN + b"\x00")


def test_login_reply_body_starts_with_the_result_count():
    reply = LoginReply(user_id=1, session=7, server_protocol_version=0x2C00, server_version="hw")
    payload = encode_login_reply(reply)
    assert payload == bytes.fromhex("01000000" "0700000000000000" "002c0000" "02") + b"hw"
    body = encode_login_reply_body(reply)
    assert body[:4] == RESULT_OK == b"\x00\x00\x00\x00" and body[4:] == payload
    code, rest = split_result(body)
    assert code == 0 and decode_login_reply(rest) == reply


@given(login_replies)
def test_login_reply_round_trip(reply):
    assert decode_login_reply(encode_login_reply(reply)) == reply
