"""Bounded transaction state against a real ``headwater serve``: the marker and aborted-range
history is pruned once DeleteRecords moves the log start past it (whole segments deleted
too), through a SIGKILL and a restart, while a read_committed confluent-kafka consumer and
an Iggy SDK poll keep seeing exactly the committed records from the log start on; and
transactional ids expire (``[kafka] transactional_id_expiration_ms``) when idle outside a
transaction, InitProducerId then starting them afresh."""

from __future__ import annotations

import struct
import time

import pytest

from confluent_kafka import OFFSET_BEGINNING, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.storage.local.metadata import load_read_only
from hw_server import ServerProcess, free_port
from kafka_wire import KafkaWire, record_batch
from test_kafka_transactions import iggy_poll, read_all
from test_kafka_transactions_wire import (
    DESCRIBE_TXN, INVALID_MAPPING, TXN_ID_NOT_FOUND, add_partitions, end, init,
)
from test_kafka_wire import create_topic, produce, req

VALUE = 120_000  # bytes per record: a 1 MiB segment holds a few transactions


def committed_records(server, topic: str) -> list[tuple[int, bytes]]:
    """(offset, value) of every record a read_committed consumer gets from the log start."""
    return read_all(server, topic, start=OFFSET_BEGINNING, offsets=True)


def transactions(server, topic: str, tid: str, rounds: range) -> None:
    """Per round: an ordinary record, then a transaction of 3 records (committed on even
    rounds, written and aborted on odd ones)."""
    plain = Producer({"bootstrap.servers": server.kafka_address})
    p = Producer({"bootstrap.servers": server.kafka_address, "transactional.id": tid})
    p.init_transactions(15)
    for r in rounds:
        plain.produce(topic, b"plain%d" % r)
        plain.flush(15)
        p.begin_transaction()
        for j in range(3):
            p.produce(topic, (b"%s%d-%d" % (b"c" if r % 2 == 0 else b"a", r, j)).ljust(VALUE, b"."))
        if r % 2 == 0:
            p.commit_transaction(15)
        else:
            p.flush(15)
            p.abort_transaction(15)


def delete_records(server, topic: str, offset: int) -> int:
    a = AdminClient({"bootstrap.servers": server.kafka_address})
    (f,) = a.delete_records([TopicPartition(topic, 0, offset)]).values()
    return f.result(15).low_watermark


def stored_markers(server) -> list[int]:
    """The offsets of the marker records in the stopped server's transactions store."""
    state = load_read_only(str(server.data_dir / "metadata"), "transactions")
    return sorted(int(k.rsplit("/", 1)[1]) for k in state if k.startswith("pm/"))


def check_readers(server, topic: str, expected: list[tuple[int, bytes]]) -> None:
    assert committed_records(server, topic) == expected
    assert iggy_poll(server, topic) == [v for _, v in expected]


def test_deleterecords_prunes_transaction_history_readers_unchanged(fresh_server):
    server, topic = fresh_server, "txb"
    a = AdminClient({"bootstrap.servers": server.kafka_address})
    a.create_topics([NewTopic(topic, 1, config={"segment.bytes": str(1 << 20)})])[topic].result(15)
    transactions(server, topic, "txb-id", range(8))
    everything = committed_records(server, topic)
    assert [v[:2] for _, v in everything if not v.startswith(b"plain")] == [b"c0", b"c0", b"c0", b"c2", b"c2", b"c2",
                                                                          b"c4", b"c4", b"c4", b"c6", b"c6", b"c6"]
    # the log start moves to the first record of round 5's ordinary record: rounds 0-4 and their markers go
    cut = next(o for o, v in everything if v == b"plain5")
    assert delete_records(server, topic, cut) == cut
    expected = [(o, v) for o, v in everything if o >= cut]
    check_readers(server, topic, expected)
    server.kill()  # SIGKILL right after the prune: what is in the store is what boot sees
    server.start()
    check_readers(server, topic, expected)
    # more history, a second cut at the last record of round 9's aborted transaction (the
    # range ending there and its marker stay: a read from there starts inside them)
    transactions(server, topic, "txb-id", range(8, 11))
    everything = committed_records(server, topic)
    cut2 = next(o for o, v in everything if v == b"plain9") + 3
    assert delete_records(server, topic, cut2) == cut2
    expected = [(o, v) for o, v in everything if o >= cut2]
    assert [v[:3] for _, v in expected] == [b"pla", b"c10", b"c10", b"c10"]
    check_readers(server, topic, expected)
    assert server.stop() == 0
    markers = stored_markers(server)
    assert markers and min(markers) >= cut2 and len(markers) == 2  # rounds 9 and 10 of 11 transactions
    server.start()
    check_readers(server, topic, expected)


