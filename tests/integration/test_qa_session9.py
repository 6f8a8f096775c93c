"""QA, session 9: trying to break what landed this session, on real server processes with real
clients (raw Iggy frames, apache-iggy, confluent-kafka, raw Kafka requests, WebSocket) and files.

- Damaged batches mid-segment: a batch damaged at rest is never stepped over silently. A poll
  by timestamp (whose walk believed the damaged batch's own header before this session's fix)
  and a Kafka ListOffsets by timestamp fail closed or begin at or before the damage; polls from
  every offset of a partition with damaged batches in a sealed segment, at a segment start and
  adjacent in the active segment, cached and evicted; consumers (Iggy auto-commit, a Kafka group
  member) stop at the damage and resume there. A flipped byte in the last batch after a clean
  shutdown is cut at boot (a known gap: xfail).
- SIGTERM under load: pipelining producers and readers, a huge frame sent slowly, peers that
  never read or never close, WebSocket: the server exits 0, no reply is cut, nothing
  acknowledged is lost after a restart.
- Catalog lookups (``Catalog.topic``'s cache): renames, deletes and re-creates by name and id,
  through both protocols, also while producers send by name; Kafka group offsets follow the
  topic, not its old name.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import threading
import time

import apache_iggy as ig
import pytest

from headwater.codec import batch as batch_codec
from headwater.codec.iggy import framing
from headwater.codec.iggy.codes import ConsumerKind, PollingKind
from headwater.codec.iggy.commands import messages as wm
from headwater.codec.iggy.commands.messages import Consumer, PollingStrategy
from kafka_wire import KafkaWire
from test_kafka_transactions import admin_create
from test_robustness_disk import index_positions
from test_robustness_disk_prefix import frames_of, partition_log, stored_batches, value
from kafka_wire import record_batch
from test_kafka_wire import FETCH, fetch_request, produce
from test_robustness_wire import Closed, Raw, healthy, poll_body, polled, run, sdk_client

pytestmark = pytest.mark.slow  # a file of long tests: handed out first (tests/conftest.py)

BATCHES = 40  # per partition, 3 messages each
INVALID_MESSAGE_CHECKSUM = 4027
CORRUPT_MESSAGE = 2
LIST_OFFSETS = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
TOPIC_NOT_FOUND = 2010  # Iggy TopicIdNotFound


async def _fill(server, topic: str, partitions: int) -> tuple[int, int]:
    c = await sdk_client(server)
    for p in range(partitions):
        for b in range(BATCHES):
            await c.send_messages("kafka", topic, p, [ig.SendMessage(value(topic, p, b, m)) for m in range(3)])
    return (await c.get_stream("kafka")).id, (await c.get_topic("kafka", topic)).id


def _base_timestamp(batch: bytes) -> int:
    return batch_codec.read_header(batch).base_timestamp


def _poll_by_timestamp(stream, topic, partition: int, timestamp_us: int, count: int = 100_000) -> bytes:
    return wm.encode_poll_messages(wm.PollMessages(
        Consumer(ConsumerKind.CONSUMER, 1), stream, topic, partition,
        PollingStrategy(PollingKind.TIMESTAMP, timestamp_us), count, False))


@pytest.fixture(scope="module")
def ts_damaged(tmp_path_factory):
    """``ts`` partition 0: batch k's base_timestamp lowered on disk (its highest set bit cleared:
    the batch now looks older than the one before it); partition 1: batch k's batch_length
    damaged (under the 256-byte minimum). Yields (server, k, {partition: batches as stored})."""
    from hw_server import ServerProcess, free_port

    server = ServerProcess(tmp_path_factory.mktemp("qa-ts") / "data", free_port(), free_port()).start()
    try:
        admin_create(server, "ts", partitions=2)
        ids = run(_fill(server, "ts", 2))
        assert server.stop() == 0
        k = BATCHES // 3
        stored = {}
        for p in (0, 1):
            log = partition_log(server, {"ts": ids}, "ts", p)
            batches = stored_batches(log)
            stored[p] = batches
            position, damaged_batch = batches[k]
            assert max(index_positions(log)) > position + len(damaged_batch)  # not walked at boot
            with open(log, "r+b") as f:
                if p == 0:
                    ts = _base_timestamp(damaged_batch)
                    f.seek(position + 16)
                    f.write(struct.pack("<Q", ts & ~(1 << (ts.bit_length() - 1))))
                else:
                    f.seek(position + 32)  # batch_length (u64 at 32..40)
                    f.write(struct.pack("<Q", 100))
        server.start()
        yield server, k, stored
    finally:
        if server.proc is not None:
            assert server.stop() == 0, server.log()


@pytest.mark.parametrize("cache", ["cached", "evicted"])
@pytest.mark.parametrize("partition", [0, 1], ids=["timestamp damaged", "length damaged"])
def test_an_iggy_poll_by_timestamp_never_steps_over_a_damaged_batch(ts_damaged, partition, cache):
    """The timestamps asked for are the damaged batch's own (as written) and one µs past the
    batch before it: the first message at or after either is in the damaged batch, so the answer
    is 4027 (or messages from offset 3k on, whose read then fails): never offsets past it.
    ``evicted``: the pages dropped first, so the walk's bytes are read in by the workers."""
    server, k, stored = ts_damaged
    if cache == "evicted":
        _evict(server, partition)
    true_ts = _base_timestamp(stored[partition][k][1])
    before = _base_timestamp(stored[partition][k - 1][1]) + 1
    with Raw(server.iggy_address) as r:
        r.login()
        for timestamp in (before, true_ts):
            kind, status, body = r.call(100, _poll_by_timestamp("kafka", "ts", partition, timestamp))
            assert kind == "reply", (timestamp, kind, status)
            if status == 0:
                offsets = [o for o, _ in frames_of(wm.decode_poll_reply(body)[1])]
                assert not offsets or offsets[0] <= 3 * k, (
                    f"poll by timestamp {timestamp} stepped over the damaged batch {3 * k}..{3 * k + 2}: "
                    f"answered from offset {offsets[0]}")
            else:
                assert status == INVALID_MESSAGE_CHECKSUM, status
        # a timestamp in the prefix is still served from the prefix
        kind, status, body = r.call(100, _poll_by_timestamp("kafka", "ts", partition, 0))
        assert (kind, status) == ("reply", 0)
        assert [o for o, _ in frames_of(wm.decode_poll_reply(body)[1])] == list(range(3 * k))
    healthy(server)


