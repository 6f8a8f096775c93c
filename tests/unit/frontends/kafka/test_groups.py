"""The asyncio glue of Kafka consumer groups (``frontends/kafka/groups.py``) on a real event
loop, with no sockets: parked requests as futures, the one timer, a peer going away, a
shutdown; plus the outcome table and the subscription reader OffsetDelete uses."""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass
from typing import Any

import pytest

from headwater.config import KafkaConfig, load
from headwater.core.groups.classic import JoinResult, Outcome, State, SyncResult
from headwater.frontends.kafka import errors
from headwater.frontends.kafka.groups import KafkaGroups, group_config
from headwater.frontends.kafka.handlers.offset_delete import subscribed_topics

FAST = KafkaConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=1)


@dataclass
class Ctx:
    """What the glue reads from a handler's context."""

    closing: asyncio.Event
    peer_gone: Any = None


def join_kw(member_id: str = "", session_ms: int = 10_000, **kw):
    return dict(member_id=member_id, client_id="c", session_timeout_ms=session_ms, rebalance_timeout_ms=10_000,
                protocol_type="consumer", protocols=[("range", b"m")], require_known_member_id=False, **kw)


async def settle_loop() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def wait_until(check, timeout_s: float = 5.0) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not check() and loop.time() < deadline:
        await asyncio.sleep(0.01)
    return check()


def test_every_outcome_has_a_kafka_code():
    assert set(errors.GROUP_CODES) == set(Outcome)
    assert errors.group_code(Outcome.MEMBER_ID_REQUIRED) == 79
    assert errors.group_code(Outcome.REBALANCE_IN_PROGRESS) == 27
    assert errors.group_code(Outcome.FENCED_INSTANCE) == 82
    assert errors.group_code(Outcome.COORDINATOR_UNAVAILABLE) == 15


def test_group_settings_come_from_the_kafka_section():
    cfg = load(env={"HEADWATER_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "250",
                    "HEADWATER_KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS": "1000",
                    "HEADWATER_KAFKA_GROUP_MAX_SIZE": "3"})
    g = group_config(cfg.kafka)
    assert (g.initial_rebalance_delay_ms, g.min_session_timeout_ms, g.max_size) == (250, 1000, 3)
    default = group_config(KafkaConfig())
    assert (default.initial_rebalance_delay_ms, default.min_session_timeout_ms, default.max_size) == (3000, 6000, None)


def test_a_parked_join_is_answered_when_the_group_completes():
    async def go():
        groups = KafkaGroups(FAST)
        ctx = Ctx(asyncio.Event())
        a = await groups.join(ctx, "g", **join_kw())
        assert (a.outcome, a.generation_id) == (Outcome.OK, 1)
        leader_sync = await groups.sync(ctx, "g", member_id=a.member_id, generation_id=1,
                                        assignments=[(a.member_id, b"A")])
        assert leader_sync.assignment == b"A"
        second = asyncio.ensure_future(groups.join(ctx, "g", **join_kw()))
        await settle_loop()
        assert not second.done()  # parked until the first member rejoins
        assert groups.heartbeat("g", member_id=a.member_id, generation_id=1) is Outcome.REBALANCE_IN_PROGRESS
        again = await groups.join(ctx, "g", **join_kw(a.member_id))
        b = await asyncio.wait_for(second, 5)
        assert again.generation_id == b.generation_id == 2 and again.leader_id == a.member_id
        # the follower's sync waits for the leader's
        follower = asyncio.ensure_future(groups.sync(ctx, "g", member_id=b.member_id, generation_id=2))
        await settle_loop()
        assert not follower.done()
        await groups.sync(ctx, "g", member_id=a.member_id, generation_id=2,
                          assignments=[(a.member_id, b"A2"), (b.member_id, b"B2")])
        assert (await asyncio.wait_for(follower, 5)).assignment == b"B2"
        groups.close()

    asyncio.run(go())


def test_a_peer_going_away_ends_its_parked_request_and_the_late_answer_is_dropped():
    async def go():
        groups = KafkaGroups(FAST)
        ctx = Ctx(asyncio.Event())
        a = await groups.join(ctx, "g", **join_kw())
        await groups.sync(ctx, "g", member_id=a.member_id, generation_id=1, assignments=[])
        gone = asyncio.get_running_loop().create_future()
        parked = asyncio.ensure_future(groups.join(Ctx(asyncio.Event(), lambda: gone), "g", **join_kw()))
        await settle_loop()
        assert not parked.done()
        gone.set_exception(asyncio.IncompleteReadError(b"", 4))  # what the read-ahead sees at EOF
        assert await asyncio.wait_for(parked, 5) is None  # send nothing
        # the coordinator still counts the member; its answer, when it comes, goes nowhere
        again = await groups.join(ctx, "g", **join_kw(a.member_id))
        assert again.generation_id == 2 and len(again.members) == 2
        groups.close()

    asyncio.run(go())


