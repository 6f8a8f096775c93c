"""Personal access token commands (login with a token lives in :mod:`..version`, code 45).

Sources: ``commands.mdx`` "Personal access tokens"; crate
``requests/personal_access_tokens/*.rs``, ``responses/personal_access_tokens/*.rs``;
SDK ``core/common/src/wire_conversions.rs`` (``expiry_at`` 0 = never).

=====================================  ====  ===  =======================  =====================================
command                                code  op   request body             reply payload
=====================================  ====  ===  =======================  =====================================
GET_PERSONAL_ACCESS_TOKENS             41    2    empty                    [name Name][expiry_at u64 µs]* (no
                                                                           count; 0 = never expires)
CREATE_PERSONAL_ACCESS_TOKEN           42    146  [name Name][expiry u64]  [token Name] (framed)
DELETE_PERSONAL_ACCESS_TOKEN           43    147  [name Name]              empty (framed)
LOGIN_WITH_PERSONAL_ACCESS_TOKEN       44    2    [token Name]             legacy: refused with Eviction 15
=====================================  ====  ===  =======================  =====================================

``expiry`` in the create request is a duration in microseconds: 0 = server
default (no expiry today), ``u64::MAX`` = never.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..primitives import Reader, encode_name
from ._common import U64, Buffer, expect_empty

__all__ = [
    "GetPersonalAccessTokens",
    "CreatePersonalAccessToken",
    "DeletePersonalAccessToken",
    "LoginWithPersonalAccessToken",
    "decode_get_personal_access_tokens",
    "encode_get_personal_access_tokens",
    "decode_create_personal_access_token",
    "encode_create_personal_access_token",
    "decode_delete_personal_access_token",
    "encode_delete_personal_access_token",
    "decode_login_with_personal_access_token",
    "encode_login_with_personal_access_token",
    "PersonalAccessTokenInfo",
    "encode_personal_access_tokens",
    "decode_personal_access_tokens",
    "RawPersonalAccessToken",
    "encode_raw_personal_access_token",
    "decode_raw_personal_access_token",
]


@dataclass(frozen=True, slots=True)
class GetPersonalAccessTokens:
    pass


@dataclass(frozen=True, slots=True)
class CreatePersonalAccessToken:
    """``expiry``: microseconds; 0 server default, ``2**64 - 1`` never."""

    name: str
    expiry: int = 0


@dataclass(frozen=True, slots=True)
class DeletePersonalAccessToken:
    name: str


@dataclass(frozen=True, slots=True)
class LoginWithPersonalAccessToken:
    """Legacy code 44."""

    token: str


def decode_get_personal_access_tokens(body: Buffer) -> GetPersonalAccessTokens:
    expect_empty(body, "get_personal_access_tokens")
    return GetPersonalAccessTokens()


def encode_get_personal_access_tokens(value: GetPersonalAccessTokens) -> bytes:
    return b""


def decode_create_personal_access_token(body: Buffer) -> CreatePersonalAccessToken:
    """``[name Name][expiry u64 µs]``; raises :class:`InvalidFormat`."""
    r = Reader(body)
    name = r.name("name")
    expiry = r.u64("expiry")
    r.expect_end("create_personal_access_token")
    return CreatePersonalAccessToken(name, expiry)


def encode_create_personal_access_token(value: CreatePersonalAccessToken) -> bytes:
    return encode_name(value.name) + U64.pack(value.expiry)


def decode_delete_personal_access_token(body: Buffer) -> DeletePersonalAccessToken:
    r = Reader(body)
    name = r.name("name")
    r.expect_end("delete_personal_access_token")
    return DeletePersonalAccessToken(name)


def encode_delete_personal_access_token(value: DeletePersonalAccessToken) -> bytes:
    return encode_name(value.name)


def decode_login_with_personal_access_token(body: Buffer) -> LoginWithPersonalAccessToken:
    r = Reader(body)
    token = r.name("token")
    r.expect_end("login_with_personal_access_token")
    return LoginWithPersonalAccessToken(token)


def encode_login_with_personal_access_token(value: LoginWithPersonalAccessToken) -> bytes:
    return encode_name(value.token, "token")


# ---------------------------------------------------------------- replies


@dataclass(frozen=True, slots=True)
class PersonalAccessTokenInfo:
    """``[name Name][expiry_at u64]``: µs since the epoch, 0 = never expires."""

    name: str
    expiry_at: int = 0


def encode_personal_access_tokens(
    values: list[PersonalAccessTokenInfo] | tuple[PersonalAccessTokenInfo, ...],
) -> bytes:
    """GET_PERSONAL_ACCESS_TOKENS reply payload: entries back to back, no count."""
    return b"".join(encode_name(v.name) + U64.pack(v.expiry_at) for v in values)


def decode_personal_access_tokens(payload: Buffer) -> tuple[PersonalAccessTokenInfo, ...]:
    """Decode the list (read to the end); raises :class:`InvalidFormat`."""
    r = Reader(payload)
    out = []
    while not r.at_end:
        name = r.name("name")
        out.append(PersonalAccessTokenInfo(name, r.u64("expiry_at")))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class RawPersonalAccessToken:
    """CREATE_PERSONAL_ACCESS_TOKEN reply: the token string, ``[len u8][token]``, shown once."""

    token: str


def encode_raw_personal_access_token(value: RawPersonalAccessToken) -> bytes:
    return encode_name(value.token, "token")


def decode_raw_personal_access_token(payload: Buffer) -> RawPersonalAccessToken:
    r = Reader(payload)
    token = r.name("token")
    r.expect_end("raw personal access token")
    return RawPersonalAccessToken(token)
