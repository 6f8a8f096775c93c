"""DescribeTransactions (key 65), version 0: the coordinator's view of transactional ids (KIP-664).

Per id: state (Kafka's names: Empty, Ongoing, PrepareCommit, PrepareAbort,
CompleteCommit, CompleteAbort), timeout, start time (-1 when no transaction
started), producer id and epoch, and the partitions of the current or last
transaction. An unknown id gets TRANSACTIONAL_ID_NOT_FOUND.
"""

from __future__ import annotations

import datetime

from ....core import errors as core_errors
from .. import errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api


# kio writes a datetime as its ms; -1 ("no transaction started") has no other spelling
NOT_STARTED = datetime.datetime.fromtimestamp(-0.001, datetime.timezone.utc)


def _start_time(started_us: int):
    return NOT_STARTED if started_us < 0 else datetime.datetime.fromtimestamp(started_us / 1e6, datetime.timezone.utc)


@kafka_api(ApiKey.DESCRIBE_TRANSACTIONS)
def describe_transactions(ctx: Context, request):
    broker = ctx.broker
    names = ctx.frontend.names
    states = []
    for tid in request.transactional_ids:
        t = broker.transactions.txns.get(tid)
        if not authz.transactional_id(ctx, Operation.DESCRIBE, tid):
            states.append(ctx.build("TransactionState", error_code=authz.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                    transactional_id=tid, transaction_state="", transaction_timeout=0,
                                    transaction_start_time=NOT_STARTED, producer_id=-1, producer_epoch=-1, topics=()))
            continue
        if t is None:
            states.append(ctx.build("TransactionState", error_code=errors.TRANSACTIONAL_ID_NOT_FOUND,
                                    transactional_id=tid, transaction_state="", transaction_timeout=0,
                                    transaction_start_time=NOT_STARTED, producer_id=-1, producer_epoch=-1, topics=()))
            continue
        by_topic: dict[str, list[int]] = {}
        for s, tp, p in t.partitions:
            try:
                name = names.name_of(broker.catalog.topic(s, tp))
            except core_errors.BrokerError:
                name = None
            if name is not None:
                by_topic.setdefault(name, []).append(p)
        states.append(ctx.build(
            "TransactionState", error_code=errors.NONE, transactional_id=tid, transaction_state=t.state,
            transaction_timeout=t.timeout_ms,
            transaction_start_time=_start_time(t.started_us),
            producer_id=t.producer_id, producer_epoch=t.producer_epoch,
            topics=tuple(ctx.build("TopicData", topic=n, partitions=tuple(ps)) for n, ps in by_topic.items()),
        ))
    return ctx.response(throttle_time=0, transaction_states=tuple(states))
