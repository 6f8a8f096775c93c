"""SASL server exchanges over Headwater users: PLAIN and SCRAM-SHA-256/512.

Protocol-neutral: a front-end feeds the client's tokens to an exchange's
``step`` and sends back what it returns; the exchange ends with the
authenticated ``User`` or raises ``AuthenticationFailed``.

- PLAIN (RFC 4616) checks the user's Argon2id password hash (``core.users``):
  the password a user was given over the Iggy protocol works here. An authzid,
  if sent, must equal the username. ``step`` is slow (Argon2): run it off the loop.
- SCRAM (RFC 5802; SHA-256 and SHA-512 per RFC 7677) checks the salted
  credential kept per user and mechanism: salt, iterations, StoredKey and
  ServerKey (never the password). ``scram_credential`` derives one from a
  SaltedPassword (what Kafka's AlterUserScramCredentials sends) or a password.
  An unknown user gets a full exchange with a made-up salt and fails at the
  proof, so usernames cannot be probed. The client-final nonce must be the
  combined nonce, or (librdkafka < 2.6.1's bug, accepted by Kafka 3.8.1-3.9)
  the client's nonce followed by it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from ..codec import sasl as msg
from . import errors
from .users import USER_ACTIVE, ScramCredential, User, Users

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)
SCRAM_HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
SCRAM_MIN_ITERATIONS = 4096  # Kafka's bounds for a SCRAM credential (ScramMechanism.minIterations)
SCRAM_MAX_ITERATIONS = 16384


class AuthenticationFailed(Exception):
    """The SASL exchange failed: bad credentials, a malformed message, or an inactive user."""


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i) = PBKDF2-HMAC-H (SASLprep is not applied: Kafka does not either)."""
    return hashlib.pbkdf2_hmac(SCRAM_HASHES[mechanism], password.encode(), salt, iterations)


def scram_credential(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    """StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword, "Server Key")."""
    h = SCRAM_HASHES[mechanism]
    client_key = hmac.digest(salted, b"Client Key", h)
    return ScramCredential(
        salt, iterations, hashlib.new(h, client_key).digest(), hmac.digest(salted, b"Server Key", h)
    )


def check_iterations(iterations: int) -> None:
    if not SCRAM_MIN_ITERATIONS <= iterations <= SCRAM_MAX_ITERATIONS:
        raise errors.InvalidArgument(
            f"iterations {iterations} outside {SCRAM_MIN_ITERATIONS}..{SCRAM_MAX_ITERATIONS}"
        )


def _active(user: User | None) -> User:
    if user is None:
        raise AuthenticationFailed("invalid username or password")
    if user.status != USER_ACTIVE:
        raise AuthenticationFailed(f"user {user.username!r} is inactive")
    return user


class PlainExchange:
    """One step: the PLAIN message; returns b"" and sets ``user``."""

    mechanism = PLAIN

    def __init__(self, users: Users):
        self.users = users
        self.user: User | None = None
        self.done = False

    def step(self, token: bytes) -> bytes:
        if self.done:
            raise AuthenticationFailed("PLAIN takes one message")
        self.done = True
        try:
            m = msg.parse_plain(token)
        except msg.SaslMessageError as e:
            raise AuthenticationFailed(f"invalid PLAIN message: {e}") from None
        if m.authzid and m.authzid != m.username:
            raise AuthenticationFailed("authorization id must be empty or the username")
        try:
            self.user = self.users.authenticate(m.username, m.password)
        except errors.UserInactive as e:
            raise AuthenticationFailed(str(e)) from None
        except errors.InvalidCredentials:
            raise AuthenticationFailed("invalid username or password") from None
        return b""


class ScramExchange:
    """Two steps: client-first -> server-first, client-final -> server-final (then ``user`` is set)."""

    def __init__(self, users: Users, mechanism: str, nonce: str | None = None):
        self.users = users
        self.mechanism = mechanism
        self._hash = SCRAM_HASHES[mechanism]
        self._server_nonce = nonce or secrets.token_urlsafe(24)
        self._first: msg.ClientFirst | None = None
        self._server_first: msg.ServerFirst | None = None
        self._credential: ScramCredential | None = None
        self._candidate: User | None = None
        self.user: User | None = None
        self.done = False

    def step(self, token: bytes) -> bytes:
        if self.done:
            raise AuthenticationFailed("SCRAM exchange already finished")
        try:
            if self._first is None:
                return self._client_first(token)
            self.done = True
            return self._client_final(token)
        except msg.SaslMessageError as e:
            self.done = True
            raise AuthenticationFailed(f"invalid SCRAM message: {e}") from None

    def _client_first(self, token: bytes) -> bytes:
        first = msg.parse_client_first(token)
        if first.authzid and first.authzid != first.username:
            raise AuthenticationFailed("authorization id must be empty or the username")
        if first.extensions and first.extensions != {"tokenauth": "false"}:
            raise AuthenticationFailed(f"unsupported SCRAM extensions {sorted(first.extensions)}")
        user = self.users.find(first.username)
        cred = user.scram.get(self.mechanism) if user is not None else None
        if cred is None:
            # a made-up credential: the exchange runs on and fails at the proof
            salt = hashlib.new(self._hash, b"headwater scram " + first.username.encode()).digest()[:16]
            cred = ScramCredential(salt, SCRAM_MIN_ITERATIONS, secrets.token_bytes(64), secrets.token_bytes(64))
            user = None
        self._first, self._credential, self._candidate = first, cred, user
        self._server_first = msg.ServerFirst(first.nonce + self._server_nonce, cred.salt, cred.iterations)
        return msg.build_server_first(self._server_first)

    def _client_final(self, token: bytes) -> bytes:
        final = msg.parse_client_final(token)
        first, server_first, cred = self._first, self._server_first, self._credential
        assert first is not None and server_first is not None and cred is not None
        # RFC 5802: the client echoes the combined nonce. librdkafka before 2.6.1 (kcat, many
        # distributions' packages) prefixes its own nonce once more; Kafka 3.8.1-3.9 accepts that
        # (the server's nonce is still required, so replays still fail), and so do we.
        if final.nonce not in (server_first.nonce, first.nonce + server_first.nonce):
            raise AuthenticationFailed("SCRAM nonce mismatch")
        if final.channel_binding != first.gs2_header.encode():
            raise AuthenticationFailed("SCRAM channel binding mismatch")
        auth_message = f"{first.bare},{server_first.text()},{final.without_proof}".encode()
        signature = hmac.digest(cred.stored_key, auth_message, self._hash)
        if len(final.proof) != len(signature):
            raise AuthenticationFailed("invalid username or password")
        client_key = bytes(a ^ b for a, b in zip(final.proof, signature))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), cred.stored_key):
            raise AuthenticationFailed("invalid username or password")
        self.user = _active(self._candidate)
        return msg.build_server_final(hmac.digest(cred.server_key, auth_message, self._hash))


def exchange(users: Users, mechanism: str) -> PlainExchange | ScramExchange:
    """A new server exchange for ``mechanism`` (one of ``MECHANISMS``)."""
    if mechanism == PLAIN:
        return PlainExchange(users)
    return ScramExchange(users, mechanism)