def _first_record_ms(batch: bytes) -> int:
    h = batch_codec.read_header(batch)
    f = next(iter(batch_codec.iter_frames(batch)))
    return (h.origin_timestamp + f.timestamp_delta) // 1000


@pytest.mark.parametrize("partition", [0, 1], ids=["timestamp damaged", "length damaged"])
def test_kafka_list_offsets_by_timestamp_never_steps_over_a_damaged_batch(ts_damaged, partition):
    """ListOffsets for the damaged batch's first record time: CORRUPT_MESSAGE, or an offset at or
    before the damaged batch; the max timestamp (-3) of a partition whose scan reaches the damage
    is CORRUPT_MESSAGE too (not the prefix's newest record, as if the rest did not exist). The
    other partition of the same request is answered."""
    from test_robustness_kafka_fetch import list_offsets

    server, k, stored = ts_damaged
    target = _first_record_ms(stored[partition][k][1])
    w = KafkaWire(server.kafka_address)
    try:
        (error, offset, _), = list_offsets(w, "ts", [(partition, target)])
        assert error == CORRUPT_MESSAGE or (error == 0 and 0 <= offset <= 3 * k), (error, offset)
        answers = list_offsets(w, "ts", [(partition, -3), (1 - partition, 0)], version=7)
        assert answers[0][0] == CORRUPT_MESSAGE, answers
        assert answers[1][:2] == (0, 0), answers
    finally:
        w.close()


SEG_BATCHES = 125
BIG = 10_000  # payload bytes: 3 messages a batch, about 30 KB a batch, 1 MiB segments


def big_value(p: int, b: int, m: int) -> bytes:
    return (b"seg-p%d-b%d-m%d-" % (p, b, m)).ljust(BIG, b"s")


@pytest.fixture(scope="module")
def segments_damaged(tmp_path_factory):
    """Stream ``segs``, topic ``t`` (1 MiB segments, 2 partitions, 125 batches of 3 messages each,
    so 3+ segments). Partition 0: damaged batches in the middle of sealed segment 0 (payload), the
    first batch of segment 1 (its header's base_timestamp), and two adjacent batches in the middle
    of the last segment. Partition 1: its first batch (offset 0). Yields (server, {batch index: damaged}, batches as
    stored [(segment, batch bytes)])."""
    from hw_server import ServerProcess, free_port

    server = ServerProcess(tmp_path_factory.mktemp("qa-segs") / "data", free_port(), free_port()).start()
    try:
        async def fill():
            c = await sdk_client(server)
            await c.create_stream("segs")
            await c.create_topic("segs", "t", 2, segment_size=1 << 20)
            for p in (0, 1):
                for b in range(SEG_BATCHES):
                    await c.send_messages("segs", "t", p, [ig.SendMessage(big_value(p, b, m)) for m in range(3)])
            return (await c.get_stream("segs")).id, (await c.get_topic("segs", "t")).id

        stream, topic = run(fill(), 120)
        assert server.stop() == 0
        import glob

        d = os.path.join(server.data_dir, "streams", str(stream), "topics", str(topic), "partitions", "0")
        logs = sorted(glob.glob(os.path.join(d, "*.log")))
        assert len(logs) >= 3, logs
        layout = []  # (log, position, batch) of every batch, in offset order
        for log in logs:
            layout += [(log, pos, b) for pos, b in stored_batches(log)]
        assert len(layout) == SEG_BATCHES
        firsts = [i for i, (log, _, _) in enumerate(layout) if i == 0 or layout[i - 1][0] != log]
        damaged = {firsts[0] + 10: "payload", firsts[1]: "header", firsts[-1] + 5: "payload",
                   firsts[-1] + 6: "payload"}
        for i, how in damaged.items():
            log, pos, b = layout[i]
            # not walked at boot: an index entry after it in its segment
            assert max(index_positions(log)) > pos + len(b), (i, how)
            with open(log, "r+b") as f:
                f.seek(pos + (16 + 3 if how == "header" else 256 + 48 + 100))
                byte = f.read(1)[0]
                f.seek(pos + (16 + 3 if how == "header" else 256 + 48 + 100))
                f.write(bytes([byte ^ 0x5A]))
        # partition 1: its very first batch (offsets 0..2), a payload byte
        first = sorted(glob.glob(os.path.join(d[:-1] + "1", "*.log")))[0]
        with open(first, "r+b") as f:
            f.seek(256 + 48 + 100)
            byte = f.read(1)[0]
            f.seek(256 + 48 + 100)
            f.write(bytes([byte ^ 0x5A]))
        server.start()
        yield server, damaged, [b for _, _, b in layout]
    finally:
        if server.proc is not None:
            assert server.stop() == 0, server.log()


