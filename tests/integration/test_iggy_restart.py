"""Durability through the official SDK: a SIGTERM restart keeps streams, topics, messages,
users, tokens, consumer groups and stored offsets; a SIGKILL keeps every acknowledged
message. And the root user's credentials on first start (``app.ensure_root``).
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time

import apache_iggy as ig

from hw_server import ServerProcess, free_port
from headwater.codec.iggy.codes import ConsumerKind
from headwater.codec.iggy.commands import encode_request_body
from headwater.codec.iggy.commands import offsets as wo
from headwater.codec.iggy.commands import system as wsys
from headwater.codec.iggy.commands import tokens as wt
from headwater.codec.iggy.primitives import Consumer
from test_iggy_raw import RawConnection

MIB = 1024 * 1024


async def login(server, user="iggy", password="iggy", *, retries: int | None = None) -> ig.IggyClient:
    config = ig.TcpConfig(server_address=server.iggy_address,
                          reconnection=ig.TcpReconnectionConfig(max_retries=retries, enabled=retries != 0))
    c = ig.IggyClient(config)
    await asyncio.wait_for(c.connect(), 20)
    await c.login_user(user, password)
    return c


async def raw(client, request) -> bytes:
    code, body = encode_request_body(request)
    return await client.send_binary_request(int(code), body)


async def all_messages(client, stream, topic, partitions: int) -> dict[int, list[tuple]]:
    out = {}
    for p in range(partitions):
        got = await client.poll_messages(stream, topic, consumer=ig.Consumer.Single("audit"),
                                         polling_strategy=ig.PollingStrategy.First(), count=100_000,
                                         auto_commit=False, partition_id=p)
        out[p] = [(m.offset(), m.id(), m.payload(), m.timestamp(), m.origin_timestamp(),
                   m.user_headers().to_scalar_dict() if m.user_headers() else None) for m in got]
    return out


def topic_view(t) -> tuple:
    return (t.id, t.name, t.partitions_count, t.compression_algorithm, t.messages_count, t.size,
            t.created_at, t.options.to_scalar_dict(),
            [(p.id, p.messages_count, p.current_offset) for p in t.partitions])


PERMS = ig.Permissions(
    ig.GlobalPermissions(read_streams=True),
    {0: ig.StreamPermissions(send_messages=True, topics={1: ig.TopicPermissions(manage_topic=True)})},
)


def test_sigterm_restart_keeps_everything(fresh_server):
    single = Consumer(ConsumerKind.CONSUMER, "c1")
    group = Consumer(ConsumerKind.CONSUMER_GROUP, "g")

    async def before():
        c = await login(fresh_server)
        await c.create_stream("keep")
        await c.create_topic("keep", "t", 3, compression_algorithm="gzip", segment_size=2 * MIB)
        await c.create_topic("keep", "u", 1)
        for i in range(30):
            await c.send_messages("keep", "t", i % 3, [
                ig.SendMessage(b"msg-%d" % i, id=10_000 + i, user_headers={"i": i}),
                ig.SendMessage(b"msg-%d-b" % i),
            ])
        await c.create_user("dave", "first-pw", ig.UserStatus.Active, PERMS)
        await c.change_password("dave", "first-pw", "second-pw")
        dave = await login(fresh_server, "dave", "second-pw")
        created = await raw(dave, wt.CreatePersonalAccessToken("dave-token", 0))
        token = wt.decode_raw_personal_access_token(created).token
        await raw(c, wo.StoreConsumerOffset(single, "keep", "t", 0, 4))
        await c.create_consumer_group("keep", "t", "g")
        await c.join_consumer_group("keep", "t", "g")
        await raw(c, wo.StoreConsumerOffset(group, "keep", "t", 1, 7))
        state = {
            "stream": (await c.get_stream("keep")).id,
            "topics": [topic_view(await c.get_topic("keep", n)) for n in ("t", "u")],
            "messages": await all_messages(c, "keep", "t", 3),
            "users": sorted((u.id, u.username, u.status) for u in await c.get_users()),
            "tokens": wt.decode_personal_access_tokens(await raw(dave, wt.GetPersonalAccessTokens())),
        }
        return token, state

    token, state = asyncio.run(before())
    assert sum(len(v) for v in state["messages"].values()) == 60
    with RawConnection(fresh_server.iggy_address) as idle:  # still connected at shutdown
        idle.login()
        rc = fresh_server.stop()
    assert rc == 0, fresh_server.log()
    assert "Traceback" not in fresh_server.log()  # a clean shutdown, idle connections included
    fresh_server.start()

    async def after():
        c = await login(fresh_server)
        assert (await c.get_stream("keep")).id == state["stream"]
        assert [topic_view(await c.get_topic("keep", n)) for n in ("t", "u")] == state["topics"]
        assert await all_messages(c, "keep", "t", 3) == state["messages"]
        assert sorted((u.id, u.username, u.status) for u in await c.get_users()) == state["users"]
        assert (await c.get_user("dave")).permissions == PERMS
        dave = await login(fresh_server, "dave", "second-pw")
        assert wt.decode_personal_access_tokens(await raw(dave, wt.GetPersonalAccessTokens())) == state["tokens"]
        via_token = ig.IggyClient(ig.TcpConfig(server_address=fresh_server.iggy_address,
                                               auto_login=ig.AutoLogin.personal_access_token(token),
                                               reconnection=ig.TcpReconnectionConfig(max_retries=0)))
        await asyncio.wait_for(via_token.connect(), 20)
        me = wsys.decode_client_details(await raw(via_token, wsys.GetMe()))
        assert me.user_id == (await c.get_user("dave")).id

        assert wo.decode_consumer_offset(await raw(c, wo.GetConsumerOffset(single, "keep", "t", 0))).stored_offset == 4
        assert wo.decode_consumer_offset(await raw(c, wo.GetConsumerOffset(group, "keep", "t", 1))).stored_offset == 7
        g = await c.get_consumer_group("keep", "t", "g")
        assert g is not None and g.members_count == 0  # memberships are per connection
        got = await c.poll_messages("keep", "t", consumer=ig.Consumer.Single("c1"),
                                    polling_strategy=ig.PollingStrategy.Next(), count=1,
                                    auto_commit=False, partition_id=0)
        assert [m.offset() for m in got] == [5]
        r = await c.send_messages("keep", "t", 0, [ig.SendMessage(b"after")])  # offsets go on
        assert r.confirmations[0].base_offset == 20
        await c.create_stream("keep-2")  # and ids do not collide
        assert (await c.get_stream("keep-2")).id != state["stream"]

    asyncio.run(after())


def test_sigkill_keeps_every_acknowledged_message(fresh_server):
    async def go():
        c = await login(fresh_server, retries=0)
        await c.create_stream("crash")
        await c.create_topic("crash", "t", 2)
        acked: list[tuple[int, int, list[bytes]]] = []
        enough = asyncio.Event()

        async def writer():
            i = 0
            while True:
                payloads = [b"b%d-m%d" % (i, j) for j in range(5)]
                try:
                    r = await c.send_messages("crash", "t", i % 2, [ig.SendMessage(p) for p in payloads])
                except RuntimeError:
                    return
                conf = r.confirmations[0]
                acked.append((conf.partition_id, conf.base_offset, payloads))
                i += 1
                if len(acked) >= 150:
                    enough.set()

        task = asyncio.create_task(writer())
        await asyncio.wait_for(enough.wait(), 60)
        fresh_server.kill()  # SIGKILL while the writer is still sending
        await asyncio.wait_for(task, 30)
        return acked

    acked = asyncio.run(go())
    assert len(acked) >= 150
    fresh_server.start()

    async def check():
        c = await login(fresh_server)
        stored = await all_messages(c, "crash", "t", 2)
        by_offset = {p: {m[0]: m[2] for m in msgs} for p, msgs in stored.items()}
        for p, msgs in stored.items():
            assert [m[0] for m in msgs] == list(range(len(msgs)))  # no holes, no torn batch
        for partition, base, payloads in acked:
            assert [by_offset[partition].get(base + j) for j in range(len(payloads))] == payloads
        r = await c.send_messages("crash", "t", 0, [ig.SendMessage(b"after-crash")])
        assert r.confirmations[0].base_offset == len(stored[0])

    asyncio.run(check())


# --------------------------------------------------------------------------- root credentials


def test_root_credentials_from_the_environment_on_first_start_only(tmp_path):
    s = ServerProcess(tmp_path / "data", free_port(), free_port())
    s.start(env={"HEADWATER_ROOT_USERNAME": "admin", "HEADWATER_ROOT_PASSWORD": "s3cret-pw"})
    try:
        async def check(user, password, works: bool):
            try:
                c = await login(s, user, password, retries=0)
            except RuntimeError:
                assert not works, f"{user} could not log in"
                return
            assert works, f"{user} logged in"
            assert (await c.get_user(user)).id == 0

        asyncio.run(check("admin", "s3cret-pw", True))
        asyncio.run(check("iggy", "iggy", False))  # the flag's defaults lose to explicit credentials
        s.stop()
        s.start(env={"HEADWATER_ROOT_USERNAME": "other", "HEADWATER_ROOT_PASSWORD": "other-pw"})
        asyncio.run(check("other", "other-pw", False))  # ignored once the data directory exists
        asyncio.run(check("admin", "s3cret-pw", True))
    finally:
        if s.proc is not None:
            s.stop()


def _start_plain(data_dir, port: int, kafka_port: int, log_path) -> subprocess.Popen:
    """``headwater serve`` without ``--with-default-root-credentials``."""
    import os
    import socket

    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "headwater", "serve", "--data-dir", str(data_dir),
         "--tcp-address", f"127.0.0.1:{port}", "--kafka-address", f"127.0.0.1:{kafka_port}",
         "--http-address", "127.0.0.1:0"],
        stdout=open(log_path, "ab"), stderr=subprocess.STDOUT, env=env,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert proc.poll() is None, log_path.read_text()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("server did not start")


def test_random_root_password_is_printed_once(tmp_path):
    port, kafka_port = free_port(), free_port()
    log_path = tmp_path / "server.log"
    proc = _start_plain(tmp_path / "data", port, kafka_port, log_path)
    server = ServerProcess(tmp_path / "data", port, kafka_port)
    try:
        printed = re.findall(r"username=(\S+) password=(\S+)", log_path.read_text())
        assert len(printed) == 1
        user, password = printed[0]
        assert user == "iggy" and password != "iggy" and len(password) >= 16

        async def check():
            c = await login(server, user, password, retries=0)
            assert (await c.get_user(user)).id == 0
            try:
                await login(server, "iggy", "iggy", retries=0)
            except RuntimeError:
                return
            raise AssertionError("the development credentials must not work")

        asyncio.run(check())
        proc.terminate()
        assert proc.wait(15) == 0
        proc = _start_plain(tmp_path / "data", port, kafka_port, log_path)
        assert len(re.findall(r"password=", log_path.read_text())) == 1  # shown once, never again
        asyncio.run(check())
    finally:
        proc.terminate()
        proc.wait(15)