def test_a_request_that_arrives_early_does_not_end_the_parked_one():
    async def go():
        groups = KafkaGroups(FAST)
        ctx = Ctx(asyncio.Event())
        a = await groups.join(ctx, "g", **join_kw())
        await groups.sync(ctx, "g", member_id=a.member_id, generation_id=1, assignments=[])
        ahead = asyncio.get_running_loop().create_future()
        parked = asyncio.ensure_future(groups.join(Ctx(asyncio.Event(), lambda: ahead), "g", **join_kw()))
        await settle_loop()
        ahead.set_result(b"\x00\x00\x00\x10")  # the size of a pipelined request
        await settle_loop()
        assert not parked.done()
        await groups.join(ctx, "g", **join_kw(a.member_id))
        result = await asyncio.wait_for(parked, 5)
        assert isinstance(result, JoinResult) and (result.outcome, result.generation_id) == (Outcome.OK, 2)
        groups.close()

    asyncio.run(go())


def test_shutdown_answers_parked_requests():
    async def go():
        groups = KafkaGroups(FAST)
        ctx = Ctx(asyncio.Event())
        a = await groups.join(ctx, "g", **join_kw())
        joined = asyncio.ensure_future(groups.join(ctx, "g", **join_kw()))
        await settle_loop()
        ctx.closing.set()
        result = await asyncio.wait_for(joined, 5)
        assert result.outcome is Outcome.COORDINATOR_UNAVAILABLE
        s = await groups.sync(ctx, "g", member_id=a.member_id, generation_id=1, assignments=[])
        assert isinstance(s, SyncResult)  # answered (REBALANCE_IN_PROGRESS) without waiting
        groups.close()

    asyncio.run(go())


def test_the_timer_expires_sessions_and_rebalances_the_rest():
    async def go():
        groups = KafkaGroups(FAST)
        ctx = Ctx(asyncio.Event())
        a = await groups.join(ctx, "g", **join_kw(session_ms=60_000))
        await groups.sync(ctx, "g", member_id=a.member_id, generation_id=1, assignments=[])
        b_join = asyncio.ensure_future(groups.join(ctx, "g", **join_kw(session_ms=50)))
        await settle_loop()
        await groups.join(ctx, "g", **join_kw(a.member_id, session_ms=60_000))
        b = await asyncio.wait_for(b_join, 5)
        await groups.sync(ctx, "g", member_id=a.member_id, generation_id=2, assignments=[])
        # b never syncs nor heartbeats: its 50 ms session ends and the group rebalances without it
        coordinator = groups.coordinator
        assert await wait_until(lambda: b.member_id not in coordinator.get("g").members)
        assert coordinator.get("g").state is State.PREPARING_REBALANCE
        assert groups.heartbeat("g", member_id=b.member_id, generation_id=2) is Outcome.UNKNOWN_MEMBER
        alone = await groups.join(ctx, "g", **join_kw(a.member_id, session_ms=60_000))
        assert (alone.generation_id, [m.member_id for m in alone.members]) == (3, [a.member_id])
        groups.close()
        assert groups._timer is None

    asyncio.run(go())


def test_the_timer_logs_the_member_it_removes_and_why(caplog):
    """A member gone silent (a client stuck or starved) is named in the server log when its
    session ends, and its late LeaveGroup too: a test that failed once shows who went and why."""
    async def go():
        groups = KafkaGroups(FAST)
        ctx = Ctx(asyncio.Event())
        a = await groups.join(ctx, "g", **join_kw(session_ms=50))
        await groups.sync(ctx, "g", member_id=a.member_id, generation_id=1, assignments=[])
        assert await wait_until(lambda: a.member_id not in groups.coordinator.get("g").members)
        groups.leave("g", [(a.member_id, None)])
        groups.close()
        return a.member_id

    with caplog.at_level("INFO", logger="headwater.kafka.groups"):
        member = asyncio.run(go())
    timed_out = [r.kv for r in caplog.records if r.getMessage() == "group member timed out"]
    assert timed_out == [{"group": "g", "member": member, "client": "c", "why": "session", "session_ms": 50,
                          "state": "Stable", "generation": 1}]
    unknown = [r.kv for r in caplog.records if r.getMessage() == "group leave of an unknown member"]
    assert unknown == [{"group": "g", "member": member}]


def test_no_deadline_no_timer():
    async def go():
        groups = KafkaGroups(FAST)
        ctx = Ctx(asyncio.Event())
        a = await groups.join(ctx, "g", **join_kw())
        assert groups._timer is not None  # the member's session
        leave = groups.leave("g", [(a.member_id, None)])
        assert [m.outcome for m in leave.members] == [Outcome.OK]
        assert groups.coordinator.get("g").state is State.EMPTY
        assert groups._timer is None and groups._due_ms is None
        assert groups.delete("g") is Outcome.OK
        assert groups.delete("g") is Outcome.GROUP_NOT_FOUND

    asyncio.run(go())


def _subscription(version: int, topics, tail: bytes = b"") -> bytes:
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1) + tail


def test_subscribed_topics_of_consumer_protocol_metadata():
    assert subscribed_topics(_subscription(0, ["a", "b.c"])) == {"a", "b.c"}
    # v1+ carry owned partitions (and more) after the user data: not read
    assert subscribed_topics(_subscription(3, ["x"], tail=b"\x00\x00\x00\x01\x00\x01x")) == {"x"}
    assert subscribed_topics(_subscription(0, [])) == set()
    for bad in (b"", b"\x00\x00\x00\x00\x00\x05", struct.pack(">hih", 0, 1, 9) + b"abc", b"\x00\x00\x00\x00\x00\x01\x00\x02\xff\xfe"):
        with pytest.raises(ValueError):
            subscribed_topics(bad)
