"""Classic consumer groups under abuse against a real ``headwater serve``: a 1 MB member
metadata blob, session timeouts out of bounds, requests from strangers and stale generations,
commits to nowhere, a thousand groups described at once, members that vanish while parked.

Expected codes are Kafka's group coordinator's; a kafka-python client keeps producing and
consuming alongside. The server runs with ``group_initial_rebalance_delay_ms`` 0.
"""

from __future__ import annotations

import time

import pytest

from hw_server import ServerProcess, free_port
from kafka_wire import KafkaWire
from test_kafka_groups_wire import (
    COMMIT, DELETE_GROUPS, DESCRIBE, HEARTBEAT, LEAVE, SYNC, Member, assignment, commit_request, create_topic,
    describe, fetch_offsets_v1, heartbeat_request, req, sync_request, wait_members,
)
from test_kafka_wire import metadata_request
from test_robustness_kafka_wire import HealthyClient, alive, raw_frame, server_fds, tracebacks

UNKNOWN_TOPIC, METADATA_TOO_LARGE, ILLEGAL_GENERATION, INCONSISTENT_PROTOCOL = 3, 12, 22, 23
INVALID_GROUP_ID, UNKNOWN_MEMBER, INVALID_SESSION_TIMEOUT, REBALANCE_IN_PROGRESS = 24, 25, 26, 27
NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, MEMBER_ID_REQUIRED = 68, 69, 79
TOPIC = "robust-groups"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("headwater")
    s = ServerProcess(base / "data", free_port(), free_port(),
                      extra_env={"HEADWATER_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0"}).start()
    w = KafkaWire(s.kafka_address)
    create_topic(w, TOPIC, 2)
    w.close()
    yield s
    if s.proc is not None:
        rc = s.stop()
        assert rc == 0, f"server exited with {rc} on SIGTERM:\n{s.log()}"


@pytest.fixture(scope="module")
def healthy(server):
    c = HealthyClient(server)
    yield c
    c.close()


@pytest.fixture
def wire(server):
    w = KafkaWire(server.kafka_address, timeout=30)
    yield w
    w.close()


def stable_member(server, group: str, **kw) -> Member:
    m = Member(server, group, **kw)
    r = m.join()
    assert r.error_code == 0, r
    assert m.sync([(m.member_id, assignment({TOPIC: [0, 1]}))]).error_code == 0
    return m


@pytest.mark.parametrize("session_ms", [0, -1, 5999, 1_800_001, 2**31 - 1])
@pytest.mark.parametrize("version", [0, 5, 9])
def test_session_timeouts_outside_the_bounds(server, session_ms, version):
    m = Member(server, "robust-session", version=version, session_ms=session_ms)
    try:
        assert m.join().error_code == INVALID_SESSION_TIMEOUT
    finally:
        m.close()


def test_a_one_megabyte_member_metadata_blob(server, wire, healthy):
    blob = bytes(range(256)) * 4096
    m = stable_member(server, "robust-big", protocols=(("range", blob),))
    try:
        d = describe(wire, "robust-big")["robust-big"]
        assert d.group_state == "Stable" and [x.member_metadata for x in d.members] == [blob]
        assert m.heartbeat() == 0
    finally:
        m.close()
    healthy.check()


@pytest.mark.parametrize("kw,code", [
    ({"protocols": ()}, INCONSISTENT_PROTOCOL),
    ({"protocol_type": ""}, INCONSISTENT_PROTOCOL),
])
def test_joins_without_a_usable_protocol(server, kw, code):
    m = Member(server, "robust-proto")
    try:
        assert m.join(**kw).error_code == code
    finally:
        m.close()


def test_an_empty_group_id(server, wire):
    m = Member(server, "")
    try:
        assert m.join().error_code == INVALID_GROUP_ID
    finally:
        m.close()
    assert wire.call(HEARTBEAT, 4, heartbeat_request(4, "", "", -1)).error_code == INVALID_GROUP_ID


def test_strangers_and_stale_generations(server, wire):
    m = stable_member(server, "robust-strangers")
    try:
        g = m.generation
        for member, generation, code in (("nobody", g, UNKNOWN_MEMBER), ("", g, UNKNOWN_MEMBER),
                                         (m.member_id, g + 7, ILLEGAL_GENERATION), (m.member_id, -1, ILLEGAL_GENERATION)):
            assert wire.call(SYNC, 5, sync_request(5, "robust-strangers", member, generation)).error_code == code
            assert wire.call(HEARTBEAT, 4, heartbeat_request(4, "robust-strangers", member, generation)).error_code == code
        assert wire.call(SYNC, 5, sync_request(5, "robust-no-group", "x", 1)).error_code == UNKNOWN_MEMBER
        assert wire.call(HEARTBEAT, 4, heartbeat_request(4, "robust-no-group", "x", -1)).error_code == UNKNOWN_MEMBER
        assert m.heartbeat() == 0  # the real member is not disturbed
    finally:
        m.close()


