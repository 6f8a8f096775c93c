"""Kafka consumer groups with real clients against a real ``headwater serve``.

kafka-python, aiokafka and confluent-kafka consumers share one group; members join, leave
cleanly and die (a consumer in a subprocess killed with SIGKILL). Checked throughout: each
partition is owned by exactly one member (DescribeGroups, and what each client reports as
assigned), every produced message is consumed, and, since every consumer commits after
processing, no message is consumed twice except the ones the killed consumer processed
without committing. Also: the admin views (list/describe groups, committed offsets, lag),
kcat's balanced consumer, and committed offsets across a SIGKILL restart.

The coordinator's initial rebalance delay is 500 ms here (Kafka's default is 3 s); sessions
are 6 s (the broker's minimum), heartbeats 1 s.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from hw_server import ServerProcess, free_port
from kafka_python_group import subscriber

SESSION_MS = 6000
HEARTBEAT_MS = 1000
REBALANCE_MS = 20000
ENV = {"HEADWATER_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "500"}
KCAT = shutil.which("kcat")


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


def wait_for(fn, ok, timeout_s: float = 40.0, step_s: float = 0.2):
    """Call ``fn`` until ``ok(value)``, at most ``timeout_s``; returns the last value."""
    deadline = time.monotonic() + timeout_s
    value = fn()
    while not ok(value) and time.monotonic() < deadline:
        time.sleep(step_s)
        value = fn()
    return value


def create_topic(server, name: str, partitions: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=server.kafka_address)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


def produce(server, topic: str, partitions: int, values: list[bytes]) -> list[tuple[int, int]]:
    """Send ``values`` round-robin over the partitions; returns their (partition, offset)."""
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=server.kafka_address)
    try:
        futures = [p.send(topic, value=v, partition=i % partitions) for i, v in enumerate(values)]
        p.flush(10)
        return [(md.partition, md.offset) for md in (f.get(10) for f in futures)]
    finally:
        p.close()


def end_offsets(server, topic: str, partitions: int) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=server.kafka_address)
    try:
        tps = [TopicPartition(topic, i) for i in range(partitions)]
        return {tp.partition: o for tp, o in c.end_offsets(tps).items()}
    finally:
        c.close()


# --------------------------------------------------------------------------- consumers


class Recorder:
    """What one consumer did: records processed (partition, offset), its assignment, its errors."""

    def __init__(self, client_id: str):
        self.client_id = client_id
        self.records: list[tuple[int, int]] = []
        self.assigned: frozenset[int] = frozenset()
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def add(self, partition: int, offset: int) -> None:
        with self._lock:
            self.records.append((partition, offset))

    def seen(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(self.records)

    def start(self, target, *args) -> "Recorder":
        def run():
            try:
                target(self, *args)
            except Exception as e:  # recorded, and checked by the test
                self.errors.append(repr(e))

        self.thread = threading.Thread(target=run, name=self.client_id, daemon=True)
        self.thread.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        assert self.thread is not None
        self.thread.join(30)
        assert not self.thread.is_alive(), f"{self.client_id} did not stop"


def kafka_python_consumer(rec: Recorder, server, group: str, topic: str) -> None:
    """poll, process, commit the consumed positions; the group is rejoined inside poll()."""
    c = subscriber(topic, bootstrap_servers=server.kafka_address, group_id=group, client_id=rec.client_id,
                   enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
                   heartbeat_interval_ms=HEARTBEAT_MS, max_poll_interval_ms=REBALANCE_MS)
    try:
        while not rec.stop.is_set():
            batch = c.poll(timeout_ms=200)
            for msgs in batch.values():
                for m in msgs:
                    rec.add(m.partition, m.offset)
            if batch:
                c.commit()
            rec.assigned = frozenset(tp.partition for tp in c.assignment())
    finally:
        c.close()


def confluent_consumer(rec: Recorder, server, group: str, topic: str) -> None:
    """consume a batch, process, commit its offsets synchronously; revocations are served in consume()."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": server.kafka_address, "group.id": group, "client.id": rec.client_id,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
                  "max.poll.interval.ms": REBALANCE_MS})

    def on_assign(_consumer, parts):
        rec.assigned = frozenset(p.partition for p in parts)

    def on_revoke(_consumer, _parts):
        rec.assigned = frozenset()

    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    try:
        while not rec.stop.is_set():
            done: dict[int, int] = {}
            for m in c.consume(num_messages=100, timeout=0.2):
                if m.error():
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        rec.errors.append(str(m.error()))
                    continue
                rec.add(m.partition(), m.offset())
                done[m.partition()] = m.offset() + 1
            if done:
                c.commit(offsets=[TopicPartition(topic, p, o) for p, o in done.items()], asynchronous=False)
    finally:
        c.close()


