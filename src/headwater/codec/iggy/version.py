"""Protocol version, the login-register handshake bodies and the login reply.

Source: ``connection-lifecycle.mdx`` ("Protocol version", "Login-register")
in apache/iggy-website; crate ``core/binary_protocol/src/version.rs``,
``requests/users/login_register.rs``, ``login_register_with_pat.rs``,
``responses/users/login_register.rs`` (apache/iggy 0.11.0-edge.4); and
``shared/spec/NOTES.md`` (observed with the apache-iggy 0.9.0 SDK).

Packed version (u32): ``major << 20 | minor << 10 | patch``, 10 bits each,
bits 31..30 zero. 0.11.0 packs to 0x2C00. A client is accepted when its
version is ``>= PROTOCOL_VERSION_MIN`` and its ``major.minor`` is ``<=`` the
server's (patch ignored for the upper bound).

Login bodies (both ride ``operation = 1`` Register, ``session = 0``)::

    ClientVersionInfo  [protocol_version u32][sdk_name_len u8][sdk_name][sdk_version_len u8][sdk_version]
    code 40            [ClientVersionInfo][username_len u8][username][password_len u8][password]
                       [context_len u32][context]
    code 45            [ClientVersionInfo][token_len u8][token][context_len u32][context]

The request header does not say which of 40 or 45 it is (the SDK writes no
code for Register); Iggy's server tries the password shape first, then the
token shape. :func:`decode_login_register_any` does the same.

Login reply payload::

    [user_id u32][session u64][server_protocol_version u32][server_version_len u8][server_version]

The reply BODY is ``RESULT_OK`` (u32 0) followed by this payload:
``framing.mdx`` says a successful Register reply starts directly with the
payload, but the SDK treats a non-empty Register reply as result-framed and
rejects one without the count ("Invalid format"); see NOTES.md and SDK
``core/sdk/src/vsr.rs`` ``split_metadata_result``. Use
:func:`encode_login_reply_body`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import CodecError, InvalidFormat
from .errors import MalformedLogin
from .codes import Command
from .framing import RESULT_OK
from .primitives import Reader, encode_name, encode_str_u8, encode_str_u32
from .schema import NAME, STR8, STR32, U32, U64, Field, NoneIfEmpty, Record, request

__all__ = [
    "PROTOCOL_VERSION",
    "PROTOCOL_VERSION_MIN",
    "pack_version",
    "unpack_version",
    "format_version",
    "is_protocol_compatible",
    "ClientVersionInfo",
    "decode_client_version_info",
    "encode_client_version_info",
    "LoginRegister",
    "LoginRegisterWithPat",
    "decode_login_register",
    "encode_login_register",
    "decode_login_register_with_pat",
    "encode_login_register_with_pat",
    "decode_login_register_any",
    "LoginReply",
    "encode_login_reply",
    "encode_login_reply_body",
    "decode_login_reply",
]

_BITS = 10
_COMPONENT_MAX = (1 << _BITS) - 1


def pack_version(major: int, minor: int, patch: int) -> int:
    """``major << 20 | minor << 10 | patch``; raises ``ValueError`` if a component is over 1023."""
    for part in (major, minor, patch):
        if not 0 <= part <= _COMPONENT_MAX:
            raise ValueError(f"version component {part} outside 0..1023")
    return (major << 2 * _BITS) | (minor << _BITS) | patch


def unpack_version(value: int) -> tuple[int, int, int]:
    """``(major, minor, patch)`` of a packed version (reserved bits 31..30 ignored)."""
    return (
        (value >> 2 * _BITS) & _COMPONENT_MAX,
        (value >> _BITS) & _COMPONENT_MAX,
        value & _COMPONENT_MAX,
    )


def format_version(value: int) -> str:
    """``"major.minor.patch"``."""
    return "%d.%d.%d" % unpack_version(value)


PROTOCOL_VERSION = pack_version(0, 11, 0)
"""The protocol this codec speaks: 0.11.0 = 0x2C00."""

PROTOCOL_VERSION_MIN = PROTOCOL_VERSION & ~_COMPONENT_MAX
"""Oldest accepted client version: the current one with patch zeroed."""


def is_protocol_compatible(
    client_version: int,
    *,
    server_version: int = PROTOCOL_VERSION,
    server_version_min: int = PROTOCOL_VERSION_MIN,
) -> bool:
    """The login gate: ``client >= min`` and ``client.major.minor <= server.major.minor``.

    Source: ``connection-lifecycle.mdx`` "Protocol version"; crate
    ``is_protocol_compatible``. A refused client gets an Eviction, reason 14,
    with ``(server_version, server_version_min)`` as the window.
    """
    return client_version >= server_version_min and (client_version >> _BITS) <= (
        server_version >> _BITS
    )


# ---------------------------------------------------------------- client version info


@dataclass(frozen=True, slots=True)
class ClientVersionInfo:
    """The prefix of every login-register body."""

    protocol_version: int
    sdk_name: str
    sdk_version: str


def _read_version_info(r: Reader) -> ClientVersionInfo:
    try:
        return ClientVersionInfo(
            r.u32("protocol_version"), r.name("sdk_name"), r.name("sdk_version")
        )
    except MalformedLogin:
        raise
    except CodecError as exc:
        raise MalformedLogin(
            f"undecodable ClientVersionInfo prefix: {exc}", offset=exc.offset
        ) from None


def decode_client_version_info(
    body: bytes | bytearray | memoryview,
) -> tuple[ClientVersionInfo, int]:
    """Decode the ClientVersionInfo prefix; return it and the bytes it used.

    Raises :class:`~.errors.MalformedLogin` (eviction reason 15) when the
    prefix does not decode (short, empty or non-utf-8 names).
    """
    r = Reader(body)
    info = _read_version_info(r)
    return info, r.pos


def encode_client_version_info(value: ClientVersionInfo) -> bytes:
    return (
        struct.pack("<I", value.protocol_version)
        + encode_name(value.sdk_name, "sdk_name")
        + encode_name(value.sdk_version, "sdk_version")
    )


# ---------------------------------------------------------------- login bodies


@dataclass(frozen=True, slots=True)
class LoginRegister:
    """Code 40 body. ``context`` is ``None`` when ``context_len`` is 0."""

    version: ClientVersionInfo
    username: str
    password: str
    context: str | None = None


@dataclass(frozen=True, slots=True)
class LoginRegisterWithPat:
    """Code 45 body. ``context`` is ``None`` when ``context_len`` is 0."""

    version: ClientVersionInfo
    token: str
    context: str | None = None


def _context(r: Reader) -> str | None:
    n = r.u32("context_len")
    return r.utf8(n, "context") if n else None


def _password_tail(r: Reader, version: ClientVersionInfo) -> LoginRegister:
    username = r.name("username")
    password = r.str_u8("password")
    context = _context(r)
    r.expect_end("login_register")
    return LoginRegister(version, username, password, context)


def _token_tail(r: Reader, version: ClientVersionInfo) -> LoginRegisterWithPat:
    token = r.str_u8("token")
    context = _context(r)
    r.expect_end("login_register_with_pat")
    return LoginRegisterWithPat(version, token, context)


def decode_login_register(body: bytes | bytearray | memoryview) -> LoginRegister:
    """Decode a code-40 body (layout in the module docstring).

    Raises :class:`~.errors.MalformedLogin` for a bad prefix,
    :class:`InvalidFormat` for a bad tail (short, bad utf-8, trailing bytes).
    """
    r = Reader(body)
    return _password_tail(r, _read_version_info(r))


def encode_login_register(value: LoginRegister) -> bytes:
    return (
        encode_client_version_info(value.version)
        + encode_name(value.username, "username")
        + encode_str_u8(value.password, "password")
        + encode_str_u32(value.context or "", "context")
    )


def decode_login_register_with_pat(body: bytes | bytearray | memoryview) -> LoginRegisterWithPat:
    """Decode a code-45 body; errors as :func:`decode_login_register`."""
    r = Reader(body)
    return _token_tail(r, _read_version_info(r))


def encode_login_register_with_pat(value: LoginRegisterWithPat) -> bytes:
    return (
        encode_client_version_info(value.version)
        + encode_str_u8(value.token, "token")
        + encode_str_u32(value.context or "", "context")
    )


def decode_login_register_any(
    body: bytes | bytearray | memoryview,
) -> LoginRegister | LoginRegisterWithPat:
    """Decode a Register body of either shape: password (40) first, then token (45).

    Raises :class:`~.errors.MalformedLogin` when the prefix does not decode,
    or when neither shape consumes the body exactly. Iggy's server also falls
    back to the token shape when a body that parses as a password login fails
    authentication; do that with :func:`decode_login_register_with_pat`.
    """
    r = Reader(body)
    version = _read_version_info(r)
    tail = r.pos
    try:
        return _password_tail(r, version)
    except InvalidFormat:
        pass
    r.pos = tail
    try:
        return _token_tail(r, version)
    except InvalidFormat as exc:
        raise MalformedLogin(
            f"login body matches neither the password nor the token shape: {exc}", offset=tail
        ) from None


# ---------------------------------------------------------------- login reply


@dataclass(frozen=True, slots=True)
class LoginReply:
    """The login reply payload. ``session`` is the fence epoch the client echoes from then on."""

    user_id: int
    session: int
    server_protocol_version: int = PROTOCOL_VERSION
    server_version: str = "headwater"


LOGIN_REPLY = Record(
    LoginReply,
    [
        Field("user_id", U32),
        Field("session", U64),
        Field("server_protocol_version", U32),
        Field("server_version", NAME),
    ],
    what="login reply",
)
_decode_login_reply, encode_login_reply = LOGIN_REPLY.codec()


def encode_login_reply_body(value: LoginReply) -> bytes:
    """The whole successful login reply body: ``u32 0`` (result count) + the payload (NOTES.md).

    :func:`encode_login_reply` gives the payload alone:
    ``[user_id u32][session u64][server_protocol_version u32][len u8][server_version]``.
    """
    return RESULT_OK + encode_login_reply(value)


def decode_login_reply(payload: bytes | bytearray | memoryview) -> LoginReply:
    """Decode the payload (after the result count); raises :class:`InvalidFormat`."""
    return _decode_login_reply(payload)


LOGIN_REPLY.payload_decoder = decode_login_reply

# ---------------------------------------------------------------- declarations

CLIENT_VERSION_INFO = Record(
    ClientVersionInfo,
    [Field("protocol_version", U32), Field("sdk_name", NAME), Field("sdk_version", NAME)],
)
_CONTEXT = Field("context", NoneIfEmpty(STR32))
LOGIN_REGISTER = request(
    Command.LOGIN_REGISTER,
    LoginRegister,
    [
        Field("version", CLIENT_VERSION_INFO),
        Field("username", NAME),
        Field("password", STR8),
        _CONTEXT,
    ],
    reply=LOGIN_REPLY,
    codec=(decode_login_register, encode_login_register),
)
LOGIN_REGISTER_WITH_PAT = request(
    Command.LOGIN_REGISTER_WITH_PAT,
    LoginRegisterWithPat,
    [Field("version", CLIENT_VERSION_INFO), Field("token", STR8), _CONTEXT],
    reply=LOGIN_REPLY,
    codec=(decode_login_register_with_pat, encode_login_register_with_pat),
)
