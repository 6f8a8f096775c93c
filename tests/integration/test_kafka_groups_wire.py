"""Kafka consumer groups byte by byte against a real ``headwater serve``: FindCoordinator,
JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, DescribeGroups,
ListGroups, DeleteGroups and OffsetDelete, old and new versions.

Requests are kio entities (``kafka_wire.KafkaWire``). A request the coordinator parks
(a join during a rebalance, a follower's sync) is sent with ``send`` and its answer read
later with ``recv``, so several members are driven from one thread. The server's initial
rebalance delay is 0 here: a group's first join phase completes as soon as everyone
known has joined.
"""

from __future__ import annotations

import datetime
import struct
import time

import pytest
from kio.static.constants import EntityType

from hw_server import ServerProcess, free_port
from kafka_wire import KafkaWire, main_class, message_classes

COMMIT, OFFSET_FETCH, FIND, JOIN, HEARTBEAT, LEAVE, SYNC, DESCRIBE, LIST = 8, 9, 10, 11, 12, 13, 14, 15, 16
API_VERSIONS, CREATE_TOPICS, DELETE_GROUPS, OFFSET_DELETE = 18, 19, 42, 47

NONE, UNKNOWN_TOPIC, METADATA_TOO_LARGE, COORDINATOR_NOT_AVAILABLE = 0, 3, 12, 15
ILLEGAL_GENERATION, INCONSISTENT_PROTOCOL, INVALID_GROUP_ID, UNKNOWN_MEMBER = 22, 23, 24, 25
INVALID_SESSION_TIMEOUT, REBALANCE_IN_PROGRESS = 26, 27
NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, MEMBER_ID_REQUIRED, FENCED_INSTANCE, SUBSCRIBED = 68, 69, 79, 82, 86

SESSION_MS = 6000
ENV = {"HEADWATER_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0"}


def start_server(tmp_path_factory) -> ServerProcess:
    base = tmp_path_factory.mktemp("headwater")
    return ServerProcess(base / "data", free_port(), free_port(), extra_env=dict(ENV)).start()


@pytest.fixture(scope="module")
def gserver(tmp_path_factory):
    s = start_server(tmp_path_factory)
    yield s
    if s.proc is not None:
        rc = s.stop()
        assert rc == 0, f"server exited with {rc} on SIGTERM:\n{s.log()}"


# --------------------------------------------------------------------------- request builders


def req(api_key: int, version: int, cls_name: str | None = None, **fields):
    mod, _ = message_classes(api_key, version)
    cls = getattr(mod, cls_name) if cls_name else main_class(mod, EntityType.request)
    return cls(**fields)


def ms(n: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=n)


def subscription(*topics: str, user_data: bytes = b"") -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", len(user_data)) + user_data


def assignment(parts: dict[str, list[int]]) -> bytes:
    """ConsumerProtocolAssignment v0: version, [topic, [partition]], user data."""
    out = struct.pack(">hi", 0, len(parts))
    for t, ps in parts.items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(ps))
        out += b"".join(struct.pack(">i", p) for p in ps)
    return out + struct.pack(">i", 0)


def join_request(version: int, group: str, member_id: str = "", *, protocols=(("range", b"m"),),
                 instance: str | None = None, session_ms: int = SESSION_MS, rebalance_ms: int = 10_000,
                 protocol_type: str = "consumer"):
    protos = tuple(req(JOIN, version, "JoinGroupRequestProtocol", name=n, metadata=m) for n, m in protocols)
    fields = dict(group_id=group, session_timeout=ms(session_ms), member_id=member_id,
                  protocol_type=protocol_type, protocols=protos)
    if version >= 1:
        fields["rebalance_timeout"] = ms(rebalance_ms)
    if version >= 5:
        fields["group_instance_id"] = instance
    if version >= 8:
        fields["reason"] = None
    return req(JOIN, version, **fields)


def sync_request(version: int, group: str, member_id: str, generation: int, assignments=(), *,
                 instance: str | None = None, protocol_name: str | None = None):
    items = tuple(req(SYNC, version, "SyncGroupRequestAssignment", member_id=m, assignment=a) for m, a in assignments)
    fields = dict(group_id=group, generation_id=generation, member_id=member_id, assignments=items)
    if version >= 3:
        fields["group_instance_id"] = instance
    if version >= 5:
        fields.update(protocol_type="consumer" if protocol_name else None, protocol_name=protocol_name)
    return req(SYNC, version, **fields)