def _evict(server, partition: int = 0) -> None:
    """Drop the segment files of every topic's partition ``partition`` from the page cache (the
    pages are clean after a restart)."""
    import glob

    for path in glob.glob(str(server.data_dir / "streams" / "*" / "topics" / "*" / "partitions" / str(partition)
                              / "*.log")):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


@pytest.mark.parametrize("cache", ["cached", "evicted"])
def test_every_start_offset_over_several_damaged_batches_and_segments(segments_damaged, cache):
    """A raw poll (count 40) from every offset of a partition with damaged batches in a sealed
    segment, at a segment's start and two adjacent ones in the active segment: from a damaged
    batch, 4027; from anywhere else exactly the messages from there up to the count or to the next
    damaged batch (never past it, never altered, never empty before it). ``evicted``: the files'
    pages are dropped from the page cache before each poll, so it is served by the catch-up path
    (chunks read by the worker threads, joined across chunk edges)."""
    server, damaged, batches = segments_damaged
    offsets = [(3 * b + m, big_value(0, b, m)) for b in range(SEG_BATCHES) for m in range(3)]
    bad = {3 * b + m for b in damaged for m in range(3)}
    with Raw(server.iggy_address) as r:
        r.login()
        for start in range(3 * SEG_BATCHES):
            if cache == "evicted":
                _evict(server)
            kind, status, body = r.call(100, poll_body("segs", "t", 0, start, 40))
            assert kind == "reply", start
            if start in bad:
                assert status == INVALID_MESSAGE_CHECKSUM, (start, status)
                continue
            assert status == 0, (start, status)
            want = []
            for o, v in offsets[start:start + 40]:
                if o in bad:
                    break
                want.append((o, v))
            assert frames_of(wm.decode_poll_reply(body)[1]) == want, start
    healthy(server)


def test_an_iggy_consumer_following_with_auto_commit_stops_at_each_damage(segments_damaged):
    """Polls NEXT with auto-commit (a consumer, then a consumer group member): each gets the
    messages before the first damaged batch, then 4027 on every poll, its stored offset never
    past the damage (a restart of the poller resumes there, not after it)."""
    server, damaged, _ = segments_damaged
    first_bad = 3 * min(damaged)

    async def follow(consumer, polls: int):
        c = await sdk_client(server)
        got, errors = [], []
        for _ in range(polls):
            try:
                msgs = await c.poll_messages("segs", "t", consumer=consumer, partition_id=0,
                                             polling_strategy=ig.PollingStrategy.Next(), count=7, auto_commit=True)
            except RuntimeError as e:
                errors.append(str(e))
                continue
            assert msgs or not got or got[-1] < first_bad - 1, "an empty answer before the damage"
            got += [m.offset() for m in msgs]
        return got, errors

    for attempt in range(2):  # the second run resumes from the stored offset
        got, errors = run(follow(ig.Consumer.Single(77), 60 if attempt == 0 else 5))
        if attempt == 0:
            assert got == list(range(first_bad)), got[-5:]
        else:
            assert got == [], got
        assert errors and all("4027" in e or "checksum" in e.lower() for e in errors), errors[:2]


