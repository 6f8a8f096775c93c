"""Client-assigned consumer groups (Kafka's "classic" group protocol), as a pure state machine.

Members are clients that join with opaque protocol metadata; the coordinator picks a
protocol, names a leader, and hands the leader every member's metadata; the leader
computes the assignment itself and sends it back in its sync, and the coordinator
hands each member its opaque slice. Nothing here knows what the bytes mean.

No I/O, no asyncio, no clock: every call takes ``now_ms``, and a request that must
wait (a join during a rebalance, a follower's sync before the leader's) is *parked*
under a token the caller supplies (any object, compared by identity, never ``None``).
Each call returns a ``Reply``: ``result`` is the caller's answer, or ``None`` when it
was parked; ``completions`` lists ``(token, result)`` pairs for requests parked
earlier that must be answered now. ``tick(now_ms)`` fires timers (session expiry,
rebalance and sync deadlines) and returns completions too; ``next_deadline_ms()``
says when the next tick is due. Every parked token is answered exactly once
(a superseded or dropped request is answered with an error), so front-end futures
never leak.

States
------
- **Empty**: no members (perhaps pending member ids, committed offsets elsewhere).
- **PreparingRebalance**: a rebalance was started; members are asked to rejoin and
  their joins are parked. The join phase completes when every member (and every
  pending member id) has rejoined, or at the join deadline: ``rebalance timeout``
  (the largest of the members' rebalance timeouts) after the rebalance started.
  Dynamic members that did not rejoin by then are dropped; static members stay
  (they may rejoin later with their instance id). Coming out of Empty, the phase
  first waits ``initial_rebalance_delay_ms`` (one more delay each time new members
  arrived during the last one, in all at most the larger of that delay and the
  rebalance timeout) and ignores early completion, so a fleet of starting consumers
  lands in one generation.
- **CompletingRebalance**: the join phase is over: generation incremented, protocol
  chosen, parked joins answered (the leader gets everyone's metadata). Followers'
  syncs are parked until the leader's sync brings the assignment.
- **Stable**: the assignment was handed out; syncs are answered at once.
- **Dead**: deleted. A ``GroupCoordinator`` forgets dead groups; a held reference
  answers everything with ``COORDINATOR_UNAVAILABLE``.

Members that have not sent their sync ``rebalance timeout`` after the join phase
completed are dropped and the rest rebalance (``SYNC_EXPIRED``). A member that is
not parked and has not been heard from for its session timeout is removed at the
next ``tick`` at or past the deadline. Contact is any accepted join, sync, heartbeat
(also one answered REBALANCE_IN_PROGRESS) or member commit, and any answer to a
parked request (the session runs from when the member got its answer). A parked
member cannot heartbeat and is exempt, except a member added during the current
rebalance, bounded by ``new_member_join_timeout_ms``. A pending member id (handed
out with ``MEMBER_ID_REQUIRED``) lapses after its session timeout.

Transitions: ``TRANSITIONS`` maps ``(state, event) -> next state``. The events are
the group-level effects of requests and timers after validation; a request rejected
with an error fires no event and changes nothing. A pair missing from the table is
impossible by construction (``IllegalTransition`` flags a bug).

Events (E=Empty, P=PreparingRebalance, C=CompletingRebalance, S=Stable, D=Dead):

==============================  =====  =====  =====  =====  ==
event                           E      P      C      S      D
==============================  =====  =====  =====  =====  ==
MEMBER_PENDING                  E      P      C      S
PENDING_REMOVED                 E      P      C      S
MEMBER_ADDED                    P      P      P      P
MEMBER_REJOINED                        P      P      P
MEMBER_REJOINED_UNCHANGED                     C      S
STATIC_REPLACED                        P      P      S
STATIC_REPLACED_NEW_PROTOCOL                         P
HEARTBEAT                              P      C      S
MEMBER_SYNCED                                 C      S
LEADER_SYNCED                                 S
MEMBER_REMOVED                         P      P      P
JOIN_COMPLETED                         C
JOIN_COMPLETED_EMPTY                   E
JOIN_STALLED                           P
SYNC_EXPIRED                                  P      P
DELETED                         D
==============================  =====  =====  =====  =====  ==

- MEMBER_REJOINED: a known member's join that needs a rebalance: any join in P; in
  C or S one with changed protocols, or any join by the leader in S (how a leader
  asks for a rebalance after a metadata change the others cannot see).
- MEMBER_REJOINED_UNCHANGED: a follower rejoining with identical protocols in C/S is
  answered at once with the current generation (it lost the first answer).
- STATIC_REPLACED: a join with an empty member id and a known ``group_instance_id``
  (a restarted static member): the old member id is replaced by a fresh one, keeping
  its place, leadership and assignment; the old id's parked requests are answered
  ``FENCED_INSTANCE``. In S this does not rebalance when the protocol the group would
  pick is unchanged: the joiner is answered at once with the current generation and
  the *previous* leader id (so a restarted leader does not run an assignment the
  stable group would never hand out), unless the client supports skipping the
  assignment, in which case a restarted leader gets the member list and
  ``skip_assignment``. Otherwise STATIC_REPLACED_NEW_PROTOCOL rebalances.
- JOIN_STALLED: the join deadline passed, but every remaining member is a static
  member that has not rejoined: wait another rebalance timeout (their sessions run).
- Entering P from C answers parked syncs with ``REBALANCE_IN_PROGRESS``.

Requests, in the order checks are made (outcomes are ``Outcome`` members):

- join: Dead -> COORDINATOR_UNAVAILABLE; protocol type/protocols not acceptable ->
  INCONSISTENT_PROTOCOL (an empty group takes any non-empty type and protocol list;
  otherwise the type must match and one offered protocol must be supported by every
  member). Empty member id: GROUP_FULL if ``max_size`` members; a static instance is
  replaced or added; else with ``require_known_member_id`` (JoinGroup v4+) a fresh
  id is recorded as pending and returned with MEMBER_ID_REQUIRED; else added. Known
  id: a pending id is promoted (added); an instance id mapped to another member id
  -> FENCED_INSTANCE; unknown id -> UNKNOWN_MEMBER.
- sync: Dead; fenced; unknown member; generation mismatch -> ILLEGAL_GENERATION;
  protocol type or name given and different -> INCONSISTENT_PROTOCOL; P ->
  REBALANCE_IN_PROGRESS; C: parked (leader: fills members it left out with an empty
  assignment, ignores unknown ids, answers every parked sync); S: current assignment.
- heartbeat: Dead; fenced; unknown; generation mismatch; P -> REBALANCE_IN_PROGRESS
  (still counts as contact); C, S -> OK.
- leave (batch of (member id, instance id)): empty member id -> by instance id;
  a pending id -> dropped; fenced; member -> removed; else UNKNOWN_MEMBER. All
  removals of one batch, then at most one completion check.
- commit validation: Dead; generation < 0 on an Empty group -> OK (a "simple"
  consumer or an admin client); generation >= 0 or a member/instance id -> fenced,
  unknown, generation mismatch; a non-member in a non-empty group -> UNKNOWN_MEMBER;
  C -> REBALANCE_IN_PROGRESS; a valid member commit counts as contact.

Sources (behaviour, not code): Kafka's group coordinator for classic groups (KIP-345
static membership, KIP-394 MEMBER_ID_REQUIRED, KIP-814 skip_assignment, the
initial-rebalance delay and pending-sync expiry), and the JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit, DescribeGroups, ListGroups and DeleteGroups
message schemas. Deliberate differences: batched leaves check completion once;
superseded parked requests are answered instead of dropped; ``max_size`` counts all
members in every state; a departed leader's successor is the first member in join
order, and a protocol-vote tie goes to the leader's preference order.
"""

