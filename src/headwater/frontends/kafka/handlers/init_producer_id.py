"""InitProducerId (key 22), versions 0-5: producer ids for idempotent and transactional producers.

v1 adds nothing on the wire; v2 is flexible; v3 adds producer_id /
producer_epoch (KIP-360 epoch bumps; for a non-transactional producer Kafka
hands out a new id anyway, and so do we); v4 adds PRODUCER_FENCED (KIP-588;
before it an old epoch is INVALID_PRODUCER_EPOCH); v5 adds nothing we use.

With a transactional_id (KIP-98) the coordinator (``core.transactions``)
maps it to one producer id: the first call gets a new id with epoch 0, every
later one the same id with its epoch bumped (a new id when the epoch would
overflow), which fences older instances: their requests get PRODUCER_FENCED
(INVALID_PRODUCER_EPOCH before v4), their batches INVALID_PRODUCER_EPOCH. An
ongoing transaction of the id is aborted first (markers written). A
transaction_timeout_ms outside 1..``kafka.transaction_max_timeout_ms``
(default 900000, Kafka's transaction.max.timeout.ms) gets
INVALID_TRANSACTION_TIMEOUT. State lives in ``core.producers``.
"""

from __future__ import annotations

from ....codec.kafka.messages import ms
from ....core import errors as core_errors
from .. import errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api


@kafka_api(ApiKey.INIT_PRODUCER_ID)
def init_producer_id(ctx: Context, request):
    if request.transactional_id is not None and not authz.transactional_id(
        ctx, Operation.WRITE, request.transactional_id
    ):
        return ctx.response(throttle_time=0, error_code=authz.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1)
    if request.transactional_id is None and not (
        authz.cluster(ctx, Operation.IDEMPOTENT_WRITE) or authz.any_topic_writable(ctx)
    ):
        return ctx.response(throttle_time=0, error_code=authz.CLUSTER_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1)
    broker = ctx.broker
    try:
        if request.transactional_id is not None:
            pid, epoch = broker.transactions.init(
                request.transactional_id, ms(request.transaction_timeout), broker.bump_producer,
                broker.producers.init_producer, broker.write_marker, broker.commit_txn_offsets,
                getattr(request, "producer_id", -1), getattr(request, "producer_epoch", -1),
            )
        else:
            pid, epoch = broker.producers.init_producer()
    except core_errors.BrokerError as e:
        code = errors.txn_code(e, ctx.version >= 4)
        return ctx.response(throttle_time=0, error_code=code, producer_id=-1, producer_epoch=-1)
    return ctx.response(throttle_time=0, error_code=0, producer_id=pid, producer_epoch=epoch)
