"""A real disk running full under a real ``headwater serve``, and coming back.

The data directory is a size-limited tmpfs this test mounts itself
(``mount -t tmpfs -o size=8m``; root needed, else the test is skipped and
says why) and always unmounts. A ballast file on the same tmpfs takes all
but a few hundred KiB; the apache-iggy SDK, confluent-kafka, kafka-python and
raw frames then produce until the filesystem says ENOSPC. Expected:

- Iggy: 4006 CannotSaveMessagesToSegment for a refused append, 10006
  CannotWriteToFile for a refused metadata write (docs/gaps.md); Kafka: 56
  KAFKA_STORAGE_ERROR, and DescribeLogDirs reports the directory offline (56)
  with the volume's total and usable bytes (v4).
- Every acknowledged message reads back byte-identical, while full too;
  a refused metadata change (create stream or topic, store offset) leaves
  nothing behind (a refused CreateTopic is Iggy 3000 CannotCreatePartition).
- Deleting the ballast brings writes back without a restart; a restart then
  finds nothing to repair.
- The log says ``storage writes failing`` once per episode (error level) and
  ``storage writes succeed again`` when it ends, and holds no traceback.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import apache_iggy as ig
import pytest

from hw_server import ServerProcess, free_port
from headwater.codec import batch as batch_codec
from headwater.codec.iggy.codes import ConsumerKind
from headwater.codec.iggy.commands import messages as wm
from headwater.codec.iggy.commands import offsets as wo
from headwater.codec.iggy.primitives import Consumer, Partitioning
from kafka_wire import KafkaWire, record_batch
from test_iggy_raw import RawConnection
from test_kafka_wire import create_topic, metadata_request, produce, req
from test_robustness_wire import run, sdk_client

CANNOT_SAVE_MESSAGES, CANNOT_WRITE_TO_FILE = 4006, 10006  # Iggy codes (docs/gaps.md)
KAFKA_STORAGE_ERROR = 56
DESCRIBE_LOG_DIRS, METADATA = 35, 3
STREAM, TOPIC, KTOPIC = "full", "t", "kfull"
FAILING, RECOVERED = "storage writes failing", "storage writes succeed again"
PAYLOAD = 1000  # bytes per message, 10 messages per batch


def _mount_tmpfs(directory: str, size: str) -> str | None:
    """Mount a tmpfs of ``size`` on ``directory``; the reason it cannot be done, else None."""
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "mount/umount are not installed"
    if os.geteuid() != 0:
        return "mounting a size-limited tmpfs needs root"
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", directory],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return f"mount -t tmpfs is not permitted here: {r.stderr.strip() or r.returncode}"
    return None


@pytest.fixture
def small_disk_server(tmp_path_factory):
    """A server whose data directory is an 8 MiB tmpfs (its log file lives outside it)."""
    base = tmp_path_factory.mktemp("diskfull")
    data = base / "data"
    data.mkdir()
    reason = _mount_tmpfs(str(data), "8m")
    if reason is not None:
        pytest.skip(reason)
    server = ServerProcess(data, free_port(), free_port())
    try:
        server.start()
        yield server
    finally:
        if server.proc is not None:
            server.stop()
        if subprocess.run(["umount", str(data)]).returncode != 0:
            subprocess.run(["umount", "-l", str(data)])


def usable_bytes(path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def place_ballast(server, leave: int) -> str:
    """Fill the tmpfs with a ballast file until ``leave`` bytes are usable."""
    path = os.path.join(server.data_dir, "ballast.bin")
    chunk = b"\xa5" * (1 << 20)
    with open(path, "wb") as f:
        while (room := usable_bytes(server.data_dir) - leave) > 0:
            f.write(chunk[: min(room, len(chunk))])
            f.flush()
    return path


def message(tag: str, i: int, m: int) -> bytes:
    head = f"{tag}-{i}-{m}-".encode()
    return head + bytes((i * 31 + m * 7 + k) & 0xFF for k in range(PAYLOAD - len(head)))


def episodes_in_log(server) -> list[str]:
    """The episode lines of the log, in order ("failing" / "recovered")."""
    out = []
    for line in server.log().splitlines():
        if FAILING in line:
            out.append("failing")
        elif RECOVERED in line:
            out.append("recovered")
    return out


# --------------------------------------------------------------------------- Iggy side


async def sdk_send_until_refused(server, acked: dict[int, bytes]) -> str:
    """Send 10-message batches until the server refuses one; returns the SDK's error text."""
    c = await sdk_client(server)
    for i in range(2000):
        batch = [message("sdk", i, m) for m in range(10)]
        try:
            r = await c.send_messages(STREAM, TOPIC, 0, [ig.SendMessage(p) for p in batch])
        except RuntimeError as e:
            return str(e)
        base = r.confirmations[0].base_offset
        acked.update({base + m: p for m, p in enumerate(batch)})
    raise AssertionError("the disk never ran full")


