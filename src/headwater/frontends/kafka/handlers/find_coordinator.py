"""FindCoordinator (key 10), versions 0-6: this node coordinates every consumer group.

v0 has a key only (a group id); v1 adds key_type (0 group, 1 transaction),
throttle_time and error_message; v3 flexible; v4 batches keys
(coordinator_keys in, one Coordinator per key out); v5 adds only the
TRANSACTION_ABORTABLE error; v6 share-group keys (key_type 2).

A group key or a transaction key (key_type 1, a transactional id), whatever
its spelling (Kafka checks ids where they are used, not here), gets node 1 at
the advertised address: this node coordinates every group and transaction.
Share groups and unknown key types get INVALID_REQUEST.
"""

from __future__ import annotations

from .. import errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api

GROUP, TRANSACTION = 0, 1


def _lookup(ctx: Context, key_type: int, key: str) -> tuple[int, str | None, int, str, int]:
    """(error, message, node id, host, port) for one key of ``key_type`` (DESCRIBE on the group or
    transactional id is needed: else GROUP_ / TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as in Kafka)."""
    fe = ctx.frontend
    if key_type == GROUP and not authz.group(ctx, Operation.DESCRIBE, key):
        return authz.GROUP_AUTHORIZATION_FAILED, None, -1, "", -1
    if key_type == TRANSACTION and not authz.transactional_id(ctx, Operation.DESCRIBE, key):
        return authz.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None, -1, "", -1
    if key_type in (GROUP, TRANSACTION):
        return errors.NONE, None, fe.node_id, fe.advertised_host, fe.advertised_port
    return errors.INVALID_REQUEST, f"unsupported coordinator key type {key_type}", -1, "", -1


@kafka_api(ApiKey.FIND_COORDINATOR)
def find_coordinator(ctx: Context, request):
    key_type = getattr(request, "key_type", GROUP)
    if ctx.version < 4:
        code, message, node, host, port = _lookup(ctx, key_type, request.key)
        return ctx.response(throttle_time=0, error_code=code, error_message=message, node_id=node, host=host,
                            port=port)
    coordinators = []
    for key in request.coordinator_keys:
        code, message, node, host, port = _lookup(ctx, key_type, key)
        coordinators.append(ctx.build("Coordinator", key=key, node_id=node, host=host, port=port, error_code=code,
                                      error_message=message))
    return ctx.response(throttle_time=0, coordinators=tuple(coordinators))