def heartbeat_request(version: int, group: str, member_id: str, generation: int, instance: str | None = None):
    fields = dict(group_id=group, generation_id=generation, member_id=member_id)
    if version >= 3:
        fields["group_instance_id"] = instance
    return req(HEARTBEAT, version, **fields)


def commit_request(version: int, group: str, offsets, *, generation: int = -1, member_id: str = ""):
    """``offsets``: {topic: [(partition, offset, metadata[, leader_epoch])]}."""
    topics = []
    for name, parts in offsets.items():
        ps = []
        for p, o, meta, *epoch in parts:
            f = dict(partition_index=p, committed_offset=o, committed_metadata=meta)
            if version >= 6:
                f["committed_leader_epoch"] = epoch[0] if epoch else -1
            ps.append(req(COMMIT, version, "OffsetCommitRequestPartition", **f))
        topics.append(req(COMMIT, version, "OffsetCommitRequestTopic", name=name, partitions=tuple(ps)))
    fields = dict(group_id=group, generation_id_or_member_epoch=generation, member_id=member_id, topics=tuple(topics))
    if 2 <= version <= 4:
        fields["retention_time"] = ms(-1)
    if version >= 7:
        fields["group_instance_id"] = None
    return req(COMMIT, version, **fields)


def fetch_offsets_v1(w: KafkaWire, group: str, wanted: dict[str, list[int]] | None, version: int = 1):
    topics = None if wanted is None else tuple(
        req(OFFSET_FETCH, version, "OffsetFetchRequestTopic", name=n, partition_indexes=tuple(ps))
        for n, ps in wanted.items())
    fields = dict(group_id=group, topics=topics)
    if version >= 7:
        fields["require_stable"] = False
    r = w.call(OFFSET_FETCH, version, req(OFFSET_FETCH, version, **fields))
    return r, {(t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code) for t in r.topics
               for p in t.partitions}


def create_topic(w: KafkaWire, name: str, partitions: int) -> None:
    v = 7
    t = req(CREATE_TOPICS, v, "CreatableTopic", name=name, num_partitions=partitions, replication_factor=1,
            assignments=(), configs=())
    r = w.call(CREATE_TOPICS, v, req(CREATE_TOPICS, v, topics=(t,), timeout=ms(5000), validate_only=False))
    assert r.topics[0].error_code in (0, 36)


def describe(w: KafkaWire, *groups: str, version: int = 5):
    r = w.call(DESCRIBE, version, req(DESCRIBE, version, groups=groups, include_authorized_operations=False))
    return {g.group_id: g for g in r.groups}


class Member:
    """A raw group member on its own connection."""

    def __init__(self, server, group: str, version: int = 7, **join_kw):
        self.w = KafkaWire(server.kafka_address, timeout=30)
        self.group = group
        self.version = version
        self.join_kw = join_kw
        self.member_id = ""
        self.generation = -1
        self._pending: list[tuple[int, int, int]] = []

    def send(self, api_key: int, version: int, request) -> None:
        frame, correlation = self.w.frame(api_key, version, request)
        self.w.send_raw(frame)
        self._pending.append((api_key, version, correlation))

    def recv(self):
        api_key, version, correlation = self._pending.pop(0)
        got, response = self.w.read_response(api_key, version)
        assert got == correlation
        return response

    def send_join(self, **kw) -> None:
        args = {**self.join_kw, **kw}
        self.send(JOIN, self.version, join_request(self.version, self.group, self.member_id, **args))

    def recv_join(self):
        r = self.recv()
        if r.error_code.value == 0:
            self.member_id, self.generation = r.member_id, r.generation_id
        return r

    def join(self, **kw):
        """Join, answering MEMBER_ID_REQUIRED once; returns the JoinGroup response."""
        self.send_join(**kw)
        r = self.recv_join()
        if r.error_code.value == MEMBER_ID_REQUIRED:
            self.member_id = r.member_id
            self.send_join(**kw)
            r = self.recv_join()
        return r

    def sync(self, assignments=(), version: int = 5, **kw):
        return self.w.call(SYNC, version, sync_request(version, self.group, self.member_id, self.generation,
                                                        assignments, **kw))

    def heartbeat(self, version: int = 4, generation: int | None = None) -> int:
        g = self.generation if generation is None else generation
        r = self.w.call(HEARTBEAT, version, heartbeat_request(version, self.group, self.member_id, g,
                                                               self.join_kw.get("instance")))
        return r.error_code.value

    def close(self) -> None:
        self.w.close()


