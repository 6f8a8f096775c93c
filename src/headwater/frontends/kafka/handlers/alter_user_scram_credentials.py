"""AlterUserScramCredentials (key 51), version 0: add, replace or delete users' SCRAM credentials.

An upsertion carries what the client derived: salt, iterations and
SaltedPassword = Hi(password, salt, iterations); the server keeps only
StoredKey and ServerKey (RFC 5802) with the salt and count, on the user's
record (``core.users``). Kafka principals are Headwater users: an upsertion
for a name no user has creates that user, active, with no Iggy permissions and
a random password (so only SCRAM logs it in until a password is set over
Iggy).

Needs ALTER on the cluster (else CLUSTER_AUTHORIZATION_FAILED, 31, per user).
Per user, as Kafka: an unknown mechanism UNSUPPORTED_SASL_MECHANISM (33),
iterations outside 4096..16384 or an invalid name UNACCEPTABLE_CREDENTIAL (93),
one (user, mechanism) twice DUPLICATE_RESOURCE (92), deleting a credential the
user lacks RESOURCE_NOT_FOUND (91). A user's alterations are all checked before any is applied.
"""

from __future__ import annotations

import asyncio
import secrets

from ....core import errors
from ....core import sasl
from ....core.acls import Operation
from ....core.users import USER_ACTIVE, hash_password, validate_username
from .. import authz
from ..registry import ApiKey, Context, kafka_api

MECHANISM_IDS = {sasl.SCRAM_SHA_256: 1, sasl.SCRAM_SHA_512: 2}
_MECHANISMS = {v: k for k, v in MECHANISM_IDS.items()}
UNSUPPORTED_SASL_MECHANISM = 33
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93


def _check(name: str, changes: list) -> tuple[int, str] | None:
    seen = set()
    for kind, c in changes:
        mechanism = _MECHANISMS.get(c.mechanism)
        if mechanism is None:
            return UNSUPPORTED_SASL_MECHANISM, f"unknown SCRAM mechanism {c.mechanism}"
        if mechanism in seen:
            return DUPLICATE_RESOURCE, f"{mechanism} altered twice for {name!r}"
        seen.add(mechanism)
        if kind == "upsert":
            if not sasl.SCRAM_MIN_ITERATIONS <= c.iterations <= sasl.SCRAM_MAX_ITERATIONS:
                return UNACCEPTABLE_CREDENTIAL, (
                    f"iterations {c.iterations} outside {sasl.SCRAM_MIN_ITERATIONS}..{sasl.SCRAM_MAX_ITERATIONS}"
                )
            if not c.salt or not c.salted_password:
                return UNACCEPTABLE_CREDENTIAL, "empty salt or salted password"
    try:
        validate_username(name)
    except errors.InvalidUsername as e:
        return UNACCEPTABLE_CREDENTIAL, str(e)
    return None


async def _apply(ctx: Context, name: str, changes: list) -> tuple[int, str | None]:
    users = ctx.broker.users
    u = users.find(name)
    for kind, c in changes:
        if kind == "delete" and (u is None or _MECHANISMS[c.mechanism] not in u.scram):
            return RESOURCE_NOT_FOUND, f"user {name!r} has no {_MECHANISMS[c.mechanism]} credential"
    if u is None:
        password = secrets.token_urlsafe(24)[:32]
        hashed = await asyncio.get_running_loop().run_in_executor(None, hash_password, password)
        ctx.broker.create_user(name, password, USER_ACTIVE, None, password_hash=hashed)
    for kind, c in changes:
        mechanism = _MECHANISMS[c.mechanism]
        credential = None
        if kind == "upsert":
            credential = sasl.scram_credential(mechanism, bytes(c.salted_password), bytes(c.salt), c.iterations)
        users.set_scram(name, mechanism, credential)
    return 0, None


@kafka_api(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
async def alter_user_scram_credentials(ctx: Context, request):
    per_user: dict[str, list] = {}
    for d in request.deletions:
        per_user.setdefault(d.name, []).append(("delete", d))
    for up in request.upsertions:
        per_user.setdefault(up.name, []).append(("upsert", up))
    allowed = authz.cluster(ctx, Operation.ALTER)
    results = []
    for name, changes in per_user.items():
        if not allowed:
            outcome: tuple[int, str | None] | None = (authz.CLUSTER_AUTHORIZATION_FAILED, None)
        else:
            outcome = _check(name, changes) or await _apply(ctx, name, changes)
        results.append(
            ctx.build("AlterUserScramCredentialsResult", user=name, error_code=outcome[0], error_message=outcome[1])
        )
    return ctx.response(throttle_time=0, results=tuple(results))
