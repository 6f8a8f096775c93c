"""Errors as the Iggy HTTP server answers them: a status and ``{"id", "code", "reason", "field"}``.

``id`` is the Iggy error code (``IggyErrorCode``), ``code`` its variant name in snake
case, ``reason`` a message, ``field`` the request field at fault or null (apache/iggy
``core/server/src/http/error.rs``). Statuses: 404 for the not-found codes, 401 for
unauthenticated / missing or invalid access token, 403 for unauthorized, 400 otherwise.
"""

from __future__ import annotations

from starlette.responses import JSONResponse

from ...codec.errors import CodecError
from ...codec.iggy.codes import IggyErrorCode
from ...core import errors as core_errors
from .. import corrupt
from ..iggy.errors import code_for

C = IggyErrorCode
NOT_FOUND_CODES = frozenset(
    {
        C.STREAM_ID_NOT_FOUND,
        C.TOPIC_ID_NOT_FOUND,
        C.PARTITION_NOT_FOUND,
        C.SEGMENT_NOT_FOUND,
        C.CLIENT_NOT_FOUND,
        C.CONSUMER_GROUP_ID_NOT_FOUND,
        C.CONSUMER_GROUP_NAME_NOT_FOUND,
        C.CONSUMER_GROUP_MEMBER_NOT_FOUND,
        C.CONSUMER_OFFSET_NOT_FOUND,
        C.RESOURCE_NOT_FOUND,
    }
)
UNAUTHENTICATED_CODES = frozenset(
    {C.UNAUTHENTICATED, C.ACCESS_TOKEN_MISSING, C.INVALID_ACCESS_TOKEN, C.INVALID_PERSONAL_ACCESS_TOKEN}
)
_FIELDS = {
    C.STREAM_ID_NOT_FOUND: "stream_id",
    C.TOPIC_ID_NOT_FOUND: "topic_id",
    C.PARTITION_NOT_FOUND: "partition_id",
    C.SEGMENT_NOT_FOUND: "segment_id",
    C.CLIENT_NOT_FOUND: "client_id",
    C.STREAM_NAME_ALREADY_EXISTS: "name",
    C.TOPIC_NAME_ALREADY_EXISTS: "name",
    C.CONSUMER_GROUP_NAME_ALREADY_EXISTS: "name",
    C.PERSONAL_ACCESS_TOKEN_ALREADY_EXISTS: "name",
    C.INVALID_STREAM_NAME: "name",
    C.INVALID_TOPIC_NAME: "name",
    C.USER_ALREADY_EXISTS: "username",
}


def status_for(code: int) -> int:
    if code in NOT_FOUND_CODES:
        return 404
    if code in UNAUTHENTICATED_CODES:
        return 401
    if code == C.UNAUTHORIZED:
        return 403
    return 400


def error_body(code: int, reason: str, field: str | None = None) -> dict:
    try:
        name = C(code).name.lower()
    except ValueError:
        name = "error"
    return {"id": int(code), "code": name, "reason": reason, "field": field or _FIELDS.get(code)}


def error_response(code: int, reason: str, field: str | None = None, *, status: int | None = None, headers=None) -> JSONResponse:
    """The JSON error reply for Iggy error ``code``."""
    return JSONResponse(error_body(code, reason, field), status_code=status or status_for(code), headers=headers)


def response_for(exc: Exception) -> JSONResponse:
    """A core or codec error -> its reply (the same code the TCP front-end answers)."""
    if isinstance(exc, core_errors.BrokerError):
        if isinstance(exc, core_errors.CorruptData):
            corrupt.report(exc, "http")  # (once a minute per partition)
        return error_response(code_for(exc), str(exc))
    if isinstance(exc, CodecError):
        return error_response(exc.code, str(exc), getattr(exc, "field", None))
    raise exc


NOT_FOUND_BODY = {"id": 404, "code": "not_found", "reason": "Resource not found", "field": None}
