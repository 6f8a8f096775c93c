"""core.transactions over a real engine in tmp_path: the coordinator's (state, event) table,
the crash windows between a durable record and the log append it describes, and what
readers see (last stable offset, hidden batches)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.codec.batch import Message, build_batch
from headwater.core import transactions as tx
from headwater.core.broker import Broker
from headwater.core.offsets import GROUP
from headwater.core.producers import ProducerFenced
from headwater.storage.api import open_engine


def batch(*payloads: bytes) -> bytearray:
    return bytearray(build_batch([Message(p) for p in payloads]))


@pytest.fixture
def env(tmp_path):
    b = Broker(open_engine(str(tmp_path / "d")))
    s = b.create_stream("s")
    t = b.create_topic(s.id, "t", 2, {})
    yield b, t, tmp_path / "d"
    b.close()


def reopen(b: Broker, path) -> Broker:
    b.close()
    return Broker(open_engine(str(path)))


def init(b: Broker, tid: str = "tid", timeout_ms: int = 60_000):
    return b.transactions.init(tid, timeout_ms, b.bump_producer, b.producers.init_producer, b.write_marker,
                               b.commit_txn_offsets)


def key(p):
    return (p.stream_id, p.topic_id, p.id)


def payloads(b: Broker, p) -> list[bytes]:
    from headwater.codec.batch import iter_frames

    got, _n, _next = b.read_visible(p, 0, 1000)
    return [bytes(f.payload) for g in got for f in iter_frames(g)]


def produce(b: Broker, t, p, pid, epoch, seq, *values: bytes):
    return b.append_transactional(t, p, batch(*values), pid, epoch, seq)


def open_txn(b: Broker, t, p, *values: bytes, timeout_ms: int = 60_000) -> tuple[int, int]:
    """InitProducerId, AddPartitionsToTxn(p), one transactional batch of ``values``."""
    pid, e = init(b, timeout_ms=timeout_ms)
    b.transactions.add_partitions("tid", pid, e, [key(p)])
    produce(b, t, p, pid, e, 0, *values)
    return pid, e


def end(b: Broker, pid: int, e: int, commit: bool) -> None:
    b.transactions.end("tid", pid, e, commit, b.write_marker, b.commit_txn_offsets)


def test_commit_abort_lso_and_what_iggy_sees(env):
    b, t, _ = env
    p = t.partitions[0]
    b.append(p, batch(b"plain"))
    pid, epoch = init(b)
    b.transactions.add_partitions("tid", pid, epoch, [key(p)])
    produce(b, t, p, pid, epoch, 0, b"c0", b"c1")
    assert b.last_stable_offset(p) == 1 and p.high_watermark == 3
    assert payloads(b, p) == [b"plain"]  # nothing past the LSO
    end(b, pid, epoch, True)
    assert b.last_stable_offset(p) == p.high_watermark == 4  # marker at 3
    b.transactions.add_partitions("tid", pid, epoch, [key(p)])
    produce(b, t, p, pid, epoch, 2, b"a0")
    b.append(p, batch(b"plain2"))  # another producer's record inside the aborted range stays visible
    end(b, pid, epoch, False)
    assert payloads(b, p) == [b"plain", b"c0", b"c1", b"plain2"]
    pt = b.transactions.peek(key(p))
    assert pt.aborted_between(0, 100) == [(pid, 4)]
    assert pt.aborted_between(7, 100) == []  # the abort marker is at 6
    # polling from inside a hidden stretch moves past it
    got, n, nxt = b.read_visible(p, 3, 1)
    assert n == 1 and nxt == 6


def test_the_table_covers_every_state_and_event():
    assert set(tx.TRANSITIONS) == {(s, e) for s in tx.STATES for e in tx.EVENTS}
    for (state, event), found in tx.TRANSITIONS.items():
        if isinstance(found, str):
            assert tx.next_state(state, event) == found
        else:
            with pytest.raises(found):
                tx.next_state(state, event)


@pytest.mark.parametrize("state", tx.STATES)
@pytest.mark.parametrize("event", ["add_partitions", "add_offsets", "end_commit", "end_abort", "init"])
def test_every_state_and_event(env, state, event):
    b, t, _ = env
    p = t.partitions[0]
    pid, epoch = init(b)
    txn = b.transactions.txns["tid"]
    txn.state = state
    if state == tx.ONGOING:
        txn.partitions = [list(key(p))]
    expected = {
        ("add_partitions", s): tx.ONGOING for s in (tx.EMPTY, tx.ONGOING, tx.COMPLETE_COMMIT, tx.COMPLETE_ABORT)
    }
    expected.update({("add_offsets", s): tx.ONGOING for s in (tx.EMPTY, tx.ONGOING, tx.COMPLETE_COMMIT, tx.COMPLETE_ABORT)})
    expected.update({
        ("end_commit", tx.ONGOING): tx.COMPLETE_COMMIT, ("end_abort", tx.ONGOING): tx.COMPLETE_ABORT,
        ("end_commit", tx.COMPLETE_COMMIT): tx.COMPLETE_COMMIT, ("end_abort", tx.COMPLETE_ABORT): tx.COMPLETE_ABORT,
    })
    expected.update({("init", s): tx.EMPTY for s in tx.STATES})
    errors = {("end_commit", s): tx.InvalidTxnState for s in (tx.EMPTY, tx.COMPLETE_ABORT)}
    errors.update({("end_abort", s): tx.InvalidTxnState for s in (tx.EMPTY, tx.COMPLETE_COMMIT)})
    for ev in ("add_partitions", "add_offsets", "end_commit", "end_abort"):
        for s in (tx.PREPARE_COMMIT, tx.PREPARE_ABORT):
            errors[(ev, s)] = tx.ConcurrentTransactions
    co = b.transactions

    def run():
        if event == "add_partitions":
            co.add_partitions("tid", pid, epoch, [key(p)])
        elif event == "add_offsets":
            co.add_offsets("tid", pid, epoch, "g")
        elif event.startswith("end"):
            co.end("tid", pid, epoch, event == "end_commit", b.write_marker, b.commit_txn_offsets)
        else:
            init(b)

    if (event, state) in errors:
        with pytest.raises(errors[(event, state)]):
            run()
        assert txn.state == state
    else:
        run()
        assert txn.state == expected[(event, state)]
        if event == "init":
            assert txn.producer_epoch == epoch + 1


def test_fencing_and_errors(env):
    b, t, _ = env
    p = t.partitions[0]
    pid, e0 = open_txn(b, t, p, b"zombie")
    pid2, e1 = init(b)  # a second instance: the open transaction is aborted, the epoch bumped
    assert (pid2, e1) == (pid, e0 + 1)
    assert b.last_stable_offset(p) == p.high_watermark and payloads(b, p) == []
    with pytest.raises(ProducerFenced):
        end(b, pid, e0, True)
    with pytest.raises(ProducerFenced):
        b.transactions.check_produce(key(p), pid, e0)
    with pytest.raises(tx.InvalidProducerIdMapping):
        b.transactions.add_partitions("tid", pid + 99, e1, [key(p)])
    with pytest.raises(tx.InvalidTxnState):  # the partition was not added (KIP-890 verification)
        b.transactions.check_produce(key(p), pid, e1)
    with pytest.raises(tx.InvalidTransactionTimeout):
        init(b, timeout_ms=b.transactions.max_timeout_ms + 1)
    with pytest.raises(tx.InvalidTxnState):  # TxnOffsetCommit before AddOffsetsToTxn
        b.transactions.txn_offset_commit("tid", pid, e1, "g", [[*key(p), 1, "", -1]])


def test_offsets_commit_with_the_transaction_only(env):
    b, t, _ = env
    p = t.partitions[1]
    pid, e = init(b)
    b.transactions.add_offsets("tid", pid, e, "g")
    b.transactions.txn_offset_commit("tid", pid, e, "g", [[*key(p), 5, "m", 3]])
    end(b, pid, e, False)
    assert b.committed_entry(p, GROUP, "g") is None
    b.transactions.add_offsets("tid", pid, e, "g")
    b.transactions.txn_offset_commit("tid", pid, e, "g", [[*key(p), 7, "m", 3]])
    end(b, pid, e, True)
    c = b.committed_entry(p, GROUP, "g")
    assert (c.offset, c.metadata, c.leader_epoch) == (7, "m", 3)


def test_a_restart_aborts_an_ongoing_transaction_and_fences_its_producer(env):
    b, t, path = env
    p = t.partitions[0]
    pid, e = open_txn(b, t, p, b"in-flight")
    b = reopen(b, path)
    p = b.topic(0, 0).partitions[0]
    txn = b.transactions.txns["tid"]
    assert txn.state == tx.COMPLETE_ABORT and txn.producer_epoch == e + 1
    assert payloads(b, p) == [] and b.last_stable_offset(p) == p.high_watermark == 2
    b.close()


def test_crash_after_recording_a_batch_before_writing_it(env):
    b, t, path = env
    p = t.partitions[0]
    pid, e = open_txn(b, t, p, b"written")
    end(b, pid, e, True)
    b.transactions.add_partitions("tid", pid, e, [key(p)])
    b.transactions.record_batch(key(p), pid, e, 2, 4)  # durable record; the append never happened
    b = reopen(b, path)
    p = b.topic(0, 0).partitions[0]
    assert b.transactions.peek(key(p)).open == {}  # trimmed at boot: past the log's end
    assert payloads(b, p) == [b"written"] and b.last_stable_offset(p) == 2
    b.close()


def test_crash_after_recording_a_marker_before_writing_it(env):
    b, t, path = env
    p = t.partitions[0]
    pid, e = open_txn(b, t, p, b"x", b"y")
    co = b.transactions
    txn = co.txns["tid"]
    txn.state = tx.PREPARE_COMMIT
    co._save(txn)
    co.close_partition(key(p), pid, e, True, p.high_watermark)  # durable; the marker append never happened
    b = reopen(b, path)
    p = b.topic(0, 0).partitions[0]
    # boot turned the marker record back into the open transaction, then completed the commit
    assert b.transactions.txns["tid"].state == tx.COMPLETE_COMMIT
    assert payloads(b, p) == [b"x", b"y"] and b.last_stable_offset(p) == p.high_watermark == 3
    assert list(b.transactions.peek(key(p)).markers) == [2]
    b.close()


def test_timeouts_abort_and_fence(tmp_path):
    now = [1_000_000]
    b = Broker(open_engine(str(tmp_path)), clock=lambda: now[0])
    t = b.create_topic(b.create_stream("s").id, "t", 1, {})
    p = t.partitions[0]
    pid, e = open_txn(b, t, p, b"slow", timeout_ms=1000)
    now[0] += 999_000
    assert b.abort_expired_transactions() == []
    now[0] += 2_000
    assert b.abort_expired_transactions() == ["tid"]
    assert payloads(b, p) == [] and b.last_stable_offset(p) == p.high_watermark
    with pytest.raises(ProducerFenced):
        end(b, pid, e, True)
    b.close()


def test_committed_leader_epoch_survives_a_restart(env):
    b, t, path = env
    for p in t.partitions.values():
        b.append(p, batch(*[b"m"] * 6))
    b.commit_many(GROUP, "g", [(t.partitions[0], 4, "meta", 1), (t.partitions[1], 5, "")])
    b = reopen(b, path)
    t = b.topic(0, 0)
    got = [b.committed_entry(t.partitions[i], GROUP, "g") for i in (0, 1)]
    assert [(c.offset, c.metadata, c.leader_epoch) for c in got] == [(4, "meta", 1), (5, "", -1)]
    b.close()


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 5)), max_size=8), st.integers(0, 80), st.integers(1, 30))
def test_visible_end_counts_only_offsets_no_hidden_range_covers(ranges, start, count):
    pt = tx.PartitionTxns()
    covered: set[int] = set()
    offset = 0
    for gap, length in ranges:  # disjoint, increasing ranges as the log makes them
        first = offset + gap
        pt.markers[first + length] = [1, 0, False, first, [[first, first + length - 1]] if length else []]
        covered.update(range(first, first + length + 1))
        offset = first + length + 1
    end = pt.visible_end(start, count)
    visible = [o for o in range(start, end) if o not in covered]
    assert len(visible) == count and end - 1 not in covered


@pytest.mark.parametrize("count", [1, 7, 50, 120, 1000])
def test_read_visible_in_chunks_equals_the_log_without_hidden_batches(env, count):
    from headwater.codec.batch import iter_frames, read_header

    b, t, _ = env
    p = t.partitions[0]
    pid, e = init(b)
    seq = 0
    for i in range(12):
        data = batch(*[b"%d-%d" % (i, j) for j in range(1 + i % 5)])
        if i % 3:
            b.transactions.add_partitions("tid", pid, e, [key(p)])
            b.append_transactional(t, p, data, pid, e, seq)
            seq += 1 + i % 5
            end(b, pid, e, i % 3 == 1)
        else:
            b.append(p, data)
    pt = b.transactions.peek(key(p))
    stored, _ = p.read(0, p.high_watermark)
    expected = [bytes(f.payload) for s in stored if pt.find(read_header(s).base_offset) is None for f in iter_frames(s)]
    got, pos = [], 0
    while True:
        chunk, n, pos = b.read_visible(p, pos, count)
        frames = [bytes(f.payload) for s in chunk for f in iter_frames(s)]
        assert len(frames) == n <= count
        if not chunk:
            break
        got += frames
    assert got == expected and len(expected) == sum(1 + i % 5 for i in range(12) if i % 3 != 2)


# ------------------------------------------------------------------ compaction vs. transactions
def keyed(*records: tuple[bytes, bytes | None]) -> bytearray:
    """A batch of Kafka-keyed messages (``kafka.key`` header; a None value is a tombstone)."""
    from headwater.codec.headers import Kind, encode_headers

    def headers(k: bytes, v: bytes | None) -> bytes:
        h: dict = {"kafka.key": k}
        if v is None:
            h["kafka.flags"] = (Kind.UINT8, 1)
        return encode_headers(h)

    return bytearray(build_batch([Message(v or b"", user_headers=headers(k, v)) for k, v in records]))


@pytest.fixture
def compacted(tmp_path):
    """A broker over real files with one compacted partition whose active segment
    rolls at once (``segment_roll`` 1 µs) and whose cleaner runs on any dirt."""
    b = Broker(open_engine(str(tmp_path / "d")))
    s = b.create_stream("s")
    t = b.create_topic(s.id, "c", 1, {"cleanup_policy": "compact", "min_cleanable_dirty_ratio": "0.0",
                                       "segment_roll": 1, "delete_retention": 0})
    yield b, t
    b.close()


def keyed_visible(b: Broker, p) -> list[tuple[bytes, bytes]]:
    from headwater.codec.batch import iter_frames
    from headwater.codec.headers import decode_headers

    got, _n, _next = b.read_visible(p, 0, 1000)
    return [(decode_headers(f.user_headers)["kafka.key"], bytes(f.payload)) for g in got for f in iter_frames(g)]


def compact_all(b: Broker) -> int:
    """Passes until one removes nothing (segments roll on each call)."""
    import asyncio

    total = 0
    while removed := asyncio.run(b.compact_once(1 << 30)):
        total += removed
    return total + asyncio.run(b.compact_once(1 << 30))


def test_compaction_ignores_aborted_records_and_keeps_markers(compacted):
    b, t = compacted
    p = t.partitions[0]
    b.append(p, keyed((b"K", b"v1"), (b"J", b"j1"), (b"old", b"o1")))  # offsets 0..2, committed
    b.append(p, keyed((b"old", b"o2")))  # 3: shadows offset 2
    pid, e = init(b)
    b.transactions.add_partitions("tid", pid, e, [key(p)])
    b.append_transactional(t, p, keyed((b"K", b"v2-aborted"), (b"J", None)), pid, e, 0)  # 4, 5
    end(b, pid, e, False)  # abort marker at 6
    b.append(p, keyed((b"x", b"x1")))  # 7: after the marker
    before = p.log.read(0, 1 << 30, 1 << 40)
    assert keyed_visible(b, p) == [(b"K", b"v1"), (b"J", b"j1"), (b"old", b"o1"), (b"old", b"o2"), (b"x", b"x1")]
    assert compact_all(b) == 1  # only the shadowed "old" o1
    assert keyed_visible(b, p) == [(b"K", b"v1"), (b"J", b"j1"), (b"old", b"o2"), (b"x", b"x1")]
    after = p.log.read(0, 1 << 30, 1 << 40)
    # the aborted batch and the marker are kept byte for byte: the hidden ranges still name them
    assert [bytes(x) for x in before[1:]] == [bytes(x) for x in after[1:]]
    assert b.transactions.peek(key(p)).aborted_between(0, p.high_watermark) == [(pid, 4)]


def test_compaction_stops_at_the_last_stable_offset(compacted):
    b, t = compacted
    p = t.partitions[0]
    b.append(p, keyed((b"K", b"v1")))  # 0
    pid, e = init(b)
    b.transactions.add_partitions("tid", pid, e, [key(p)])
    b.append_transactional(t, p, keyed((b"K", b"v2-open")), pid, e, 0)  # 1: undecided
    b.append(p, keyed((b"K", b"v3"), (b"L", b"l1")))  # 2, 3: past the LSO
    b.append(p, keyed((b"L", b"l2")))  # 4
    assert b.last_stable_offset(p) == 1
    compact_all(b)
    stored = [(o, k) for o, k, _ in stored_keys(p)]
    assert stored == [(0, b"K"), (1, b"K"), (2, b"K"), (3, b"L"), (4, b"L")]  # nothing cleaned
    end(b, pid, e, False)  # abort: K=v2 shadows nothing
    assert compact_all(b) == 2  # K v1 (shadowed by the committed v3) and L l1
    assert keyed_visible(b, p) == [(b"K", b"v3"), (b"L", b"l2")]
    assert [(o, k) for o, k, _ in stored_keys(p)] == [(1, b"K"), (2, b"K"), (4, b"L"), (5, None)]


def stored_keys(p) -> list[tuple[int, bytes | None, bytes]]:
    """(offset, kafka.key or None, payload) of every stored message, hidden ones included."""
    from headwater.codec.batch import iter_frames, read_header
    from headwater.codec.headers import decode_headers

    out = []
    for g in p.log.read(0, 1 << 30, 1 << 40):
        base = read_header(g).base_offset
        for f in iter_frames(g):
            out.append((base + f.offset_delta, decode_headers(f.user_headers).get("kafka.key") if f.user_headers else None,
                        bytes(f.payload)))
    return out