def wait_members(server, group: str, n: int) -> None:
    """Wait until the coordinator counts ``n`` members: the joins sent (and parked) were handled."""
    w = KafkaWire(server.kafka_address)
    try:
        d = wait_for(lambda: describe(w, group)[group], lambda d: len(d.members) == n, step_s=0.05)
        assert len(d.members) == n, d
    finally:
        w.close()


def wait_for(fn, ok, timeout_s: float = 30.0, step_s: float = 0.5):
    """Call ``fn`` until ``ok(value)``, at most ``timeout_s``; returns the last value."""
    deadline = time.monotonic() + timeout_s
    value = fn()
    while not ok(value) and time.monotonic() < deadline:
        time.sleep(step_s)
        value = fn()
    return value


# --------------------------------------------------------------------------- discovery


def test_api_versions_advertise_the_group_apis(gserver):
    w = KafkaWire(gserver.kafka_address)
    try:
        r = w.call(API_VERSIONS, 3, req(API_VERSIONS, 3, client_software_name="t", client_software_version="1"))
    finally:
        w.close()
    ranges = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    assert ranges[FIND] == (0, 6) and ranges[JOIN] == (0, 9) and ranges[SYNC] == (0, 5)
    assert ranges[HEARTBEAT] == (0, 4) and ranges[LEAVE] == (0, 5)
    assert ranges[COMMIT] == (2, 9) and ranges[OFFSET_FETCH] == (1, 9)
    assert ranges[DESCRIBE] == (0, 6) and ranges[LIST] == (0, 5)
    assert ranges[DELETE_GROUPS] == (0, 2) and ranges[OFFSET_DELETE] == (0, 0)
    # librdkafka < 2.11.1 turns its group consumer on only when FindCoordinator 0, OffsetCommit 1-2,
    # OffsetFetch 1 and JoinGroup/SyncGroup/Heartbeat/LeaveGroup 0 overlap the advertised ranges
    assert ranges[COMMIT][0] <= 2 and ranges[OFFSET_FETCH][0] <= 1
    assert all(ranges[k][0] == 0 for k in (FIND, JOIN, SYNC, HEARTBEAT, LEAVE))
    assert 68 not in ranges  # ConsumerGroupHeartbeat (KIP-848) is not served


def test_find_coordinator_every_version(gserver):
    host, port = gserver.kafka_address.rsplit(":", 1)
    w = KafkaWire(gserver.kafka_address)
    try:
        r0 = w.call(FIND, 0, req(FIND, 0, key="g"))
        assert (r0.error_code.value, r0.node_id, r0.host, r0.port) == (0, 1, host, int(port))
        r3 = w.call(FIND, 3, req(FIND, 3, key="g", key_type=0))
        assert (r3.error_code.value, r3.node_id, r3.port) == (0, 1, int(port))
        txn = w.call(FIND, 3, req(FIND, 3, key="tx", key_type=1))
        assert (txn.error_code.value, txn.node_id, txn.port) == (0, 1, int(port))  # this node coordinates transactions
        for key_type in (0, 1):
            r4 = w.call(FIND, 4, req(FIND, 4, key_type=key_type, coordinator_keys=("a", "b", "c")))
            assert [(c.key, c.error_code.value, c.node_id, c.host, c.port) for c in r4.coordinators] == [
                (k, 0, 1, host, int(port)) for k in ("a", "b", "c")]
        r6 = w.call(FIND, 6, req(FIND, 6, key_type=2, coordinator_keys=("share",)))
        assert r6.coordinators[0].error_code.value == 42  # INVALID_REQUEST: no share groups
    finally:
        w.close()


# --------------------------------------------------------------------------- membership


