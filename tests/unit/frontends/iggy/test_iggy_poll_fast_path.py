"""The PollMessages fast path of ``IggyFrontend`` (an authenticated session's poll, no header or
request objects built) against the full path (``poll_fast_path`` off).

Differential: two brokers over byte-identical copies of one data directory, the same requests
(hypothesis over strategies, offsets, counts, consumers, partitions, identifiers, auto-commit)
to the fast path of one and the full path of the other: every reply (header, prefix, batches)
and every error is the same bytes, and so are the offsets auto-commit stored. Then: every
change of session, user, permissions and catalog takes effect on the very next fast poll, a
corrupt segment fails closed on both paths, and each poll is timed once. Sans-I/O, on real
brokers in ``tmp_path``, logged in through real Register frames."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater import metrics
from headwater.codec import batch as batch_codec
from headwater.codec.iggy import framing
from headwater.codec.iggy.codes import Command, ConsumerKind, EvictionReason, PollingKind
from headwater.codec.iggy.commands import messages as w
from headwater.codec.iggy.primitives import Consumer, PollingStrategy
from headwater.codec.iggy.version import PROTOCOL_VERSION, ClientVersionInfo, LoginRegister, decode_login_reply, encode_login_register
from headwater.config import TcpConfig
from headwater.core.broker import Broker
from headwater.core.permissions import GlobalPermissions, Permissions
from headwater.core.users import USER_ACTIVE, USER_INACTIVE
from headwater.frontends.iggy.server import IggyFrontend
from headwater.storage.api import open_engine

CLIENT = 0x1234_5678_9ABC_DEF0_0FED_CBA9_8765_4321
POLLER = Permissions(global_=GlobalPermissions(poll_messages=True))
SIZES = (1, 3, 50, 7, 1, 120, 2)  # messages per stored batch of partition 0


def _fill(path: str) -> None:
    """Stream "orders" (0), topic "paid" (0) with 2 partitions, a group "g", users iggy (root)
    and alice (may poll); partition 0 holds batches of SIZES messages, partition 1 one batch."""
    broker = Broker(open_engine(path))
    try:
        stream = broker.create_stream("orders")
        topic = broker.create_topic(stream.id, "paid", 2, {})
        broker.create_group(stream.id, topic.id, "g")
        broker.users.create("iggy", "root-pw", USER_ACTIVE, None, broker.clock())
        broker.users.create("alice", "secret-pw", USER_ACTIVE, POLLER, broker.clock())
        n = 0
        for size in SIZES:
            msgs = [batch_codec.Message(b"v%d-" % (n + i) + os.urandom(i % 7)) for i in range(size)]
            broker.append(topic.partition(0), bytearray(batch_codec.build_batch(msgs)))
            n += size
        broker.append(topic.partition(1), bytearray(batch_codec.build_batch([batch_codec.Message(b"p1")] * 4)))
    finally:
        broker.close()


class _Conn:
    """One logged-in session on ``frontend`` (its own event loop: hypothesis calls in a loop)."""

    def __init__(self, frontend: IggyFrontend, loop: asyncio.AbstractEventLoop, client: int = CLIENT):
        self.session = frontend.session("127.0.0.1:9", "tcp")
        self.frontend, self.loop, self.client = frontend, loop, client
        self.request = 0

    def login(self, username="alice", password="secret-pw") -> None:
        body = encode_login_register(LoginRegister(ClientVersionInfo(PROTOCOL_VERSION, "test", "1"), username, password))
        reply = self.frame(framing.encode_request(Command.LOGIN_REGISTER, body, client=self.client))
        assert framing.decode_reply_header(reply).status == 0
        assert decode_login_reply(framing.split_result(reply[framing.HEADER_SIZE:])[1]).session > 0

    def poll(self, req: w.PollMessages, *, full: bool = False) -> bytes:
        self.request += 1
        frame = framing.encode_request(Command.POLL_MESSAGES, w.encode_poll_messages(req), client=self.client,
                                       request=self.request)
        self.frontend.poll_fast_path = not full
        try:
            return self.frame(frame)
        finally:
            self.frontend.poll_fast_path = True

    def frame(self, frame: bytes) -> bytes:
        head = frame[:framing.HEADER_SIZE]
        assert self.session.check_head(head) is None
        reply = self.loop.run_until_complete(self.session.handle(head, frame[framing.HEADER_SIZE:]))
        return b"".join(bytes(b) for b in reply) if isinstance(reply, list) else reply

    @property
    def fast(self) -> bool:
        """Whether the last request took the fast path (the full path leaves its decoded header)."""
        return self.session.ctx.header is None


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    path = tmp_path_factory.mktemp("poll-fast-path") / "filled"
    _fill(str(path))
    return path


@pytest.fixture
def twins(filled, tmp_path):
    """Two frontends over byte-identical copies of one filled data directory, each logged in."""
    for d in "ab":
        shutil.copytree(filled, tmp_path / d)
    loop = asyncio.new_event_loop()
    frontends = [IggyFrontend(Broker(open_engine(str(tmp_path / d))), TcpConfig()) for d in "ab"]
    conns = [_Conn(f, loop) for f in frontends]
    for c in conns:
        c.login()
    yield conns
    for f in frontends:
        f.broker.close()
    loop.close()


def _status(reply: bytes) -> int:
    return framing.decode_reply_header(reply).status


identifiers = st.sampled_from([0, "orders", 9, "nope"]), st.sampled_from([0, "paid", 5, "x"])
single = st.builds(Consumer, st.just(ConsumerKind.CONSUMER), st.sampled_from([1, 7, "reader", "7"]))
consumers = st.one_of(single, single, single, st.builds(Consumer, st.just(ConsumerKind.CONSUMER_GROUP),
                                                        st.sampled_from([0, "g", "nope", 3])))
polls = st.builds(
    w.PollMessages,
    consumers,
    st.one_of(st.just(0), st.just("orders"), identifiers[0]),
    st.one_of(st.just(0), st.just("paid"), identifiers[1]),
    st.sampled_from([None, 0, 0, 1, 7]),
    st.builds(PollingStrategy, st.sampled_from(PollingKind),
              st.one_of(st.integers(0, sum(SIZES) + 3), st.sampled_from([2**63, 2**64 - 1]))),
    st.one_of(st.integers(0, 130), st.sampled_from([1000, 2**32 - 1])),
    st.booleans(),
)


def test_fast_and_full_path_give_the_same_bytes(twins):
    fast, full = twins

    @settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(polls, min_size=1, max_size=4))
    def check(requests):
        for req in requests:
            a = fast.poll(req)
            assert fast.fast
            b = full.poll(req, full=True)
            assert not full.fast
            assert a == b, req
            if _status(a) == 0:  # a served poll: the prefix announces the frames that follow
                prefix, batches = w.decode_poll_reply(a[framing.HEADER_SIZE:])
                assert prefix.messages_count == sum(batch_codec.read_header(b).message_count
                                                    for b in batch_codec.split_batches(batches))
        for c in ("1", "7", "reader"):  # what auto-commit stored is the same too
            pa, pb = (conn.frontend.broker.topic(0, 0).partition(0) for conn in twins)
            assert fast.frontend.broker.committed(pa, "consumer", c) == full.frontend.broker.committed(pb, "consumer", c)

    check()


def test_a_poll_reads_whole_stored_batches_without_copying(twins):
    fast, _ = twins
    session = fast.session
    req = w.PollMessages(Consumer(ConsumerKind.CONSUMER, 1), 0, 0, 0, PollingStrategy(PollingKind.OFFSET, 4), 50, False)
    body = w.encode_poll_messages(req)
    frame = framing.encode_request(Command.POLL_MESSAGES, body, client=CLIENT, request=1)
    reply = fast.loop.run_until_complete(session.handle(frame[:framing.HEADER_SIZE], frame[framing.HEADER_SIZE:]))
    assert isinstance(reply, list) and fast.fast
    header, prefix, *batches = reply
    assert len(header) == framing.HEADER_SIZE and len(prefix) == w.POLL_PREFIX_SIZE
    assert [type(b) for b in batches] == [memoryview]  # the stored batch of 50 (offsets 4..53), as read
    assert batch_codec.read_header(batches[0]).message_count == 50


def test_permission_user_and_catalog_changes_apply_to_the_next_fast_poll(twins):
    conn, _ = twins
    broker = conn.frontend.broker
    users = broker.users
    alice = users.find("alice")
    req = w.PollMessages(Consumer(ConsumerKind.CONSUMER, 1), "orders", "paid", 0, PollingStrategy(PollingKind.FIRST), 5,
                         False)
    assert _status(conn.poll(req)) == 0 and conn.fast
    users.update_permissions(alice.id, None)
    assert _status(conn.poll(req)) == 41  # Unauthorized, on the very next poll
    assert not conn.fast  # (a changed user: the full path picks it up)
    assert _status(conn.poll(req)) == 41 and conn.fast
    users.update_permissions(alice.id, POLLER)
    assert _status(conn.poll(req)) == 0 and not conn.fast
    assert _status(conn.poll(req)) == 0 and conn.fast
    broker.delete_topic(0, 0)
    assert _status(conn.poll(req)) == 2010  # TopicIdNotFound (by name too)
    users.update(alice.id, None, USER_INACTIVE)
    eviction = conn.poll(req)
    assert framing.decode_eviction(eviction).reason == EvictionReason.NO_SESSION and conn.session.closed


def _messages(reply: bytes) -> int:
    assert _status(reply) == 0
    return w.decode_poll_reply(reply[framing.HEADER_SIZE:])[0].messages_count


def test_a_kept_route_follows_acls_renames_deletions_and_recreated_topics(twins):
    """A single consumer's route is kept per connection (``IggyFrontend._poll_body``): every
    change it depends on takes effect on the very next poll, still on the fast path."""
    from headwater.core.acls import AclBinding, AclFilter, Operation as AclOp, PatternType, Permission, ResourceType

    conn, _ = twins
    broker = conn.frontend.broker
    routes = conn.session.cs.polls
    by_name = w.PollMessages(Consumer(ConsumerKind.CONSUMER, 1), "orders", "paid", 0,
                             PollingStrategy(PollingKind.OFFSET, 0), 1000, False)
    by_id = w.PollMessages(Consumer(ConsumerKind.CONSUMER, 1), 0, 0, 1, PollingStrategy(PollingKind.FIRST), 1000, False)
    assert _messages(conn.poll(by_name)) == sum(SIZES) and conn.fast
    assert len(routes) == 1
    assert _messages(conn.poll(by_name)) == sum(SIZES) and conn.fast and len(routes) == 1  # the kept route
    assert _messages(conn.poll(by_id)) == 4 and len(routes) == 2

    deny = AclBinding(ResourceType.TOPIC, "orders.paid", PatternType.LITERAL, "User:alice", "*", AclOp.READ,
                      Permission.DENY)
    broker.acls.create([deny])
    assert _status(conn.poll(by_name)) == 41 and conn.fast  # Unauthorized on the next poll
    assert _status(conn.poll(by_id)) == 41
    broker.acls.delete([AclFilter(ResourceType.TOPIC, "orders.paid", PatternType.LITERAL, None, None, AclOp.ANY,
                                  Permission.ANY)])
    assert _messages(conn.poll(by_name)) == sum(SIZES) and conn.fast

    broker.delete_partitions(0, 0, 1)  # partition 1 goes: its kept route with it
    assert _status(conn.poll(by_id)) == 3007 and conn.fast  # PartitionNotFound
    assert _messages(conn.poll(by_name)) == sum(SIZES)

    broker.update_stream(0, "shipped")  # the stream's old name no longer resolves
    assert _status(conn.poll(by_name)) == 1009 and conn.fast  # StreamIdNotFound
    broker.update_stream(0, "orders")
    assert _messages(conn.poll(by_name)) == sum(SIZES)

    broker.delete_topic(0, 0)
    broker.create_topic(0, "paid", 1, {})  # the same names, a new empty topic: read, not the old one
    assert _messages(conn.poll(by_name)) == 0 and conn.fast
    new = broker.topic("orders", "paid").partition(0)
    broker.append(new, bytearray(batch_codec.build_batch([batch_codec.Message(b"new")] * 3)))
    assert _messages(conn.poll(by_name)) == 3 and conn.fast


def test_kept_routes_are_bounded_per_connection(twins):
    conn, _ = twins
    for i in range(40):  # 40 consumers: 40 different route keys
        req = w.PollMessages(Consumer(ConsumerKind.CONSUMER, i), 0, 0, 0, PollingStrategy(PollingKind.OFFSET, 0), 1,
                             False)
        assert _messages(conn.poll(req)) == 1 and conn.fast
        assert 1 <= len(conn.session.cs.polls) <= 8


def test_session_rules_still_fence_a_fast_poll(twins):
    old, _ = twins
    req = w.PollMessages(Consumer(ConsumerKind.CONSUMER, 1), 0, 0, None, PollingStrategy(PollingKind.OFFSET, 0), 5,
                         False)
    assert _status(old.poll(req)) == 0 and old.fast
    new = _Conn(old.frontend, old.loop)
    new.login()  # the same client id registered again: the old session is fenced
    assert framing.decode_eviction(old.poll(req)).reason == EvictionReason.SESSION_TOO_LOW
    assert _status(new.poll(req)) == 0 and new.fast
    other = _Conn(old.frontend, old.loop, client=CLIENT + 1)
    other.login()
    other.client = CLIENT + 2  # reads are sessionless: another client id in the header is still served
    assert _status(other.poll(req)) == 0 and other.fast


def test_anonymous_and_logged_out_polls_are_denied(twins):
    conn, _ = twins
    req = w.PollMessages(Consumer(ConsumerKind.CONSUMER, 1), 0, 0, None, PollingStrategy(PollingKind.OFFSET, 0), 5,
                         False)
    anonymous = _Conn(conn.frontend, conn.loop, client=CLIENT + 5)
    assert _status(anonymous.poll(req)) == 40 and not anonymous.fast  # Unauthenticated
    assert _status(conn.frame(framing.encode_request(Command.LOGOUT_USER, client=CLIENT, request=99))) == 0
    assert _status(conn.poll(req)) == 40 and not conn.fast


def _flip(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x40]))


def _fails_closed_on_both_paths(fast, full, offset: int = 0) -> None:
    """A poll that begins at the damaged batch (at ``offset``): InvalidMessageChecksum, no body."""
    req = w.PollMessages(Consumer(ConsumerKind.CONSUMER, 1), 0, 0, 0, PollingStrategy(PollingKind.OFFSET, offset),
                         1000, False)
    a, b = fast.poll(req), full.poll(req, full=True)
    assert a == b and len(a) == framing.HEADER_SIZE and _status(a) == 4027  # InvalidMessageChecksum
    assert fast.fast


def test_a_corrupt_segment_fails_closed_on_both_paths(twins):
    for conn in twins:
        log = conn.frontend.broker.topic(0, 0).partition(0).log
        seg = log._segments[-1]
        _flip(seg.log_path, os.path.getsize(seg.log_path) - 1)  # the last byte of the last batch's last frame
    fast, full = twins
    last = sum(SIZES[:-1])  # the damaged batch's first offset
    for offset in (last, last + 1):
        _fails_closed_on_both_paths(fast, full, offset)
    # a poll from before the damage gets the batches before it, unchanged, and stops there
    req = w.PollMessages(Consumer(ConsumerKind.CONSUMER, 1), 0, 0, 0, PollingStrategy(PollingKind.OFFSET, 0), 1000,
                         False)
    a, b = fast.poll(req), full.poll(req, full=True)
    assert a == b and _status(a) == 0
    _, batches = w.decode_poll_reply(a[framing.HEADER_SIZE:])
    offsets = [batch_codec.read_header(x).base_offset + f.offset_delta
               for x in batch_codec.split_batches(batches) for f in batch_codec.iter_frames(x)]
    assert offsets == list(range(last))
    clean = w.PollMessages(Consumer(ConsumerKind.CONSUMER, 1), 0, 0, 1, PollingStrategy(PollingKind.OFFSET, 0), 10,
                           False)
    assert _status(fast.poll(clean)) == 0  # the other partition still serves


def test_every_poll_is_timed_once_on_either_path(twins):
    conn, _ = twins
    timing = metrics.request_histogram("iggy", "tcp", metrics.FETCH)
    ok = w.PollMessages(Consumer(ConsumerKind.CONSUMER, 1), 0, 0, 0, PollingStrategy(PollingKind.OFFSET, 0), 5, False)
    refused = w.PollMessages(Consumer(ConsumerKind.CONSUMER, 1), 0, 0, 9, PollingStrategy(PollingKind.OFFSET, 0), 5,
                             False)
    before = sum(timing.counts)
    conn.poll(ok)
    conn.poll(refused)  # PartitionNotFound on the fast path: timed too
    conn.poll(ok, full=True)
    assert sum(timing.counts) - before == 3


def _drop_cache(conn) -> None:
    """Drop the partitions' segment files from the page cache (a consumer far behind: its poll
    reads from the disk); skips where the filesystem keeps the pages."""
    from headwater.storage.local import readahead

    for p in (0, 1):
        for seg in conn.frontend.broker.topic(0, 0).partition(p).log._segments:
            if not readahead.evict(seg.log_path):
                pytest.skip("this filesystem keeps the pages in memory")


def test_a_poll_of_pages_not_in_the_page_cache_gives_the_cached_bytes(twins):
    fast, full = twins
    reqs = [w.PollMessages(Consumer(ConsumerKind.CONSUMER, 1), 0, 0, p, PollingStrategy(PollingKind.OFFSET, o), n,
                           False) for p, o, n in ((0, 0, 1000), (0, 5, 60), (1, 0, 10))]
    cached = [fast.poll(r) for r in reqs]
    assert all(_status(a) == 0 for a in cached)
    for r, want in zip(reqs, cached):  # (the reply headers differ in the request number only)
        for conn in twins:
            _drop_cache(conn)
        a = fast.poll(r)
        assert fast.fast and _status(a) == 0 and a[framing.HEADER_SIZE:] == want[framing.HEADER_SIZE:]
        b = full.poll(r, full=True)
        assert not full.fast and _status(b) == 0 and b[framing.HEADER_SIZE:] == want[framing.HEADER_SIZE:]


def test_a_corrupt_segment_read_from_the_disk_fails_closed_on_both_paths(twins):
    for conn in twins:
        seg = conn.frontend.broker.topic(0, 0).partition(0).log._segments[-1]
        _flip(seg.log_path, 256 + 48 + 1)  # a payload byte of the first stored batch
        _drop_cache(conn)
    _fails_closed_on_both_paths(*twins)


def test_a_partition_deleted_while_its_bytes_are_read_in(twins):
    from headwater.core import errors

    fast, _ = twins
    broker = fast.frontend.broker
    p = broker.topic(0, 0).partition(0)
    _drop_cache(fast)

    async def race():
        task = asyncio.ensure_future(broker.read_visible_waiting(p, 0, 1000))
        await asyncio.sleep(0)  # the read misses and waits for the worker
        assert not task.done()
        broker.delete_topic(0, 0)
        with pytest.raises((errors.TopicNotFound, errors.PartitionNotFound)):
            await task

    fast.loop.run_until_complete(race())