async def sdk_poll_all(server, stream: str, topic: str) -> dict[int, bytes]:
    c = await sdk_client(server)
    got: dict[int, bytes] = {}
    while True:
        msgs = await c.poll_messages(
            stream, topic, partition_id=0, consumer=ig.Consumer.Single("reader"),
            polling_strategy=ig.PollingStrategy.Offset(len(got)), count=500, auto_commit=False,
        )
        if not msgs:
            return got
        got.update({m.offset(): m.payload() for m in msgs})


def raw_send(server, payloads: list[bytes]) -> int:
    batch = batch_codec.build_batch([batch_codec.Message(p) for p in payloads])
    with RawConnection(server.iggy_address) as conn:
        conn.login()
        answer = conn.call_request(
            wm.SendMessages(STREAM, TOPIC, Partitioning.by_partition(0), len(payloads), memoryview(batch)))
    assert answer.kind == "reply"
    return answer.status


def raw_store_offsets_until_refused(server) -> tuple[int, int]:
    """Store growing consumer offsets until one is refused: (last stored offset, status)."""
    with RawConnection(server.iggy_address) as conn:
        conn.login()
        for offset in range(1, 5000):
            answer = conn.call_request(wo.StoreConsumerOffset(
                Consumer(ConsumerKind.CONSUMER, "offset-filler-" + "x" * 200), STREAM, TOPIC, 0, offset))
            if answer.status:
                return offset - 1, answer.status
    raise AssertionError("consumer offsets never hit the full disk")


def stored_offset(server) -> int:
    with RawConnection(server.iggy_address) as conn:
        conn.login()
        answer = conn.call_request(wo.GetConsumerOffset(
            Consumer(ConsumerKind.CONSUMER, "offset-filler-" + "x" * 200), STREAM, TOPIC, 0))
    assert answer.status == 0, answer
    return wo.decode_consumer_offset(answer.body).stored_offset


async def create_streams_until_refused(server) -> tuple[list[str], str, str]:
    """Create streams with long names until one is refused: (created, refused name, error)."""
    c = await sdk_client(server)
    created = []
    for i in range(2000):
        name = f"meta-{i}-" + "n" * 200
        try:
            await c.create_stream(name)
        except RuntimeError as e:
            return created, name, str(e)
        created.append(name)
    raise AssertionError("stream creation never hit the full disk")


async def stream_names(server) -> set[str]:
    c = await sdk_client(server)
    return {s.name for s in await c.get_streams()}


# --------------------------------------------------------------------------- Kafka side


