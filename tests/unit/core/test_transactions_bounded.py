"""Bounded transaction state over a real engine in tmp_path: history pruned once the log
start offset passes it (DeleteRecords, Iggy DeleteSegments, retention) without changing
what any reader sees from the log start on, crash windows of the prune (a torn record, a
prune cut between its records), and transactional ids expiring
(``transactional.id.expiration.ms``)."""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater.codec.batch import Message, build_batch, iter_frames, read_header
from headwater.core import transactions as tx
from headwater.core.broker import Broker
from headwater.core.errors import MetadataNotSaved
from headwater.frontends.kafka.handlers.fetch import _transactional
from headwater.storage.api import open_engine
from headwater.storage.local.metadata import HEADER_SIZE, load_read_only


class Clock:
    """The broker's clock (µs), moved by the test; every reading advances it 1 µs."""

    def __init__(self, start: int = 1_000_000_000):
        self.now = start

    def __call__(self) -> int:
        self.now += 1
        return self.now


def batch(*payloads: bytes) -> bytearray:
    return bytearray(build_batch([Message(p) for p in payloads]))


def key(p):
    return (p.stream_id, p.topic_id, p.id)


def init(b: Broker, tid: str = "tid"):
    return b.transactions.init(tid, 60_000, b.bump_producer, b.producers.init_producer, b.write_marker,
                               b.commit_txn_offsets)


def end(b: Broker, tid: str, pid: int, e: int, commit: bool) -> None:
    b.transactions.end(tid, pid, e, commit, b.write_marker, b.commit_txn_offsets)


# a workload step: ("plain", n) appends n ordinary messages; ("txn", n, commit, plain_inside, size)
# writes a transaction of n batches of ``size`` messages, with an ordinary batch between its
# batches when plain_inside
STEPS = st.one_of(
    st.tuples(st.just("plain"), st.integers(1, 3)),
    st.tuples(st.just("txn"), st.integers(1, 3), st.booleans(), st.booleans(), st.integers(1, 3)),
)


def run(b: Broker, t, p, steps, state: dict) -> None:
    """Apply ``steps``; ``state`` carries the producer and its sequence across calls."""
    if "pid" not in state:
        state["pid"], state["e"] = init(b)
        state["seq"] = 0
    pid, e = state["pid"], state["e"]
    for i, step in enumerate(steps):
        if step[0] == "plain":
            b.append(p, batch(*[b"p%d-%d" % (i, j) for j in range(step[1])]))
            continue
        _, n, commit, plain_inside, size = step
        b.transactions.add_partitions("tid", pid, e, [key(p)])
        for j in range(n):
            values = [b"%s%d-%d-%d" % (b"c" if commit else b"a", i, j, k) for k in range(size)]
            b.append_transactional(t, p, batch(*values), pid, e, state["seq"])
            state["seq"] += size
            if plain_inside:
                b.append(p, batch(b"in%d-%d" % (i, j)))
        end(b, "tid", pid, e, commit)


def views(b: Broker, p, starts) -> dict:
    """What every reader is told from each offset in ``starts``: an Iggy poll (payloads and
    where to resume), and a read_committed Kafka fetch (the LSO, the aborted list, each
    stored batch's conversion: control batch, aborted batch with its producer, or plain)."""
    out = {}
    pt = b.transactions.peek(key(p))
    hw = p.high_watermark
    for s in starts:
        got, n, nxt = b.read_visible(p, s, 10_000)
        iggy = ([bytes(f.payload) for g in got for f in iter_frames(g)], n, nxt)
        stored, _ = p.read(s, hw - s) if s < hw else ([], 0)
        kafka = [None if pt is None else _transactional(pt, g, bytes) for g in stored]
        aborted = [] if pt is None else pt.aborted_between(s, hw)
        out[s] = (iggy, b.last_stable_offset(p), aborted, kafka)
    return out


def stored_history(path) -> dict:
    return {k: v for k, v in load_read_only(str(path / "metadata"), "transactions").items() if k.startswith("pm/")}


def assert_pruned_below(path, log_start: int) -> None:
    for k, v in stored_history(path).items():
        assert int(k.rsplit("/", 1)[1]) >= log_start, k
        assert all(last >= log_start for _first, last in v[4]), (k, v)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STEPS, min_size=1, max_size=8), st.lists(STEPS, max_size=3), st.floats(0, 1))
