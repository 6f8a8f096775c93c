"""SendMessages and PollMessages served from the protocol callbacks (``[tcp] serve_inline``,
``frontends.iggy.server._InlineRequests``) against real servers on loopback: the same replies as
a server that serves every request through the connection's coroutine (errors included);
pipelined requests of every kind answered in order (plain TCP and TLS); bodies that arrive in
small pieces with pauses are served whole (TCP and TLS, raw client and SDK), a peer that ends
the stream mid-body is closed at once; a client that does not read stops the server reading
(memory bounded); the idle and frame-receive clocks still run; a shutdown with requests in
flight loses nothing it acknowledged."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import ssl
import struct
import time

import apache_iggy as ig
import pytest

from headwater.codec import batch as batch_codec
from headwater.codec.iggy import framing
from headwater.codec.iggy.codes import Command, ConsumerKind, EvictionReason, PollingKind
from headwater.codec.iggy.commands import encode_request_body
from headwater.codec.iggy.commands import messages as wm
from headwater.codec.iggy.commands import streams as ws
from headwater.codec.iggy.primitives import Consumer, Partitioning, PollingStrategy
from iggy_transports import Via, start_server
from test_iggy_raw import RawConnection

STREAM = "inline"
BUFFER_BOUND = 256 * 1024  # tcp.max_connection_buffer_bytes of these servers
ENV = {"HEADWATER_TCP_MAX_CONNECTION_BUFFER_BYTES": str(BUFFER_BOUND)}
_CONFIRMATION = struct.Struct("<IIIIQ")  # [count u32 = 1][stream u32, topic u32, partition u32, base offset u64]


async def _make_topics(via: Via) -> None:
    c = via.client()
    await c.connect()
    await c.login_user("iggy", "iggy")
    await c.create_stream(STREAM)
    await c.create_topic(STREAM, "plain", 2)
    await c.create_topic(STREAM, "synced", 1, options={"enforce_fsync": "true"})


async def _topic(via: Via, name: str, partitions: int) -> None:
    c = via.client()
    await c.connect()
    await c.login_user("iggy", "iggy")
    await c.create_topic(STREAM, name, partitions)


def _start(tmp_path_factory, name: str, tls: bool = False, env: dict | None = None) -> Via:
    s, certs = start_server(tmp_path_factory.mktemp(name), tls=tls, env={**ENV, **(env or {})})
    via = Via("tls-tcp" if tls else "tcp", s, certs)
    asyncio.run(_make_topics(via))
    return via


def _stop(s) -> None:
    if s.proc is not None:
        rc = s.stop()
        assert rc == 0, f"server exited with {rc} on SIGTERM:\n{s.log()}"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Two servers, the same topics: requests served inline (the default), and not."""
    inline = _start(tmp_path_factory, "inline-on")
    full = _start(tmp_path_factory, "inline-off", env={"HEADWATER_TCP_SERVE_INLINE": "false"})
    try:
        yield inline, full
    finally:
        _stop(inline.server)
        _stop(full.server)


@pytest.fixture(scope="module")
def over_tls(tmp_path_factory):
    via = _start(tmp_path_factory, "inline-tls", tls=True)
    try:
        yield via
    finally:
        _stop(via.server)


def _connect(via: Via) -> RawConnection:
    c = RawConnection(via.server.iggy_address, timeout=30)
    certs = via.certs
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if certs is not None:
        ctx = ssl.create_default_context(cafile=str(certs.ca))
        c.sock = ctx.wrap_socket(c.sock, server_hostname="localhost")
    return c


def send_frame(c: RawConnection, topic, payloads: list[bytes], partition: int = 0, *, stream=STREAM,
               corrupt: bool = False) -> bytes:
    batch = bytearray(batch_codec.build_batch(batch_codec.Message(p, id=i + 1) for i, p in enumerate(payloads)))
    if corrupt:
        batch[-1] ^= 0xFF  # the last payload byte: its checksum no longer matches
    code, body = encode_request_body(
        wm.SendMessages(stream, topic, Partitioning.by_partition(partition), len(payloads), memoryview(batch)))
    return c.frame(int(code), body)