@pytest.mark.parametrize("version", [0, 3, 5])
def test_leaving_members_that_do_not_exist(server, wire, version):
    m = stable_member(server, "robust-leave")
    try:
        for group in ("robust-leave", "robust-no-group"):
            if version < 3:
                r = wire.call(LEAVE, version, req(LEAVE, version, group_id=group, member_id="nobody"))
                assert r.error_code == UNKNOWN_MEMBER
            else:
                extra = {"reason": None} if version >= 5 else {}
                members = tuple(req(LEAVE, version, "MemberIdentity", member_id=x, group_instance_id=None, **extra)
                                for x in ("nobody", "", "nobody-2"))
                r = wire.call(LEAVE, version, req(LEAVE, version, group_id=group, members=members))
                assert r.error_code == 0 and [x.error_code for x in r.members] == [UNKNOWN_MEMBER] * 3
        assert m.heartbeat() == 0
    finally:
        m.close()
        wire.call(LEAVE, 3, req(LEAVE, 3, group_id="robust-leave", members=(
            req(LEAVE, 3, "MemberIdentity", member_id=m.member_id, group_instance_id=None),)))


@pytest.mark.parametrize("version", [2, 8, 9])
def test_offset_commits_to_nowhere_negative_and_oversized(server, wire, version):
    group = f"robust-commit-{version}"
    r = wire.call(COMMIT, version, commit_request(version, group, {
        "robust-no-such-topic": [(0, 5, "")],
        TOPIC: [(0, -5, ""), (1, 7, "x" * 10_000), (5, 1, ""), (-1, 1, "")],
    }))
    codes = {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}
    assert codes == {("robust-no-such-topic", 0): UNKNOWN_TOPIC, (TOPIC, 0): 0, (TOPIC, 1): METADATA_TOO_LARGE,
                     (TOPIC, 5): UNKNOWN_TOPIC, (TOPIC, -1): UNKNOWN_TOPIC}
    _, got = fetch_offsets_v1(wire, group, {TOPIC: [0, 1]})
    assert got[(TOPIC, 0)][0] == -1 and got[(TOPIC, 1)][0] == -1  # nothing stored


def test_describing_a_thousand_groups(server, wire):
    names = tuple(f"robust-g{i}" for i in range(1000))
    for version in (0, 5, 6):
        started = time.monotonic()
        extra = {"include_authorized_operations": False} if version >= 3 else {}
        r = wire.call(DESCRIBE, version, req(DESCRIBE, version, groups=names, **extra))
        assert time.monotonic() - started < 5
        assert [g.group_id for g in r.groups] == list(names)
        assert {g.group_state for g in r.groups} == {"Dead"}
        assert {g.error_code for g in r.groups} == ({GROUP_ID_NOT_FOUND} if version >= 6 else {0})


def test_deleting_a_group_with_members(server, wire):
    m = stable_member(server, "robust-delete")
    try:
        r = wire.call(DELETE_GROUPS, 2, req(DELETE_GROUPS, 2, groups_names=("robust-delete", "robust-never")))
        assert {x.group_id: x.error_code for x in r.results} == {"robust-delete": NON_EMPTY_GROUP,
                                                                  "robust-never": GROUP_ID_NOT_FOUND}
        assert m.heartbeat() == 0
    finally:
        m.close()


def test_members_that_vanish_while_parked_release_their_connections(server, healthy):
    leader = stable_member(server, "robust-parked", session_ms=6000, rebalance_ms=4000)
    baseline = server_fds(server)
    before = tracebacks(server)
    joiners = []
    try:
        for _ in range(30):
            j = Member(server, "robust-parked", session_ms=6000, rebalance_ms=4000)
            j.send_join()
            r = j.recv_join()
            assert r.error_code == MEMBER_ID_REQUIRED
            j.member_id = r.member_id
            j.send_join()  # parks: the leader has to rejoin first
            joiners.append(j)
        wait_members(server, "robust-parked", 31)
    finally:
        for j in joiners:
            j.close()
    time.sleep(1)
    assert server_fds(server) - baseline <= 3
    assert leader.heartbeat() == REBALANCE_IN_PROGRESS
    assert leader.join().error_code == 0  # completes once the vanished members time out of the join
    leader.close()
    assert tracebacks(server) == before
    healthy.check()


def test_a_parked_join_then_pipelined_requests_and_garbage(server):
    a = stable_member(server, "robust-pipe-group", session_ms=10000, rebalance_ms=10000)
    b = Member(server, "robust-pipe-group", session_ms=10000, rebalance_ms=10000)
    try:
        b.send_join()
        r = b.recv_join()
        assert r.error_code == MEMBER_ID_REQUIRED
        b.member_id = r.member_id
        b.send_join()  # parked until a rejoins
        time.sleep(0.3)
        frame, correlation = b.w.frame(3, 1, metadata_request(1, [TOPIC]))
        b.w.send_raw(frame + raw_frame(999, 0, b"\xff\xff"))
        time.sleep(0.3)
        assert a.heartbeat() == REBALANCE_IN_PROGRESS
        assert a.join().error_code == 0
        assert b.recv_join().error_code == 0  # the parked join is answered first,
        got, meta = b.w.read_response(3, 1)  # then the request held behind it,
        assert got == correlation and meta.topics[0].name == TOPIC
        assert b.w.closed_by_server(5)  # then the garbage closes the connection
    finally:
        a.close()
        b.close()


def test_the_server_is_still_whole(server, healthy):
    healthy.check()
    assert alive(server)
