"""The SendMessages fast path of ``IggyFrontend`` (an authenticated session's send, no header or
request objects built) against the full path (``send_fast_path`` off): same replies, statuses, evictions, metrics, and every
change of session, user, permissions and catalog takes effect on the very next send. Sans-I/O,
on a real broker in ``tmp_path``, logged in through a real Register frame."""

from __future__ import annotations

import asyncio

import pytest

from headwater import metrics
from headwater.codec import batch as batch_codec
from headwater.codec.iggy import framing
from headwater.codec.iggy.codes import Command, EvictionReason
from headwater.codec.iggy.commands import messages as w
from headwater.codec.iggy.primitives import Partitioning
from headwater.codec.iggy.version import PROTOCOL_VERSION, ClientVersionInfo, LoginRegister, decode_login_reply, encode_login_register
from headwater.config import TcpConfig
from headwater.core.broker import Broker
from headwater.core.permissions import GlobalPermissions, Permissions
from headwater.core.users import USER_ACTIVE, USER_INACTIVE
from headwater.frontends.iggy.server import IggyFrontend
from headwater.storage.api import open_engine

CLIENT = 0x1234_5678_9ABC_DEF0_0FED_CBA9_8765_4321
SENDER = Permissions(global_=GlobalPermissions(send_messages=True))


@pytest.fixture
def world(tmp_path):
    frontend = IggyFrontend(Broker(open_engine(str(tmp_path))), TcpConfig())
    broker = frontend.broker
    stream = broker.create_stream("orders")
    topic = broker.create_topic(stream.id, "paid", 2, {})
    broker.users.create("iggy", "root-pw", USER_ACTIVE, None, broker.clock())  # id 0: the root user
    user = broker.users.create("alice", "secret-pw", USER_ACTIVE, SENDER, broker.clock())
    return frontend, stream, topic, user


def _batch(n: int = 3) -> bytes:
    return batch_codec.build_batch([batch_codec.Message(b"v%d" % i) for i in range(n)])


class _Conn:
    def __init__(self, frontend: IggyFrontend, client: int = CLIENT):
        self.session = frontend.session("127.0.0.1:9", "tcp")
        self.client = client
        self.epoch = 0
        self.request = 0

    async def login(self, username="alice", password="secret-pw") -> None:
        body = encode_login_register(LoginRegister(ClientVersionInfo(PROTOCOL_VERSION, "test", "1"), username, password))
        reply = await self._frame(framing.encode_request(Command.LOGIN_REGISTER, body, client=self.client))
        assert framing.decode_reply_header(reply).status == 0
        _, payload = framing.split_result(reply[framing.HEADER_SIZE:])
        self.epoch = decode_login_reply(payload).session

    async def send(self, stream, topic, partitioning=Partitioning.by_partition(0), batch=None, *, session=None,
                   client=None, full=False, metadata_length_delta=0):
        batch = _batch() if batch is None else batch
        count = batch_codec.read_header(batch).message_count
        body = bytearray(w.encode_send_messages(w.SendMessages(stream, topic, partitioning, count, memoryview(batch))))
        body[0] += metadata_length_delta
        self.request += 1
        frame = framing.encode_request(
            Command.SEND_MESSAGES, body, client=self.client if client is None else client,
            request=self.request, session=self.epoch if session is None else session,
        )
        frontend = self.session.frontend
        frontend.send_fast_path = not full
        try:
            return await self._frame(frame)
        finally:
            frontend.send_fast_path = True

    async def _frame(self, frame: bytes):
        head = frame[:framing.HEADER_SIZE]
        assert self.session.check_head(head) is None
        return await self.session.handle(head, bytearray(frame[framing.HEADER_SIZE:]))


def _status(reply: bytes) -> int:
    return framing.decode_reply_header(reply).status


def _fast(conn: _Conn) -> bool:
    """Whether the last request took the fast path (the full path leaves its decoded header)."""
    return conn.session.ctx.header is None


def test_fast_and_full_path_answer_a_send_alike(world):
    frontend, stream, topic, _ = world

    async def go():
        conn = _Conn(frontend)
        await conn.login()
        fast = await conn.send(stream.id, topic.id)
        assert _fast(conn)
        full = await conn.send(stream.id, topic.id, full=True)
        assert not _fast(conn)
        for reply, base in ((fast, 0), (full, 3)):
            head = framing.decode_reply_header(reply)
            assert head.status == 0 and head.op == conn.epoch and head.client == CLIENT
            assert w.decode_send_messages_reply(reply[framing.HEADER_SIZE:]) == (w.SendConfirmation(stream.id, topic.id, 0, base),)
        # the header echo is the full path's, byte for byte, but for the request number
        assert fast[:200] == full[:200] and fast[208:framing.HEADER_SIZE] == full[208:framing.HEADER_SIZE]
        balanced = [await conn.send("orders", "paid", Partitioning.balanced()) for _ in range(2)]
        assert _fast(conn)
        parts = sorted(w.decode_send_messages_reply(r[framing.HEADER_SIZE:])[0].partition_id for r in balanced)
        assert parts == [0, 1]

    asyncio.run(go())


