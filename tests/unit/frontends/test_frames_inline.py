"""``FrameReader.serve_inline`` over a real socket pair and the running event loop, with a toy
protocol (an 8-byte header: body length u32, kind u32): however the bytes are cut, every frame
reaches exactly one of the inline server and the coroutine's ordinary reads, whole and in order;
a frame the inline server declines is read by the coroutine from its first byte; a handoff made
as the wait is cancelled is dropped, never lost silently."""

from __future__ import annotations

import asyncio
import socket
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.frontends.frames import FrameProtocol

_HEAD = struct.Struct("<II")
INLINE, DECLINED, HANDED = 1, 2, 3


class Toy:
    """Kind 1 served inline, kind 2 declined (-1), kind 3 taken and handed to the coroutine."""

    head_size = _HEAD.size

    def __init__(self, cancel=None):
        self.seen: list[tuple[str, int, bytes]] = []
        self.receivings = 0
        self.dropped: list = []
        self.cancel = cancel

    def body_size(self, head: bytes) -> int:
        n, kind = _HEAD.unpack(head)
        return -1 if kind == DECLINED else n

    def receiving(self) -> None:
        self.receivings += 1

    def serve(self, head: bytes, body: bytearray):
        n, kind = _HEAD.unpack(head)
        assert len(body) == n
        if kind == HANDED:
            if self.cancel is not None:
                self.cancel()
            return ("handed", bytes(body))
        self.seen.append(("inline", kind, bytes(body)))
        return None

    def drop(self, handoff) -> None:
        self.dropped.append(handoff)


def frame(kind: int, body: bytes) -> bytes:
    return _HEAD.pack(len(body), kind) + body


async def _run(chunks: list[bytes], toy: Toy, expect: int) -> list:
    """Send ``chunks`` to a FrameProtocol connection whose coroutine serves ``toy`` inline and
    reads what it is left; until ``expect`` frames were seen (inline frames never wake it)."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    failed: list[BaseException] = []

    async def connected(reader, writer):
        try:
            while True:
                handoff = await reader.serve_inline(toy, 16)
                if handoff is not None:
                    toy.seen.append(("coroutine", HANDED, handoff[1]))
                    continue
                if reader.at_eof():
                    return
                head = await reader.readexactly(_HEAD.size)
                n, kind = _HEAD.unpack(head)
                assert kind == DECLINED, kind
                toy.seen.append(("coroutine", kind, await reader.readexactly(n)))
        except BaseException as e:
            failed.append(e)
            raise

    transport, _ = await loop.connect_accepted_socket(lambda: FrameProtocol(connected, 1 << 16), ours)
    try:
        for c in chunks:
            theirs.sendall(c)
            await asyncio.sleep(0)
        deadline = loop.time() + 10
        while len(toy.seen) < expect and not failed:
            assert loop.time() < deadline, f"{len(toy.seen)} of {expect} frames seen"
            await asyncio.sleep(0.001)
        if failed:
            raise failed[0]
        return toy.seen
    finally:
        transport.close()
        theirs.close()


frames_st = st.lists(st.tuples(st.sampled_from([INLINE, DECLINED, HANDED]), st.binary(max_size=3000)),
                     min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(frames_st, st.lists(st.integers(1, 5000), max_size=20))
def test_every_frame_reaches_one_side_whole_and_in_order(frames, cuts):
    wire = b"".join(frame(k, b) for k, b in frames)
    chunks, pos = [], 0
    for n in cuts:
        if pos >= len(wire):
            break
        chunks.append(wire[pos:pos + n])
        pos += n
    if pos < len(wire):
        chunks.append(wire[pos:])
    toy = Toy()
    seen = asyncio.run(_run(chunks, toy, len(frames)))
    assert [(k, b) for _, k, b in seen] == list(frames)
    assert [side for side, _, _ in seen] == ["inline" if k == INLINE else "coroutine" for k, _ in frames]


def test_a_frame_cut_mid_header_starts_its_clock_once():
    wire = frame(INLINE, b"x" * 100)
    toy = Toy()
    asyncio.run(_run([wire[:1], wire[1:3], wire[3:7], wire[7:50], wire[50:]], toy, 1))
    assert toy.seen == [("inline", INLINE, b"x" * 100)]
    assert toy.receivings >= 1  # (the toy counts calls; the Iggy server starts its clock at the first only)


def test_a_handoff_made_as_the_wait_is_cancelled_is_dropped():
    async def go():
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        ended = loop.create_future()
        tasks = []
        toy = Toy(cancel=lambda: tasks[0].cancel())

        async def connected(reader, writer):
            tasks.append(asyncio.current_task())
            try:
                await reader.serve_inline(toy, 16)
                ended.set_result("returned")
            except asyncio.CancelledError:
                ended.set_result("cancelled")

        transport, _ = await loop.connect_accepted_socket(lambda: FrameProtocol(connected, 1 << 16), ours)
        try:
            await asyncio.sleep(0.01)
            theirs.sendall(frame(HANDED, b"payload"))
            return await asyncio.wait_for(ended, 10), toy.dropped
        finally:
            transport.close()
            theirs.close()

    outcome, dropped = asyncio.run(go())
    assert outcome == "cancelled"
    assert dropped == [("handed", b"payload")]


class Keeper(Toy):
    """Records each inline body object; ``keep``: holds on to every body (as storage or a
    handler keeping the bytes would), so none may be reused."""

    def __init__(self, keep: bool):
        super().__init__()
        self.keep = keep
        self.bodies: list = []
        self.ids: list[int] = []

    def serve(self, head: bytes, body: bytearray):
        self.ids.append(id(body))
        if self.keep:
            self.bodies.append(body)
        return super().serve(head, body)


def _one_at_a_time(bodies: list[bytes], toy: Toy) -> list:
    """Each frame sent whole after the previous one was served, its body in two pieces (so it is
    received in place, not copied out of the staging buffer)."""
    async def go():
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()

        async def connected(reader, writer):
            while await reader.serve_inline(toy, 16) is not None:
                pass

        transport, _ = await loop.connect_accepted_socket(lambda: FrameProtocol(connected, 1 << 16), ours)
        try:
            for i, b in enumerate(bodies):
                wire = frame(INLINE, b)
                theirs.sendall(wire[:100])
                await asyncio.sleep(0.005)
                theirs.sendall(wire[100:])
                deadline = loop.time() + 10
                while len(toy.seen) <= i:
                    assert loop.time() < deadline
                    await asyncio.sleep(0.001)
            return toy.seen
        finally:
            transport.close()
            theirs.close()

    return asyncio.run(go())


def test_a_served_body_nobody_kept_receives_the_next_frame_of_its_size():
    bodies = [bytes([i]) * 50_000 for i in range(1, 5)] + [b"z" * 40_000, bytes([9]) * 50_000]
    toy = Keeper(keep=False)
    seen = _one_at_a_time(bodies, toy)
    assert [b for _, _, b in seen] == bodies  # every frame whole, whatever buffer it came in
    assert len(set(toy.ids[:4])) == 1  # the same bytearray, received into again
    assert toy.ids[4] != toy.ids[0]  # another size: a new one


def test_a_body_still_referred_to_is_never_received_into_again():
    bodies = [bytes([i]) * 50_000 for i in range(1, 6)]
    toy = Keeper(keep=True)
    seen = _one_at_a_time(bodies, toy)
    assert [b for _, _, b in seen] == bodies
    assert len(set(toy.ids)) == len(bodies)
    assert [bytes(b) for b in toy.bodies] == bodies  # what was kept is unaltered