def test_deleterecords_prunes_history_and_every_reader_sees_the_same(steps, later, where):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d)
        b = Broker(open_engine(d))
        t = b.create_topic(b.create_stream("s").id, "t", 1, {})
        p = t.partitions[0]
        state: dict = {}
        run(b, t, p, steps, state)
        hw = p.high_watermark
        cut = round(where * hw)
        before = views(b, p, range(cut, hw + 1))
        markers_before = len(stored_history(path))
        assert b.delete_records(t, p, cut) == cut
        assert views(b, p, range(cut, hw + 1)) == before
        assert_pruned_below(path, cut)
        pt = b.transactions.peek(key(p))
        assert len(stored_history(path)) == (0 if pt is None else len(pt.markers)) <= markers_before
        # after a restart (the store and the logical log start reloaded) and more transactions
        b.close()
        b = Broker(open_engine(d))
        t = b.topic(0, 0)
        p = t.partitions[0]
        assert views(b, p, range(cut, hw + 1)) == before
        state = {}
        run(b, t, p, later, state)
        b.close()


def journal_records(path) -> list[tuple[int, int]]:
    """(start, end) byte positions of each record of the transactions journal."""
    data = (path / "metadata" / "transactions.journal").read_bytes()
    out, pos = [], HEADER_SIZE
    while pos + 8 <= len(data):
        (length, _crc) = struct.unpack_from("<II", data, pos)
        out.append((pos, pos + 8 + length))
        pos += 8 + length
    return out


def workload(path, clock=None) -> tuple[Broker, object, object, int]:
    """Ten transactions (odd ones aborted) with an ordinary message between them; returns
    the broker, topic, partition and the offset just past the sixth transaction."""
    b = Broker(open_engine(str(path)), **({"clock": clock} if clock else {}))
    t = b.create_topic(b.create_stream("s").id, "t", 1, {})
    p = t.partitions[0]
    state: dict = {}
    cut = 0
    for i in range(10):
        run(b, t, p, [("plain", 1), ("txn", 2, i % 2 == 0, i % 3 == 0, 1 + i % 3)], state)
        if i == 5:
            cut = p.high_watermark
    return b, t, p, cut


@pytest.mark.parametrize("chunk", [1, 2, tx.PRUNE_CHUNK])
@pytest.mark.parametrize("torn", [0, 3, "all"])
def test_a_crash_mid_prune_leaves_a_consistent_store_and_boot_finishes_it(tmp_path, monkeypatch, chunk, torn):
    """The prune's records are each atomic: a crash after any of them (the last one torn
    at any length, or the whole prune lost after the log start moved) reloads to a store
    whose history still answers every reader the same, and boot prunes the rest."""
    monkeypatch.setattr(tx, "PRUNE_CHUNK", chunk)
    b, t, p, cut = workload(tmp_path)
    hw = p.high_watermark
    before = views(b, p, range(cut, hw + 1))
    n_before = len(journal_records(tmp_path))
    b.delete_records(t, p, cut)
    records = journal_records(tmp_path)
    assert len(records) > n_before
    b.close()
    # cut the journal: lose the prune's last record (torn after `torn` bytes), or all of it
    j = tmp_path / "metadata" / "transactions.journal"
    keep = records[n_before][0] if torn == "all" else records[-1][0] + torn
    with open(j, "r+b") as f:
        f.truncate(keep)
    partial = stored_history(tmp_path)
    assert any(int(k.rsplit("/", 1)[1]) < cut for k in partial)  # the crash left history to prune
    b = Broker(open_engine(str(tmp_path)))
    t = b.topic(0, 0)
    p = t.partitions[0]
    assert p.log_start_offset == cut
    assert views(b, p, range(cut, hw + 1)) == before
    b.close()
    assert_pruned_below(tmp_path, cut)


def test_segment_deletion_and_retention_prune_too(tmp_path):
    """Iggy DeleteSegments and time retention move the storage log start: the history of
    the deleted segments goes, what remains reads the same."""
    clock = Clock()
    b = Broker(open_engine(str(tmp_path)), clock=clock)
    t = b.create_topic(b.create_stream("s").id, "t", 1, {"segment_roll": 1, "message_expiry": 10_000_000})
    p = t.partitions[0]
    state: dict = {}
    for i in range(6):
        run(b, t, p, [("plain", 1), ("txn", 2, i % 2 == 0, True, 2)], state)
        p.log.roll_if_due(clock.now + 10)
    assert len(p.log.segments()) > 4
    hw = p.high_watermark
    assert b.delete_segments(0, 0, 0, 3) == 3
    start = p.log_start_offset
    assert start > 0
    assert_pruned_below(tmp_path, start)
    before = views(b, p, range(start, hw + 1))
    clock.now += 20_000_000  # everything sealed is past its expiry
    assert b.apply_retention() > 0
    start = p.log_start_offset
    assert_pruned_below(tmp_path, start)
    assert {s: v for s, v in before.items() if s >= start} == views(b, p, range(start, hw + 1))
    b.close()


