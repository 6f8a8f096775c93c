"""The shared listener's limits, with a real ``Listener`` on 127.0.0.1 and asyncio clients.

The connection coroutine here speaks a toy protocol (4-byte big-endian size, then that many
bytes; the reply is ``reply_size`` bytes) through the ``Connection`` calls the front-ends
use. Every wait is bounded; every client is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct

import pytest

from headwater.config import KafkaConfig, TcpConfig
from headwater.frontends.iggy.server import iggy_limits
from headwater.frontends.kafka.server import kafka_limits
from headwater.frontends.listener import Limits, Listener

SIZE = struct.Struct(">I")


class Toy:
    def __init__(self, reply_size: int = 4):
        self.reply_size = reply_size
        self.handled = 0
        self.idle_hooks = 0

    async def serve(self, reader, writer, conn) -> None:
        def on_idle() -> None:
            self.idle_hooks += 1
            writer.write(b"BYE!")

        conn.on_idle = on_idle
        while not conn.closing.is_set():
            head = await conn.receive(reader, 4)
            body = await reader.readexactly(SIZE.unpack(head)[0])
            conn.handling()
            self.handled += 1
            await conn.reply(writer, [SIZE.pack(self.reply_size), b"r" * (self.reply_size - len(body)) + body])


def frame(body: bytes = b"ping") -> bytes:
    return SIZE.pack(len(body)) + body


@contextlib.asynccontextmanager
async def serving(limits: Limits, toy: Toy):
    """A started listener, stopped on exit."""
    listener = Listener("toy", "127.0.0.1", 0, toy.serve, limits=limits)
    await listener.start()
    try:
        yield listener
    finally:
        await listener.stop()


async def closed_within(reader: asyncio.StreamReader, timeout: float) -> bytes:
    """Everything the server sent until it closed (fails if it does not close within ``timeout``)."""
    got = bytearray()
    async with asyncio.timeout(timeout):
        while True:
            try:
                chunk = await reader.read(1 << 16)
            except ConnectionResetError:
                return bytes(got)
            if not chunk:
                return bytes(got)
            got += chunk


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_sweep_interval_is_a_quarter_of_the_smallest_timeout_within_bounds():
    assert Limits().sweep_interval_s() == 0.0
    assert Limits(idle_timeout_s=600, frame_receive_timeout_s=60).sweep_interval_s() == 1.0
    assert Limits(send_stall_timeout_s=2).sweep_interval_s() == 0.5
    assert Limits(frame_receive_timeout_s=0.01).sweep_interval_s() == 0.05


def test_iggy_idle_is_the_shorter_of_idle_timeout_and_the_heartbeat_allowance():
    assert iggy_limits(TcpConfig()).idle_timeout_s == 0.0
    assert iggy_limits(TcpConfig(heartbeat_interval_s=5)).idle_timeout_s == pytest.approx(6.0)
    assert iggy_limits(TcpConfig(heartbeat_interval_s=5, idle_timeout_s=2)).idle_timeout_s == 2
    assert iggy_limits(TcpConfig(idle_timeout_s=30)).idle_timeout_s == 30
    limits = iggy_limits(TcpConfig(max_connections=7, max_connection_buffer_bytes=99))
    assert (limits.max_connections, limits.max_buffer_bytes) == (7, 99)


def test_kafka_idle_is_connections_max_idle_ms():
    assert kafka_limits(KafkaConfig()).idle_timeout_s == 600.0
    assert kafka_limits(KafkaConfig(connections_max_idle_ms=1500)).idle_timeout_s == 1.5
    assert kafka_limits(KafkaConfig(connections_max_idle_ms=0)).idle_timeout_s == 0.0


def test_an_idle_connection_gets_the_idle_hook_then_is_closed_and_an_active_one_is_not():
    async def go():
        toy = Toy()
        async with serving(Limits(idle_timeout_s=0.3), toy) as listener:
            r1, w1 = await asyncio.open_connection("127.0.0.1", listener.bound_port)
            r2, w2 = await asyncio.open_connection("127.0.0.1", listener.bound_port)
            try:
                for _ in range(8):  # 0.8 s of requests 0.1 s apart on the second connection
                    w2.write(frame())
                    assert await asyncio.wait_for(r2.readexactly(8), 5) == SIZE.pack(4) + b"ping"
                    await asyncio.sleep(0.1)
                assert await closed_within(r1, 5) == b"BYE!"
                assert toy.idle_hooks == 1
                w2.write(frame())
                assert await asyncio.wait_for(r2.readexactly(8), 5) == SIZE.pack(4) + b"ping"
            finally:
                w1.close()
                w2.close()

    run(go())


def test_a_frame_not_whole_by_the_deadline_is_closed():
    async def go():
        toy = Toy()
        async with serving(Limits(frame_receive_timeout_s=0.3), toy) as listener:
            reader, writer = await asyncio.open_connection("127.0.0.1", listener.bound_port)
            try:
                writer.write(frame(b"never whole")[:6])
                assert await closed_within(reader, 5) == b""
                assert toy.handled == 0 and listener.connection_count == 0
            finally:
                writer.close()

    run(go())


def test_connections_past_the_limit_are_closed_before_anything_is_read():
    async def go():
        toy = Toy()
        async with serving(Limits(max_connections=2), toy) as listener:
            conns = []
            try:
                for _ in range(2):
                    r, w = await asyncio.open_connection("127.0.0.1", listener.bound_port)
                    conns.append(w)
                    w.write(frame())
                    await asyncio.wait_for(r.readexactly(8), 5)
                r, w = await asyncio.open_connection("127.0.0.1", listener.bound_port)
                conns.append(w)
                w.write(frame())
                assert await closed_within(r, 5) == b""
                assert toy.handled == 2 and listener.connection_count == 2
            finally:
                for w in conns:
                    w.close()

    run(go())


def test_a_client_that_never_reads_is_backpressured_then_dropped():
    async def go():
        toy = Toy(reply_size=256 * 1024)
        async with serving(Limits(max_buffer_bytes=64 * 1024, send_stall_timeout_s=0.5), toy) as listener:
            reader, writer = await asyncio.open_connection("127.0.0.1", listener.bound_port, limit=1024)
            writer.transport.pause_reading()  # this client reads nothing
            try:
                writer.write(frame() * 10_000)  # 80 kB of requests: 2.5 GB of replies if all were answered
                async with asyncio.timeout(10):
                    while listener.connection_count:
                        await asyncio.sleep(0.05)
                # the server stopped reading requests once one reply was stuck over the bound
                assert toy.handled < 100
            finally:
                writer.transport.abort()

    run(go())


def test_a_half_received_frame_does_not_hold_shutdown():
    """A connection mid-frame is not busy: stop() closes it at once rather than waiting its deadline."""

    async def go():
        toy = Toy()
        listener = Listener("toy", "127.0.0.1", 0, toy.serve, limits=Limits(frame_receive_timeout_s=600))
        await listener.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.bound_port)
        try:
            writer.write(frame(b"dripping")[:5])
            async with asyncio.timeout(5):
                while listener.connection_count == 0:
                    await asyncio.sleep(0.01)
            await asyncio.wait_for(listener.stop(deadline_s=600), 10)
            assert await closed_within(reader, 5) == b""
            assert toy.handled == 0 and listener.connection_count == 0
        finally:
            writer.close()

    run(go())


class Refuser:
    """Answers the first frame, then ends the connection without reading what follows (a
    protocol error that closes: the Iggy refusal, the Kafka size refusal)."""

    async def serve(self, reader, writer, conn) -> None:
        head = await conn.receive(reader, 4)
        await reader.readexactly(SIZE.unpack(head)[0])
        conn.handling()
        await conn.reply(writer, frame(b"last words"))


async def to_end(reader: asyncio.StreamReader) -> tuple[bytes, str]:
    got = bytearray()
    while True:
        try:
            chunk = await reader.read(1 << 16)
        except ConnectionResetError:
            return bytes(got), "reset"
        if not chunk:
            return bytes(got), "eof"
        got += chunk


@pytest.mark.parametrize("more", [0, 64 * 1024, 4 << 20])
def test_a_connection_the_server_ends_is_closed_gracefully(more):
    """The client gets the last reply whole, then a clean end of stream (never a reset), also
    when it sent more than the server reads (read and dropped until the client's end)."""

    async def go():
        listener = Listener("toy", "127.0.0.1", 0, Refuser().serve, limits=Limits())
        await listener.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.bound_port)
        try:
            writer.write(frame() + b"\xee" * more)
            sending = asyncio.ensure_future(writer.drain())
            got, end = await to_end(reader)
            await sending  # all of it was taken (read and dropped), no reset
            assert (got, end) == (frame(b"last words"), "eof")
            writer.close()
            async with asyncio.timeout(10):
                while listener.connection_count:  # closed once the client closed its side
                    await asyncio.sleep(0.01)
        finally:
            writer.close()
            await listener.stop()

    run(go())


def test_stop_waits_for_a_connection_being_closed():
    """A connection whose coroutine has returned and whose close waits for the client's end is
    still counted; stop() waits for it (bounded by the close's own linger)."""

    async def go():
        listener = Listener("toy", "127.0.0.1", 0, Refuser().serve, limits=Limits())
        await listener.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.bound_port)
        try:
            writer.write(frame())
            assert await reader.readexactly(len(frame(b"last words"))) == frame(b"last words")
            assert await reader.read(1) == b""  # the server's FIN; the client has not closed yet
            assert listener.connection_count == 1  # lingering for the client's end
            await asyncio.wait_for(listener.stop(), 10)
            assert listener.connection_count == 0
        finally:
            writer.close()

    run(go())