def test_member_id_required_handshake_join_sync_heartbeat(gserver):
    m = Member(gserver, "g-handshake")
    try:
        m.send_join()
        first = m.recv_join()
        assert first.error_code.value == MEMBER_ID_REQUIRED and first.member_id and first.generation_id == -1
        assert first.member_id.startswith("wire-test-")  # Kafka's clientId-uuid shape
        m.member_id = first.member_id
        m.send_join()
        joined = m.recv_join()
        assert joined.error_code.value == 0 and joined.member_id == first.member_id
        assert (joined.generation_id, joined.leader, joined.protocol_type, joined.protocol_name) == (
            1, first.member_id, "consumer", "range")
        assert [(x.member_id, x.metadata) for x in joined.members] == [(first.member_id, b"m")]
        mine = assignment({"t": [0, 1]})
        s = m.sync([(m.member_id, mine)], protocol_name="range")
        assert (s.error_code.value, s.assignment, s.protocol_name) == (0, mine, "range")
        assert m.heartbeat() == 0
        assert m.heartbeat(version=0) == 0
        assert m.heartbeat(generation=7) == ILLEGAL_GENERATION
        stranger = KafkaWire(gserver.kafka_address)
        try:
            r = stranger.call(HEARTBEAT, 4, heartbeat_request(4, "g-handshake", "nobody", 1))
            assert r.error_code.value == UNKNOWN_MEMBER
            r = stranger.call(HEARTBEAT, 4, heartbeat_request(4, "no-such-group", "nobody", 1))
            assert r.error_code.value == UNKNOWN_MEMBER
            r = stranger.call(JOIN, 7, join_request(7, "g-handshake", "", session_ms=10))
            assert r.error_code.value == INVALID_SESSION_TIMEOUT
            r = stranger.call(JOIN, 7, join_request(7, "", ""))
            assert r.error_code.value == INVALID_GROUP_ID
        finally:
            stranger.close()
        admin = KafkaWire(gserver.kafka_address)
        try:
            d = describe(admin, "g-handshake")["g-handshake"]
        finally:
            admin.close()
        assert (d.group_state, d.protocol_type, d.protocol_data) == ("Stable", "consumer", "range")
        assert [(x.member_id, x.client_id, x.client_host, x.member_metadata, x.member_assignment)
                for x in d.members] == [(m.member_id, "wire-test", "/127.0.0.1", b"m", mine)]
    finally:
        m.close()


def test_rebalance_protocol_selection_and_parked_sync(gserver):
    group = "g-select"
    a = Member(gserver, group, protocols=(("range", b"a-range"), ("roundrobin", b"a-rr")))
    b = Member(gserver, group, protocols=(("roundrobin", b"b-rr"),))
    c = Member(gserver, group, protocols=(("sticky", b"c"),))
    try:
        assert a.join().generation_id == 1
        assert a.sync([(a.member_id, b"A1")]).assignment == b"A1"
        # b joins: its join is parked until the current member rejoins
        b.send_join()
        got = b.recv_join()
        assert got.error_code.value == MEMBER_ID_REQUIRED
        b.member_id = got.member_id
        b.send_join()
        wait_members(gserver, group, 2)
        assert a.heartbeat() == REBALANCE_IN_PROGRESS
        # a protocol nobody else speaks is refused outright, the rebalance goes on
        r = c.join()
        assert r.error_code.value == INCONSISTENT_PROTOCOL
        ra = a.join()
        rb = b.recv_join()
        assert ra.generation_id == rb.generation_id == 2
        assert ra.protocol_name == rb.protocol_name == "roundrobin"  # the only protocol both speak
        assert ra.leader == rb.leader == a.member_id
        assert sorted((x.member_id, x.metadata) for x in ra.members) == sorted(
            [(a.member_id, b"a-rr"), (b.member_id, b"b-rr")])
        assert rb.members == ()
        # the follower's sync waits for the leader's assignment
        b.send(SYNC, 5, sync_request(5, group, b.member_id, 2))
        sa = a.sync([(a.member_id, b"A2"), (b.member_id, b"B2")])
        sb = b.recv()
        assert (sa.error_code.value, sa.assignment) == (0, b"A2")
        assert (sb.error_code.value, sb.assignment, sb.protocol_name) == (0, b"B2", "roundrobin")
        assert a.heartbeat(generation=1) == ILLEGAL_GENERATION
        assert a.heartbeat() == b.heartbeat() == 0
        # a rejoin with unchanged protocols by a follower of a stable group is answered at once
        again = b.join()
        assert (again.error_code.value, again.generation_id) == (0, 2)
    finally:
        for m in (a, b, c):
            m.close()