def test_a_kafka_group_member_commits_up_to_the_damage_and_resumes_there(ts_damaged):
    """confluent-kafka, subscribed in a group, committing each message: it gets the messages before
    the damaged batch of ``ts`` partition 0 then CORRUPT_MESSAGE; the group's committed offset is
    the damaged batch's first offset; a new member of the group resumes there and gets the error
    again, never the messages after the damage; partition 1 (damaged too) the same."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    server, k, _ = ts_damaged

    def member():
        return Consumer({"bootstrap.servers": server.kafka_address, "group.id": "qa-damage",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 0,
                         "session.timeout.ms": 6000})

    for round_ in range(2):
        c = member()
        try:
            c.subscribe(["ts"])
            got: dict[int, list[int]] = {0: [], 1: []}
            errors: dict[int, int] = {}
            for _ in range(300):  # polls, not a clock: ends when both partitions reported their error
                msg = c.poll(2.0)
                if msg is None:
                    continue
                if msg.error() is not None:
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        errors[msg.partition()] = msg.error().code()
                else:
                    got[msg.partition()].append(msg.offset())
                    c.commit(message=msg, asynchronous=False)
                if len(errors) == 2:
                    break
            assert errors == {0: CORRUPT_MESSAGE, 1: CORRUPT_MESSAGE}, (errors, {p: v[-3:] for p, v in got.items()})
            for p in (0, 1):
                assert got[p] == (list(range(3 * k)) if round_ == 0 else []), (round_, p, got[p][-5:])
            committed = c.committed([TopicPartition("ts", 0), TopicPartition("ts", 1)], timeout=15)
            assert [tp.offset for tp in committed] == [3 * k, 3 * k]
        finally:
            c.close()


def test_a_damaged_first_batch_fails_every_read_that_begins_in_it(segments_damaged):
    """Partition 1's first batch damaged: First, Offset 0..2 and Timestamp 0 polls get 4027 (never an
    empty success: the partition holds data); Offset 3 on is served whole."""
    server, _, _ = segments_damaged
    with Raw(server.iggy_address) as r:
        r.login()
        first = wm.encode_poll_messages(wm.PollMessages(
            Consumer(ConsumerKind.CONSUMER, 1), "segs", "t", 1, PollingStrategy(PollingKind.FIRST, 0), 10, False))
        for body in (first, _poll_by_timestamp("segs", "t", 1, 0, 10),
                     *(poll_body("segs", "t", 1, o, 10) for o in range(3))):
            assert r.call(100, body)[:2] == ("reply", INVALID_MESSAGE_CHECKSUM)
        kind, status, body = r.call(100, poll_body("segs", "t", 1, 3, 10))
        assert (kind, status) == ("reply", 0)
        assert frames_of(wm.decode_poll_reply(body)[1]) == [(3 * b + m, big_value(1, b, m))
                                                            for b in range(1, 5) for m in range(3)][:10]


# --------------------------------------------------------------------------- SIGTERM under load

class _Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.acked: dict[int, list[bytes]] = {}
        self.problems: list[str] = []

    def ack(self, partition: int, payloads: list[bytes]) -> None:
        with self.lock:
            self.acked.setdefault(partition, []).extend(payloads)

    def problem(self, what: str) -> None:
        with self.lock:
            self.problems.append(what)


def _whole_reply(r: Raw, who: str, rec: _Recorder) -> tuple | None:
    """The next reply, or None once the server ended the connection: at a frame's edge is
    fine; inside a frame (a reply cut) or a reset is recorded as a problem."""
    try:
        return r.read()
    except Closed as e:
        if str(e) != f"closed after 0 of {framing.HEADER_SIZE} bytes":  # (not at a header's start)
            rec.problem(f"{who}: a reply cut: {e}")
    except OSError as e:
        rec.problem(f"{who}: {e!r}")
    return None


def _iggy_pipelining_producer(server, topic: str, partition: int, who: int, rec: _Recorder, stop: threading.Event):
    """Sends windows of 8 pipelined SendMessages, then reads their replies; a reply counts as an
    ack only when read whole with status 0. Ends when the server ends the connection."""
    try:
        r = Raw(server.iggy_address, timeout=30)
        r.login()
    except (OSError, Closed):
        return
    n = 0
    try:
        while not stop.is_set():
            window = []
            frames = []
            for _ in range(8):
                payloads = [b"iggy-%d-%d-%d" % (who, n, m) + b"." * 200 for m in range(5)]
                n += 1
                window.append(payloads)
                frames.append(r.frame(*_send_request("kafka", topic, partition, payloads)))
            try:
                r.send(b"".join(frames))
            except OSError:
                return  # (replies of earlier windows were read: nothing in flight is counted)
            for payloads in window:
                reply = _whole_reply(r, f"iggy {who}", rec)
                if reply is None:
                    return
                if reply[:2] == ("reply", 0):
                    rec.ack(partition, payloads)
    finally:
        r.close()


def _send_request(stream, topic, partition, payloads) -> tuple[int, bytes]:
    from headwater.codec.iggy.commands import encode_request_body
    from headwater.codec.iggy.primitives import Partitioning

    batch = batch_codec.build_batch(batch_codec.Message(p) for p in payloads)
    code, body = encode_request_body(
        wm.SendMessages(stream, topic, Partitioning.by_partition(partition), len(payloads), memoryview(batch)))
    return int(code), body


def _iggy_pipelining_reader(server, who: int, rec: _Recorder, stop: threading.Event):
    """Pipelines 4 polls of the whole of partition 1 (about 5 MB each) and reads the replies:
    every reply begun must arrive whole and hold what the partition held."""
    try:
        r = Raw(server.iggy_address, timeout=30)
        r.login()
    except (OSError, Closed):
        return
    poll = r.frame(100, poll_body("kafka", "sigterm", 1, 0, 500))
    try:
        while not stop.is_set():
            try:
                r.send(poll * 4)
            except OSError:
                return
            for _ in range(4):
                reply = _whole_reply(r, f"reader {who}", rec)
                if reply is None:
                    return
                if reply[:2] == ("reply", 0):
                    first = frames_of(wm.decode_poll_reply(reply[2])[1])[:500]
                    if [v for _, v in first] != [b"r" * 10_000] * 500:
                        rec.problem(f"reader {who}: a poll reply altered")
                        return
    finally:
        r.close()


def _slow_huge_frame(server, stop: threading.Event):
    """An Iggy frame announcing 30 MB, its bytes sent a few at a time."""
    try:
        r = Raw(server.iggy_address, timeout=30)
        r.login()
        code, body = _send_request("kafka", "sigterm", 0, [b"h" * 1000])
        frame = bytearray(r.frame(code, body))
        struct.pack_into("<I", frame, 48, 30_000_000)
        r.send(bytes(frame[:300]))
        while not stop.is_set():
            r.send(b"\0" * 16)
            time.sleep(0.02)
    except OSError:
        pass


def _iggy_non_reader(server, stop: threading.Event):
    """Pipelines polls of the whole partition and never reads a reply."""
    try:
        r = Raw(server.iggy_address, timeout=30)
        r.login()
        r.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        poll = r.frame(100, poll_body("kafka", "sigterm", 1, 0, 100_000))
        while not stop.is_set():
            r.send(poll * 16)
    except OSError:
        pass


def _kafka_non_reader(server, stop: threading.Event):
    """Pipelines Fetch requests and never reads a response."""
    try:
        w = KafkaWire(server.kafka_address, timeout=30)
        w.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        while not stop.is_set():
            frame, _ = w.frame(FETCH, 4, fetch_request(4, "sigterm", 0))
            w.send_raw(frame * 16)
    except OSError:
        pass


def _kafka_producer(server, rec: _Recorder, stop: threading.Event):
    """confluent-kafka, acks=all: a value counts as acked when its delivery report says so."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": server.kafka_address, "acks": "all", "linger.ms": 2,
                  "message.timeout.ms": 5_000, "retries": 0, "enable.idempotence": False,
                  "log_level": 0})

    def delivered(err, msg):
        if err is None:
            rec.ack(100 + msg.partition(), [msg.value()])

    n = 0
    while not stop.is_set():
        try:
            p.produce("sigterm", b"kafka-%d" % n + b"." * 100, partition=2, on_delivery=delivered)
            n += 1
        except BufferError:
            pass
        p.poll(0.001)
    p.flush(10)


