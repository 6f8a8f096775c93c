"""SaslHandshake (key 17), versions 0-1: the client picks a SASL mechanism.

Answers the enabled mechanisms (``[kafka] sasl_enabled_mechanisms``) and, for
an enabled one, starts the server side of the exchange (``session.Session``).
v0: the SASL tokens that follow are bare frames (no request header); v1: they
come in SaslAuthenticate requests. An unknown or disabled mechanism gets
UNSUPPORTED_SASL_MECHANISM (33) and the connection closes, as in Kafka; a
handshake in the middle of an exchange gets ILLEGAL_SASL_STATE (34), likewise.
An authenticated connection may hand-shake again to re-authenticate (KIP-368).
"""

from __future__ import annotations

from ..registry import ApiKey, Context, kafka_api

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34


@kafka_api(ApiKey.SASL_HANDSHAKE)
def sasl_handshake(ctx: Context, request):
    session = ctx.session
    offered = ctx.frontend.mechanisms
    if session.exchange is not None:
        session.close_after = "SaslHandshake during a SASL exchange"
        return ctx.response(error_code=ILLEGAL_SASL_STATE, mechanisms=offered)
    mechanism = request.mechanism
    if mechanism not in offered:
        session.close_after = f"unsupported SASL mechanism {mechanism!r}"
        return ctx.response(error_code=UNSUPPORTED_SASL_MECHANISM, mechanisms=offered)
    session.start(mechanism, ctx.broker.users, raw_tokens=ctx.version == 0)
    return ctx.response(error_code=0, mechanisms=offered)