def test_static_membership_restart_keeps_assignment_and_fences_the_old_id(gserver):
    group = "g-static"
    first = Member(gserver, group, version=5, instance="instance-1")
    try:
        r = first.join()  # a static member gets its id at once (no MEMBER_ID_REQUIRED)
        assert r.error_code.value == 0 and r.generation_id == 1 and r.members[0].group_instance_id == "instance-1"
        assert first.sync([(first.member_id, b"static-A")], version=3, instance="instance-1").assignment == b"static-A"
        old_id = first.member_id
        # the same instance restarts: empty member id, same instance id
        second = Member(gserver, group, version=5, instance="instance-1")
        try:
            r2 = second.join()
            assert r2.error_code.value == 0 and r2.member_id != old_id
            assert r2.generation_id == 1  # no rebalance: the group stays Stable
            s2 = second.sync(version=3, instance="instance-1")
            assert (s2.error_code.value, s2.assignment) == (0, b"static-A")
            assert first.heartbeat(version=3) == FENCED_INSTANCE
            d = describe(second.w, group, version=4)[group]
            assert d.group_state == "Stable"
            assert [(x.member_id, x.group_instance_id) for x in d.members] == [(second.member_id, "instance-1")]
            # leave by instance id alone (what the admin client's remove-members does)
            leave = second.w.call(LEAVE, 4, req(LEAVE, 4, group_id=group, members=(
                req(LEAVE, 4, "MemberIdentity", member_id="", group_instance_id="instance-1"),)))
            assert leave.error_code.value == 0
            assert [(x.member_id, x.group_instance_id, x.error_code.value) for x in leave.members] == [
                ("", "instance-1", 0)]
            assert describe(second.w, group)[group].group_state == "Empty"
        finally:
            second.close()
    finally:
        first.close()


def test_leave_group_batched_and_v0(gserver):
    group = "g-leave"
    a = Member(gserver, group)
    b = Member(gserver, group)
    c = Member(gserver, group, version=0)
    try:
        a.join()
        a.sync([(a.member_id, b"")])
        b.send_join()
        b.member_id = b.recv_join().member_id
        b.send_join()
        c.send_join()  # JoinGroup v0: no handshake, added at once
        wait_members(gserver, group, 3)
        assert a.heartbeat() == REBALANCE_IN_PROGRESS
        a.join()
        b.recv_join()
        c.recv_join()
        assert a.generation == b.generation == c.generation == 2
        r = a.w.call(LEAVE, 5, req(LEAVE, 5, group_id=group, members=(
            req(LEAVE, 5, "MemberIdentity", member_id=a.member_id, group_instance_id=None, reason="bye"),
            req(LEAVE, 5, "MemberIdentity", member_id="ghost", group_instance_id=None, reason=None))))
        assert r.error_code.value == 0
        assert [(x.member_id, x.error_code.value) for x in r.members] == [(a.member_id, 0), ("ghost", UNKNOWN_MEMBER)]
        r0 = c.w.call(LEAVE, 0, req(LEAVE, 0, group_id=group, member_id=c.member_id))
        assert r0.error_code.value == 0
        r0 = c.w.call(LEAVE, 0, req(LEAVE, 0, group_id=group, member_id=c.member_id))
        assert r0.error_code.value == UNKNOWN_MEMBER
        assert b.heartbeat() == REBALANCE_IN_PROGRESS
        r = b.join()
        assert r.generation_id == 3 and [x.member_id for x in r.members] == [b.member_id]
    finally:
        for m in (a, b, c):
            m.close()


def test_session_timeout_evicts_a_silent_member(gserver):
    group = "g-session"
    a = Member(gserver, group)
    b = Member(gserver, group)
    try:
        a.join()
        a.sync([(a.member_id, b"")])
        b.send_join()
        b.member_id = b.recv_join().member_id
        b.send_join()
        wait_members(gserver, group, 2)
        assert a.heartbeat() == REBALANCE_IN_PROGRESS
        a.join()
        b.recv_join()
        a.sync([(a.member_id, b"a"), (b.member_id, b"b")])
        assert b.sync().assignment == b"b"
        # b goes silent (its connection stays open); a keeps heartbeating until told to rejoin
        code = wait_for(a.heartbeat, lambda c: c != 0, timeout_s=SESSION_MS / 1000 + 15)
        assert code == REBALANCE_IN_PROGRESS
        r = a.join()
        assert r.generation_id == 3 and [x.member_id for x in r.members] == [a.member_id]
        assert b.heartbeat() == UNKNOWN_MEMBER
    finally:
        a.close()
        b.close()


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_dropped(gserver):
    group = "g-rebalance-timeout"
    a, b, c = (Member(gserver, group, rebalance_ms=1000) for _ in range(3))
    try:
        a.join()
        a.sync([(a.member_id, b"")])
        b.send_join()
        b.member_id = b.recv_join().member_id
        b.send_join()
        wait_members(gserver, group, 2)
        assert a.heartbeat() == REBALANCE_IN_PROGRESS
        a.join()
        b.recv_join()
        a.sync([(a.member_id, b"a"), (b.member_id, b"b")])
        assert b.sync().assignment == b"b"
        # c joins; a rejoins when told to; b (alive, session running) never rejoins
        c.send_join()
        c.member_id = c.recv_join().member_id
        c.send_join()
        wait_members(gserver, group, 3)
        assert a.heartbeat() == REBALANCE_IN_PROGRESS
        ra = a.join()  # answered when the join phase gives up on b, a rebalance timeout later
        rc = c.recv_join()
        assert ra.generation_id == rc.generation_id == 3
        assert sorted(x.member_id for x in ra.members) == sorted([a.member_id, c.member_id])
        assert b.heartbeat() == UNKNOWN_MEMBER
    finally:
        for m in (a, b, c):
            m.close()