@pytest.mark.parametrize("fsync", [False, True], ids=["default", "enforce_fsync"])
def test_sigterm_under_load_exits_and_loses_nothing_acknowledged(fresh_server, fsync):
    """At SIGTERM: 4 Iggy clients pipelining sends, 2 pipelining 5 MB polls, a confluent-kafka producer (acks=all), a
    client sending a 30 MB frame a few bytes at a time, an Iggy and a Kafka client pipelining
    reads they never read the answers to, an idle peer that never closes. The server exits 0
    (the harness kills it after 15 s), no reply read is cut, and after a restart every message
    acknowledged is stored, once, in order, unaltered."""
    server = fresh_server
    if fsync:  # every answer waits for the group commit's fdatasync
        admin_create(server, "first")  # (the kafka stream exists from the first Kafka topic on)

        async def create():
            c = await sdk_client(server)
            await c.create_topic("kafka", "sigterm", 3, options={"enforce_fsync": "true"})

        run(create())
    else:
        admin_create(server, "sigterm", partitions=3)
    with Raw(server.iggy_address) as r:  # something for the readers to read
        r.login()
        for _ in range(50):
            assert r.call(*_send_request("kafka", "sigterm", 1, [b"r" * 10_000] * 10))[:2] == ("reply", 0)
    rec = _Recorder()
    stop = threading.Event()
    threads = [threading.Thread(target=_iggy_pipelining_producer, args=(server, "sigterm", p, who, rec, stop))
               for who, p in enumerate((0, 0, 1, 1))]
    threads += [threading.Thread(target=_iggy_pipelining_reader, args=(server, who, rec, stop)) for who in range(2)]
    threads += [threading.Thread(target=f, args=(server, stop)) for f in (_slow_huge_frame, _iggy_non_reader,
                                                                         _kafka_non_reader)]
    threads.append(threading.Thread(target=_kafka_producer, args=(server, rec, stop)))
    idle = socket.create_connection(("127.0.0.1", server.tcp_port))
    for t in threads:
        t.daemon = True
        t.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until every producer has something acknowledged
            with rec.lock:
                if all(rec.acked.get(p) for p in (0, 1, 102)):
                    break
            time.sleep(0.05)
        rc = server.stop()
        stop.set()
        for t in threads:
            t.join(60)
        assert rc == 0, server.log()[-3000:]
        assert not rec.problems, rec.problems
        assert "Traceback" not in server.log(), server.log()[-4000:]
    finally:
        stop.set()
        idle.close()
    server.start()
    with Raw(server.iggy_address) as r:
        r.login()
        for p in (0, 1, 2):
            status, msgs = polled(r, "kafka", "sigterm", p)
            assert status == 0
            stored = [v for _, v in msgs]
            acked = rec.acked.get(p if p < 2 else 100 + p, [])
            if p == 1:
                stored = [v for v in stored if not v.startswith(b"rrrr")]
            got = set(stored)
            missing = [v for v in acked if v not in got]
            assert not missing, f"partition {p}: {len(missing)} of {len(acked)} acknowledged messages lost"
            assert len(got) == len(stored), f"partition {p}: duplicates"
            for who in range(4):  # each writer's own messages in the order it sent them
                mine = [v for v in stored if v.startswith(b"iggy-%d-" % who)]
                assert mine == sorted(mine, key=lambda v: tuple(int(x) for x in v.split(b".")[0].split(b"-")[2:]))
    healthy(server)


