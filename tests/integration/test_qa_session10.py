"""QA, session 10: trying to break what landed this session, on real server processes with real
clients (raw Iggy frames, apache-iggy, confluent-kafka) and real files.

- The kept poll route (``IggyFrontend._poll_body``: a single consumer's topic, partition,
  permission and consumer key kept per connection under the body bytes before the strategy):
  a connection that polls the same bytes again must get what a fresh connection (which
  resolves everything) gets, byte for byte, after every catalog change (renames, deletes and
  re-creates under the same names and ids, partitions added and removed, purges), permission
  change (revoked, granted, user deleted, Kafka ACLs on the Kafka stream), a logout and login
  as another user on the same connection, and with the same bytes but another strategy, count
  or auto-commit; more than 8 routes on one connection; many connections polling while topics
  are re-created under them.
- The spare receive buffer (``FrameReader``: a served body reused for the next frame of its
  size): pipelined sends of one size, sizes alternating, enforce_fsync (the reply parked on the
  sync), polls of the bytes just sent from other connections; every acknowledged message reads
  back byte-identical (frame checksums verified), also after a SIGKILL and a restart.
- The compiled flusher (``_sync_c``): a failing fdatasync (ext4 on a loop device that runs out)
  fences the partition with and without ``HEADWATER_NO_EXTENSIONS=1``, for enforce_fsync and
  for the periodic rounds nobody waits for.
- The one-call page-cache read (``_pread_c``, up to 256 KiB): a stored batch of exactly
  256 KiB, one byte more or less, read cached and after the pages were dropped, compared with
  the file's bytes; a consumer following a partition whose segments roll between its polls.
"""

from __future__ import annotations

import glob
import hashlib
import os
import random
import socket
import struct
import threading
import time

import apache_iggy as ig
import pytest

from headwater.codec import batch as batch_codec
from headwater.codec.iggy.codes import Command, ConsumerKind, Operation, PollingKind
from headwater.codec.iggy.commands import groups as wg
from headwater.codec.iggy.commands import messages as wm
from headwater.codec.iggy.commands import offsets as wo
from headwater.codec.iggy.commands import partitions as wpart
from headwater.codec.iggy.commands import streams as ws
from headwater.codec.iggy.commands import topics as wtop
from headwater.codec.iggy.commands import users as wu
from headwater.codec.iggy.primitives import Consumer, Partitioning, PollingStrategy
from hw_server import ServerProcess, free_port
from test_iggy_raw import ROOT, RawConnection, _wire_permissions, send_batch
from test_robustness_fsync import failing_disk, send_until_fenced
from test_robustness_wire import healthy, run, sdk_client

pytestmark = pytest.mark.slow  # a file of long tests: handed out first (tests/conftest.py)

POLL = int(Command.POLL_MESSAGES)
SEND = int(Command.SEND_MESSAGES)
UNAUTHORIZED = 41


# --------------------------------------------------------------------------- helpers


def poll_body(stream, topic, partition, *, consumer: int | str = 1, kind=PollingKind.OFFSET, value: int = 0,
              count: int = 1000, auto_commit: bool = False, group: bool = False) -> bytes:
    c = Consumer(ConsumerKind.CONSUMER_GROUP if group else ConsumerKind.CONSUMER, consumer)
    return wm.encode_poll_messages(wm.PollMessages(c, stream, topic, partition, PollingStrategy(kind, value), count,
                                                   auto_commit))


def answer(conn: RawConnection, body: bytes) -> tuple:
    """(kind, status or eviction reason, body) of one PollMessages of ``body``."""
    conn.send(conn.frame(POLL, body))
    a = conn.read()
    return (a.kind, a.status if a.kind == "reply" else a.reason, a.body)


def fresh_answer(server, body: bytes, user: tuple[str, str] = ROOT) -> tuple:
    """What a new connection (no kept route) answers to ``body``: the reference."""
    with RawConnection(server.iggy_address) as c:
        c.login(*user)
        return answer(c, body)


def payloads_of(reply_body: bytes) -> list[bytes]:
    prefix, batches = wm.decode_poll_reply(reply_body)
    out = []
    for b in batch_codec.split_batches(batches):
        batch_codec.verify(b, check_offset_deltas=False)  # every frame's checksum and the batch's
        out += [bytes(f.payload) for f in batch_codec.iter_frames(b)]
    assert len(out) == prefix.messages_count
    return out


def offsets_of(reply_body: bytes) -> list[int]:
    _, batches = wm.decode_poll_reply(reply_body)
    out = []
    for b in batch_codec.split_batches(batches):
        h = batch_codec.read_header(b)
        out += [h.base_offset + f.offset_delta for f in batch_codec.iter_frames(b)]
    return out


