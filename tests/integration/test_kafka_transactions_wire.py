"""The transaction APIs on the wire (kio-encoded requests against a real server): error codes
per version (PRODUCER_FENCED from the versions that know it, INVALID_PRODUCER_EPOCH before),
AddPartitionsToTxn's per-partition answers, TxnOffsetCommit before AddOffsetsToTxn,
DescribeTransactions, ListTransactions, and a read_committed Fetch's aborted list and LSO."""

from __future__ import annotations

import dataclasses
import datetime
import struct

import pytest

from kafka_wire import KafkaWire, record_batch
from test_kafka_wire import FETCH, INIT_PRODUCER_ID, create_topic, fetch_request, produce, req

ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT, DESCRIBE_TXN, LIST_TXN = 24, 25, 26, 28, 65, 66
OFFSET_FETCH, UNSTABLE_OFFSET_COMMIT = 9, 88
INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH, INVALID_MAPPING, PRODUCER_FENCED = 48, 47, 49, 90
UNKNOWN_TOPIC, NOT_ATTEMPTED, TXN_ID_NOT_FOUND = 3, 55, 105


@pytest.fixture
def wire(server):
    w = KafkaWire(server.kafka_address)
    yield w
    w.close()


def init(w, tid: str, version: int = 4):
    r = w.call(INIT_PRODUCER_ID, version, req(INIT_PRODUCER_ID, version, transactional_id=tid,
                                              transaction_timeout=datetime.timedelta(seconds=60),
                                              producer_id=-1, producer_epoch=-1))
    assert r.error_code == 0
    return r.producer_id, r.producer_epoch


def add_partitions(w, version, tid, pid, epoch, topics):
    v = version
    r = w.call(ADD_PARTITIONS, v, req(ADD_PARTITIONS, v, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                                      v3_and_below_producer_epoch=epoch, v3_and_below_topics=tuple(
                                          req(ADD_PARTITIONS, v, "AddPartitionsToTxnTopic", name=n, partitions=tuple(ps))
                                          for n, ps in topics.items())))
    return {(t.name, p.partition_index): p.partition_error_code.value
            for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}


def end(w, version, tid, pid, epoch, committed):
    return w.call(END_TXN, version, req(END_TXN, version, transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                        committed=committed)).error_code.value