# --------------------------------------------------------------------------- catalog lookups

async def _poll_all(c, stream, topic, partition: int = 0) -> list[bytes]:
    msgs = await c.poll_messages(stream, topic, consumer=ig.Consumer.Single(1), partition_id=partition,
                                 polling_strategy=ig.PollingStrategy.First(), count=10_000, auto_commit=False)
    return [m.payload() for m in msgs]


async def _refused(coro) -> str:
    try:
        await coro
    except RuntimeError as e:
        return str(e)
    raise AssertionError("accepted")


def test_names_and_ids_follow_renames_deletes_and_re_creates_across_protocols(fresh_server):
    """Every kind of lookup the cache may hold ((name|id, name|id)) is made, then the catalog
    changes under it (through the SDK and through Kafka): a send or poll by the old name or id
    never reaches the topic that went; the new topic of the same name gets only its own."""
    from confluent_kafka.admin import AdminClient

    server = fresh_server

    async def iggy_side():
        c = await sdk_client(server)
        await c.create_stream("cat")
        await c.create_topic("cat", "a", 1)
        a_id = (await c.get_topic("cat", "a")).id
        s_id = (await c.get_stream("cat")).id
        kinds = (("cat", "a"), (s_id, "a"), ("cat", a_id), (s_id, a_id))
        for stream, topic in kinds:  # all four kinds cached
            await c.send_messages(stream, topic, 0, [ig.SendMessage(b"first")])
            assert await _poll_all(c, stream, topic)
        await c.update_topic("cat", "a", "b")  # rename a -> b: the old name is gone
        for stream in ("cat", s_id):
            await _refused(c.send_messages(stream, "a", 0, [ig.SendMessage(b"x")]))
            await _refused(_poll_all(c, stream, "a"))
        await c.create_topic("cat", "a", 1)  # a new a: the name reaches it only
        new_a = (await c.get_topic("cat", "a")).id
        assert new_a != a_id
        await c.send_messages("cat", "a", 0, [ig.SendMessage(b"to-new-a")])
        await c.send_messages(s_id, a_id, 0, [ig.SendMessage(b"to-b-by-id")])
        assert await _poll_all(c, "cat", "b") == [b"first"] * 4 + [b"to-b-by-id"]
        assert await _poll_all(c, "cat", "a") == [b"to-new-a"]
        await c.delete_topic(s_id, a_id)  # b, by id
        for stream in ("cat", s_id):
            await _refused(c.send_messages(stream, a_id, 0, [ig.SendMessage(b"x")]))
            await _refused(c.send_messages(stream, "b", 0, [ig.SendMessage(b"x")]))
        await c.delete_stream("cat")
        for stream, topic in kinds + (("cat", new_a), (s_id, new_a)):
            await _refused(c.send_messages(stream, topic, 0, [ig.SendMessage(b"x")]))
            await _refused(_poll_all(c, stream, topic))
        await c.create_stream("cat")
        await c.create_topic("cat", "a", 1)
        assert await _poll_all(c, "cat", "a") == []  # nothing of the old stream's topics
        await c.send_messages("cat", "a", 0, [ig.SendMessage(b"again")])
        assert await _poll_all(c, "cat", "a") == [b"again"]

    run(iggy_side())

    # Kafka names: looked up by a Kafka produce, then the topic renamed through the SDK, then a
    # topic of the old name created through Kafka
    admin_create(server, "k1")
    w = KafkaWire(server.kafka_address)
    try:
        assert produce(w, "k1", record_batch([b"kafka-1"])).error_code == 0

        async def rename_k1():
            c = await sdk_client(server)
            await c.update_topic("kafka", "k1", "k1-renamed")
            return await _poll_all(c, "kafka", "k1-renamed")

        assert run(rename_k1()) == [b"kafka-1"]
        assert produce(w, "k1", record_batch([b"kafka-2"])).error_code == UNKNOWN_TOPIC_OR_PARTITION
        admin_create(server, "k1")
        assert produce(w, "k1", record_batch([b"kafka-3"])).error_code == 0

        async def read_both():
            c = await sdk_client(server)
            return await _poll_all(c, "kafka", "k1-renamed"), await _poll_all(c, "kafka", "k1")

        assert run(read_both()) == ([b"kafka-1"], [b"kafka-3"])
        # deleted through Kafka, while the SDK had it cached by name
        a = AdminClient({"bootstrap.servers": server.kafka_address})
        for f in a.delete_topics(["k1-renamed"]).values():
            f.result(15)

        async def gone():
            c = await sdk_client(server)
            await _refused(c.send_messages("kafka", "k1-renamed", 0, [ig.SendMessage(b"x")]))
            await _refused(_poll_all(c, "kafka", "k1-renamed"))

        run(gone())
    finally:
        w.close()
    healthy(server)


