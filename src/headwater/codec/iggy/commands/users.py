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

from dataclasses import dataclass

from ..codes import Command
from ..primitives import Identifier, Permissions
from ..schema import IDENTIFIER, NAME, OPTIONS, PERMISSIONS, REST, STR8, STR32, TO_END, U8, U32, U64
from ..schema import Field, ListOf, NoneIfEmpty, Optional, Record, Sized, payload_codec, request

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


_USER_FIELDS = [
    Field("id", U32),
    Field("created_at", U64, doc="µs since the epoch"),
    Field("status", U8, json="user status", doc="1 active, 2 inactive"),
    Field("username", NAME),
    Field("options", OPTIONS),
]
USER_INFO = Record(UserInfo, _USER_FIELDS, label="user")
USER_DETAILS = Record(
    UserDetails,
    [
        *_USER_FIELDS,
        Field(
            "permissions",
            Optional(Sized(PERMISSIONS), flag="has_permissions", strict=False, padding=3),
            doc="none: u32 0; else [1 u8][len u32][Permissions]",
        ),
    ],
    what="user details",
)
USERS = ListOf(USER_INFO, TO_END)
"""GET_USERS reply payload: records back to back, no count."""

encode_user_info = USER_INFO.codec()[1]
decode_users, encode_users = payload_codec(USERS, "users")
decode_user_details, encode_user_details = USER_DETAILS.codec()

# ---------------------------------------------------------------- requests

USER_ID = Field("user_id", IDENTIFIER)
_PERMISSIONS = Field("permissions", Optional(Sized(PERMISSIONS), flag="has_permissions"))

GET_USER = request(
    Command.GET_USER, GetUser, [USER_ID], reply=USER_DETAILS, empty_reply="not found"
)
GET_USERS = request(Command.GET_USERS, GetUsers, reply=USERS)
CREATE_USER = request(
    Command.CREATE_USER,
    CreateUser,
    [
        Field("username", NAME),
        Field("password", STR8),
        Field("status", U8, json="user status", doc="1 active, 2 inactive"),
        _PERMISSIONS,
        Field("options", REST, json="skip"),
    ],
    reply=USER_DETAILS,
)
DELETE_USER = request(Command.DELETE_USER, DeleteUser, [USER_ID])
UPDATE_USER = request(
    Command.UPDATE_USER,
    UpdateUser,
    [
        USER_ID,
        Field("username", Optional(NAME, flag="has_username")),
        Field("status", Optional(U8, flag="has_status"), json="user status"),
        Field("options", REST),
    ],
)
UPDATE_PERMISSIONS = request(Command.UPDATE_PERMISSIONS, UpdatePermissions, [USER_ID, _PERMISSIONS])
CHANGE_PASSWORD = request(
    Command.CHANGE_PASSWORD,
    ChangePassword,
    [USER_ID, Field("current_password", STR8), Field("new_password", STR8)],
)
LOGIN_USER = request(
    Command.LOGIN_USER,
    LoginUser,
    [
        Field("username", NAME),
        Field("password", STR8),
        Field("version", NoneIfEmpty(STR32)),
        Field("context", NoneIfEmpty(STR32)),
    ],
)
LOGOUT_USER = request(Command.LOGOUT_USER, LogoutUser)

decode_get_user, encode_get_user = GET_USER.codec()
decode_get_users, encode_get_users = GET_USERS.codec()
decode_create_user, encode_create_user = CREATE_USER.codec()
decode_delete_user, encode_delete_user = DELETE_USER.codec()
decode_update_user, encode_update_user = UPDATE_USER.codec()
decode_update_permissions, encode_update_permissions = UPDATE_PERMISSIONS.codec()
decode_change_password, encode_change_password = CHANGE_PASSWORD.codec()
decode_login_user, encode_login_user = LOGIN_USER.codec()
decode_logout_user, encode_logout_user = LOGOUT_USER.codec()