def test_a_closed_connection_drops_its_parked_join_and_the_member_expires(gserver):
    group = "g-gone"
    a = Member(gserver, group)
    b = Member(gserver, group)
    try:
        a.join()
        a.sync([(a.member_id, b"")])
        b.send_join()
        b.member_id = b.recv_join().member_id
        b.send_join()  # parked: the group waits for a to rejoin
        wait_members(gserver, group, 2)
        b.close()  # ... and b goes away with its join still parked
        assert a.heartbeat() == REBALANCE_IN_PROGRESS
        r = a.join()  # b's parked join counted: the phase completes with both
        assert r.generation_id == 2 and len(r.members) == 2
        a.sync([(a.member_id, b"a")])
        # b never syncs nor heartbeats: it is dropped and a is asked to rejoin alone
        code = wait_for(a.heartbeat, lambda c: c != 0, timeout_s=SESSION_MS / 1000 + 15)
        assert code == REBALANCE_IN_PROGRESS
        r = a.join()
        assert r.error_code.value == 0 and [x.member_id for x in r.members] == [a.member_id]
    finally:
        a.close()


def test_old_versions_as_librdkafka_2_0_would_use_them(gserver):
    """JoinGroup/SyncGroup/Heartbeat/LeaveGroup v0, OffsetCommit v2, OffsetFetch v1."""
    group = "g-v0"
    m = Member(gserver, group, version=0)
    try:
        create_topic(m.w, "wire-v0", 2)
        r = m.join()
        assert r.error_code.value == 0 and r.generation_id == 1 and r.leader == m.member_id
        assert m.sync([(m.member_id, b"v0")], version=0).assignment == b"v0"
        assert m.heartbeat(version=0) == 0
        c = m.w.call(COMMIT, 2, commit_request(2, group, {"wire-v0": [(0, 5, "v0-meta")]},
                                               generation=m.generation, member_id=m.member_id))
        assert c.topics[0].partitions[0].error_code.value == 0
        _, got = fetch_offsets_v1(m.w, group, {"wire-v0": [0, 1]})
        assert got == {("wire-v0", 0): (5, "v0-meta", 0), ("wire-v0", 1): (-1, "", 0)}
        assert m.w.call(LEAVE, 0, req(LEAVE, 0, group_id=group, member_id=m.member_id)).error_code.value == 0
    finally:
        m.close()


# --------------------------------------------------------------------------- offsets


