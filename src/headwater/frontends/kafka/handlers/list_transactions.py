"""ListTransactions (key 66), versions 0-1: the transactional ids this coordinator knows (KIP-664).

v0 filters by state names and producer ids (empty = all); v1 adds
duration_filter (KIP-994: only transactions running longer than that many ms;
-1 = no filter). A state filter that is not a known state name is echoed in
unknown_state_filters, as in Kafka.
"""

from __future__ import annotations

from ....core.transactions import ONGOING, STATES
from .. import errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api


@kafka_api(ApiKey.LIST_TRANSACTIONS)
def list_transactions(ctx: Context, request):
    broker = ctx.broker
    states = set(request.state_filters)
    pids = set(request.producer_id_filters)
    duration = getattr(request, "duration_filter", -1)
    now_ms = broker.clock() // 1000
    out = []
    for tid, t in sorted(broker.transactions.txns.items()):
        if states and t.state not in states:
            continue
        if pids and t.producer_id not in pids:
            continue
        if not authz.transactional_id(ctx, Operation.DESCRIBE, tid):  # Kafka lists only what the caller may see
            continue
        if duration >= 0 and not (t.state == ONGOING and now_ms - t.started_us // 1000 > duration):
            continue
        out.append(ctx.build("TransactionState", transactional_id=tid, producer_id=t.producer_id,
                             transaction_state=t.state))
    unknown = tuple(s for s in request.state_filters if s not in STATES)
    return ctx.response(throttle_time=0, error_code=errors.NONE, unknown_state_filters=unknown,
                        transaction_states=tuple(out))
