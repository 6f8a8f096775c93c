"""Hostile connections against a real ``headwater serve``, on both listeners (Iggy TCP and Kafka).

Thousands of idle connections, connections past ``max_connections``, frames dripped a byte
a second (slowloris), requests pipelined by a client that never reads, clients closing in
the middle of a big reply, and connections idle past the idle timeout. After (or during)
each, a well-behaved apache-iggy SDK client and a confluent-kafka producer and consumer
still produce and consume. Limits come from ``[tcp]``/``[kafka]`` (``config.py``),
enforced in ``frontends/listener.py``.

Every wait here is bounded, every socket is on 127.0.0.1 and closed in a ``finally``.
"""

from __future__ import annotations

import asyncio
import os
import resource
import secrets
import select
import socket
import struct
import threading
import time
import uuid

import apache_iggy as ig
import pytest

from hw_server import ServerProcess, free_port
from kafka_wire import KafkaWire
from test_kafka_wire import create_topic, fetch_request, metadata_request, produce, record_batch
from test_robustness_wire import Raw, healthy, poll_body, sdk_client

pytestmark = pytest.mark.slow  # a file of long tests: handed out first (tests/conftest.py)

IDLE_CONNECTIONS = 5000
FRAME_RECEIVE_TIMEOUT_S = 2
SEND_STALL_TIMEOUT_S = 3
BUFFER_BYTES = 256 * 1024
READER_LIMIT_BYTES = 1 << 20  # Listener(limit=...): a StreamReader buffers up to 2x this before pausing
FETCH, METADATA, API_VERSIONS = 1, 3, 18
PING, POLL = 1, 100
LISTENERS = ["iggy", "kafka"]


# --------------------------------------------------------------------------- servers and helpers


def module_server(env: dict, scope: str = "module"):
    """A fixture (module-scoped unless ``scope`` says otherwise): a server of its own started
    with ``env``, stopped cleanly at the end."""

    @pytest.fixture(scope=scope)
    def fixture(tmp_path_factory):
        base = tmp_path_factory.mktemp("hostile")
        s = ServerProcess(base / "data", free_port(), free_port(), extra_env=env).start()
        yield s
        if s.proc is not None:
            rc = s.stop()
            assert rc == 0, f"server exited with {rc} on SIGTERM:\n{s.log()[-4000:]}"

    return fixture


