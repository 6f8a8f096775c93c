"""EndTxn (key 26), versions 0-3: commit or abort a producer's transaction.

v1 adds nothing on the wire; v2 adds PRODUCER_FENCED (KIP-588; before it an
old epoch is INVALID_PRODUCER_EPOCH); v3 is flexible. v4 (TRANSACTION_ABORTABLE)
and v5 (KIP-890 part 2: an epoch bump per transaction, returned in the
response) are not advertised.

The coordinator (``core.transactions``) writes PREPARE_COMMIT / PREPARE_ABORT
durably, then a commit or abort marker (a control batch) to every partition
the transaction wrote to, then, for a commit, the offsets TxnOffsetCommit
left for each group, then COMPLETE_*; all before the response. A retried
EndTxn of a completed transaction with the same outcome answers NONE; one
with the other outcome, or for a producer with no ongoing transaction,
INVALID_TXN_STATE. Also INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED /
INVALID_PRODUCER_EPOCH.

The markers' appends are in the log before the response (a process crash
keeps them); with a topic's ``enforce_fsync`` the response also waits for
their fdatasync.
"""

from __future__ import annotations

from ....core import errors as core_errors
from .. import errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api


@kafka_api(ApiKey.END_TXN)
async def end_txn(ctx: Context, request):
    broker = ctx.broker
    if not authz.transactional_id(ctx, Operation.WRITE, request.transactional_id):
        return ctx.response(throttle_time=0, error_code=authz.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    written = []

    def write_marker(*args):
        done = broker.write_marker(*args)
        if done is not None and done.durable is not None:
            written.append(done.durable)
        return done

    try:
        broker.transactions.end(request.transactional_id, request.producer_id, request.producer_epoch,
                                bool(request.committed), write_marker, broker.commit_txn_offsets)
    except core_errors.BrokerError as e:
        return ctx.response(throttle_time=0, error_code=errors.txn_code(e, ctx.version >= 2))
    for durable in written:
        try:
            await durable
        except core_errors.BrokerError as e:
            return ctx.response(throttle_time=0, error_code=errors.code_for(e))
    return ctx.response(throttle_time=0, error_code=errors.NONE)