def aiokafka_consumer(rec: Recorder, server, group: str, topic: str) -> None:
    """aiokafka rebalances in a background task: a batch is processed and committed under a lock
    the revocation callback also takes, and dropped if a revocation came first (it is fetched
    again from the committed offsets by whoever owns the partition next)."""

    async def main():
        from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
        from aiokafka.structs import OffsetAndMetadata

        lock = asyncio.Lock()
        revocations = [0]

        class Listener(ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked):
                async with lock:
                    revocations[0] += 1
                    rec.assigned = frozenset()

            async def on_partitions_assigned(self, assigned):
                rec.assigned = frozenset(tp.partition for tp in assigned)

        c = AIOKafkaConsumer(bootstrap_servers=server.kafka_address, group_id=group, client_id=rec.client_id,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                             max_poll_interval_ms=REBALANCE_MS, rebalance_timeout_ms=REBALANCE_MS)
        c.subscribe([topic], listener=Listener())
        await c.start()
        try:
            while not rec.stop.is_set():
                seen = revocations[0]
                batch = await c.getmany(timeout_ms=200)
                async with lock:
                    if revocations[0] != seen:
                        continue
                    done = {}
                    for tp, msgs in batch.items():
                        for m in msgs:
                            rec.add(m.partition, m.offset)
                            done[tp] = m.offset + 1
                    if done:
                        await c.commit({tp: OffsetAndMetadata(o, "") for tp, o in done.items()})
        finally:
            await c.stop()

    asyncio.run(main())


DOOMED = r"""
import sys
from kafka import KafkaConsumer
address, group, topic = sys.argv[1:4]
c = KafkaConsumer(topic, bootstrap_servers=address, group_id=group, client_id="doomed",
                  enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=%d,
                  heartbeat_interval_ms=%d, max_poll_interval_ms=%d)
assert c.partitions_for_topic(topic)  # known before the first join: see kafka_python_group.py
while True:
    batch = c.poll(timeout_ms=200)
    for msgs in batch.values():
        for m in msgs:
            print("R", m.partition, m.offset, flush=True)
    if batch:
        c.commit()
        for tp, msgs in batch.items():
            print("C", tp.partition, msgs[-1].offset, flush=True)
    print("A", ",".join(str(tp.partition) for tp in sorted(c.assignment())), flush=True)
""" % (SESSION_MS, HEARTBEAT_MS, REBALANCE_MS)


