"""DescribeAcls (key 29), CreateAcls (key 30), DeleteAcls (key 31), versions 1-3.

v1 adds the pattern type (LITERAL, PREFIXED; filters also ANY and MATCH);
v2 is the flexible encoding; v3 adds USER_RESOURCE_TYPE (not stored here: a
binding on a USER resource gets INVALID_REQUEST). Bindings are kept by
``core.acls.AclStore``; describing needs DESCRIBE on the cluster, creating and
deleting need ALTER on the cluster (else CLUSTER_AUTHORIZATION_FAILED, 31),
as in Kafka. A malformed binding or filter: INVALID_REQUEST (42) for it alone.
"""

from __future__ import annotations

from ....core.acls import AclBinding, AclFilter, InvalidAcl, Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api

INVALID_REQUEST = 42


def _filter(f) -> AclFilter:
    return AclFilter(
        int(f.resource_type_filter),
        f.resource_name_filter,
        int(getattr(f, "pattern_type_filter", 3)),
        f.principal_filter,
        f.host_filter,
        int(f.operation),
        int(f.permission_type),
    ).validate()


@kafka_api(ApiKey.DESCRIBE_ACLS)
def describe_acls(ctx: Context, request):
    def reply(code: int, message: str | None, resources=()):
        return ctx.response(throttle_time=0, error_code=code, error_message=message, resources=resources)

    if not authz.cluster(ctx, Operation.DESCRIBE):
        return reply(authz.CLUSTER_AUTHORIZATION_FAILED, "DESCRIBE on the cluster is needed")
    try:
        found = ctx.broker.acls.describe(_filter(request))
    except InvalidAcl as e:
        return reply(INVALID_REQUEST, str(e))
    grouped: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in found:
        grouped.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    resources = tuple(
        ctx.build(
            "DescribeAclsResource",
            resource_type=rt,
            resource_name=name,
            pattern_type=pt,
            acls=tuple(
                ctx.build("AclDescription", principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission)
                for b in bindings
            ),
        )
        for (rt, name, pt), bindings in grouped.items()
    )
    return reply(0, None, resources)


@kafka_api(ApiKey.CREATE_ACLS)
def create_acls(ctx: Context, request):
    allowed = authz.cluster(ctx, Operation.ALTER)
    results, valid = [], []
    for c in request.creations:
        code, message = 0, None
        if not allowed:
            code = authz.CLUSTER_AUTHORIZATION_FAILED
        else:
            try:
                valid.append(
                    AclBinding(
                        int(c.resource_type), c.resource_name, int(getattr(c, "resource_pattern_type", 3)),
                        c.principal, c.host, int(c.operation), int(c.permission_type),
                    ).validate()
                )
            except InvalidAcl as e:
                code, message = INVALID_REQUEST, str(e)
        results.append(ctx.build("AclCreationResult", error_code=code, error_message=message))
    if valid:
        ctx.broker.acls.create(valid)
    return ctx.response(throttle_time=0, results=tuple(results))


@kafka_api(ApiKey.DELETE_ACLS)
def delete_acls(ctx: Context, request):
    def result(code: int, message: str | None, matches=()):
        return ctx.build("DeleteAclsFilterResult", error_code=code, error_message=message, matching_acls=matches)

    if not authz.cluster(ctx, Operation.ALTER):
        results = tuple(result(authz.CLUSTER_AUTHORIZATION_FAILED, None) for _ in request.filters)
        return ctx.response(throttle_time=0, filter_results=results)
    parsed: list[AclFilter | str] = []
    for f in request.filters:
        try:
            parsed.append(_filter(f))
        except InvalidAcl as e:
            parsed.append(str(e))
    valid = [f for f in parsed if isinstance(f, AclFilter)]
    deleted = iter(ctx.broker.acls.delete(valid))
    results = []
    for f in parsed:
        if isinstance(f, str):
            results.append(result(INVALID_REQUEST, f))
            continue
        matches = tuple(
            ctx.build(
                "DeleteAclsMatchingAcl", error_code=0, error_message=None, resource_type=b.resource_type,
                resource_name=b.resource_name, pattern_type=b.pattern_type, principal=b.principal, host=b.host,
                operation=b.operation, permission_type=b.permission,
            )
            for b in next(deleted)
        )
        results.append(result(0, None, matches))
    return ctx.response(throttle_time=0, filter_results=tuple(results))