def poll_frame(c: RawConnection, topic, offset: int, count: int = 100, partition: int | None = 0, *,
               stream=STREAM) -> bytes:
    code, body = encode_request_body(wm.PollMessages(Consumer(ConsumerKind.CONSUMER, 1), stream, topic, partition,
                                                     PollingStrategy(PollingKind.OFFSET, offset), count, False))
    return c.frame(int(code), body)


def polled(body: bytes) -> tuple:
    """A poll reply's prefix and its messages (offset, payload): the stored timestamps differ between servers."""
    prefix, blob = wm.decode_poll_reply(body)
    frames = [(batch_codec.read_header(b).base_offset + f.offset_delta, bytes(f.payload))
              for b in batch_codec.split_batches(blob) for f in batch_codec.iter_frames(b)]
    return prefix, frames


def _requests(c: RawConnection, topic: str) -> list[tuple[str, bytes]]:
    """One of each: served inline, refused on the fast path, and sent the full way."""
    good = [random.Random(6).randbytes(100) for _ in range(1000)]
    poll_body = encode_request_body(wm.PollMessages(Consumer(ConsumerKind.CONSUMER, 1), STREAM, topic, 0,
                                                    PollingStrategy(PollingKind.OFFSET, 0), 10, False))[1]
    return [
        ("send", send_frame(c, topic, good)),
        ("send", send_frame(c, topic, [b"second"] * 3, partition=1)),
        ("send", send_frame(c, "no-such-topic", [b"x"])),  # TopicNotFound
        ("send", send_frame(c, topic, [b"x"], partition=9)),  # PartitionNotFound
        ("send", send_frame(c, topic, [b"x"] * 4, corrupt=True)),  # InvalidBatch (checksum)
        ("send", c.frame(int(Command.SEND_MESSAGES), b"\x01\x02\x03")),  # undecodable: the full path's error
        ("send", send_frame(c, "synced", [b"durable"] * 5)),  # enforce_fsync: waits for its sync
        ("poll", poll_frame(c, topic, 0, 1000)),
        ("poll", poll_frame(c, topic, 995, 10)),
        ("poll", poll_frame(c, topic, 0, 10, partition=1)),
        ("poll", poll_frame(c, topic, 0, 10, partition=7)),  # PartitionNotFound
        ("poll", poll_frame(c, "no-such-topic", 0)),  # TopicNotFound
        ("poll", c.frame(int(Command.POLL_MESSAGES), poll_body[:-3])),  # truncated: the full path's error
        ("poll", poll_frame(c, "synced", 0)),
        ("ping", c.frame(int(Command.PING))),
        ("stats", c.frame(int(Command.GET_STATS))),
    ]


def _answers(via: Via, topic: str, pipelined: bool) -> list:
    out = []
    with _connect(via) as c:
        c.login()
        reqs = _requests(c, topic)
        if pipelined:
            c.send(b"".join(frame for _, frame in reqs))
            answers = [c.read() for _ in reqs]
        else:
            answers = []
            for _, frame in reqs:
                c.send(frame)
                answers.append(c.read())
        for (kind, _), a in zip(reqs, answers):
            assert a.kind == "reply", a
            if kind == "poll" and a.status == 0:
                out.append((kind, a.status, polled(a.body)))
            elif kind in ("send", "ping"):
                out.append((kind, a.status, a.body))
            else:
                out.append((kind, a.status))
    return out


@pytest.mark.parametrize("pipelined", [False, True])
def test_inline_and_coroutine_serving_give_the_same_replies(pair, pipelined):
    inline, full = pair
    topic = f"same-{pipelined}"
    for via in pair:
        asyncio.run(_topic(via, topic, 2))
    a = _answers(inline, topic, pipelined)
    b = _answers(full, topic, pipelined)
    assert a == b
    statuses = [x[1] for x in a]
    assert statuses[:2] == [0, 0] and all(statuses[2:6]) and statuses[6:8] == [0, 0]
    assert statuses[10] and statuses[11] and statuses[12]  # the refusals are refusals on both


