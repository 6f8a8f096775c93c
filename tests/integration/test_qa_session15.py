"""QA session 15: what a deadline removes from a Kafka group is logged once per member with its
reason, by real clients in processes of their own: a member stopped (SIGSTOP) while a new one
joins misses the rebalance deadline (``why=rebalance``), a member killed (SIGKILL) lets its
session run out (``why=session``), and a member that closes (LeaveGroup) is not logged."""

from __future__ import annotations

import json
import re
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hw_server import ServerProcess, free_port
from test_hostile_connections import wait_for

CHILD = Path(__file__).with_name("kafka_group_child.py")
LINE = re.compile(r"group member timed out (.*)")
DEADLINE_S = 120  # only stops a broken server; nothing asserts a time
SESSION = 6_000  # ms: long enough that a loaded machine does not expire a live member


@pytest.fixture
def gserver(tmp_path):
    config = tmp_path / "hw.toml"
    config.write_text("[kafka]\ngroup_initial_rebalance_delay_ms = 0\ngroup_min_session_timeout_ms = 1000\n")
    s = ServerProcess(tmp_path / "data", free_port(), free_port()).start("--config", str(config))
    yield s
    if s.proc is not None:
        assert s.stop() == 0, s.log()


def timed_out(server) -> list[dict[str, str]]:
    return [dict(re.findall(r"(\w+)=(\S+)", m.group(1))) for m in map(LINE.search, server.log().splitlines()) if m]


class Member:
    def __init__(self, server, lib: str, group: str, session: int, rebalance: int):
        self.proc = subprocess.Popen([sys.executable, str(CHILD), lib, server.kafka_address, "qa15", group,
                                      json.dumps({"session": session, "rebalance": rebalance})],
                                     stdout=subprocess.PIPE, text=True)

    def line(self) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], DEADLINE_S)
        return self.proc.stdout.readline().strip() if ready else "(nothing)"

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()


def describe(admin, group: str) -> tuple[str, set[str]]:
    d = admin.describe_consumer_groups([group])[group].result(10)
    return str(d.state), {m.member_id for m in d.members}


def test_members_a_deadline_removes_are_logged_once_each_with_their_reason(gserver):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": gserver.kafka_address})
    for f in admin.create_topics([NewTopic("qa15", 2, 1)]).values():
        f.result(10)
    members = []
    try:
        # a stopped member and a new one joining: the stopped one misses the rebalance deadline
        # (its session, 60 s, is longer than the group's rebalance timeout, the members' longest: 6 s)
        stopped = Member(gserver, "aiokafka", "g-rebalance", session=60_000, rebalance=2_000)
        members.append(stopped)
        assert stopped.line() == "READY"
        _, (stopped_id,) = describe(admin, "g-rebalance")
        stopped.proc.send_signal(signal.SIGSTOP)
        joiner = Member(gserver, "confluent", "g-rebalance", session=SESSION, rebalance=SESSION)
        members.append(joiner)
        assert joiner.line() == "READY"
        _, (joiner_id,) = wait_for(lambda: (lambda d: d if "STABLE" in d[0] and stopped_id not in d[1] else None)(
            describe(admin, "g-rebalance")), DEADLINE_S, "the rebalance without the stopped member")
        # a killed member: its session runs out
        joiner.proc.kill()
        joiner.proc.wait()
        wait_for(lambda: "EMPTY" in describe(admin, "g-rebalance")[0], DEADLINE_S, "the killed member's session to end")
        # members that close send LeaveGroup: nothing is logged for them
        leavers = [Member(gserver, lib, f"g-leave-{lib}", session=SESSION, rebalance=SESSION) for lib in ("confluent", "aiokafka")]
        members += leavers
        for m in leavers:
            assert m.line() == "READY"
            m.proc.send_signal(signal.SIGTERM)
            assert m.line() == "CLOSED"
            assert m.proc.wait() == 0
        for lib in ("confluent", "aiokafka"):
            # (a member removed by its session instead would be logged before the group is Empty)
            wait_for(lambda: "EMPTY" in describe(admin, f"g-leave-{lib}")[0], DEADLINE_S, f"g-leave-{lib} empty")
        got = sorted((e["group"], e["member"], e["why"]) for e in timed_out(gserver))
        assert got == sorted([("g-rebalance", stopped_id, "rebalance"), ("g-rebalance", joiner_id, "session")]), got
    finally:
        for m in members:
            m.end()
