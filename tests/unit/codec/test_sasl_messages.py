"""SASL message codec (codec.sasl): round trips, RFC examples, and garbage that raises only SaslMessageError."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.codec import sasl as m

names = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), min_size=1, max_size=40)
nonces = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, blacklist_characters=","), min_size=1, max_size=64)
ext_keys = st.text(st.characters(min_codepoint=ord("a"), max_codepoint=ord("z")), min_size=2, max_size=10)
ext_values = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, blacklist_characters=","), max_size=20)


@given(names, names, st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), min_size=1))
def test_plain_round_trip(authzid, username, password):
    msg = m.PlainMessage(authzid, username, password)
    assert m.parse_plain(m.build_plain(msg)) == msg


@given(names)
def test_saslname_escape_round_trip(name):
    escaped = m.escape_saslname(name)
    assert "," not in escaped
    assert m.unescape_saslname(escaped) == name


@given(names, names | st.just(""), nonces, st.dictionaries(ext_keys, ext_values, max_size=3), st.sampled_from("ny"))
def test_client_first_round_trip(username, authzid, nonce, extensions, flag):
    header = f"{flag},{'a=' + m.escape_saslname(authzid) if authzid else ''},"
    msg = m.ClientFirst(header, authzid, username, nonce, extensions)
    wire = m.build_client_first(msg)
    assert m.parse_client_first(wire) == msg
    assert wire.decode().endswith(msg.bare)


@given(nonces, st.binary(min_size=1, max_size=64), st.integers(1, 2**31 - 1))
def test_server_first_round_trip(nonce, salt, iterations):
    msg = m.ServerFirst(nonce, salt, iterations)
    assert m.parse_server_first(m.build_server_first(msg)) == msg


@given(st.binary(max_size=40), nonces, st.binary(min_size=1, max_size=64), st.lists(st.tuples(ext_keys, ext_values), max_size=2))
def test_client_final_round_trip(binding, nonce, proof, extensions):
    msg = m.ClientFinal(binding, nonce, proof, tuple(extensions))
    wire = m.build_client_final(msg)
    parsed = m.parse_client_final(wire)
    assert parsed == msg
    assert parsed.without_proof == msg.without_proof
    assert wire.decode() == f"{parsed.without_proof},p={wire.decode().rsplit(',p=', 1)[1]}"


@given(st.binary(min_size=1, max_size=64))
def test_server_final_round_trip(signature):
    assert m.parse_server_final(m.build_server_final(signature)) == (signature, None)
    assert m.parse_server_final(m.build_server_final(error="invalid-proof")) == (None, "invalid-proof")


def test_rfc_7677_messages_parse():
    first = m.parse_client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert (first.username, first.nonce, first.bare) == ("user", "rOprNGfwEbeRWgbNEkqO", "n=user,r=rOprNGfwEbeRWgbNEkqO")
    sf = m.parse_server_first(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert sf.iterations == 4096 and len(sf.salt) == 16
    final = m.parse_client_final(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final.channel_binding == b"n,," and len(final.proof) == 32


@pytest.mark.parametrize(
    "token",
    [b"", b"n", b"p=tls-unique,,n=a,r=b", b"x,,n=a,r=b", b"n,,r=b,n=a", b"n,,n=,r=b", b"n,,n=a=2,r=b",
     b"n,,m=x,n=a,r=b", b"n,,n=a,r=b,c", b"n,z,n=a,r=b", b"n,,n=a,r=b c", b"\xff,,n=a,r=b"],
)
def test_bad_client_first_refused(token):
    with pytest.raises(m.SaslMessageError):
        m.parse_client_first(token)


@pytest.mark.parametrize(
    "token", [b"", b"\0a", b"a\0b", b"\0\0pw", b"\0user\0", b"a\0b\0c\0d", b"\0\xffuser\0pw"]
)
def test_bad_plain_refused(token):
    with pytest.raises(m.SaslMessageError):
        m.parse_plain(token)


@given(st.binary(max_size=200))
def test_garbage_raises_only_message_errors(data):
    for parse in (m.parse_plain, m.parse_client_first, m.parse_server_first, m.parse_client_final, m.parse_server_final):
        try:
            parse(data)
        except m.SaslMessageError:
            pass