def tuple_address(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


def ok(a) -> bool:
    return a.kind == "reply" and a.status == 0


def stream_id(root: RawConnection, name: str) -> int:
    return ws.decode_stream_details(root.call_request(ws.GetStream(name)).body).id


def topic_id(root: RawConnection, stream, name: str) -> int:
    return next(t.id for t in ws.decode_stream_details(root.call_request(ws.GetStream(stream)).body).topics
                if t.name == name)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = ServerProcess(tmp_path_factory.mktemp("qa10") / "data", free_port(), free_port()).start(
        env={"HEADWATER_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0"})
    yield s
    if s.proc is not None:
        assert s.stop() == 0, s.log()[-3000:]


@pytest.fixture
def root(server):
    with RawConnection(server.iggy_address) as c:
        c.login()
        yield c


# --------------------------------------------------------------------------- the kept poll route


def test_a_kept_route_answers_what_a_fresh_connection_answers_after_every_catalog_change(server, root):
    """One connection polls the same bytes after each change (by names and by ids, partitions 0
    and 1): its reply is byte-identical to a new connection's."""
    assert ok(root.call_request(ws.CreateStream("rs")))
    assert ok(root.call_request(wtop.CreateTopic("rs", 2, "rt")))
    sid, tid = stream_id(root, "rs"), topic_id(root, "rs", "rt")
    generation = [0]

    def fill(partitions=(0, 1), n=3):
        for p in partitions:
            assert ok(send_batch(root, "rs", "rt", p, [b"g%d-p%d-%d" % (generation[0], p, i) for i in range(n)]))

    fill()
    bodies = {
        "names p0": poll_body("rs", "rt", 0),
        "names p1": poll_body("rs", "rt", 1),
        "ids p1": poll_body(sid, tid, 1),
        "names, no partition": poll_body("rs", "rt", None),
        "ids, by name consumer": poll_body(sid, tid, 0, consumer="reader"),
    }

    def check(step: str, keeper: RawConnection) -> None:
        for name, body in bodies.items():
            got = answer(keeper, body)
            want = fresh_answer(server, body)
            assert got == want, (step, name, got[:2], want[:2])
            again = answer(keeper, body)  # and once more on the (maybe newly) kept route
            assert again == want, (step, name, "again")

    changes = [
        ("start", lambda: None),
        ("topic renamed", lambda: ok(root.call_request(wtop.UpdateTopic("rs", "rt", "rt-renamed")))),
        ("a new topic takes the old name", lambda: ok(root.call_request(wtop.CreateTopic("rs", 1, "rt")))),
        ("that topic deleted", lambda: ok(root.call_request(wtop.DeleteTopic("rs", "rt")))),
        ("renamed back", lambda: ok(root.call_request(wtop.UpdateTopic("rs", "rt-renamed", "rt")))),
        ("stream renamed", lambda: ok(root.call_request(ws.UpdateStream("rs", "rs-renamed")))),
        ("stream renamed back", lambda: ok(root.call_request(ws.UpdateStream("rs-renamed", "rs")))),
        ("partition 1 deleted", lambda: ok(root.call_request(wpart.DeletePartitions("rs", "rt", 1)))),
        ("partition 1 made again", lambda: ok(root.call_request(wpart.CreatePartitions("rs", "rt", 1)))),
        ("partition 1 filled", lambda: fill((1,), 2)),
        ("topic purged", lambda: ok(root.call_request(wtop.PurgeTopic("rs", "rt")))),
        ("refilled", lambda: fill()),
        ("topic deleted", lambda: ok(root.call_request(wtop.DeleteTopic("rs", "rt")))),
        ("topic made again, 3 partitions", lambda: ok(root.call_request(wtop.CreateTopic("rs", 3, "rt")))),
        ("refilled", lambda: fill((0, 1, 2), 4)),
        ("stream deleted", lambda: ok(root.call_request(ws.DeleteStream("rs")))),
        ("stream and topic made again", lambda: ok(root.call_request(ws.CreateStream("rs")))
         and ok(root.call_request(wtop.CreateTopic("rs", 2, "rt")))),
        ("refilled", lambda: fill((0, 1), 5)),
    ]
    with RawConnection(server.iggy_address) as keeper:
        keeper.login()
        for step, change in changes:
            generation[0] += 1
            assert change() is not False, step
            check(step, keeper)
    # the ids came back: the re-created stream and topic are the ones the id bodies name
    assert (stream_id(root, "rs"), topic_id(root, "rs", "rt")) == (sid, tid)


def _make_user(server, name: str, permissions) -> None:
    async def go():
        c = await sdk_client(server)
        await c.create_user(name, "secret", ig.UserStatus.Active, permissions)
    run(go())


def _poll_grant(sid: int) -> ig.Permissions:
    return ig.Permissions(ig.GlobalPermissions(), {sid: ig.StreamPermissions(poll_messages=True)})


def test_a_kept_route_follows_permissions_users_and_logins_on_the_same_connection(server, root):
    assert ok(root.call_request(ws.CreateStream("ps")))
    assert ok(root.call_request(wtop.CreateTopic("ps", 1, "pt")))
    assert ok(send_batch(root, "ps", "pt", 0, [b"secret-%d" % i for i in range(5)]))
    sid = stream_id(root, "ps")
    _make_user(server, "poller", _poll_grant(sid))
    _make_user(server, "stranger", None)
    poller = wu.decode_user_details(root.call_request(wu.GetUser("poller")).body).id
    body = poll_body("ps", "pt", 0)
    allowed = fresh_answer(server, body, ("poller", "secret"))
    assert allowed[:2] == ("reply", 0) and len(payloads_of(allowed[2])) == 5

    with RawConnection(server.iggy_address) as keeper:
        keeper.login("poller", "secret")
        assert answer(keeper, body) == allowed
        assert answer(keeper, body) == allowed  # kept
        # revoked by root on another connection: the very next poll is refused
        assert ok(root.call_request(wu.UpdatePermissions(poller, None)))
        got = answer(keeper, body)
        assert got == fresh_answer(server, body, ("poller", "secret")) and got[:2] == ("reply", UNAUTHORIZED)
        # granted again
        grant = _wire_permissions(read_servers=False, streams=_poll_grant(sid))
        assert ok(root.call_request(wu.UpdatePermissions(poller, grant)))
        assert answer(keeper, body) == allowed
        # log out, then in as a user without the right, on the same connection
        out = keeper.call(int(Command.LOGOUT_USER), operation=int(Operation.LOGOUT))
        assert out.kind == "reply" and out.status == 0
        keeper.client ^= 2
        keeper.login("stranger", "secret")
        got = answer(keeper, body)
        assert got == fresh_answer(server, body, ("stranger", "secret")) and got[:2] == ("reply", UNAUTHORIZED)
        # and back as the poller
        keeper.call(int(Command.LOGOUT_USER), operation=int(Operation.LOGOUT))
        keeper.client ^= 2
        keeper.login("poller", "secret")
        assert answer(keeper, body) == allowed
        # the user deactivated: refused while inactive, served again once active
        assert ok(root.call_request(wu.UpdateUser(poller, None, 2)))
        a = answer(keeper, body)
        assert a[:2] != ("reply", 0), a[:2]
        if a[0] == "eviction":
            keeper.close()
            keeper.sock = socket.create_connection(tuple_address(server.iggy_address))
        assert ok(root.call_request(wu.UpdateUser(poller, None, 1)))
        if a[0] == "eviction":
            keeper.client ^= 4
            keeper.login("poller", "secret")
        assert answer(keeper, body) == allowed
        # the user deleted: the session ends, nothing is served from the kept route
        assert ok(root.call_request(wu.DeleteUser("poller")))
        keeper.send(keeper.frame(POLL, body))
        a = keeper.read()
        assert a.kind == "eviction" or a.status != 0, a
        assert not (a.kind == "reply" and a.status == 0)


def _kafka_admin_with_topic(server, topic: str):
    """A confluent-kafka AdminClient logged in as root (SASL PLAIN), after creating ``topic``."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": server.kafka_address, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanisms": "PLAIN", "sasl.username": "iggy", "sasl.password": "iggy"})
    for f in admin.create_topics([NewTopic(topic, 1)]).values():
        f.result(20)
    return admin


def test_a_kept_route_follows_kafka_acls_on_the_kafka_stream(server, root):
    """The Kafka stream's topics: a DENY READ ACL made through Kafka refuses the next Iggy poll
    on a connection that kept its route, and deleting it serves the poll again."""
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                       ResourcePatternType, ResourceType)

    admin = _kafka_admin_with_topic(server, "acl-polled")
    assert ok(send_batch(root, "kafka", "acl-polled", 0, [b"k%d" % i for i in range(4)]))
    sid = stream_id(root, "kafka")
    _make_user(server, "kreader", _poll_grant(sid))
    body = poll_body("kafka", "acl-polled", 0)
    user = ("kreader", "secret")
    allowed = fresh_answer(server, body, user)
    assert allowed[:2] == ("reply", 0) and payloads_of(allowed[2]) == [b"k%d" % i for i in range(4)]
    deny = AclBinding(ResourceType.TOPIC, "acl-polled", ResourcePatternType.LITERAL, "User:kreader", "*",
                      AclOperation.READ, AclPermissionType.DENY)
    with RawConnection(server.iggy_address) as keeper:
        keeper.login(*user)
        assert answer(keeper, body) == allowed and answer(keeper, body) == allowed
        admin.create_acls([deny])[deny].result(20)
        got = answer(keeper, body)
        assert got == fresh_answer(server, body, user) and got[:2] == ("reply", UNAUTHORIZED)
        admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, "acl-polled", ResourcePatternType.LITERAL,
                                            "User:kreader", None, AclOperation.ANY, AclPermissionType.ANY)])
        for _ in range(100):  # (the delete's reply is awaited by the futures; polls after it see it)
            got = answer(keeper, body)
            if got == allowed:
                break
            time.sleep(0.05)
        assert got == allowed and got == fresh_answer(server, body, user)


def test_the_same_route_bytes_with_other_strategies_counts_and_commits(server, root):
    assert ok(root.call_request(ws.CreateStream("ss")))
    assert ok(root.call_request(wtop.CreateTopic("ss", 1, "st")))
    for b in range(4):
        assert ok(send_batch(root, "ss", "st", 0, [b"b%d-m%d" % (b, m) for m in range(5)]))
    with RawConnection(server.iggy_address) as keeper:
        keeper.login()
        variants = [
            dict(kind=PollingKind.OFFSET, value=0, count=7),
            dict(kind=PollingKind.OFFSET, value=13, count=2),
            dict(kind=PollingKind.FIRST, count=1),
            dict(kind=PollingKind.LAST, count=3),
            dict(kind=PollingKind.TIMESTAMP, value=0, count=4),
            dict(kind=PollingKind.TIMESTAMP, value=2**63, count=4),
            dict(kind=PollingKind.NEXT, count=6),
            dict(kind=PollingKind.OFFSET, value=0, count=0),
            dict(kind=PollingKind.OFFSET, value=10**12, count=5),
        ]
        for v in variants:  # same consumer, stream, topic, partition bytes: one kept route
            body = poll_body("ss", "st", 0, consumer=9, **v)
            assert answer(keeper, body) == fresh_answer(server, body), v
        # a strategy kind out of range with the kept route's bytes: the full path's error
        for bad in (0, 6, 255):
            body = poll_body("ss", "st", 0, consumer=9)
            body = body[:-14] + bytes([bad]) + body[-13:]
            assert answer(keeper, body) == fresh_answer(server, body), bad
            assert answer(keeper, body)[:2] != ("reply", 0)
        # auto-commit through the kept route: NEXT moves on, and a fresh connection sees the commit
        seen = []
        for _ in range(5):
            got = answer(keeper, poll_body("ss", "st", 0, consumer=9, kind=PollingKind.NEXT, count=3,
                                           auto_commit=True))
            seen += offsets_of(got[2])
        assert seen == list(range(15))
        rest = fresh_answer(server, poll_body("ss", "st", 0, consumer=9, kind=PollingKind.NEXT, count=100))
        assert offsets_of(rest[2]) == list(range(15, 20))
        # an offset stored from another connection: the next NEXT through the kept route starts after it
        assert ok(root.call_request(wo.StoreConsumerOffset(Consumer(ConsumerKind.CONSUMER, 9), "ss", "st", 0, 4)))
        got = answer(keeper, poll_body("ss", "st", 0, consumer=9, kind=PollingKind.NEXT, count=2, auto_commit=True))
        assert offsets_of(got[2]) == [5, 6]
        # auto_commit byte values other than 0 and 1 commit as the full path does
        body = poll_body("ss", "st", 0, consumer=10, kind=PollingKind.NEXT, count=2)
        body = body[:-1] + b"\x07"
        assert offsets_of(answer(keeper, body)[2]) == [0, 1]
        assert offsets_of(answer(keeper, body)[2]) == [2, 3]


def test_more_than_eight_routes_on_one_connection_each_keep_their_own_offsets(server, root):
    assert ok(root.call_request(ws.CreateStream("ms")))
    assert ok(root.call_request(wtop.CreateTopic("ms", 3, "mt")))
    for p in range(3):
        assert ok(send_batch(root, "ms", "mt", p, [b"p%d-%d" % (p, i) for i in range(10)]))
    routes = [(c, p) for c in range(7) for p in range(3)]  # 21 routes
    with RawConnection(server.iggy_address) as keeper:
        keeper.login()
        for step in range(4):
            random.Random(step).shuffle(routes)
            for c, p in routes:
                got = answer(keeper, poll_body("ms", "mt", p, consumer=1000 + c, kind=PollingKind.NEXT, count=2,
                                               auto_commit=True))
                assert got[:2] == ("reply", 0)
                assert payloads_of(got[2]) == [b"p%d-%d" % (p, 2 * step + i) for i in range(2)], (step, c, p)


def test_a_group_poll_never_takes_a_single_consumers_route(server, root):
    """A group member's poll bytes differ from a single consumer's only in the kind byte; the
    group's assignment and its deletion are honoured on every poll."""
    assert ok(root.call_request(ws.CreateStream("gs")))
    assert ok(root.call_request(wtop.CreateTopic("gs", 2, "gt")))
    for p in range(2):
        assert ok(send_batch(root, "gs", "gt", p, [b"g%d-%d" % (p, i) for i in range(3)]))
    assert ok(root.call_request(wg.CreateConsumerGroup("gs", "gt", "grp")))
    with RawConnection(server.iggy_address) as member:
        member.login()
        single = poll_body("gs", "gt", 1, consumer="grp")
        assert answer(member, single)[:2] == ("reply", 0)
        assert answer(member, single)[:2] == ("reply", 0)  # kept for the single consumer "grp"
        group = poll_body("gs", "gt", 1, consumer="grp", group=True)
        not_member = answer(member, group)
        assert not_member == fresh_answer(server, group)
        assert ok(member.call_request(wg.JoinConsumerGroup("gs", "gt", "grp")))
        joined = answer(member, group)
        assert joined[:2] == ("reply", 0)
        assert ok(root.call_request(wg.DeleteConsumerGroup("gs", "gt", "grp")))
        gone = answer(member, group)
        assert gone == fresh_answer(server, group) and gone[:2] != ("reply", 0)
        assert answer(member, single)[:2] == ("reply", 0)


def test_many_connections_polling_while_the_topic_is_made_again_never_see_an_old_generation(server, root):
    """The topic re-created, its partition 1 re-created, or purged, over and over. Each poller reads the generation announced before it sends a poll; the reply must hold
    no message of an older generation (a kept route to a dropped topic would serve one)."""
    assert ok(root.call_request(ws.CreateStream("cs")))
    assert ok(root.call_request(wtop.CreateTopic("cs", 2, "ct")))
    current = [0]
    assert ok(send_batch(root, "cs", "ct", 1, [b"0:%d" % i for i in range(3)]))
    stop = threading.Event()
    failures: list = []
    polls = [0]

    def poller(n: int) -> None:
        try:
            with RawConnection(server.iggy_address) as c:
                c.login()
                body = poll_body("cs", "ct", 1, consumer=n)
                while not stop.is_set():
                    floor = current[0]
                    kind, status, reply = answer(c, body)
                    polls[0] += 1
                    if kind == "reply" and status == 0:
                        for p in payloads_of(reply):
                            if int(p.split(b":")[0]) < floor:
                                failures.append((n, floor, p))
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append((n, repr(e)))

    threads = [threading.Thread(target=poller, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    try:
        for g in range(1, 31):
            if g % 3 == 0:  # partition 1 dropped and made again (the topic stays)
                assert ok(root.call_request(wpart.DeletePartitions("cs", "ct", 1)))
                assert ok(root.call_request(wpart.CreatePartitions("cs", "ct", 1)))
            elif g % 3 == 1:  # the topic dropped and made again
                assert ok(root.call_request(wtop.DeleteTopic("cs", "ct")))
                assert ok(root.call_request(wtop.CreateTopic("cs", 2, "ct")))
            else:  # purged
                assert ok(root.call_request(wtop.PurgeTopic("cs", "ct")))
            assert ok(send_batch(root, "cs", "ct", 1, [b"%d:%d" % (g, i) for i in range(3)]))
            current[0] = g
            time.sleep(0.02)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not failures, failures[:5]
    assert polls[0] > 50


# --------------------------------------------------------------------------- the spare receive buffer


def _payload(tag: bytes, i: int, size: int, rng: random.Random) -> bytes:
    """A self-checking payload: tag, index, random bytes, and the sha256 of all that."""
    head = tag + b":%d:" % i
    body = rng.randbytes(max(0, size - len(head) - 32))
    return head + body + hashlib.sha256(head + body).digest()


def _self_checks(p: bytes) -> bool:
    return hashlib.sha256(p[:-32]).digest() == p[-32:]


def _send_frame(conn: RawConnection, stream, topic, partition: int, payloads: list[bytes]) -> bytes:
    batch = batch_codec.build_batch(batch_codec.Message(p, id=i + 1) for i, p in enumerate(payloads))
    body = wm.encode_send_messages(wm.SendMessages(stream, topic, Partitioning.by_partition(partition),
                                                   len(payloads), memoryview(batch)))
    return conn.frame(SEND, body)


def _pipeline(conn: RawConnection, frames: list[bytes]) -> list:
    """Send every frame without waiting (a thread writes), read the replies in order."""
    writer = threading.Thread(target=lambda: [conn.send(f) for f in frames])
    writer.start()
    answers = [conn.read() for _ in frames]
    writer.join(60)
    return answers


def _read_all(conn: RawConnection, stream, topic, partition: int) -> list[bytes]:
    out: list[bytes] = []
    while True:
        got = answer(conn, poll_body(stream, topic, partition, consumer="audit", value=len(out), count=5000))
        assert got[:2] == ("reply", 0), got[:2]
        more = payloads_of(got[2])
        if not more:
            return out
        out += more


# message counts and payload sizes per frame: equal sizes in a row (the spare is reused), then
# alternating large and small, then a frame over the 1 MiB spare limit between equal ones
SHAPES = [(100, 1000)] * 12 + [(100, 1000), (1, 10), (100, 1000), (3, 200)] * 4 + [(10, 120_000), (100, 1000)] * 2


@pytest.mark.parametrize("fsync", [False, True], ids=["periodic", "enforce_fsync"])
def test_pipelined_sends_read_back_byte_identical_also_after_sigkill(fresh_server, fsync):
    server = fresh_server

    async def setup():
        c = await sdk_client(server)
        await c.create_stream("sp")
        options = {"enforce_fsync": "true"} if fsync else {}
        await c.create_topic("sp", "t", 2, options=options)
    run(setup())
    rng = random.Random(10)
    sent: dict[int, list[bytes]] = {0: [], 1: []}
    stop = threading.Event()
    reader_errors: list = []

    def follower() -> None:
        """Polls partition 0 right behind the sends from another connection (NEXT, auto-commit)."""
        try:
            with RawConnection(server.iggy_address) as c:
                c.login()
                while not stop.is_set():
                    got = answer(c, poll_body("sp", "t", 0, consumer="follower", kind=PollingKind.NEXT, count=500,
                                              auto_commit=True))
                    if got[:2] != ("reply", 0):
                        reader_errors.append(got[:2])
                        return
                    for p in payloads_of(got[2]):
                        if not _self_checks(p):
                            reader_errors.append(p[:40])
        except Exception as e:  # noqa: BLE001
            reader_errors.append(repr(e))

    kafka_seen: list[bytes] = []

    def kafka_follower() -> None:
        """A Kafka consumer of the same partition ("sp.t"), converting the batches just written."""
        from kafka import KafkaConsumer, TopicPartition

        try:
            c = KafkaConsumer(bootstrap_servers=server.kafka_address, enable_auto_commit=False,
                              consumer_timeout_ms=500)
            try:
                tp = TopicPartition("sp.t", 0)
                c.assign([tp])
                c.seek(tp, 0)
                while not stop.is_set():
                    for m in c:
                        kafka_seen.append(m.value)
                        if not _self_checks(m.value):
                            reader_errors.append(("kafka", m.offset))
                # what was sent before the stop: read to the end
                for m in c:
                    kafka_seen.append(m.value)
            finally:
                c.close()
        except Exception as e:  # noqa: BLE001
            reader_errors.append(repr(e))

    t = threading.Thread(target=follower)
    t.start()
    kt = threading.Thread(target=kafka_follower)
    kt.start()
    try:
        with RawConnection(server.iggy_address) as conn:
            conn.login()
            for rnd in range(3):
                frames, expect = [], []
                for k, (count, size) in enumerate(SHAPES):
                    p = k % 2 if rnd == 1 else 0
                    payloads = [_payload(b"r%d-f%d" % (rnd, k), i, size, rng) for i in range(count)]
                    frames.append(_send_frame(conn, "sp", "t", p, payloads))
                    expect.append((p, payloads))
                answers = _pipeline(conn, frames)
                for a, (p, payloads) in zip(answers, expect):
                    assert a.kind == "reply" and a.status == 0, a
                    sent[p] += payloads
    finally:
        stop.set()
        t.join(30)
        kt.join(60)
    assert not reader_errors, reader_errors[:3]
    assert kafka_seen == sent[0][:len(kafka_seen)] and len(kafka_seen) > len(sent[0]) // 2
    with RawConnection(server.iggy_address) as c:
        c.login()
        for p in (0, 1):
            assert _read_all(c, "sp", "t", p) == sent[p]
    server.kill()
    server.start()
    with RawConnection(server.iggy_address) as c:
        c.login()
        for p in (0, 1):
            assert _read_all(c, "sp", "t", p) == sent[p]
    healthy(server)


def test_sends_split_across_many_small_writes_read_back_byte_identical(server, root):
    """Frames arriving a few bytes at a time (bodies received in place, the spare reused)."""
    assert ok(root.call_request(ws.CreateStream("dribble")))
    assert ok(root.call_request(wtop.CreateTopic("dribble", 1, "t")))
    rng = random.Random(3)
    sent: list[bytes] = []
    with RawConnection(server.iggy_address) as conn:
        conn.login()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for k in range(30):
            payloads = [_payload(b"d%d" % k, i, 700, rng) for i in range(20)]
            frame = _send_frame(conn, "dribble", "t", 0, payloads)
            cut = rng.randint(300, len(frame) - 1)
            conn.send(frame[:cut])
            time.sleep(0.002)
            conn.send(frame[cut:])
            a = conn.read()
            assert a.kind == "reply" and a.status == 0, a
            sent += payloads
        assert _read_all(conn, "dribble", "t", 0) == sent


# --------------------------------------------------------------------------- the compiled flusher


@pytest.mark.parametrize("fsync", [True, False], ids=["enforce_fsync", "periodic"])
@pytest.mark.parametrize("python", [False, True], ids=["compiled", "HEADWATER_NO_EXTENSIONS"])
def test_a_failed_fdatasync_fences_the_partition_on_either_flusher(tmp_path, python, fsync):
    if not python and os.environ.get("HEADWATER_NO_EXTENSIONS"):
        pytest.skip("HEADWATER_NO_EXTENSIONS is set for the whole run: no compiled flusher")
    with failing_disk(tmp_path) as mnt:
        s = ServerProcess(mnt / "data", free_port(), free_port())
        s.start(env={"HEADWATER_NO_EXTENSIONS": "1"} if python else None)
        try:
            started = next(ln for ln in s.log().splitlines() if "hot_loops=" in ln)
            assert ("_sync_c=python" in started or "hot_loops=\"python" in started) is python, started

            async def go():
                c = await sdk_client(s)
                await c.create_stream("disk")
                options = {"enforce_fsync": "true"} if fsync else {"messages_required_to_save": "32"}
                await c.create_topic("disk", "t", 1, options=options)
                return await send_until_fenced(c, "disk", "t", sends=200)

            assert run(go(), 120) >= 1
        finally:
            if s.proc is not None:
                s.kill()


# --------------------------------------------------------------------------- the page-cache read


def _batch_of_length(length: int) -> bytearray:
    """One batch of one message, exactly ``length`` bytes long."""
    probe = batch_codec.build_batch([batch_codec.Message(b"")])
    return batch_codec.build_batch([batch_codec.Message(b"x" * (length - len(probe)))])


@pytest.mark.parametrize("evicted", ["cached", "evicted", "second half evicted"])
def test_reads_at_the_256_kib_boundary_serve_the_files_bytes(fresh_server, evicted):
    server = fresh_server
    lengths = [256 << 10, (256 << 10) + 1, (256 << 10) - 1, 4096, (256 << 10) + 4096]
    with RawConnection(server.iggy_address) as root:
        root.login()
        assert ok(root.call_request(ws.CreateStream("pr")))
        for i, n in enumerate(lengths):
            name = "t%d" % i
            assert ok(root.call_request(wtop.CreateTopic("pr", 1, name)))
            batch = _batch_of_length(n)
            assert len(batch) == n
            assert ok(root.call_request(wm.SendMessages("pr", name, Partitioning.by_partition(0), 1,
                                                        memoryview(batch))))
        sid = stream_id(root, "pr")
        for i, n in enumerate(lengths):
            name = "t%d" % i
            tid = topic_id(root, "pr", name)
            d = os.path.join(server.data_dir, "streams", str(sid), "topics", str(tid), "partitions", "0")
            logs = sorted(glob.glob(os.path.join(d, "*.log")))
            assert logs, (name, sid, tid)
            stored = b"".join(open(p, "rb").read() for p in sorted(logs))[:n]
            if evicted != "cached":
                for p in logs:
                    fd = os.open(p, os.O_RDONLY)
                    try:
                        os.fdatasync(fd)
                        start = 0 if evicted == "evicted" else (n // 2) & ~4095  # (whole pages from there)
                        os.posix_fadvise(fd, start, 0, os.POSIX_FADV_DONTNEED)
                    finally:
                        os.close(fd)
            for offset_kind in (PollingKind.FIRST, PollingKind.OFFSET):
                got = answer(root, poll_body("pr", name, 0, kind=offset_kind, count=10))
                assert got[:2] == ("reply", 0), (n, got[:2])
                _, batches = wm.decode_poll_reply(got[2])
                assert bytes(batches) == stored, (n, len(batches))
                batch_codec.verify(bytes(batches), check_offset_deltas=False)


def test_a_consumer_at_the_tail_follows_segments_rolling_between_its_polls(fresh_server):
    server = fresh_server

    async def setup():
        c = await sdk_client(server)
        await c.create_stream("roll")
        await c.create_topic("roll", "t", 1, segment_size=1 << 20)
    run(setup())
    rng = random.Random(5)
    sent: list[bytes] = []
    got: list[bytes] = []
    with RawConnection(server.iggy_address) as producer, RawConnection(server.iggy_address) as consumer:
        producer.login()
        consumer.login()
        body = poll_body("roll", "t", 0, consumer="tail", kind=PollingKind.NEXT, count=7, auto_commit=True)
        for k in range(120):
            payloads = [_payload(b"s%d" % k, i, rng.choice((100, 3000, 60_000)), rng) for i in range(rng.randint(1, 6))]
            assert ok(send_batch(producer, "roll", "t", 0, payloads))
            sent += payloads
            for _ in range(rng.randint(0, 2)):
                a = answer(consumer, body)
                assert a[:2] == ("reply", 0)
                got += payloads_of(a[2])
        while True:
            a = answer(consumer, body)
            more = payloads_of(a[2])
            if not more:
                break
            got += more
    assert got == sent
    segments = [f for _, _, files in os.walk(server.data_dir) for f in files if f.endswith(".log")]
    assert len(segments) > 3  # it did roll


def _produce_until_killed(server, topics: list[str], kill_after: float) -> dict[str, list[bytes]]:
    """One pipelining connection per topic (partition 0): frames of one size sent back to back
    by a writer thread, replies read by another; SIGKILL after ``kill_after`` seconds. Returns
    the acknowledged payloads per topic, in order."""
    acked: dict[str, list[bytes]] = {t: [] for t in topics}
    threads = []
    conns = []
    for n, topic in enumerate(topics):
        conn = RawConnection(server.iggy_address)
        conn.login()
        conns.append(conn)
        in_flight: list[list[bytes]] = []
        lock = threading.Lock()
        rng = random.Random(n)

        def write(conn=conn, topic=topic, in_flight=in_flight, lock=lock, rng=rng):
            k = 0
            try:
                while True:
                    payloads = [_payload(b"%s-%d" % (topic.encode(), k), i, 900, rng) for i in range(50)]
                    frame = _send_frame(conn, "kill", topic, 0, payloads)
                    with lock:
                        in_flight.append(payloads)
                    conn.send(frame)
                    k += 1
            except OSError:
                return

        def read(conn=conn, topic=topic, in_flight=in_flight, lock=lock):
            try:
                while True:
                    a = conn.read()
                    assert a.kind == "reply" and a.status == 0, a
                    with lock:
                        acked[topic] += in_flight.pop(0)
            except (OSError, Exception):  # the kill: the connection ends mid-reply
                return

        threads += [threading.Thread(target=write), threading.Thread(target=read)]
    for t in threads:
        t.start()
    time.sleep(kill_after)
    server.kill()
    for t in threads:
        t.join(30)
    for c in conns:
        c.close()
    return acked


def test_sigkill_during_pipelined_sends_loses_and_alters_nothing_acknowledged(fresh_server):
    import subprocess
    import sys

    server = fresh_server

    async def setup():
        c = await sdk_client(server)
        await c.create_stream("kill")
        await c.create_topic("kill", "fsync", 1, options={"enforce_fsync": "true"})
        await c.create_topic("kill", "plain", 1)
    run(setup())
    rng = random.Random(99)
    total = {"fsync": [], "plain": []}
    for _ in range(3):
        acked = _produce_until_killed(server, list(total), rng.uniform(0.5, 1.5))
        verify = subprocess.run([sys.executable, "-m", "headwater", "verify", str(server.data_dir)],
                                capture_output=True, text=True, timeout=300)
        assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]
        server.start()
        with RawConnection(server.iggy_address) as c:
            c.login()
            for topic, payloads in acked.items():
                total[topic] += payloads
                stored = _read_all(c, "kill", topic, 0)
                assert all(_self_checks(p) for p in stored)
                assert stored[:len(total[topic])] == total[topic], topic
                total[topic] = stored  # what was stored unacknowledged stays: the next round follows it
    assert all(len(v) > 100 for v in total.values()), {k: len(v) for k, v in total.items()}
    healthy(server)


def test_pipelined_polls_and_catalog_changes_on_one_connection_stay_in_order(server, root):
    """Poll (kept route), delete the topic, make it again, send, poll: written back to back on
    one connection, answered in order, the last poll reading the new topic."""
    assert ok(root.call_request(ws.CreateStream("pl")))
    assert ok(root.call_request(wtop.CreateTopic("pl", 1, "t")))
    assert ok(send_batch(root, "pl", "t", 0, [b"old-%d" % i for i in range(3)]))
    body = poll_body("pl", "t", 0)
    with RawConnection(server.iggy_address) as c:
        c.login()
        assert payloads_of(answer(c, body)[2]) == [b"old-%d" % i for i in range(3)]  # the route is kept
        for round_ in range(5):
            new = [b"new-%d-%d" % (round_, i) for i in range(round_ + 1)]
            batch = batch_codec.build_batch(batch_codec.Message(p, id=i + 1) for i, p in enumerate(new))
            frames = [
                c.frame(POLL, body),
                c.frame(*_encoded(wtop.DeleteTopic("pl", "t"), c)),
                c.frame(POLL, body),
                c.frame(*_encoded(wtop.CreateTopic("pl", 1, "t"), c)),
                c.frame(POLL, body),
                c.frame(SEND, wm.encode_send_messages(wm.SendMessages("pl", "t", Partitioning.by_partition(0),
                                                                      len(new), memoryview(batch)))),
                c.frame(POLL, body),
            ]
            got = _pipeline(c, frames)
            assert [a.kind for a in got] == ["reply"] * 7
            statuses = [a.status for a in got]
            assert statuses[0] == 0 and statuses[1] == 0 and statuses[2] != 0 and statuses[3:] == [0] * 4, statuses
            assert payloads_of(got[4].body) == []
            assert payloads_of(got[6].body) == new


def _encoded(request, conn: RawConnection) -> tuple[int, bytes]:
    from headwater.codec.iggy.commands import encode_request_body

    code, body = encode_request_body(request)
    return int(code), body


def test_pipelined_send_then_poll_of_the_same_bytes_alternating(server, root):
    """Send n bytes, poll them back, send n other bytes (received into the spare), poll: all
    pipelined on one connection; every poll returns exactly what the send before it wrote."""
    assert ok(root.call_request(ws.CreateStream("sp2")))
    assert ok(root.call_request(wtop.CreateTopic("sp2", 1, "t")))
    rng = random.Random(11)
    with RawConnection(server.iggy_address) as c:
        c.login()
        frames, expected = [], []
        offset = 0
        for k in range(40):
            payloads = [_payload(b"a%d" % k, i, 1500, rng) for i in range(60)]
            frames.append(_send_frame(c, "sp2", "t", 0, payloads))
            frames.append(c.frame(POLL, poll_body("sp2", "t", 0, value=offset, count=60)))
            expected.append(payloads)
            offset += 60
        got = _pipeline(c, frames)
        for k, payloads in enumerate(expected):
            assert ok(got[2 * k]) and ok(got[2 * k + 1])
            assert payloads_of(got[2 * k + 1].body) == payloads, k


# --------------------------------------------------------------------------- the kept send route


_CONFIRM = struct.Struct("<IIIIQ")  # count, stream_id, topic_id, partition_id, base_offset


def _send_answer(conn: RawConnection, stream, topic, partition: int, payloads: list[bytes]) -> tuple:
    conn.send(_send_frame(conn, stream, topic, partition, payloads))
    a = conn.read()
    if a.kind != "reply":
        return (a.kind, a.reason)
    if a.status:
        return ("reply", a.status)
    _, s, t, p, offset = _CONFIRM.unpack(a.body)
    return ("reply", 0, s, t, p, offset)


def _stored_at(server, stream, topic, partition: int, offset: int, n: int) -> list[bytes]:
    with RawConnection(server.iggy_address) as c:
        c.login()
        got = answer(c, poll_body(stream, topic, partition, consumer="check", value=offset, count=n))
        return payloads_of(got[2]) if got[:2] == ("reply", 0) else []


def test_a_kept_send_route_lands_every_acknowledged_batch_where_a_fresh_connection_would(server, root):
    """A connection per route sends with the same metadata bytes (by names and by ids) after each change;
    a new connection sends the same right after: the same status, the same stream, topic and
    partition, and each acknowledged batch reads back at its offset from the topic as it is now."""
    assert ok(root.call_request(ws.CreateStream("ks")))
    assert ok(root.call_request(wtop.CreateTopic("ks", 2, "kt")))
    sid, tid = stream_id(root, "ks"), topic_id(root, "ks", "kt")
    routes = {"names p1": ("ks", "kt", 1), "ids p1": (sid, tid, 1), "names p0": ("ks", "kt", 0)}
    changes = [
        ("start", lambda: True),
        ("topic renamed", lambda: ok(root.call_request(wtop.UpdateTopic("ks", "kt", "kt-renamed")))),
        ("a new topic takes the old name", lambda: ok(root.call_request(wtop.CreateTopic("ks", 2, "kt")))),
        ("that topic deleted", lambda: ok(root.call_request(wtop.DeleteTopic("ks", "kt")))),
        ("renamed back", lambda: ok(root.call_request(wtop.UpdateTopic("ks", "kt-renamed", "kt")))),
        ("partition 1 deleted", lambda: ok(root.call_request(wpart.DeletePartitions("ks", "kt", 1)))),
        ("partition 1 made again", lambda: ok(root.call_request(wpart.CreatePartitions("ks", "kt", 1)))),
        ("topic purged", lambda: ok(root.call_request(wtop.PurgeTopic("ks", "kt")))),
        ("topic deleted", lambda: ok(root.call_request(wtop.DeleteTopic("ks", "kt")))),
        ("topic made again", lambda: ok(root.call_request(wtop.CreateTopic("ks", 2, "kt")))),
        ("stream deleted", lambda: ok(root.call_request(ws.DeleteStream("ks")))),
        ("stream and topic made again", lambda: ok(root.call_request(ws.CreateStream("ks")))
         and ok(root.call_request(wtop.CreateTopic("ks", 2, "kt")))),
    ]
    keepers = {route_name: RawConnection(server.iggy_address) for route_name in routes}  # one route each
    try:
        for keeper in keepers.values():
            keeper.login()
        for step, (name, change) in enumerate(changes):
            assert change(), name
            for route_name, (s, t, p) in routes.items():
                keeper = keepers[route_name]
                for k in range(2):  # the second send of the same bytes takes the kept route
                    mine = [b"keeper-%d-%s-%d" % (step, route_name.encode(), k)] * 3
                    theirs = [b"fresh-%d-%s-%d" % (step, route_name.encode(), k)] * 3
                    got = _send_answer(keeper, s, t, p, mine)
                    with RawConnection(server.iggy_address) as fresh:
                        fresh.login()
                        want = _send_answer(fresh, s, t, p, theirs)
                    assert got[:2] == want[:2] and got[2:5] == want[2:5], (name, route_name, got, want)
                    if got[:2] == ("reply", 0):
                        assert want[5] == got[5] + 3
                        assert _stored_at(server, got[2], got[3], got[4], got[5], 3) == mine, (name, route_name)
    finally:
        for keeper in keepers.values():
            keeper.close()


def test_a_kept_send_route_follows_logins_kafka_acls_and_user_deletion(server, root):
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                       ResourcePatternType, ResourceType)

    admin = _kafka_admin_with_topic(server, "acl-sent")
    sid = stream_id(root, "kafka")
    grant = ig.Permissions(ig.GlobalPermissions(), {sid: ig.StreamPermissions(send_messages=True)})
    _make_user(server, "ksender", grant)
    _make_user(server, "knobody", None)
    deny = AclBinding(ResourceType.TOPIC, "acl-sent", ResourcePatternType.LITERAL, "User:ksender", "*",
                      AclOperation.WRITE, AclPermissionType.DENY)

    def sends(c: RawConnection, tag: bytes) -> list[tuple]:
        return [_send_answer(c, "kafka", "acl-sent", 0, [tag + b"%d" % k])[:2] for k in range(2)]

    with RawConnection(server.iggy_address) as keeper:
        keeper.login("ksender", "secret")
        assert sends(keeper, b"a") == [("reply", 0)] * 2
        admin.create_acls([deny])[deny].result(20)
        assert sends(keeper, b"b") == [("reply", UNAUTHORIZED)] * 2
        admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, "acl-sent", ResourcePatternType.LITERAL,
                                            "User:ksender", None, AclOperation.ANY, AclPermissionType.ANY)])
        for _ in range(100):
            if sends(keeper, b"c")[0] == ("reply", 0):
                break
            time.sleep(0.05)
        assert sends(keeper, b"d") == [("reply", 0)] * 2
        # log out and in as a user without the right, on the same connection
        assert keeper.call(int(Command.LOGOUT_USER), operation=int(Operation.LOGOUT)).status == 0
        keeper.client ^= 2
        keeper.login("knobody", "secret")
        assert sends(keeper, b"e") == [("reply", UNAUTHORIZED)] * 2
        assert keeper.call(int(Command.LOGOUT_USER), operation=int(Operation.LOGOUT)).status == 0
        keeper.client ^= 2
        keeper.login("ksender", "secret")
        assert sends(keeper, b"f") == [("reply", 0)] * 2
        assert ok(root.call_request(wu.DeleteUser("ksender")))
        got = _send_answer(keeper, "kafka", "acl-sent", 0, [b"after the user went"])
        assert got[:2] != ("reply", 0), got
    stored = _stored_at(server, "kafka", "acl-sent", 0, 0, 100)
    assert b"after the user went" not in stored
    assert not any(p.startswith((b"b", b"e")) for p in stored)


