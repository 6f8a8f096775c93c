"""The official ``apache-iggy`` SDK against ``headwater serve``: sending, polling, consumer
offsets, consumer groups, the high-level producer and the consumer-group consumer.

Consumer-offset commands have no ``IggyClient`` method in apache-iggy 0.9; they go through
``send_binary_request`` (and ``IggyConsumer.store_offset``/``delete_offset``).

Transports (``iggy_transports.py``; a server of its own per transport): every test runs over
TCP; sending with each partitioning and the poll strategies also over TLS-TCP, QUIC,
WebSocket and HTTP (HTTP skipped while the server has no HTTP listener); consumer-group
commands with rebalancing, and a dropped connection leaving its groups, over every binary
transport. The rest stays on TCP to bound CI time.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import select
import signal
import subprocess
import sys
import time

import apache_iggy as ig
import pytest
from iggy_transports import EVERY_BINARY_TRANSPORT, EVERY_TRANSPORT, TCP_ONLY

from headwater.codec.iggy.codes import ConsumerKind
from headwater.codec.iggy.commands import encode_request_body
from headwater.codec.iggy.commands import groups as wg
from headwater.codec.iggy.commands import offsets as wo
from headwater.codec.iggy.commands import system as wsys
from headwater.codec.iggy.primitives import Consumer

pytestmark = pytest.mark.slow  # a file of long tests: handed out first (tests/conftest.py)

MS = datetime.timedelta(milliseconds=1)


def run(coro):
    return asyncio.run(coro)


async def login(via) -> ig.IggyClient:
    c = via.client()
    await c.connect()
    await c.login_user("iggy", "iggy")
    return c


async def raw(client: ig.IggyClient, request) -> bytes:
    code, body = encode_request_body(request)
    return await client.send_binary_request(int(code), body)


async def stored_offset(client, consumer: Consumer, stream, topic, partition) -> int | None:
    body = await raw(client, wo.GetConsumerOffset(consumer, stream, topic, partition))
    return None if body == b"" else wo.decode_consumer_offset(body).stored_offset


async def poll(client, stream, topic, partition, strategy, count=100, consumer=None, auto_commit=False):
    return await client.poll_messages(
        stream, topic, consumer=consumer or ig.Consumer.Single("reader"), polling_strategy=strategy,
        count=count, auto_commit=auto_commit, partition_id=partition,
    )


async def wait_until(fetch, ok, timeout: float = 15.0):
    """Await ``fetch()`` until ``ok(value)`` (bounded); returns the last value."""
    deadline = time.monotonic() + timeout
    value = await fetch()
    while not ok(value) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        value = await fetch()
    return value


# --------------------------------------------------------------------------- send


@EVERY_TRANSPORT
def test_send_with_each_partitioning(via):
    async def go():
        c = await login(via)
        await c.create_stream("send")
        await c.create_topic("send", "t", 3)
        s_id = (await c.get_stream("send")).id
        t_id = (await c.get_topic("send", "t")).id

        r = await c.send_messages("send", "t", ig.Partitioning.partition_id(2),
                                  [ig.SendMessage(b"p2-%d" % i) for i in range(4)])
        (conf,) = r.confirmations
        assert (conf.stream_id, conf.topic_id, conf.partition_id, conf.base_offset) == (s_id, t_id, 2, 0)
        r = await c.send_messages("send", "t", 2, [ig.SendMessage("more")])  # int shorthand
        assert r.confirmations[0].base_offset == 4

        keyed = set()
        for _ in range(4):
            r = await c.send_messages("send", "t", ig.Partitioning.messages_key("customer-42"), [ig.SendMessage(b"k")])
            keyed.add(r.confirmations[0].partition_id)
        assert len(keyed) == 1  # one key, one partition

        balanced = []
        for _ in range(6):
            r = await c.send_messages("send", "t", ig.Partitioning.balanced(), [ig.SendMessage(b"b")])
            balanced.append(r.confirmations[0].partition_id)
        assert sorted(set(balanced)) == [0, 1, 2]

        t = await c.get_topic("send", "t")
        assert t.messages_count == 4 + 1 + 4 + 6

    run(go())


# --------------------------------------------------------------------------- poll


@EVERY_TRANSPORT
def test_poll_strategies_count_and_message_fields(via):
    async def go():
        c = await login(via)
        await c.create_stream("poll")
        await c.create_topic("poll", "t", 1)
        for i in range(10):  # one batch each: distinct server timestamps
            await c.send_messages("poll", "t", 0, [
                ig.SendMessage(b"m%d" % i, id=1000 + i, user_headers={"n": i, "tag": "x"})
            ])
        first = await poll(c, "poll", "t", 0, ig.PollingStrategy.First())
        assert [m.offset() for m in first] == list(range(10))
        assert [m.payload() for m in first] == [b"m%d" % i for i in range(10)]
        assert [m.id() for m in first] == [1000 + i for i in range(10)]
        assert first[3].user_headers().to_scalar_dict() == {"n": 3, "tag": "x"}
        assert all(m.partition_id() == 0 for m in first)
        stamps = [m.timestamp() for m in first]
        assert stamps == sorted(stamps) and stamps[0] > 0

        assert [m.offset() for m in await poll(c, "poll", "t", 0, ig.PollingStrategy.First(), count=3)] == [0, 1, 2]
        by_offset = await poll(c, "poll", "t", 0, ig.PollingStrategy.Offset(3), count=4)
        assert [m.offset() for m in by_offset] == [3, 4, 5, 6]
        assert [m.offset() for m in await poll(c, "poll", "t", 0, ig.PollingStrategy.Last(), count=3)] == [7, 8, 9]
        assert await poll(c, "poll", "t", 0, ig.PollingStrategy.Offset(10)) == []
        by_time = await poll(c, "poll", "t", 0, ig.PollingStrategy.Timestamp(stamps[5]), count=2)
        assert by_time[0].offset() <= 5 and by_time[0].timestamp() >= stamps[5] - 1  # at or after
        assert by_time[-1].offset() >= 5

        # Next with auto_commit walks the partition; without auto_commit it stays put
        single = ig.Consumer.Single("walker")
        seen = []
        for _ in range(4):
            got = await poll(c, "poll", "t", 0, ig.PollingStrategy.Next(), count=3, consumer=single, auto_commit=True)
            seen += [m.offset() for m in got]
        assert seen == list(range(10))
        assert await poll(c, "poll", "t", 0, ig.PollingStrategy.Next(), consumer=single, auto_commit=True) == []
        still = ig.Consumer.Single("stayer")
        for _ in range(2):
            got = await poll(c, "poll", "t", 0, ig.PollingStrategy.Next(), count=2, consumer=still)
            assert [m.offset() for m in got] == [0, 1]

    run(go())


@TCP_ONLY
def test_polls_of_whole_and_cut_batches_of_1000_carry_every_message(via):
    """The poll the throughput benchmark makes (count 1000 by offset, no commit: the server's
    fast path, each reply one stored batch of 1000 as read) and polls that cut those batches,
    one after another on one connection: every offset once, every payload intact."""
    async def go():
        c = await login(via)
        await c.create_stream("bulk")
        await c.create_topic("bulk", "t", 1)
        for b in range(3):
            await c.send_messages("bulk", "t", 0, [ig.SendMessage(b"%d:" % (b * 1000 + i) + bytes(100)) for i in range(1000)])
        for starts, count in ((range(0, 3000, 1000), 1000), (range(500, 3000, 700), 700)):
            for start in starts:
                got = await poll(c, "bulk", "t", 0, ig.PollingStrategy.Offset(start), count=count,
                                 consumer=ig.Consumer.Single(1))
                want = list(range(start, min(start + count, 3000)))
                assert [m.offset() for m in got] == want
                assert [m.payload() for m in got] == [b"%d:" % o + bytes(100) for o in want]

    run(go())


# --------------------------------------------------------------------------- consumer offsets


@TCP_ONLY
def test_consumer_offsets_get_store_delete(via):
    async def go():
        c = await login(via)
        await c.create_stream("offsets")
        await c.create_topic("offsets", "t", 2)
        await c.send_messages("offsets", "t", 1, [ig.SendMessage(b"%d" % i) for i in range(8)])
        me = Consumer(ConsumerKind.CONSUMER, "worker")
        worker = ig.Consumer.Single("worker")
        assert await stored_offset(c, me, "offsets", "t", 1) is None

        got = await poll(c, "offsets", "t", 1, ig.PollingStrategy.Next(), count=5,
                         consumer=ig.Consumer.Single("worker"), auto_commit=True)
        assert [m.offset() for m in got] == [0, 1, 2, 3, 4]
        info = wo.decode_consumer_offset(await raw(c, wo.GetConsumerOffset(me, "offsets", "t", 1)))
        assert (info.partition_id, info.current_offset, info.stored_offset) == (1, 7, 4)

        assert await raw(c, wo.StoreConsumerOffset(me, "offsets", "t", 1, 1)) == b""
        assert await stored_offset(c, me, "offsets", "t", 1) == 1
        got = await poll(c, "offsets", "t", 1, ig.PollingStrategy.Next(), count=2, consumer=worker)
        assert [m.offset() for m in got] == [2, 3]

        assert await raw(c, wo.DeleteConsumerOffset(me, "offsets", "t", 1)) == b""
        assert await stored_offset(c, me, "offsets", "t", 1) is None
        with pytest.raises(RuntimeError):
            await raw(c, wo.DeleteConsumerOffset(me, "offsets", "t", 1))  # nothing stored any more
        got = await poll(c, "offsets", "t", 1, ig.PollingStrategy.Next(), count=1, consumer=worker)
        assert [m.offset() for m in got] == [0]

        # offsets are per partition, and the numeric consumer 7 is the named consumer "7"
        await raw(c, wo.StoreConsumerOffset(Consumer(ConsumerKind.CONSUMER, 7), "offsets", "t", 1, 6))
        assert await stored_offset(c, Consumer(ConsumerKind.CONSUMER, "7"), "offsets", "t", 1) == 6
        assert await stored_offset(c, Consumer(ConsumerKind.CONSUMER, 7), "offsets", "t", 0) is None
        got = await poll(c, "offsets", "t", 1, ig.PollingStrategy.Next(), consumer=ig.Consumer.Single("7"))
        assert [m.offset() for m in got] == [7]

    run(go())


# --------------------------------------------------------------------------- consumer groups


async def members(client, stream, topic, group) -> dict[int, list[int]]:
    g = await client.get_consumer_group(stream, topic, group)
    return {m.id: sorted(m.partitions) for m in g.members}


@EVERY_BINARY_TRANSPORT
def test_consumer_group_commands_and_rebalancing(via):
    async def go():
        c = await login(via)
        await c.create_stream("groups")
        await c.create_topic("groups", "t", 4)
        await c.create_consumer_group("groups", "t", "g1")
        await c.create_consumer_group("groups", "t", "g2")
        with pytest.raises(RuntimeError, match="already exists"):
            await c.create_consumer_group("groups", "t", "g1")
        g = await c.get_consumer_group("groups", "t", "g1")
        assert (g.name, g.partitions_count, g.members_count) == ("g1", 4, 0)
        assert (await c.get_consumer_group("groups", "t", g.id)).name == "g1"
        assert await c.get_consumer_group("groups", "t", "nope") is None
        assert sorted(x.name for x in await c.get_consumer_groups("groups", "t")) == ["g1", "g2"]

        a, b = await login(via), await login(via)
        a_id = wsys.decode_client_details(await raw(a, wsys.GetMe())).client_id
        b_id = wsys.decode_client_details(await raw(b, wsys.GetMe())).client_id
        await a.join_consumer_group("groups", "t", "g1")
        assert await members(c, "groups", "t", "g1") == {a_id: [0, 1, 2, 3]}
        me = wsys.decode_client_details(await raw(a, wsys.GetMe()))
        assert [(x.stream_id, x.topic_id, x.group_id) for x in me.consumer_groups] == [
            ((await c.get_stream("groups")).id, (await c.get_topic("groups", "t")).id, g.id)
        ]
        first = wg.decode_sync_consumer_group_reply(await raw(a, wg.SyncConsumerGroup("groups", "t", "g1")))
        assert sorted(first.partitions) == [0, 1, 2, 3]

        await b.join_consumer_group("groups", "t", "g1")  # a join rebalances round-robin
        assert await members(c, "groups", "t", "g1") == {a_id: [0, 2], b_id: [1, 3]}
        second = wg.decode_sync_consumer_group_reply(await raw(a, wg.SyncConsumerGroup("groups", "t", "g1")))
        assert second.generation > first.generation and sorted(second.partitions) == [0, 2]
        assert await raw(c, wg.SyncConsumerGroup("groups", "t", "g1")) == b""  # not a member

        await c.create_partitions("groups", "t", 2)  # so does a new partition
        assert await members(c, "groups", "t", "g1") == {a_id: [0, 2, 4], b_id: [1, 3, 5]}
        await c.delete_partitions("groups", "t", 2)

        await a.leave_consumer_group("groups", "t", "g1")  # and a leave
        assert await members(c, "groups", "t", "g1") == {b_id: [0, 1, 2, 3]}
        with pytest.raises(RuntimeError):
            await a.leave_consumer_group("groups", "t", "g1")

        await b.logout_user()  # a logout ends the membership too
        assert await members(c, "groups", "t", "g1") == {}

        await c.delete_consumer_group("groups", "t", "g2")
        assert [x.name for x in await c.get_consumer_groups("groups", "t")] == ["g1"]
        with pytest.raises(RuntimeError):
            await c.delete_consumer_group("groups", "t", "g2")

    run(go())


_MEMBER_SCRIPT = """
import asyncio, sys, apache_iggy as ig
async def main():
    c = ig.IggyClient.from_connection_string(sys.argv[1])
    await c.connect()  # logs in with the URL's credentials
    await c.join_consumer_group("drop", "t", "g")
    print("joined", flush=True)
    await asyncio.sleep(120)
