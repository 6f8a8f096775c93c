"""DescribeUserScramCredentials (key 50), version 0: the SCRAM mechanisms and iteration counts per user.

Needs DESCRIBE on the cluster (else CLUSTER_AUTHORIZATION_FAILED, 31). A null
or empty user list describes every user that has a SCRAM credential; a named
user without one gets RESOURCE_NOT_FOUND (91), a name given twice
DUPLICATE_RESOURCE (92). Salts and keys are never returned.
"""

from __future__ import annotations

from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api
from .alter_user_scram_credentials import MECHANISM_IDS

RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92


def _result(ctx: Context, name: str, code: int = 0, message: str | None = None, user=None):
    infos = ()
    if user is not None:
        infos = tuple(
            ctx.build("CredentialInfo", mechanism=MECHANISM_IDS[m], iterations=c.iterations)
            for m, c in sorted(user.scram.items())
        )
    return ctx.build(
        "DescribeUserScramCredentialsResult", user=name, error_code=code, error_message=message, credential_infos=infos
    )


@kafka_api(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)
def describe_user_scram_credentials(ctx: Context, request):
    if not authz.cluster(ctx, Operation.DESCRIBE):
        return ctx.response(
            throttle_time=0, error_code=authz.CLUSTER_AUTHORIZATION_FAILED, error_message=None, results=()
        )
    users = ctx.broker.users
    if not request.users:
        found = sorted((u for u in users.users.values() if u.scram), key=lambda u: u.username)
        results = tuple(_result(ctx, u.username, user=u) for u in found)
        return ctx.response(throttle_time=0, error_code=0, error_message=None, results=results)
    names = [u.name for u in request.users]
    results = []
    for name in dict.fromkeys(names):
        if names.count(name) > 1:
            results.append(_result(ctx, name, DUPLICATE_RESOURCE, "user named more than once"))
            continue
        u = users.find(name)
        if u is None or not u.scram:
            results.append(_result(ctx, name, RESOURCE_NOT_FOUND, "attempt to describe a user credential that does not exist"))
        else:
            results.append(_result(ctx, name, user=u))
    return ctx.response(throttle_time=0, error_code=0, error_message=None, results=tuple(results))