def _half_sent(conn: RawConnection, stream, topic, payloads: list[bytes]) -> bytes:
    """Send the header and half the body of a SendMessages (to partition 0); returns the rest."""
    frame = _send_frame(conn, stream, topic, 0, payloads)
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    cut = len(frame) // 2
    conn.send(frame[:cut])
    time.sleep(0.05)  # the header is in and taken: its body is being received in place
    return frame[cut:]


@pytest.mark.parametrize("change", ["fenced by a newer login of the client id", "user deleted", "send right revoked"])
def test_a_session_change_while_a_send_body_comes_in_is_honoured(server, root, change):
    """The header passed the inline checks when it came; the session changes before its body is
    in (hw10-send 35ae583 looks at the live state again then): nothing is stored, and the reply is
    the full path's refusal."""
    stream = "mid-" + change.split()[0]
    assert ok(root.call_request(ws.CreateStream(stream)))
    assert ok(root.call_request(wtop.CreateTopic(stream, 1, "t")))
    sid = stream_id(root, stream)
    user = "mid" + change.split()[0][:6]
    grant = ig.Permissions(ig.GlobalPermissions(), {sid: ig.StreamPermissions(send_messages=True)})
    _make_user(server, user, grant)
    payloads = [b"mid-body-%d" % i + b"x" * 2000 for i in range(200)]  # ~400 KB: received in place
    with RawConnection(server.iggy_address) as conn:
        conn.login(user, "secret")
        assert _send_answer(conn, stream, "t", 0, [b"before"])[:2] == ("reply", 0)  # (and its route kept)
        rest = _half_sent(conn, stream, "t", payloads)
        if change.startswith("fenced"):
            newer = RawConnection(server.iggy_address, client=conn.client)
            newer.login(user, "secret")
        elif change == "user deleted":
            assert ok(root.call_request(wu.DeleteUser(user)))
        else:
            assert ok(root.call_request(wu.UpdatePermissions(
                wu.decode_user_details(root.call_request(wu.GetUser(user)).body).id, None)))
        try:
            conn.send(rest)
            a = conn.read()
        except (OSError, Exception) as e:  # noqa: BLE001 - the connection may be closed at once
            a = e
        if change.startswith("fenced"):
            newer.close()
    assert not (getattr(a, "kind", None) == "reply" and a.status == 0), a
    stored = _stored_at(server, stream, "t", 0, 0, 1000)
    assert stored == [b"before"], len(stored)


