"""A Kafka connection's security state: who it is, its SASL exchange, its session's end.

States (Kafka's SaslServerAuthenticator, KIP-43 and KIP-368)::

    anonymous --SaslHandshake(mech)--> handshaken --SaslAuthenticate*--> authenticated
    authenticated --SaslHandshake--> handshaken (re-authentication: same principal only)

- SaslHandshake v0 switches the connection to raw tokens: the following frames
  are bare SASL tokens (4-byte size + token, no request header), answered the
  same way, until the exchange ends (``raw_tokens``). v1 uses SaslAuthenticate.
- A failed exchange is answered, then the connection closes (``close_after``).
- With ``connections_max_reauth_ms`` > 0, a session ends that many ms after it
  was authenticated: SaslAuthenticate v1+ tells the client (``session_lifetime_ms``),
  and a request arriving after the end closes the connection (Kafka does the same,
  also for v0 clients, which cannot re-authenticate).
- With ``authentication_required``, only ApiVersions, SaslHandshake and
  SaslAuthenticate are served before authentication (anything else closes the
  connection: Kafka's ILLEGAL_SASL_STATE).
"""

from __future__ import annotations

import asyncio
import time

from ...core import sasl
from ...core.acls import Subject
from ...core.users import User


class Session:
    __slots__ = ("user", "host", "mechanism", "exchange", "raw_tokens", "expires_at", "close_after", "_subject")

    def __init__(self, host: str):
        self.user: User | None = None  # None: the anonymous principal
        self.host = host
        self.mechanism: str | None = None  # set by SaslHandshake, cleared when the exchange ends
        self.exchange: sasl.PlainExchange | sasl.ScramExchange | None = None
        self.raw_tokens = False
        self.expires_at: float | None = None  # time.monotonic() deadline of an authenticated session
        self.close_after: str | None = None  # reason to close once the current response is sent
        self._subject: Subject | None = None

    @property
    def authenticated(self) -> bool:
        return self.user is not None

    @property
    def subject(self) -> Subject:
        if self._subject is None:
            self._subject = Subject.of(self.user, self.host)
        return self._subject

    def refresh(self, users) -> None:
        """Pick up the user's current permissions (changed over Iggy meanwhile)."""
        if self.user is not None:
            current = users.find(self.user.id)
            if current is None:  # deleted: no rights left, and the connection ends after this request
                current = User(self.user.id, self.user.username, "", 0, 0)
                self.close_after = f"user {self.user.username!r} was deleted"
            if current is not self.user:
                self.user = current
                self._subject = None

    def expired(self) -> bool:
        return self.expires_at is not None and time.monotonic() >= self.expires_at

    def start(self, mechanism: str, users, raw_tokens: bool) -> None:
        self.mechanism = mechanism
        self.exchange = sasl.exchange(users, mechanism)
        self.raw_tokens = raw_tokens

    async def step(self, token: bytes, reauth_ms: int) -> tuple[bytes, int]:
        """Feed one client token; returns (server token, session lifetime ms: 0 until done or when unlimited).
        Raises ``sasl.AuthenticationFailed``."""
        exchange = self.exchange
        assert exchange is not None
        try:
            if isinstance(exchange, sasl.PlainExchange):
                reply = await asyncio.get_running_loop().run_in_executor(None, exchange.step, token)  # Argon2
            else:
                reply = exchange.step(token)
        except sasl.AuthenticationFailed:
            self.exchange = None
            self.mechanism = None
            self.raw_tokens = False
            raise
        if exchange.user is None:
            return reply, 0
        if self.user is not None and exchange.user.id != self.user.id:
            self.exchange = None
            raise sasl.AuthenticationFailed("re-authentication must keep the same principal")
        self.user = exchange.user
        self._subject = None
        self.exchange = None
        self.mechanism = None
        self.raw_tokens = False
        self.expires_at = time.monotonic() + reauth_ms / 1000 if reauth_ms > 0 else None
        return reply, reauth_ms