def txn_batch(pid, epoch, seq, *values):
    return record_batch(list(values), producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def test_errors_per_version_and_the_describe_and_list_apis(server, wire):
    assert create_topic(wire, "txw", 2).error_code == 0
    pid, e0 = init(wire, "txw-id")
    assert add_partitions(wire, 1, "txw-id", pid, e0, {"txw": [0, 7], "nope": [0]}) == {
        ("txw", 0): NOT_ATTEMPTED, ("txw", 7): UNKNOWN_TOPIC, ("nope", 0): UNKNOWN_TOPIC}
    assert add_partitions(wire, 3, "txw-id", pid, e0, {"txw": [0, 1]}) == {("txw", 0): 0, ("txw", 1): 0}
    assert produce(wire, "txw", txn_batch(pid, e0, 0, b"t0", b"t1")).error_code == 0
    d = wire.call(DESCRIBE_TXN, 0, req(DESCRIBE_TXN, 0, transactional_ids=("txw-id",)))
    (mine,) = d.transaction_states
    assert (mine.error_code.value, mine.transaction_state, mine.producer_id, mine.producer_epoch) == (0, "Ongoing", pid, e0)
    assert [(t.topic, sorted(t.partitions)) for t in mine.topics] == [("txw", [0, 1])]
    # an unknown id: its start time is -1, which kio cannot decode, so read the error code raw:
    # correlation id i32 | header tags | throttle i32 | states: compact length 2 | error_code i16
    frame, _ = wire.frame(DESCRIBE_TXN, 0, req(DESCRIBE_TXN, 0, transactional_ids=("ghost",)))
    wire.send_raw(frame)
    raw = wire.read_frame()
    assert raw[9] == 2 and struct.unpack_from(">h", raw, 10)[0] == TXN_ID_NOT_FOUND
    lst = wire.call(LIST_TXN, 1, req(LIST_TXN, 1, state_filters=("Ongoing", "Bogus"), producer_id_filters=(),
                                     duration_filter=-1))
    assert [(s.transactional_id, s.producer_id) for s in lst.transaction_states] == [("txw-id", pid)]
    assert tuple(lst.unknown_state_filters) == ("Bogus",)
    # read_committed stops at the LSO (0)
    committed = dataclasses.replace(fetch_request(12, "txw", 0), isolation_level=1)
    part = wire.call(FETCH, 12, committed).responses[0].partitions[0]
    assert (part.high_watermark, part.last_stable_offset, bool(part.records)) == (2, 0, False)
    assert end(wire, 3, "txw-id", pid, e0, False) == 0
    part = wire.call(FETCH, 12, committed).responses[0].partitions[0]
    assert (part.high_watermark, part.last_stable_offset) == (3, 3)
    assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(pid, 0)]
    assert end(wire, 3, "txw-id", pid, e0, False) == 0  # a retried abort
    assert end(wire, 3, "txw-id", pid, e0, True) == INVALID_TXN_STATE
    # a second instance fences the first: PRODUCER_FENCED from EndTxn v2 / AddPartitionsToTxn v2, 47 before
    _, e1 = init(wire, "txw-id")
    assert e1 == e0 + 1
    assert end(wire, 1, "txw-id", pid, e0, True) == INVALID_PRODUCER_EPOCH
    assert end(wire, 2, "txw-id", pid, e0, True) == PRODUCER_FENCED
    assert add_partitions(wire, 1, "txw-id", pid, e0, {"txw": [0]}) == {("txw", 0): INVALID_PRODUCER_EPOCH}
    assert add_partitions(wire, 2, "txw-id", pid, e0, {"txw": [0]}) == {("txw", 0): PRODUCER_FENCED}
    assert add_partitions(wire, 3, "txw-id", pid + 1000, e1, {"txw": [0]}) == {("txw", 0): INVALID_MAPPING}
    assert produce(wire, "txw", txn_batch(pid, e0, 2, b"late")).error_code == INVALID_PRODUCER_EPOCH
    r = wire.call(ADD_OFFSETS, 3, req(ADD_OFFSETS, 3, transactional_id="txw-id", producer_id=pid, producer_epoch=e0,
                                      group_id="g"))
    assert r.error_code.value == PRODUCER_FENCED
    # TxnOffsetCommit before AddOffsetsToTxn: INVALID_TXN_STATE
    tc_request = req(
        TXN_OFFSET_COMMIT, 3, transactional_id="txw-id", group_id="g", producer_id=pid, producer_epoch=e1,
        generation_id=-1, member_id="", group_instance_id=None, topics=(req(
            TXN_OFFSET_COMMIT, 3, "TxnOffsetCommitRequestTopic", name="txw", partitions=(req(
                TXN_OFFSET_COMMIT, 3, "TxnOffsetCommitRequestPartition", partition_index=0, committed_offset=1,
                committed_leader_epoch=-1, committed_metadata=""),)),))
    tc = wire.call(TXN_OFFSET_COMMIT, 3, tc_request)
    assert tc.topics[0].partitions[0].error_code.value == INVALID_TXN_STATE
    # offsets in a transaction: OffsetFetch require_stable (v7) answers UNSTABLE_OFFSET_COMMIT until the commit
    r = wire.call(ADD_OFFSETS, 3, req(ADD_OFFSETS, 3, transactional_id="txw-id", producer_id=pid, producer_epoch=e1,
                                      group_id="g"))
    assert r.error_code.value == 0
    tc = wire.call(TXN_OFFSET_COMMIT, 3, dataclasses.replace(tc_request, producer_epoch=e1))
    assert tc.topics[0].partitions[0].error_code.value == 0
    assert fetch_offset(wire, "g", stable=True) == (-1, UNSTABLE_OFFSET_COMMIT)
    assert fetch_offset(wire, "g", stable=False) == (-1, 0)
    assert end(wire, 3, "txw-id", pid, e1, True) == 0
    assert fetch_offset(wire, "g", stable=True) == (1, 0)


def fetch_offset(w, group: str, *, stable: bool) -> tuple[int, int]:
    r = w.call(OFFSET_FETCH, 7, req(OFFSET_FETCH, 7, group_id=group, require_stable=stable, topics=(
        req(OFFSET_FETCH, 7, "OffsetFetchRequestTopic", name="txw", partition_indexes=(0,)),)))
    part = r.topics[0].partitions[0]
    return part.committed_offset, part.error_code.value
