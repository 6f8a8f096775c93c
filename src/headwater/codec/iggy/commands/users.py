"""User commands (login-register bodies live in :mod:`..version`).

Sources: ``commands.mdx`` "Users"; crate ``requests/users/*.rs``,
``responses/users/*.rs``; SDK ``core/common/src/traits/binary_impls/users.rs``
(which reply each call decodes). Little-endian. ``options`` are raw options
blocks (TLV, decoded by ``headwater.codec.headers``).

=====================  ====  ===  =============================================  ===========================
command                code  op   request body                                   reply payload
=====================  ====  ===  =============================================  ===========================
GET_USER               31    2    [user_id Identifier]                           UserDetails; empty = none
GET_USERS              32    2    empty                                          [UserInfo]* (no count)
CREATE_USER            33    141  [username Name][password_len u8][password]     UserDetails (framed)
                                  [status u8][has_permissions u8]
                                  ([permissions_len u32][Permissions] if 1)
                                  [options to end]
DELETE_USER            34    143  [user_id Identifier]                           empty (framed)
UPDATE_USER            35    142  [user_id Identifier][has_username u8]          empty (framed)
                                  ([username Name] if 1)[has_status u8]
                                  ([status u8] if 1)[options to end]
UPDATE_PERMISSIONS     36    145  [user_id Identifier][has_permissions u8]       empty (framed)
                                  ([permissions_len u32][Permissions] if 1)
CHANGE_PASSWORD        37    144  [user_id Identifier][current u8-len str]       empty (framed)
                                  [new u8-len str]
LOGIN_USER (legacy)    38    2    [username Name][password u8-len str]           refused: Eviction 15
                                  [version u32-len str][context u32-len str]
LOGOUT_USER            39    3    empty                                          empty (not framed)
=====================  ====  ===  =============================================  ===========================

The crate types CREATE_USER's reply as empty, but the SDK decodes it as
UserDetails: we follow the SDK.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ...errors import InvalidFormat
from ..primitives import (
    Identifier,
    Permissions,
    Reader,
    decode_identifier,
    decode_permissions,
    encode_identifier,
    encode_name,
    encode_permissions,
    encode_str_u8,
    encode_str_u32,
)
from ._common import U32, Buffer, expect_empty, options_prefixed, read_flag, read_options_prefixed

__all__ = [
    "GetUser",
    "GetUsers",
    "CreateUser",
    "DeleteUser",
    "UpdateUser",
    "UpdatePermissions",
    "ChangePassword",
    "LoginUser",
    "LogoutUser",
    "decode_get_user",
    "encode_get_user",
    "decode_get_users",
    "encode_get_users",
    "decode_create_user",
    "encode_create_user",
    "decode_delete_user",
    "encode_delete_user",
    "decode_update_user",
    "encode_update_user",
    "decode_update_permissions",
    "encode_update_permissions",
    "decode_change_password",
    "encode_change_password",
    "decode_login_user",
    "encode_login_user",
    "decode_logout_user",
    "encode_logout_user",
    "UserInfo",
    "UserDetails",
    "encode_user_info",
    "encode_users",
    "decode_users",
    "encode_user_details",
    "decode_user_details",
]


# ---------------------------------------------------------------- requests


@dataclass(frozen=True, slots=True)
class GetUser:
    user_id: Identifier


@dataclass(frozen=True, slots=True)
class GetUsers:
    pass


@dataclass(frozen=True, slots=True)
class CreateUser:
    """``status``: 1 active, 2 inactive (not range-checked here: Iggy answers 45 InvalidUserStatus)."""

    username: str
    password: str
    status: int = 1
    permissions: Permissions | None = None
    options: bytes = b""


@dataclass(frozen=True, slots=True)
class DeleteUser:
    user_id: Identifier


@dataclass(frozen=True, slots=True)
class UpdateUser:
    """Patch: ``None`` fields are left unchanged."""

    user_id: Identifier
    username: str | None = None
    status: int | None = None
    options: bytes = b""


@dataclass(frozen=True, slots=True)
class UpdatePermissions:
    """Full replacement; ``None`` removes all permissions."""

    user_id: Identifier
    permissions: Permissions | None = None


@dataclass(frozen=True, slots=True)
class ChangePassword:
    user_id: Identifier
    current_password: str
    new_password: str


@dataclass(frozen=True, slots=True)
class LoginUser:
    """Legacy code 38 (refused by 0.11.0 servers with Eviction reason 15)."""

    username: str
    password: str
    version: str | None = None
    context: str | None = None


@dataclass(frozen=True, slots=True)
class LogoutUser:
    """Code 39, ``operation = 3``, empty."""


def _identifier_only(body: Buffer, what: str) -> Identifier:
    r = Reader(body)
    value = decode_identifier(r, "user_id")
    r.expect_end(what)
    return value


def decode_get_user(body: Buffer) -> GetUser:
    """``[user_id Identifier]``; raises :class:`InvalidFormat` (or InvalidIdentifier)."""
    return GetUser(_identifier_only(body, "get_user"))


def encode_get_user(value: GetUser) -> bytes:
    return encode_identifier(value.user_id)


def decode_get_users(body: Buffer) -> GetUsers:
    expect_empty(body, "get_users")
    return GetUsers()


def encode_get_users(value: GetUsers) -> bytes:
    return b""


def _read_optional_permissions(r: Reader) -> Permissions | None:
    if not read_flag(r, "has_permissions"):
        return None
    length = r.u32("permissions_len")
    start = r.pos
    sub = Reader(r.view(length, "permissions"), base=r.base + start)
    permissions = decode_permissions(sub)
    sub.expect_end("permissions (permissions_len larger than the block)")
    return permissions


def _optional_permissions(value: Permissions | None) -> bytes:
    if value is None:
        return b"\x00"
    block = encode_permissions(value)
    return b"\x01" + U32.pack(len(block)) + block


def decode_create_user(body: Buffer) -> CreateUser:
    """Decode CREATE_USER (layout in the module table); the options block is the rest of the body.

    Raises :class:`InvalidFormat` on a short body, bad utf-8, a flag other
    than 0/1, or a ``permissions_len`` that does not match the block.
    """
    r = Reader(body)
    username = r.name("username")
    password = r.str_u8("password")
    status = r.u8("status")
    permissions = _read_optional_permissions(r)
    return CreateUser(username, password, status, permissions, bytes(r.rest()))


def encode_create_user(value: CreateUser) -> bytes:
    return (
        encode_name(value.username, "username")
        + encode_str_u8(value.password, "password")
        + bytes((value.status,))
        + _optional_permissions(value.permissions)
        + bytes(value.options)
    )


def decode_delete_user(body: Buffer) -> DeleteUser:
    return DeleteUser(_identifier_only(body, "delete_user"))


def encode_delete_user(value: DeleteUser) -> bytes:
    return encode_identifier(value.user_id)


def decode_update_user(body: Buffer) -> UpdateUser:
    """Decode UPDATE_USER; options block is the rest. Raises :class:`InvalidFormat`."""
    r = Reader(body)
    user_id = decode_identifier(r, "user_id")
    username = r.name("username") if read_flag(r, "has_username") else None
    status = r.u8("status") if read_flag(r, "has_status") else None
    return UpdateUser(user_id, username, status, bytes(r.rest()))


def encode_update_user(value: UpdateUser) -> bytes:
    out = bytearray(encode_identifier(value.user_id))
    if value.username is None:
        out.append(0)
    else:
        out += b"\x01" + encode_name(value.username, "username")
    if value.status is None:
        out.append(0)
    else:
        out += bytes((1, value.status))
    out += value.options
    return bytes(out)


def decode_update_permissions(body: Buffer) -> UpdatePermissions:
    """Decode UPDATE_PERMISSIONS; raises :class:`InvalidFormat`."""
    r = Reader(body)
    user_id = decode_identifier(r, "user_id")
    permissions = _read_optional_permissions(r)
    r.expect_end("update_permissions")
    return UpdatePermissions(user_id, permissions)


def encode_update_permissions(value: UpdatePermissions) -> bytes:
    return encode_identifier(value.user_id) + _optional_permissions(value.permissions)


def decode_change_password(body: Buffer) -> ChangePassword:
    """Decode CHANGE_PASSWORD (passwords are u8-length strings, 0..255 bytes)."""
    r = Reader(body)
    user_id = decode_identifier(r, "user_id")
    current = r.str_u8("current_password")
    new = r.str_u8("new_password")
    r.expect_end("change_password")
    return ChangePassword(user_id, current, new)


def encode_change_password(value: ChangePassword) -> bytes:
    return (
        encode_identifier(value.user_id)
        + encode_str_u8(value.current_password, "current_password")
        + encode_str_u8(value.new_password, "new_password")
    )


def decode_login_user(body: Buffer) -> LoginUser:
    """Legacy LOGIN_USER (38), for recognising it; zero lengths decode as ``None``."""
    r = Reader(body)
    username = r.name("username")
    password = r.str_u8("password")
    version = r.str_u32("version") or None
    context = r.str_u32("context") or None
    r.expect_end("login_user")
    return LoginUser(username, password, version, context)


def encode_login_user(value: LoginUser) -> bytes:
    return (
        encode_name(value.username, "username")
        + encode_str_u8(value.password, "password")
        + encode_str_u32(value.version or "", "version")
        + encode_str_u32(value.context or "", "context")
    )


def decode_logout_user(body: Buffer) -> LogoutUser:
    expect_empty(body, "logout_user")
    return LogoutUser()


def encode_logout_user(value: LogoutUser) -> bytes:
    return b""


# ---------------------------------------------------------------- replies


@dataclass(frozen=True, slots=True)
class UserInfo:
    """``[id u32][created_at u64 µs][status u8][username Name][options_len u32][options]``.

    ``status`` must be 1 or 2 (the SDK rejects other values).
    """

    id: int
    created_at: int
    status: int
    username: str
    options: bytes = b""


@dataclass(frozen=True, slots=True)
class UserDetails:
    """GET_USER / CREATE_USER reply: a :class:`UserInfo` then the permissions section::

    no permissions:   [u32 0]                         (4 zero bytes)
    permissions:      [1 u8][len u32][Permissions]
    """

    id: int
    created_at: int
    status: int
    username: str
    options: bytes = b""
    permissions: Permissions | None = None


_USER_HEAD = struct.Struct("<IQB")


def encode_user_info(value: UserInfo) -> bytes:
    return (
        _USER_HEAD.pack(value.id, value.created_at, value.status)
        + encode_name(value.username, "username")
        + options_prefixed(value.options)
    )


def _read_user_info(r: Reader) -> UserInfo:
    user_id, created_at, status = _USER_HEAD.unpack(r.view(_USER_HEAD.size, "user"))
    return UserInfo(user_id, created_at, status, r.name("username"), read_options_prefixed(r))


def encode_users(values: list[UserInfo] | tuple[UserInfo, ...]) -> bytes:
    """GET_USERS reply payload: records back to back, no count."""
    return b"".join(encode_user_info(v) for v in values)


def decode_users(payload: Buffer) -> tuple[UserInfo, ...]:
    """Decode a GET_USERS reply payload (read to the end); raises :class:`InvalidFormat`."""
    r = Reader(payload)
    out = []
    while not r.at_end:
        out.append(_read_user_info(r))
    return tuple(out)


def encode_user_details(value: UserDetails) -> bytes:
    """GET_USER / CREATE_USER reply payload (crate ``responses/users/get_user.rs``)."""
    head = encode_user_info(
        UserInfo(value.id, value.created_at, value.status, value.username, value.options)
    )
    if value.permissions is None:
        return head + b"\x00\x00\x00\x00"
    block = encode_permissions(value.permissions)
    return head + b"\x01" + U32.pack(len(block)) + block


def decode_user_details(payload: Buffer) -> UserDetails:
    """Decode a GET_USER / CREATE_USER reply payload; raises :class:`InvalidFormat`."""
    r = Reader(payload)
    info = _read_user_info(r)
    start = r.pos
    flag = r.u8("has_permissions")
    if flag == 0:
        if any(r.view(3, "permissions padding")):
            raise InvalidFormat(
                "user details: nonzero padding after has_permissions = 0", offset=r.base + start
            )
        permissions = None
    else:
        length = r.u32("permissions_len")
        sub_start = r.pos
        sub = Reader(r.view(length, "permissions"), base=r.base + sub_start)
        permissions = decode_permissions(sub)
        sub.expect_end("permissions")
    r.expect_end("user details")
    return UserDetails(
        info.id, info.created_at, info.status, info.username, info.options, permissions
    )
