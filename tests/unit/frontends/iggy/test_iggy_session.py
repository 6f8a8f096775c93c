"""The Iggy session rules as data: every (state, event) pair, the request classifier, the client table."""

from __future__ import annotations

import pytest

from headwater.codec.iggy.codes import Command, EvictionReason, Operation
from headwater.frontends.iggy.session import (
    TRANSITIONS,
    Action,
    ClientTable,
    Event,
    State,
    Verdict,
    classify,
    step,
)

A, AUTH, C = State.ANONYMOUS, State.AUTHENTICATED, State.CLOSED
R = EvictionReason

# The rules of session.py's docstring, written out again by hand: what each event does in each
# live state. (action, next state, eviction reason)
SERVE_A = (Action.SERVE, A, None)
SERVE_AUTH = (Action.SERVE, AUTH, None)
DENY_A = (Action.DENY, A, None)


def evict(reason):
    return (Action.EVICT, C, reason)


EXPECTED = {
    A: {
        Event.PING: SERVE_A,
        Event.READ: DENY_A,
        Event.WRITE: evict(R.NO_SESSION),
        Event.LOGOUT: DENY_A,
        Event.LOGIN_OK: SERVE_AUTH,
    },
    AUTH: {
        Event.PING: SERVE_AUTH,
        Event.READ: SERVE_AUTH,
        Event.WRITE: SERVE_AUTH,
        Event.LOGOUT: SERVE_A,
        Event.LOGIN_OK: SERVE_AUTH,
    },
}
EVICTIONS = {
    Event.LOGIN_BAD_CREDENTIALS: R.INVALID_CREDENTIALS,
    Event.LOGIN_BAD_TOKEN: R.INVALID_TOKEN,
    Event.LOGIN_USER_INACTIVE: R.USER_INACTIVE,
    Event.LOGIN_NO_CLIENT_ID: R.SESSION_ERROR,
    Event.LOGIN_INCOMPATIBLE: R.INCOMPATIBLE_PROTOCOL,
    Event.LOGIN_MALFORMED: R.MALFORMED_LOGIN,
    Event.LEGACY_LOGIN: R.MALFORMED_LOGIN,
    Event.NO_SESSION: R.NO_SESSION,
    Event.FENCED: R.SESSION_TOO_LOW,
    Event.BAD_SESSION: R.SESSION_ERROR,
    Event.USER_GONE: R.NO_SESSION,
    Event.FRAME_SIZE: R.INVALID_REQUEST_BODY_SIZE,
    Event.FRAME_COMMAND: R.INVALID_REQUEST_BODY,
    Event.FRAME_OPERATION: R.INVALID_REQUEST_OPERATION,
    Event.STALE: R.STALE_CLIENT,
}
for _state in (A, AUTH):
    for _event, _reason in EVICTIONS.items():
        EXPECTED[_state][_event] = evict(_reason)


def test_the_table_covers_every_pair_and_nothing_else():
    assert set(TRANSITIONS) == {(s, e) for s in State for e in Event}
    for state in (A, AUTH):
        assert set(EXPECTED[state]) == set(Event), f"the test's own table misses events in {state}"


@pytest.mark.parametrize("state", [A, AUTH])
@pytest.mark.parametrize("event", list(Event))
def test_every_live_pair(state, event):
    outcome = step(state, event)
    assert (outcome.action, outcome.next_state, outcome.reason) == EXPECTED[state][event]


@pytest.mark.parametrize("event", list(Event))
def test_a_closed_connection_stays_closed(event):
    outcome = step(C, event)
    assert outcome.action is Action.EVICT and outcome.next_state is C and outcome.reason is not None


def test_every_eviction_carries_a_reason_and_only_evictions_do():
    for outcome in TRANSITIONS.values():
        assert (outcome.action is Action.EVICT) == (outcome.reason is not None)
        assert (outcome.action is Action.EVICT) == (outcome.next_state is C)


# --------------------------------------------------------------------------- classify

NR, META, PART = Operation.NON_REPLICATED, Operation.CREATE_STREAM, Operation.SEND_MESSAGES


def cls(state, operation, code, *, client=7, session=3, bound_client=7, bound_epoch=3, current_epoch=3,
        user_alive=True):
    if state is A:
        bound_client = bound_epoch = current_epoch = None
    return classify(state, operation, code, client, session, bound_client=bound_client,
                    bound_epoch=bound_epoch, current_epoch=current_epoch, user_alive=user_alive)


@pytest.mark.parametrize("state", [A, AUTH])
def test_ping_is_always_a_ping(state):
    assert cls(state, NR, int(Command.PING), session=0) is Event.PING
    assert cls(state, NR, int(Command.PING), session=99, client=1) is Event.PING