@pytest.mark.parametrize("case", ["no_topic", "no_stream_name", "no_partition", "bad_checksum", "count_mismatch", "bad_metadata"])
def test_refusals_carry_the_same_code_on_both_paths(world, case):
    frontend, stream, topic, _ = world
    batch = bytearray(_batch())
    stream_id, topic_id = stream.id, topic.id
    partitioning = Partitioning.by_partition(0)
    if case == "no_topic":
        topic_id = 77
    elif case == "no_stream_name":
        stream_id = "nope"
    elif case == "no_partition":
        partitioning = Partitioning.by_partition(9)
    elif case == "bad_checksum":
        batch[-1] ^= 0xFF
    elif case == "count_mismatch":
        batch[48] += 1  # the batch header's count no longer matches messages_count: the fast read declines
    damage = 1 if case == "bad_metadata" else 0  # metadata_length one too many: InvalidFormat

    async def go():
        conn = _Conn(frontend)
        await conn.login()
        fast = await conn.send(stream_id, topic_id, partitioning, bytes(batch), metadata_length_delta=damage)
        full = await conn.send(stream_id, topic_id, partitioning, bytes(batch), full=True, metadata_length_delta=damage)
        assert _status(fast) == _status(full) != 0
        assert len(fast) == framing.HEADER_SIZE and not conn.session.closed

    asyncio.run(go())


def test_permission_user_and_catalog_changes_apply_to_the_next_fast_send(world):
    frontend, stream, topic, user = world
    users = frontend.broker.users

    async def go():
        conn = _Conn(frontend)
        await conn.login()
        assert _status(await conn.send(stream.id, topic.id)) == 0 and _fast(conn)
        users.update_permissions(user.id, None)
        assert _status(await conn.send(stream.id, topic.id)) == 41  # Unauthorized
        users.update_permissions(user.id, SENDER)
        assert _status(await conn.send(stream.id, topic.id)) == 0
        frontend.broker.delete_topic(stream.id, topic.id)
        assert _status(await conn.send(stream.id, topic.id)) == 2010  # TopicIdNotFound
        users.update(user.id, None, USER_INACTIVE)
        eviction = await conn.send(stream.id, topic.id)
        assert framing.decode_eviction(eviction).reason == EvictionReason.NO_SESSION and conn.session.closed

    asyncio.run(go())


def test_session_rules_still_fence_a_fast_send(world):
    frontend, stream, topic, _ = world

    async def go():
        old, new = _Conn(frontend), _Conn(frontend)
        await old.login()
        assert _status(await old.send(stream.id, topic.id)) == 0
        await new.login()  # the same client id registered again: the old session is fenced
        assert framing.decode_eviction(await old.send(stream.id, topic.id)).reason == EvictionReason.SESSION_TOO_LOW
        assert _status(await new.send(stream.id, topic.id)) == 0 and _fast(new)
        wrong = await new.send(stream.id, topic.id, session=new.epoch + 5)
        assert framing.decode_eviction(wrong).reason == EvictionReason.SESSION_ERROR
        other = _Conn(frontend, client=CLIENT + 1)
        await other.login()
        stranger = await other.send(stream.id, topic.id, client=CLIENT + 2)
        assert framing.decode_eviction(stranger).reason == EvictionReason.NO_SESSION

    asyncio.run(go())


def test_anonymous_send_is_evicted_and_logout_ends_the_fast_path(world):
    frontend, stream, topic, _ = world

    async def go():
        anonymous = _Conn(frontend)
        assert framing.decode_eviction(await anonymous.send(stream.id, topic.id)).reason == EvictionReason.NO_SESSION
        conn = _Conn(frontend)
        await conn.login()
        logout = await conn._frame(framing.encode_request(Command.LOGOUT_USER, client=CLIENT, request=99))
        assert _status(logout) == 0
        assert framing.decode_eviction(await conn.send(stream.id, topic.id)).reason == EvictionReason.NO_SESSION

    asyncio.run(go())


def test_every_send_is_timed_once_on_either_path(world):
    frontend, stream, topic, _ = world
    timing = metrics.request_histogram("iggy", "tcp", metrics.PRODUCE)

    async def go():
        conn = _Conn(frontend)
        await conn.login()
        before = sum(timing.counts)
        await conn.send(stream.id, topic.id)
        await conn.send(stream.id, 99)  # refused on the fast path: timed too
        await conn.send(stream.id, topic.id, full=True)
        assert sum(timing.counts) - before == 3

    asyncio.run(go())