def test_transactional_ids_expire_when_idle_and_not_in_a_transaction(tmp_path):
    clock = Clock()
    b = Broker(open_engine(str(tmp_path)), clock=clock, transactional_id_expiration_ms=1_000)
    t = b.create_topic(b.create_stream("s").id, "t", 1, {})
    p = t.partitions[0]
    co = b.transactions
    ids = {}
    for tid in ("empty", "committed", "aborted", "ongoing", "recent"):
        ids[tid] = init(b, tid)
    for tid, commit in (("committed", True), ("aborted", False)):
        pid, e = ids[tid]
        co.add_partitions(tid, pid, e, [key(p)])
        b.append_transactional(t, p, batch(b"x"), pid, e, 0)
        end(b, tid, pid, e, commit)
    pid, e = ids["ongoing"]
    co.add_partitions("ongoing", pid, e, [key(p)])
    clock.now += 999_000
    assert b.expire_transactional_ids() == []
    pid, e = ids["recent"]
    co.add_offsets("recent", pid, e, "g")  # activity: its clock starts again
    end(b, "recent", pid, e, True)
    clock.now += 2_000
    assert sorted(b.expire_transactional_ids()) == ["aborted", "committed", "empty"]
    assert sorted(co.txns) == ["ongoing", "recent"]
    for tid in ("committed", "empty"):
        old_pid, old_e = ids[tid]
        with pytest.raises(tx.InvalidProducerIdMapping):  # the old producer is unknown now
            co.add_partitions(tid, old_pid, old_e, [key(p)])
        assert old_pid not in co.by_producer
    b.close()
    # durable: a restart does not bring them back
    b = Broker(open_engine(str(tmp_path)), clock=clock, transactional_id_expiration_ms=1_000)
    assert sorted(b.transactions.txns) == ["ongoing", "recent"]
    assert b.transactions.txns["ongoing"].state == tx.COMPLETE_ABORT  # boot aborted it; not expired
    # InitProducerId afterwards starts afresh: a new producer id, epoch 0
    pid, e = init(b, "committed")
    assert pid != ids["committed"][0] and e == 0
    b.close()


def test_expiry_skips_a_transaction_being_completed(tmp_path):
    clock = Clock()
    b = Broker(open_engine(str(tmp_path)), clock=clock, transactional_id_expiration_ms=1)
    pid, e = init(b, "busy")
    for state in (tx.ONGOING, tx.PREPARE_COMMIT, tx.PREPARE_ABORT):
        b.transactions.txns["busy"].state = state
        clock.now += 10_000
        assert b.expire_transactional_ids() == []
    b.transactions.txns["busy"].state = tx.COMPLETE_COMMIT
    assert b.expire_transactional_ids() == ["busy"]
    b.close()


def test_a_busy_workload_keeps_the_store_bounded(tmp_path):
    """Transactions forever, the log start following the end: the history kept stays the
    size of what is in the log, not of everything ever written."""
    b = Broker(open_engine(str(tmp_path)))
    t = b.create_topic(b.create_stream("s").id, "t", 1, {})
    p = t.partitions[0]
    state: dict = {}
    sizes = []
    for i in range(40):
        run(b, t, p, [("txn", 1, i % 2 == 0, False, 1)] * 3, state)
        b.delete_records(t, p, max(p.high_watermark - 10, 0))
        sizes.append(len(b.transactions.partitions[key(p)].markers))
    assert max(sizes[5:]) <= 6  # 10 offsets hold at most 5 transactions of one batch + a marker
    b.close()
    assert len(stored_history(tmp_path)) == sizes[-1]
    assert os.path.getsize(tmp_path / "metadata" / "transactions.journal") > 0


def test_a_refused_prune_write_changes_nothing_and_is_done_later(tmp_path, caplog):
    """The transactions store refuses writes (EBADF on a read-only journal): DeleteRecords
    still moves the log start, the history stays whole in memory and on disk (so readers
    are answered as before), and the next move of the log start prunes it."""
    from test_storage_write_failures import read_only

    b, t, p, cut = workload(tmp_path)
    hw = p.high_watermark
    before = views(b, p, range(cut, hw + 1))
    markers = dict(b.transactions.partitions[key(p)].markers)
    store = b.transactions._store.store
    with read_only(store._fd, store.journal_path):
        assert b.delete_records(t, p, cut) == cut
        with pytest.raises(MetadataNotSaved):
            b.transactions.expire_ids(0)  # every id is idle long enough: none is forgotten
    assert "transaction history not pruned" in caplog.text
    assert b.transactions.partitions[key(p)].markers == markers and "tid" in b.transactions.txns
    assert views(b, p, range(cut, hw + 1)) == before
    assert b.delete_records(t, p, cut + 1) == cut + 1
    assert_pruned_below(tmp_path, cut + 1)
    assert views(b, p, range(cut + 1, hw + 1)) == {s: v for s, v in before.items() if s > cut}
    b.close()