asyncio.run(main())
"""


@EVERY_BINARY_TRANSPORT
def test_a_dropped_connection_leaves_its_groups(via):
    async def setup():
        c = await login(via)
        await c.create_stream("drop")
        await c.create_topic("drop", "t", 2)
        await c.create_consumer_group("drop", "t", "g")
        await c.join_consumer_group("drop", "t", "g")
        return c

    async def check(c, expected_members):
        return await wait_until(lambda: members(c, "drop", "t", "g"), lambda m: len(m) == expected_members)

    async def go():
        c = await setup()
        # a killed QUIC client is noticed when the connection's idle timeout (the lower of the two
        # ends' max_idle_timeout) runs out: the child asks for 2 s
        url = via.connection_string(**({"max_idle_timeout": 2000} if via.transport == "quic" else {}))
        child = subprocess.Popen([sys.executable, "-c", _MEMBER_SCRIPT, url],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            ready, _, _ = select.select([child.stdout], [], [], 30)
            assert ready and child.stdout.readline().strip() == b"joined"
            both = await check(c, 2)
            assert sorted(p for ps in both.values() for p in ps) == [0, 1]
            assert all(len(ps) == 1 for ps in both.values())
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(10)
        alone = await check(c, 1)
        assert list(alone.values()) == [[0, 1]]

    run(go())


# --------------------------------------------------------------------------- high-level producer and consumer


async def consume(consumers: list[ig.IggyConsumer], want: int, timeout: float = 30.0) -> list[list[tuple]]:
    """Run every consumer's iter_messages until ``want`` messages arrived in total (bounded)."""
    got: list[list[tuple]] = [[] for _ in consumers]
    done = asyncio.Event()

    async def one(i, k):
        async for m in k.iter_messages():
            got[i].append((m.partition_id(), m.offset(), m.payload()))
            if sum(map(len, got)) >= want:
                done.set()

    tasks = [asyncio.create_task(one(i, k)) for i, k in enumerate(consumers)]
    try:
        await asyncio.wait_for(done.wait(), timeout)
    except asyncio.TimeoutError:
        pass
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return got