class Doomed:
    """A kafka-python consumer in a subprocess, reporting what it processed, committed, owns."""

    def __init__(self, server, group: str, topic: str):
        self.processed: list[tuple[int, int]] = []
        self.committed: dict[int, int] = {}  # partition -> last offset committed
        self.assigned: frozenset[int] = frozenset()
        self.proc = subprocess.Popen([sys.executable, "-c", DOOMED, server.kafka_address, group, topic],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            kind, *rest = line.split()
            if kind == "R":
                self.processed.append((int(rest[0]), int(rest[1])))
            elif kind == "C":
                self.committed[int(rest[0])] = int(rest[1])
            elif kind == "A":
                self.assigned = frozenset(int(x) for x in rest[0].split(",")) if rest else frozenset()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._reader.join(10)

    def uncommitted(self) -> set[tuple[int, int]]:
        return {(p, o) for p, o in self.processed if o > self.committed.get(p, -1)}


def group_view(admin, group: str, topic: str) -> tuple[str, dict[str, list[frozenset[int]]]]:
    """(state, client id -> assignments of its members) from DescribeGroups."""
    d = admin.describe_groups([group])[group]
    view: dict[str, list[frozenset[int]]] = {}
    for m in d["members"]:
        parts: set[int] = set()
        a = m["member_assignment"]
        if isinstance(a, dict):
            for t in a["assigned_partitions"]:
                if t["topic"] == topic:
                    parts |= set(t["partitions"])
        view.setdefault(m["client_id"], []).append(frozenset(parts))
    return d["group_state"], view


def settled(admin, group: str, topic: str, partitions: int, owners: dict[str, object]):
    """The group is Stable with exactly ``owners`` (client id -> object with ``.assigned``) as
    members, each partition owned by exactly one of them, and each client agrees with the
    coordinator about what it owns. Returns (ok, state, view)."""
    state, view = group_view(admin, group, topic)
    ok = state == "Stable" and set(view) == set(owners) and all(len(v) == 1 for v in view.values())
    if ok:
        shares = [v[0] for v in view.values()]
        ok = sum(len(s) for s in shares) == partitions and frozenset().union(*shares) == frozenset(range(partitions))
        ok = ok and all(owners[c].assigned == view[c][0] for c in view)
    return ok, state, view


# --------------------------------------------------------------------------- the group


def test_three_clients_share_a_group_through_join_leave_and_death(gserver):
    from kafka.admin import KafkaAdminClient

    topic, group, n = "grp-orders", "g-mixed", 6
    create_topic(gserver, topic, n)
    admin = KafkaAdminClient(bootstrap_servers=gserver.kafka_address)
    produced: list[tuple[int, int]] = []
    recs = {
        "kp": Recorder("kp").start(kafka_python_consumer, gserver, group, topic),
        "ck": Recorder("ck").start(confluent_consumer, gserver, group, topic),
        "aio": Recorder("aio").start(aiokafka_consumer, gserver, group, topic),
    }
    everyone = list(recs.values())
    doomed = None

    def consumed() -> set[tuple[int, int]]:
        out = {r for rec in everyone for r in rec.seen()}
        return out | (set(doomed.processed) if doomed else set())

    def phase(owners: dict[str, object], batch: int) -> None:
        result = wait_for(lambda: settled(admin, group, topic, n, owners), lambda r: r[0])
        assert result[0], f"not settled on {sorted(owners)}: {result[1:]}"
        produced.extend(produce(gserver, topic, n, [b"%s-%d" % (group.encode(), len(produced) + i)
                                                    for i in range(batch)]))
        missing = wait_for(lambda: set(produced) - consumed(), lambda m: not m)
        assert not missing, (f"never consumed: {sorted(missing)[:10]}; owners "
                             f"{ {c: sorted(o.assigned) for c, o in owners.items()} }; consumed "
                             f"{ {r.client_id: sorted({p for p, _ in r.seen()}) for r in everyone} }; "
                             f"errors { {r.client_id: r.errors for r in everyone} }")

    try:
        phase(dict(recs), 60)  # three clients, three members, two partitions each
        ck = recs.pop("ck")
        ck.finish()  # a clean leave: the other two take its partitions
        phase(dict(recs), 60)
        doomed = Doomed(gserver, group, topic)  # a join
        phase({**recs, "doomed": doomed}, 60)
        doomed.kill()  # a death: found out when its session runs out
        phase(dict(recs), 60)
        for rec in recs.values():
            rec.finish()
        recs["ck"] = ck
        for rec in recs.values():
            assert rec.errors == [], (rec.client_id, rec.errors)
        every = [r for rec in recs.values() for r in rec.seen()] + list(doomed.processed)
        counts: dict[tuple[int, int], int] = {}
        for r in every:
            counts[r] = counts.get(r, 0) + 1
        twice = {r for r, k in counts.items() if k > 1}
        assert twice <= doomed.uncommitted(), f"consumed twice across clean rebalances: {sorted(twice - doomed.uncommitted())}"
        assert set(produced) <= set(counts)
        assert all(len(rec.seen()) > 0 for rec in recs.values())  # everybody worked
        # every processed message was committed: no lag, and the group is Empty
        committed = admin.list_group_offsets(group)[group]
        ends = end_offsets(gserver, topic, n)
        assert {tp.partition: om.offset for tp, om in committed.items() if tp.topic == topic} == ends
        assert sum(ends.values()) == len(produced)
        assert group_view(admin, group, topic) == ("Empty", {})
    finally:
        for rec in recs.values():
            rec.stop.set()
        if doomed is not None and doomed.proc.poll() is None:
            doomed.kill()
        admin.close()


# --------------------------------------------------------------------------- admin views


def test_admin_views_offsets_and_lag(gserver):
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata

    topic, group, n = "grp-lag", "g-lag", 4
    create_topic(gserver, topic, n)
    produce(gserver, topic, n, [b"x%d" % i for i in range(40)])
    admin = KafkaAdminClient(bootstrap_servers=gserver.kafka_address)
    recs = {c: Recorder(c).start(kafka_python_consumer, gserver, group, topic) for c in ("lag-a", "lag-b")}
    try:
        result = wait_for(lambda: settled(admin, group, topic, n, recs), lambda r: r[0])
        assert result[0], result[1:]
        assert len(wait_for(lambda: [r for rec in recs.values() for r in rec.seen()], lambda s: len(s) >= 40)) == 40
        for rec in recs.values():  # stop consuming, keep the members
            rec.finish()
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert (listed[group]["group_state"], listed[group]["protocol_type"]) == ("Empty", "consumer")
        # the consumers left: commit from an admin client (generation -1) is allowed on an Empty group
        committed = {TopicPartition(topic, p): OffsetAndMetadata(o, f"meta-{p}", -1)
                     for p, o in {0: 10, 1: 4, 2: 7, 3: 0}.items()}
        assert all(e.__name__ == "NoError" for e in admin.alter_group_offsets(group, committed).values())
        produce(gserver, topic, n, [b"y%d" % i for i in range(8)])  # two more per partition
        fetched = admin.list_group_offsets(group)[group]
        assert {tp.partition: (om.offset, om.metadata) for tp, om in fetched.items()} == {
            0: (10, "meta-0"), 1: (4, "meta-1"), 2: (7, "meta-2"), 3: (0, "meta-3")}
        ends = end_offsets(gserver, topic, n)
        assert ends == {0: 12, 1: 12, 2: 12, 3: 12}
        lag = {tp.partition: ends[tp.partition] - om.offset for tp, om in fetched.items()}
        assert lag == {0: 2, 1: 8, 2: 5, 3: 12}
        # OffsetDelete on an Empty group, then DeleteGroups removes the rest
        errs = admin.delete_group_offsets(group, [TopicPartition(topic, 3)])
        assert [e.__name__ for e in errs.values()] == ["NoError"]
        assert set(tp.partition for tp in admin.list_group_offsets(group)[group]) == {0, 1, 2}
        assert admin.delete_groups([group]) == {group: "OK"}
        assert admin.list_group_offsets(group)[group] == {}
        assert group not in {g["group_id"] for g in admin.list_groups()}
        assert admin.delete_groups([group]) == {group: "GroupIdNotFoundError"}
    finally:
        for rec in recs.values():
            rec.stop.set()
        admin.close()


def test_describe_shows_members_and_delete_refuses_a_live_group(gserver):
    from kafka.admin import KafkaAdminClient

    topic, group, n = "grp-live", "g-live", 3
    create_topic(gserver, topic, n)
    admin = KafkaAdminClient(bootstrap_servers=gserver.kafka_address)
    recs = {"live-aio": Recorder("live-aio").start(aiokafka_consumer, gserver, group, topic),
            "live-kp": Recorder("live-kp").start(kafka_python_consumer, gserver, group, topic)}
    try:
        result = wait_for(lambda: settled(admin, group, topic, n, recs), lambda r: r[0])
        assert result[0], result[1:]
        d = admin.describe_groups([group])[group]
        assert (d["group_state"], d["protocol_type"], d["error"]) == ("Stable", "consumer", None)
        assert d["protocol_data"] in ("range", "roundrobin")
        assert sorted(m["client_id"] for m in d["members"]) == ["live-aio", "live-kp"]
        assert all(m["member_metadata"]["topics"] == [topic] and m["client_host"] == "/127.0.0.1"
                   for m in d["members"])
        listed = {g["group_id"]: g for g in admin.list_groups(states_filter=["Stable"])}
        assert listed[group]["group_state"] == "Stable"
        assert admin.delete_groups([group]) == {group: "NonEmptyGroupError"}
    finally:
        for rec in recs.values():
            rec.finish()
        admin.close()
    for rec in recs.values():
        assert rec.errors == [], (rec.client_id, rec.errors)


def test_a_static_member_restarts_without_a_rebalance(gserver):
    from confluent_kafka import Consumer
    from kafka.admin import KafkaAdminClient
    from kafka.admin._groups import MemberToRemove

    topic, group, n = "grp-static", "g-static", 3
    create_topic(gserver, topic, n)
    admin = KafkaAdminClient(bootstrap_servers=gserver.kafka_address)

    def run_once() -> frozenset[int]:
        c = Consumer({"bootstrap.servers": gserver.kafka_address, "group.id": group,
                      "group.instance.id": "static-1", "session.timeout.ms": SESSION_MS,
                      "heartbeat.interval.ms": HEARTBEAT_MS})
        c.subscribe([topic])
        try:
            assigned = wait_for(lambda: (c.poll(0.1), c.assignment())[1], bool, timeout_s=30, step_s=0)
            return frozenset(tp.partition for tp in assigned)
        finally:
            c.close()  # a static member does not leave on close

    def members():
        d = admin.describe_groups([group])[group]
        return d["group_state"], [(m["member_id"], m["group_instance_id"]) for m in d["members"]]

    try:
        assert run_once() == frozenset(range(n))
        state, before = members()
        assert state == "Stable" and [i for _, i in before] == ["static-1"]
        assert run_once() == frozenset(range(n))
        state, after = members()
        assert state == "Stable" and [i for _, i in after] == ["static-1"]
        assert after[0][0] != before[0][0]  # the restarted instance took a new member id in place
        removed = admin.remove_group_members(group, [MemberToRemove(group_instance_id="static-1")])
        assert [e.__name__ for e in removed.values()] == ["NoError"]
        assert members() == ("Empty", [])
    finally:
        admin.close()


# --------------------------------------------------------------------------- kcat


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (.ci/run installs it as root)")
def test_kcat_balanced_consumer_commits_and_resumes(gserver):
    from kafka.admin import KafkaAdminClient

    topic, group = "grp-kcat", "g-kcat"
    create_topic(gserver, topic, 2)
    produce(gserver, topic, 2, [b"k%d" % i for i in range(20)])

    def kcat_group() -> list[str]:
        proc = subprocess.run([KCAT, "-b", gserver.kafka_address, "-G", group, "-X", "auto.offset.reset=earliest", "-e",
                               "-X", f"session.timeout.ms={SESSION_MS}", "-f", "%p %o %s\n", topic],
                              capture_output=True, timeout=60)
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
        return proc.stdout.decode().splitlines()

    first = kcat_group()
    assert sorted(first, key=lambda l: (int(l.split()[0]), int(l.split()[1]))) == [
        f"{i % 2} {i // 2} k{i}" for i in sorted(range(20), key=lambda i: (i % 2, i // 2))]
    admin = KafkaAdminClient(bootstrap_servers=gserver.kafka_address)
    try:
        offsets = admin.list_group_offsets(group)[group]
        assert {tp.partition: om.offset for tp, om in offsets.items()} == {0: 10, 1: 10}
    finally:
        admin.close()
    produce(gserver, topic, 2, [b"late-0", b"late-1"])
    assert sorted(kcat_group()) == ["0 10 late-0", "1 10 late-1"]  # resumes from the committed offsets


# --------------------------------------------------------------------------- durability


def test_committed_offsets_survive_a_sigkill_restart(tmp_path_factory):
    from confluent_kafka import Consumer
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata

    s = start_server(tmp_path_factory)
    try:
        topic, group = "grp-durable", "g-durable"
        create_topic(s, topic, 3)
        produce(s, topic, 3, [b"d%d" % i for i in range(30)])
        c = subscriber(topic, bootstrap_servers=s.kafka_address, group_id=group, enable_auto_commit=False,
                       auto_offset_reset="earliest", session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS)
        try:
            got = wait_for(lambda: c.poll(timeout_ms=500), lambda b: bool(b), timeout_s=30)
            assert got
            c.commit({TopicPartition(topic, 0): OffsetAndMetadata(4, "four", -1),
                      TopicPartition(topic, 1): OffsetAndMetadata(7, "seven", -1),
                      TopicPartition(topic, 2): OffsetAndMetadata(9, "", -1)})
        finally:
            c.close()
        s.kill()
        s.start()
        admin = KafkaAdminClient(bootstrap_servers=s.kafka_address)
        try:
            fetched = admin.list_group_offsets(group)[group]
            assert {tp.partition: (om.offset, om.metadata) for tp, om in fetched.items()} == {
                0: (4, "four"), 1: (7, "seven"), 2: (9, "")}
            listed = {g["group_id"]: g for g in admin.list_groups()}
            assert listed[group]["group_state"] == "Empty"  # known by its offsets
        finally:
            admin.close()
        # a new member of the group (another client) resumes where the group left off
        ck = Consumer({"bootstrap.servers": s.kafka_address, "group.id": group, "enable.auto.commit": False,
                       "auto.offset.reset": "earliest", "session.timeout.ms": SESSION_MS})
        ck.subscribe([topic])
        first: dict[int, int] = {}
        try:
            deadline = time.monotonic() + 40
            while len(first) < 3 and time.monotonic() < deadline:
                m = ck.poll(0.5)
                if m is not None and not m.error():
                    first.setdefault(m.partition(), m.offset())
        finally:
            ck.close()
        assert first == {0: 4, 1: 7, 2: 9}
    finally:
        if s.proc is not None:
            s.stop()