def txn_state(w: KafkaWire, tid: str) -> str | int:
    """DescribeTransactions v0 for one id: its state, or the error code. Read raw (an unknown
    id's start time is -1, which kio cannot decode): correlation id i32 | header tags |
    throttle i32 | states: compact length 2 | error_code i16 | transactional_id compact
    string | transaction_state compact string | ... (short strings: one-byte lengths)."""
    frame, _ = w.frame(DESCRIBE_TXN, 0, req(DESCRIBE_TXN, 0, transactional_ids=(tid,)))
    w.send_raw(frame)
    raw = w.read_frame()
    assert raw[9] == 2
    code = struct.unpack_from(">h", raw, 10)[0]
    if code:
        return code
    pos = 12 + raw[12]  # past the transactional id (its length + 1, then its bytes)
    assert raw[12] < 128 and raw[pos] < 128
    return raw[pos + 1:pos + raw[pos]].decode()


@pytest.fixture
def expiring_server(tmp_path_factory):
    s = ServerProcess(tmp_path_factory.mktemp("headwater") / "data", free_port(), free_port(), extra_env={
        "HEADWATER_KAFKA_TRANSACTIONAL_ID_EXPIRATION_MS": "300",
        "HEADWATER_KAFKA_TRANSACTION_REMOVE_EXPIRED_TRANSACTION_CLEANUP_INTERVAL_MS": "100"}).start()
    yield s
    assert s.stop() == 0


def test_idle_transactional_ids_expire(expiring_server):
    server = expiring_server
    w = KafkaWire(server.kafka_address)
    try:
        assert create_topic(w, "txe").error_code == 0
        pid, e = init(w, "txe-done")
        assert add_partitions(w, 3, "txe-done", pid, e, {"txe": [0]}) == {("txe", 0): 0}
        batch = record_batch([b"v"], producer_id=pid, producer_epoch=e, base_sequence=0, is_transactional=True)
        assert produce(w, "txe", batch).error_code == 0
        assert end(w, 3, "txe-done", pid, e, True) == 0
        opid, oe = init(w, "txe-open")
        assert add_partitions(w, 3, "txe-open", opid, oe, {"txe": [0]}) == {("txe", 0): 0}
        # bounded by the condition: the cleanup runs every 100 ms once 300 ms have passed
        for _ in range(600):
            if txn_state(w, "txe-done") == TXN_ID_NOT_FOUND:
                break
            time.sleep(0.05)
        assert txn_state(w, "txe-done") == TXN_ID_NOT_FOUND
        assert txn_state(w, "txe-open") == "Ongoing"  # a transaction in progress never expires
        # the old producer is forgotten; InitProducerId starts afresh (a new producer id, epoch 0)
        assert add_partitions(w, 3, "txe-done", pid, e, {"txe": [0]}) == {("txe", 0): INVALID_MAPPING}
        new_pid, new_e = init(w, "txe-done")
        assert new_pid != pid and new_e == 0
        assert end(w, 3, "txe-open", opid, oe, True) == 0
    finally:
        w.close()