def _admin(r: Raw, request) -> int:
    from headwater.codec.iggy.commands import encode_request_body

    code, body = encode_request_body(request)
    kind, status, _ = r.call(int(code), body)
    assert kind == "reply"
    return status


def test_producers_by_name_during_renames_and_deletes_land_in_order(fresh_server):
    """While one client keeps renaming ``live`` away (to ``gone-j``), creating a new ``live``, and
    deleting older ``gone`` topics, two Iggy clients and a Kafka client produce to ``live`` by
    name, one request at a time. Each producer's acknowledged messages must land in incarnations
    in the order it sent them (a stale lookup would put a later message into an older topic), a
    refused send must be TopicNotFound / UNKNOWN_TOPIC_OR_PARTITION, and nothing lands twice."""
    from headwater.codec.iggy.commands import topics as wt

    server = fresh_server
    admin_create(server, "live")
    stop = threading.Event()
    acked: dict[str, list[bytes]] = {"i0": [], "i1": [], "k": []}
    problems: list[str] = []
    deleted: set[str] = set()

    def iggy_producer(name: str):
        with Raw(server.iggy_address, timeout=30) as r:
            r.login()
            n = 0
            while not stop.is_set():
                payload = b"%s-%d" % (name.encode(), n)
                n += 1
                kind, status, _ = r.call(*_send_request("kafka", "live", 0, [payload]))
                if status == 0:
                    acked[name].append(payload)
                elif status != TOPIC_NOT_FOUND:
                    problems.append(f"{name}: status {status}")

    def kafka_producer():
        w = KafkaWire(server.kafka_address, timeout=30)
        try:
            n = 0
            while not stop.is_set():
                payload = b"k-%d" % n
                n += 1
                code = produce(w, "live", record_batch([payload])).error_code
                if code == 0:
                    acked["k"].append(payload)
                elif code != UNKNOWN_TOPIC_OR_PARTITION:
                    problems.append(f"kafka: error {code}")
        finally:
            w.close()

    threads = [threading.Thread(target=iggy_producer, args=(n,)) for n in ("i0", "i1")]
    threads.append(threading.Thread(target=kafka_producer))
    for t in threads:
        t.start()
    try:
        with Raw(server.iggy_address, timeout=30) as r:
            r.login()
            for j in range(40):
                time.sleep(0.01)
                assert _admin(r, wt.UpdateTopic("kafka", "live", f"gone-{j:03d}")) == 0
                assert _admin(r, wt.CreateTopic("kafka", 1, "live")) == 0
                if j % 3 == 2:
                    assert _admin(r, wt.DeleteTopic("kafka", f"gone-{j - 1:03d}")) == 0
                    deleted.add(f"gone-{j - 1:03d}")
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not problems, problems[:10]
    with Raw(server.iggy_address) as r:
        r.login()
        names = [f"gone-{j:03d}" for j in range(40)] + ["live"]
        where: dict[bytes, int] = {}
        for i, name in enumerate(names):
            if name in deleted:
                continue
            status, msgs = polled(r, "kafka", name, 0)
            assert status == 0, (name, status)
            for _, v in msgs:
                assert v not in where, f"{v!r} stored twice"
                where[v] = i
    for who, payloads in acked.items():
        incarnations = [where[v] for v in payloads if v in where]
        assert incarnations == sorted(incarnations), (who, incarnations)
        assert sum(1 for v in payloads if v in where) > 0
    healthy(server)