def confluent_produce(server, values: list[bytes]) -> list[tuple[int | None, int | None]]:
    """(error code or None, offset) per value, with librdkafka's retries off."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": server.kafka_address, "acks": "all", "enable.idempotence": False,
                  "message.send.max.retries": 0, "linger.ms": 0, "message.timeout.ms": 20000})
    results: list = []

    def report(err, msg):
        results.append((None if err is None else err.code(), None if err is not None else msg.offset()))

    for v in values:
        p.produce(KTOPIC, v, partition=0, on_delivery=report)
        p.flush(20)
    assert len(results) == len(values)
    return results


def kafka_python_produce(server, value: bytes):
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=server.kafka_address, acks="all", enable_idempotence=False, retries=0)
    try:
        return p.send(KTOPIC, value, partition=0).get(timeout=20)
    finally:
        p.close(timeout=5)


def kafka_python_read_all(server) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=server.kafka_address, enable_auto_commit=False, group_id=None)
    try:
        tp = TopicPartition(KTOPIC, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        end = c.end_offsets([tp])[tp]
        out: list[bytes] = []
        while len(out) < end:
            batches = c.poll(timeout_ms=5000)
            assert batches, f"read {len(out)} of {end}"
            out += [r.value for r in batches.get(tp, [])]
        return out
    finally:
        c.close()


def kafka_call(server, api_key: int, version: int, request):
    w = KafkaWire(server.kafka_address)
    try:
        return w.call(api_key, version, request)
    finally:
        w.close()


def describe_log_dirs(server, version: int = 4):
    r = kafka_call(server, DESCRIBE_LOG_DIRS, version, req(DESCRIBE_LOG_DIRS, version, topics=None))
    assert len(r.results) == 1
    return r.results[0]


# --------------------------------------------------------------------------- the run


def test_a_full_disk_refuses_writes_keeps_everything_acknowledged_and_recovers(small_disk_server):
    server = small_disk_server
    acked: dict[int, bytes] = {}
    kafka_acked: list[bytes] = []

    async def setup():
        c = await sdk_client(server)
        await c.create_stream(STREAM)
        await c.create_topic(STREAM, TOPIC, 1)

    run(setup())
    w = KafkaWire(server.kafka_address)
    try:
        assert create_topic(w, KTOPIC).error_code == 0
        w.call(METADATA, 9, metadata_request(9, [KTOPIC]))  # the cluster id is written now, not when full
    finally:
        w.close()
    first = [b"kafka-before-%d-" % i + b"k" * 500 for i in range(5)]
    assert [e for e, _ in confluent_produce(server, first)] == [None] * 5
    kafka_acked += first
    healthy = describe_log_dirs(server)
    assert healthy.error_code == 0 and healthy.log_dir == str(server.data_dir)
    assert 0 < healthy.usable_bytes < healthy.total_bytes <= 8 << 20

    # --- fill: the SDK, then raw Kafka Produce, until the filesystem refuses each ----------
    # (a segment's last page may still hold a small batch: each fills its own partition)
    ballast = place_ballast(server, leave=512 << 10)
    error = run(sdk_send_until_refused(server, acked))
    assert "Cannot save messages to segment" in error, error  # Iggy 4006 in the SDK's words
    assert len(acked) >= 100
    w = KafkaWire(server.kafka_address)
    try:
        for i in range(2000):
            value = b"kafka-fill-%d-" % i + b"f" * 3000
            code = produce(w, KTOPIC, record_batch([value])).error_code
            if code:
                break
            kafka_acked.append(value)
        assert code == KAFKA_STORAGE_ERROR
    finally:
        w.close()
    episodes = episodes_in_log(server)
    assert episodes[-1] == "failing"

    # every later write is refused too (each is larger than any page's slack), logged no more
    assert raw_send(server, [b"raw-while-full" * 100] * 10) == CANNOT_SAVE_MESSAGES
    w = KafkaWire(server.kafka_address)
    try:
        assert produce(w, KTOPIC, record_batch([b"raw" * 1500])).error_code == KAFKA_STORAGE_ERROR
    finally:
        w.close()
    assert confluent_produce(server, [b"c" * 4000] * 3) == [(KAFKA_STORAGE_ERROR, None)] * 3
    from kafka.errors import KafkaStorageError

    with pytest.raises(KafkaStorageError):
        kafka_python_produce(server, b"p" * 4000)
    assert episodes_in_log(server) == episodes  # many refused writes, one error line

    offline = describe_log_dirs(server)
    assert offline.error_code == KAFKA_STORAGE_ERROR and offline.topics == ()
    assert offline.usable_bytes < 64 << 10 and offline.total_bytes == healthy.total_bytes
    assert describe_log_dirs(server, version=1).error_code == KAFKA_STORAGE_ERROR

    # reads go on while full, byte-identical
    assert run(sdk_poll_all(server, STREAM, TOPIC)) == acked
    assert kafka_python_read_all(server) == kafka_acked

    # metadata changes refused whole: no half-made stream, the stored offset unchanged
    created, refused, error = run(create_streams_until_refused(server))
    assert "Cannot write to file" in error, error  # Iggy 10006 in the SDK's words
    assert refused not in run(stream_names(server))
    async def create_topic_while_full():
        c = await sdk_client(server)
        with pytest.raises(RuntimeError, match="Cannot create partition"):  # Iggy 3000, rolled back
            await c.create_topic(STREAM, "refused-topic", 2)
        return {t.name for t in await c.get_topics(STREAM)}

    assert run(create_topic_while_full()) == {TOPIC}
    # no partition of it was left behind (its empty topic directory is swept at the next boot)
    assert glob.glob(os.path.join(server.data_dir, "streams", "0", "topics", "1", "partitions", "*")) == []
    w = KafkaWire(server.kafka_address)
    try:
        assert create_topic(w, "k-refused").error_code == KAFKA_STORAGE_ERROR
        assert w.call(METADATA, 9, metadata_request(9, ["k-refused"], auto=False)).topics[0].error_code == 3
    finally:
        w.close()
    last, status = raw_store_offsets_until_refused(server)
    assert status == CANNOT_WRITE_TO_FILE
    assert stored_offset(server) == last

    # --- free the space: writes resume without a restart ----------------------------------
    os.unlink(ballast)
    more = [message("after", 0, m) for m in range(10)]

    async def send_more():
        c = await sdk_client(server)
        r = await c.send_messages(STREAM, TOPIC, 0, [ig.SendMessage(p) for p in more])
        return r.confirmations[0].base_offset

    base = run(send_more())
    assert base == max(acked) + 1  # nothing refused took an offset
    acked.update({base + m: p for m, p in enumerate(more)})
    after = [b"kafka-after-%d" % i for i in range(3)]
    assert [e for e, _ in confluent_produce(server, after)] == [None] * 3
    kafka_acked += after
    kafka_python_produce(server, b"kafka-python-after")
    kafka_acked.append(b"kafka-python-after")

    async def create_refused():
        c = await sdk_client(server)
        await c.create_stream(refused)

    run(create_refused())
    back = describe_log_dirs(server)
    assert back.error_code == 0 and back.usable_bytes > 4 << 20
    sizes = {t.name: t.partitions[0].partition_size for t in back.topics}
    assert sizes[KTOPIC] > 0
    log = episodes_in_log(server)
    assert log[0] == "failing" and log[-1] == "recovered"
    assert all(a != b for a, b in zip(log, log[1:])), log  # one line per episode start and end

    # --- restart: recovery finds nothing to repair ----------------------------------------
    server.restart()
    assert run(sdk_poll_all(server, STREAM, TOPIC)) == acked
    assert kafka_python_read_all(server) == kafka_acked
    names = run(stream_names(server))
    assert set(created) | {refused, STREAM} <= names
    assert stored_offset(server) == last
    text = server.log()
    assert "recovery changed partition files" not in text
    assert "Traceback" not in text and "handler failed" not in text