@TCP_ONLY
def test_producer_and_two_group_consumers_share_the_partitions(via):
    async def go():
        admin = await login(via)
        producer = await admin.producer("hl", "events", ig.Partitioning.balanced(), topic_partitions_count=4)
        async with producer:
            for i in range(60):
                r = await producer.send([ig.SendMessage(b"msg-%03d" % i)])
                assert len(r.confirmations) == 1
        background = await admin.producer(
            "hl", "events", ig.Partitioning.balanced(),
            mode=ig.BackgroundProducerConfig(linger_time=5 * MS, batch_length=10),
        )
        async with background:
            for i in range(60, 80):
                await background.send_one(ig.SendMessage(b"msg-%03d" % i))
        topic = await admin.get_topic("hl", "events")
        assert topic.partitions_count == 4 and topic.messages_count == 80
        assert all(p.messages_count > 0 for p in topic.partitions)

        def group_consumer(client):
            return client.consumer_group(
                "hl-group", "hl", "events",
                polling_strategy=ig.PollingStrategy.Next(), batch_length=7,
                auto_commit=ig.AutoCommit.When(ig.AutoCommitWhen.PollingMessages()),
                poll_interval=5 * MS,
            )

        c1, c2 = await login(via), await login(via)
        k1, k2 = await group_consumer(c1), await group_consumer(c2)
        assert len(await members(admin, "hl", "events", "hl-group")) == 2
        got = await consume([k1, k2], 80)
        payloads = [p for part in got for (_, _, p) in part]
        assert sorted(payloads) == [b"msg-%03d" % i for i in range(80)]  # every message, once
        parts1 = {p for (p, _, _) in got[0]}
        parts2 = {p for (p, _, _) in got[1]}
        assert parts1 and parts2 and not parts1 & parts2 and parts1 | parts2 == {0, 1, 2, 3}

        # the group's offsets are committed on the server: a fresh member starts after them
        await c1.leave_consumer_group("hl", "events", "hl-group")
        await c2.leave_consumer_group("hl", "events", "hl-group")
        await admin.send_messages("hl", "events", 0, [ig.SendMessage(b"late")])
        c3 = await login(via)
        k3 = await group_consumer(c3)
        assert list((await members(admin, "hl", "events", "hl-group")).values()) == [[0, 1, 2, 3]]
        late = await consume([k3], 1, timeout=15)
        assert [p for (_, _, p) in late[0]] == [b"late"]

    run(go())