@pytest.mark.parametrize("transport", ["tcp", "tls-tcp"])
def test_pipelined_mixed_requests_are_answered_in_order(pair, over_tls, transport):
    via = pair[0] if transport == "tcp" else over_tls
    asyncio.run(_topic(via, "order", 1))
    with _connect(via) as c:
        c.login()
        wire, expect = [], []
        for i in range(40):
            wire.append(send_frame(c, "order", [b"%d" % i] * 10))
            expect.append(("send", "order", i * 10))
            if i % 5 == 1:
                wire.append(send_frame(c, "synced", [b"s%d" % i]))
                expect.append(("send", "synced", None))
            if i % 4 == 2:
                wire.append(poll_frame(c, "order", i * 10, 10))
                expect.append(("poll", "order", i * 10))
            if i % 7 == 3:
                wire.append(c.frame(int(Command.PING)))
                expect.append(("ping", None, None))
                code, body = encode_request_body(ws.CreateStream(f"order-{transport}-{i}"))
                wire.append(c.frame(int(code), body))
                expect.append(("create", None, None))
        blob = b"".join(wire)
        for i in range(0, len(blob), 7919):  # cut anywhere: mid-header, mid-body, several frames per send
            c.send(blob[i:i + 7919])
        synced = -1
        for kind, topic, offset in expect:
            a = c.read()
            assert a.kind == "reply" and a.status == 0, (kind, a)
            if kind == "send":
                base_offset = _CONFIRMATION.unpack(a.body)[-1]
                if topic == "order":
                    assert base_offset == offset
                else:  # (the topic holds other tests' messages before these)
                    assert synced < 0 or base_offset == synced + 1
                    synced = base_offset
            elif kind == "poll":
                (prefix, frames) = polled(a.body)
                assert [o for o, _ in frames] == list(range(offset, offset + 10))
                assert {p for _, p in frames} == {b"%d" % (offset // 10)}
            elif kind == "ping":
                assert a.body == b""
            else:
                assert a.payload  # the new stream's details


def test_a_client_that_does_not_read_stops_the_server_reading(pair):
    inline, _ = pair
    asyncio.run(_topic(inline, "bounded", 1))
    pid = inline.server.proc.pid
    with _connect(inline) as c:
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        c.login()
        assert c.call(int(Command.SEND_MESSAGES), send_frame(c, "bounded", [os.urandom(100)] * 1000)[256:]).status == 0
        request = poll_frame(c, "bounded", 0, 1000)  # a ~150 KB reply for ~300 bytes asked
        c.send(request)
        first = c.read()
        assert first.status == 0 and polled(first.body)[0].messages_count == 1000
        reply_size = len(first.header) + len(first.body)
        rss0 = _rss(pid)
        c.sock.setblocking(False)
        sent = quiet = 0
        deadline = time.monotonic() + 30
        while quiet < 5:  # until the kernel takes nothing more for half a second: the server stopped reading
            assert time.monotonic() < deadline, "the server read on while its replies were not read"
            try:
                sent += c.sock.send(request[sent % len(request):])
                quiet = 0
            except BlockingIOError:
                quiet += 1
                time.sleep(0.1)
        asked = sent // len(request)
        grown = _rss(pid) - rss0
        # unbounded, the server would hold every reply: asked x ~150 KB
        assert grown < 64 * 1024 * 1024 < asked * reply_size, f"server grew {grown} bytes for {asked} unread polls"
        c.sock.setblocking(True)
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        left = asked * reply_size  # every one answered, the same reply each time, once read
        while left:
            n = c.sock.recv_into(view[:min(left, len(buf))])
            assert n, f"closed with {left} bytes of replies unread"
            left -= n
        if sent % len(request):  # the request the kernel took part of: finished now, answered too
            c.send(request[sent % len(request):])
            assert c.read().status == 0
        assert c.call(int(Command.PING)).status == 0  # and the connection goes on


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def clocked(tmp_path_factory):
    via = _start(tmp_path_factory, "inline-clocks", env={"HEADWATER_TCP_IDLE_TIMEOUT_S": "1",
                                                        "HEADWATER_TCP_FRAME_RECEIVE_TIMEOUT_S": "1"})
    try:
        yield via
    finally:
        _stop(via.server)


def test_the_idle_timeout_still_evicts_after_inline_requests(clocked):
    with _connect(clocked) as c:
        c.login()
        for _ in range(3):
            assert c.call(int(Command.SEND_MESSAGES), send_frame(c, "plain", [b"x"] * 5)[256:]).status == 0
        c.sock.settimeout(15)
        a = c.read()  # nothing sent for a second
        assert (a.kind, a.reason) == ("eviction", EvictionReason.STALE_CLIENT)
        assert c.closed()


@pytest.mark.parametrize("cut", [100, 256 + 40])
def test_a_frame_left_unfinished_after_inline_requests_is_closed_at_its_deadline(clocked, cut):
    with _connect(clocked) as c:
        c.login()
        frame = send_frame(c, "plain", [b"y" * 500] * 20)
        c.send(frame)
        assert c.read().status == 0
        c.send(frame[:cut])  # mid-header, mid-body: then nothing
        c.sock.settimeout(15)
        t0 = time.monotonic()
        while True:  # the server closes (an idle Eviction is not expected: a frame had begun)
            data = c.sock.recv(4096)
            if not data:
                break
            assert data[framing.COMMAND_OFFSET] != 13, "evicted as idle while a frame was being received"
        assert time.monotonic() - t0 < 14
    assert "reason=frame_receive_timeout" in clocked.server.log()


def test_shutdown_with_requests_in_flight_keeps_every_acknowledged_send(tmp_path_factory):
    via = _start(tmp_path_factory, "inline-shutdown")
    s = via.server
    try:
        with _connect(via) as c:
            c.login()
            frames = [send_frame(c, "plain", [b"%d" % i] * 100) for i in range(300)]
            c.send(b"".join(frames[:50]))
            s.proc.send_signal(signal.SIGTERM)  # a graceful stop while requests are in flight
            acked = []
            try:
                c.send(b"".join(frames[50:]))
            except OSError:
                pass
            try:
                while True:
                    a = c.read()
                    assert a.status == 0, a
                    acked.append(_CONFIRMATION.unpack(a.body)[-1])
            except Exception:
                pass
        assert acked == [i * 100 for i in range(len(acked))]
        rc = s.stop(timeout=30)  # (the process is stopping already: this waits for it)
        assert rc == 0, s.log()
        s.start()
        with _connect(via) as c:
            c.login()
            got = []
            while len(got) < len(acked) * 100:
                a = c.call(*_poll_args(c, len(got)))
                assert a.status == 0
                frames_ = polled(a.body)[1]
                if not frames_:
                    break
                got += frames_
            assert [p for _, p in got[:len(acked) * 100]] == [b"%d" % (o // 100) for o in range(len(acked) * 100)]
    finally:
        _stop(s)


def _poll_args(c: RawConnection, offset: int):
    frame = poll_frame(c, "plain", offset, 1000)
    return int(Command.POLL_MESSAGES), frame[256:]


# ---------------------------------------------------------------- bodies that arrive in pieces
# A body received inline across many reads (pieces of any size, pauses between them, frames
# straddled), a peer that ends the stream mid-body, a body that stops coming after some of it
# was received into the frame.

def _dribble(c: RawConnection, blob: bytes, rng: random.Random, largest: int) -> None:
    """``blob`` in pieces of 1..``largest`` bytes, a pause of up to 3 ms after most of them."""
    i = 0
    while i < len(blob):
        n = rng.randint(1, largest)
        c.send(blob[i:i + n])
        i += n
        if rng.random() < 0.7:
            time.sleep(rng.random() * 0.003)


@pytest.mark.parametrize("transport", ["tcp", "tls-tcp"])
def test_bodies_sent_in_small_pieces_with_pauses_are_served_whole(pair, over_tls, transport):
    via = pair[0] if transport == "tcp" else over_tls
    topic = "pieces"
    asyncio.run(_topic(via, topic, 1))
    rng = random.Random(8)
    small = [rng.randbytes(100) for _ in range(1000)]  # ~164 KB body
    large = [rng.randbytes(1000) for _ in range(700)]  # ~740 KB
    with _connect(via) as c:
        c.login()
        expect = []
        for payloads, largest in ((small, 9000), (large, 60000), (small, 700)):
            _dribble(c, send_frame(c, topic, payloads), rng, largest)
            a = c.read()
            assert a.kind == "reply" and a.status == 0, a
            assert _CONFIRMATION.unpack(a.body)[-1] == len(expect)
            expect += payloads
            # a short request next: it alone wakes the server
            c.send(poll_frame(c, topic, len(expect) - 3, 3))
            assert [p for _, p in polled(c.read().body)[1]] == expect[-3:]
            c.send(c.frame(int(Command.PING)))
            assert c.read().status == 0
        # pipelined: two frames and a half in pieces that straddle them, then the rest
        blob = send_frame(c, topic, small) + send_frame(c, topic, large) + poll_frame(c, topic, 0, 5)
        cut = len(blob) - 100
        _dribble(c, blob[:cut], rng, 30000)
        time.sleep(0.05)
        c.send(blob[cut:])
        for want in (len(expect), len(expect) + len(small)):
            a = c.read()
            assert a.status == 0 and _CONFIRMATION.unpack(a.body)[-1] == want
        assert [p for _, p in polled(c.read().body)[1]] == small[:5]
        expect += small + large

    async def sdk_round() -> list[bytes]:  # the SDK after it, on the same topic: what it sends reads back
        sdk = via.client()
        await sdk.connect()
        await sdk.login_user("iggy", "iggy")
        for i in range(3):
            await sdk.send_messages(STREAM, topic, 0, [ig.SendMessage(p) for p in small[i * 300:(i + 1) * 300]])
        got = await sdk.poll_messages(STREAM, topic, consumer=ig.Consumer.Single(1),
                                      polling_strategy=ig.PollingStrategy.Offset(len(expect)), count=900,
                                      auto_commit=False, partition_id=0)
        return [bytes(m.payload()) for m in got]

    assert asyncio.run(sdk_round()) == small[:900]
    expect += small[:900]
    with _connect(via) as c:  # and everything the raw client sent is stored whole, in order
        c.login()
        offset = 0
        while offset < len(expect):
            frames = polled(c.call(int(Command.POLL_MESSAGES), poll_frame(c, topic, offset, 1000)[256:]).body)[1]
            assert frames and [p for _, p in frames] == expect[offset:offset + len(frames)]
            offset += len(frames)


@pytest.mark.parametrize("transport", ["tcp", "tls-tcp"])
def test_a_peer_that_closes_mid_body_is_closed_at_once_and_nothing_is_stored(pair, over_tls, transport):
    via = pair[0] if transport == "tcp" else over_tls
    topic = "half"
    asyncio.run(_topic(via, topic, 1))
    with _connect(via) as c:
        c.login()
        frame = send_frame(c, topic, [b"z" * 1000] * 300)
        c.send(frame[:300])
        time.sleep(0.05)
        c.send(frame[300:5000])  # a piece of the body received into the frame
        time.sleep(0.05)
        c.sock.shutdown(socket.SHUT_WR)  # then the end of the stream, mid-body
        c.sock.settimeout(30)  # (the frame receive timeout is 60 s: only the end of stream ends it sooner)
        while c.sock.recv(4096):
            pass
    with _connect(via) as c:  # the server serves on; the half frame was not stored
        c.login()
        c.send(send_frame(c, topic, [b"after"]))
        assert _CONFIRMATION.unpack(c.read().body)[-1] == 0


def test_a_body_that_stops_coming_mid_way_is_closed_at_its_deadline(clocked):
    with _connect(clocked) as c:
        c.login()
        frame = send_frame(c, "plain", [b"w" * 1000] * 200)
        c.send(frame[:300])
        time.sleep(0.05)
        c.send(frame[300:50000])  # part of the body after its header: then nothing
        c.sock.settimeout(15)
        t0 = time.monotonic()
        while True:
            data = c.sock.recv(4096)
            if not data:
                break
            assert data[framing.COMMAND_OFFSET] != 13, "evicted as idle while a frame was being received"
        assert time.monotonic() - t0 < 14
    assert clocked.server.log().count("reason=frame_receive_timeout") >= 1


def _confirmed(status: int, body: bytes) -> tuple:
    """A SendMessages reply without the stream and topic ids (the two servers number them apart:
    the module's other tests create topics on one of them only): status, (partition, offset)."""
    if status:
        return status, body
    count, _stream, _topic, partition, offset = _CONFIRMATION.unpack(body)
    return status, (count, partition, offset)


async def _admin(via: Via, op: str, *args) -> None:
    c = via.client()
    await c.connect()
    await c.login_user("iggy", "iggy")
    await getattr(c, op)(*args)


def test_a_kept_send_route_gives_the_full_paths_replies_as_the_topic_changes(pair):
    """SendMessages to a partition by id keep their route per connection (``_send_body``): sends of
    the same metadata bytes, refusals on that route, and sends after the partition, then the
    topic, went away and the topic came back get the replies of the server that resolves every
    request the full way."""
    outs = []
    for via in pair:
        topic = "kept-route"
        asyncio.run(_admin(via, "create_topic", STREAM, topic, 3))
        seq: list[tuple] = []
        with _connect(via) as c:
            c.login()

            def send(payloads: list[bytes], partition: int = 0, corrupt: bool = False) -> None:
                c.send(send_frame(c, topic, payloads, partition, corrupt=corrupt))
                a = c.read()
                assert a.kind == "reply", a
                seq.append(_confirmed(a.status, a.body))

            send([b"a"] * 10)
            send([b"b"] * 10)  # the same metadata bytes: the kept route
            send([b"c"] * 4, corrupt=True)  # refused on the kept route (checksum)
            send([b"d"] * 3, partition=2)  # another route
            asyncio.run(_admin(via, "delete_partitions", STREAM, topic, 1))  # partition 2 goes
            send([b"e"], partition=2)  # PartitionNotFound
            send([b"f"])  # partition 0 is still there
            asyncio.run(_admin(via, "delete_topic", STREAM, topic))
            send([b"g"])  # TopicNotFound
            asyncio.run(_admin(via, "create_topic", STREAM, topic, 1))
            send([b"h"] * 2)  # the new topic of that name
            send([b"i"] * 2)
        outs.append(seq)
    assert outs[0] == outs[1]
    statuses = [s for s, _ in outs[0]]
    assert [bool(s) for s in statuses] == [False, False, True, False, True, False, True, False, False]
    offsets = [confirmed[2] for s, confirmed in outs[0] if s == 0]
    assert offsets == [0, 10, 0, 20, 0, 2]


def test_a_kept_send_route_follows_the_senders_permissions(pair):
    """A user's send right taken away and given back while its connection keeps a route: the
    replies are those of the server that resolves (and checks) every request the full way."""
    outs = []
    for via in pair:
        topic = "kept-perms"
        asyncio.run(_admin(via, "create_topic", STREAM, topic, 1))
        may = ig.Permissions(ig.GlobalPermissions(send_messages=True))
        may_not = ig.Permissions(ig.GlobalPermissions(read_streams=True))
        asyncio.run(_admin(via, "create_user", "kept-sender", "sender-pw", ig.UserStatus.Active, may))
        seq: list[tuple] = []
        with _connect(via) as c:
            c.login("kept-sender", "sender-pw")

            def send() -> None:
                c.send(send_frame(c, topic, [b"p"] * 5))
                a = c.read()
                assert a.kind == "reply", a
                seq.append(_confirmed(a.status, a.body))

            send()
            send()
            asyncio.run(_admin(via, "update_permissions", "kept-sender", may_not))
            send()
            send()
            asyncio.run(_admin(via, "update_permissions", "kept-sender", may))
            send()
        outs.append(seq)
    assert outs[0] == outs[1]
    assert [bool(s) for s, _ in outs[0]] == [False, False, True, True, False]
