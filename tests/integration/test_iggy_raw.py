"""The Iggy binary protocol byte by byte, over a raw socket, against a real ``headwater serve``.

Frames are built with ``headwater.codec.iggy`` (and batches with
``headwater.codec.batch``); replies are read back whole, so each test sees
exactly what the server sent: reply status, result framing, eviction reason,
or the connection closing. Users with limited permissions are created with the
official SDK. ``RawConnection`` is also used by ``test_iggy_errors.py``.
"""

from __future__ import annotations

import asyncio
import secrets
import select
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import apache_iggy as ig
import pytest
import xxhash

from headwater.codec import batch as batch_codec
from headwater.codec.iggy import framing, version
from headwater.codec.iggy.codes import (
    Command,
    ConsumerKind,
    EvictionReason,
    Operation,
    PollingKind,
    operation_for_command,
)
from headwater.codec.iggy.commands import encode_request_body
from headwater.codec.iggy.commands import groups as wg
from headwater.codec.iggy.commands import messages as wm
from headwater.codec.iggy.commands import offsets as wo
from headwater.codec.iggy.commands import partitions as wpart
from headwater.codec.iggy.commands import segments as wseg
from headwater.codec.iggy.commands import streams as ws
from headwater.codec.iggy.commands import system as wsys
from headwater.codec.iggy.commands import tokens as wt
from headwater.codec.iggy.commands import topics as wtop
from headwater.codec.iggy.commands import users as wu
from headwater.codec.iggy.primitives import Consumer, Partitioning, PollingStrategy

pytestmark = pytest.mark.slow  # a file of long tests: handed out first (tests/conftest.py)

ROOT = ("iggy", "iggy")
_METADATA = range(128, 160)


# --------------------------------------------------------------------------- a raw client


class ConnectionClosed(Exception):
    pass


@dataclass
class Answer:
    """One frame from the server: a reply (status, body) or an eviction (reason)."""

    kind: str  # "reply" or "eviction"
    header: bytes
    body: bytes = b""
    status: int = 0
    reason: int = 0
    operation: int = 0
    request: int = 0
    op: int = 0

    @property
    def payload(self) -> bytes:
        """The body without its result section when the reply's operation is result-framed."""
        if framing.is_result_framed(self.operation):
            code, rest = framing.split_result(self.body)
            assert code == 0, f"committed rejection {code}"
            return bytes(rest)
        return self.body


