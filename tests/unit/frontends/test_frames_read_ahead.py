"""``FrameReader.read(n, ahead)`` over a real socket pair and the running event loop: a header
read may stage up to ``ahead`` bytes of what follows (a small body then needs no second
receive), never more, and the frame read after it still gets every byte in order."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from headwater.frontends.frames import FrameProtocol


async def _serve_one(data: bytes, reads):
    """Send ``data`` in one write to a FrameProtocol connection; ``reads(reader)`` runs there."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    result = loop.create_future()

    async def connected(reader, writer):
        try:
            result.set_result(await reads(reader))
        except BaseException as e:  # reported to the test
            result.set_exception(e)

    transport, _ = await loop.connect_accepted_socket(lambda: FrameProtocol(connected, 1 << 20), ours)
    try:
        theirs.sendall(data)
        return await asyncio.wait_for(result, 10)
    finally:
        transport.close()
        theirs.close()


@pytest.mark.parametrize("body_size", [0, 40, 512, 70_000])
def test_a_header_read_stages_at_most_ahead_bytes_and_the_body_follows_intact(body_size):
    head, body = os.urandom(256), os.urandom(body_size)

    async def reads(reader):
        got = await reader.read(256, 512)
        staged = reader._end - reader._start  # what the header's receive took beyond the header
        rest = await (reader.read_frame(body_size) if body_size > 4096 else reader.readexactly(body_size))
        return got, staged, bytes(rest)

    got, staged, rest = asyncio.run(_serve_one(head + body, reads))
    assert got == head and rest == body
    assert staged == min(body_size, 512)  # one receive brought the small body along, never more


def test_without_ahead_a_header_read_takes_the_header_only():
    head, body = os.urandom(256), os.urandom(40)

    async def reads(reader):
        got = await reader.read(256)
        staged = reader._end - reader._start
        return got, staged, await reader.readexactly(40)

    assert asyncio.run(_serve_one(head + body, reads)) == (head, 0, body)
