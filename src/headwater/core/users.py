"""Users, passwords (Argon2id) and personal access tokens.

Source: Iggy ``server/security.mdx``. User ids are 0-based; the root user is
created on first start and can be neither deleted nor have its permissions
changed. Passwords are stored as Argon2id hashes (argon2-cffi); personal
access tokens are random strings of which only a SHA-256 digest is kept (a
token has 256 bits of entropy, so a slow hash buys nothing), with an optional
expiry in microseconds since the epoch.

Persistence is the caller's: every change goes through ``persist(key, value)``
with keys ``user/<id>`` and ``pat/<user id>/<name>``.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from . import errors
from .permissions import Permissions

ROOT_USER_ID = 0
USER_ACTIVE = 1
USER_INACTIVE = 2
MAX_TOKENS_PER_USER = 100

_hasher = PasswordHasher()


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def check_password(password_hash: str, password: str) -> bool:
    try:
        return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


@functools.cache
def _dummy_hash() -> str:
    """A hash to verify against for a user that does not exist, so that answering takes as long
    as for one that does. Made at the first such login, not at import (an Argon2 hash: 0.2-0.5 s
    here, that every start of the server and of the command line paid)."""
    return _hasher.hash("headwater: no such user")


def _token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """RFC 5802 server-side credential: salt, iteration count, StoredKey, ServerKey."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "salt": self.salt.hex(),
            "iterations": self.iterations,
            "stored_key": self.stored_key.hex(),
            "server_key": self.server_key.hex(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ScramCredential":
        return cls(bytes.fromhex(d["salt"]), d["iterations"], bytes.fromhex(d["stored_key"]), bytes.fromhex(d["server_key"]))


@dataclass(frozen=True, slots=True)
class User:
    id: int
    username: str
    password_hash: str
    status: int
    created_at_us: int
    permissions: Permissions | None = None
    scram: dict[str, ScramCredential] = field(default_factory=dict)  # SASL mechanism name -> credential

    @property
    def is_root(self) -> bool:
        return self.id == ROOT_USER_ID

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "username": self.username,
            "password_hash": self.password_hash,
            "status": self.status,
            "created_at_us": self.created_at_us,
            "permissions": self.permissions.to_dict() if self.permissions else None,
            "scram": {m: c.to_dict() for m, c in self.scram.items()},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "User":
        return cls(
            d["id"],
            d["username"],
            d["password_hash"],
            d["status"],
            d["created_at_us"],
            Permissions.from_dict(d.get("permissions")),
            {m: ScramCredential.from_dict(c) for m, c in d.get("scram", {}).items()},
        )


@dataclass(frozen=True, slots=True)
class PersonalAccessToken:
    user_id: int
    name: str
    digest: str
    expiry_at_us: int | None  # None: never expires

    def expired(self, now_us: int) -> bool:
        return self.expiry_at_us is not None and now_us >= self.expiry_at_us


def validate_username(name: str) -> None:
    if not 3 <= len(name) <= 50 or not all(c.isalnum() or c in "._-" for c in name):
        raise errors.InvalidUsername(f"invalid username {name!r}: 3-50 of [A-Za-z0-9._-]")


def validate_password(password: str) -> None:
    if not 3 <= len(password) <= 100:
        raise errors.InvalidPassword("password must be 3-100 characters")


@dataclass
class Users:
    """All users and tokens, in memory, persisted through ``persist``."""

    persist: Callable[[str, Any], None]
    users: dict[int, User] = field(default_factory=dict)
    tokens: dict[str, PersonalAccessToken] = field(default_factory=dict)  # digest -> token

    # --- loading ---
    def load(self, records: dict[str, Any]) -> None:
        for key, value in records.items():
            if key.startswith("user/"):
                u = User.from_dict(value)
                self.users[u.id] = u
            elif key.startswith("pat/"):
                t = PersonalAccessToken(**value)
                self.tokens[t.digest] = t

    # --- lookups ---
    def get(self, ident: int | str) -> User:
        if isinstance(ident, int):
            u = self.users.get(ident)
        else:
            u = next((u for u in self.users.values() if u.username == ident), None)
        if u is None:
            raise errors.UserNotFound(f"user {ident!r} not found")
        return u

    def find(self, ident: int | str) -> User | None:
        try:
            return self.get(ident)
        except errors.UserNotFound:
            return None

    # --- changes ---
    def _save(self, u: User) -> User:
        self.persist(f"user/{u.id}", u.to_dict())  # durable first: a failed write changes nothing
        self.users[u.id] = u
        return u

    def create(
        self,
        username: str,
        password: str,
        status: int,
        permissions: Permissions | None,
        now_us: int,
        *,
        user_id: int | None = None,
        password_hash: str | None = None,
    ) -> User:
        """Create a user. ``password_hash`` may carry a hash computed off the event loop."""
        validate_username(username)
        validate_password(password)
        if status not in (USER_ACTIVE, USER_INACTIVE):
            raise errors.InvalidArgument(f"invalid user status {status}")
        if any(u.username == username for u in self.users.values()):
            raise errors.UserAlreadyExists(f"user {username!r} already exists")
        if user_id is None:
            user_id = max(self.users, default=-1) + 1
        if password_hash is None:
            password_hash = hash_password(password)
        return self._save(User(user_id, username, password_hash, status, now_us, permissions))

    def update(self, ident: int | str, username: str | None, status: int | None) -> User:
        u = self.get(ident)
        if username is not None and username != u.username:
            validate_username(username)
            if any(o.username == username for o in self.users.values()):
                raise errors.UserAlreadyExists(f"user {username!r} already exists")
            u = replace(u, username=username)
        if status is not None:
            if status not in (USER_ACTIVE, USER_INACTIVE):
                raise errors.InvalidArgument(f"invalid user status {status}")
            if u.is_root and status != USER_ACTIVE:
                raise errors.CannotChangePermissions("the root user cannot be deactivated")
            u = replace(u, status=status)
        return self._save(u)

    def delete(self, ident: int | str) -> User:
        u = self.get(ident)
        if u.is_root:
            raise errors.CannotDeleteUser("the root user cannot be deleted")
        self.persist(f"user/{u.id}", None)
        del self.users[u.id]
        for digest, t in list(self.tokens.items()):
            if t.user_id == u.id:
                self.persist(f"pat/{u.id}/{t.name}", None)
                del self.tokens[digest]
        return u

    def update_permissions(self, ident: int | str, permissions: Permissions | None) -> User:
        u = self.get(ident)
        if u.is_root:
            raise errors.CannotChangePermissions("the root user's permissions are fixed")
        return self._save(replace(u, permissions=permissions))

    def change_password(self, ident: int | str, current: str, new: str) -> User:
        u = self.get(ident)
        if not check_password(u.password_hash, current):
            raise errors.InvalidCredentials("current password is wrong")
        validate_password(new)
        return self._save(replace(u, password_hash=hash_password(new)))

    def set_password_hash(self, ident: int | str, password_hash: str) -> User:
        """Store a password hash computed elsewhere (off the event loop), e.g. by ``hash_password``."""
        return self._save(replace(self.get(ident), password_hash=password_hash))

    def set_scram(self, ident: int | str, mechanism: str, credential: ScramCredential | None) -> User:
        """Add, replace or (``None``) remove the user's SCRAM credential for ``mechanism``."""
        u = self.get(ident)
        scram = dict(u.scram)
        if credential is None:
            if mechanism not in scram:
                raise errors.UserNotFound(f"user {u.username!r} has no {mechanism} credential")
            del scram[mechanism]
        else:
            scram[mechanism] = credential
        return self._save(replace(u, scram=scram))

    def authenticate(self, username: str, password: str) -> User:
        u = self.find(username)
        if u is None:
            # hash anyway, so an unknown username takes as long as a wrong password
            check_password(_dummy_hash(), password)
            raise errors.InvalidCredentials("invalid username or password")
        if not check_password(u.password_hash, password):
            raise errors.InvalidCredentials("invalid username or password")
        if u.status != USER_ACTIVE:
            raise errors.UserInactive(f"user {username!r} is inactive")
        return u

    # --- personal access tokens ---
    def user_tokens(self, user_id: int) -> list[PersonalAccessToken]:
        return sorted((t for t in self.tokens.values() if t.user_id == user_id), key=lambda t: t.name)

    def create_token(self, user_id: int, name: str, expiry_us: int, now_us: int) -> str:
        """Create a token; ``expiry_us`` is a duration (0 or u64::MAX = never). Returns the token."""
        if not 3 <= len(name) <= 30:
            raise errors.InvalidTokenName("token name must be 3-30 characters")
        mine = self.user_tokens(user_id)
        if any(t.name == name for t in mine):
            raise errors.TokenAlreadyExists(f"token {name!r} already exists")
        if len(mine) >= MAX_TOKENS_PER_USER:
            raise errors.TokensLimitReached(f"at most {MAX_TOKENS_PER_USER} tokens per user")
        token = secrets.token_urlsafe(36)
        expiry_at = None if expiry_us in (0, 0xFFFFFFFFFFFFFFFF) else now_us + expiry_us
        if expiry_at is not None and expiry_at >= 0xFFFFFFFFFFFFFFFF:
            expiry_at = None  # past the end of u64 microseconds: it never expires
        t = PersonalAccessToken(user_id, name, _token_digest(token), expiry_at)
        self.persist(
            f"pat/{user_id}/{name}",
            {"user_id": user_id, "name": name, "digest": t.digest, "expiry_at_us": expiry_at},
        )
        self.tokens[t.digest] = t
        return token

    def delete_token(self, user_id: int, name: str) -> None:
        for digest, t in list(self.tokens.items()):
            if t.user_id == user_id and t.name == name:
                self.persist(f"pat/{user_id}/{name}", None)
                del self.tokens[digest]
                return
        raise errors.TokenNotFound(f"token {name!r} not found")

    def authenticate_token(self, token: str, now_us: int) -> User:
        t = self.tokens.get(_token_digest(token))
        if t is None:
            raise errors.InvalidToken("invalid personal access token")
        if t.expired(now_us):
            raise errors.TokenExpired(f"token {t.name!r} expired")
        u = self.get(t.user_id)
        if u.status != USER_ACTIVE:
            raise errors.UserInactive(f"user {u.username!r} is inactive")
        return u

    def purge_expired_tokens(self, now_us: int) -> int:
        expired = [t for t in self.tokens.values() if t.expired(now_us)]
        for t in expired:
            self.persist(f"pat/{t.user_id}/{t.name}", None)
            del self.tokens[t.digest]
        return len(expired)