@TCP_ONLY
def test_group_consumer_with_client_side_auto_commit_and_a_member_without_partitions(via):
    async def go():
        admin = await login(via)
        await admin.create_stream("each")
        await admin.create_topic("each", "t", 1)
        await admin.send_messages("each", "t", 0, [ig.SendMessage(b"e%d" % i) for i in range(12)])

        def group_consumer(client):
            return client.consumer_group(
                "each-group", "each", "t",
                polling_strategy=ig.PollingStrategy.Next(), batch_length=5,
                auto_commit=ig.AutoCommit.When(ig.AutoCommitWhen.ConsumingEachMessage()),
                poll_interval=5 * MS,
            )

        c1, c2 = await login(via), await login(via)
        k1 = await group_consumer(c1)
        k2 = await group_consumer(c2)  # one partition, two members: the second gets nothing
        m = await members(admin, "each", "t", "each-group")
        assert sorted(len(ps) for ps in m.values()) == [0, 1]
        got = await consume([k1, k2], 12)
        assert sorted(p for part in got for (_, _, p) in part) == sorted(b"e%d" % i for i in range(12))
        assert [] in got  # the member without partitions polled empty, without errors
        group = Consumer(ConsumerKind.CONSUMER_GROUP, "each-group")
        stored = await wait_until(lambda: stored_offset(admin, group, "each", "t", 0), lambda v: v == 11)
        assert stored == 11  # the SDK stored each consumed offset; Iggy keeps the last one consumed

    run(go())


