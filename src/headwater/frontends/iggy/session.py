"""Iggy sessions: the login state of a connection, and the server's client table.

Rules (``binary-protocol/connection-lifecycle.mdx``, ``framing.mdx``; where the
docs are silent, the Iggy server's ``dispatch.rs`` and
``consensus/metadata_helpers.rs``):

- A connection starts ANONYMOUS. PING (code 1) is served there; a read
  (operation 2, NonReplicated) is answered with status Unauthenticated (40);
  a replicated operation (metadata 128..149, partition 160..162) has no session
  to belong to and gets an Eviction, reason NoSession (1); so does a replicated
  operation whose ``client`` id is not the one this connection registered.
- Register (operation 1, codes 40 and 45) authenticates. A refused login is an
  Eviction with the reason of the refusal: 9 InvalidCredentials, 10
  InvalidToken (unknown or expired), 11 UserInactive, 12 SessionError
  (``client`` id 0), 14 IncompatibleProtocol (with the accepted window), 15
  MalformedLogin (no decodable version prefix). The legacy login codes 38 and
  44 get reason 15 too.
- A successful Register mints a session epoch for the header's ``client`` id
  (u128), higher than any epoch minted before, so an older connection that
  registered the same client id is fenced: its next request gets an Eviction,
  reason SessionTooLow (7). A replicated request must carry the connection's
  epoch: an older one is fenced (7), any other value gets SessionError (12).
  Reads are sessionless in Iggy: only the fence applies to them.
- When the logged-in user is deleted or deactivated, the session dies: the
  next request gets an Eviction, reason NoSession (1).
- Logout (code 39, operation 3) returns the connection to ANONYMOUS; before
  login it is answered with status 40.
- A broken frame (``size`` under 256 or over the configured maximum: reason 6
  InvalidRequestBodySize; ``command`` byte not 5: reason 5
  InvalidRequestBody; ``operation`` 0, 64..127 or unknown: reason 4
  InvalidRequestOperation) ends the connection in any state.
- Metadata operations (128..149) carry a strictly increasing ``request``
  number per client id. A repeat of an applied request gets the cached reply
  (exactly-once, no second apply); an older number whose reply has left the
  cache, or a repeat whose ``request_checksum`` differs from the original's,
  gets status RequestAlreadyApplied (59).

The transition table below is data: :func:`step` looks it up, the connection
acts on the :class:`Outcome`, and the unit tests drive every (state, event)
pair. :func:`classify` turns a request header into its event; it is pure too.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import NamedTuple

from ...codec.iggy.codes import Command, EvictionReason, Operation


class State(enum.Enum):
    ANONYMOUS = "anonymous"
    AUTHENTICATED = "authenticated"
    CLOSED = "closed"


class Event(enum.Enum):
    PING = "ping"  # code 1, any session
    READ = "read"  # any other operation-2 request
    WRITE = "write"  # a replicated operation carrying this connection's session
    LOGOUT = "logout"  # operation 3
    LOGIN_OK = "login_ok"
    # login refusals, one per eviction reason
    LOGIN_BAD_CREDENTIALS = "login_bad_credentials"
    LOGIN_BAD_TOKEN = "login_bad_token"
    LOGIN_USER_INACTIVE = "login_user_inactive"
    LOGIN_NO_CLIENT_ID = "login_no_client_id"
    LOGIN_INCOMPATIBLE = "login_incompatible"
    LOGIN_MALFORMED = "login_malformed"
    LEGACY_LOGIN = "legacy_login"  # codes 38 / 44
    # session checks
    NO_SESSION = "no_session"  # a replicated request with no session on this connection
    FENCED = "fenced"  # a newer registration of the same client id exists
    BAD_SESSION = "bad_session"  # a replicated request with a session that was never ours
    USER_GONE = "user_gone"  # the session's user was deleted or deactivated
    # broken frames
    FRAME_SIZE = "frame_size"  # size < 256 or > max_frame_size
    FRAME_COMMAND = "frame_command"  # header command byte is not 5 (Request)
    FRAME_OPERATION = "frame_operation"  # operation 0, 64..127 or unknown
    STALE = "stale"  # nothing heard for longer than the heartbeat allowance


class Action(enum.Enum):
    SERVE = "serve"  # run the handler, reply
    DENY = "deny"  # reply status Unauthenticated (40), keep the connection
    EVICT = "evict"  # send an Eviction frame with ``reason`` and close


class Outcome(NamedTuple):
    action: Action
    next_state: State
    reason: EvictionReason | None = None


def _evict(reason: EvictionReason) -> Outcome:
    return Outcome(Action.EVICT, State.CLOSED, reason)


# Outcomes that do not depend on the state.
_ANY_STATE: dict[Event, Outcome] = {
    Event.LOGIN_OK: Outcome(Action.SERVE, State.AUTHENTICATED),
    Event.LOGIN_BAD_CREDENTIALS: _evict(EvictionReason.INVALID_CREDENTIALS),
    Event.LOGIN_BAD_TOKEN: _evict(EvictionReason.INVALID_TOKEN),
    Event.LOGIN_USER_INACTIVE: _evict(EvictionReason.USER_INACTIVE),
    Event.LOGIN_NO_CLIENT_ID: _evict(EvictionReason.SESSION_ERROR),
    Event.LOGIN_INCOMPATIBLE: _evict(EvictionReason.INCOMPATIBLE_PROTOCOL),
    Event.LOGIN_MALFORMED: _evict(EvictionReason.MALFORMED_LOGIN),
    Event.LEGACY_LOGIN: _evict(EvictionReason.MALFORMED_LOGIN),
    Event.NO_SESSION: _evict(EvictionReason.NO_SESSION),
    Event.FENCED: _evict(EvictionReason.SESSION_TOO_LOW),
    Event.BAD_SESSION: _evict(EvictionReason.SESSION_ERROR),
    Event.USER_GONE: _evict(EvictionReason.NO_SESSION),
    Event.FRAME_SIZE: _evict(EvictionReason.INVALID_REQUEST_BODY_SIZE),
    Event.FRAME_COMMAND: _evict(EvictionReason.INVALID_REQUEST_BODY),
    Event.FRAME_OPERATION: _evict(EvictionReason.INVALID_REQUEST_OPERATION),
    Event.STALE: _evict(EvictionReason.STALE_CLIENT),
}

TRANSITIONS: dict[tuple[State, Event], Outcome] = {
    (State.ANONYMOUS, Event.PING): Outcome(Action.SERVE, State.ANONYMOUS),
    (State.ANONYMOUS, Event.READ): Outcome(Action.DENY, State.ANONYMOUS),
    (State.ANONYMOUS, Event.WRITE): _evict(EvictionReason.NO_SESSION),
    (State.ANONYMOUS, Event.LOGOUT): Outcome(Action.DENY, State.ANONYMOUS),
    (State.AUTHENTICATED, Event.PING): Outcome(Action.SERVE, State.AUTHENTICATED),
    (State.AUTHENTICATED, Event.READ): Outcome(Action.SERVE, State.AUTHENTICATED),
    (State.AUTHENTICATED, Event.WRITE): Outcome(Action.SERVE, State.AUTHENTICATED),
    (State.AUTHENTICATED, Event.LOGOUT): Outcome(Action.SERVE, State.ANONYMOUS),
}
for _state in (State.ANONYMOUS, State.AUTHENTICATED):
    for _event, _outcome in _ANY_STATE.items():
        TRANSITIONS[(_state, _event)] = _outcome
for _event in Event:  # a closed connection answers nothing: whatever arrives ends it
    TRANSITIONS[(State.CLOSED, _event)] = _evict(EvictionReason.NO_SESSION)
del _state, _event, _outcome


def step(state: State, event: Event) -> Outcome:
    """The outcome of ``event`` in ``state`` (a table lookup)."""
    return TRANSITIONS[(state, event)]


_LEGACY_LOGIN_CODES = frozenset({int(Command.LOGIN_USER), int(Command.LOGIN_WITH_PERSONAL_ACCESS_TOKEN)})


def classify(
    state: State,
    operation: Operation,
    command_code: int,
    client: int,
    session: int,
    *,
    bound_client: int | None,
    bound_epoch: int | None,
    current_epoch: int | None,
    user_alive: bool = True,
) -> Event:
    """The event a (non-Register) request header is, for a connection in ``state``.

    ``bound_client``/``bound_epoch``: what this connection registered (None
    before login); ``current_epoch``: the client table's epoch for
    ``bound_client`` now (a later registration of the same client id raises
    it); ``user_alive``: the session's user still exists and is active.
    """
    if command_code in _LEGACY_LOGIN_CODES:
        return Event.LEGACY_LOGIN
    if operation is Operation.NON_REPLICATED and command_code == Command.PING:
        return Event.PING
    authenticated = state is State.AUTHENTICATED
    if authenticated:
        if current_epoch != bound_epoch:
            return Event.FENCED
        if not user_alive:
            return Event.USER_GONE
    if operation is Operation.LOGOUT:
        return Event.LOGOUT
    if operation is Operation.NON_REPLICATED:
        return Event.READ
    # a replicated operation: it must come from this connection's session
    if not authenticated or client != bound_client:
        return Event.NO_SESSION
    if session == bound_epoch:
        return Event.WRITE
    if 0 < session < bound_epoch:  # type: ignore[operator]
        return Event.FENCED
    return Event.BAD_SESSION


# --------------------------------------------------------------------------- client table


class Verdict(enum.Enum):
    NEW = "new"  # apply it
    CACHED = "cached"  # already applied: answer with the cached reply
    STALE = "stale"  # already applied, reply gone (or a different request reusing the number): 59


@dataclass
class ClientEntry:
    """What the server remembers per client id (u128) while its session lives."""

    epoch: int = 0
    user_id: int | None = None
    last_request: int = 0
    replies: "OrderedDict[int, tuple[int, int, bytes]]" = field(default_factory=OrderedDict)
    # request -> (request_checksum, status, body)


class ClientTable:
    """Client id -> session epoch and metadata reply cache (deduplication by (client, request))."""

    def __init__(self, cache_size: int = 64):
        self._clients: dict[int, ClientEntry] = {}
        self._cache_size = max(cache_size, 1)
        self._next_epoch = 1

    def __len__(self) -> int:
        return len(self._clients)

    def register(self, client: int, user_id: int) -> int:
        """Mint a new session epoch for ``client`` (fencing any older one); returns it."""
        entry = self._clients.setdefault(client, ClientEntry())
        entry.epoch = self._next_epoch
        self._next_epoch += 1
        entry.user_id = user_id
        entry.replies.clear()
        entry.last_request = 0
        return entry.epoch

    def epoch(self, client: int) -> int | None:
        e = self._clients.get(client)
        return e.epoch if e else None

    def forget(self, client: int, epoch: int) -> None:
        """Drop ``client``'s session if it is still the one with ``epoch`` (its connection closed)."""
        e = self._clients.get(client)
        if e is not None and e.epoch == epoch:
            del self._clients[client]

    def check_request(self, client: int, request: int, checksum: int = 0) -> tuple[Verdict, tuple[int, bytes] | None]:
        """For a metadata operation: ``(NEW, None)``, ``(CACHED, (status, body))`` or ``(STALE, None)``."""
        e = self._clients.get(client)
        if e is None or request > e.last_request:
            return Verdict.NEW, None
        cached = e.replies.get(request)
        if cached is None:
            return Verdict.STALE, None
        first_checksum, status, body = cached
        if checksum and first_checksum and checksum != first_checksum:
            return Verdict.STALE, None
        return Verdict.CACHED, (status, body)

    def remember(self, client: int, request: int, checksum: int, status: int, body: bytes) -> None:
        e = self._clients.get(client)
        if e is None:
            return
        e.last_request = max(e.last_request, request)
        e.replies[request] = (checksum, status, body)
        while len(e.replies) > self._cache_size:
            e.replies.popitem(last=False)
