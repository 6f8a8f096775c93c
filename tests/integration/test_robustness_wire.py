"""Robustness of the Iggy front-end against hostile or broken clients, on a real server.

Every attack goes over a raw socket (frames built with ``headwater.codec.iggy`` and
``headwater.codec.batch``, then broken on purpose); after each one a separate official
SDK client must still ping, send and poll, and the server process must still run.
Standards (README, ``docs/iggy-wire.md``): bad input gets the protocol's error code or an
Eviction, a broken frame closes only its own connection, nothing refused is appended.

The raw helpers here (``Raw``, ``sdk_client``, ``healthy``) are also used by the other
``test_robustness_*`` modules.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import socket
import struct
import threading
import time

import apache_iggy as ig
import pytest
import xxhash

from headwater.codec import batch as batch_codec
from headwater.codec.iggy import framing, version
from headwater.codec.iggy.codes import (
    COMMAND_TO_OPERATION,
    Command,
    ConsumerKind,
    Operation,
    PollingKind,
)
from headwater.codec.iggy.commands import messages as wm
from headwater.codec.iggy.commands import offsets as wo
from headwater.codec.iggy.primitives import Consumer, Partitioning, PollingStrategy, encode_name

pytestmark = pytest.mark.slow  # a file of long tests: handed out first (tests/conftest.py)

HEADER = framing.HEADER_SIZE
DEFAULT_MAX_FRAME = 64 * 1024 * 1024
_METADATA = range(128, 160)


# --------------------------------------------------------------------------- raw client


class Closed(Exception):
    """The server closed the connection."""


class Raw:
    """A blocking frame-level Iggy client: nothing hidden, nothing retried."""

    def __init__(self, address: str, *, client: int | None = None, timeout: float = 10.0):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.client = client if client is not None else secrets.randbits(120) | 1
        self.session = 0
        self.request = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "Raw":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def frame(self, code: int, body: bytes = b"", *, operation: int | None = None, request: int | None = None,
              session: int | None = None, client: int | None = None) -> bytes:
        if operation is None:
            try:
                operation = int(COMMAND_TO_OPERATION[Command(code)])
            except (ValueError, KeyError):
                operation = int(Operation.NON_REPLICATED)
        if request is None:
            if operation in _METADATA or operation in (160, 161, 162, 3):
                self.request += 1
            request = self.request
        checksum = xxhash.xxh3_64_intdigest(body) if operation in _METADATA or operation == 1 else 0
        return framing.encode_request_header(
            size=HEADER + len(body), client=self.client if client is None else client, request=request,
            operation=operation, session=self.session if session is None else session, command_code=code,
            request_checksum=checksum,
        ) + body

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            try:
                chunk = self.sock.recv(n - len(out))
            except (ConnectionResetError, BrokenPipeError) as e:
                raise Closed(str(e)) from e
            if not chunk:
                raise Closed(f"closed after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def read(self) -> tuple[str, int, bytes]:
        """("reply", status, body) or ("eviction", reason, b"")."""
        head = self._read(HEADER)
        if head[60] == 13:
            return "eviction", framing.decode_eviction(head).reason, b""
        rh = framing.decode_reply_header(head)
        return "reply", rh.status, self._read(rh.size - HEADER)

    def call(self, code: int, body: bytes = b"", **kw) -> tuple[str, int, bytes]:
        self.send(self.frame(code, body, **kw))
        return self.read()

    def outcome(self) -> tuple:
        """What the server did next: a frame, or ("closed",)."""
        try:
            return self.read()
        except Closed:
            return ("closed",)

    def is_closed(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def login(self, username: str = "iggy", password: str = "iggy") -> version.LoginReply:
        kind, status, body = self.call(40, login_body(username.encode(), password.encode()),
                                       operation=1, request=0, session=0)
        assert (kind, status) == ("reply", 0), (kind, status)
        reply = version.decode_login_reply(body[4:])
        self.session = reply.session
        return reply


def login_body(username: bytes, password: bytes, protocol: int = version.PROTOCOL_VERSION) -> bytes:
    """A LOGIN_REGISTER body with raw bytes for the credentials (so they can be broken)."""
    return (struct.pack("<I", protocol) + encode_name("rust-sdk") + encode_name("0.11.0")
            + bytes([len(username)]) + username + bytes([len(password)]) + password + struct.pack("<I", 0))


def raw_header(size: int, *, command: int = 5, operation: int = 2, code: int = 1, client: int = 1) -> bytes:
    """A request header with any ``size``, ``command`` byte and ``operation`` byte."""
    h = bytearray(framing.encode_request_header(size=HEADER, client=client, request=0, operation=2,
                                                session=0, command_code=code))
    struct.pack_into("<I", h, 48, size)
    h[60] = command
    h[176] = operation
    return bytes(h)


def send_body(stream, topic, partitioning: Partitioning, batch: bytes, count: int | None = None) -> bytes:
    if count is None:
        count = batch_codec.read_header(batch).message_count
    return wm.encode_send_messages(wm.SendMessages(stream, topic, partitioning, count, memoryview(bytes(batch))))


def poll_body(stream, topic, partition: int, offset: int = 0, count: int = 100_000) -> bytes:
    return wm.encode_poll_messages(wm.PollMessages(
        Consumer(ConsumerKind.CONSUMER, 1), stream, topic, partition,
        PollingStrategy(PollingKind.OFFSET, offset), count, False))


def polled(raw: Raw, stream, topic, partition: int) -> tuple[int, list[tuple[int, bytes]]]:
    """(status, [(offset, payload)]) of everything stored in a partition, read raw."""
    kind, status, body = raw.call(100, poll_body(stream, topic, partition))
    assert kind == "reply", (kind, status)
    if status:
        return status, []
    _, batches = wm.decode_poll_reply(body)
    out = []
    for b in batch_codec.split_batches(batches):
        h = batch_codec.read_header(b)
        out += [(h.base_offset + f.offset_delta, bytes(f.payload)) for f in batch_codec.iter_frames(b)]
    return 0, out


# --------------------------------------------------------------------------- SDK side


async def sdk_client(server, username: str = "iggy", password: str = "iggy") -> ig.IggyClient:
    config = ig.TcpConfig(server_address=server.iggy_address,
                          reconnection=ig.TcpReconnectionConfig(enabled=False))
    c = ig.IggyClient(config)
    await asyncio.wait_for(c.connect(), 20)
    await asyncio.wait_for(c.login_user(username, password), 20)
    return c


async def _healthy(server) -> None:
    c = await sdk_client(server)
    await c.ping()
    try:
        await c.create_stream("health")
        await c.create_topic("health", "h", 1)
    except RuntimeError:
        pass  # already there
    payload = b"alive-" + secrets.token_bytes(8)
    r = await c.send_messages("health", "h", 0, [ig.SendMessage(payload)])
    offset = r.confirmations[0].base_offset
    got = await c.poll_messages("health", "h", consumer=ig.Consumer.Single("health"),
                                polling_strategy=ig.PollingStrategy.Offset(offset), count=1,
                                auto_commit=False, partition_id=0)
    assert [m.payload() for m in got] == [payload]


def healthy(server) -> None:
    """A fresh SDK client can ping, send and poll, and the server process is running."""
    assert server.proc is not None and server.proc.poll() is None, f"server died:\n{server.log()[-3000:]}"
    asyncio.run(asyncio.wait_for(_healthy(server), 30))


def no_traceback(server) -> None:
    log = server.log()
    assert "Traceback" not in log, log[-4000:]


def run(coro, timeout: float = 60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


# --------------------------------------------------------------------------- framing garbage

GARBAGE = {
    "random bytes": random.Random(1).randbytes(4096),
    "size 0": raw_header(0),
    "size 100 (< 256)": raw_header(100),
    "size 255": raw_header(255),
    "size 2**32-1": raw_header(2**32 - 1),
    "size just above the max": raw_header(DEFAULT_MAX_FRAME + 1),
}


@pytest.mark.parametrize("name", list(GARBAGE))
def test_a_bad_frame_size_is_evicted_and_only_that_connection_closes(server, name):
    with Raw(server.iggy_address) as r:
        r.send(GARBAGE[name])
        assert r.outcome()[:2] == ("eviction", 6)  # InvalidRequestBodySize, before any body is read
        assert r.is_closed()
    healthy(server)


@pytest.mark.parametrize("command", [0, 8, 13, 255])
def test_a_header_command_other_than_request_is_evicted(server, command):
    with Raw(server.iggy_address) as r:
        r.send(raw_header(HEADER, command=command))
        assert r.outcome()[0] == "eviction"
        assert r.is_closed()
    healthy(server)


@pytest.mark.parametrize("operation", [0, 4, 63, 64, 68, 100, 127, 150, 159, 163, 255])
def test_an_operation_a_client_may_not_send_is_evicted_with_reason_4(server, operation):
    with Raw(server.iggy_address) as r:
        r.send(raw_header(HEADER, operation=operation))
        assert r.outcome()[:2] == ("eviction", 4)  # InvalidRequestOperation
        assert r.is_closed()
    healthy(server)


def test_truncated_frames_then_close(server):
    ping = raw_header(HEADER)
    cuts = [
        ping[:1], ping[:51], ping[:100], ping[:255],  # a header cut short
        raw_header(1000) + b"a" * 10,  # a valid header, the body cut short
        raw_header(DEFAULT_MAX_FRAME) + b"\0" * 1000,  # announced at the maximum, then gone
    ]
    for data in cuts:
        with Raw(server.iggy_address) as r:
            r.send(data)
    # and the same with a reset instead of a clean close
    for data in cuts:
        s = socket.create_connection(("127.0.0.1", server.tcp_port))
        s.sendall(data)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    healthy(server)


def test_many_connections_dropped_mid_frame(server):
    rng = random.Random(3)
    frame = raw_header(HEADER + 500) + b"x" * 500
    socks = []
    for i in range(200):
        s = socket.create_connection(("127.0.0.1", server.tcp_port))
        s.sendall(frame[: rng.randint(1, len(frame) - 1)])
        socks.append(s)
    healthy(server)  # 200 half-sent frames pending: the server still serves others
    for i, s in enumerate(socks):
        if i % 2:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    healthy(server)


def test_slowloris_does_not_stall_other_clients(server):
    """One byte every 100 ms: the server waits for that connection only, others are served."""
    frame = raw_header(HEADER)
    with Raw(server.iggy_address) as slow:
        done = threading.Event()

        def drip():
            for i in range(40):  # about 4 s for 40 bytes
                slow.send(frame[i:i + 1])
                time.sleep(0.1)
            done.set()

        t = threading.Thread(target=drip)
        t.start()
        for _ in range(3):
            started = time.monotonic()
            healthy(server)
            assert time.monotonic() - started < 5
        t.join(20)
        assert done.is_set()
        slow.send(frame[40:])  # the frame completes: the slow client gets its PONG
        assert slow.outcome()[:2] == ("reply", 0)


def test_thousands_of_pipelined_pings_without_reading_then_all_replies_in_order(server):
    n = 5000
    with Raw(server.iggy_address, timeout=30) as r:
        r.send(b"".join(r.frame(1, request=i) for i in range(n)))
        healthy(server)  # while this connection's replies pile up unread
        for i in range(n):
            head = r._read(HEADER)
            rh = framing.decode_reply_header(head)
            assert (rh.status, rh.request, rh.size) == (0, i, HEADER)
    healthy(server)


def test_a_client_that_never_reads_does_not_block_others(server):
    with Raw(server.iggy_address) as r:
        r.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        r.sock.setblocking(False)
        frame = r.frame(1) * 64
        sent = 0
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            try:
                sent += r.sock.send(frame)
            except BlockingIOError:
                time.sleep(0.01)
        healthy(server)
    healthy(server)


def test_unknown_command_codes_get_a_status_and_the_connection_goes_on(server):
    with Raw(server.iggy_address) as anon:
        for code in (0, 2, 99, 999, 2**32 - 1):
            assert anon.call(code, b"", operation=2)[:2] == ("reply", 40)  # Unauthenticated
        assert anon.call(1)[:2] == ("reply", 0)
    with Raw(server.iggy_address) as r:
        r.login()
        for code in (0, 2, 9, 14, 99, 103, 999, 2**32 - 1):
            assert r.call(code, b"", operation=2)[:2] == ("reply", 3)  # InvalidCommand
        assert r.call(1)[:2] == ("reply", 0)
        assert r.call(201)[:2] == ("reply", 0)
    healthy(server)


# --------------------------------------------------------------------------- login abuse

VERSION_PREFIX = struct.pack("<I", version.PROTOCOL_VERSION) + encode_name("rust-sdk") + encode_name("0.11.0")
LOGINS = {
    # name: (body, eviction reason)  connection-lifecycle.mdx: 9-11 credentials, 14 version, 15 malformed
    "wrong password": (login_body(b"iggy", b"nope"), 9),
    "unknown user": (login_body(b"nobody", b"iggy"), 9),
    "empty username": (login_body(b"", b"iggy"), 15),
    "255-byte username": (login_body(b"u" * 255, b"iggy"), 9),
    "255-byte password": (login_body(b"iggy", b"p" * 255), 9),
    "username not utf-8": (login_body(b"\xff\xfe", b"iggy"), 15),
    "protocol version 0": (login_body(b"iggy", b"iggy", 0), 14),
    "protocol version 0xFFFFFFFF": (login_body(b"iggy", b"iggy", 0xFFFFFFFF), 14),
    "protocol version 0.10.5": (login_body(b"iggy", b"iggy", version.pack_version(0, 10, 5)), 14),
    "empty body": (b"", 15),
    "3 bytes": (b"\x00\x2c\x00", 15),
    "version prefix only": (VERSION_PREFIX, 15),
    "empty sdk name": (struct.pack("<I", version.PROTOCOL_VERSION) + b"\x00" + encode_name("x")
                       + b"\x04iggy\x04iggy\x00\x00\x00\x00", 15),
    "sdk name runs past the end": (struct.pack("<I", version.PROTOCOL_VERSION) + b"\xffabc", 15),
    "context length 2**32-1": (VERSION_PREFIX + b"\x04iggy\x04iggy" + struct.pack("<I", 2**32 - 1), 15),
    "trailing bytes": (login_body(b"iggy", b"iggy") + b"XYZ", 15),
}


@pytest.mark.parametrize("name", list(LOGINS))
def test_login_refusals_evict_with_the_documented_reason(server, name):
    body, reason = LOGINS[name]
    with Raw(server.iggy_address) as r:
        got = r.call(40, body, operation=1, request=0, session=0)
        assert got[:2] == ("eviction", reason)
        assert r.is_closed()
    healthy(server)


def test_incompatible_protocol_eviction_carries_the_window(server):
    with Raw(server.iggy_address) as r:
        r.send(r.frame(40, login_body(b"iggy", b"iggy", 0xFFFFFFFF), operation=1, request=0, session=0))
        head = r._read(HEADER)
        ev = framing.decode_eviction(head)
        assert (ev.reason, ev.server_protocol_version, ev.server_protocol_version_min) == (
            14, version.PROTOCOL_VERSION, version.PROTOCOL_VERSION_MIN)


@pytest.mark.parametrize("code", [38, 44])
def test_legacy_login_codes_are_evicted_before_and_after_login(server, code):
    body = b"\x04iggy\x04iggy" + b"\x00" * 8
    with Raw(server.iggy_address) as r:
        assert r.call(code, body, operation=2)[:2] == ("eviction", 15)
        assert r.is_closed()
    with Raw(server.iggy_address) as r:
        r.login()
        assert r.call(code, body, operation=2)[:2] == ("eviction", 15)
        assert r.is_closed()
    healthy(server)


def test_fifty_failed_logins_in_a_row_leave_the_server_serving(server):
    for i in range(50):
        with Raw(server.iggy_address) as r:
            assert r.call(40, login_body(b"iggy", b"bad-%d" % i), operation=1, request=0, session=0)[:2] == (
                "eviction", 9)
    healthy(server)


def test_register_twice_on_one_connection_then_the_old_epoch_is_fenced(server):
    with Raw(server.iggy_address) as r:
        first = r.login().session
        second = r.login().session
        assert second > first
        assert r.call(201)[:2] == ("reply", 0)
        # a metadata write carrying the older epoch is fenced
        assert r.call(202, encode_name("fenced-stream"), session=first)[0] == "eviction"
        assert r.is_closed()
    with Raw(server.iggy_address) as r:
        r.login()
        assert b"fenced-stream" not in r.call(201)[2]
    healthy(server)


@pytest.mark.parametrize("field", ["session", "client"])
def test_a_write_with_a_wrong_session_or_client_after_login_is_evicted(server, field):
    with Raw(server.iggy_address) as r:
        r.login()
        wrong = {"session": {"session": r.session + 1000}, "client": {"client": r.client ^ 0xFF}}[field]
        assert r.call(202, encode_name("never-" + field), **wrong)[0] == "eviction"
        assert r.is_closed()
    with Raw(server.iggy_address) as r:
        r.login()
        assert ("never-" + field).encode() not in r.call(201)[2]
    healthy(server)


@pytest.mark.parametrize("field", ["request", "session"])
def test_a_register_with_nonzero_request_or_session_is_refused(server, field):
    with Raw(server.iggy_address) as r:
        kw = {"request": 0, "session": 0, field: 5}
        kind, status, _ = r.call(40, login_body(b"iggy", b"iggy"), operation=1, **kw)
        assert (kind, status) != ("reply", 0), "a malformed Register was accepted as a login"
    healthy(server)


# --------------------------------------------------------------------------- message abuse


def _good(n: int = 2) -> bytearray:
    return bytearray(batch_codec.build_batch([batch_codec.Message(b"payload-%d" % i) for i in range(n)]))


def _reseal(b: bytearray, frame_pos: int | None = None) -> bytearray:
    """Recompute a frame checksum (at ``frame_pos``) and the batch checksum after an edit."""
    if frame_pos is not None:
        uh_len, p_len = struct.unpack_from("<II", b, frame_pos + 32)
        end = frame_pos + 48 + p_len + uh_len
        struct.pack_into("<Q", b, frame_pos, xxhash.xxh3_64_intdigest(bytes(b[frame_pos + 8:end])))
    struct.pack_into("<Q", b, 40, batch_codec.compute_batch_checksum(b))
    return b


def _edit(offset: int, fmt: str, value, reseal_frame: bool = False, reseal: bool = False):
    def make() -> bytearray:
        b = _good()
        struct.pack_into(fmt, b, offset, value)
        if reseal_frame:
            _reseal(b, 256)
        elif reseal:
            _reseal(b)
        return b
    return make


def _flip(offset: int):
    def make() -> bytearray:
        b = _good()
        b[offset] ^= 0xFF
        return b
    return make


def _header_only() -> bytearray:
    b = bytearray(256)
    struct.pack_into("<Q", b, 32, 256)
    return b


# name: (batch factory, messages_count override or None, expected status); messages.mdx + iggy_error.rs codes
BAD_BATCHES = {
    "frame payload byte flipped": (_flip(256 + 48 + 2), None, 4027),  # InvalidMessageChecksum
    "frame checksum wrong": (_edit(256, "<Q", 12345, reseal=True), None, 4027),
    "batch checksum wrong": (_edit(40, "<Q", 1), None, 4039),  # InvalidBatchChecksum
    "batch_length + 10": (lambda: _edit(32, "<Q", len(_good()) + 10)(), None, 4),  # InvalidFormat
    "batch_length - 10": (lambda: _edit(32, "<Q", len(_good()) - 10)(), None, 4),
    "batch_length 0": (_edit(32, "<Q", 0), None, 4),
    "batch_length 2**64-1": (_edit(32, "<Q", 2**64 - 1), None, 4),
    "message_count 3 for 2 frames": (_edit(48, "<I", 3), 3, 4009),  # InvalidMessagesCount
    "message_count 1 for 2 frames": (_edit(48, "<I", 1), 1, 4009),
    "messages_count field disagrees with the batch": (_good, 5, 4009),
    "message_count 0": (_edit(48, "<I", 0), 0, 4009),
    "zero messages (a bare header)": (_header_only, 0, 4009),
    "zero messages, count field 1": (_header_only, 1, 4009),
    "batch reserved byte 100 nonzero": (_edit(100, "<B", 1), None, 4101),  # InvalidReservedField
    "batch reserved byte 255 nonzero": (_edit(255, "<B", 1), None, 4101),
    "frame reserved nonzero": (_edit(256 + 40, "<Q", 7, reseal_frame=True), None, 4101),
    "payload_length 2**32-1": (_edit(256 + 36, "<I", 2**32 - 1), None, 4),
    "user_headers_length 2**32-1": (_edit(256 + 32, "<I", 2**32 - 1), None, 4),
}


@pytest.fixture(scope="module")
def abuse(server):
    async def setup():
        c = await sdk_client(server)
        await c.create_stream("abuse")
        await c.create_topic("abuse", "t", 2)
        await c.create_topic("abuse", "empty", 0)
    run(setup())
    with Raw(server.iggy_address) as r:
        r.login()
        yield r


def _stored(raw: Raw) -> list:
    return [polled(raw, "abuse", "t", p) for p in (0, 1)]


@pytest.mark.parametrize("name", list(BAD_BATCHES))
def test_a_broken_batch_gets_its_code_and_nothing_is_appended(server, abuse, name):
    make, count, expected = BAD_BATCHES[name]
    before = _stored(abuse)
    got = abuse.call(101, send_body("abuse", "t", Partitioning.by_partition(0), bytes(make()), count))
    assert got[:2] == ("reply", expected), got
    assert _stored(abuse) == before
    assert abuse.call(1)[:2] == ("reply", 0)  # the connection goes on


ROUTING = {
    # name: (stream, topic, partitioning, expected status)
    "partition 2 of 2": ("abuse", "t", Partitioning.by_partition(2), 3007),  # PartitionNotFound
    "partition 2**32-1": ("abuse", "t", Partitioning.by_partition(2**32 - 1), 3007),
    "0-partition topic, partition 0": ("abuse", "empty", Partitioning.by_partition(0), 3008),  # NoPartitions
    "0-partition topic, balanced": ("abuse", "empty", Partitioning.balanced(), 3008),
    "0-partition topic, key": ("abuse", "empty", Partitioning.by_key(b"k"), 3008),
    "unknown topic": ("abuse", "nope", Partitioning.by_partition(0), 2010),
    "unknown stream": ("nope", "t", Partitioning.by_partition(0), 1009),
    "unknown numeric stream": (999, "t", Partitioning.by_partition(0), 1009),
}


@pytest.mark.parametrize("name", list(ROUTING))
def test_a_send_to_nowhere_gets_its_code_and_nothing_is_appended(server, abuse, name):
    stream, topic, partitioning, expected = ROUTING[name]
    before = _stored(abuse)
    got = abuse.call(101, send_body(stream, topic, partitioning, bytes(_good())))
    assert got[:2] == ("reply", expected), got
    assert _stored(abuse) == before


def test_broken_send_bodies_get_invalid_format_and_nothing_is_appended(server, abuse):
    good = send_body("abuse", "t", Partitioning.by_partition(0), bytes(_good()))
    lying = bytearray(good)
    struct.pack_into("<I", lying, 0, 99)
    bodies = {
        "metadata_length lies": bytes(lying),
        "cut inside the metadata": good[:10],
        "empty": b"",
        "trailing garbage after the batch": good + b"garbage",
        "two batches in one send": good + bytes(_good()),
        "partitioning kind 9": good.replace(b"\x02\x04\x00\x00\x00\x00", b"\x09\x04\x00\x00\x00\x00", 1),
    }
    before = _stored(abuse)
    for name, body in bodies.items():
        assert abuse.call(101, body)[:2] == ("reply", 4), name
    assert _stored(abuse) == before
    # and a good send still lands at the next offset
    kind, status, body = abuse.call(101, good)
    assert (kind, status) == ("reply", 0)
    (conf,) = wm.decode_send_messages_reply(body)
    assert conf.base_offset == len(before[0][1])
    healthy(server)


def test_storing_a_consumer_offset_past_the_end_is_refused(server, abuse):
    stored = _stored(abuse)[1][1]  # partition 1 has no messages unless a test above sent there
    current = len(stored) - 1
    consumer = Consumer(ConsumerKind.CONSUMER, "offset-abuser")
    for offset in (current + 1, 1000, 2**64 - 1):
        body = wo.encode_store_consumer_offset(wo.StoreConsumerOffset(consumer, "abuse", "t", 1, offset))
        got = abuse.call(121, body)
        refused = got[1] == 4100 or (got[1] == 0 and got[2][:4] != b"\x00\x00\x00\x00"
                                     and struct.unpack_from("<I", got[2], 8)[0] == 4100)
        assert refused, (offset, got)
