"""A connection reader that receives a frame's body straight into the frame's own buffer.

``asyncio.StreamReader`` copies every byte three times on its way to a handler:
the transport's ``recv`` into a fresh ``bytes``, ``feed_data`` into the reader's
``bytearray``, ``readexactly`` out of it again (and ``del buffer[:n]`` moves
what follows). :class:`FrameProtocol` is an ``asyncio.BufferedProtocol``: the
event loop ``recv_into``'s the buffer it hands out. While :meth:`FrameReader.read_frame`
waits for a body, that buffer is the body's own ``bytearray``: kernel -> body,
one copy, one wake-up of the reading coroutine per frame instead of one per chunk.
Other reads (a header, a size prefix) are received into a small staging buffer.

Reads (one at a time per connection, like ``StreamReader``):

- :meth:`FrameReader.read` ``(n[, ahead])``: 1..n bytes as ``bytes``; ``b""`` at end of stream
  (``ahead``: the receive may stage that many bytes more, for the next read).
- :meth:`FrameReader.readexactly` ``(n)``: exactly n bytes as ``bytes``.
- :meth:`FrameReader.read_frame` ``(n)``: exactly n bytes in a new ``bytearray`` the
  caller owns (writable: the Iggy send path stamps offsets into it in place).

Each raises ``asyncio.IncompleteReadError`` (with the bytes that did arrive) when
the peer closes first, or the transport's error when the connection broke. A
read cancelled mid-frame leaves the stream mid-frame: the connection must close.

Backpressure: a read that waits for staged bytes lets the transport read no more than
it asked for, and stops the transport once it has them (so the body after a header
stays in the kernel until :meth:`FrameReader.read_frame` receives it in place). When
no read waits (after a frame, while the handler runs), bytes are staged, at most
``limit`` of them before the transport stops reading (pipelined requests: their bodies
are then copied once, from the staging buffer); the kernel's socket buffers then stop
the peer. A staging buffer is
allocated at the first byte (an idle connection holds none), kept while staged bytes keep
coming (a pipelining peer's next frames reuse it instead of regrowing it from 16 KiB, a
zero-filled allocation and a copy per doubling, for every frame), and dropped when it grew
past 16 KiB and a read finds it empty and has to wait (the peer went quiet).

Copies between buffers go memoryview to memoryview: ``bytearray[a:b] = memoryview``
first copies the view into a temporary ``bytearray`` (CPython's ``bytearray_ass_subscript``
does so for any source that is not a bytearray), a second copy and allocation of every
staged byte (session 5: 13 % of the server's CPU receiving 1 KB messages).

Serving inline (:meth:`FrameReader.serve_inline`): while the connection's coroutine has no
request in hand it may hand the reader an ``inline`` server, and whole frames that it accepts
are then served from the protocol callbacks themselves, without waking the coroutine (no
future, no task step, no pause and resume of the transport per request). ``inline`` gives:

- ``head_size``: the bytes of a frame's header;
- ``body_size(head) -> int``: the body length of the frame whose header is ``head`` when it is
  to be served inline, or -1: it is not (the reader stops serving inline, wakes the coroutine
  and leaves the header staged for its ordinary reads: it sees the bytes as if nothing had
  happened);
- ``serve(head, body) -> object``: serve that whole frame now (its reply written to the
  transport); None when it did, else a handoff that the coroutine gets back from
  ``serve_inline`` and must finish (the reader stops serving inline and stops the transport's
  reading until the coroutine reads again);
- ``receiving()``: a frame's first bytes are in (its clock starts);
- ``drop(handoff)``: a handoff the coroutine will not finish (its wait was cancelled).

A body is received in place here too (get_buffer hands out its bytearray after the header and
the bytes staged with it). Replies stay in request order: the coroutine serves nothing while
the reader serves inline, and the reader serves nothing while the coroutine has a request.

TLS: asyncio's and uvloop's SSL transports hand a ``BufferedProtocol`` the
decrypted bytes through the same ``get_buffer`` / ``buffer_updated`` calls.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Awaitable, Callable

_INITIAL = 16 * 1024  # staging buffer bytes, allocated at the first read (an idle connection holds none)
_MIN_FREE = 4 * 1024  # a recv into the staging buffer gets at least this much room
_SPARE_MAX = 1 << 20  # the largest served body a connection keeps to receive the next one into
# TCP_QUICKACK only for a request a client can be holding back (see FrameReader._ack_now): its
# missing part fits one loopback segment, and what arrived is too little for Linux to ACK at once.
_HELD_MISSING = 64 * 1024  # bytes still to come below this: the tail may be one held segment
_HELD_RECEIVED = 16 * 1024  # bytes of the request in below this: less than a segment (no prompt ACK)


class FrameReader:
    """The reading side of one connection (see the module doc). Fed by :class:`FrameProtocol`."""

    __slots__ = ("_buf", "_view", "_start", "_end", "_limit", "_frame", "_filled", "_into_frame",
                 "_want", "_cap", "_waiter", "_eof", "_exc", "_transport", "_paused", "_loop", "_inline",
                 "_inline_head", "_handoff", "_spare", "_sock", "_acked", "_held_missing")

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int = 1 << 20):
        self._loop = loop  # (asyncio.get_running_loop() costs a getpid() syscall per call on 3.11)
        self._buf = bytearray()
        self._view = memoryview(self._buf)
        self._start = 0  # staged bytes are _buf[_start:_end]
        self._end = 0
        self._limit = max(limit, _INITIAL)
        self._frame: memoryview | None = None  # the body read_frame is filling in place
        self._filled = 0
        self._into_frame = False  # the last get_buffer handed out the frame, not the staging buffer
        self._want = 0  # staged bytes the waiter needs
        self._cap = 0  # staged bytes the waiter can take (a recv reads no further)
        self._waiter: asyncio.Future | None = None
        self._eof = False
        self._exc: BaseException | None = None
        self._transport: asyncio.BaseTransport | None = None
        self._paused = False
        self._inline = None  # the inline server while serve_inline waits (see the module doc)
        self._inline_head: bytes | None = None  # the header of the frame whose body is received inline
        self._handoff: object = None  # what inline.serve handed to the coroutine
        self._spare: bytearray | None = None  # a served inline body nobody kept (see _inline_frame_in)
        self._sock = None  # the TCP socket, for TCP_QUICKACK (see _ack_now); None: not TCP
        self._acked = False  # _ack_now ran for the request being received
        self._held_missing = 0  # _HELD_MISSING on a TCP socket; 0: never _ack_now

    # ------------------------------------------------------------------ protocol side
    def set_transport(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and getattr(socket, "TCP_QUICKACK", None) is not None \
                and sock.family in (socket.AF_INET, socket.AF_INET6):
            self._sock = sock
            self._held_missing = _HELD_MISSING

    def _held(self, received: int, missing: int) -> bool:
        """Whether the client may be holding back the rest of the request being received:
        ``received`` bytes of it are in, ``missing`` are not (see :meth:`_ack_now`)."""
        return missing < self._held_missing and received < _HELD_RECEIVED

    def _ack_now(self) -> None:
        """Part of a request is in and the rest may be held back by the client: have the kernel
        ACK now (``TCP_QUICKACK``), once per request. A client that writes a request in two
        ``write`` calls with Nagle on (the apache-iggy SDK: its header, then a body larger
        than its 8 KiB write buffer) holds the second until the first is acknowledged, and
        Linux delays that ACK by up to 40 ms: every such request (bodies of ~8-64 KiB on
        loopback) took 44 ms. Only when the rest fits one segment and what is in is less
        than one (:meth:`_held`): with more, Nagle sends full segments at once and Linux ACKs
        more than one segment at once by itself. Asking for it on every multi-receive
        request cost ~8-10 µs of server CPU per 1000 x 100 B send (leaving the kernel's
        interactive ACK mode: ACKs no longer ride on the replies; docs/benchmarks.md,
        "TCP_QUICKACK's cost (session 12)"). Linux only; a failure is ignored (a hint)."""
        self._acked = True
        sock = self._sock
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
            except (OSError, AttributeError, ValueError):  # ValueError: uvloop's socket of a closed transport
                self._sock = None

    def get_buffer(self, sizehint: int) -> memoryview:
        frame = self._frame
        if frame is not None and self._filled < len(frame):
            self._into_frame = True
            return frame[self._filled:]
        self._into_frame = False
        if self._waiter is not None:  # read just what the waiting read asked for (it is short of it)
            end = self._start + self._cap
            if end > len(self._buf):
                self._restage(self._cap)
                end = self._cap
            return self._view[self._end:end]
        if len(self._buf) - self._end < _MIN_FREE:
            self._make_room()
        return self._view[self._end:]

    def _make_room(self) -> None:
        staged = self._end - self._start
        size = len(self._buf)
        self._restage(max(_INITIAL, size if size - staged >= _MIN_FREE else size * 2))

    def _restage(self, size: int) -> None:
        """Move the staged bytes to the front of a fresh buffer of ``size`` bytes (never in place:
        an overlapping copy within one bytearray is not safe)."""
        staged = self._end - self._start
        buf = bytearray(max(size, staged + _MIN_FREE))
        view = memoryview(buf)
        view[:staged] = self._view[self._start:self._end]  # memoryview to memoryview: one copy (see the module doc)
        self._buf, self._view = buf, view
        self._start, self._end = 0, staged

    def buffer_updated(self, nbytes: int) -> None:
        if self._into_frame:
            self._filled += nbytes
            if self._filled == len(self._frame):  # type: ignore[arg-type]
                self._acked = False
                if self._inline_head is not None:
                    self._inline_frame_in()
                else:
                    self._wake()
            elif not self._acked and self._held(self._filled, len(self._frame) - self._filled):  # type: ignore[arg-type]
                self._ack_now()
            return
        self._end += nbytes
        if self._inline is not None:
            self._serve_staged()
            return
        if self._waiter is not None:
            if self._end - self._start >= self._want:
                self._acked = False
                self._wake()
                self._pause()
            elif not self._acked and self._held(self._end - self._start, self._want - (self._end - self._start)):
                self._ack_now()
        elif self._end - self._start >= self._limit:
            self._pause()

    def feed_eof(self) -> None:
        self._eof = True
        self._wake()

    def connection_lost(self, exc: BaseException | None) -> None:
        if exc is not None:
            self._exc = exc
        self._eof = True
        self._wake()

    def exception(self) -> BaseException | None:
        return self._exc

    def at_eof(self) -> bool:
        return self._eof and self._start == self._end

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _pause(self) -> None:
        if not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ serving inline
    def _serve_staged(self) -> None:
        """Serve the whole frames staged; start receiving the body of a frame whose header is
        staged in place; stop serving inline at a frame ``inline`` does not take (module doc)."""
        inline = self._inline
        size = inline.head_size
        while self._inline is not None:
            start = self._start
            staged = self._end - start
            if staged < size:
                if staged:
                    inline.receiving()
                    if not self._acked and self._held(staged, size - staged):  # a header in pieces
                        self._ack_now()
                return
            head = bytes(self._view[start:start + size])
            n = inline.body_size(head)
            if n < 0:
                self._stop_inline(None)  # the header stays staged: the coroutine reads the frame
                return
            start += size
            staged -= size
            if staged >= n:
                body = bytearray(self._view[start:start + n])
                self._consumed(start + n)
                self._acked = False
                self._served(head, body)
                continue
            frame, self._spare = self._spare, None
            # the spare (see _inline_frame_in) when of this size and referred to by nothing but
            # this frame (``frame`` and getrefcount's argument): then nothing can see it change
            if frame is None or len(frame) != n or sys.getrefcount(frame) != 2:
                frame = bytearray(n)
            view = memoryview(frame)
            view[:staged] = self._view[start:self._end]  # memoryview to memoryview: one copy
            self._consumed(self._end)
            self._frame, self._filled, self._inline_head = view, staged, head
            inline.receiving()
            if not self._acked and self._held(size + staged, n - staged):
                self._ack_now()
            return

    def _inline_frame_in(self) -> None:
        """A body received in place is in: serve its frame. A body served without a handoff is
        kept as the spare (up to ``_SPARE_MAX`` bytes): the next frame of the same size is
        received into it instead of a new zero-filled ``bytearray`` (for 1000 x 100 B sends:
        148 KiB that malloc maps, the kernel faults in and zeroes, and memset zeroes again, per
        request; docs/benchmarks.md, session 10), provided nothing else refers to it by then
        (no handler, storage or view kept the bytes: its reference count says so)."""
        frame, head = self._frame, self._inline_head
        self._frame = self._inline_head = None
        self._into_frame = False
        body = frame.obj  # type: ignore[union-attr]
        del frame
        self._served(head, body)  # type: ignore[arg-type]
        if self._handoff is None and len(body) <= _SPARE_MAX:
            self._spare = body
        del body
        if self._inline is not None and self._start != self._end:
            self._serve_staged()

    def _served(self, head: bytes, body: bytearray) -> None:
        handoff = self._inline.serve(head, body)  # type: ignore[union-attr]
        if handoff is not None:
            self._stop_inline(handoff)

    def _stop_inline(self, handoff: object) -> None:
        """Back to the coroutine: it gets ``handoff`` (None: the staged bytes are its to read);
        reading stops until it reads again."""
        self._inline = None
        self._handoff = handoff
        self._wake()
        self._pause()

    async def serve_inline(self, inline, ahead: int = 0) -> object:
        """Serve whole frames through ``inline`` from the protocol callbacks (see the module doc)
        until one needs this coroutine, the stream ends, or the wait is cancelled. Returns the
        handoff ``inline.serve`` returned, or None: the stream ended, or a frame ``inline`` did
        not take is staged for the ordinary reads. ``ahead``: body bytes a header's receive may
        take along (a small body then needs no receive of its own)."""
        if self._waiter is not None:
            raise RuntimeError("another read is already waiting on this connection")
        self._inline = inline
        self._handoff = None
        try:
            if self._start != self._end:
                self._serve_staged()
            if self._inline is not None and not self._eof and self._exc is None:
                await self._wait(1 << 62, inline.head_size + ahead)
        except BaseException:  # cancelled: a handoff made meanwhile is never finished
            if self._handoff is not None:
                handoff, self._handoff = self._handoff, None
                inline.drop(handoff)
            raise
        finally:
            self._inline = None
            if self._inline_head is not None:  # ended mid-body (end of stream, cancelled): the stream is mid-frame
                self._frame = self._inline_head = None
                self._into_frame = False
        handoff, self._handoff = self._handoff, None
        return handoff

    # ------------------------------------------------------------------ reading side
    async def _wait(self, want: int, cap: int) -> None:
        """Until ``want`` bytes are staged (``cap`` at most, ``cap >= want``), or the stream ended."""
        if self._waiter is not None:
            raise RuntimeError("another read is already waiting on this connection")
        self._want = want
        self._cap = cap
        self._drop_if_idle()
        if cap > len(self._buf) - self._start:
            self._restage(cap)
        self._resume_for_wait()
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _resume_for_wait(self) -> None:
        if self._paused and self._transport is not None:  # a read waits for more: always read on
            self._paused = False
            self._transport.resume_reading()  # type: ignore[attr-defined]

    def _failed(self, partial: bytes, n: int) -> BaseException:
        if self._exc is not None:
            return self._exc
        return asyncio.IncompleteReadError(partial, n)

    def _take(self, n: int) -> bytes:
        start = self._start
        data = bytes(self._view[start:start + n])
        self._consumed(start + n)
        return data

    def _consumed(self, start: int) -> None:
        """The staged bytes before ``start`` were taken. An emptied buffer is kept for the
        bytes that follow (pipelined frames: no regrowth per frame); :meth:`_wait` drops
        it when it grew and a read finds nothing staged (the connection went quiet)."""
        if start < self._end:
            self._start = start
            return
        self._start = self._end = 0

    def _drop_if_idle(self) -> None:
        if self._start == self._end and len(self._buf) > _INITIAL:
            self._buf = bytearray()
            self._view = memoryview(self._buf)
            self._start = self._end = 0

    async def read(self, n: int, ahead: int = 0) -> bytes:
        """Up to ``n`` bytes (at least one), ``b""`` at the end of the stream. ``ahead``: when it
        has to wait, let the receive take up to ``ahead`` bytes more, staged for the next read
        (a header read that may bring a small body with it, so the body read need not wait)."""
        if n <= 0:
            return b""
        if self._start == self._end:
            if self._exc is not None:
                raise self._exc
            if not self._eof:
                await self._wait(1, n + ahead)
            if self._start == self._end:
                if self._exc is not None:
                    raise self._exc
                return b""
        return self._take(min(n, self._end - self._start))

    async def readexactly(self, n: int) -> bytes:
        """Exactly ``n`` bytes. Raises IncompleteReadError when the stream ends first."""
        if n < 0:
            raise ValueError("readexactly size can not be less than zero")
        while self._end - self._start < n:
            if self._eof or self._exc is not None:
                raise self._failed(self._take(self._end - self._start), n)
            await self._wait(n, n)
        return self._take(n)

    async def read_frame(self, n: int) -> bytearray:
        """Exactly ``n`` bytes in a new ``bytearray``, received in place (see the module doc).
        Raises IncompleteReadError (with what arrived) when the stream ends first."""
        frame = bytearray(n)
        view = memoryview(frame)
        staged = min(n, self._end - self._start)
        if staged:
            start = self._start
            view[:staged] = self._view[start:start + staged]  # memoryview to memoryview: one copy (see the module doc)
            self._consumed(start + staged)
        if staged == n:
            view.release()
            return frame
        if self._eof or self._exc is not None:
            view.release()
            raise self._failed(bytes(frame[:staged]), n)
        if self._waiter is not None:
            view.release()
            raise RuntimeError("another read is already waiting on this connection")
        self._frame = view
        self._filled = staged
        self._resume_for_wait()
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
            filled = self._filled
        finally:
            self._waiter = None
            self._frame = None
            self._into_frame = False
            view.release()
        if filled < n:
            raise self._failed(bytes(frame[:filled]), n)
        return frame


class FrameProtocol(asyncio.BufferedProtocol):
    """Feeds a :class:`FrameReader`; writes go through an ``asyncio.StreamWriter`` (drain, close,
    ``wait_closed`` as with ``asyncio.start_server``). Each connection runs ``connected(reader, writer)``
    as a task, as ``asyncio.start_server``'s callback runs.

    Not an ``asyncio.Protocol`` subclass (so not ``asyncio.streams.FlowControlMixin``): uvloop
    treats a protocol that is one as a plain ``data_received`` protocol even when it has
    ``get_buffer``. The writer's flow control (``pause_writing``, ``resume_writing``,
    ``_drain_helper``: what ``StreamWriter.drain`` awaits) is therefore here."""

    def __init__(self, connected: Callable[[FrameReader, asyncio.StreamWriter], Awaitable[None]], limit: int):
        self._loop = asyncio.get_running_loop()
        self._connected = connected
        self._reader = reader = FrameReader(self._loop, limit)
        # the event loop calls these twice per recv: straight to the reader, not through a method here
        self.get_buffer = reader.get_buffer  # type: ignore[method-assign]
        self.buffer_updated = reader.buffer_updated  # type: ignore[method-assign]
        self._closed = self._loop.create_future()
        self._over_ssl = False
        self._task: asyncio.Task | None = None
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future] = []
        self._lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._reader.set_transport(transport)
        self._over_ssl = transport.get_extra_info("sslcontext") is not None
        # no reader for the writer: StreamWriter insists on a StreamReader there, and drain()
        # learns of a lost connection from this protocol (_drain_helper) anyway
        writer = asyncio.StreamWriter(transport, self, None, self._loop)
        self._task = self._loop.create_task(self._connected(self._reader, writer))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._reader.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self._reader.buffer_updated(nbytes)

    def eof_received(self) -> bool:
        self._reader.feed_eof()
        return not self._over_ssl  # plain TCP: keep the write side open for the replies in flight

    def connection_lost(self, exc: BaseException | None) -> None:
        self._lost = True
        self._reader.connection_lost(exc)
        if not self._closed.done():
            self._closed.set_result(None)
        self._release_drains(exc)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._release_drains(None)

    def _release_drains(self, exc: BaseException | None) -> None:
        for waiter in self._drain_waiters:
            if not waiter.done():
                if exc is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(exc)

    async def _drain_helper(self) -> None:
        if self._lost:
            raise ConnectionResetError("Connection lost")
        if not self._write_paused:
            return
        waiter = self._loop.create_future()
        self._drain_waiters.append(waiter)
        try:
            await waiter
        finally:
            self._drain_waiters.remove(waiter)

    def _get_close_waiter(self, stream) -> asyncio.Future:
        return self._closed
