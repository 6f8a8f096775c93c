"""Error cases seen through the official SDK and on the wire, with a second SDK client
connected the whole time: every failure stays with the connection that caused it.

Corrupted batches are hand-built with ``headwater.codec.batch`` and sent over a raw socket
(``RawConnection`` from ``test_iggy_raw.py``); the reply status must be the Iggy code
(4027 InvalidMessageChecksum, 4039 InvalidBatchChecksum) and nothing may be appended.
"""

from __future__ import annotations

import asyncio
import struct

import apache_iggy as ig
import pytest

from headwater.codec import batch as batch_codec
from headwater.codec.iggy import framing
from headwater.codec.iggy.codes import ConsumerKind, EvictionReason, Operation, PollingKind
from headwater.codec.iggy.commands import encode_request_body
from headwater.codec.iggy.commands import messages as wm
from headwater.codec.iggy.commands import streams as ws
from headwater.codec.iggy.commands import topics as wtop
from headwater.codec.iggy.primitives import Consumer, Partitioning, PollingStrategy
from test_iggy_raw import RawConnection

# the SDK's text for an Iggy error code (IggyError::from_code, Display)
SDK_TEXT = {
    1009: "Stream with ID",  # StreamIdNotFound
    2010: "Topic with ID",  # TopicIdNotFound
    3007: "Partition with ID",  # PartitionNotFound
    42: "Invalid credentials",
}


async def login(server, user="iggy", password="iggy") -> ig.IggyClient:
    c = ig.IggyClient(server.iggy_address)
    await c.connect()
    await c.login_user(user, password)
    return c


class Keeper:
    """A second SDK client that must keep working whatever the other connections do."""

    def __init__(self, client: ig.IggyClient):
        self.client = client
        self.sent = 0

    async def still_works(self) -> None:
        await self.client.ping()
        await self.client.send_messages("errors", "ok", 0, [ig.SendMessage(b"alive-%d" % self.sent)])
        self.sent += 1
        got = await self.client.poll_messages(
            "errors", "ok", consumer=ig.Consumer.Single("keeper"), polling_strategy=ig.PollingStrategy.First(),
            count=1000, auto_commit=False, partition_id=0,
        )
        assert [m.payload() for m in got] == [b"alive-%d" % i for i in range(self.sent)]


def corrupt_frame_payload(batch: bytes) -> bytes:
    """Flip a payload byte of the second frame: its xxh3 checksum no longer matches (4027)."""
    mv = bytearray(batch)
    positions = batch_codec.frame_positions(mv)
    mv[positions[1] + batch_codec.FRAME_HEADER_SIZE] ^= 0xFF
    return bytes(mv)


def corrupt_batch_checksum(batch: bytes) -> bytes:
    """Change the batch checksum field (40..48): frames intact, batch checksum wrong (4039)."""
    mv = bytearray(batch)
    (value,) = struct.unpack_from("<Q", mv, batch_codec.BATCH_CHECKSUM_OFFSET)
    struct.pack_into("<Q", mv, batch_codec.BATCH_CHECKSUM_OFFSET, value ^ 1)
    return bytes(mv)


def send_raw(conn: RawConnection, stream, topic, partition, batch: bytes, count: int):
    code, body = encode_request_body(
        wm.SendMessages(stream, topic, Partitioning.by_partition(partition), count, memoryview(batch))
    )
    return conn.call(int(code), body)


