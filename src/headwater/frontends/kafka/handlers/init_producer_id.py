"""InitProducerId (key 22), versions 0-5: producer ids for idempotent producers.

v1 adds nothing on the wire; v2 is flexible; v3 adds producer_id /
producer_epoch (KIP-360 epoch bumps; for a non-transactional producer Kafka
hands out a new id anyway, and so do we); v4-5 add nothing we use.
Transactions are not implemented: a transactional_id gets
TRANSACTIONAL_ID_AUTHORIZATION_FAILED. State lives in ``core.producers``.
"""

from __future__ import annotations

from ....core import errors as core_errors
from .. import errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api


@kafka_api(ApiKey.INIT_PRODUCER_ID, versions=(0, 5))
def init_producer_id(ctx: Context, request):
    if request.transactional_id is not None and not authz.transactional_id(
        ctx, Operation.WRITE, request.transactional_id
    ):
        return ctx.response(throttle_time=0, error_code=authz.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1)
    if request.transactional_id is None and not (
        authz.cluster(ctx, Operation.IDEMPOTENT_WRITE) or authz.any_topic_writable(ctx)
    ):
        return ctx.response(throttle_time=0, error_code=authz.CLUSTER_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1)
    if request.transactional_id is not None:
        return ctx.response(throttle_time=0, error_code=errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1)
    try:
        pid, epoch = ctx.broker.producers.init_producer()
    except core_errors.BrokerError as e:
        return ctx.response(throttle_time=0, error_code=errors.code_for(e), producer_id=-1, producer_epoch=-1)
    return ctx.response(throttle_time=0, error_code=0, producer_id=pid, producer_epoch=epoch)
