"""Iggy sessions: the login state of a connection and the server's client table.

Rules (``binary-protocol/connection-lifecycle.mdx``, ``framing.mdx``):

- A connection starts ANONYMOUS. Only PING (code 1) is served there; the
  register handshake (codes 40, 45; operation 1) authenticates it. Any other
  command is answered with status Unauthenticated (40).
- The legacy login codes 38 and 44 are answered with an Eviction, reason
  MalformedLogin (15), and the connection is closed.
- A successful register mints a session epoch for the request header's
  ``client`` id (u128): higher than any epoch that client id had before, so a
  zombie connection still using an older epoch is fenced.
- Logout (code 39, operation 3) returns the connection to ANONYMOUS.
- Metadata operations (operation 128..159) carry a strictly increasing
  ``request`` number per client id. A repeat of an already applied request
  gets the cached reply (exactly-once); an older one whose reply has left the
  cache gets status RequestAlreadyApplied (59).

The transition table below is data; the connection consults it and tests
drive every (state, event) pair.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass, field


class State(enum.Enum):
    ANONYMOUS = "anonymous"
    AUTHENTICATED = "authenticated"
    CLOSED = "closed"


class Event(enum.Enum):
    PING = "ping"
    LOGIN_OK = "login_ok"
    LOGIN_FAILED = "login_failed"  # credentials refused: eviction, close
    LEGACY_LOGIN = "legacy_login"  # codes 38/44: eviction MalformedLogin, close
    LOGOUT = "logout"
    COMMAND = "command"  # any other command
    BAD_FRAME = "bad_frame"  # undecodable frame: close


class Action(enum.Enum):
    SERVE = "serve"  # run the handler, reply
    DENY = "deny"  # reply status Unauthenticated (40)
    EVICT = "evict"  # send an Eviction frame and close


TRANSITIONS: dict[tuple[State, Event], tuple[Action, State]] = {
    (State.ANONYMOUS, Event.PING): (Action.SERVE, State.ANONYMOUS),
    (State.ANONYMOUS, Event.LOGIN_OK): (Action.SERVE, State.AUTHENTICATED),
    (State.ANONYMOUS, Event.LOGIN_FAILED): (Action.EVICT, State.CLOSED),
    (State.ANONYMOUS, Event.LEGACY_LOGIN): (Action.EVICT, State.CLOSED),
    (State.ANONYMOUS, Event.LOGOUT): (Action.DENY, State.ANONYMOUS),
    (State.ANONYMOUS, Event.COMMAND): (Action.DENY, State.ANONYMOUS),
    (State.ANONYMOUS, Event.BAD_FRAME): (Action.EVICT, State.CLOSED),
    (State.AUTHENTICATED, Event.PING): (Action.SERVE, State.AUTHENTICATED),
    (State.AUTHENTICATED, Event.LOGIN_OK): (Action.SERVE, State.AUTHENTICATED),
    (State.AUTHENTICATED, Event.LOGIN_FAILED): (Action.EVICT, State.CLOSED),
    (State.AUTHENTICATED, Event.LEGACY_LOGIN): (Action.EVICT, State.CLOSED),
    (State.AUTHENTICATED, Event.LOGOUT): (Action.SERVE, State.ANONYMOUS),
    (State.AUTHENTICATED, Event.COMMAND): (Action.SERVE, State.AUTHENTICATED),
    (State.AUTHENTICATED, Event.BAD_FRAME): (Action.EVICT, State.CLOSED),
}
for _event in Event:
    TRANSITIONS[(State.CLOSED, _event)] = (Action.EVICT, State.CLOSED)


def step(state: State, event: Event) -> tuple[Action, State]:
    return TRANSITIONS[(state, event)]


@dataclass
class ClientEntry:
    """What the server remembers per client id (u128) across connections."""

    epoch: int = 0
    user_id: int | None = None
    last_request: int = 0
    replies: "OrderedDict[int, tuple[int, bytes]]" = field(default_factory=OrderedDict)  # request -> (status, body)


class ClientTable:
    """Client id -> epoch and metadata reply cache (deduplication by (client, request))."""

    def __init__(self, cache_size: int = 64):
        self._clients: dict[int, ClientEntry] = {}
        self._cache_size = cache_size
        self._next_epoch = 1

    def register(self, client: int, user_id: int) -> int:
        """Mint a new session epoch for ``client``; returns it."""
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
        e = self._clients.get(client)
        if e is not None and e.epoch == epoch:
            del self._clients[client]

    def check_request(self, client: int, request: int) -> tuple[str, tuple[int, bytes] | None]:
        """For a metadata operation: ``("new", None)``, ``("cached", reply)`` or ``("stale", None)``."""
        e = self._clients.get(client)
        if e is None or request > e.last_request:
            return "new", None
        cached = e.replies.get(request)
        return ("cached", cached) if cached is not None else ("stale", None)

    def remember(self, client: int, request: int, status: int, body: bytes) -> None:
        e = self._clients.get(client)
        if e is None:
            return
        e.last_request = max(e.last_request, request)
        e.replies[request] = (status, body)
        while len(e.replies) > self._cache_size:
            e.replies.popitem(last=False)