def test_sigterm_with_many_peers_that_do_not_read_exits_cleanly(fresh_server):
    """60 Iggy connections and 40 Kafka connections that pipelined reads and never read the
    answers (their receive buffers full, the server's writes stalled), a WebSocket client that
    connected, plus a second SIGTERM during the shutdown: the server still
    exits 0 (the harness kills it after 15 s) with no traceback, and restarts with its data."""
    from websockets.sync.client import connect as ws_connect

    server = fresh_server
    admin_create(server, "nr", partitions=1)
    with Raw(server.iggy_address) as r:
        r.login()
        for _ in range(20):
            assert r.call(*_send_request("kafka", "nr", 0, [b"n" * 50_000] * 4))[:2] == ("reply", 0)
    socks = []
    for i in range(60):
        r = Raw(server.iggy_address, timeout=30)
        r.login()
        r.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        socks.append((r.sock, r.frame(100, poll_body("kafka", "nr", 0, 0, 100_000)) * 8))
    for i in range(40):
        w = KafkaWire(server.kafka_address, timeout=30)
        w.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        socks.append((w.sock, w.frame(FETCH, 4, fetch_request(4, "nr", 0))[0] * 8))
    for s, blob in socks:  # as much as each socket takes without blocking
        s.setblocking(False)
        try:
            s.send(blob)
        except BlockingIOError:
            pass
    try:
        with ws_connect(f"ws://127.0.0.1:{server.websocket_port}/", open_timeout=20, max_size=None):
            time.sleep(1)  # (the replies are written by now, or being written: either way the checks hold)
            server.proc.send_signal(signal.SIGTERM)
            time.sleep(0.2)
            rc = server.stop()
        assert rc == 0, server.log()[-3000:]
        assert "Traceback" not in server.log(), server.log()[-4000:]
    finally:
        for s, _ in socks:
            s.close()
    server.start()
    with Raw(server.iggy_address) as r:
        r.login()
        status, msgs = polled(r, "kafka", "nr", 0)
        assert status == 0 and len(msgs) == 80
    healthy(server)


def test_kafka_group_offsets_follow_the_topic_not_its_old_name(fresh_server):
    """A group's committed offset on ``gc``: after the topic is renamed (through the SDK) it is the
    renamed topic's; a new ``gc`` starts with none; after a Kafka delete and re-create, none."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    server = fresh_server
    admin_create(server, "gc")

    def committed(*names):
        c = Consumer({"bootstrap.servers": server.kafka_address, "group.id": "g1", "enable.auto.commit": False,
                      "log_level": 0})
        try:
            return [tp.offset for tp in c.committed([TopicPartition(n, 0) for n in names], timeout=15)]
        finally:
            c.close()

    c = Consumer({"bootstrap.servers": server.kafka_address, "group.id": "g1", "enable.auto.commit": False,
                  "log_level": 0})
    try:
        c.commit(offsets=[TopicPartition("gc", 0, 5)], asynchronous=False)
    finally:
        c.close()

    async def rename():
        cl = await sdk_client(server)
        await cl.update_topic("kafka", "gc", "gc2")

    run(rename())
    admin_create(server, "gc")
    assert committed("gc", "gc2") == [-1001, 5]  # (-1001: librdkafka's "no offset")
    a = AdminClient({"bootstrap.servers": server.kafka_address})
    for f in a.delete_topics(["gc2"]).values():
        f.result(15)
    admin_create(server, "gc2")
    assert committed("gc2") == [-1001]


def test_a_flipped_byte_in_the_last_batch_after_a_clean_shutdown_is_not_cut(fresh_server):
    """The server is stopped cleanly (SIGTERM, exit 0) after every send was acknowledged; one
    payload byte of the partition's last batch is flipped at rest. After the restart the damaged
    batch must fail closed (4027 or a fenced 4011), never be dropped so that the partition reads
    as if its acknowledged messages had never been written."""
    server = fresh_server
    admin_create(server, "tail")

    async def fill():
        c = await sdk_client(server)
        for b in range(20):
            await c.send_messages("kafka", "tail", 0, [ig.SendMessage(b"tail-%d" % b)])
        return (await c.get_stream("kafka")).id, (await c.get_topic("kafka", "tail")).id

    ids = run(fill())
    assert server.stop() == 0
    log = partition_log(server, {"tail": ids}, "tail", 0)
    position, _ = stored_batches(log)[-1]
    with open(log, "r+b") as f:
        f.seek(position + 256 + 48 + 2)
        byte = f.read(1)[0]
        f.seek(position + 256 + 48 + 2)
        f.write(bytes([byte ^ 0xFF]))
    server.start()
    with Raw(server.iggy_address) as r:
        r.login()
        kind, status, body = r.call(100, poll_body("kafka", "tail", 0, 19, 10))
        assert kind == "reply"
        assert status in (INVALID_MESSAGE_CHECKSUM, 4011), (status, frames_of(wm.decode_poll_reply(body)[1])
                                                           if status == 0 else None)
