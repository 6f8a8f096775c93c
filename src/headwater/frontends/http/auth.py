"""JWT access tokens for the HTTP API: issue on login, verify per request, refresh, revoke on logout.

Tokens are JWS compact (PyJWT) signed with ``[http] jwt_algorithm`` (HS256 by default).
Claims: ``sub`` (the user id, decimal string), ``jti`` (random id), ``iat``, ``nbf``,
``exp`` (seconds since the epoch; ``iat`` + ``jwt_access_token_expiry_s``), ``iss`` and
``aud`` (``jwt_issuer``/``jwt_audience``). The login reply is Iggy's ``IdentityInfo``:
``{"user_id": u32, "access_token": {"token": "<jwt>", "expiry": <exp, seconds>}}``.

Secret: ``jwt_encoding_secret``, else 64 random bytes generated on first start and kept
in ``<data_dir>/http_jwt_secret`` (mode 0600), so tokens survive a restart.

Refresh (``POST /users/refresh-token`` with ``{"token": "<jwt>"}``): a token that is
signed by us and not revoked, and either still valid or expired for less than
``jwt_refresh_token_expiry_s``, gets a fresh token; the presented one is revoked (the
legacy Iggy server's one-shot refresh). Logout revokes the caller's token. Revoked
``jti``s are kept with their ``exp`` (in ``<data_dir>/http_revoked_tokens.json``,
rewritten atomically) until the refresh window of that ``exp`` has passed.

Errors: a missing, malformed, badly signed, expired or revoked token raises
``core.errors.Unauthenticated`` (Iggy 40, answered 401).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from typing import Callable

import jwt

from ...config import HttpConfig
from ...core import errors

SECRET_FILE = "http_jwt_secret"
REVOKED_FILE = "http_revoked_tokens.json"


def load_secret(config: HttpConfig, data_dir: str) -> bytes:
    """The signing secret: the configured one, else the data directory's (created once)."""
    if config.jwt_encoding_secret:
        return config.jwt_encoding_secret.encode()
    path = os.path.join(data_dir, SECRET_FILE)
    try:
        with open(path, "rb") as f:
            secret = f.read()
        if len(secret) >= 32:
            return secret
    except FileNotFoundError:
        pass
    secret = secrets.token_bytes(64)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(secret)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return secret


class Tokens:
    """Issues and checks access tokens; keeps the revoked ``jti``s."""

    def __init__(self, config: HttpConfig, data_dir: str, clock: Callable[[], float] = time.time):
        self.config = config
        self._secret = load_secret(config, data_dir)
        self._clock = clock
        self._revoked_path = os.path.join(data_dir, REVOKED_FILE)
        self._revoked: dict[str, int] = self._load_revoked()

    # ------------------------------------------------------------------ revocation
    def _load_revoked(self) -> dict[str, int]:
        try:
            with open(self._revoked_path, "rb") as f:
                data = json.load(f)
            return {str(k): int(v) for k, v in data.items()}
        except (FileNotFoundError, ValueError, AttributeError):
            return {}

    def _save_revoked(self) -> None:
        tmp = self._revoked_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self._revoked, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._revoked_path)

    def revoke(self, claims: dict) -> None:
        """Revoke a token (by its ``jti``) until its refresh window ends; persisted."""
        now = int(self._clock())
        keep_until = int(claims.get("exp", now)) + self.config.jwt_refresh_token_expiry_s
        self._revoked = {j: t for j, t in self._revoked.items() if t > now}
        self._revoked[str(claims.get("jti", ""))] = keep_until
        self._save_revoked()

    def is_revoked(self, jti: str) -> bool:
        return jti in self._revoked

    # ------------------------------------------------------------------ issue / verify
    def issue(self, user_id: int) -> dict:
        """Iggy's ``IdentityInfo`` JSON for a new access token of ``user_id``."""
        now = int(self._clock())
        exp = now + self.config.jwt_access_token_expiry_s
        claims = {
            "sub": str(user_id),
            "jti": secrets.token_hex(16),
            "iat": now,
            "nbf": now,
            "exp": exp,
            "iss": self.config.jwt_issuer,
            "aud": self.config.jwt_audience,
        }
        token = jwt.encode(claims, self._secret, algorithm=self.config.jwt_algorithm)
        return {"user_id": user_id, "access_token": {"token": token, "expiry": exp}}

    def _decode(self, token: str, *, verify_exp: bool) -> dict:
        try:
            claims = jwt.decode(
                token,
                self._secret,
                algorithms=[self.config.jwt_algorithm],
                audience=self.config.jwt_audience,
                issuer=self.config.jwt_issuer,
                leeway=self.config.jwt_clock_skew_s,
                options={"verify_exp": verify_exp, "require": ["exp", "sub", "jti"]},
            )
        except jwt.ExpiredSignatureError:
            raise errors.Unauthenticated("access token expired") from None
        except jwt.PyJWTError as e:
            raise errors.Unauthenticated(f"invalid access token: {e}") from None
        if self.is_revoked(str(claims["jti"])):
            raise errors.Unauthenticated("access token revoked")
        try:
            claims["user_id"] = int(claims["sub"])
        except ValueError:
            raise errors.Unauthenticated("invalid access token subject") from None
        return claims

    def verify(self, token: str) -> dict:
        """The claims of a valid, unrevoked access token (``user_id`` added). Raises Unauthenticated."""
        if not token:
            raise errors.Unauthenticated("access token missing")
        claims = self._decode(token, verify_exp=True)
        if claims["exp"] < self._clock() - self.config.jwt_clock_skew_s:  # belt and braces for a skewed clock
            raise errors.Unauthenticated("access token expired")
        return claims

    def refreshable(self, token: str) -> dict:
        """The claims of a token that may be refreshed (see the module doc). Raises Unauthenticated."""
        if not token:
            raise errors.Unauthenticated("access token missing")
        claims = self._decode(token, verify_exp=False)
        if claims["exp"] + self.config.jwt_refresh_token_expiry_s < self._clock():
            raise errors.Unauthenticated("access token too old to refresh")
        return claims