def test_offset_commit_and_fetch_metadata_errors_and_versions(gserver):
    w = KafkaWire(gserver.kafka_address)
    try:
        create_topic(w, "wire-offsets", 2)
        long_meta = "x" * 4097
        r = w.call(COMMIT, 8, commit_request(8, "g-offsets", {
            "wire-offsets": [(0, 11, "meta-0"), (1, 22, ""), (9, 1, ""), (0, 3, long_meta)],
            "wire-nope": [(0, 1, "")],
        }))
        codes = [[p.error_code.value for p in t.partitions] for t in r.topics]
        assert codes == [[0, 0, UNKNOWN_TOPIC, METADATA_TOO_LARGE], [UNKNOWN_TOPIC]]
        r, got = fetch_offsets_v1(w, "g-offsets", {"wire-offsets": [0, 1, 5], "wire-nope": [0]}, version=5)
        assert r.error_code.value == 0
        assert got == {("wire-offsets", 0): (11, "meta-0", 0), ("wire-offsets", 1): (22, "", 0),
                       ("wire-offsets", 5): (-1, "", 0), ("wire-nope", 0): (-1, "", 0)}
        assert all(p.committed_leader_epoch == -1 for t in r.topics for p in t.partitions)
        # v6+: the committed leader epoch is stored and returned (v5+)
        r = w.call(COMMIT, 8, commit_request(8, "g-offsets-epoch", {"wire-offsets": [(0, 7, "", 1), (1, 8, "")]}))
        assert [p.error_code.value for t in r.topics for p in t.partitions] == [0, 0]
        r, _ = fetch_offsets_v1(w, "g-offsets-epoch", {"wire-offsets": [0, 1]}, version=5)
        assert [(p.committed_offset, p.committed_leader_epoch) for t in r.topics for p in t.partitions] == [(7, 1), (8, -1)]
        # v2+: a null topic list is every committed partition of the group
        _, every = fetch_offsets_v1(w, "g-offsets", None, version=2)
        assert every == {("wire-offsets", 0): (11, "meta-0", 0), ("wire-offsets", 1): (22, "", 0)}
        # v8: several groups in one request, an unknown group has no offsets
        v = 8
        groups = (
            req(OFFSET_FETCH, v, "OffsetFetchRequestGroup", group_id="g-offsets", topics=None),
            req(OFFSET_FETCH, v, "OffsetFetchRequestGroup", group_id="g-nobody", topics=(
                req(OFFSET_FETCH, v, "OffsetFetchRequestTopics", name="wire-offsets", partition_indexes=(0,)),)),
        )
        r8 = w.call(OFFSET_FETCH, v, req(OFFSET_FETCH, v, groups=groups, require_stable=True))
        assert [(g.group_id, g.error_code.value) for g in r8.groups] == [("g-offsets", 0), ("g-nobody", 0)]
        assert [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions])
                for t in r8.groups[0].topics] == [("wire-offsets", [(0, 11), (1, 22)])]
        assert r8.groups[1].topics[0].partitions[0].committed_offset == -1
        # a negative offset means "none" to Kafka readers
        w.call(COMMIT, 9, commit_request(9, "g-offsets", {"wire-offsets": [(1, -1, "")]}))
        _, got = fetch_offsets_v1(w, "g-offsets", {"wire-offsets": [1]})
        assert got == {("wire-offsets", 1): (-1, "", 0)}
    finally:
        w.close()


def test_offset_commit_is_fenced_by_group_membership(gserver):
    group = "g-fenced"
    m = Member(gserver, group)
    w = KafkaWire(gserver.kafka_address)
    try:
        create_topic(w, "wire-fenced", 1)
        m.join()
        m.sync([(m.member_id, b"")])

        def commit(generation: int, member_id: str) -> int:
            r = w.call(COMMIT, 8, commit_request(8, group, {"wire-fenced": [(0, 4, "")]},
                                                 generation=generation, member_id=member_id))
            return r.topics[0].partitions[0].error_code.value

        assert commit(-1, "") == UNKNOWN_MEMBER  # a "simple" commit to a group with members
        assert commit(m.generation + 1, m.member_id) == ILLEGAL_GENERATION
        assert commit(m.generation, "someone-else") == UNKNOWN_MEMBER
        assert commit(m.generation, m.member_id) == 0
        # an unknown group with a generation: a commit from a generation that no longer exists
        r = w.call(COMMIT, 8, commit_request(8, "g-never-joined", {"wire-fenced": [(0, 1, "")]},
                                             generation=3, member_id="m"))
        assert r.topics[0].partitions[0].error_code.value == ILLEGAL_GENERATION
        _, got = fetch_offsets_v1(w, group, {"wire-fenced": [0]})
        assert got == {("wire-fenced", 0): (4, "", 0)}
    finally:
        m.close()
        w.close()


# --------------------------------------------------------------------------- admin