def test_pipelined_sends_of_one_size_over_tls_read_back_byte_identical(tmp_path):
    """TLS hands the decrypted bytes to the same receive buffers (the spare included)."""
    import ssl

    from iggy_transports import start_server

    server, certs = start_server(tmp_path, tls=True)
    try:
        c = RawConnection(server.iggy_address, timeout=60)
        c.sock = ssl.create_default_context(cafile=str(certs.ca)).wrap_socket(c.sock, server_hostname="localhost")
        with c:
            c.login()
            assert ok(c.call_request(ws.CreateStream("tls")))
            assert ok(c.call_request(wtop.CreateTopic("tls", 1, "t")))
            rng = random.Random(12)
            sent: list[bytes] = []
            for _ in range(3):
                frames = []
                for k, (count, size) in enumerate(SHAPES[:24]):
                    payloads = [_payload(b"tls%d" % k, i, size, rng) for i in range(count)]
                    frames.append(_send_frame(c, "tls", "t", 0, payloads))
                    sent += payloads
                c.send(b"".join(frames))  # (one thread: an SSL socket is not written and read at once)
                for _ in frames:
                    a = c.read()
                    assert a.kind == "reply" and a.status == 0, a
            assert _read_all(c, "tls", "t", 0) == sent
    finally:
        assert server.stop() == 0, server.log()[-3000:]


