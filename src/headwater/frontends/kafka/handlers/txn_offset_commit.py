"""TxnOffsetCommit (key 28), versions 0-3: offsets a transaction commits for a group.

v2 adds committed_leader_epoch (kept and committed with the offset); v3 is
flexible and adds generation_id, member_id and group_instance_id (KIP-447;
accepted, not checked against the group's generation: see docs/gaps.md).
v4 (TRANSACTION_ABORTABLE) and v5 are not advertised.

The offsets are held in the transaction (durably, ``core.transactions``) and
become the group's committed offsets (the store OffsetCommit writes) only when
EndTxn commits; an abort drops them. Per partition:
UNKNOWN_TOPIC_OR_PARTITION for one that does not exist,
OFFSET_METADATA_TOO_LARGE above ``kafka.offset_metadata_max_bytes``, else the
transaction's answer for all: INVALID_TXN_STATE when AddOffsetsToTxn did not
add the group, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED (v3;
INVALID_PRODUCER_EPOCH before).
"""

from __future__ import annotations

from ....core import errors as core_errors
from .. import errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api
from .offset_commit import checked_commits


@kafka_api(ApiKey.TXN_OFFSET_COMMIT)
def txn_offset_commit(ctx: Context, request):
    answers = []  # (name, [(index, code or None)])
    pending = []
    # Kafka authorizes WRITE on the transactional id, then READ on the group and each topic
    txn_denied = not authz.transactional_id(ctx, Operation.WRITE, request.transactional_id)
    group_error = authz.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if txn_denied else errors.NONE
    for name, parts in checked_commits(ctx, request.group_id, request.topics, group_error):
        for _index, code, p, offset, metadata, epoch in parts:
            if code == errors.NONE:
                pending.append([p.stream_id, p.topic_id, p.id, offset, metadata, epoch])
        answers.append((name, [(index, code if code else None) for index, code, *_ in parts]))
    code = errors.NONE
    if pending:
        try:
            ctx.broker.transactions.txn_offset_commit(request.transactional_id, request.producer_id,
                                                      request.producer_epoch, request.group_id, pending)
        except core_errors.BrokerError as e:
            code = errors.txn_code(e, ctx.version >= 3)
    topics = tuple(
        ctx.build("TxnOffsetCommitResponseTopic", name=name, partitions=tuple(
            ctx.build("TxnOffsetCommitResponsePartition", partition_index=i, error_code=code if c is None else c)
            for i, c in parts))
        for name, parts in answers
    )
    return ctx.response(throttle_time=0, topics=topics)