@pytest.mark.parametrize("state", [A, AUTH])
@pytest.mark.parametrize("code", [Command.LOGIN_USER, Command.LOGIN_WITH_PERSONAL_ACCESS_TOKEN])
def test_legacy_logins(state, code):
    assert cls(state, NR, int(code)) is Event.LEGACY_LOGIN


def test_anonymous_reads_writes_and_logout():
    assert cls(A, NR, int(Command.GET_STREAMS), session=0) is Event.READ
    assert cls(A, META, int(Command.CREATE_STREAM), session=0) is Event.NO_SESSION
    assert cls(A, PART, int(Command.SEND_MESSAGES), session=5) is Event.NO_SESSION
    assert cls(A, Operation.LOGOUT, int(Command.LOGOUT_USER)) is Event.LOGOUT


def test_authenticated_requests():
    assert cls(AUTH, NR, int(Command.GET_STREAMS)) is Event.READ
    assert cls(AUTH, NR, int(Command.GET_STREAMS), session=0, client=99) is Event.READ  # reads are sessionless
    assert cls(AUTH, META, int(Command.CREATE_STREAM)) is Event.WRITE
    assert cls(AUTH, PART, int(Command.SEND_MESSAGES)) is Event.WRITE
    assert cls(AUTH, Operation.LOGOUT, int(Command.LOGOUT_USER)) is Event.LOGOUT


def test_session_checks_on_writes():
    assert cls(AUTH, META, int(Command.CREATE_STREAM), client=8) is Event.NO_SESSION
    assert cls(AUTH, META, int(Command.CREATE_STREAM), session=2) is Event.FENCED
    assert cls(AUTH, META, int(Command.CREATE_STREAM), session=4) is Event.BAD_SESSION
    assert cls(AUTH, META, int(Command.CREATE_STREAM), session=0) is Event.BAD_SESSION


def test_a_superseded_connection_is_fenced_for_everything_but_ping():
    for op, code in ((NR, Command.GET_STREAMS), (META, Command.CREATE_STREAM), (Operation.LOGOUT, Command.LOGOUT_USER)):
        assert cls(AUTH, op, int(code), current_epoch=9) is Event.FENCED
        assert cls(AUTH, op, int(code), current_epoch=None) is Event.FENCED
    assert cls(AUTH, NR, int(Command.PING), current_epoch=9) is Event.PING


def test_a_gone_user_ends_the_session():
    assert cls(AUTH, NR, int(Command.GET_STREAMS), user_alive=False) is Event.USER_GONE
    assert cls(AUTH, META, int(Command.CREATE_STREAM), user_alive=False) is Event.USER_GONE


# --------------------------------------------------------------------------- client table


def test_register_mints_increasing_epochs_and_fences_older_ones():
    t = ClientTable()
    e1 = t.register(1, 0)
    e2 = t.register(2, 0)
    e3 = t.register(1, 5)
    assert e1 < e2 < e3
    assert t.epoch(1) == e3 and t.epoch(2) == e2
    t.forget(1, e1)  # a stale forget does not remove the newer session
    assert t.epoch(1) == e3
    t.forget(1, e3)
    assert t.epoch(1) is None and len(t) == 1


def test_deduplication_by_client_and_request():
    t = ClientTable(cache_size=2)
    t.register(1, 0)
    assert t.check_request(1, 1, 111) == (Verdict.NEW, None)
    t.remember(1, 1, 111, 0, b"first")
    assert t.check_request(1, 1, 111) == (Verdict.CACHED, (0, b"first"))
    assert t.check_request(1, 1, 0) == (Verdict.CACHED, (0, b"first"))  # an unstamped retry
    assert t.check_request(1, 1, 222) == (Verdict.STALE, None)  # the number reused for other arguments
    assert t.check_request(1, 2, 0) == (Verdict.NEW, None)
    t.remember(1, 5, 0, 1009, b"")
    assert t.check_request(1, 3, 0) == (Verdict.STALE, None)  # below the watermark, never seen
    assert t.check_request(1, 5, 0) == (Verdict.CACHED, (1009, b""))
    t.remember(1, 6, 0, 0, b"x")
    assert t.check_request(1, 1, 111) == (Verdict.STALE, None)  # aged out of the cache
    assert t.check_request(2, 1, 0) == (Verdict.NEW, None)  # another client's numbers are its own


def test_a_new_registration_resets_the_request_watermark():
    t = ClientTable()
    t.register(1, 0)
    t.remember(1, 10, 0, 0, b"")
    t.register(1, 0)
    assert t.check_request(1, 1, 0) == (Verdict.NEW, None)