@pytest.fixture(scope="module")
def nofile():
    """Room in this process for thousands of sockets (restored afterwards)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = IDLE_CONNECTIONS + 1000
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _hostile_env() -> dict:
    env = {}
    for section in ("TCP", "KAFKA"):
        env.update({
            f"HEADWATER_{section}_MAX_CONNECTIONS": str(IDLE_CONNECTIONS + 200),
            f"HEADWATER_{section}_FRAME_RECEIVE_TIMEOUT_S": str(FRAME_RECEIVE_TIMEOUT_S),
            f"HEADWATER_{section}_SEND_STALL_TIMEOUT_S": str(SEND_STALL_TIMEOUT_S),
            f"HEADWATER_{section}_MAX_CONNECTION_BUFFER_BYTES": str(BUFFER_BYTES),
        })
    return env


# room for 5,000 idle connections per listener; short frame and stall deadlines; a small output bound
hostile = module_server(_hostile_env())
# one per test: a connection another test's clients left closing would take one of its 20 slots
capped = module_server({"HEADWATER_TCP_MAX_CONNECTIONS": "20", "HEADWATER_KAFKA_MAX_CONNECTIONS": "20"}, scope="function")
impatient = module_server({"HEADWATER_TCP_IDLE_TIMEOUT_S": "1.5", "HEADWATER_KAFKA_CONNECTIONS_MAX_IDLE_MS": "1500"})


def port_of(server: ServerProcess, listener: str) -> int:
    return server.tcp_port if listener == "iggy" else server.kafka_port


def connect(port: int, timeout: float = 10.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def close_all(socks) -> None:
    for s in socks:
        try:
            s.close()
        except OSError:
            pass


def closed_by_peer(socks, timeout: float) -> set[int]:
    """Indexes of ``socks`` the server closed (EOF or reset) within ``timeout``; reads and drops data."""
    poller = select.poll()
    by_fd = {s.fileno(): i for i, s in enumerate(socks)}
    for fd in by_fd:
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    closed: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(closed) < len(socks):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for fd, _ in poller.poll(left * 1000):
            i = by_fd[fd]
            try:
                data = socks[i].recv(65536, socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                closed.add(i)
                poller.unregister(fd)
    return closed


def status_kb(server: ServerProcess, key: str) -> int:
    with open(f"/proc/{server.proc.pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def server_fds(server: ServerProcess) -> int:
    return len(os.listdir(f"/proc/{server.proc.pid}/fd"))


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s: {what}")


def log_lines(server: ServerProcess, needle: str) -> list[str]:
    return [line for line in server.log().splitlines() if needle in line]


def no_errors_logged(server: ServerProcess) -> None:
    log = server.log()
    assert "Traceback" not in log, log[-4000:]
    assert not [line for line in log.splitlines() if " error " in line], log[-4000:]


def kafka_works(server: ServerProcess) -> None:
    """A fresh confluent-kafka producer and consumer: one record produced and read back."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    value = b"kafka-" + secrets.token_bytes(8)
    delivered = []
    p = Producer({"bootstrap.servers": server.kafka_address, "acks": "all", "message.timeout.ms": 20000})
    p.produce("well-behaved", value=value, on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
    assert p.flush(25) == 0 and delivered and delivered[0][0] is None, delivered
    offset = delivered[0][1]
    c = Consumer({"bootstrap.servers": server.kafka_address, "group.id": "wb-" + uuid.uuid4().hex,
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition("well-behaved", 0, offset)])
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                assert m.value() == value
                return
        raise AssertionError("the record was not consumed")
    finally:
        c.close()


def both_work(server: ServerProcess) -> None:
    """The apache-iggy SDK (``healthy``: ping, send, poll) and confluent-kafka both produce and consume."""
    healthy(server)
    kafka_works(server)


def _frame_maker() -> Raw:
    """A ``Raw`` used only to build frames (no socket of its own)."""
    r = Raw.__new__(Raw)
    r.client, r.session, r.request = 7, 0, 0
    return r


def served(listener: str, server: ServerProcess, sock: socket.socket) -> bool:
    """One request on ``sock`` answered (Iggy Ping; Kafka ApiVersions v0); False once closed."""
    sock.settimeout(10)
    try:
        if listener == "iggy":
            r = _frame_maker()
            r.sock = sock
            sock.sendall(r.frame(PING))
            return r.outcome()[:2] == ("reply", 0)
        head = struct.pack(">hhih", API_VERSIONS, 0, 1, 4) + b"test"
        sock.sendall(struct.pack(">i", len(head)) + head)
        size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
        return struct.unpack(">ih", _recv_exactly(sock, size)[:6]) == (1, 0)
    except (OSError, EOFError):
        return False


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return bytes(out)


# --------------------------------------------------------------------------- 5,000 idle connections


@pytest.mark.parametrize("listener", LISTENERS)
def test_5000_idle_connections_leave_well_behaved_clients_working(hostile, nofile, listener):
    port = port_of(hostile, listener)
    fds_before = server_fds(hostile)
    rss_before = status_kb(hostile, "VmRSS")
    socks: list[socket.socket] = []
    try:
        for _ in range(IDLE_CONNECTIONS):
            socks.append(connect(port))
        # (less a few: connections of the clients before this test may still be closing)
        wait_for(lambda: server_fds(hostile) >= fds_before + IDLE_CONNECTIONS - 20, 60,
                 f"the server accepting {IDLE_CONNECTIONS} connections")
        both_work(hostile)
        assert closed_by_peer(socks, 0.5) == set(), "idle connections under the limit were closed"
        print(f"server RSS {rss_before // 1024} MiB -> {status_kb(hostile, 'VmRSS') // 1024} MiB "
              f"with {IDLE_CONNECTIONS} idle {listener} connections")
    finally:
        close_all(socks)
    wait_for(lambda: server_fds(hostile) < fds_before + 50, 60, "the server releasing the closed connections")
    both_work(hostile)


# --------------------------------------------------------------------------- past max_connections


@pytest.mark.parametrize("listener", LISTENERS)
def test_connections_past_max_connections_are_closed_at_once_and_logged(capped, listener):
    port = port_of(capped, listener)
    held: list[socket.socket] = []
    extra: list[socket.socket] = []
    try:
        for i in range(20):
            s = connect(port)
            held.append(s)
            assert served(listener, capped, s), f"connection {i} under the limit not served:\n{capped.log()[-3000:]}"
        for _ in range(30):
            extra.append(connect(port))
        refused = closed_by_peer(extra, 10)
        assert refused == set(range(30)), f"{30 - len(refused)} connections past the limit kept or queued"
        assert all(served(listener, capped, s) for s in held), capped.log()[-3000:]
        name = "iggy-tcp" if listener == "iggy" else "kafka"
        refusals = [line for line in log_lines(capped, "connections refused: limit reached") if f"listener={name} " in line]
        assert 1 <= len(refusals) <= 3, refusals  # 30 refusals, rate-limited lines
        close_all(held[:10])

        def a_new_connection_is_served() -> bool:
            s = connect(port)
            extra.append(s)
            return served(listener, capped, s)

        wait_for(a_new_connection_is_served, 15, "a connection accepted once others closed")
    finally:
        close_all(held)
        close_all(extra)
    wait_for(lambda: _try(both_work, capped), 60, "well-behaved clients working after the flood")


def _try(fn, *args) -> bool:
    try:
        fn(*args)
        return True
    except Exception:
        return False


# --------------------------------------------------------------------------- slowloris


def _slow_frame(listener: str) -> bytes:
    if listener == "iggy":
        return _frame_maker().frame(PING)  # 256 bytes: never whole at a byte a second within this test
    head = struct.pack(">hhih", METADATA, 0, 1, 30) + b"slowloris-" * 3 + struct.pack(">i", 0)
    return struct.pack(">i", len(head)) + head


@pytest.mark.parametrize("listener", LISTENERS)
def test_a_frame_sent_a_byte_a_second_is_closed_at_the_frame_deadline(hostile, listener):
    frame = _slow_frame(listener)
    drips = 15
    assert len(frame) > drips
    port = port_of(hostile, listener)
    slow = [connect(port) for _ in range(20)]
    closed: set[int] = set()
    stop = threading.Event()

    def drip() -> None:
        for i in range(drips):
            for j, s in enumerate(slow):
                if j not in closed:
                    try:
                        s.send(frame[i:i + 1])
                    except OSError:
                        closed.add(j)
            closed.update(closed_by_peer([s for s in slow], 1.0))
            if len(closed) == len(slow) or stop.is_set():
                return

    t = threading.Thread(target=drip, daemon=True)
    try:
        t.start()
        both_work(hostile)  # while 20 frames trickle in
        t.join(drips * 2 + 10)
        assert not t.is_alive()
        assert closed == set(range(len(slow))), f"{len(slow) - len(closed)} slow frames still held"
    finally:
        stop.set()
        t.join(5)
        close_all(slow)
    assert log_lines(hostile, "reason=frame_receive_timeout")
    both_work(hostile)


# --------------------------------------------------------------------------- pipelined, never read


def _big_topic(server: ServerProcess, listener: str) -> tuple[bytes, int, object]:
    """Store ~4 MB and return (one request frame whose reply carries all of it, its reply size bound, login)."""
    chunk = os.urandom(1_000_000)
    if listener == "iggy":
        async def fill():
            c = await sdk_client(server)
            try:
                await c.create_stream("big")
                await c.create_topic("big", "t", 1)
                for _ in range(4):
                    await c.send_messages("big", "t", 0, [ig.SendMessage(chunk)])
            except RuntimeError:
                pass  # stored by an earlier test
        asyncio.run(asyncio.wait_for(fill(), 60))
        raw = Raw(server.iggy_address)
        raw.login()
        return raw.frame(POLL, poll_body("big", "t", 0, 0, 100)), 5_000_000, raw
    w = KafkaWire(server.kafka_address)
    try:
        if create_topic(w, "big").error_code == 0:
            for _ in range(4):
                assert produce(w, "big", record_batch([chunk])).error_code == 0
    finally:
        w.close()
    w = KafkaWire(server.kafka_address)
    frame, _ = w.frame(FETCH, 12, fetch_request(12, "big", 0))
    return frame, 5_000_000, w


@pytest.mark.parametrize("listener", LISTENERS)
def test_pipelined_requests_never_read_are_backpressured_then_dropped(hostile, listener):
    request, reply_bound, client = _big_topic(hostile, listener)
    sock = client.sock
    stalls_before = len(log_lines(hostile, "reason=send_stall"))
    rss_before = status_kb(hostile, "VmRSS")
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        burst = request * 100
        limit = 300_000 * len(request)  # what the client would send if the server kept reading
        sent = pos = 0
        blocked_since = None
        while sent < limit:
            try:
                n = sock.send(burst[pos:])
            except BlockingIOError:
                now = time.monotonic()
                blocked_since = blocked_since or now
                if now - blocked_since > 2:
                    break
                select.select([], [sock], [], 0.2)
                continue
            blocked_since = None
            sent += n
            pos = (pos + n) % len(burst)
        assert sent < limit, "the server kept reading requests it could not answer"
        rss_growth = status_kb(hostile, "VmRSS") - rss_before
        bound_kb = (BUFFER_BYTES + reply_bound + 2 * READER_LIMIT_BYTES) // 1024 + 64 * 1024
        print(f"{listener}: {sent / 1e6:.1f} MB of requests sent before backpressure; "
              f"server RSS grew by {rss_growth / 1024:.1f} MiB (bound {bound_kb / 1024:.0f} MiB)")
        assert rss_growth < bound_kb, "replies for an unread connection piled up in memory"
        both_work(hostile)  # others are served while this connection is stuck
        wait_for(lambda: len(log_lines(hostile, "reason=send_stall")) > stalls_before, SEND_STALL_TIMEOUT_S + 30,
                 "the stuck connection being dropped")
        sock.setblocking(True)
        sock.settimeout(10)
        got = 0
        try:
            while got < 50 * reply_bound:  # a connection still served would stream replies without end
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                got += len(chunk)
        except (ConnectionResetError, BrokenPipeError):
            pass
        assert got < 50 * reply_bound, "the stuck connection was not dropped"
    finally:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
    both_work(hostile)


# --------------------------------------------------------------------------- closed mid-reply


@pytest.mark.parametrize("listener", LISTENERS)
def test_a_client_closing_mid_reply_leaves_no_traceback(hostile, listener):
    request, _, client = _big_topic(hostile, listener)
    client.close()
    for i in range(20):
        if listener == "iggy":
            c = Raw(hostile.iggy_address)
            c.login()
            s = c.sock
            request = c.frame(POLL, poll_body("big", "t", 0, 0, 100))
        else:
            s = connect(hostile.kafka_port)
        try:
            s.sendall(request * 3)
            assert len(s.recv(100)) > 0
            if i % 2:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset
        finally:
            s.close()
    both_work(hostile)
    no_errors_logged(hostile)


# --------------------------------------------------------------------------- idle timeout


@pytest.mark.parametrize("listener", LISTENERS)
def test_connections_idle_past_the_idle_timeout_are_closed(impatient, listener):
    port = port_of(impatient, listener)
    idle, chatty = connect(port), connect(port)
    try:
        assert served(listener, impatient, idle)
        for _ in range(12):  # ~3.6 s of requests 0.3 s apart: never idle for 1.5 s
            assert served(listener, impatient, chatty)
            time.sleep(0.3)
        idle.settimeout(15)
        if listener == "iggy":
            head = _recv_exactly(idle, 256)
            assert head[60] == 13 and head[255] == 13  # an Eviction, reason 13 StaleClient
        assert closed_by_peer([idle], 15) == {0}
        assert served(listener, impatient, chatty)
    finally:
        close_all([idle, chatty])
    assert log_lines(impatient, "reason=idle")
    both_work(impatient)


def _produce_echoing_names(topic: str, names: list[str]):
    """A Produce v9 (acks=1) of one record to ``topic`` partition 0 plus, for each of ``names``
    (invalid topic names: refused, not auto-created), an empty partition: the answer echoes
    every name, so its size is the caller's to choose."""
    import datetime

    from test_kafka_wire import PRODUCE, req

    def topic_data(name, records):
        part = req(PRODUCE, 9, "PartitionProduceData", index=0, records=records)
        return req(PRODUCE, 9, "TopicProduceData", name=name, partition_data=(part,))

    tds = [topic_data(topic, record_batch([b"v"]))] + [topic_data(n, None) for n in names]
    return req(PRODUCE, 9, transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5),
               topic_data=tuple(tds))


