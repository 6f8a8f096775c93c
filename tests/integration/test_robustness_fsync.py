"""SIGKILL crash loops with ``enforce_fsync`` on: every acknowledged message survives.

The acknowledgement of a send to an ``enforce_fsync`` topic waits for the group
commit's fdatasync (storage.local.flusher), which runs off the event loop while
other appends keep being accepted. These loops check that the asynchronous path
acknowledges nothing that is not in the log, in order, at its offset: official
SDK producers (as in test_robustness_crash) and a confluent-kafka producer with
acks=all, killed at random moments and restarted over the same data directory.
(A process kill keeps the page cache, so what these prove is the ack path; the
fdatasync itself is covered in tests/unit/storage/test_flusher.py.)

A failing disk (an ext4 on a loop device whose backing store runs out, so
fdatasync returns EIO; see tests/unit/storage/failing_disk.py) under a real
server: the produce whose sync failed is answered with an error, never an
acknowledgement, and so is every later one to that partition.
"""

from __future__ import annotations

import random
import sys
import threading
from pathlib import Path

import apache_iggy as ig
import pytest

from hw_server import ServerProcess, free_port
from kafka_wire import KafkaWire, record_batch
from test_kafka_wire import produce
from test_robustness_crash import MIB, TOPICS, kill_restart_rounds
from test_robustness_wire import healthy, run, sdk_client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "storage"))
from failing_disk import failing_disk  # noqa: E402

pytestmark = pytest.mark.slow  # a file of long tests: handed out first (tests/conftest.py)

KAFKA_STORAGE_ERROR = 56

FSYNC = {"enforce_fsync": "true"}


async def _fsync_topics(server, stream: str, topics: dict[str, int], **extra) -> None:
    c = await sdk_client(server)
    await c.create_stream(stream)
    for name, partitions in topics.items():
        await c.create_topic(stream, name, partitions, options=FSYNC, **extra.get(name, {}))
        topic = await c.get_topic(stream, name)
        assert topic.options.to_scalar_dict()["enforce_fsync"] is True  # the path under test is on


@pytest.mark.slow
def test_sigkill_loop_with_enforce_fsync_loses_no_acknowledged_message(fresh_server):
    run(_fsync_topics(fresh_server, "crash", TOPICS,
                      prealloc={"segment_size": MIB, "preallocate_segments": True}))
    kill_restart_rounds(fresh_server, random.Random(20261130))


async def _read_kafka_topic(server, topic: str) -> dict[int, bytes]:
    c = await sdk_client(server)
    out: dict[int, bytes] = {}
    offset = 0
    while True:
        got = await c.poll_messages("kafka", topic, consumer=ig.Consumer.Single("audit"),
                                    polling_strategy=ig.PollingStrategy.Offset(offset), count=5000,
                                    auto_commit=False, partition_id=0)
        if not got:
            return out
        for m in got:
            out[m.offset()] = m.payload()
        offset = got[-1].offset() + 1


@pytest.mark.slow
def test_sigkill_loop_with_kafka_acks_all_and_enforce_fsync(fresh_server):
    from confluent_kafka import Producer

    run(_fsync_topics(fresh_server, "kafka", {"durable": 1}))
    rng = random.Random(56)
    acked: dict[int, bytes] = {}
    for round_ in range(4):
        kill_after = rng.randint(2_000, 20_000)
        killed = threading.Event()
        lock = threading.Lock()
        before = len(acked)

        def delivered(err, msg):
            if err is not None:
                return
            with lock:
                assert msg.offset() not in acked, "an offset was acknowledged twice"
                acked[msg.offset()] = msg.value()
                if len(acked) - before >= kill_after:
                    killed.set()

        p = Producer({"bootstrap.servers": fresh_server.kafka_address, "acks": "all", "linger.ms": 2,
                      "retries": 0, "message.timeout.ms": 20_000})
        i = 0
        while not killed.is_set() and i < 400_000:
            try:
                p.produce("durable", b"r%d-%d-" % (round_, i) + rng.randbytes(rng.randint(0, 300)),
                          partition=0, on_delivery=delivered)
                i += 1
            except BufferError:
                p.poll(0.05)
            p.poll(0)
        assert killed.is_set(), "the producer never reached the kill point"
        fresh_server.kill()
        p.purge(in_queue=True, in_flight=True)  # what was not acknowledged is given up
        p.flush(10)
        fresh_server.start()
        stored = run(_read_kafka_topic(fresh_server, "durable"))
        assert sorted(stored) == list(range(len(stored))), "offsets not contiguous"
        missing = [o for o in acked if o not in stored]
        altered = [o for o in acked if o in stored and stored[o] != acked[o]]
        assert not missing and not altered, f"{len(missing)} acknowledged lost, {len(altered)} altered"
    healthy(fresh_server)


@pytest.fixture
def server_on_failing_disk(tmp_path):
    with failing_disk(tmp_path) as mnt:
        s = ServerProcess(mnt / "data", free_port(), free_port())
        s.start()
        try:
            yield s
        finally:
            if s.proc is not None:
                s.kill()  # a clean stop would try to sync the failed disk's metadata


def test_a_failed_fsync_is_never_acknowledged_iggy(server_on_failing_disk):
    server = server_on_failing_disk

    async def go():
        await _fsync_topics(server, "disk", {"t": 1})
        assert await send_until_fenced(await sdk_client(server), "disk", "t") >= 1

    run(go(), 120)


async def send_until_fenced(c: ig.IggyClient, stream: str, topic: str, sends: int = 60) -> int:
    """Send 300 KB batches to partition 0 until one fails (the ~6 MiB behind a failing disk runs
    out well before ``sends``); then every later send fails as well (the partition is fenced)
    and the server keeps serving. Returns how many were acknowledged."""
    payload = random.Random(1).randbytes(3000)
    acked = 0
    for _ in range(sends):
        try:
            await c.send_messages(stream, topic, 0, [ig.SendMessage(payload) for _ in range(100)])
        except RuntimeError:
            break
        acked += 1
    else:
        pytest.fail("no send failed although the disk under the data ran out")
    for _ in range(3):
        with pytest.raises(RuntimeError):
            await c.send_messages(stream, topic, 0, [ig.SendMessage(b"after")])
    await c.ping()
    return acked


def test_a_failed_fsync_is_never_acknowledged_kafka(server_on_failing_disk):
    server = server_on_failing_disk
    run(_fsync_topics(server, "kafka", {"disk": 1}))
    wire = KafkaWire(server.kafka_address)
    values = [random.Random(2).randbytes(3000) for _ in range(100)]
    codes = []
    for _ in range(60):  # acks=-1, 300 KB a request, on one connection
        r = produce(wire, "disk", record_batch(values))
        codes.append(r.error_code)
        if r.error_code:
            break
    assert codes[-1] == KAFKA_STORAGE_ERROR, codes  # the one whose sync failed: not acknowledged
    assert set(codes[:-1]) == {0}
    wire.close()
