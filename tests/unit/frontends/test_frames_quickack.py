"""FrameReader asks the kernel to ACK at once (TCP_QUICKACK) when part of a request is in and the
rest is not, once per request: a client writing a request in two writes with Nagle on (the
apache-iggy SDK, bodies of ~8-64 KiB) otherwise waited for Linux's delayed ACK, 44 ms a request
(docs/benchmarks.md, "Sends of 8-64 KiB and the delayed ACK (session 11)"). Fed as the event loop
feeds it, over a real loopback TCP socket whose ``setsockopt`` calls are recorded."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import pytest

from headwater.frontends.frames import FrameReader

pytestmark = pytest.mark.skipif(not hasattr(socket, "TCP_QUICKACK"), reason="Linux only")


class _Recording:
    """A real socket; its ``setsockopt`` calls are recorded, then made."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self.family = sock.family
        self.calls: list[tuple[int, int, int]] = []

    def setsockopt(self, level: int, option: int, value: int) -> None:
        self.calls.append((level, option, value))
        self._sock.setsockopt(level, option, value)


class _Transport:
    def __init__(self, sock):
        self.sock = sock

    def get_extra_info(self, name, default=None):
        return self.sock if name == "socket" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _feed(reader: FrameReader, data: bytes) -> None:
    view = memoryview(data)
    while view:
        buf = reader.get_buffer(-1)
        n = min(len(buf), len(view))
        buf[:n] = view[:n]
        reader.buffer_updated(n)
        view = view[n:]


@contextlib.contextmanager
def _accepted():
    """The server side of a real loopback TCP connection, its setsockopt calls recorded."""
    with socket.create_server(("127.0.0.1", 0)) as server, \
            socket.create_connection(server.getsockname()):
        accepted, _ = server.accept()
        with accepted:
            yield _Recording(accepted)


def _reader(sock: _Recording) -> FrameReader:
    reader = FrameReader(asyncio.get_running_loop(), limit=1 << 20)
    reader.set_transport(_Transport(sock))
    return reader


def _quickacks(sock: _Recording) -> int:
    return sock.calls.count((socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1))


def test_a_partial_request_is_acked_at_once_and_once_per_request():
    with _accepted() as sock:

        async def run():
            reader = _reader(sock)
            body = bytes(range(256)) * 80  # 20,480 bytes

            head = asyncio.ensure_future(reader.readexactly(4))
            await asyncio.sleep(0)
            _feed(reader, b"\x00\x00")  # half a header: ACK now
            assert _quickacks(sock) == 1
            _feed(reader, len(body).to_bytes(2, "big"))
            assert await head == len(body).to_bytes(4, "big")

            frame = asyncio.ensure_future(reader.read_frame(len(body)))
            await asyncio.sleep(0)
            _feed(reader, body[:5000])  # part of the body: ACK now (a new request part)
            _feed(reader, body[5000:9000])  # still partial: not again
            assert _quickacks(sock) == 2
            _feed(reader, body[9000:])
            assert bytes(await frame) == body

            whole = asyncio.ensure_future(reader.readexactly(4))
            await asyncio.sleep(0)
            _feed(reader, b"\x00\x00\x00\x01")  # whole at once: nothing to ACK early
            assert await whole == b"\x00\x00\x00\x01" and _quickacks(sock) == 2

            nxt = asyncio.ensure_future(reader.readexactly(4))
            await asyncio.sleep(0)
            _feed(reader, b"\x00")  # the next request's first byte: ACK again
            assert _quickacks(sock) == 3
            _feed(reader, b"\x00\x00\x02")
            assert await nxt == b"\x00\x00\x00\x02"

        asyncio.run(run())


def test_a_request_the_client_cannot_be_holding_back_is_left_to_the_kernel():
    """Asking for QUICKACK costs the kernel's interactive ACK mode (~8-10 µs of server CPU per
    1000 x 100 B send, session 12): it is asked only when the rest fits one segment and what
    is in is less than one. A 116 KiB body (the issue's 1000 x 100 B rows) arrives in full
    segments that Linux ACKs by itself; so does a body whose first part was a segment."""
    with _accepted() as sock:

        async def run():
            reader = _reader(sock)
            big = bytes(range(256)) * 464  # 118,784 bytes
            frame = asyncio.ensure_future(reader.read_frame(len(big)))
            await asyncio.sleep(0)
            _feed(reader, big[:8])  # a header's worth: 118 KB still to come (full segments)
            _feed(reader, big[8:65491])  # a segment in: Linux ACKs that itself
            _feed(reader, big[65491:])
            assert bytes(await frame) == big
            assert _quickacks(sock) == 0

            body = bytes(range(256)) * 160  # 40,960 bytes, the first 32 KiB in one piece
            frame = asyncio.ensure_future(reader.read_frame(len(body)))
            await asyncio.sleep(0)
            _feed(reader, body[:32768])
            _feed(reader, body[32768:])
            assert bytes(await frame) == body
            assert _quickacks(sock) == 0

            frame = asyncio.ensure_future(reader.read_frame(len(body)))
            await asyncio.sleep(0)
            _feed(reader, body[:8])  # a header's worth, and the rest fits a segment: ACK now
            _feed(reader, body[8:])
            assert bytes(await frame) == body
            assert _quickacks(sock) == 1

        asyncio.run(run())


def test_a_unix_socket_is_left_alone():
    left, right = socket.socketpair()
    with left, right:
        sock = _Recording(left)

        async def run():
            reader = FrameReader(asyncio.get_running_loop(), limit=1 << 20)
            reader.set_transport(_Transport(sock))
            head = asyncio.ensure_future(reader.readexactly(4))
            await asyncio.sleep(0)
            _feed(reader, b"\x00\x00")
            _feed(reader, b"\x00\x09")
            assert await head == b"\x00\x00\x00\x09"

        asyncio.run(run())
        assert sock.calls == []