def test_pipelined_produce_answer_never_read_is_dropped_after_the_stall_timeout(hostile):
    """A Produce to an ``enforce_fsync`` topic is answered by a task of the connection's pipeline
    (``kafka.server._Pipeline``) while the connection reads on. Its answer is larger than the
    socket buffers and the output bound and the client never reads it; the client then sends a
    Metadata, which the connection reads and holds until the answer before it is written. The
    stall deadline must still apply to that answer's drain: the connection is dropped after
    ``send_stall_timeout_s`` (it used to be left BUSY, with no deadline, for ever)."""

    async def make_topic():
        c = await sdk_client(hostile)
        if await c.get_stream("kafka") is None:
            await c.create_stream("kafka")
        if await c.get_topic("kafka", "stall-sync") is None:
            await c.create_topic("kafka", "stall-sync", 1, options={"enforce_fsync": "true"})

    asyncio.run(asyncio.wait_for(make_topic(), 60))
    names = [f"bad!{i:06d}" + "x" * 230 for i in range(16_000)]  # ~3.9 MB of answer
    stalls_before = len(log_lines(hostile, "reason=send_stall"))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    host, port = hostile.kafka_address.rsplit(":", 1)
    sock.connect((host, int(port)))
    client = KafkaWire.__new__(KafkaWire)
    client.sock, client.correlation = sock, 0
    try:
        frame, _ = client.frame(0, 9, _produce_echoing_names("stall-sync", names))
        sock.sendall(frame)
        time.sleep(1.0)  # the answer is queued and its drain waits for this client to read
        frame, _ = client.frame(3, 9, metadata_request(9, ["stall-sync"]))
        sock.sendall(frame)
        wait_for(lambda: len(log_lines(hostile, "reason=send_stall")) > stalls_before, SEND_STALL_TIMEOUT_S + 30,
                 "the connection whose pipelined answer is never read being dropped")
    finally:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    both_work(hostile)
