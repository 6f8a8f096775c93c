"""The official ``apache-iggy`` SDK against ``headwater serve``: system, streams, topics,
partitions, segments, users and personal access tokens.

Every ``IggyClient`` method of apache-iggy 0.9 that maps to one of these commands is
called; commands without an SDK method (GET_ME, GET_CLIENT(S), GET_CLUSTER_METADATA,
GET_SNAPSHOT, the personal access token commands, DELETE_SEGMENTS) go through the SDK's
``send_binary_request`` and are decoded with ``headwater.codec.iggy``.

Transports (``iggy_transports.py``; a server of its own per transport): every test runs over
TCP; login/logout with the connection string and the stream lifecycle also over TLS-TCP,
QUIC, WebSocket and HTTP (HTTP skipped while the server has no HTTP listener); stats, GET_ME
(its transport byte), clients and cluster metadata, and personal access tokens (auto-login)
over every binary transport (TLS-TCP, QUIC, WebSocket), as they need ``send_binary_request``.
The rest stays on TCP to bound CI time: the commands are transport-blind past the framing.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
from pathlib import Path

import apache_iggy as ig
import pytest
from iggy_transports import EVERY_BINARY_TRANSPORT, EVERY_TRANSPORT, TCP_ONLY

from headwater.codec.iggy.commands import encode_request_body
from headwater.codec.iggy.commands import segments as wseg
from headwater.codec.iggy.commands import system as wsys
from headwater.codec.iggy.commands import tokens as wt

pytestmark = pytest.mark.slow  # a file of long tests: handed out first (tests/conftest.py)

MIB = 1024 * 1024


def run(coro):
    return asyncio.run(coro)


async def login(via, username: str = "iggy", password: str = "iggy") -> ig.IggyClient:
    c = via.client()
    await c.connect()
    await c.login_user(username, password)
    return c


async def raw(client: ig.IggyClient, request) -> bytes:
    code, body = encode_request_body(request)
    return await client.send_binary_request(int(code), body)


async def expect_error(coro, *fragments: str) -> str:
    with pytest.raises(RuntimeError) as info:
        await coro
    text = str(info.value)
    for f in fragments:
        assert f in text, text
    return text


def data_files(via) -> bytes:
    """Every byte the server keeps outside the segment logs (metadata, offsets, users, tokens)."""
    out = b""
    for p in Path(via.server.data_dir).rglob("*"):
        if p.is_file() and p.suffix not in (".log", ".index"):
            out += p.read_bytes()
    return out


# --------------------------------------------------------------------------- system


@EVERY_TRANSPORT
def test_ping_and_login_and_logout(via):
    async def go():
        c = via.client()
        await c.connect()
        await c.ping()  # served before login
        await expect_error(c.get_streams(), "Unauthenticated")
        await c.login_user("iggy", "iggy")
        await c.get_streams()
        await c.logout_user()
        await expect_error(c.get_streams(), "Unauthenticated")
        await c.login_user("iggy", "iggy")
        await c.ping()
        await c.get_streams()

        by_url = ig.IggyClient.from_connection_string(via.connection_string())
        await by_url.connect()  # logs in with the credentials of the connection string ...
        if via.transport == "http":  # ... except over HTTP, where the SDK's connect() does not log in
            await by_url.login_user("iggy", "iggy")
        await by_url.get_streams()

    run(go())


@EVERY_BINARY_TRANSPORT
def test_stats_me_clients_and_cluster_metadata(via):
    async def go():
        c = await login(via)
        other = await login(via)
        await c.create_stream("stats")
        await c.create_topic("stats", "t", 3)
        await c.send_messages("stats", "t", 1, [ig.SendMessage(b"x"), ig.SendMessage(b"y")])
        stats = await c.get_stats()
        assert stats.streams_count >= 1 and stats.topics_count >= 1 and stats.partitions_count >= 3
        assert stats.messages_count >= 2 and stats.clients_count >= 2
        assert stats.hostname and stats.iggy_server_version.startswith("headwater")
        assert stats.total_disk_space > 0 and stats.threads_count >= 1

        me = wsys.decode_client_details(await raw(c, wsys.GetMe()))
        assert me.user_id == 0 and me.transport == via.transport_code and me.address.startswith("127.0.0.1:")
        clients = wsys.decode_clients(await raw(c, wsys.GetClients()))
        assert me.client_id in {x.client_id for x in clients} and len(clients) >= 2
        them = wsys.decode_client_details(await raw(other, wsys.GetMe()))
        assert them.client_id != me.client_id
        seen = wsys.decode_client_details(await raw(c, wsys.GetClient(them.client_id)))
        assert seen.client_id == them.client_id and seen.user_id == 0
        assert await raw(c, wsys.GetClient(999_999)) == b""  # not found

        cluster = wsys.decode_cluster_metadata(await raw(c, wsys.GetClusterMetadata()))
        assert len(cluster.nodes) == 1
        node = cluster.nodes[0]
        assert (node.ip, node.tcp_port, node.role, node.status) == ("127.0.0.1", via.server.tcp_port, 0, 0)
        ports = (node.quic_port, node.websocket_port)
        assert ports == (via.server.quic_port, via.server.websocket_port)

        await expect_error(raw(c, wsys.GetSnapshot(1, (100,))), "Feature is unavailable")

    run(go())


@TCP_ONLY
def test_describe_options(via):
    async def go():
        c = await login(via)
        topic = {o.key: o for o in await c.describe_options("topic")}
        for key in ("compression_algorithm", "message_expiry", "max_topic_size", "segment_size",
                    "enforce_fsync", "messages_required_to_save", "size_of_messages_required_to_save",
                    "preallocate_segments"):
            assert key in topic and topic[key].description, key
        assert topic["segment_size"].kind == "uint64" and topic["enforce_fsync"].kind == "bool"
        assert await c.describe_options("stream") == []
        assert await c.describe_options("user") == []

    run(go())


# --------------------------------------------------------------------------- streams and topics


@EVERY_TRANSPORT
def test_stream_lifecycle(via):
    async def go():
        c = await login(via)
        await c.create_stream("orders")
        await expect_error(c.create_stream("orders"), "already exists")
        s = await c.get_stream("orders")
        assert (s.name, s.topics_count, s.messages_count) == ("orders", 0, 0)
        assert (await c.get_stream(s.id)).name == "orders"
        assert await c.get_stream("no-such-stream") is None
        assert "orders" in [x.name for x in await c.get_streams()]

        await c.create_topic("orders", "eu", 2)
        await c.send_messages("orders", "eu", 0, [ig.SendMessage(b"a"), ig.SendMessage(b"b")])
        s = await c.get_stream("orders")
        assert s.topics_count == 1 and s.messages_count == 2 and s.size > 0
        assert [t.name for t in s.topics] == ["eu"]

        await c.update_stream("orders", "orders-v2")
        assert await c.get_stream("orders") is None
        assert (await c.get_stream("orders-v2")).id == s.id
        await c.purge_stream("orders-v2")
        assert (await c.get_stream("orders-v2")).messages_count == 0
        assert (await c.get_topic("orders-v2", "eu")).partitions_count == 2  # purge keeps the shape
        await c.delete_stream("orders-v2")
        assert await c.get_stream(s.id) is None
        # 1009 StreamIdNotFound: the SDK words it per transport (HTTP: Iggy's JSON error body)
        await expect_error(c.delete_stream("orders-v2"),
                           '"id":1009' if via.transport == "http" else "Stream with ID")

    run(go())


@TCP_ONLY
def test_topic_lifecycle_with_options(via):
    async def go():
        c = await login(via)
        await c.create_stream("topics")
        await c.create_topic(
            "topics", "events", 3,
            compression_algorithm="gzip",
            message_expiry=ig.IggyExpiry.ExpireDuration(datetime.timedelta(hours=2)),
            max_topic_size=ig.MaxTopicSize.Custom(512 * MIB),
            segment_size=8 * MIB,
            messages_required_to_save=10,
        )
        await expect_error(c.create_topic("topics", "events", 1), "already exists")
        t = await c.get_topic("topics", "events")
        assert (t.name, t.partitions_count, t.compression_algorithm) == ("events", 3, "gzip")
        assert isinstance(t.message_expiry, ig.IggyExpiry.ExpireDuration)
        assert t.message_expiry.duration == datetime.timedelta(hours=2)
        assert isinstance(t.max_topic_size, ig.MaxTopicSize.Custom) and t.max_topic_size.bytes == 512 * MIB
        explicit = t.options.to_scalar_dict()
        assert explicit["segment_size"] == 8 * MIB and explicit["messages_required_to_save"] == 10
        derived = t.derived_options.to_scalar_dict()
        assert "enforce_fsync" in derived and "segment_size" not in derived
        assert [p.id for p in t.partitions] == [0, 1, 2]
        assert (await c.get_topic("topics", t.id)).name == "events"
        assert await c.get_topic("topics", "no-such-topic") is None

        await c.create_topic("topics", "plain", 1)
        listed = {x.name: x for x in await c.get_topics("topics")}
        assert set(listed) == {"events", "plain"} and listed["events"].partitions_count == 3

        await c.update_topic("topics", "events", "events-v2", compression_algorithm="none",
                             message_expiry=ig.IggyExpiry.NeverExpire())
        t = await c.get_topic("topics", "events-v2")
        assert t.compression_algorithm == "none" and isinstance(t.message_expiry, ig.IggyExpiry.NeverExpire)
        assert t.options.to_scalar_dict()["segment_size"] == 8 * MIB  # a patch keeps the rest
        await expect_error(c.update_topic("topics", "events-v2", "x", options={"segment_size": "16 MiB"}))
        await expect_error(c.create_topic("topics", "bad", 1, options={"no_such_option": "1"}),
                           "Unsupported option key")

        await c.send_messages("topics", "events-v2", 2, [ig.SendMessage(b"m%d" % i) for i in range(5)])
        assert (await c.get_topic("topics", "events-v2")).messages_count == 5
        await c.purge_topic("topics", "events-v2")
        t = await c.get_topic("topics", "events-v2")
        assert t.messages_count == 0 and t.partitions_count == 3
        await c.delete_topic("topics", "events-v2")
        assert await c.get_topic("topics", "events-v2") is None
        await expect_error(c.delete_topic("topics", "events-v2"), "Topic with ID")  # 2010

    run(go())


@TCP_ONLY
def test_partitions_and_segments(via):
    async def go():
        c = await login(via)
        await c.create_stream("parts")
        await c.create_topic("parts", "t", 2, segment_size=1 * MIB)
        await c.create_partitions("parts", "t", 3)
        t = await c.get_topic("parts", "t")
        assert t.partitions_count == 5 and [p.id for p in t.partitions] == [0, 1, 2, 3, 4]
        await c.delete_partitions("parts", "t", 2)
        t = await c.get_topic("parts", "t")
        assert [p.id for p in t.partitions] == [0, 1, 2]
        await expect_error(c.delete_partitions("parts", "t", 10))

        # three batches of ~600 KiB in a 1 MiB-segment partition: at least two segments
        payload = b"z" * (600 * 1024)
        for _ in range(3):
            await c.send_messages("parts", "t", 0, [ig.SendMessage(payload)])
        p0 = (await c.get_topic("parts", "t")).partitions[0]
        assert p0.messages_count == 3 and p0.segments_count >= 2 and p0.current_offset == 2
        reply = await raw(c, wseg.DeleteSegments("parts", "t", 0, 1))
        assert reply == b""
        p0 = (await c.get_topic("parts", "t")).partitions[0]
        assert p0.messages_count < 3
        first = await c.poll_messages("parts", "t", consumer=ig.Consumer.Single(1),
                                      polling_strategy=ig.PollingStrategy.First(), count=10,
                                      auto_commit=False, partition_id=0)
        assert first and first[0].offset() > 0 and first[-1].offset() == 2
        await expect_error(raw(c, wseg.DeleteSegments("parts", "t", 9, 1)), "Partition with ID")  # 3007

    run(go())


# --------------------------------------------------------------------------- users


@TCP_ONLY
def test_users_and_permissions(via):
    async def go():
        c = await login(via)
        perms = ig.Permissions(
            ig.GlobalPermissions(read_streams=True, poll_messages=True),
            {7: ig.StreamPermissions(manage_topics=True, topics={3: ig.TopicPermissions(send_messages=True)})},
        )
        created = await c.create_user("alice", "wonderland", ig.UserStatus.Active, perms)
        assert created.username == "alice" and created.permissions == perms
        await expect_error(c.create_user("alice", "again"), "already exists")
        u = await c.get_user("alice")
        assert (u.id, u.status, u.permissions) == (created.id, ig.UserStatus.Active, perms)
        assert (await c.get_user(created.id)).username == "alice"
        assert await c.get_user("nobody") is None
        bare = await c.create_user("bob", "builder")
        assert bare.permissions is None
        names = {x.username for x in await c.get_users()}
        assert {"iggy", "alice", "bob"} <= names

        await c.update_user("alice", username="alice2", status=ig.UserStatus.Inactive)
        u = await c.get_user(created.id)
        assert (u.username, u.status) == ("alice2", ig.UserStatus.Inactive)
        await expect_error(login(via, "alice2", "wonderland"), "Unauthenticated")  # eviction 11
        await c.update_user("alice2", status=ig.UserStatus.Active)
        await c.update_permissions("alice2", ig.Permissions(ig.GlobalPermissions(read_users=True)))
        assert (await c.get_user("alice2")).permissions.global_permissions.read_users
        await c.update_permissions("alice2", None)
        assert (await c.get_user("alice2")).permissions is None

        await c.change_password("alice2", "wonderland", "looking-glass")
        await expect_error(login(via, "alice2", "wonderland"), "Invalid credentials")
        alice = await login(via, "alice2", "looking-glass")
        await alice.change_password("alice2", "looking-glass", "rabbit-hole")  # self-service
        assert (await alice.get_user("alice2")).username == "alice2"
        await expect_error(c.change_password("bob", "wrong", "new-one"), "Invalid credentials")

        # the root user can neither be deleted nor lose permissions or be deactivated
        await expect_error(c.delete_user("iggy"), "Cannot delete user")
        await expect_error(c.update_permissions("iggy", None), "Cannot change permissions")
        await expect_error(c.update_user("iggy", status=ig.UserStatus.Inactive))
        root = await c.get_user("iggy")
        assert root.id == 0 and root.permissions.global_permissions.manage_servers

        await c.delete_user("bob")
        assert await c.get_user("bob") is None
        await expect_error(c.delete_user("bob"))

        stored = data_files(via)
        assert b"$argon2id$" in stored  # passwords are Argon2id hashes ...
        assert b"rabbit-hole" not in stored and b"wonderland" not in stored  # ... never the passwords

    run(go())


# --------------------------------------------------------------------------- personal access tokens


async def create_token(client: ig.IggyClient, name: str, expiry_us: int = 0) -> str:
    return wt.decode_raw_personal_access_token(await raw(client, wt.CreatePersonalAccessToken(name, expiry_us))).token


async def token_client(via, token: str) -> ig.IggyClient:
    c = via.client(auto_login=ig.AutoLogin.personal_access_token(token))
    await asyncio.wait_for(c.connect(), 20)
    return c


@EVERY_BINARY_TRANSPORT
def test_personal_access_tokens(via):
    async def go():
        c = await login(via)
        await c.create_user("carol", "secret-pw", ig.UserStatus.Active,
                            ig.Permissions(ig.GlobalPermissions(read_streams=True)))
        carol = await login(via, "carol", "secret-pw")
        forever = await create_token(carol, "ci-forever")
        hour = await create_token(carol, "ci-hour", 3600 * 1_000_000)
        await expect_error(raw(carol, wt.CreatePersonalAccessToken("ci-hour", 0)), "already exists")
        tokens = {t.name: t for t in wt.decode_personal_access_tokens(await raw(carol, wt.GetPersonalAccessTokens()))}
        assert set(tokens) == {"ci-forever", "ci-hour"}
        assert tokens["ci-forever"].expiry_at == 0
        assert tokens["ci-hour"].expiry_at > 0
        assert wt.decode_personal_access_tokens(await raw(c, wt.GetPersonalAccessTokens())) == ()  # per user

        via_token = await token_client(via, forever)
        me = wsys.decode_client_details(await raw(via_token, wsys.GetMe()))
        assert me.user_id == (await c.get_user("carol")).id
        await via_token.get_streams()  # carol's read_streams
        await expect_error(via_token.create_stream("not-allowed"), "Unauthorized")
        assert (await token_client(via, hour)) is not None

        await raw(carol, wt.DeletePersonalAccessToken("ci-forever"))
        await expect_error(raw(carol, wt.DeletePersonalAccessToken("ci-forever")))
        await expect_error(token_client(via, forever))
        expired = await create_token(carol, "ci-expired", 1)  # one microsecond
        await expect_error(token_client(via, expired))

        stored = data_files(via)
        assert hour.encode() not in stored  # tokens are kept hashed ...
        assert hashlib.sha256(hour.encode()).hexdigest().encode() in stored  # ... as a SHA-256 digest

    run(go())
