"""AddPartitionsToTxn (key 24), versions 0-3: add partitions to a producer's transaction.

v1 adds nothing on the wire (a retry of a known partition answers NONE); v2 adds
PRODUCER_FENCED (KIP-588: before it an old epoch is INVALID_PRODUCER_EPOCH); v3
is flexible. v4 (KIP-890's broker-to-broker batched form, ``verify_only``) is
used by partition leaders to ask the coordinator; with one node that question
never crosses the wire, so it is not advertised (clients use 0-3).

Every partition of the request gets one code: UNKNOWN_TOPIC_OR_PARTITION for a
partition that does not exist (and OPERATION_NOT_ATTEMPTED for the others, as
in Kafka); otherwise the coordinator's answer (``core.transactions``):
INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED / INVALID_PRODUCER_EPOCH,
CONCURRENT_TRANSACTIONS, or NONE with the partitions recorded (durably)
in the ongoing transaction.
"""

from __future__ import annotations

from ....core import errors as core_errors
from .. import errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api


@kafka_api(ApiKey.ADD_PARTITIONS_TO_TXN)
def add_partitions_to_txn(ctx: Context, request):
    names = ctx.frontend.names
    found = []  # (name, index, key or None)
    for t in request.v3_and_below_topics:
        topic = names.resolve(t.name)
        for index in t.partitions:
            p = None if topic is None else topic.partitions.get(index)
            found.append((t.name, index, None if p is None else (p.stream_id, p.topic_id, p.id)))
    # Kafka authorizes WRITE on the transactional id, then WRITE on each topic
    denied = {name for name, _, _ in found if not authz.topic(ctx, Operation.WRITE, name, names.resolve(name))}
    if not authz.transactional_id(ctx, Operation.WRITE, request.v3_and_below_transactional_id):
        codes = [authz.TRANSACTIONAL_ID_AUTHORIZATION_FAILED] * len(found)
    elif denied:
        codes = [authz.TOPIC_AUTHORIZATION_FAILED if name in denied else errors.OPERATION_NOT_ATTEMPTED
                 for name, _, _ in found]
    elif any(key is None for _, _, key in found):
        codes = [errors.UNKNOWN_TOPIC_OR_PARTITION if key is None else errors.OPERATION_NOT_ATTEMPTED for _, _, key in found]
    else:
        try:
            ctx.broker.transactions.add_partitions(
                request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch, [key for _, _, key in found],
            )
            code = errors.NONE
        except core_errors.BrokerError as e:
            code = errors.txn_code(e, ctx.version >= 2)
        codes = [code] * len(found)
    by_topic: dict[str, list] = {}
    for (name, index, _), code in zip(found, codes):
        by_topic.setdefault(name, []).append(
            ctx.build("AddPartitionsToTxnPartitionResult", partition_index=index, partition_error_code=code)
        )
    results = tuple(
        ctx.build("AddPartitionsToTxnTopicResult", name=name, results_by_partition=tuple(parts))
        for name, parts in by_topic.items()
    )
    return ctx.response(throttle_time=0, results_by_topic_v3_and_below=results)
