"""The classic group state machine: every (state, event) pair, each request's outcomes, scenarios.

A fake clock throughout (``Harness.now``); nothing sleeps or times anything.
"""

from __future__ import annotations

import itertools

import pytest

from headwater.core.groups.classic import (
    TRANSITIONS,
    ClassicGroup,
    Event,
    Expired,
    GroupConfig,
    GroupCoordinator,
    IllegalTransition,
    JoinResult,
    Outcome,
    State,
    SyncResult,
)

G = "g"
SESSION = 10_000
REBALANCE = 30_000
DELAY = 100
BOTH = (("range", b"R"), ("roundrobin", b"RR"))
RR_ONLY = (("roundrobin", b""),)
RANGE = (("range", b"R"),)


class Tok:
    """A parked-request token, compared by identity as the coordinator does."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"Tok({self.name})"


class Harness:
    def __init__(self, **cfg):
        cfg.setdefault("min_session_timeout_ms", 1_000)
        cfg.setdefault("initial_rebalance_delay_ms", DELAY)
        self.now = 0
        self.seen: list[tuple[State, Event, State]] = []
        self.expired: list[Expired] = []
        counter = itertools.count(1)
        self.c = GroupCoordinator(GroupConfig(**cfg), new_member_id=lambda cid: f"{cid}-{next(counter)}",
                                  observer=lambda g, a, e, b: self.seen.append((a, e, b)),
                                  on_expired=self.expired.append)
        self.done: dict[Tok, JoinResult | SyncResult] = {}
        self.direct: ClassicGroup | None = None  # drive a held (dead) group instead of the coordinator
        self._n = itertools.count()

    # --- plumbing
    def _deliver(self, completions) -> None:
        for comp in completions:
            assert comp.token not in self.done, f"{comp.token} answered twice"
            self.done[comp.token] = comp.result

    def _reply(self, tok, reply):
        self._deliver(reply.completions)
        if reply.result is not None:
            self._deliver([type("C", (), {"token": tok, "result": reply.result})])
        return tok

    def result(self, tok):
        return self.done.get(tok)

    @property
    def group(self) -> ClassicGroup:
        return self.direct or self.c.get(G)

    @property
    def state(self) -> State:
        return self.group.state

    # --- requests
    def join(self, client: str, member_id: str = "", *, instance: str | None = None, protocols=BOTH,
             require: bool = True, skip: bool = False, session: int = SESSION,
             rebalance: int = REBALANCE, ptype: str = "consumer", group: str = G) -> Tok:
        tok = Tok(f"join-{client}-{next(self._n)}")
        kw = dict(now_ms=self.now, token=tok, member_id=member_id, group_instance_id=instance,
                  client_id=client, client_host="/10.0.0.1", session_timeout_ms=session,
                  rebalance_timeout_ms=rebalance, protocol_type=ptype, protocols=protocols,
                  require_known_member_id=require, supports_skip_assignment=skip)
        if self.direct is not None:
            return self._reply(tok, self.direct.join(**kw))
        return self._reply(tok, self.c.join(group, **kw))

    def sync(self, member_id: str, gen: int, *, instance=None, assignments=(), ptype=None, pname=None,
             group: str = G) -> Tok:
        tok = Tok(f"sync-{member_id}-{next(self._n)}")
        kw = dict(now_ms=self.now, token=tok, member_id=member_id, generation_id=gen,
                  group_instance_id=instance, protocol_type=ptype, protocol_name=pname,
                  assignments=assignments)
        if self.direct is not None:
            return self._reply(tok, self.direct.sync(**kw))
        return self._reply(tok, self.c.sync(group, **kw))

    def heartbeat(self, member_id: str, gen: int, *, instance=None, group: str = G) -> Outcome:
        kw = dict(now_ms=self.now, member_id=member_id, generation_id=gen, group_instance_id=instance)
        if self.direct is not None:
            return self.direct.heartbeat(**kw)
        return self.c.heartbeat(group, **kw)

    def leave(self, *members, group: str = G):
        if self.direct is not None:
            reply = self.direct.leave(now_ms=self.now, members=members)
        else:
            reply = self.c.leave(group, now_ms=self.now, members=members)
        self._deliver(reply.completions)
        return reply.result

    def commit(self, member_id: str = "", gen: int = -1, *, instance=None, group: str = G) -> Outcome:
        kw = dict(now_ms=self.now, member_id=member_id, generation_id=gen, group_instance_id=instance)
        if self.direct is not None:
            return self.direct.validate_commit(**kw)
        return self.c.validate_commit(group, **kw)

    def advance(self, ms: int) -> None:
        self.now += ms
        if self.direct is not None:
            self._deliver(self.direct.tick(self.now))
        else:
            self._deliver(self.c.tick(self.now))


# --- the standard setups ------------------------------------------------------------------------
# A: dynamic, leader. B: static (instance "ib"). Both offer range and roundrobin.


def completing(h: Harness) -> dict:
    ja = h.join("A", require=False)
    jb = h.join("B", instance="ib")
    h.advance(2 * DELAY)
    ra, rb = h.result(ja), h.result(jb)
    assert ra.outcome is Outcome.OK and rb.outcome is Outcome.OK and ra.generation_id == 1
    assert h.state is State.COMPLETING_REBALANCE
    return {"A": ra.member_id, "B": rb.member_id, "gen": 1}


def stable(h: Harness) -> dict:
    """Stable; the leader synced, B has not yet (B is still pending sync)."""
    ctx = completing(h)
    s = h.sync(ctx["A"], 1, assignments={ctx["A"]: b"a1", ctx["B"]: b"b1"})
    assert h.result(s) == SyncResult(Outcome.OK, "consumer", "range", b"a1")
    assert h.state is State.STABLE
    return ctx


def preparing(h: Harness) -> dict:
    ctx = stable(h)
    h.join("A", ctx["A"])  # the leader rejoins: rebalance
    assert h.state is State.PREPARING_REBALANCE
    return ctx


def empty(h: Harness) -> dict:
    ctx = stable(h)
    h.leave((ctx["A"], None), (ctx["B"], "ib"))
    assert h.state is State.EMPTY and h.group.generation_id == 2
    ctx["gen"] = 2
    return ctx


def dead(h: Harness) -> dict:
    ctx = empty(h)
    g = h.group
    assert h.c.delete(G, now_ms=h.now) is Outcome.OK
    assert G not in h.c and g.state is State.DEAD
    h.direct = g
    return ctx


SETUPS = {State.EMPTY: empty, State.PREPARING_REBALANCE: preparing,
          State.COMPLETING_REBALANCE: completing, State.STABLE: stable, State.DEAD: dead}


def keep_alive(h: Harness, ctx: dict, who: tuple[str, ...], total: int) -> None:
    """Advance ``total`` ms in 9 s steps, heartbeating ``who`` (at the group's current generation)."""
    while total > 0:
        step = min(9_000, total)
        h.advance(step)
        total -= step
        for k in who:
            h.heartbeat(ctx[k], h.group.generation_id, instance="ib" if k == "B" else None)


# one driver per event: the request (or timer) that fires it where it is legal
DRIVERS = {
    Event.MEMBER_PENDING: lambda h, x: h.join("N"),
    Event.PENDING_REMOVED: lambda h, x: h.leave((h.result(h.join("N")).member_id, None)),
    Event.MEMBER_ADDED: lambda h, x: h.join("N", require=False),
    Event.MEMBER_REJOINED: lambda h, x: h.join("B", x["B"], instance="ib", protocols=(("range", b"R2"),)),
    Event.MEMBER_REJOINED_UNCHANGED: lambda h, x: h.join("B", x["B"], instance="ib"),
    Event.STATIC_REPLACED: lambda h, x: h.join("B", instance="ib"),
    Event.STATIC_REPLACED_NEW_PROTOCOL: lambda h, x: h.join("B", instance="ib", protocols=RR_ONLY),
    Event.HEARTBEAT: lambda h, x: h.heartbeat(x["B"], x["gen"], instance="ib"),
    Event.MEMBER_SYNCED: lambda h, x: h.sync(x["B"], x["gen"], instance="ib"),
    Event.LEADER_SYNCED: lambda h, x: h.sync(x["A"], x["gen"], assignments={x["A"]: b"a", x["B"]: b"b"}),
    Event.MEMBER_REMOVED: lambda h, x: h.leave((x["B"], "ib")),
    Event.JOIN_COMPLETED: lambda h, x: (h.join("B", x["B"], instance="ib"), h.advance(REBALANCE)),
    Event.JOIN_COMPLETED_EMPTY: lambda h, x: h.leave((x["A"], None), (x["B"], "ib")),
    Event.JOIN_STALLED: lambda h, x: (h.leave((x["A"], None)), keep_alive(h, x, ("B",), REBALANCE + 9_000)),
    Event.SYNC_EXPIRED: lambda h, x: keep_alive(h, x, ("A", "B"), REBALANCE + 9_000),
    Event.DELETED: lambda h, x: h.c.delete(G, now_ms=h.now),
}


def test_every_event_has_a_driver():
    assert set(DRIVERS) == set(Event)


@pytest.mark.parametrize("event", list(Event), ids=lambda e: e.name)
@pytest.mark.parametrize("state", list(State), ids=lambda s: s.name)
def test_every_state_event_pair(state: State, event: Event):
    """Drive ``event``'s request in ``state``: a table pair fires as tabled; any other pair never fires."""
    h = Harness()
    ctx = SETUPS[state](h)
    assert h.state is state
    del h.seen[:]
    DRIVERS[event](h, ctx)
    fired = [(a, e, b) for a, e, b in h.seen if e is event]
    expected = TRANSITIONS.get((state, event))
    if expected is None:
        assert all(a is not state for a, _, _ in fired)
        if state is State.DEAD:
            assert h.seen == [] and h.state is State.DEAD
    else:
        assert fired and fired[0] == (state, event, expected)
        assert h.seen[0][0] is state


@pytest.mark.parametrize("state", list(State), ids=lambda s: s.name)
def test_pairs_outside_the_table_are_bugs(state: State):
    for event in Event:
        g = ClassicGroup(G)
        g.state = state
        if (state, event) in TRANSITIONS:
            continue
        with pytest.raises(IllegalTransition):
            g._fire(event, 0)
        assert g.state is state


def test_table_targets_are_states_and_dead_is_final():
    assert all(isinstance(v, State) for v in TRANSITIONS.values())
    assert not any(s is State.DEAD for s, _ in TRANSITIONS)


# --- JoinGroup ----------------------------------------------------------------------------------


def test_member_id_required_handshake_then_join():
    h = Harness()
    first = h.result(h.join("A"))
    assert first.outcome is Outcome.MEMBER_ID_REQUIRED and first.member_id == "A-1"
    assert h.state is State.EMPTY and "A-1" in h.group.pending
    tok = h.join("A", "A-1")
    assert h.result(tok) is None and h.state is State.PREPARING_REBALANCE
    h.advance(2 * DELAY)
    r = h.result(tok)
    assert r.outcome is Outcome.OK and r.member_id == "A-1" and r.generation_id == 1
    assert r.leader_id == "A-1" and r.protocol_name == "range" and r.protocol_type == "consumer"
    assert [(m.member_id, m.metadata) for m in r.members] == [("A-1", b"R")]
    assert h.group.pending == {}


def test_old_versions_get_a_member_id_directly():
    h = Harness(initial_rebalance_delay_ms=0)
    r = h.result(h.join("A", require=False))
    assert r.outcome is Outcome.OK and r.member_id == "A-1" and r.generation_id == 1


def test_leader_gets_every_members_metadata_followers_get_none():
    h = Harness()
    ja = h.join("A", require=False, protocols=(("range", b"ma"),))
    jb = h.join("B", require=False, protocols=(("range", b"mb"),))
    jc = h.join("C", instance="ic", protocols=(("range", b"mc"),))
    h.advance(2 * DELAY)
    a, b, c = (h.result(t) for t in (ja, jb, jc))
    assert a.leader_id == b.leader_id == c.leader_id == a.member_id
    assert [(m.member_id, m.group_instance_id, m.metadata) for m in a.members] == [
        (a.member_id, None, b"ma"), (b.member_id, None, b"mb"), (c.member_id, "ic", b"mc")]
    assert b.members == () and c.members == ()


def test_protocol_vote_majority_and_leader_order_breaks_ties():
    h = Harness()
    ja = h.join("A", require=False, protocols=(("range", b""), ("rr", b""), ("sticky", b"")))
    h.join("B", require=False, protocols=(("rr", b""), ("range", b""), ("sticky", b"")))
    h.join("C", require=False, protocols=(("rr", b""), ("sticky", b""), ("range", b"")))
    h.advance(2 * DELAY)
    assert h.result(ja).protocol_name == "rr"  # two votes against one
    h2 = Harness()
    ja = h2.join("A", require=False, protocols=(("sticky", b""), ("range", b"")))
    h2.join("B", require=False, protocols=(("range", b""), ("sticky", b"")))
    h2.advance(2 * DELAY)
    assert h2.result(ja).protocol_name == "sticky"  # tie: the leader's preference


def test_members_vote_only_among_protocols_everyone_supports():
    h = Harness()
    ja = h.join("A", require=False, protocols=(("cooperative", b""), ("range", b"")))
    h.join("B", require=False, protocols=(("range", b""),))
    h.advance(2 * DELAY)
    assert h.result(ja).protocol_name == "range"


def test_inconsistent_protocols_are_refused():
    h = Harness()
    ctx = stable(h)
    assert h.result(h.join("X", protocols=(("other", b""),))).outcome is Outcome.INCONSISTENT_PROTOCOL
    assert h.result(h.join("X", ptype="connect")).outcome is Outcome.INCONSISTENT_PROTOCOL
    assert h.result(h.join("X", ptype="")).outcome is Outcome.INCONSISTENT_PROTOCOL
    assert h.result(h.join("X", protocols=())).outcome is Outcome.INCONSISTENT_PROTOCOL
    # a known member may not switch to something the others lack either
    other = (("other", b""),)
    assert h.result(h.join("A", ctx["A"], protocols=other)).outcome is Outcome.INCONSISTENT_PROTOCOL
    assert h.state is State.STABLE
    # an empty group takes any type, and a failed first join leaves no group behind
    assert h.result(h.join("Y", group="new", protocols=())).outcome is Outcome.INCONSISTENT_PROTOCOL
    assert "new" not in h.c
    assert h.result(h.join("Y", group="new", ptype="connect")).outcome is Outcome.MEMBER_ID_REQUIRED
    assert "new" in h.c


def test_join_request_validation():
    h = Harness()
    assert h.result(h.join("A", group="")).outcome is Outcome.INVALID_GROUP_ID
    assert h.result(h.join("A", session=999)).outcome is Outcome.INVALID_SESSION_TIMEOUT
    assert h.result(h.join("A", session=1_800_001)).outcome is Outcome.INVALID_SESSION_TIMEOUT
    assert h.result(h.join("A", "A-7")).outcome is Outcome.UNKNOWN_MEMBER  # no such group
    assert G not in h.c
    with pytest.raises(ValueError):
        h.c.join(G, now_ms=0, token=None, session_timeout_ms=SESSION, protocol_type="consumer",
                 protocols=RANGE)


def test_v0_rebalance_timeout_defaults_to_session_timeout():
    h = Harness()
    h.join("A", require=False, rebalance=-1, session=7_000)
    assert h.group.members["A-1"].rebalance_timeout_ms == 7_000


def test_unknown_and_fenced_known_members():
    h = Harness()
    ctx = stable(h)
    assert h.result(h.join("Z", "Z-99")).outcome is Outcome.UNKNOWN_MEMBER
    assert h.result(h.join("B", ctx["A"], instance="ib")).outcome is Outcome.FENCED_INSTANCE
    assert h.result(h.join("A", ctx["A"], instance="unknown-instance")).outcome is Outcome.UNKNOWN_MEMBER
    assert h.state is State.STABLE


def test_group_full():
    h = Harness(max_size=2)
    ctx = stable(h)
    assert h.result(h.join("C", require=False)).outcome is Outcome.GROUP_FULL
    pid = h.result(h.join("C")).outcome
    assert pid is Outcome.GROUP_FULL
    # a restarted static member replaces itself and does not count twice
    assert h.result(h.join("B", instance="ib")).outcome is Outcome.OK
    assert len(h.group.members) == 2 and ctx["B"] not in h.group.members


def test_group_full_on_promotion_of_a_pending_id():
    h = Harness(max_size=1)
    pid = h.result(h.join("B")).member_id
    h.join("A", require=False)
    assert h.result(h.join("B", pid)).outcome is Outcome.GROUP_FULL
    assert pid not in h.group.pending


def test_pending_member_with_an_instance_id_is_refused():
    h = Harness()
    pid = h.result(h.join("A")).member_id
    assert h.result(h.join("A", pid, instance="ia")).outcome is Outcome.UNKNOWN_MEMBER


def test_follower_rejoin_with_same_metadata_gets_current_generation():
    h = Harness()
    ctx = stable(h)
    r = h.result(h.join("B", ctx["B"], instance="ib"))
    assert r == JoinResult(Outcome.OK, ctx["B"], 1, "consumer", "range", ctx["A"], ())
    assert h.state is State.STABLE


def test_leader_rejoin_in_completing_with_same_metadata_gets_the_member_list_again():
    h = Harness()
    ctx = completing(h)
    r = h.result(h.join("A", ctx["A"]))
    assert r.outcome is Outcome.OK and r.generation_id == 1 and len(r.members) == 2
    assert h.state is State.COMPLETING_REBALANCE


def test_leader_rejoin_in_stable_forces_a_rebalance_single_member_completes_at_once():
    h = Harness(initial_rebalance_delay_ms=0)
    a = h.result(h.join("A", require=False))
    h.sync(a.member_id, 1, assignments={a.member_id: b"x"})
    assert h.state is State.STABLE
    r = h.result(h.join("A", a.member_id))
    assert r.outcome is Outcome.OK and r.generation_id == 2 and h.state is State.COMPLETING_REBALANCE


def test_a_second_join_supersedes_a_parked_one():
    h = Harness()
    ctx = preparing(h)
    first = [t for t in h.group.members.values() if t.join_token is not None][0].join_token
    h.join("A", ctx["A"])
    assert h.result(first).outcome is Outcome.REBALANCE_IN_PROGRESS


# --- static membership --------------------------------------------------------------------------


def three_stable(h: Harness, *, skip=False) -> dict:
    ja = h.join("A", require=False, instance="ia")
    jb = h.join("B", require=False)
    jc = h.join("C", require=False, instance="ic")
    h.advance(2 * DELAY)
    a, b, c = (h.result(t) for t in (ja, jb, jc))
    gen = a.generation_id
    ids = {"A": a.member_id, "B": b.member_id, "C": c.member_id, "gen": gen}
    sb = h.sync(b.member_id, gen)
    h.sync(a.member_id, gen, instance="ia", assignments={a.member_id: b"pa", b.member_id: b"pb",
                                                         c.member_id: b"pc"})
    sc = h.sync(c.member_id, gen, instance="ic")
    assert h.result(sb).assignment == b"pb" and h.result(sc).assignment == b"pc"
    assert h.state is State.STABLE and h.group.pending_sync == set()
    return ids


def test_static_member_restart_keeps_generation_and_assignment():
    h = Harness()
    ids = three_stable(h)
    del h.seen[:]
    r = h.result(h.join("C", instance="ic"))
    assert r.outcome is Outcome.OK and r.generation_id == ids["gen"] and r.members == ()
    assert r.leader_id == ids["A"] and r.member_id not in (ids["C"], "")
    assert h.seen == [(State.STABLE, Event.STATIC_REPLACED, State.STABLE)]
    assert h.heartbeat(ids["C"], ids["gen"], instance="ic") is Outcome.FENCED_INSTANCE
    assert h.heartbeat(ids["C"], ids["gen"]) is Outcome.UNKNOWN_MEMBER
    s = h.result(h.sync(r.member_id, ids["gen"], instance="ic"))
    assert s.outcome is Outcome.OK and s.assignment == b"pc"
    assert h.heartbeat(ids["B"], ids["gen"]) is Outcome.OK  # nobody else had to rebalance
    assert [m.member_id for m in h.group.members.values()] == [ids["A"], ids["B"], r.member_id]


def test_static_leader_restart_answers_with_old_leader_id_or_skip_assignment():
    h = Harness()
    ids = three_stable(h)
    r = h.result(h.join("A", instance="ia"))
    assert r.outcome is Outcome.OK and r.leader_id == ids["A"] != r.member_id and r.members == ()
    assert h.group.leader_id == r.member_id and h.state is State.STABLE
    r2 = h.result(h.join("A", instance="ia", skip=True))
    assert r2.skip_assignment and r2.leader_id == r2.member_id and len(r2.members) == 3
    assert h.result(h.sync(r2.member_id, ids["gen"], instance="ia")).assignment == b"pa"


def test_static_member_restart_with_new_protocol_rebalances():
    h = Harness()
    ids = three_stable(h)
    tok = h.join("C", instance="ic", protocols=RR_ONLY)
    assert h.result(tok) is None and h.state is State.PREPARING_REBALANCE


def test_static_member_restart_during_completing_fences_its_parked_sync_and_rebalances():
    h = Harness()
    ctx = completing(h)
    old_sync = h.sync(ctx["B"], 1, instance="ib")
    assert h.result(old_sync) is None
    h.join("B", instance="ib")
    assert h.result(old_sync).outcome is Outcome.FENCED_INSTANCE
    assert h.state is State.PREPARING_REBALANCE


def test_static_member_restart_during_preparing_fences_its_parked_join():
    h = Harness()
    ids = three_stable(h)  # A static leader, B dynamic, C static
    h.join("A", ids["A"], instance="ia")  # rebalance
    old = h.join("C", ids["C"], instance="ic")
    new = h.join("C", instance="ic")
    assert h.result(old) == JoinResult(Outcome.FENCED_INSTANCE, ids["C"])
    assert h.result(new) is None
    h.join("B", ids["B"])
    r = h.result(new)
    assert r.outcome is Outcome.OK and r.generation_id == ids["gen"] + 1 and r.member_id != ids["C"]


def test_static_members_that_did_not_rejoin_survive_the_join_deadline_dynamic_ones_do_not():
    h = Harness()
    ids = three_stable(h)  # A static leader, B dynamic, C static
    h.join("A", ids["A"], instance="ia")  # leader rejoin -> rebalance
    for _ in range(4):  # B and C stay alive but never rejoin
        h.advance(REBALANCE // 4)
        h.heartbeat(ids["B"], ids["gen"])
        h.heartbeat(ids["C"], ids["gen"], instance="ic")
    members = h.group.members
    assert ids["B"] not in members and ids["C"] in members
    assert h.state is State.COMPLETING_REBALANCE and h.group.generation_id == ids["gen"] + 1


def test_join_stalls_while_only_unjoined_static_members_remain():
    h = Harness()
    ids = three_stable(h)
    h.leave((ids["A"], "ia"), (ids["B"], None))
    assert h.state is State.PREPARING_REBALANCE
    h.advance(REBALANCE - 1)
    assert h.group.members == {}  # C's session (10 s) ran out first
    assert h.state is State.EMPTY


# --- SyncGroup ----------------------------------------------------------------------------------


def test_followers_wait_for_the_leader_and_missing_members_get_empty_assignments():
    h = Harness()
    ja = h.join("A", require=False)
    jb = h.join("B", require=False)
    jc = h.join("C", require=False)
    h.advance(2 * DELAY)
    a, b, c = (h.result(t) for t in (ja, jb, jc))
    sb, sc = h.sync(b.member_id, 1), h.sync(c.member_id, 1)
    assert h.result(sb) is None and h.result(sc) is None
    sa = h.sync(a.member_id, 1, assignments=[(a.member_id, b"x"), (b.member_id, b"y"), ("ghost", b"z")])
    assert h.result(sa).assignment == b"x"
    assert h.result(sb) == SyncResult(Outcome.OK, "consumer", "range", b"y")
    assert h.result(sc).assignment == b""
    assert h.state is State.STABLE


def test_sync_errors():
    h = Harness()
    ctx = completing(h)
    assert h.result(h.sync("nobody", 1)).outcome is Outcome.UNKNOWN_MEMBER
    assert h.result(h.sync(ctx["B"], 0, instance="ib")).outcome is Outcome.ILLEGAL_GENERATION
    assert h.result(h.sync(ctx["A"], 1, instance="ib")).outcome is Outcome.FENCED_INSTANCE
    assert h.result(h.sync(ctx["A"], 1, ptype="connect")).outcome is Outcome.INCONSISTENT_PROTOCOL
    assert h.result(h.sync(ctx["A"], 1, pname="roundrobin")).outcome is Outcome.INCONSISTENT_PROTOCOL
    assert h.result(h.sync(ctx["A"], 1, group="")).outcome is Outcome.INVALID_GROUP_ID
    assert h.result(h.sync(ctx["A"], 1, group="other")).outcome is Outcome.UNKNOWN_MEMBER
    ok = h.sync(ctx["A"], 1, ptype="consumer", pname="range", assignments={})
    assert h.result(ok).outcome is Outcome.OK
    h.join("A", ctx["A"])
    assert h.result(h.sync(ctx["B"], 1, instance="ib")).outcome is Outcome.REBALANCE_IN_PROGRESS


def test_rebalance_during_completing_answers_parked_syncs_and_clears_assignments():
    h = Harness()
    ctx = stable(h)
    h.join("A", ctx["A"])
    h.join("B", ctx["B"], instance="ib")  # generation 2, Completing
    sb = h.sync(ctx["B"], 2, instance="ib")
    h.join("N", require=False)  # a newcomer: rebalance
    assert h.result(sb).outcome is Outcome.REBALANCE_IN_PROGRESS
    assert all(m.assignment == b"" for m in h.group.members.values())


def test_a_second_sync_supersedes_a_parked_one():
    h = Harness()
    ctx = completing(h)
    first = h.sync(ctx["B"], 1, instance="ib")
    second = h.sync(ctx["B"], 1, instance="ib")
    assert h.result(first).outcome is Outcome.REBALANCE_IN_PROGRESS and h.result(second) is None
    h.sync(ctx["A"], 1, assignments={ctx["B"]: b"b"})
    assert h.result(second).assignment == b"b"


def test_members_that_never_sync_are_dropped_at_the_sync_deadline():
    h = Harness()
    ctx = completing(h)
    h.sync(ctx["A"], 1, assignments={})
    keep_alive(h, ctx, ("A", "B"), REBALANCE)
    assert set(h.group.members) == {ctx["A"]}
    assert (State.STABLE, Event.SYNC_EXPIRED, State.PREPARING_REBALANCE) in h.seen
    assert h.state is State.PREPARING_REBALANCE and h.group.generation_id == 1
    assert h.expired == [Expired(G, ctx["B"], "B", "rebalance", SESSION, State.STABLE, 1)]


# --- Heartbeat ----------------------------------------------------------------------------------


def test_heartbeat_outcomes():
    h = Harness()
    ctx = completing(h)
    assert h.heartbeat(ctx["A"], 1) is Outcome.OK  # after the join answer, before sync
    assert h.heartbeat(ctx["A"], 0) is Outcome.ILLEGAL_GENERATION
    assert h.heartbeat("nobody", 1) is Outcome.UNKNOWN_MEMBER
    assert h.heartbeat(ctx["A"], 1, instance="ib") is Outcome.FENCED_INSTANCE
    assert h.heartbeat(ctx["A"], 1, group="") is Outcome.INVALID_GROUP_ID
    assert h.heartbeat(ctx["A"], 1, group="other") is Outcome.UNKNOWN_MEMBER
    h.sync(ctx["A"], 1, assignments={})
    assert h.heartbeat(ctx["B"], 1, instance="ib") is Outcome.OK
    h.join("A", ctx["A"])
    assert h.heartbeat(ctx["B"], 1, instance="ib") is Outcome.REBALANCE_IN_PROGRESS


def test_heartbeats_keep_a_member_and_silence_removes_it():
    h = Harness()
    ctx = stable(h)
    h.sync(ctx["B"], 1, instance="ib")  # both deadlines: now + SESSION
    for _ in range(5):
        h.advance(SESSION - 1)
        assert h.heartbeat(ctx["A"], 1) is Outcome.OK
        assert h.heartbeat(ctx["B"], 1) is Outcome.OK
    h.advance(SESSION - 1)
    assert h.heartbeat(ctx["A"], 1) is Outcome.OK  # B went silent
    h.advance(1)
    assert ctx["B"] not in h.group.members
    assert h.heartbeat(ctx["A"], 1) is Outcome.REBALANCE_IN_PROGRESS


def test_session_expiry_is_at_the_deadline():
    h = Harness()
    ctx = stable(h)
    h.sync(ctx["B"], 1, instance="ib")
    h.heartbeat(ctx["A"], 1)
    h.heartbeat(ctx["B"], 1)
    assert h.c.next_deadline_ms() == h.now + SESSION
    h.advance(SESSION - 1)
    assert len(h.group.members) == 2
    assert h.expired == []
    h.advance(1)
    assert h.group.members == {} and h.state is State.EMPTY and h.group.generation_id == 2
    assert h.expired == [Expired(G, ctx["A"], "A", "session", SESSION, State.STABLE, 1),
                         Expired(G, ctx["B"], "B", "session", SESSION, State.PREPARING_REBALANCE, 1)]


# --- LeaveGroup ---------------------------------------------------------------------------------


def test_leave_batch_outcomes():
    h = Harness()
    ctx = stable(h)
    pid = h.result(h.join("P")).member_id
    r = h.leave(("", "ib"), (pid, None), ("ghost", None), ("", None), ("", "nope"))
    assert [m.outcome for m in r.members] == [Outcome.OK, Outcome.OK, Outcome.UNKNOWN_MEMBER,
                                              Outcome.UNKNOWN_MEMBER, Outcome.UNKNOWN_MEMBER]
    assert r.outcome is Outcome.OK and set(h.group.members) == {ctx["A"]}
    h2 = Harness()
    c2 = stable(h2)
    assert h2.leave((c2["A"], "ib")).members[0].outcome is Outcome.FENCED_INSTANCE
    assert h.expired == [] and h2.expired == []  # a member that leaves did not expire


def test_leave_on_unknown_group_and_bad_group_id():
    h = Harness()
    r = h.leave(("m", None), group="nope")
    assert r.outcome is Outcome.OK and r.members[0].outcome is Outcome.UNKNOWN_MEMBER
    assert h.leave(("m", None), group="").outcome is Outcome.INVALID_GROUP_ID


def test_leave_answers_the_leavers_parked_requests():
    h = Harness()
    ctx = preparing(h)
    parked = h.group.members[ctx["A"]].join_token
    h.leave((ctx["A"], None))
    assert h.result(parked) == JoinResult(Outcome.UNKNOWN_MEMBER, "")


def test_leaving_lets_the_rest_complete():
    h = Harness()
    ctx = preparing(h)  # A parked, B has not rejoined
    h.leave((ctx["B"], "ib"))
    assert h.state is State.COMPLETING_REBALANCE and h.group.generation_id == 2


# --- rebalance timing ---------------------------------------------------------------------------


def test_initial_delay_extends_while_members_arrive_up_to_the_rebalance_timeout():
    h = Harness(initial_rebalance_delay_ms=1_000)
    h.join("A", require=False, rebalance=2_500)
    h.advance(900)
    h.join("B", require=False, rebalance=2_500)
    h.advance(100)  # first delay over; B arrived: one more delay
    assert h.state is State.PREPARING_REBALANCE
    h.advance(900)
    h.join("C", require=False, rebalance=2_500)
    h.advance(100)  # second delay over; remaining 500
    assert h.state is State.PREPARING_REBALANCE
    h.advance(499)
    assert h.state is State.PREPARING_REBALANCE
    h.advance(1)
    assert h.state is State.COMPLETING_REBALANCE and len(h.group.members) == 3


def test_initial_delay_ignores_early_completion():
    h = Harness(initial_rebalance_delay_ms=1_000)
    h.join("A", require=False)
    assert h.group.all_joined() and h.state is State.PREPARING_REBALANCE
    h.advance(999)
    assert h.state is State.PREPARING_REBALANCE
    h.advance(1)
    assert h.state is State.COMPLETING_REBALANCE


def test_pending_member_ids_hold_the_join_phase_until_they_lapse():
    h = Harness()
    ctx = stable(h)
    pid = h.result(h.join("N")).member_id
    h.join("A", ctx["A"])
    h.join("B", ctx["B"], instance="ib")
    assert h.state is State.PREPARING_REBALANCE  # waiting for the pending id
    h.advance(SESSION)
    assert pid not in h.group.pending and h.state is State.COMPLETING_REBALANCE


def test_dynamic_members_that_do_not_rejoin_are_dropped_at_the_rebalance_deadline():
    h = Harness()
    ja = h.join("A", require=False)
    jb = h.join("B", require=False)
    h.advance(2 * DELAY)
    a, b = h.result(ja), h.result(jb)
    h.sync(a.member_id, 1, assignments={})
    h.sync(b.member_id, 1)
    h.join("A", a.member_id, session=60_000)  # B keeps heartbeating but never rejoins
    for _ in range(3):
        h.advance(9_000)
        assert h.heartbeat(b.member_id, 1) is Outcome.REBALANCE_IN_PROGRESS
    h.advance(REBALANCE - 27_000)
    assert set(h.group.members) == {a.member_id} and h.state is State.COMPLETING_REBALANCE
    assert h.heartbeat(b.member_id, 1) is Outcome.UNKNOWN_MEMBER
    assert h.expired == [Expired(G, b.member_id, "B", "rebalance", SESSION, State.PREPARING_REBALANCE, 1)]


def test_new_members_lapse_after_the_new_member_join_timeout():
    h = Harness(new_member_join_timeout_ms=5_000)
    ctx = stable(h)
    h.sync(ctx["B"], 1, instance="ib")
    tok = h.join("N", require=False)  # rebalance starts; A and B never rejoin but heartbeat
    new_id = next(m for m in h.group.members if m.startswith("N-"))
    for _ in range(2):
        h.advance(2_500)
        h.heartbeat(ctx["A"], 1)
        h.heartbeat(ctx["B"], 1)
    assert h.result(tok) == JoinResult(Outcome.UNKNOWN_MEMBER, "")
    assert h.expired == [Expired(G, new_id, "N", "join", SESSION, State.PREPARING_REBALANCE, 1)]


def test_next_deadline_and_tick_are_idempotent():
    h = Harness()
    assert h.c.next_deadline_ms() is None
    h.join("A", require=False)
    assert h.c.next_deadline_ms() == DELAY
    assert h.c.tick(0) == []
    assert h.c.tick(0) == []


# --- describe, list, delete, commit hooks -------------------------------------------------------


def test_describe_shows_metadata_and_assignment_only_when_stable():
    h = Harness()
    ctx = completing(h)
    d = h.c.describe(G)
    assert d.state is State.COMPLETING_REBALANCE and d.protocol_name == "" and d.protocol_type == "consumer"
    assert [(m.member_id, m.metadata, m.assignment) for m in d.members] == [(ctx["A"], b"", b""),
                                                                            (ctx["B"], b"", b"")]
    h.sync(ctx["A"], 1, assignments={ctx["A"]: b"a", ctx["B"]: b"b"})
    d = h.c.describe(G)
    assert d.state is State.STABLE and d.protocol_name == "range" and d.leader_id == ctx["A"]
    m = d.members[1]
    assert (m.member_id, m.group_instance_id, m.client_id, m.client_host, m.metadata, m.assignment) == (
        ctx["B"], "ib", "B", "/10.0.0.1", b"R", b"b")
    assert h.c.describe("nope") is None


def test_list_groups_with_state_filter():
    h = Harness()
    stable(h)
    h.commit(group="simple")
    listed = {(x.group_id, x.protocol_type, x.state) for x in h.c.list_groups()}
    assert listed == {(G, "consumer", State.STABLE), ("simple", "", State.EMPTY)}
    assert [x.group_id for x in h.c.list_groups([State.EMPTY])] == ["simple"]
    assert sorted(h.c.names()) == [G, "simple"]


def test_delete_only_when_empty():
    h = Harness()
    ctx = stable(h)
    assert h.c.delete(G) is Outcome.NON_EMPTY_GROUP
    assert h.c.delete("nope") is Outcome.GROUP_NOT_FOUND
    h.leave((ctx["A"], None), (ctx["B"], None))
    assert h.c.delete(G) is Outcome.OK and G not in h.c
    assert h.c.delete(G) is Outcome.GROUP_NOT_FOUND


def test_dead_group_answers_coordinator_unavailable():
    h = Harness()
    dead(h)
    assert h.result(h.join("A")).outcome is Outcome.COORDINATOR_UNAVAILABLE
    assert h.result(h.sync("A-1", 2)).outcome is Outcome.COORDINATOR_UNAVAILABLE
    assert h.heartbeat("A-1", 2) is Outcome.COORDINATOR_UNAVAILABLE
    assert h.leave(("A-1", None)).outcome is Outcome.COORDINATOR_UNAVAILABLE
    assert h.commit() is Outcome.COORDINATOR_UNAVAILABLE
    assert h.group.offset_delete_check().outcome is Outcome.GROUP_NOT_FOUND


def test_commit_validation():
    h = Harness()
    assert h.commit(gen=3, group="fresh") is Outcome.ILLEGAL_GENERATION and "fresh" not in h.c
    assert h.commit(group="simple") is Outcome.OK and h.c.get("simple").state is State.EMPTY
    assert h.commit("someone", -1, group="simple") is Outcome.OK
    assert h.commit("someone", 0, group="simple") is Outcome.UNKNOWN_MEMBER
    ctx = completing(h)
    assert h.commit(ctx["A"], 1) is Outcome.REBALANCE_IN_PROGRESS
    assert h.commit() is Outcome.UNKNOWN_MEMBER  # a non-member in a non-empty group
    h.sync(ctx["A"], 1, assignments={})
    assert h.commit(ctx["A"], 1) is Outcome.OK
    assert h.commit(ctx["A"], 0) is Outcome.ILLEGAL_GENERATION
    assert h.commit(ctx["A"], 1, instance="ib") is Outcome.FENCED_INSTANCE
    assert h.commit("ghost", 1) is Outcome.UNKNOWN_MEMBER
    h.join("A", ctx["A"])
    assert h.commit(ctx["B"], 1, instance="ib") is Outcome.OK  # allowed while preparing


def test_commit_counts_as_contact():
    h = Harness()
    ctx = stable(h)
    h.sync(ctx["B"], 1, instance="ib")
    for _ in range(3):
        h.advance(SESSION - 1)
        assert h.commit(ctx["A"], 1) is Outcome.OK
        h.heartbeat(ctx["B"], 1)
    assert h.state is State.STABLE


def test_offset_delete_check():
    h = Harness()
    assert h.c.offset_delete_check(G).outcome is Outcome.GROUP_NOT_FOUND
    ctx = stable(h)
    chk = h.c.offset_delete_check(G)
    assert chk.outcome is Outcome.OK and chk.protocol_type == "consumer" and chk.subscriptions == (b"R", b"R")
    h.leave((ctx["A"], None), (ctx["B"], None))
    assert h.c.offset_delete_check(G).subscriptions is None


# --- scenarios ----------------------------------------------------------------------------------


def test_scenario_three_join_sync_one_leaves_one_dies():
    h = Harness()
    ids = {}
    for name in "ABC":
        ids[name] = h.result(h.join(name)).member_id  # MEMBER_ID_REQUIRED handshake
    toks = {name: h.join(name, ids[name]) for name in "ABC"}
    h.advance(2 * DELAY)
    res = {n: h.result(t) for n, t in toks.items()}
    assert {r.generation_id for r in res.values()} == {1} and res["A"].leader_id == ids["A"]
    syncs = {n: h.sync(ids[n], 1) for n in "BC"}
    assert all(h.result(t) is None for t in syncs.values())
    h.sync(ids["A"], 1, assignments={ids[n]: n.lower().encode() for n in "ABC"})
    assert {n: h.result(t).assignment for n, t in syncs.items()} == {"B": b"b", "C": b"c"}

    # C leaves: A and B learn through heartbeats and rejoin
    h.advance(1_000)
    h.leave((ids["C"], None))
    assert h.heartbeat(ids["A"], 1) is Outcome.REBALANCE_IN_PROGRESS
    ta, tb = h.join("A", ids["A"]), h.join("B", ids["B"])
    ra, rb = h.result(ta), h.result(tb)
    assert ra.generation_id == rb.generation_id == 2 and len(ra.members) == 2
    sb = h.sync(ids["B"], 2)
    h.sync(ids["A"], 2, assignments={ids["A"]: b"a2", ids["B"]: b"b2"})
    assert h.result(sb).assignment == b"b2"

    # B dies silently; A keeps heartbeating and then rejoins alone
    for _ in range(2):
        h.advance(SESSION // 2)
        h.heartbeat(ids["A"], 2)
    assert ids["B"] not in h.group.members and h.state is State.PREPARING_REBALANCE
    ra = h.result(h.join("A", ids["A"]))
    assert ra.generation_id == 3 and [m.member_id for m in ra.members] == [ids["A"]]


def test_a_sync_answered_by_a_rebalance_restarts_the_members_session():
    """Found by the property test: a member unparked by a cascade inside one tick gets a full session."""
    h = Harness()
    ctx = completing(h)
    h.sync(ctx["B"], 1, instance="ib")  # B parked; A goes silent
    h.advance(SESSION)  # A expires -> rebalance -> B's sync answered now
    assert ctx["A"] not in h.group.members and ctx["B"] in h.group.members
    assert h.group.members[ctx["B"]].deadline_ms == h.now + SESSION


def test_a_dead_group_ignores_ticks_and_forgets_pending_ids():
    h = Harness()
    h.join("A")  # a pending id in an Empty group
    g = h.group
    assert h.c.delete(G) is Outcome.OK
    assert g.pending == {} and g.tick(10 ** 9) == [] and g.next_deadline_ms() is None