@TCP_ONLY
def test_producer_routing_and_consume_messages_with_manual_offsets(via):
    async def go():
        admin = await login(via)
        producer = await admin.producer("extras", "t", ig.Partitioning.partition_id(0), topic_partitions_count=2)
        await admin.create_stream("elsewhere")
        await admin.create_topic("elsewhere", "t2", 1)
        async with producer:
            r = await producer.send_with_partitioning([ig.SendMessage(b"to-1")], ig.Partitioning.partition_id(1))
            assert r.confirmations[0].partition_id == 1
            r = await producer.send_to("elsewhere", "t2", [ig.SendMessage(b"away")])
            assert r.confirmations[0].stream_id == (await admin.get_stream("elsewhere")).id
            for i in range(6):
                await producer.send_one(ig.SendMessage(b"p0-%d" % i))
        await producer.shutdown()  # repeated shutdowns are safe
        assert [m.payload() for m in await poll(admin, "elsewhere", "t2", 0, ig.PollingStrategy.First())] == [b"away"]
        assert [m.payload() for m in await poll(admin, "extras", "t", 1, ig.PollingStrategy.First())] == [b"to-1"]

        # a group consumer that commits by hand (IggyConsumer.store_offset / delete_offset)
        await admin.create_topic("extras", "single", 1)
        await admin.send_messages("extras", "single", 0, [ig.SendMessage(b"s%d" % i) for i in range(7)])
        c = await login(via)
        k = await c.consumer_group("manual", "extras", "single", polling_strategy=ig.PollingStrategy.First(),
                                   batch_length=3, auto_commit=ig.AutoCommit.Disabled(), poll_interval=5 * MS)
        assert (k.name(), k.stream(), k.topic()) == ("manual", "extras", "single")
        received = []
        stop = asyncio.Event()

        async def on_message(m):
            received.append((m.partition_id(), m.offset(), m.payload()))
            if len(received) == 7:
                stop.set()

        await asyncio.wait_for(k.consume_messages(on_message, stop), 30)
        assert [(o, p) for (_, o, p) in received] == [(i, b"s%d" % i) for i in range(7)]
        assert k.get_last_consumed_offset(0) == 6 and k.partition_id() == 0

        group = Consumer(ConsumerKind.CONSUMER_GROUP, "manual")
        assert await stored_offset(admin, group, "extras", "single", 0) is None  # AutoCommit.Disabled
        await k.store_offset(3, 0)
        assert await stored_offset(admin, group, "extras", "single", 0) == 3
        assert k.get_last_stored_offset(0) == 3
        await k.delete_offset(0)
        assert await stored_offset(admin, group, "extras", "single", 0) is None

    run(go())