@pytest.mark.parametrize("evicted", [False, True], ids=["cached", "evicted"])
def test_a_damaged_batch_inside_one_256_kib_read_serves_the_prefix_then_4027(fresh_server, evicted):
    """20 batches of ~12 KiB (one chunk read of under 256 KiB covers them all); a payload byte of
    batch 10 flipped at rest: a poll from the start serves batches 0-9 exactly, a poll that
    begins in batch 10 is 4027, one that begins after it serves the rest."""
    from test_robustness_disk_prefix import partition_log, stored_batches

    server = fresh_server
    with RawConnection(server.iggy_address) as c:
        c.login()
        assert ok(c.call_request(ws.CreateStream("dmg")))
        assert ok(c.call_request(wtop.CreateTopic("dmg", 1, "t")))
        sent = []
        for b in range(20):
            payloads = [b"b%02d-m%d-" % (b, m) + bytes([b]) * 3000 for m in range(4)]
            assert ok(send_batch(c, "dmg", "t", 0, payloads))
            sent.append(payloads)
        ids = {"t": (stream_id(c, "dmg"), topic_id(c, "dmg", "t"))}
    assert server.stop() == 0
    log = partition_log(server, ids, "t", 0)
    batches = stored_batches(log)
    assert len(batches) == 20 and sum(len(b) for _, b in batches) < 256 << 10
    position, damaged = batches[10]
    with open(log, "r+b") as f:
        f.seek(position + len(damaged) - 100)  # a payload byte of its last message
        byte = f.read(1)
        f.seek(position + len(damaged) - 100)
        f.write(bytes([byte[0] ^ 0x55]))
        if evicted:
            f.flush()
            os.fsync(f.fileno())
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    server.start()
    with RawConnection(server.iggy_address) as c:
        c.login()
        got = answer(c, poll_body("dmg", "t", 0, value=0, count=1000))
        assert got[:2] == ("reply", 0)
        assert payloads_of(got[2]) == [p for b in sent[:10] for p in b]
        for start in (40, 42):  # in the damaged batch
            assert answer(c, poll_body("dmg", "t", 0, value=start, count=1000))[:2] == ("reply", 4027)
        got = answer(c, poll_body("dmg", "t", 0, value=44, count=1000))
        assert got[:2] == ("reply", 0)
        assert payloads_of(got[2]) == [p for b in sent[11:] for p in b]