class RawConnection:
    """A blocking Iggy client that speaks frames, for tests: nothing is hidden or retried."""

    def __init__(self, address: str, *, client: int | None = None, timeout: float = 10.0):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.client = client if client is not None else secrets.randbits(127) | 1
        self.session = 0
        self.request = 0  # last metadata request number used

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- frames ---
    def frame(
        self,
        code: int,
        body: bytes = b"",
        *,
        operation: int | None = None,
        request: int | None = None,
        session: int | None = None,
        client: int | None = None,
        checksum: int | None = None,
    ) -> bytes:
        """A request frame as the SDK builds it: metadata ops get the next request number
        and an xxh3 ``request_checksum`` of the body; every op after login carries the session."""
        if operation is None:
            operation = int(operation_for_command(code))
        if request is None:
            if operation in _METADATA:
                self.request += 1
            request = self.request
        if checksum is None:
            checksum = xxhash.xxh3_64_intdigest(body) if operation in _METADATA or operation == 1 else 0
        header = framing.encode_request_header(
            size=framing.HEADER_SIZE + len(body),
            client=self.client if client is None else client,
            request=request,
            operation=operation,
            session=self.session if session is None else session,
            command_code=code,
            request_checksum=checksum,
        )
        return header + body

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionClosed(f"closed after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def read(self) -> Answer:
        head = self._read(framing.HEADER_SIZE)
        kind = head[framing.COMMAND_OFFSET]
        if kind == 13:
            ev = framing.decode_eviction(head)
            return Answer("eviction", head, reason=ev.reason)
        rh = framing.decode_reply_header(head)
        body = self._read(rh.size - framing.HEADER_SIZE)
        return Answer("reply", head, body, rh.status, 0, rh.operation, rh.request, rh.op)

    def call(self, code: int, body: bytes = b"", **kw) -> Answer:
        self.send(self.frame(code, body, **kw))
        return self.read()

    def call_request(self, request_dataclass, **kw) -> Answer:
        code, body = encode_request_body(request_dataclass)
        return self.call(int(code), body, **kw)

    def closed(self) -> bool:
        """True when the server has closed the connection (EOF) with nothing more to read."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True

    # --- login ---
    def login_frame(self, username: str, password: str, protocol_version: int = version.PROTOCOL_VERSION) -> bytes:
        body = version.encode_login_register(
            version.LoginRegister(version.ClientVersionInfo(protocol_version, "raw-test", "0.0.1"), username, password)
        )
        return self.frame(int(Command.LOGIN_REGISTER), body, operation=int(Operation.REGISTER), request=0, session=0)

    def login(self, username: str = ROOT[0], password: str = ROOT[1]) -> version.LoginReply:
        self.send(self.login_frame(username, password))
        answer = self.read()
        assert answer.kind == "reply" and answer.status == 0, answer
        reply = version.decode_login_reply(answer.payload)
        self.session = reply.session
        self.request = 0
        return reply

    def login_token(self, token: str) -> Answer:
        body = version.encode_login_register_with_pat(
            version.LoginRegisterWithPat(
                version.ClientVersionInfo(version.PROTOCOL_VERSION, "raw-test", "0.0.1"), token
            )
        )
        self.send(self.frame(int(Command.LOGIN_REGISTER_WITH_PAT), body, operation=1, request=0, session=0))
        return self.read()


def run(coro):
    return asyncio.run(coro)


def wait_for(fetch, ok, timeout: float = 10.0, interval: float = 0.05):
    """Call ``fetch()`` until ``ok(value)`` holds (bounded); returns the last value either way."""
    deadline = time.monotonic() + timeout
    value = fetch()
    while not ok(value) and time.monotonic() < deadline:
        time.sleep(interval)
        value = fetch()
    return value


async def sdk_client(server, username: str = ROOT[0], password: str = ROOT[1]) -> ig.IggyClient:
    c = ig.IggyClient(server.iggy_address)
    await c.connect()
    await c.login_user(username, password)
    return c


def send_batch(conn: RawConnection, stream, topic, partition: int, payloads: list[bytes]) -> Answer:
    batch = batch_codec.build_batch(batch_codec.Message(p, id=i + 1) for i, p in enumerate(payloads))
    return conn.call_request(
        wm.SendMessages(stream, topic, Partitioning.by_partition(partition), len(payloads), memoryview(batch))
    )


def poll(conn: RawConnection, stream, topic, partition: int | None, consumer=Consumer(ConsumerKind.CONSUMER, 1),
         strategy=PollingStrategy(PollingKind.FIRST), count: int = 100, auto_commit: bool = False) -> Answer:
    return conn.call_request(wm.PollMessages(consumer, stream, topic, partition, strategy, count, auto_commit))


@pytest.fixture
def root(server):
    with RawConnection(server.iggy_address) as c:
        c.login()
        yield c


# --------------------------------------------------------------------------- framing


def test_ping_works_before_login_and_every_other_read_is_refused_with_40(server):
    with RawConnection(server.iggy_address) as c:
        assert c.call(int(Command.PING), operation=2).status == 0
        for code in (Command.GET_STREAMS, Command.GET_STATS, Command.GET_ME, Command.GET_USERS):
            a = c.call(int(code), operation=2)
            assert (a.kind, a.status, a.body) == ("reply", 40, b""), code
        assert c.call(int(Command.PING), operation=2).status == 0  # the connection is still there


def test_a_write_before_login_has_no_session_and_is_evicted(server):
    with RawConnection(server.iggy_address) as c:
        code, body = encode_request_body(ws.CreateStream("never-created"))
        a = c.call(int(code), body, session=1)
        assert (a.kind, a.reason) == ("eviction", EvictionReason.NO_SESSION)
        assert c.closed()
    with RawConnection(server.iggy_address) as admin:
        admin.login()
        assert admin.call_request(ws.GetStream("never-created")).body == b""


def test_oversized_size_is_evicted_before_the_body_is_read(server):
    with RawConnection(server.iggy_address) as c:
        c.login()
        # a header announcing a 1 GiB frame, and no body at all: the server must not wait for it
        header = framing.encode_request_header(
            size=1 << 30, client=c.client, request=1, operation=int(Operation.CREATE_STREAM), session=c.session
        )
        c.send(header)
        a = c.read()
        assert (a.kind, a.reason) == ("eviction", EvictionReason.INVALID_REQUEST_BODY_SIZE)
        assert c.closed()


def test_frame_size_under_the_header_size_is_evicted(server):
    with RawConnection(server.iggy_address) as c:
        header = bytearray(c.frame(int(Command.PING), operation=2))
        struct.pack_into("<I", header, 48, 100)
        c.send(bytes(header))
        assert c.read().reason == EvictionReason.INVALID_REQUEST_BODY_SIZE
        assert c.closed()


def test_max_frame_size_is_configurable(fresh_server):
    fresh_server.stop()
    fresh_server.start(env={"HEADWATER_TCP_MAX_FRAME_SIZE": "4096"})
    with RawConnection(fresh_server.iggy_address) as c:
        c.login()
        assert c.call_request(ws.CreateStream("small-frames")).status == 0
        assert c.call_request(wtop.CreateTopic("small-frames", 1, "t")).status == 0
        assert send_batch(c, "small-frames", "t", 0, [b"x" * 1000]).status == 0
        too_big = c.frame(*_send_body("small-frames", "t", 0, [b"x" * 5000]))
        c.send(too_big[:256])  # the header alone is enough to refuse it
        a = c.read()
        assert (a.kind, a.reason) == ("eviction", EvictionReason.INVALID_REQUEST_BODY_SIZE)
        assert c.closed()


def test_before_login_a_frame_over_64_kib_is_evicted_from_its_header(server):
    """An unauthenticated connection cannot make the server buffer a big frame: only the
    header of a 60 MiB frame is sent, and it is refused at once."""
    with RawConnection(server.iggy_address) as c:
        header = bytearray(c.frame(int(Command.PING), operation=2))
        struct.pack_into("<I", header, 48, 60 * 1024 * 1024)
        c.send(bytes(header))
        a = c.read()
        assert (a.kind, a.reason) == ("eviction", EvictionReason.INVALID_REQUEST_BODY_SIZE)
        assert c.closed()
    with RawConnection(server.iggy_address) as c:  # the same frame after login is read as usual
        c.login()
        assert c.call_request(ws.CreateStream("prelogin-cap")).status == 0
        assert c.call_request(wtop.CreateTopic("prelogin-cap", 1, "t")).status == 0
        assert send_batch(c, "prelogin-cap", "t", 0, [b"x" * 100_000]).status == 0


def _send_body(stream, topic, partition, payloads) -> tuple[int, bytes]:
    batch = batch_codec.build_batch(batch_codec.Message(p) for p in payloads)
    code, body = encode_request_body(
        wm.SendMessages(stream, topic, Partitioning.by_partition(partition), len(payloads), memoryview(batch))
    )
    return int(code), body


@pytest.mark.parametrize("operation", [0, 64, 100, 127, 150, 200])
def test_an_operation_a_client_may_not_send_is_evicted(server, operation):
    with RawConnection(server.iggy_address) as c:
        c.login()
        a = c.call(int(Command.GET_STREAMS), operation=operation)
        assert (a.kind, a.reason) == ("eviction", EvictionReason.INVALID_REQUEST_OPERATION)
        assert c.closed()


def test_a_header_that_is_not_a_request_is_evicted(server):
    with RawConnection(server.iggy_address) as c:
        frame = bytearray(c.frame(int(Command.PING), operation=2))
        frame[60] = 8  # Reply
        c.send(bytes(frame))
        assert c.read().reason == EvictionReason.INVALID_REQUEST_BODY
        assert c.closed()


def test_unknown_and_unimplemented_commands_get_a_status(server, root):
    assert root.call(9999, operation=2).status == 3  # InvalidCommand
    snapshot = root.call_request(wsys.GetSnapshot(1, (100,)))
    assert (snapshot.status, snapshot.body) == (5, b"")  # FeatureUnavailable, as the docs allow
    flush = root.call_request(wm.FlushUnsavedBuffer("nope", "nope", 0, True))
    assert flush.status == 5
    # a write may not ride a read's operation (it would bypass deduplication)
    code, body = encode_request_body(ws.CreateStream("sneaky"))
    assert root.call(int(code), body, operation=2).status == 3
    assert root.call_request(ws.GetStream("sneaky")).body == b""
    assert root.call(int(Command.PING), operation=2).status == 0


# --------------------------------------------------------------------------- login-register


@pytest.mark.parametrize("code", [Command.LOGIN_USER, Command.LOGIN_WITH_PERSONAL_ACCESS_TOKEN])
def test_legacy_login_codes_are_evicted_with_malformed_login(server, code):
    with RawConnection(server.iggy_address) as c:
        body = bytes([4]) + b"iggy" + bytes([4]) + b"iggy" + b"\0" * 8
        a = c.call(int(code), body, operation=2)
        assert (a.kind, a.reason) == ("eviction", EvictionReason.MALFORMED_LOGIN)
        assert c.closed()


def test_login_reply_is_result_framed_and_carries_the_session(server):
    with RawConnection(server.iggy_address) as c:
        c.send(c.login_frame(*ROOT))
        a = c.read()
        assert a.status == 0 and a.operation == Operation.REGISTER
        assert a.body[:4] == b"\0\0\0\0"  # result count 0, then the login payload (NOTES.md)
        reply = version.decode_login_reply(a.body[4:])
        assert reply.user_id == 0 and reply.session > 0
        assert reply.server_protocol_version == version.PROTOCOL_VERSION
        assert a.op == reply.session  # like Iggy, the reply's op field carries the epoch


@pytest.mark.parametrize(
    "client_version, accepted",
    [
        (version.pack_version(0, 11, 0), True),
        (version.pack_version(0, 11, 7), True),  # patch never changes the wire
        (version.pack_version(0, 10, 9), False),
        (version.pack_version(0, 12, 0), False),
        (version.pack_version(1, 0, 0), False),
    ],
)
def test_protocol_version_window(server, client_version, accepted):
    with RawConnection(server.iggy_address) as c:
        c.send(c.login_frame(*ROOT, protocol_version=client_version))
        a = c.read()
        if accepted:
            assert (a.kind, a.status) == ("reply", 0)
            return
        assert (a.kind, a.reason) == ("eviction", EvictionReason.INCOMPATIBLE_PROTOCOL)
        high, low = struct.unpack_from("<II", a.header, 144)
        assert high == version.PROTOCOL_VERSION and low == version.PROTOCOL_VERSION_MIN
        assert low <= version.pack_version(0, 11, 0) <= high
        assert c.closed()


def test_login_refusals_carry_their_eviction_reason(server):
    async def setup():
        c = await sdk_client(server)
        await c.create_user("sleepy", "secret", ig.UserStatus.Inactive)
        await c.create_user("awake", "secret", ig.UserStatus.Active)

    run(setup())
    cases = [
        (("iggy", "wrong"), EvictionReason.INVALID_CREDENTIALS),
        (("nobody", "iggy"), EvictionReason.INVALID_CREDENTIALS),
        (("sleepy", "secret"), EvictionReason.USER_INACTIVE),
    ]
    for (user, password), reason in cases:
        with RawConnection(server.iggy_address) as c:
            c.send(c.login_frame(user, password))
            a = c.read()
            assert (a.kind, a.reason) == ("eviction", reason), user
            assert c.closed()
    with RawConnection(server.iggy_address) as c:
        assert c.login_token("not-a-token").reason == EvictionReason.INVALID_TOKEN
        assert c.closed()
    with RawConnection(server.iggy_address) as c:  # no decodable version prefix
        c.send(c.frame(40, b"\x00\x0b\x00", operation=1, request=0))
        assert c.read().reason == EvictionReason.MALFORMED_LOGIN
        assert c.closed()
    with RawConnection(server.iggy_address, client=0) as c:  # the client id must be non-zero
        c.send(c.login_frame(*ROOT))
        assert c.read().reason == EvictionReason.SESSION_ERROR
        assert c.closed()
    with RawConnection(server.iggy_address) as c:
        c.login("awake", "secret")


def test_personal_access_tokens_log_in_and_expire(server, root):
    token = wt.decode_raw_personal_access_token(
        root.call_request(wt.CreatePersonalAccessToken("raw-forever", 0)).payload
    ).token
    short = wt.decode_raw_personal_access_token(
        root.call_request(wt.CreatePersonalAccessToken("raw-short", 1)).payload  # expires after 1 µs
    ).token
    with RawConnection(server.iggy_address) as c:
        a = c.login_token(token)
        assert a.status == 0
        assert version.decode_login_reply(a.payload).user_id == 0
    with RawConnection(server.iggy_address) as c:
        a = c.login_token(short)
        assert (a.kind, a.reason) == ("eviction", EvictionReason.INVALID_TOKEN)


def test_logout_returns_the_connection_to_anonymous(server):
    with RawConnection(server.iggy_address) as c:
        c.login()
        assert c.call_request(ws.GetStreams()).status == 0
        a = c.call(int(Command.LOGOUT_USER), operation=int(Operation.LOGOUT))
        assert (a.status, a.body) == (0, b"")  # Logout is not result-framed
        assert c.call_request(ws.GetStreams()).status == 40
        assert c.call(int(Command.PING), operation=2).status == 0
        c.client = secrets.randbits(127) | 1
        c.login()  # the same connection may register again
        assert c.call_request(ws.GetStreams()).status == 0


# --------------------------------------------------------------------------- sessions


def test_a_newer_registration_of_the_same_client_id_fences_the_older_one(server):
    with RawConnection(server.iggy_address) as old, RawConnection(server.iggy_address, client=old.client) as new:
        old.login()
        assert old.call_request(ws.CreateStream("fenced-0")).status == 0
        new.login()
        assert new.session > old.session
        a = old.call_request(ws.CreateStream("fenced-1"))
        assert (a.kind, a.reason) == ("eviction", EvictionReason.SESSION_TOO_LOW)
        assert old.closed()
        assert new.call_request(ws.CreateStream("fenced-2")).status == 0
        assert new.call_request(ws.GetStream("fenced-1")).body == b""


def test_a_write_must_carry_the_connections_session_and_client(server):
    with RawConnection(server.iggy_address) as c:
        c.login()
        a = c.call_request(ws.CreateStream("wrong-session"), session=c.session + 1000)
        assert (a.kind, a.reason) == ("eviction", EvictionReason.SESSION_ERROR)
        assert c.closed()
    with RawConnection(server.iggy_address) as c:
        c.login()
        a = c.call_request(ws.CreateStream("wrong-client"), client=c.client + 1)
        assert (a.kind, a.reason) == ("eviction", EvictionReason.NO_SESSION)
        assert c.closed()


def test_a_deleted_users_session_ends(server, root):
    run(_create_user(server, "doomed", "secret", None))
    with RawConnection(server.iggy_address) as c:
        c.login("doomed", "secret")
        assert c.call_request(wu.GetUser("doomed")).status == 0  # self-service
        assert root.call_request(wu.DeleteUser("doomed")).status == 0
        a = c.call_request(wu.GetUser("doomed"))
        assert (a.kind, a.reason) == ("eviction", EvictionReason.NO_SESSION)


async def _create_user(server, name, password, permissions):
    c = await sdk_client(server)
    await c.create_user(name, password, ig.UserStatus.Active, permissions)


# --------------------------------------------------------------------------- deduplication


def test_a_replayed_metadata_request_gets_the_cached_reply_not_a_second_apply(server, root):
    create = root.frame(*_encoded(ws.CreateStream("replayed")))
    root.send(create)
    first = root.read()
    assert first.status == 0
    root.send(create)  # the very same bytes: same client, same request number
    again = root.read()
    assert (again.status, again.body) == (0, first.body)
    assert again.request == first.request
    streams = ws.decode_streams(root.call_request(ws.GetStreams()).body)
    assert [s.name for s in streams].count("replayed") == 1

    delete = root.frame(*_encoded(ws.DeleteStream("replayed")))
    root.send(delete)
    assert root.read().status == 0
    root.send(delete)
    assert root.read().status == 0  # the cached success, not StreamIdNotFound from a second apply

    # the same request number with different arguments: already applied, refused
    number = root.request
    a = root.call_request(ws.CreateStream("other-args"), request=number)
    assert a.status == 59
    # a number below the watermark whose reply is not cached: refused, never applied
    a = root.call_request(ws.CreateStream("too-old"), request=number - 100 if number > 100 else 0)
    assert a.status == 59
    assert root.call_request(ws.GetStream("too-old")).body == b""
    assert root.call_request(ws.GetStream("other-args")).body == b""


def _encoded(request) -> tuple[int, bytes]:
    code, body = encode_request_body(request)
    return int(code), body


def test_result_framing_follows_the_operation(server, root):
    created = root.call_request(ws.CreateStream("framing"))
    assert created.body[:4] == b"\0\0\0\0"
    details = ws.decode_stream_details(created.body[4:])
    assert details.name == "framing"
    read = root.call_request(ws.GetStream("framing"))  # NonReplicated: the payload itself
    assert ws.decode_stream_details(read.body).id == details.id
    assert root.call_request(wtop.CreateTopic("framing", 2, "t")).body[:4] == b"\0\0\0\0"
    assert send_batch(root, "framing", "t", 0, [b"a", b"b"]).status == 0
    stored = root.call_request(wo.StoreConsumerOffset(Consumer(ConsumerKind.CONSUMER, 9), "framing", "t", 0, 0))
    assert (stored.status, stored.body) == (0, b"\0\0\0\0")
    deleted = root.call_request(wseg.DeleteSegments("framing", "t", 0, 1))
    assert (deleted.status, deleted.body) == (0, b"")  # DeleteSegments is not framed (iggy-wire.md)
    created_partitions = root.call_request(wpart.CreatePartitions("framing", "t", 1))
    assert (created_partitions.status, created_partitions.body) == (0, b"\0\0\0\0")


# --------------------------------------------------------------------------- the poll path


def test_poll_returns_the_stored_batch_bytes_unchanged(server, root):
    assert root.call_request(ws.CreateStream("verbatim")).status == 0
    assert root.call_request(wtop.CreateTopic("verbatim", 1, "t")).status == 0
    sent = batch_codec.build_batch(batch_codec.Message(b"payload-%d" % i, id=100 + i) for i in range(5))
    code, body = encode_request_body(
        wm.SendMessages("verbatim", "t", Partitioning.by_partition(0), 5, memoryview(sent))
    )
    confirm = root.call(int(code), body)
    assert confirm.status == 0
    a = poll(root, "verbatim", "t", 0)
    prefix, rest = wm.decode_poll_reply(a.body)
    assert (prefix.partition_id, prefix.current_offset, prefix.messages_count) == (0, 4, 5)
    polled = bytes(rest)
    # the polled batch is the sent one, stamped (partition_id, base_offset, base_timestamp, checksum)
    assert polled[24:40] == sent[24:40] and polled[48:] == sent[48:]
    batch_codec.verify(polled)
    # ... and it is byte for byte what lies in the segment file
    logs = list(Path(server.data_dir).glob("streams/*/topics/*/partitions/*/*.log"))
    assert any(polled in p.read_bytes() for p in logs)


def test_group_poll_of_a_partition_the_member_does_not_own_asks_for_a_resync(server, root):
    assert root.call_request(ws.CreateStream("fence")).status == 0
    assert root.call_request(wtop.CreateTopic("fence", 2, "t")).status == 0
    assert send_batch(root, "fence", "t", 1, [b"one"]).status == 0
    assert root.call_request(wg.CreateConsumerGroup("fence", "t", "g")).status == 0
    group = Consumer(ConsumerKind.CONSUMER_GROUP, "g")
    # not a member yet: no partition is ours
    a = poll(root, "fence", "t", 1, consumer=group)
    assert a.status == 0 and a.body[:4] == b"\xff\xff\xff\xff" and len(a.body) == 16
    assert root.call_request(wg.JoinConsumerGroup("fence", "t", "g")).status == 0
    sync = wg.decode_sync_consumer_group_reply(root.call_request(wg.SyncConsumerGroup("fence", "t", "g")).body)
    assert sorted(sync.partitions) == [0, 1]
    a = poll(root, "fence", "t", 1, consumer=group)
    assert struct.unpack_from("<I", a.body)[0] == 1 and len(a.body) > 16
    # a second member takes partition 1 over: the first is fenced off it
    with RawConnection(server.iggy_address) as other:
        other.login()
        assert other.call_request(wg.JoinConsumerGroup("fence", "t", "g")).status == 0
        mine = wg.decode_sync_consumer_group_reply(root.call_request(wg.SyncConsumerGroup("fence", "t", "g")).body)
        theirs = wg.decode_sync_consumer_group_reply(other.call_request(wg.SyncConsumerGroup("fence", "t", "g")).body)
        assert mine.generation == theirs.generation > sync.generation
        assert sorted(mine.partitions + theirs.partitions) == [0, 1]
        lost = theirs.partitions[0]
        a = poll(root, "fence", "t", lost, consumer=group)
        assert a.body[:4] == b"\xff\xff\xff\xff"
        stored = root.call_request(wo.StoreConsumerOffset(group, "fence", "t", lost, 0))
        assert stored.status == 5009  # ConsumerGroupPartitionNotOwned: only the owner commits
    # the other member left (its connection closed): everything is ours again

    def assignment():
        return wg.decode_sync_consumer_group_reply(root.call_request(wg.SyncConsumerGroup("fence", "t", "g")).body)

    again = wait_for(assignment, lambda a: sorted(a.partitions) == [0, 1])
    assert again.generation > mine.generation


# --------------------------------------------------------------------------- permissions (security.mdx)


def _ok(answer: Answer) -> bool:
    assert answer.kind == "reply", answer
    assert answer.status in (0, 41), answer.status
    return answer.status == 0


def test_permission_matrix_for_a_restricted_user(server, root):
    # two streams: the user may read and poll "perm-a" (stream scope) and send to perm-b/b1 (topic scope)
    for stream, topics in (("perm-a", ("a1",)), ("perm-b", ("b1", "b2"))):
        assert root.call_request(ws.CreateStream(stream)).status == 0
        for t in topics:
            assert root.call_request(wtop.CreateTopic(stream, 1, t)).status == 0
    a_id = ws.decode_stream_details(root.call_request(ws.GetStream("perm-a")).body).id
    b = ws.decode_stream_details(root.call_request(ws.GetStream("perm-b")).body)
    b1_id = next(t.id for t in b.topics if t.name == "b1")
    assert send_batch(root, "perm-a", "a1", 0, [b"for the reader"]).status == 0

    permissions = ig.Permissions(
        ig.GlobalPermissions(),
        {
            a_id: ig.StreamPermissions(read_stream=True),
            b.id: ig.StreamPermissions(topics={b1_id: ig.TopicPermissions(send_messages=True)}),
        },
    )
    run(_create_user(server, "limited", "secret", permissions))
    me = wu.decode_user_details(root.call_request(wu.GetUser("limited")).body)

    with RawConnection(server.iggy_address) as u:
        u.login("limited", "secret")
        expectations = [
            # (request, allowed): the global permission matrix ...
            (wsys.GetStats(), False),
            (wsys.GetClients(), False),
            (wsys.GetClient(1), False),
            (wu.GetUsers(), False),
            (wu.GetUser("iggy"), False),
            (wu.CreateUser("mallory", "secret"), False),
            (wu.UpdatePermissions("limited", None), False),
            (wu.DeleteUser("limited"), False),
            (ws.CreateStream("perm-c"), False),
            (ws.GetStreams(), False),
            # ... stream scope: read_stream on perm-a includes read_topics and poll_messages there
            (ws.GetStream("perm-a"), True),
            (ws.GetStream("perm-b"), False),
            (ws.UpdateStream("perm-a", "renamed"), False),
            (ws.PurgeStream("perm-a"), False),
            (ws.DeleteStream("perm-a"), False),
            (wtop.GetTopics("perm-a"), True),
            (wtop.GetTopic("perm-a", "a1"), True),
            (wtop.GetTopics("perm-b"), False),
            (wtop.CreateTopic("perm-a", 1, "a2"), False),
            (wtop.PurgeTopic("perm-a", "a1"), False),
            (wpart.CreatePartitions("perm-a", "a1", 1), False),
            (wseg.DeleteSegments("perm-a", "a1", 0, 1), False),
            (wm.PollMessages(Consumer(ConsumerKind.CONSUMER, 5), "perm-a", "a1", 0,
                             PollingStrategy(PollingKind.FIRST), 10, False), True),
            (wm.PollMessages(Consumer(ConsumerKind.CONSUMER, 5), "perm-b", "b1", 0,
                             PollingStrategy(PollingKind.FIRST), 10, False), False),
            (wo.StoreConsumerOffset(Consumer(ConsumerKind.CONSUMER, 5), "perm-a", "a1", 0, 0), True),
            (wo.GetConsumerOffset(Consumer(ConsumerKind.CONSUMER, 5), "perm-a", "a1", 0), True),
            (wo.StoreConsumerOffset(Consumer(ConsumerKind.CONSUMER, 5), "perm-b", "b1", 0, 0), False),
            (wg.CreateConsumerGroup("perm-a", "a1", "readers"), True),
            (wg.JoinConsumerGroup("perm-a", "a1", "readers"), True),
            (wg.GetConsumerGroups("perm-a", "a1"), True),
            (wg.CreateConsumerGroup("perm-b", "b1", "readers"), False),
            # ... self-service: the own account, password and tokens
            (wu.GetUser("limited"), True),
            (wt.CreatePersonalAccessToken("mine", 0), True),
            (wt.GetPersonalAccessTokens(), True),
            (wt.DeletePersonalAccessToken("mine"), True),
            (wu.ChangePassword("limited", "secret", "secret2"), True),
            (wu.ChangePassword("iggy", "iggy", "hacked"), False),
            (wsys.GetMe(), True),
        ]
        for request, allowed in expectations:
            assert _ok(u.call_request(request)) is allowed, (request, allowed)
        # sending: a topic-scoped send_messages on perm-b/b1 only
        assert _ok(send_batch(u, "perm-b", "b1", 0, [b"allowed"])) is True
        assert _ok(send_batch(u, "perm-b", "b2", 0, [b"refused"])) is False
        assert _ok(send_batch(u, "perm-a", "a1", 0, [b"read is not write"])) is False

        # a grant made by root reaches the live session at once
        assert root.call_request(
            wu.UpdatePermissions(me.id, _wire_permissions(read_servers=True, streams=permissions))
        ).status == 0
        assert _ok(u.call_request(wsys.GetStats())) is True

    # manage_streams includes manage_topics, which includes send_messages (not read_servers or users)
    run(_create_user(server, "streamer", "secret", ig.Permissions(ig.GlobalPermissions(manage_streams=True))))
    with RawConnection(server.iggy_address) as s:
        s.login("streamer", "secret")
        assert _ok(s.call_request(ws.CreateStream("perm-c"))) is True
        assert _ok(s.call_request(wtop.CreateTopic("perm-c", 1, "c1"))) is True
        assert _ok(send_batch(s, "perm-c", "c1", 0, [b"managed"])) is True
        assert _ok(poll(s, "perm-c", "c1", 0)) is True
        assert _ok(s.call_request(ws.GetStreams())) is True
        assert _ok(s.call_request(wsys.GetStats())) is False
        assert _ok(s.call_request(wu.GetUsers())) is False
        assert _ok(s.call_request(ws.DeleteStream("perm-c"))) is True


def _wire_permissions(*, read_servers: bool, streams: ig.Permissions):
    """The wire form of ``streams``' stream grants plus a global read_servers (via the codec)."""
    from headwater.codec.iggy import primitives as wp

    def flags(obj, names):
        return [bool(getattr(obj, n)) for n in names]

    stream_flags = ("manage_stream", "read_stream", "manage_topics", "read_topics", "poll_messages", "send_messages")
    topic_flags = ("manage_topic", "read_topic", "poll_messages", "send_messages")
    out = []
    for sid, sp in sorted((streams.streams or {}).items()):
        topics = tuple(
            wp.TopicPermissions(tid, *flags(tp, topic_flags)) for tid, tp in sorted((sp.topics or {}).items())
        )
        out.append(wp.StreamPermissions(sid, *flags(sp, stream_flags), topics))
    g = wp.GlobalPermissions(False, read_servers, *([False] * 8))
    return wp.Permissions(g, tuple(out))


def test_server_side_balanced_and_key_partitioning(server, root):
    """The SDK resolves Balanced and MessagesKey itself; other clients leave it to the server."""
    assert root.call_request(ws.CreateStream("routing")).status == 0
    assert root.call_request(wtop.CreateTopic("routing", 3, "t")).status == 0

    def send(partitioning: Partitioning) -> int:
        batch = batch_codec.build_batch([batch_codec.Message(b"x")])
        a = root.call_request(wm.SendMessages("routing", "t", partitioning, 1, memoryview(batch)))
        assert a.status == 0
        (confirmation,) = wm.decode_send_messages_reply(a.body)
        return confirmation.partition_id

    assert sorted(send(Partitioning.balanced()) for _ in range(6)) == [0, 0, 1, 1, 2, 2]
    keyed = {send(Partitioning.by_key(b"order-17")) for _ in range(5)}
    assert keyed == {xxhash.xxh3_64_intdigest(b"order-17") % 3}
    assert len({send(Partitioning.by_key(b"k-%d" % i)) for i in range(30)}) == 3
    assert send(Partitioning.by_partition(2)) == 2


def test_group_poll_without_a_partition_id(server, root):
    """Served too (the SDK always names one): the group hands the member its partitions in turn."""
    assert root.call_request(ws.CreateStream("handout")).status == 0
    assert root.call_request(wtop.CreateTopic("handout", 2, "t")).status == 0
    for p in (0, 1):
        assert send_batch(root, "handout", "t", p, [b"p%d" % p]).status == 0
    assert root.call_request(wg.CreateConsumerGroup("handout", "t", "g")).status == 0
    group = Consumer(ConsumerKind.CONSUMER_GROUP, "g")
    assert poll(root, "handout", "t", None, consumer=group).status == 5006  # not a member
    assert root.call_request(wg.JoinConsumerGroup("handout", "t", "g")).status == 0
    seen = set()
    for _ in range(2):
        prefix, rest = wm.decode_poll_reply(poll(root, "handout", "t", None, consumer=group).body)
        assert prefix.messages_count == 1
        seen.add(prefix.partition_id)
    assert seen == {0, 1}
    with RawConnection(server.iggy_address) as a, RawConnection(server.iggy_address) as b:
        for member in (a, b):
            member.login()
            assert member.call_request(wg.JoinConsumerGroup("handout", "t", "g")).status == 0
        # three members, two partitions: somebody holds none, and polls nothing
        def assigned(m: RawConnection) -> tuple[int, ...]:
            sync = m.call_request(wg.SyncConsumerGroup("handout", "t", "g"))
            return wg.decode_sync_consumer_group_reply(sync.body).partitions

        empty = [m for m in (root, a, b) if assigned(m) == ()]
        assert len(empty) == 1
        reply = poll(empty[0], "handout", "t", None, consumer=group)
        assert (reply.status, reply.body) == (0, wm.encode_poll_prefix(0, 0, 0))


def test_a_silent_client_is_evicted_as_stale_when_heartbeats_are_on(fresh_server):
    fresh_server.stop()
    fresh_server.start(env={"HEADWATER_TCP_HEARTBEAT_INTERVAL_S": "0.5"})
    allowance = 1.2 * 0.5  # counted only while the server waits for a connection's next request
    # The silent one logs in first: the chatty one is never left waiting on another connection's
    # login (Argon2id, slow under load), and the silent one's allowance starts with its reply.
    with RawConnection(fresh_server.iggy_address) as silent:
        silent.login()
        with RawConnection(fresh_server.iggy_address) as chatty:
            chatty.login()
            logged_in = time.monotonic()
            # Ping back to back (each reply restarts the allowance) until the silent one is evicted and
            # the chatty one has outlived its own allowance twice over by talking; the last bound only
            # stops a hang, it is not what is tested.
            pings, give_up = 0, logged_in + 60
            while not select.select([silent.sock], [], [], 0)[0] or time.monotonic() < logged_in + 2 * allowance:
                assert time.monotonic() < give_up, "the silent connection was never evicted"
                assert chatty.call(Command.PING).status == 0
                pings += 1
            a = silent.read()
            assert (a.kind, a.reason) == ("eviction", EvictionReason.STALE_CLIENT)
            assert silent.closed()
            assert pings and chatty.call(Command.PING).status == 0


def test_a_poll_of_a_huge_count_is_capped_at_the_frame_size(fresh_server):
    fresh_server.stop()
    fresh_server.start(env={"HEADWATER_TCP_MAX_FRAME_SIZE": "8192"})
    with RawConnection(fresh_server.iggy_address) as c:
        c.login()
        assert c.call_request(ws.CreateStream("capped")).status == 0
        assert c.call_request(wtop.CreateTopic("capped", 1, "t")).status == 0
        for i in range(10):
            assert send_batch(c, "capped", "t", 0, [b"%d" % i + b"x" * 2000]).status == 0
        seen = []
        strategy = PollingStrategy(PollingKind.OFFSET, 0)
        while len(seen) < 10:
            a = poll(c, "capped", "t", 0, strategy=strategy, count=2**32 - 1)
            assert a.status == 0 and len(a.body) <= 8192  # never more than a frame's worth
            prefix, rest = wm.decode_poll_reply(a.body)
            assert 1 <= prefix.messages_count < 10
            got = [bytes(f.payload) for b in batch_codec.split_batches(rest) for f in batch_codec.iter_frames(b)]
            seen += got
            strategy = PollingStrategy(PollingKind.OFFSET, len(seen))
        assert seen == [b"%d" % i + b"x" * 2000 for i in range(10)]