@TCP_ONLY
def test_allow_replay_and_current_offset(via):
    """What the SDK's consumer does with the poll reply (``core/sdk/src/clients/consumer.rs``):
    it drops messages at or below its last consumed offset unless ``allow_replay``, and it
    treats a reply whose ``current_offset`` (the partition's newest offset) equals its last
    consumed offset as "nothing new" and discards it."""

    async def go():
        admin = await login(via)
        await admin.create_stream("replay")
        await admin.create_topic("replay", "t", 1)
        await admin.send_messages("replay", "t", 0, [ig.SendMessage(b"r%d" % i) for i in range(5)])

        def next_consumer(client, name, allow_replay):
            # Next without auto-commit: the server keeps answering from the same stored offset
            return client.consumer_group(name, "replay", "t", polling_strategy=ig.PollingStrategy.Next(),
                                         batch_length=3, auto_commit=ig.AutoCommit.Disabled(),
                                         poll_interval=5 * MS, allow_replay=allow_replay)

        replaying = await next_consumer(await login(via), "replaying", True)
        got = (await consume([replaying], 6))[0]
        assert [o for (_, o, _) in got][:6] == [0, 1, 2, 0, 1, 2]

        careful = await next_consumer(await login(via), "careful", False)
        got = (await consume([careful], 3))[0]
        assert [o for (_, o, _) in got][:3] == [0, 1, 2]
        await careful.store_offset(2, 0)  # the server's Next moves on only with a stored offset
        got = (await consume([careful], 2))[0]
        assert [o for (_, o, _) in got][:2] == [3, 4]  # no replay of 0..2

        # a reply's current_offset is the newest offset: new messages after a consumed one arrive
        await admin.create_topic("replay", "one", 1)
        await admin.send_messages("replay", "one", 0, [ig.SendMessage(b"only")])
        k = await (await login(via)).consumer_group(
            "latest", "replay", "one", polling_strategy=ig.PollingStrategy.Next(), batch_length=10,
            auto_commit=ig.AutoCommit.When(ig.AutoCommitWhen.PollingMessages()), poll_interval=5 * MS)
        assert [p for (_, _, p) in (await consume([k], 1))[0]] == [b"only"]
        await admin.send_messages("replay", "one", 0, [ig.SendMessage(b"next-1"), ig.SendMessage(b"next-2")])
        assert [p for (_, _, p) in (await consume([k], 2))[0]] == [b"next-1", b"next-2"]

    run(go())
