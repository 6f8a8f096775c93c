"""AddOffsetsToTxn (key 25), versions 0-3: add a consumer group's offsets to a transaction.

v1 adds nothing on the wire; v2 adds PRODUCER_FENCED (KIP-588; before it an
old epoch is INVALID_PRODUCER_EPOCH); v3 is flexible. v4 (KIP-890 part 2's
TRANSACTION_ABORTABLE) is not advertised.

The group is recorded (durably) in the ongoing transaction; the producer
then sends TxnOffsetCommit, and the offsets become the group's committed
offsets when the transaction commits (``core.transactions``). Errors as
AddPartitionsToTxn's: INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED /
INVALID_PRODUCER_EPOCH, CONCURRENT_TRANSACTIONS; an empty group id gets
INVALID_GROUP_ID.
"""

from __future__ import annotations

from ....core import errors as core_errors
from .. import errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api


@kafka_api(ApiKey.ADD_OFFSETS_TO_TXN)
def add_offsets_to_txn(ctx: Context, request):
    if not authz.transactional_id(ctx, Operation.WRITE, request.transactional_id):
        return ctx.response(throttle_time=0, error_code=authz.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not authz.group(ctx, Operation.READ, request.group_id):
        return ctx.response(throttle_time=0, error_code=authz.GROUP_AUTHORIZATION_FAILED)
    if not request.group_id:
        return ctx.response(throttle_time=0, error_code=errors.INVALID_GROUP_ID)
    try:
        ctx.broker.transactions.add_offsets(request.transactional_id, request.producer_id, request.producer_epoch,
                                            request.group_id)
    except core_errors.BrokerError as e:
        return ctx.response(throttle_time=0, error_code=errors.txn_code(e, ctx.version >= 2))
    return ctx.response(throttle_time=0, error_code=errors.NONE)