def test_error_cases_leave_other_clients_alone(server):
    async def go():
        admin = await login(server)
        await admin.create_stream("errors")
        await admin.create_topic("errors", "ok", 1)
        await admin.create_topic("errors", "target", 2)
        keeper = Keeper(await login(server))
        await keeper.still_works()

        # wrong password: the SDK reports the eviction reason (9, InvalidCredentials)
        victim = ig.IggyClient(server.iggy_address)
        await victim.connect()
        with pytest.raises(RuntimeError, match=SDK_TEXT[42]):
            await victim.login_user("iggy", "not-the-password")
        await keeper.still_works()

        # unknown stream / topic / partition: Iggy codes 1009 / 2010 / 3007 in the SDK's text
        c = await login(server)
        cases = [
            (c.get_topics("no-such-stream"), 1009),
            (c.send_messages("no-such-stream", "ok", 0, [ig.SendMessage(b"x")]), 1009),
            (c.poll_messages("no-such-stream", "ok", consumer=ig.Consumer.Single(1),
                             polling_strategy=ig.PollingStrategy.First(), count=1, auto_commit=False,
                             partition_id=0), 1009),
            (c.delete_stream("no-such-stream"), 1009),
            (c.send_messages("errors", "no-such-topic", 0, [ig.SendMessage(b"x")]), 2010),
            (c.delete_topic("errors", "no-such-topic"), 2010),
            (c.create_partitions("errors", "no-such-topic", 1), 2010),
            (c.send_messages("errors", "target", 7, [ig.SendMessage(b"x")]), 3007),
            (c.poll_messages("errors", "target", consumer=ig.Consumer.Single(1),
                             polling_strategy=ig.PollingStrategy.First(), count=1, auto_commit=False,
                             partition_id=7), 3007),
        ]
        for coro, code in cases:
            with pytest.raises(RuntimeError, match=SDK_TEXT[code]):
                await coro
            await keeper.still_works()
        await c.get_streams()  # the connection that failed is fine too

        with RawConnection(server.iggy_address) as conn:  # the same codes, as reply statuses
            conn.login()
            assert conn.call_request(wtop.GetTopics("no-such-stream")).status == 1009
            assert conn.call_request(wtop.DeleteTopic("errors", "no-such-topic")).status == 2010
            poll = wm.PollMessages(Consumer(ConsumerKind.CONSUMER, 1), "errors", "target", 7,
                                   PollingStrategy(PollingKind.FIRST), 10, False)
            assert conn.call_request(poll).status == 3007
            assert conn.call_request(ws.CreateStream("errors")).status == 1012  # StreamNameAlreadyExists

            # corrupted batches, hand-built: refused with their checksum codes, nothing appended
            good = batch_codec.build_batch(batch_codec.Message(b"payload-%d" % i, id=i + 1) for i in range(3))
            a = send_raw(conn, "errors", "target", 1, corrupt_frame_payload(good), 3)
            assert (a.kind, a.status, a.body) == ("reply", 4027, b"")
            await keeper.still_works()
            a = send_raw(conn, "errors", "target", 1, corrupt_batch_checksum(good), 3)
            assert (a.kind, a.status, a.body) == ("reply", 4039, b"")
            await keeper.still_works()
            a = send_raw(conn, "errors", "target", 1, good, 2)  # messages_count disagrees with the batch
            assert a.status == 4009
            assert (await admin.get_topic("errors", "target")).partitions[1].messages_count == 0
            a = send_raw(conn, "errors", "target", 1, good, 3)  # the same connection goes on
            assert a.status == 0
            assert (await admin.get_topic("errors", "target")).partitions[1].messages_count == 3

            # a broken frame closes only the connection that sent it
            conn.send(framing.encode_request_header(
                size=1 << 31, client=conn.client, request=conn.request + 1,
                operation=int(Operation.CREATE_STREAM), session=conn.session,
            ))
            assert conn.read().reason == EvictionReason.INVALID_REQUEST_BODY_SIZE
            assert conn.closed()
        await keeper.still_works()

        with RawConnection(server.iggy_address) as conn:  # a legacy login: evicted, others unaffected
            assert conn.call(38, bytes([4]) + b"iggy" + bytes([4]) + b"iggy", operation=2).reason == 15
        await keeper.still_works()

        got = await admin.poll_messages(
            "errors", "target", consumer=ig.Consumer.Single(2), polling_strategy=ig.PollingStrategy.First(),
            count=10, auto_commit=False, partition_id=1,
        )
        assert [m.payload() for m in got] == [b"payload-0", b"payload-1", b"payload-2"]

    asyncio.run(go())


def test_wrong_credentials_are_reported_for_every_login_path(server):
    async def go():
        for user, password in (("iggy", "wrong"), ("nobody", "iggy")):
            c = ig.IggyClient(server.iggy_address)
            await c.connect()
            with pytest.raises(RuntimeError, match="Invalid credentials"):
                await c.login_user(user, password)
        c = ig.IggyClient(ig.TcpConfig(
            server_address=server.iggy_address,
            auto_login=ig.AutoLogin.personal_access_token("not-a-real-token"),
            reconnection=ig.TcpReconnectionConfig(max_retries=0),
        ))
        with pytest.raises(RuntimeError, match="Invalid personal access token"):  # eviction 10
            await asyncio.wait_for(c.connect(), 20)

    asyncio.run(go())
