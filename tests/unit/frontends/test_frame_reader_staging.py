"""FrameReader's staging buffer, fed as the event loop feeds it (``get_buffer`` / ``buffer_updated``):
kept while a pipelining peer's frames keep arriving, dropped once a read finds it empty and waits."""

from __future__ import annotations

import asyncio

from headwater.frontends.frames import _INITIAL, FrameReader


class _Transport:
    """The calls a FrameReader makes on its transport (the event loop's own is not needed here)."""

    def __init__(self):
        self.paused = False

    def get_extra_info(self, name, default=None):
        return default  # no socket: nothing to ACK early (test_frames_quickack)

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


def _feed(reader: FrameReader, data: bytes) -> None:
    """What the event loop does on a readable socket: recv_into the buffer it gets, report the count."""
    view = memoryview(data)
    while view:
        buf = reader.get_buffer(-1)
        n = min(len(buf), len(view))
        assert n > 0
        buf[:n] = view[:n]
        reader.buffer_updated(n)
        view = view[n:]


def test_staged_frames_keep_the_buffer_and_a_quiet_peer_releases_it():
    async def run():
        reader = FrameReader(asyncio.get_running_loop(), limit=1 << 20)
        reader.set_transport(_Transport())
        frames = [bytes([i]) * 200_000 for i in range(3)]
        _feed(reader, b"".join(len(f).to_bytes(4, "big") + f for f in frames[:2]))  # staged while "handling"
        grown = len(reader._buf)
        assert grown > _INITIAL
        for f in frames[:2]:
            size = int.from_bytes(await reader.readexactly(4), "big")
            assert bytes(await reader.read_frame(size)) == f  # exact bytes, copied from staging
        assert len(reader._buf) == grown  # emptied but kept for the next pipelined frames
        _feed(reader, len(frames[2]).to_bytes(4, "big") + frames[2])
        assert len(reader._buf) == grown  # reused, not regrown from 16 KiB
        size = int.from_bytes(await reader.readexactly(4), "big")
        assert bytes(await reader.read_frame(size)) == frames[2]
        pending = asyncio.ensure_future(reader.readexactly(4))  # nothing staged: the peer went quiet
        await asyncio.sleep(0)
        assert len(reader._buf) <= _INITIAL  # the grown buffer went
        _feed(reader, b"\x00\x00\x00\x07")
        assert await pending == b"\x00\x00\x00\x07"

    asyncio.run(run())
