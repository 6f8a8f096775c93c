"""kafka-python group joins in a loop against one real ``headwater serve``: each round makes a
topic of 2 partitions, writes 20 messages, and starts a fresh group member that must own both
partitions within ``--wait`` seconds, polling with a 300 ms timeout (as
tests/integration/test_kafka_groups_iggy.py does). The server runs with no initial rebalance
delay. A round that fails writes the member's kafka-python debug log and the server log's tail
to ``PREFIX.failN.log``.

By default the member comes from ``tests/integration/kafka_python_group.subscriber`` (it knows
its partitions before it joins); ``--bare`` uses a plain ``KafkaConsumer(topic, group_id=...)``,
which under CPU load now and then loses the rejoin that follows its empty first assignment
(docs/gaps.md, "Kafka consumer groups"). Run it beside CPU burners or pinned to one core with
them, e.g.::

    for i in 1 2 3 4 5 6; do taskset -c 0 python3 -c 'while 1: pass' & done
    taskset -c 0 .venv/bin/python tools/group_join_loop.py --rounds 60 --bare /tmp/joins

Exits 1 when a round failed.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"))
from hw_server import ServerProcess, free_port  # noqa: E402
from kafka_python_group import subscriber  # noqa: E402


class Lines(logging.Handler):
    """The log records of the current round, formatted."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(relativeCreated)9.1f %(threadName)s %(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(self.format(record)[:600])
        except Exception:  # a record that does not format is not worth a failed round
            pass


def one_round(server: ServerProcess, r: int, bare: bool, wait: float) -> tuple[bool, float]:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = f"joins-{r}"
    admin = KafkaAdminClient(bootstrap_servers=server.kafka_address)
    try:
        admin.create_topics([NewTopic(topic, 2, 1)])
    finally:
        admin.close()
    p = KafkaProducer(bootstrap_servers=server.kafka_address)
    try:
        for i in range(20):
            p.send(topic, value=b"m%d" % i, partition=i % 2)
        p.flush(10)
    finally:
        p.close()
    t0 = time.monotonic()
    config = dict(bootstrap_servers=server.kafka_address, group_id="g-" + topic, enable_auto_commit=False,
                  auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=1000)
    c = KafkaConsumer(topic, **config) if bare else subscriber(topic, **config)
    try:
        deadline = time.monotonic() + wait
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(timeout_ms=300)
        return len(c.assignment()) == 2, time.monotonic() - t0
    finally:
        c.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("prefix", help="failed rounds' logs go to PREFIX.failN.log")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--wait", type=float, default=30.0, help="seconds a member gets to own both partitions")
    ap.add_argument("--bare", action="store_true", help="a plain KafkaConsumer, not kafka_python_group.subscriber")
    args = ap.parse_args()
    lines = Lines()
    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    root.addHandler(lines)
    for noisy in ("kafka.protocol", "kafka.net.transport", "kafka.net.selector", "kafka.metrics", "kafka.record"):
        logging.getLogger(noisy).setLevel(logging.INFO)
    base = Path(tempfile.mkdtemp(prefix="group-joins-"))
    server = ServerProcess(base / "data", free_port(), free_port(),
                           extra_env={"HEADWATER_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0"}).start()
    failed, times = 0, []
    try:
        for r in range(args.rounds):
            lines.lines = []
            ok, took = one_round(server, r, args.bare, args.wait)
            times.append(took)
            print(f"round {r}: {'ok' if ok else 'FAILED'} in {took:.2f} s", flush=True)
            if not ok:
                failed += 1
                tail = "\n".join(server.log().splitlines()[-200:])
                Path(f"{args.prefix}.fail{r}.log").write_text("\n".join(lines.lines) + "\n---- server log\n" + tail)
    finally:
        server.stop()
    times.sort()
    print(f"{failed} of {args.rounds} rounds failed; median {times[len(times) // 2]:.2f} s, max {times[-1]:.2f} s "
          f"({'bare KafkaConsumer' if args.bare else 'kafka_python_group.subscriber'})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
