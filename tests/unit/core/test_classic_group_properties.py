"""Hypothesis: random client behaviour against one classic group, invariants after every step.

Four clients (two dynamic, two static) join, sync, heartbeat, commit, leave, crash (forget their
member id and abandon parked requests) and let time pass, in any order. A leader deals six
partitions over the members its join answer listed, encoding (generation, owner, partitions) in
the opaque assignment so the invariants can read it back. Invariants:

- a partition is owned by at most one member (or static instance) per generation, and a member
  only ever receives an assignment of the generation it synced for, addressed to itself;
- the generation never decreases; every generation has one protocol;
- every parked request is tracked by a member and answered exactly once;
- a member that is not parked and has not been heard from for its session timeout is gone
  after the next tick;
- when every member and pending id has rejoined, the join phase is over (outside the initial
  delay); a rebalance's join phase never outlives its rebalance timeout, nor a sync phase its own;
- the leader is a member exactly when there are members.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater.core.groups.classic import (
    Event,
    GroupConfig,
    GroupCoordinator,
    JoinResult,
    Outcome,
    State,
    SyncResult,
)

G = "g"
SESSION = 3_000
REBALANCE = 5_000
DELAY = 500
PARTITIONS = 6
VARIANTS = [
    (("range", b"r"), ("rr", b"x")),
    (("rr", b"y"), ("range", b"r")),
    (("range", b"r2"),),
    (("rr", b"z"),),
]
PREFERRED = {"c0": 0, "c1": 1, "c2": 0, "c3": 1}  # what a well-behaved client offers
INSTANCES = {"c0": None, "c1": None, "c2": "i2", "c3": "i3"}


@dataclass
class Client:
    instance: str | None
    member_id: str = ""
    gen: int = -1
    leader: bool = False
    members: tuple = ()
    join_tok: Any = None
    sync_tok: Any = None
    synced: int = -1  # generation of the last assignment received

    def reset(self) -> None:
        self.member_id, self.gen, self.leader, self.members = "", -1, False, ()
        self.join_tok = self.sync_tok = None


@dataclass(eq=False)
class Tok:
    client: str
    kind: str
    member_id: str
    gen: int
    owner: str | None = None


@dataclass
class Sim:
    now: int = 0
    clients: dict[str, Client] = field(default_factory=dict)
    outstanding: dict[int, Tok] = field(default_factory=dict)  # id(token) -> token
    contact: dict[str, int] = field(default_factory=dict)  # member id -> last time the group heard of it
    owners: dict[int, dict[int, str]] = field(default_factory=dict)
    protocol_of: dict[int, str | None] = field(default_factory=dict)
    max_gen: int = 0
    prep_since: int | None = None
    comp_since: int | None = None

    def __post_init__(self):
        counter = itertools.count(1)
        self.coord = GroupCoordinator(
            GroupConfig(min_session_timeout_ms=1_000, initial_rebalance_delay_ms=DELAY,
                        new_member_join_timeout_ms=20_000),
            new_member_id=lambda cid: f"{cid}-{next(counter)}", observer=self.observe)
        self.clients = {name: Client(inst) for name, inst in INSTANCES.items()}

    @property
    def group(self):
        return self.coord.get(G)

    def observe(self, _g, prev: State, event: Event, nxt: State) -> None:
        if nxt is State.PREPARING_REBALANCE and (prev is not nxt or event is Event.JOIN_STALLED):
            self.prep_since = self.now
        if event is Event.JOIN_COMPLETED:
            self.comp_since = self.now
            for member_id in self.group.members:
                self.contact[member_id] = self.now

    # --- answers
    def deliver(self, tok: Tok, result, parked: bool = True) -> None:
        assert self.outstanding.pop(id(tok), None) is tok, f"{tok} answered twice or never parked"
        c = self.clients[tok.client]
        listening = c.join_tok is tok or c.sync_tok is tok
        if isinstance(result, JoinResult):
            self.on_join(c, tok, result, listening)
        else:
            self.on_sync(c, tok, result, listening, parked)

    def on_join(self, c: Client, tok: Tok, r: JoinResult, listening: bool) -> None:
        if r.outcome is Outcome.OK:
            self.contact[r.member_id] = self.now
            assert self.protocol_of.setdefault(r.generation_id, r.protocol_name) == r.protocol_name
            assert not r.members or r.leader_id == r.member_id
        if not listening:
            return
        c.join_tok = None
        if r.outcome is Outcome.OK:
            c.member_id, c.gen = r.member_id, r.generation_id
            c.leader, c.members = bool(r.members), r.members
        elif r.outcome is Outcome.MEMBER_ID_REQUIRED:
            c.member_id = r.member_id
        elif r.outcome in (Outcome.UNKNOWN_MEMBER, Outcome.FENCED_INSTANCE):
            c.reset()

    def on_sync(self, c: Client, tok: Tok, r: SyncResult, listening: bool, parked: bool) -> None:
        if r.outcome is Outcome.OK or parked:  # answering a parked sync is contact
            self.contact[tok.member_id] = self.now
        if r.outcome is Outcome.OK:
            if r.assignment:
                gen_s, owner, parts = r.assignment.decode().split("|")
                assert int(gen_s) == tok.gen and owner == tok.owner
                taken = self.owners.setdefault(tok.gen, {})
                for p in (int(x) for x in parts.split(",") if x):
                    assert taken.setdefault(p, owner) == owner, f"partition {p} twice in generation {tok.gen}"
        if not listening:
            return
        c.sync_tok = None
        if r.outcome is Outcome.OK:
            c.synced = tok.gen
        elif r.outcome in (Outcome.UNKNOWN_MEMBER, Outcome.FENCED_INSTANCE):
            c.reset()
        elif r.outcome in (Outcome.ILLEGAL_GENERATION, Outcome.REBALANCE_IN_PROGRESS):
            c.gen = -1  # rejoin with the same member id

    def take(self, reply, tok: Tok) -> None:
        self.outstanding[id(tok)] = tok
        for comp in reply.completions:
            self.deliver(comp.token, comp.result)
        if reply.result is not None:
            self.deliver(tok, reply.result, parked=False)

    # --- client actions
    def join(self, name: str, variant: int, require: bool) -> None:
        c = self.clients[name]
        tok = Tok(name, "join", c.member_id, c.gen)
        c.join_tok = tok
        reply = self.coord.join(G, now_ms=self.now, token=tok, member_id=c.member_id,
                                group_instance_id=c.instance, client_id=name, client_host="h",
                                session_timeout_ms=SESSION, rebalance_timeout_ms=REBALANCE,
                                protocol_type="consumer", protocols=VARIANTS[variant],
                                require_known_member_id=require)
        self.take(reply, tok)

    def sync(self, name: str) -> None:
        c = self.clients[name]
        assignments = {}
        if c.leader and c.members:
            owners = [m.group_instance_id or m.member_id for m in c.members]
            for i, m in enumerate(c.members):
                parts = [p for p in range(PARTITIONS) if p % len(c.members) == i]
                assignments[m.member_id] = f"{c.gen}|{owners[i]}|{','.join(map(str, parts))}".encode()
        tok = Tok(name, "sync", c.member_id, c.gen, c.instance or c.member_id)
        c.sync_tok = tok
        reply = self.coord.sync(G, now_ms=self.now, token=tok, member_id=c.member_id, generation_id=c.gen,
                                group_instance_id=c.instance, assignments=assignments)
        self.take(reply, tok)

    def heartbeat(self, name: str) -> None:
        c = self.clients[name]
        out = self.coord.heartbeat(G, now_ms=self.now, member_id=c.member_id, generation_id=c.gen,
                                   group_instance_id=c.instance)
        if out in (Outcome.OK, Outcome.REBALANCE_IN_PROGRESS):
            self.contact[c.member_id] = self.now
            if out is Outcome.REBALANCE_IN_PROGRESS:
                c.gen = -1  # rejoin with the same member id
        elif out in (Outcome.UNKNOWN_MEMBER, Outcome.FENCED_INSTANCE):
            c.reset()
        elif out is Outcome.ILLEGAL_GENERATION:
            c.gen = -1  # rejoin with the same member id

    def commit(self, name: str) -> None:
        c = self.clients[name]
        out = self.coord.validate_commit(G, now_ms=self.now, member_id=c.member_id, generation_id=c.gen,
                                         group_instance_id=c.instance)
        if out is Outcome.OK and c.gen >= 0:
            self.contact[c.member_id] = self.now

    def leave(self, name: str) -> None:
        c = self.clients[name]
        reply = self.coord.leave(G, now_ms=self.now, members=[(c.member_id, c.instance)])
        c.reset()
        for comp in reply.completions:
            self.deliver(comp.token, comp.result)

    def act(self, name: str) -> None:
        """What a well-behaved client does next."""
        c = self.clients[name]
        if c.join_tok is not None or c.sync_tok is not None:
            if c.gen >= 0:
                self.heartbeat(name)
        elif not c.member_id or c.gen < 0:
            self.join(name, PREFERRED[name], True)
        elif c.synced != c.gen:
            self.sync(name)
        else:
            self.heartbeat(name)

    def round(self, ms: int) -> None:
        """Every client acts once, then time passes."""
        for name in self.clients:
            self.act(name)
            self.check()
        self.wait(ms)

    def idle(self, ms: int) -> None:
        """Clients that think they are members only heartbeat (a slow consumer), then time passes."""
        for name, c in self.clients.items():
            if c.member_id and c.gen >= 0:
                self.heartbeat(name)
                self.check()
        self.wait(ms)

    def delete(self) -> None:
        if self.coord.delete(G, now_ms=self.now) is Outcome.OK:
            self.max_gen = 0  # a new group starts again from generation 0
            self.owners.clear()
            self.protocol_of.clear()

    def crash(self, name: str) -> None:
        self.clients[name].reset()

    def wait(self, ms: int) -> None:
        self.now += ms
        for comp in self.coord.tick(self.now):
            self.deliver(comp.token, comp.result)
        self.check_timers()

    # --- invariants
    def check(self) -> None:
        g = self.group
        if g is None:
            assert not self.outstanding
            return
        assert g.generation_id >= self.max_gen
        self.max_gen = g.generation_id
        held = {id(t) for m in g.members.values() for t in (m.join_token, m.sync_token) if t is not None}
        assert held == set(self.outstanding)
        assert (g.leader_id is None) == (not g.members)
        assert g.leader_id is None or g.leader_id in g.members
        assert set(g.static_members.values()) <= set(g.members)
        if g.state is State.PREPARING_REBALANCE and not g.in_initial_delay:
            assert not g.all_joined(), "everyone rejoined but the join phase did not complete"
        if g.state in (State.COMPLETING_REBALANCE, State.STABLE):
            assert g.protocol_name is not None and g.members

    def check_timers(self) -> None:
        g = self.group
        if g is None:
            return
        for m in g.members.values():
            if not m.parked:
                assert self.now < self.contact[m.member_id] + m.session_timeout_ms, (
                    f"{m.member_id} silent since {self.contact[m.member_id]}, still a member at {self.now}")
        if g.state is State.PREPARING_REBALANCE:
            assert self.now < self.prep_since + max(REBALANCE, DELAY)
        if g.state is State.COMPLETING_REBALANCE or (g.state is State.STABLE and g.pending_sync):
            assert self.now < self.comp_since + REBALANCE


clients = st.sampled_from(sorted(INSTANCES))
act = st.tuples(st.just("act"), clients)
rnd = st.tuples(st.just("round"), st.integers(0, 1_500))
ops = st.one_of(
    act, act, act, act, act, act, rnd, rnd, rnd, rnd, rnd, rnd,
    st.tuples(st.just("idle"), st.integers(0, 2_500)),
    st.tuples(st.just("delete")),
    st.tuples(st.just("wait"), st.integers(0, 1_000)),
    st.tuples(st.just("wait"), st.integers(0, 1_000)),
    st.tuples(st.just("join"), clients, st.integers(0, len(VARIANTS) - 1), st.booleans()),
    st.tuples(st.just("sync"), clients),
    st.tuples(st.just("heartbeat"), clients),
    st.tuples(st.just("commit"), clients),
    st.tuples(st.just("leave"), clients),
    st.tuples(st.just("crash"), clients),
    st.tuples(st.just("wait"), st.integers(0, 2 * REBALANCE)),
    st.tuples(st.just("wait"), st.integers(0, 1_000)),
)


def run(steps) -> Sim:
    sim = Sim()
    for op, *args in steps:
        getattr(sim, op)(*args)
        sim.check()
    return sim


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, min_size=10, max_size=150))
def test_random_sequences_keep_the_invariants(steps):
    run(steps)


def cooperative_round(sim: Sim) -> None:
    """Every live client does the right thing once: join if unjoined, sync, heartbeat."""
    for name, c in sim.clients.items():
        if c.join_tok is None and (c.gen < 0 or not c.member_id):
            sim.join(name, PREFERRED[name], True)
            sim.check()
    for name, c in sim.clients.items():
        if c.member_id and c.gen >= 0 and c.sync_tok is None:
            sim.sync(name)
            sim.check()
        if c.member_id and c.gen >= 0:
            sim.heartbeat(name)
            sim.check()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, max_size=40))
def test_well_behaved_clients_reach_stable_after_chaos(steps):
    """After any history, clients that follow the protocol end up Stable, all assigned, one generation."""
    sim = run(steps)
    for _ in range(60):  # 24 s: room for an orphaned leader's sync deadline, then a rebalance
        g = sim.group
        if (g is not None and g.state is State.STABLE and not g.pending_sync
                and {c.gen for c in sim.clients.values()} == {g.generation_id}
                and len(g.members) == len(sim.clients)):
            break
        cooperative_round(sim)
        sim.wait(400)
        sim.check()
        for name, c in sim.clients.items():
            g = sim.group
            if g is not None and g.state is State.PREPARING_REBALANCE and c.member_id and c.join_tok is None:
                sim.join(name, PREFERRED[name], True)  # a REBALANCE_IN_PROGRESS heartbeat means: rejoin
                sim.check()
    g = sim.group
    assert g.state is State.STABLE
    assert len(g.members) == len(sim.clients)
    gens = {c.gen for c in sim.clients.values()}
    assert gens == {g.generation_id}
    assert sorted(sim.owners[g.generation_id]) == list(range(PARTITIONS))