_GATE_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

/* fdatasync held while the file $QA_FSYNC_HOLD exists (then it goes on to the real one) */
int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int)) dlsym(RTLD_NEXT, "fdatasync");
    const char *hold = getenv("QA_FSYNC_HOLD");
    if (hold) while (access(hold, F_OK) == 0) usleep(1000);
    return real(fd);
}
"""


def _create_topics(server, stream: str, topics: dict[str, dict]) -> None:
    """Stream ``stream`` and its one-partition topics (name -> options), through the SDK."""
    async def go():
        c = await sdk_client(server)
        await c.create_stream(stream)
        for name, options in topics.items():
            await c.create_topic(stream, name, 1, options=options)
    run(go())


def _gated_server(tmp_path, python: bool):
    """A started server whose fdatasync calls wait while the returned path exists (an LD_PRELOAD
    shim built here); ``python``: on the pure-Python hot loops (HEADWATER_NO_EXTENSIONS=1)."""
    import shutil
    import subprocess

    if not python and os.environ.get("HEADWATER_NO_EXTENSIONS"):
        pytest.skip("HEADWATER_NO_EXTENSIONS is set for the whole run: no compiled flusher")
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the fdatasync shim")
    (tmp_path / "gate.c").write_text(_GATE_C)
    shim = tmp_path / "gate.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(shim), str(tmp_path / "gate.c"), "-ldl"], check=True)
    hold = tmp_path / "hold"
    env = {"LD_PRELOAD": str(shim), "QA_FSYNC_HOLD": str(hold)}
    if python:
        env["HEADWATER_NO_EXTENSIONS"] = "1"
    return ServerProcess(tmp_path / "data", free_port(), free_port()).start(env=env), hold


@pytest.mark.parametrize("python", [False, True], ids=["compiled", "HEADWATER_NO_EXTENSIONS"])
def test_an_enforce_fsync_send_is_answered_only_after_its_fdatasync_returned(tmp_path, python):
    """fdatasync held back (an LD_PRELOAD shim waits while a file exists): the send's reply does
    not come; once the file is gone the sync returns and the reply comes, the message stored."""
    server, hold = _gated_server(tmp_path, python)
    try:
        _create_topics(server, "gate", {"t": {"enforce_fsync": "true"}})
        with RawConnection(server.iggy_address) as c:
            c.login()
            assert _send_answer(c, "gate", "t", 0, [b"synced at once"])[:2] == ("reply", 0)
            for k in range(3):
                hold.touch()
                c.send(_send_frame(c, "gate", "t", 0, [b"held-%d" % k] * 5))
                c.sock.settimeout(1.0)
                with pytest.raises(socket.timeout):  # no reply while its sync cannot return
                    c.sock.recv(1, socket.MSG_PEEK)
                c.sock.settimeout(30)
                hold.unlink()
                a = c.read()
                assert a.kind == "reply" and a.status == 0, a
                assert _CONFIRM.unpack(a.body)[4] == 1 + 5 * k
        assert _stored_at(server, "gate", "t", 0, 0, 100) == [b"synced at once"] + [
            b"held-%d" % k for k in range(3) for _ in range(5)]
    finally:
        if hold.exists():
            hold.unlink()
        assert server.stop() == 0, server.log()[-3000:]


@pytest.mark.parametrize("python", [False, True], ids=["compiled", "HEADWATER_NO_EXTENSIONS"])
def test_sends_go_on_while_the_flusher_is_stuck_and_read_back_identical(tmp_path, python):
    """fdatasync held: sends to a topic with periodic syncs (every 8 messages) keep being answered
    (the rounds queue behind the stuck one), pipelined bodies of one size included, while an
    enforce_fsync send on another connection waits; released, everything reads back identical."""
    server, hold = _gated_server(tmp_path, python)
    try:
        _create_topics(server, "stuck", {"periodic": {"messages_required_to_save": "8"},
                                         "fsync": {"enforce_fsync": "true"}})
        rng = random.Random(21)
        hold.touch()
        with RawConnection(server.iggy_address) as waiting, RawConnection(server.iggy_address) as c:
            waiting.login()
            c.login()
            waiting.send(_send_frame(waiting, "stuck", "fsync", 0, [b"waits for its sync"]))
            sent: list[bytes] = []
            for _ in range(4):
                frames = []
                for k in range(20):
                    payloads = [_payload(b"stuck%d" % k, i, 1000, rng) for i in range(50)]
                    frames.append(_send_frame(c, "stuck", "periodic", 0, payloads))
                    sent += payloads
                for a in _pipeline(c, frames):
                    assert a.kind == "reply" and a.status == 0, a
            assert _read_all(c, "stuck", "periodic", 0) == sent
            waiting.sock.settimeout(0.5)
            with pytest.raises(socket.timeout):
                waiting.sock.recv(1, socket.MSG_PEEK)
            waiting.sock.settimeout(30)
            hold.unlink()
            a = waiting.read()
            assert a.kind == "reply" and a.status == 0, a
        server.kill()
        server.start()
        with RawConnection(server.iggy_address) as c:
            c.login()
            assert _read_all(c, "stuck", "periodic", 0) == sent
            assert _read_all(c, "stuck", "fsync", 0) == [b"waits for its sync"]
    finally:
        if hold.exists():
            hold.unlink()
        if server.proc is not None:
            assert server.stop() == 0, server.log()[-3000:]


def test_many_connections_pipelining_same_size_sends_to_one_partition(server, root):
    """8 connections pipeline frames of one size (each connection's spare reused) into the same
    partition at once: every acknowledged message is stored once, whole, in its connection's order."""
    assert ok(root.call_request(ws.CreateStream("many")))
    assert ok(root.call_request(wtop.CreateTopic("many", 1, "t")))
    acked: dict[int, list[bytes]] = {}
    errors: list = []

    def producer(n: int) -> None:
        rng = random.Random(n)
        try:
            with RawConnection(server.iggy_address, timeout=60) as c:
                c.login()
                frames, expect = [], []
                for k in range(30):
                    payloads = [_payload(b"c%d-f%d" % (n, k), i, 1200, rng) for i in range(50)]
                    frames.append(_send_frame(c, "many", "t", 0, payloads))
                    expect.append(payloads)
                got = []
                for a, payloads in zip(_pipeline(c, frames), expect):
                    assert a.kind == "reply" and a.status == 0, a
                    got += payloads
                acked[n] = got
        except Exception as e:  # noqa: BLE001
            errors.append((n, repr(e)))

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    with RawConnection(server.iggy_address) as c:
        c.login()
        stored = _read_all(c, "many", "t", 0)
    assert all(_self_checks(p) for p in stored)
    assert sorted(stored) == sorted(p for v in acked.values() for p in v)
    for n, mine in acked.items():
        prefix = b"c%d-" % n
        assert [p for p in stored if p.startswith(prefix)] == mine, n
