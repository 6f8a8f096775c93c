"""SaslAuthenticate (key 36), versions 0-2: one SASL token each way (KIP-152).

v1 adds session_lifetime_ms (KIP-368: ``[kafka] connections_max_reauth_ms``,
0 = the session does not expire); v2 is the flexible encoding. Before a
SaslHandshake v1 chose a mechanism: ILLEGAL_SASL_STATE (34). A failed
exchange: SASL_AUTHENTICATION_FAILED (58) with the reason, and the connection
closes after the response, as in Kafka.
"""

from __future__ import annotations

import datetime

from ....core.sasl import AuthenticationFailed
from ..registry import ApiKey, Context, kafka_api

ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58


def _response(ctx: Context, code: int, message: str | None, token: bytes = b"", lifetime_ms: int = 0):
    return ctx.response(
        error_code=code,
        error_message=message,
        auth_bytes=token,
        session_lifetime=datetime.timedelta(milliseconds=lifetime_ms),
    )


@kafka_api(ApiKey.SASL_AUTHENTICATE)
async def sasl_authenticate(ctx: Context, request):
    session = ctx.session
    if session.exchange is None or session.raw_tokens:
        session.close_after = "SaslAuthenticate without a SaslHandshake v1"
        return _response(ctx, ILLEGAL_SASL_STATE, "SaslAuthenticate must follow SaslHandshake v1")
    try:
        token, lifetime_ms = await session.step(bytes(request.auth_bytes), ctx.config.connections_max_reauth_ms)
    except AuthenticationFailed as e:
        session.close_after = f"SASL authentication failed: {e}"
        return _response(ctx, SASL_AUTHENTICATION_FAILED, f"Authentication failed: {e}")
    return _response(ctx, 0, None, token, lifetime_ms)