from __future__ import annotations

import enum
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterable, Mapping, TypeVar

__all__ = [
    "Completion",
    "Event",
    "GroupConfig",
    "GroupCoordinator",
    "GroupDescription",
    "GroupListing",
    "ClassicGroup",
    "Expired",
    "IllegalTransition",
    "JoinMember",
    "JoinResult",
    "LeaveResult",
    "LeftMember",
    "Member",
    "MemberDescription",
    "OffsetDeleteCheck",
    "Outcome",
    "Reply",
    "State",
    "SyncResult",
    "TRANSITIONS",
]


class State(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class Event(enum.Enum):
    MEMBER_PENDING = "member-pending"
    PENDING_REMOVED = "pending-removed"
    MEMBER_ADDED = "member-added"
    MEMBER_REJOINED = "member-rejoined"
    MEMBER_REJOINED_UNCHANGED = "member-rejoined-unchanged"
    STATIC_REPLACED = "static-replaced"
    STATIC_REPLACED_NEW_PROTOCOL = "static-replaced-new-protocol"
    HEARTBEAT = "heartbeat"
    MEMBER_SYNCED = "member-synced"
    LEADER_SYNCED = "leader-synced"
    MEMBER_REMOVED = "member-removed"
    JOIN_COMPLETED = "join-completed"
    JOIN_COMPLETED_EMPTY = "join-completed-empty"
    JOIN_STALLED = "join-stalled"
    SYNC_EXPIRED = "sync-expired"
    DELETED = "deleted"


_E = State.EMPTY
_P = State.PREPARING_REBALANCE
_C = State.COMPLETING_REBALANCE
_S = State.STABLE
_D = State.DEAD

TRANSITIONS: dict[tuple[State, Event], State] = {
    (_E, Event.MEMBER_PENDING): _E,
    (_P, Event.MEMBER_PENDING): _P,
    (_C, Event.MEMBER_PENDING): _C,
    (_S, Event.MEMBER_PENDING): _S,
    (_E, Event.PENDING_REMOVED): _E,
    (_P, Event.PENDING_REMOVED): _P,
    (_C, Event.PENDING_REMOVED): _C,
    (_S, Event.PENDING_REMOVED): _S,
    (_E, Event.MEMBER_ADDED): _P,
    (_P, Event.MEMBER_ADDED): _P,
    (_C, Event.MEMBER_ADDED): _P,
    (_S, Event.MEMBER_ADDED): _P,
    (_P, Event.MEMBER_REJOINED): _P,
    (_C, Event.MEMBER_REJOINED): _P,
    (_S, Event.MEMBER_REJOINED): _P,
    (_C, Event.MEMBER_REJOINED_UNCHANGED): _C,
    (_S, Event.MEMBER_REJOINED_UNCHANGED): _S,
    (_P, Event.STATIC_REPLACED): _P,
    (_C, Event.STATIC_REPLACED): _P,
    (_S, Event.STATIC_REPLACED): _S,
    (_S, Event.STATIC_REPLACED_NEW_PROTOCOL): _P,
    (_P, Event.HEARTBEAT): _P,
    (_C, Event.HEARTBEAT): _C,
    (_S, Event.HEARTBEAT): _S,
    (_C, Event.MEMBER_SYNCED): _C,
    (_S, Event.MEMBER_SYNCED): _S,
    (_C, Event.LEADER_SYNCED): _S,
    (_P, Event.MEMBER_REMOVED): _P,
    (_C, Event.MEMBER_REMOVED): _P,
    (_S, Event.MEMBER_REMOVED): _P,
    (_P, Event.JOIN_COMPLETED): _C,
    (_P, Event.JOIN_COMPLETED_EMPTY): _E,
    (_P, Event.JOIN_STALLED): _P,
    (_C, Event.SYNC_EXPIRED): _P,
    (_S, Event.SYNC_EXPIRED): _P,
    (_E, Event.DELETED): _D,
}


class IllegalTransition(AssertionError):
    """A (state, event) pair outside ``TRANSITIONS``: a bug in this module, never a client error."""

    def __init__(self, state: State, event: Event):
        super().__init__(f"event {event.name} is impossible in state {state.name}")
        self.state = state
        self.event = event


class Outcome(enum.Enum):
    """Protocol-neutral answers; the Kafka front-end maps each to an error code."""

    OK = "ok"
    MEMBER_ID_REQUIRED = "member-id-required"  # here is your member id: join again with it
    UNKNOWN_MEMBER = "unknown-member"
    ILLEGAL_GENERATION = "illegal-generation"
    REBALANCE_IN_PROGRESS = "rebalance-in-progress"
    INCONSISTENT_PROTOCOL = "inconsistent-protocol"
    FENCED_INSTANCE = "fenced-instance"  # another member id now owns this group_instance_id
    INVALID_SESSION_TIMEOUT = "invalid-session-timeout"
    INVALID_GROUP_ID = "invalid-group-id"
    GROUP_FULL = "group-full"
    GROUP_NOT_FOUND = "group-not-found"
    NON_EMPTY_GROUP = "non-empty-group"
    COORDINATOR_UNAVAILABLE = "coordinator-unavailable"  # the group died under the request


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Coordinator limits; defaults are Kafka's broker defaults."""

    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    new_member_join_timeout_ms: int = 300_000
    max_size: int | None = None


# --- results ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    outcome: Outcome
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[JoinMember, ...] = ()  # every member for the leader, () for the others
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    outcome: Outcome
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class LeftMember:
    member_id: str
    group_instance_id: str | None
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class LeaveResult:
    outcome: Outcome  # request-level; per-member answers in ``members``
    members: tuple[LeftMember, ...] = ()


@dataclass(frozen=True, slots=True)
class Completion:
    token: Any
    result: JoinResult | SyncResult


R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Reply(Generic[R]):
    """The caller's answer (``None`` = parked under its token) and answers owed to others."""

    result: R | None
    completions: tuple[Completion, ...] = ()

    @property
    def parked(self) -> bool:
        return self.result is None


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes  # for the selected protocol; b"" unless Stable
    assignment: bytes  # b"" unless Stable


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: State
    protocol_type: str  # "" when never set
    protocol_name: str  # "" unless Stable
    generation_id: int
    leader_id: str
    members: tuple[MemberDescription, ...]


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: State


@dataclass(frozen=True, slots=True)
class OffsetDeleteCheck:
    """What an offset deletion may touch.

    ``outcome`` GROUP_NOT_FOUND: nothing. OK with ``subscriptions is None``: the group
    is Empty, every partition may go. OK with a tuple: the group has members; the
    tuple holds each member's metadata for the protocol of the current generation
    (empty before the first generation completes), which the front-end decodes to
    refuse partitions of subscribed topics (or refuses everything when it cannot
    interpret ``protocol_type``).
    """

    outcome: Outcome
    protocol_type: str = ""
    subscriptions: tuple[bytes, ...] | None = None


Observer = Callable[[str, State, Event, State], None]


@dataclass(frozen=True, slots=True)
class Expired:
    """A member a group removed because a deadline passed, not because it asked (LeaveGroup) or
    was replaced (a static member's new id): what an ``on_expired`` callback receives.

    ``why``: ``"session"`` (a member not parked, not heard from for ``session_timeout_ms``:
    no join, sync, heartbeat or member commit; a client stuck or starved looks like this),
    ``"join"`` (a member added during the rebalance and not answered within
    ``new_member_join_timeout_ms``) or ``"rebalance"`` (the rebalance timeout passed without
    its rejoin, or without its SyncGroup after the join phase). ``state`` and ``generation``
    are the group's just before the removal; ``session_timeout_ms`` the member's.
    """

    group_id: str
    member_id: str
    client_id: str
    why: str
    session_timeout_ms: int
    state: State
    generation: int


OnExpired = Callable[[Expired], None]


# --- members ----------------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata) in preference order
    assignment: bytes = b""
    join_token: Any = None  # a parked join, or None
    sync_token: Any = None  # a parked sync, or None
    is_new: bool = False  # added during the current rebalance, not yet answered
    deadline_ms: int = 0  # session deadline; for a new member, its join deadline

    @property
    def parked(self) -> bool:
        return self.join_token is not None or self.sync_token is not None

    def metadata(self, protocol_name: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol_name:
                return meta
        return b""

    def names(self) -> set[str]:
        return {name for name, _ in self.protocols}

    def vote(self, candidates: set[str]) -> str:
        return next(name for name, _ in self.protocols if name in candidates)


def _default_member_id(client_id: str) -> str:
    return f"{client_id}-{uuid.uuid4()}"


def _protocols(protocols: Iterable[tuple[str, bytes]]) -> tuple[tuple[str, bytes], ...]:
    return tuple((str(name), bytes(meta)) for name, meta in protocols)


# --- one group --------------------------------------------------------------------------------


class ClassicGroup:
    """One classic group. Use through ``GroupCoordinator``, which owns creation and deletion."""

    def __init__(self, group_id: str, config: GroupConfig | None = None, *,
                 new_member_id: Callable[[str], str] = _default_member_id,
                 observer: Observer | None = None, on_expired: OnExpired | None = None):
        self.group_id = group_id
        self.config = config or GroupConfig()
        self.state = State.EMPTY
        self.state_since_ms: int | None = None  # when the state last changed (None: Empty since creation)
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}  # join order
        self.static_members: dict[str, str] = {}  # group_instance_id -> member_id
        self.pending: dict[str, int] = {}  # member ids handed out with MEMBER_ID_REQUIRED -> deadline
        self.pending_sync: set[str] = set()
        self.join_deadline_ms: int | None = None  # in PreparingRebalance
        self.sync_deadline_ms: int | None = None  # in CompletingRebalance / Stable
        self.initial_delay_remaining_ms: int | None = None  # not None during the initial delay
        self.new_member_added = False
        self.generation_metadata: tuple[bytes, ...] | None = None
        self._new_member_id = new_member_id
        self._observer = observer
        self._on_expired = on_expired
        self._out: list[Completion] = []

    # ------------------------------------------------------------------ queries
    @property
    def in_initial_delay(self) -> bool:
        return self.initial_delay_remaining_ms is not None

    def all_joined(self) -> bool:
        return not self.pending and all(m.join_token is not None for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def is_fenced(self, group_instance_id: str | None, member_id: str) -> bool:
        if group_instance_id is None:
            return False
        owner = self.static_members.get(group_instance_id)
        return owner is not None and owner != member_id

    def candidate_protocols(self) -> set[str]:
        sets = [m.names() for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Each member votes for its first protocol all support; most votes wins, ties: leader's order."""
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        leader = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        return next(name for name, _ in leader.protocols if votes.get(name) == best)

    def next_deadline_ms(self) -> int | None:
        deadlines = list(self.pending.values())
        deadlines += [m.deadline_ms for m in self.members.values() if m.is_new or not m.parked]
        if self.state is State.PREPARING_REBALANCE and self.join_deadline_ms is not None:
            deadlines.append(self.join_deadline_ms)
        if self.sync_deadline_ms is not None and self.pending_sync:
            deadlines.append(self.sync_deadline_ms)
        return min(deadlines, default=None)

    def describe(self) -> GroupDescription:
        stable = self.state is State.STABLE
        members = tuple(
            MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                              m.metadata(self.protocol_name) if stable else b"",
                              m.assignment if stable else b"")
            for m in self.members.values())
        return GroupDescription(self.group_id, self.state, self.protocol_type or "",
                                (self.protocol_name or "") if stable else "",
                                self.generation_id, self.leader_id or "", members)

    # ------------------------------------------------------------------ machinery
    def _fire(self, event: Event, now_ms: int) -> None:
        prev = self.state
        nxt = TRANSITIONS.get((prev, event))
        if nxt is None:
            raise IllegalTransition(prev, event)
        if nxt is not prev:
            self.state_since_ms = now_ms  # Kafka's currentStateTimestamp (offset expiry of Empty groups)
        self.state = nxt
        if self._observer is not None:
            self._observer(self.group_id, prev, event, nxt)
        if nxt is State.PREPARING_REBALANCE and prev is not State.PREPARING_REBALANCE:
            self._enter_preparing(prev, now_ms)

    def _enter_preparing(self, prev: State, now_ms: int) -> None:
        for m in self.members.values():
            if prev is State.COMPLETING_REBALANCE:
                m.assignment = b""  # never handed out
            if m.sync_token is not None:
                self._complete(m.sync_token, SyncResult(Outcome.REBALANCE_IN_PROGRESS))
                m.sync_token = None
                self._touch(m, now_ms)  # answered now: its session runs from here
        self.pending_sync.clear()
        self.sync_deadline_ms = None
        timeout = self.rebalance_timeout_ms()
        delay = self.config.initial_rebalance_delay_ms
        if prev is State.EMPTY and delay > 0:
            self.join_deadline_ms = now_ms + delay
            self.initial_delay_remaining_ms = max(timeout - delay, 0)
            self.new_member_added = False
        else:
            self.join_deadline_ms = now_ms + timeout
            self.initial_delay_remaining_ms = None

    def _complete(self, token: Any, result: JoinResult | SyncResult) -> None:
        self._out.append(Completion(token, result))

    def _reply(self, token: Any, result: Any = None) -> Reply:
        out, self._out = self._out, []
        if result is None and token is not None:
            for i, c in enumerate(out):
                if c.token is token:
                    result = c.result
                    del out[i]
                    break
        return Reply(result, tuple(out))

    def _touch(self, m: Member, now_ms: int) -> None:
        if not m.is_new:
            m.deadline_ms = now_ms + m.session_timeout_ms

    def _member_list(self) -> tuple[JoinMember, ...]:
        return tuple(JoinMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                     for m in self.members.values())

    def _generation_result(self, m: Member, *, leader_view: bool) -> JoinResult:
        return JoinResult(Outcome.OK, m.member_id, self.generation_id, self.protocol_type,
                          self.protocol_name, self.leader_id or "",
                          self._member_list() if leader_view else ())

    def _park_join(self, m: Member, token: Any) -> None:
        if m.join_token is not None:
            self._complete(m.join_token, JoinResult(Outcome.REBALANCE_IN_PROGRESS, m.member_id))
        m.join_token = token

    def _park_sync(self, m: Member, token: Any) -> None:
        if m.sync_token is not None:
            self._complete(m.sync_token, SyncResult(Outcome.REBALANCE_IN_PROGRESS))
        m.sync_token = token

    def _drop(self, m: Member, expired: str | None = None) -> None:
        """Remove a member, answering its parked requests; fires nothing. ``expired``: why a
        deadline removed it (see :class:`Expired`), reported to ``on_expired``."""
        if expired is not None and self._on_expired is not None:
            self._on_expired(Expired(self.group_id, m.member_id, m.client_id, expired, m.session_timeout_ms,
                                     self.state, self.generation_id))
        if m.join_token is not None:
            self._complete(m.join_token, JoinResult(Outcome.UNKNOWN_MEMBER, ""))
            m.join_token = None
        if m.sync_token is not None:
            self._complete(m.sync_token, SyncResult(Outcome.UNKNOWN_MEMBER))
            m.sync_token = None
        del self.members[m.member_id]
        if m.group_instance_id is not None and self.static_members.get(m.group_instance_id) == m.member_id:
            del self.static_members[m.group_instance_id]
        self.pending_sync.discard(m.member_id)
        if self.leader_id == m.member_id:
            self.leader_id = next(iter(self.members), None)

    def _remove(self, m: Member, now_ms: int, expired: str | None = None) -> None:
        self._drop(m, expired)
        self._fire(Event.MEMBER_REMOVED, now_ms)

    def _maybe_complete_join(self, now_ms: int) -> None:
        if self.state is State.PREPARING_REBALANCE and not self.in_initial_delay and self.all_joined():
            self._complete_join(now_ms)

    def _elect_joined_leader(self) -> bool:
        leader = self.members.get(self.leader_id or "")
        if leader is not None and leader.join_token is not None:
            return True
        for m in self.members.values():
            if m.join_token is not None:
                self.leader_id = m.member_id
                return True
        return False

    def _complete_join(self, now_ms: int) -> None:
        for m in list(self.members.values()):
            if m.join_token is None and m.group_instance_id is None:
                self._drop(m, "rebalance")
        if self.members and not self._elect_joined_leader():
            self._fire(Event.JOIN_STALLED, now_ms)
            self.join_deadline_ms = now_ms + max(self.rebalance_timeout_ms(), 1)
            return
        self.generation_id += 1
        self.join_deadline_ms = None
        self.initial_delay_remaining_ms = None
        self.new_member_added = False
        if not self.members:
            self.protocol_name = None
            self.leader_id = None
            self.generation_metadata = None
            self._fire(Event.JOIN_COMPLETED_EMPTY, now_ms)
            return
        self.protocol_name = self.select_protocol()
        self.generation_metadata = tuple(m.metadata(self.protocol_name) for m in self.members.values())
        self._fire(Event.JOIN_COMPLETED, now_ms)
        for m in self.members.values():
            if m.join_token is not None:
                token, m.join_token = m.join_token, None
                self._complete(token, self._generation_result(m, leader_view=m.member_id == self.leader_id))
            m.is_new = False
            m.deadline_ms = now_ms + m.session_timeout_ms
        self.pending_sync = set(self.members)
        self.sync_deadline_ms = now_ms + self.rebalance_timeout_ms()

    def _supports(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        candidates = self.candidate_protocols()
        return protocol_type == self.protocol_type and any(name in candidates for name, _ in protocols)

    # ------------------------------------------------------------------ JoinGroup
    def join(self, *, now_ms: int, token: Any, member_id: str, group_instance_id: str | None,
             client_id: str, client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
             protocol_type: str, protocols: Iterable[tuple[str, bytes]],
             require_known_member_id: bool = True, supports_skip_assignment: bool = False,
             ) -> Reply[JoinResult]:
        if token is None:
            raise ValueError("a join needs a token")
        protos = _protocols(protocols)
        if self.state is State.DEAD:
            return self._reply(token, JoinResult(Outcome.COORDINATOR_UNAVAILABLE, member_id))
        if not self._supports(protocol_type, protos):
            return self._reply(token, JoinResult(Outcome.INCONSISTENT_PROTOCOL, member_id))

        def fresh(mid: str) -> Member:
            return Member(mid, group_instance_id, client_id, client_host, session_timeout_ms,
                          rebalance_timeout_ms, protocol_type, protos)

        if not member_id:
            size = self.config.max_size
            replacing = group_instance_id is not None and group_instance_id in self.static_members
            if size is not None and len(self.members) >= size and not replacing:
                return self._reply(token, JoinResult(Outcome.GROUP_FULL, member_id))
            new_id = self._new_member_id(client_id)
            if replacing:
                return self._replace_static(now_ms, token, fresh(new_id), supports_skip_assignment)
            if group_instance_id is None and require_known_member_id:
                self.pending[new_id] = now_ms + session_timeout_ms
                self._fire(Event.MEMBER_PENDING, now_ms)
                return self._reply(token, JoinResult(Outcome.MEMBER_ID_REQUIRED, new_id))
            return self._add(now_ms, token, fresh(new_id))

        if member_id in self.pending:
            if group_instance_id is not None:  # static members never get a pending id
                return self._reply(token, JoinResult(Outcome.UNKNOWN_MEMBER, member_id))
            size = self.config.max_size
            if size is not None and len(self.members) >= size:
                del self.pending[member_id]
                self._fire(Event.PENDING_REMOVED, now_ms)
                self._maybe_complete_join(now_ms)
                return self._reply(token, JoinResult(Outcome.GROUP_FULL, member_id))
            del self.pending[member_id]
            return self._add(now_ms, token, fresh(member_id))
        if self.is_fenced(group_instance_id, member_id):
            return self._reply(token, JoinResult(Outcome.FENCED_INSTANCE, member_id))
        m = self.members.get(member_id)
        if m is None or (group_instance_id is not None and group_instance_id not in self.static_members):
            return self._reply(token, JoinResult(Outcome.UNKNOWN_MEMBER, member_id))

        unchanged = m.protocols == protos
        if self.state is State.COMPLETING_REBALANCE and unchanged:
            self._touch(m, now_ms)
            self._fire(Event.MEMBER_REJOINED_UNCHANGED, now_ms)
            return self._reply(token, self._generation_result(m, leader_view=member_id == self.leader_id))
        if self.state is State.STABLE and unchanged and member_id != self.leader_id:
            self._touch(m, now_ms)
            self._fire(Event.MEMBER_REJOINED_UNCHANGED, now_ms)
            return self._reply(token, self._generation_result(m, leader_view=False))
        m.protocols = protos
        m.session_timeout_ms = session_timeout_ms
        m.rebalance_timeout_ms = rebalance_timeout_ms
        self._park_join(m, token)
        self._fire(Event.MEMBER_REJOINED, now_ms)
        self._maybe_complete_join(now_ms)
        return self._reply(token)

    def _add(self, now_ms: int, token: Any, m: Member) -> Reply[JoinResult]:
        if not self.members:
            self.protocol_type = m.protocol_type
        m.is_new = True
        m.deadline_ms = now_ms + self.config.new_member_join_timeout_ms
        m.join_token = token
        self.members[m.member_id] = m
        if m.group_instance_id is not None:
            self.static_members[m.group_instance_id] = m.member_id
        if self.leader_id is None:
            self.leader_id = m.member_id
        if self.state is State.PREPARING_REBALANCE and self.in_initial_delay:
            self.new_member_added = True
        self._fire(Event.MEMBER_ADDED, now_ms)
        self._maybe_complete_join(now_ms)
        return self._reply(token)

    def _replace_static(self, now_ms: int, token: Any, new: Member,
                        supports_skip_assignment: bool) -> Reply[JoinResult]:
        instance = new.group_instance_id
        assert instance is not None
        old_id = self.static_members[instance]
        old = self.members[old_id]
        if old.join_token is not None:
            self._complete(old.join_token, JoinResult(Outcome.FENCED_INSTANCE, old_id))
        if old.sync_token is not None:
            self._complete(old.sync_token, SyncResult(Outcome.FENCED_INSTANCE))
        previous_leader = self.leader_id or ""
        new.assignment = old.assignment
        new.is_new = old.is_new
        new.deadline_ms = old.deadline_ms if old.is_new else now_ms + new.session_timeout_ms
        self.members = {(new.member_id if k == old_id else k): (new if k == old_id else v)
                        for k, v in self.members.items()}
        self.static_members[instance] = new.member_id
        if self.leader_id == old_id:
            self.leader_id = new.member_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new.member_id)

        if self.state is State.STABLE and self.select_protocol() == self.protocol_name:
            self._fire(Event.STATIC_REPLACED, now_ms)
            if new.member_id == self.leader_id and supports_skip_assignment:
                result = JoinResult(Outcome.OK, new.member_id, self.generation_id, self.protocol_type,
                                    self.protocol_name, new.member_id, self._member_list(),
                                    skip_assignment=True)
            else:
                result = JoinResult(Outcome.OK, new.member_id, self.generation_id, self.protocol_type,
                                    self.protocol_name, previous_leader, ())
            return self._reply(token, result)
        new.join_token = token
        if self.state is State.STABLE:
            self._fire(Event.STATIC_REPLACED_NEW_PROTOCOL, now_ms)
        else:
            self._fire(Event.STATIC_REPLACED, now_ms)
        self._maybe_complete_join(now_ms)
        return self._reply(token)

    # ------------------------------------------------------------------ SyncGroup
    def _check_member(self, member_id: str, group_instance_id: str | None,
                      generation_id: int) -> tuple[Outcome, Member | None]:
        if self.state is State.DEAD:
            return Outcome.COORDINATOR_UNAVAILABLE, None
        if self.is_fenced(group_instance_id, member_id):
            return Outcome.FENCED_INSTANCE, None
        m = self.members.get(member_id)
        if m is None:
            return Outcome.UNKNOWN_MEMBER, None
        if generation_id != self.generation_id:
            return Outcome.ILLEGAL_GENERATION, None
        return Outcome.OK, m

    def sync(self, *, now_ms: int, token: Any, member_id: str, generation_id: int,
             group_instance_id: str | None = None, protocol_type: str | None = None,
             protocol_name: str | None = None,
             assignments: Mapping[str, bytes] | Iterable[tuple[str, bytes]] = (),
             ) -> Reply[SyncResult]:
        if token is None:
            raise ValueError("a sync needs a token")
        outcome, m = self._check_member(member_id, group_instance_id, generation_id)
        if m is None:
            return self._reply(token, SyncResult(outcome))
        if (protocol_type is not None and protocol_type != self.protocol_type) or (
                protocol_name is not None and protocol_name != self.protocol_name):
            return self._reply(token, SyncResult(Outcome.INCONSISTENT_PROTOCOL))
        if self.state is State.PREPARING_REBALANCE:
            return self._reply(token, SyncResult(Outcome.REBALANCE_IN_PROGRESS))
        if self.state is State.STABLE:
            self._sync_done(m.member_id)
            self._touch(m, now_ms)
            self._fire(Event.MEMBER_SYNCED, now_ms)
            return self._reply(token, SyncResult(Outcome.OK, self.protocol_type, self.protocol_name,
                                                 m.assignment))
        if self.state is not State.COMPLETING_REBALANCE:  # Empty has no members
            return self._reply(token, SyncResult(Outcome.UNKNOWN_MEMBER))
        self._park_sync(m, token)
        self._sync_done(m.member_id)
        if m.member_id != self.leader_id:
            self._fire(Event.MEMBER_SYNCED, now_ms)
            return self._reply(token)
        given = dict(assignments.items() if isinstance(assignments, Mapping) else assignments)
        for x in self.members.values():
            x.assignment = bytes(given.get(x.member_id, b""))
        self._fire(Event.LEADER_SYNCED, now_ms)
        for x in self.members.values():
            if x.sync_token is not None:
                tok, x.sync_token = x.sync_token, None
                self._complete(tok, SyncResult(Outcome.OK, self.protocol_type, self.protocol_name,
                                               x.assignment))
                self._touch(x, now_ms)
        return self._reply(token)

    def _sync_done(self, member_id: str) -> None:
        self.pending_sync.discard(member_id)
        if not self.pending_sync:
            self.sync_deadline_ms = None

    # ------------------------------------------------------------------ Heartbeat
    def heartbeat(self, *, now_ms: int, member_id: str, generation_id: int,
                  group_instance_id: str | None = None) -> Outcome:
        outcome, m = self._check_member(member_id, group_instance_id, generation_id)
        if m is None:
            return outcome
        if self.state is State.EMPTY:  # unreachable: Empty has no members
            return Outcome.UNKNOWN_MEMBER
        self._touch(m, now_ms)
        self._fire(Event.HEARTBEAT, now_ms)
        if self.state is State.PREPARING_REBALANCE:
            return Outcome.REBALANCE_IN_PROGRESS
        return Outcome.OK

    # ------------------------------------------------------------------ LeaveGroup
    def leave(self, *, now_ms: int, members: Iterable[tuple[str, str | None]]) -> Reply[LeaveResult]:
        if self.state is State.DEAD:
            return self._reply(None, LeaveResult(Outcome.COORDINATOR_UNAVAILABLE))
        answers = []
        for member_id, instance in members:
            if not member_id:
                owner = self.static_members.get(instance) if instance is not None else None
                if owner is None:
                    outcome = Outcome.UNKNOWN_MEMBER
                else:
                    self._remove(self.members[owner], now_ms)
                    outcome = Outcome.OK
            elif member_id in self.pending:
                del self.pending[member_id]
                self._fire(Event.PENDING_REMOVED, now_ms)
                outcome = Outcome.OK
            elif self.is_fenced(instance, member_id):
                outcome = Outcome.FENCED_INSTANCE
            elif member_id in self.members:
                self._remove(self.members[member_id], now_ms)
                outcome = Outcome.OK
            else:
                outcome = Outcome.UNKNOWN_MEMBER
            answers.append(LeftMember(member_id, instance, outcome))
        self._maybe_complete_join(now_ms)
        return self._reply(None, LeaveResult(Outcome.OK, tuple(answers)))

    # ------------------------------------------------------------------ OffsetCommit
    def validate_commit(self, *, now_ms: int, member_id: str, generation_id: int,
                        group_instance_id: str | None = None) -> Outcome:
        if self.state is State.DEAD:
            return Outcome.COORDINATOR_UNAVAILABLE
        if generation_id < 0 and self.state is State.EMPTY:
            return Outcome.OK
        m = None
        if generation_id >= 0 or member_id or group_instance_id is not None:
            outcome, m = self._check_member(member_id, group_instance_id, generation_id)
            if m is None:
                return outcome
        elif self.state is not State.EMPTY:
            return Outcome.UNKNOWN_MEMBER
        if self.state is State.COMPLETING_REBALANCE:
            return Outcome.REBALANCE_IN_PROGRESS
        if m is not None:
            self._touch(m, now_ms)
        return Outcome.OK

    def offset_delete_check(self) -> OffsetDeleteCheck:
        if self.state is State.DEAD:
            return OffsetDeleteCheck(Outcome.GROUP_NOT_FOUND)
        if self.state is State.EMPTY:
            return OffsetDeleteCheck(Outcome.OK, self.protocol_type or "", None)
        return OffsetDeleteCheck(Outcome.OK, self.protocol_type or "", self.generation_metadata or ())

    # ------------------------------------------------------------------ timers
    def tick(self, now_ms: int) -> list[Completion]:
        if self.state is State.DEAD:
            return []
        for member_id, deadline in list(self.pending.items()):
            if now_ms >= deadline:
                del self.pending[member_id]
                self._fire(Event.PENDING_REMOVED, now_ms)
        for m in list(self.members.values()):
            if m.member_id not in self.members:
                continue
            if (m.is_new or not m.parked) and now_ms >= m.deadline_ms:
                self._remove(m, now_ms, "join" if m.is_new else "session")
        if (self.state in (State.COMPLETING_REBALANCE, State.STABLE) and self.sync_deadline_ms is not None
                and now_ms >= self.sync_deadline_ms):
            self.sync_deadline_ms = None
            if self.pending_sync:
                for member_id in list(self.pending_sync):
                    self._drop(self.members[member_id], "rebalance")
                self._fire(Event.SYNC_EXPIRED, now_ms)
        while (self.state is State.PREPARING_REBALANCE and self.join_deadline_ms is not None
               and now_ms >= self.join_deadline_ms):
            remaining = self.initial_delay_remaining_ms
            if remaining is not None:
                if self.new_member_added and remaining > 0:
                    step = min(self.config.initial_rebalance_delay_ms, remaining)
                    self.initial_delay_remaining_ms = remaining - step
                    self.new_member_added = False
                    self.join_deadline_ms += step
                    continue
                self.initial_delay_remaining_ms = None
            self._complete_join(now_ms)
        self._maybe_complete_join(now_ms)
        return list(self._reply(None).completions)

    def mark_dead(self, now_ms: int = 0) -> None:
        self._fire(Event.DELETED, now_ms)
        self.pending.clear()
        self.join_deadline_ms = self.sync_deadline_ms = None


# --- the coordinator --------------------------------------------------------------------------


class GroupCoordinator:
    """Classic groups by name: creates them on first join (or on a simple commit), deletes when Empty."""

    def __init__(self, config: GroupConfig | None = None, *,
                 new_member_id: Callable[[str], str] = _default_member_id,
                 observer: Observer | None = None, on_expired: OnExpired | None = None):
        """``observer``: called with (group id, state, event, next state) on every transition;
        ``on_expired``: with an :class:`Expired` for every member a deadline removes (in
        ``tick``, or a join phase completed without it)."""
        self.config = config or GroupConfig()
        self._new_member_id = new_member_id
        self._observer = observer
        self._on_expired = on_expired
        self._groups: dict[str, ClassicGroup] = {}

    # ------------------------------------------------------------------ registry
    def __contains__(self, group_id: object) -> bool:
        return group_id in self._groups

    def get(self, group_id: str) -> ClassicGroup | None:
        return self._groups.get(group_id)

    def names(self) -> list[str]:
        return list(self._groups)

    def _create(self, group_id: str) -> ClassicGroup:
        g = ClassicGroup(group_id, self.config, new_member_id=self._new_member_id, observer=self._observer,
                         on_expired=self._on_expired)
        self._groups[group_id] = g
        return g

    # ------------------------------------------------------------------ requests
    def join(self, group_id: str, *, now_ms: int, token: Any, member_id: str = "",
             group_instance_id: str | None = None, client_id: str = "", client_host: str = "",
             session_timeout_ms: int, rebalance_timeout_ms: int = -1, protocol_type: str,
             protocols: Iterable[tuple[str, bytes]], require_known_member_id: bool = True,
             supports_skip_assignment: bool = False) -> Reply[JoinResult]:
        """JoinGroup. ``rebalance_timeout_ms < 0`` (JoinGroup v0) means the session timeout.

        ``require_known_member_id``: JoinGroup v4+; ``supports_skip_assignment``: v9+.
        """
        if token is None:
            raise ValueError("a join needs a token")
        if not group_id:
            return Reply(JoinResult(Outcome.INVALID_GROUP_ID, member_id))
        cfg = self.config
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            return Reply(JoinResult(Outcome.INVALID_SESSION_TIMEOUT, member_id))
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        group = self._groups.get(group_id)
        created = group is None
        if group is None:
            if member_id:
                return Reply(JoinResult(Outcome.UNKNOWN_MEMBER, member_id))
            group = self._create(group_id)
        reply = group.join(now_ms=now_ms, token=token, member_id=member_id,
                           group_instance_id=group_instance_id, client_id=client_id,
                           client_host=client_host, session_timeout_ms=session_timeout_ms,
                           rebalance_timeout_ms=rebalance_timeout_ms, protocol_type=protocol_type,
                           protocols=protocols, require_known_member_id=require_known_member_id,
                           supports_skip_assignment=supports_skip_assignment)
        if created and group.state is State.EMPTY and not group.pending:
            del self._groups[group_id]  # the join failed: leave no trace
        return reply

    def sync(self, group_id: str, *, now_ms: int, token: Any, member_id: str, generation_id: int,
             group_instance_id: str | None = None, protocol_type: str | None = None,
             protocol_name: str | None = None,
             assignments: Mapping[str, bytes] | Iterable[tuple[str, bytes]] = ()) -> Reply[SyncResult]:
        if token is None:
            raise ValueError("a sync needs a token")
        if not group_id:
            return Reply(SyncResult(Outcome.INVALID_GROUP_ID))
        group = self._groups.get(group_id)
        if group is None:
            return Reply(SyncResult(Outcome.UNKNOWN_MEMBER))
        return group.sync(now_ms=now_ms, token=token, member_id=member_id, generation_id=generation_id,
                          group_instance_id=group_instance_id, protocol_type=protocol_type,
                          protocol_name=protocol_name, assignments=assignments)

    def heartbeat(self, group_id: str, *, now_ms: int, member_id: str, generation_id: int,
                  group_instance_id: str | None = None) -> Outcome:
        if not group_id:
            return Outcome.INVALID_GROUP_ID
        group = self._groups.get(group_id)
        if group is None:
            return Outcome.UNKNOWN_MEMBER
        return group.heartbeat(now_ms=now_ms, member_id=member_id, generation_id=generation_id,
                               group_instance_id=group_instance_id)

    def leave(self, group_id: str, *, now_ms: int,
              members: Iterable[tuple[str, str | None]]) -> Reply[LeaveResult]:
        """LeaveGroup: ``members`` are (member_id, group_instance_id); v0-2 send one with no instance."""
        members = list(members)
        if not group_id:
            return Reply(LeaveResult(Outcome.INVALID_GROUP_ID))
        group = self._groups.get(group_id)
        if group is None:
            return Reply(LeaveResult(Outcome.OK, tuple(LeftMember(mid, inst, Outcome.UNKNOWN_MEMBER)
                                                       for mid, inst in members)))
        return group.leave(now_ms=now_ms, members=members)

    def tick(self, now_ms: int) -> list[Completion]:
        out: list[Completion] = []
        for g in list(self._groups.values()):
            out.extend(g.tick(now_ms))
        return out

    def next_deadline_ms(self) -> int | None:
        return min((d for g in self._groups.values() if (d := g.next_deadline_ms()) is not None),
                   default=None)

    # ------------------------------------------------------------------ admin
    def describe(self, group_id: str) -> GroupDescription | None:
        g = self._groups.get(group_id)
        return g.describe() if g is not None else None

    def list_groups(self, states: Iterable[State] | None = None) -> list[GroupListing]:
        wanted = set(states) if states is not None else None
        return [GroupListing(g.group_id, g.protocol_type or "", g.state) for g in self._groups.values()
                if wanted is None or g.state in wanted]

    def delete(self, group_id: str, *, now_ms: int = 0) -> Outcome:
        """DeleteGroups for one group: only an Empty group goes (the caller then drops its offsets)."""
        g = self._groups.get(group_id)
        if g is None or g.state is State.DEAD:
            return Outcome.GROUP_NOT_FOUND
        if g.state is not State.EMPTY:
            return Outcome.NON_EMPTY_GROUP
        g.mark_dead(now_ms)
        del self._groups[group_id]
        return Outcome.OK

    # ------------------------------------------------------------------ offsets hooks
    def validate_commit(self, group_id: str, *, now_ms: int, member_id: str = "", generation_id: int = -1,
                        group_instance_id: str | None = None) -> Outcome:
        """May (group, member, generation) commit? A simple commit to an unknown group creates it Empty."""
        g = self._groups.get(group_id)
        if g is None:
            if generation_id >= 0:
                return Outcome.ILLEGAL_GENERATION
            g = self._create(group_id)
        return g.validate_commit(now_ms=now_ms, member_id=member_id, generation_id=generation_id,
                                 group_instance_id=group_instance_id)

    def offset_delete_check(self, group_id: str) -> OffsetDeleteCheck:
        g = self._groups.get(group_id)
        if g is None:
            return OffsetDeleteCheck(Outcome.GROUP_NOT_FOUND)
        return g.offset_delete_check()
