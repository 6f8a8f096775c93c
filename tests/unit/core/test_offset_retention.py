"""Committed-offset expiry (Kafka's ``offsets.retention.minutes``, KIP-211) over a real
engine: which offsets go (group offsets not committed for the retention, of a group not in
use), which stay (a group in use, an Iggy consumer group's, an Iggy single consumer's, one
a transaction holds), re-commits keeping an offset alive, durability, and the Empty-since
time the classic coordinator keeps."""

from __future__ import annotations

from headwater.codec.batch import Message, build_batch
from headwater.core.broker import Broker
from headwater.core.groups.classic import GroupCoordinator, State
from headwater.core.offsets import CONSUMER, GROUP
from headwater.storage.api import open_engine


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000_000

    def __call__(self) -> int:
        self.now += 1
        return self.now


def open_broker(path, clock) -> Broker:
    return Broker(open_engine(str(path)), clock=clock)


def test_group_offsets_expire_unless_in_use_or_owned_by_iggy(tmp_path):
    clock = Clock()
    b = open_broker(tmp_path, clock)
    t = b.create_topic(b.create_stream("s").id, "t", 2, {})
    p0, p1 = t.partitions[0], t.partitions[1]
    for p in (p0, p1):
        b.append(p, bytearray(build_batch([Message(b"m")] * 5)))
    b.create_group(t.stream_id, t.id, "iggy-g")  # an Iggy consumer group: Iggy never expires offsets
    b.commit_many(GROUP, "idle", [(p0, 3, "x"), (p1, 4, "")])
    b.commit_many(GROUP, "busy", [(p0, 2, "")])
    b.commit_many(GROUP, "iggy-g", [(p0, 1, "")])
    b.commit(p0, CONSUMER, "single", 5)
    b.commit_many(GROUP, "fresh", [(p0, 2, "")])
    # a transaction holds an offset of "held" for p1: kept while it is unfinished
    pid, e = b.transactions.init("tid", 60_000, b.bump_producer, b.producers.init_producer, b.write_marker,
                                 b.commit_txn_offsets)
    b.commit_many(GROUP, "held", [(p1, 1, "")])
    b.transactions.add_offsets("tid", pid, e, "held")
    b.transactions.txn_offset_commit("tid", pid, e, "held", [[p1.stream_id, p1.topic_id, p1.id, 3, "", -1]])
    clock.now += 59_000_000
    b.commit_many(GROUP, "fresh", [(p0, 2, "")])  # the same offset again: its clock starts again
    assert b.expire_group_offsets(60_000, lambda name: False) == []
    clock.now += 2_000_000
    gone = b.expire_group_offsets(60_000, lambda name: name == "busy")
    assert sorted((k[2], k[4]) for k in gone) == [(0, "idle"), (1, "idle")]
    assert b.committed(p0, GROUP, "busy") == 2 and b.committed(p0, GROUP, "iggy-g") == 1
    assert b.committed(p0, CONSUMER, "single") == 5 and b.committed(p0, GROUP, "fresh") == 2
    assert b.committed(p1, GROUP, "held") == 1
    b.transactions.end("tid", pid, e, False, b.write_marker, b.commit_txn_offsets)
    clock.now += 60_000_000
    gone = b.expire_group_offsets(60_000, lambda name: name == "busy")
    assert sorted(k[4] for k in gone) == ["fresh", "held"]
    b.close()
    # durable; offsets loaded from disk count the server's start as their last commit
    b = open_broker(tmp_path, clock)
    t = b.topic(0, 0)
    p0 = t.partitions[0]
    assert sorted(k[4] for k, _ in b.offsets.items()) == ["busy", "iggy-g", "single"]
    assert b.expire_group_offsets(60_000, lambda name: False) == []
    clock.now += 60_000_000
    assert [k[4] for k in b.expire_group_offsets(60_000, lambda name: False)] == ["busy"]
    b.close()


def test_the_coordinator_keeps_when_a_group_became_empty():
    c = GroupCoordinator()
    c.validate_commit("simple", now_ms=5)  # a simple commit creates it Empty: never changed state
    assert c.get("simple").state is State.EMPTY and c.get("simple").state_since_ms is None
    r = c.join("g", now_ms=100, token=1, member_id="", session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
               protocol_type="consumer", protocols=[("range", b"")], require_known_member_id=False)
    g = c.get("g")
    assert g.state is not State.EMPTY and g.state_since_ms is not None
    member = next(iter(g.members))
    c.leave("g", now_ms=7_000, members=[(member, None)])
    c.tick(60_000)  # past the join phase's deadline: the group, with no member, becomes Empty
    assert g.state is State.EMPTY and g.state_since_ms == 60_000
    assert r is not None
