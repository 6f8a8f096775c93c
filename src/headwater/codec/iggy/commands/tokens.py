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

from ..codes import Command
from ..schema import NAME, TO_END, U64, Field, ListOf, Record, payload_codec, request

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


# ---------------------------------------------------------------- replies


@dataclass(frozen=True, slots=True)
class PersonalAccessTokenInfo:
    """``[name Name][expiry_at u64]``: µs since the epoch, 0 = never expires."""

    name: str
    expiry_at: int = 0


@dataclass(frozen=True, slots=True)
class RawPersonalAccessToken:
    """CREATE_PERSONAL_ACCESS_TOKEN reply: the token string, ``[len u8][token]``, shown once."""

    token: str


PERSONAL_ACCESS_TOKEN_INFO = Record(
    PersonalAccessTokenInfo,
    [Field("name", NAME), Field("expiry_at", U64, json="zero is null", doc="µs since the epoch, 0 = never")],
)
PERSONAL_ACCESS_TOKENS = ListOf(PERSONAL_ACCESS_TOKEN_INFO, TO_END)
"""GET_PERSONAL_ACCESS_TOKENS reply payload: entries back to back, no count."""
RAW_PERSONAL_ACCESS_TOKEN = Record(
    RawPersonalAccessToken, [Field("token", NAME)], what="raw personal access token"
)

decode_personal_access_tokens, encode_personal_access_tokens = payload_codec(
    PERSONAL_ACCESS_TOKENS, "personal access tokens"
)
decode_raw_personal_access_token, encode_raw_personal_access_token = (
    RAW_PERSONAL_ACCESS_TOKEN.codec()
)

# ---------------------------------------------------------------- requests

GET_PERSONAL_ACCESS_TOKENS = request(
    Command.GET_PERSONAL_ACCESS_TOKENS, GetPersonalAccessTokens, reply=PERSONAL_ACCESS_TOKENS
)
CREATE_PERSONAL_ACCESS_TOKEN = request(
    Command.CREATE_PERSONAL_ACCESS_TOKEN,
    CreatePersonalAccessToken,
    [Field("name", NAME), Field("expiry", U64, json="expiry_us", doc="µs; 0 server default, u64::MAX never")],
    reply=RAW_PERSONAL_ACCESS_TOKEN,
)
DELETE_PERSONAL_ACCESS_TOKEN = request(
    Command.DELETE_PERSONAL_ACCESS_TOKEN, DeletePersonalAccessToken, [Field("name", NAME)]
)
LOGIN_WITH_PERSONAL_ACCESS_TOKEN = request(
    Command.LOGIN_WITH_PERSONAL_ACCESS_TOKEN, LoginWithPersonalAccessToken, [Field("token", NAME)]
)

decode_get_personal_access_tokens, encode_get_personal_access_tokens = (
    GET_PERSONAL_ACCESS_TOKENS.codec()
)
decode_create_personal_access_token, encode_create_personal_access_token = (
    CREATE_PERSONAL_ACCESS_TOKEN.codec()
)
decode_delete_personal_access_token, encode_delete_personal_access_token = (
    DELETE_PERSONAL_ACCESS_TOKEN.codec()
)
decode_login_with_personal_access_token, encode_login_with_personal_access_token = (
    LOGIN_WITH_PERSONAL_ACCESS_TOKEN.codec()
)