def test_describe_list_delete_groups(gserver):
    w = KafkaWire(gserver.kafka_address)
    m = Member(gserver, "g-admin-live")
    try:
        create_topic(w, "wire-admin", 1)
        m.join()
        m.sync([(m.member_id, b"x")])
        w.call(COMMIT, 8, commit_request(8, "g-admin-offsets", {"wire-admin": [(0, 2, "")]}))
        d5 = describe(w, "g-unknown", "g-admin-offsets", version=5)
        assert (d5["g-unknown"].error_code.value, d5["g-unknown"].group_state) == (0, "Dead")
        assert (d5["g-admin-offsets"].error_code.value, d5["g-admin-offsets"].group_state) == (0, "Empty")
        d6 = describe(w, "g-unknown", version=6)
        assert (d6["g-unknown"].error_code.value, d6["g-unknown"].group_state) == (GROUP_ID_NOT_FOUND, "Dead")
        r = w.call(LIST, 0, req(LIST, 0))
        listed = {g.group_id: g.protocol_type for g in r.groups}
        assert listed["g-admin-live"] == "consumer" and listed["g-admin-offsets"] == ""
        r4 = w.call(LIST, 4, req(LIST, 4, states_filter=("stable",)))
        stable = {g.group_id: g.group_state for g in r4.groups}
        assert stable.get("g-admin-live") == "Stable" and "g-admin-offsets" not in stable
        assert all(state == "Stable" for state in stable.values())
        r5 = w.call(LIST, 5, req(LIST, 5, states_filter=(), types_filter=("consumer",)))
        assert r5.groups == ()  # KIP-848 groups: none
        r5 = w.call(LIST, 5, req(LIST, 5, states_filter=("Empty",), types_filter=("Classic",)))
        assert {(g.group_id, g.group_type) for g in r5.groups} >= {("g-admin-offsets", "classic")}
        r = w.call(DELETE_GROUPS, 2, req(DELETE_GROUPS, 2, groups_names=(
            "g-admin-live", "g-admin-offsets", "g-unknown")))
        assert [(x.group_id, x.error_code.value) for x in r.results] == [
            ("g-admin-live", NON_EMPTY_GROUP), ("g-admin-offsets", 0), ("g-unknown", GROUP_ID_NOT_FOUND)]
        _, got = fetch_offsets_v1(w, "g-admin-offsets", {"wire-admin": [0]})
        assert got == {("wire-admin", 0): (-1, "", 0)}
        assert "g-admin-offsets" not in {g.group_id for g in w.call(LIST, 3, req(LIST, 3)).groups}
    finally:
        m.close()
        w.close()


def test_offset_delete_refuses_subscribed_topics(gserver):
    group = "g-odel"
    w = KafkaWire(gserver.kafka_address)
    m = Member(gserver, group, protocols=(("range", subscription("wire-sub")),))
    try:
        create_topic(w, "wire-sub", 1)
        create_topic(w, "wire-unsub", 1)
        w.call(COMMIT, 8, commit_request(8, group, {"wire-sub": [(0, 3, "")], "wire-unsub": [(0, 4, "")]}))
        m.join()
        m.sync([(m.member_id, assignment({"wire-sub": [0]}))])

        def delete(topics: dict[str, list[int]]):
            r = w.call(OFFSET_DELETE, 0, req(OFFSET_DELETE, 0, group_id=group, topics=tuple(
                req(OFFSET_DELETE, 0, "OffsetDeleteRequestTopic", name=n, partitions=tuple(
                    req(OFFSET_DELETE, 0, "OffsetDeleteRequestPartition", partition_index=p) for p in ps))
                for n, ps in topics.items())))
            return r.error_code.value, {(t.name, p.partition_index): p.error_code.value for t in r.topics
                                        for p in t.partitions}

        assert delete({"wire-sub": [0], "wire-unsub": [0], "wire-missing": [0]}) == (0, {
            ("wire-sub", 0): SUBSCRIBED, ("wire-unsub", 0): 0, ("wire-missing", 0): UNKNOWN_TOPIC})
        _, got = fetch_offsets_v1(w, group, {"wire-sub": [0], "wire-unsub": [0]})
        assert got == {("wire-sub", 0): (3, "", 0), ("wire-unsub", 0): (-1, "", 0)}
        m.w.call(LEAVE, 0, req(LEAVE, 0, group_id=group, member_id=m.member_id))
        assert delete({"wire-sub": [0]}) == (0, {("wire-sub", 0): 0})  # Empty now: anything goes
        assert delete({"wire-sub": [0]})[0] == 0  # the group still exists (Empty)
        assert w.call(OFFSET_DELETE, 0, req(OFFSET_DELETE, 0, group_id="g-odel-unknown", topics=())).error_code.value \
            == GROUP_ID_NOT_FOUND
    finally:
        m.close()
        w.close()


def test_shutdown_answers_a_parked_join(tmp_path_factory):
    s = start_server(tmp_path_factory)
    a = Member(s, "g-shutdown")
    b = Member(s, "g-shutdown")
    try:
        a.join()
        a.sync([(a.member_id, b"")])
        b.send_join()
        b.member_id = b.recv_join().member_id
        b.send_join()  # parked until a rejoins, which it never does
        wait_members(s, "g-shutdown", 2)
        assert s.stop() == 0
        r = b.recv_join()
        assert r.error_code.value == COORDINATOR_NOT_AVAILABLE
    finally:
        a.close()
        b.close()
        if s.proc is not None:
            s.stop()
