"""The shared asyncio TCP listener: accept, track connections, enforce limits, shut down gracefully.

Each front-end hands in a connection coroutine ``serve(reader, writer, conn)``
and reads and writes through its ``Connection``: ``receive`` (the first bytes
of the next frame), ``handling`` (a whole frame is in), ``reply`` (write, then
wait while the output is over its bound). On ``stop`` the listener stops
accepting, asks every connection to finish (the coroutine sees ``closing`` set
and returns after its in-flight request), waits up to a deadline, then cancels
what is left (uvicorn's shape).

Every connection the server ends (its coroutine returned: shutdown, a refused
frame, an eviction, a protocol error) is closed by :func:`close_gracefully`, so
the peer reads every byte written before the close (the last reply or error)
and then a clean end of stream, never a reset: a socket closed with input it
has not read, or output not yet sent, makes the kernel send an RST, which can
destroy the reply still in the peer's receive buffer.

Limits (``Limits``; each 0 turns it off):

- ``max_connections``: a connection accepted past it is closed at once (no
  byte read or written) and logged, at most once per ``_REFUSAL_LOG_EVERY_S``
  with the count refused since the last line.
- ``max_buffer_bytes``: the transport's write-buffer high-water mark. A reply
  that leaves more than this queued makes the connection wait (``drain``) until
  the peer has read it down to a quarter, and read no further request in the
  meantime (backpressure; the kernel's socket buffers then stop the peer). One
  reply is always queued whole, so a connection holds at most this plus one
  reply, plus its reader's buffer (2 x the reader limit, or one frame; with
  ``framed=True`` the frame being read plus what its staging buffer holds, see
  :mod:`.frames`).
- A clock per connection, by phase (checked by one sweeper task per listener,
  every quarter of the smallest timeout, at most every second):

  ========== ============================== ======================== =============
  phase      from                           limit                    then
  ========== ============================== ======================== =============
  IDLE       waiting for a frame's 1st byte ``idle_timeout_s``       ``on_idle``,
                                                                     close
  RECEIVING  the 1st byte of a frame        ``frame_receive_timeout_s`` close
  BUSY       the whole frame is in          none (the handler's own) -
  SENDING    waiting for the peer to read   ``send_stall_timeout_s`` abort
             (restarts whenever the queued  (no byte read by the
             bytes shrink)                  peer for that long)
  CLOSING    expired, close requested, or   ``_CLOSE_GRACE_S``       abort
             its coroutine returned (the
             FIN of ``close_gracefully``)
  ========== ============================== ======================== =============

  Expired connections are logged once per sweep and reason, with a count.

:func:`bind` binds a listener's sockets before anything else is opened (the
start-up order in ``headwater.app``); ``Listener(..., sockets=...)`` then
serves on them.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl as ssl_mod
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

from .. import metrics
from ..config import format_address
from .frames import FrameProtocol, FrameReader

log = logging.getLogger("headwater.listener")

IDLE, RECEIVING, BUSY, SENDING, CLOSING = range(5)
_REASONS = {IDLE: "idle", RECEIVING: "frame_receive_timeout", SENDING: "send_stall", CLOSING: "close_timeout"}
_REFUSAL_LOG_EVERY_S = 10.0
_CLOSE_GRACE_S = 2.0
_LINGER_S = 1.0  # close_gracefully: how long the peer may be silent without closing its side after our FIN
_FLUSH_S = 10.0  # close_gracefully: how long the peer has to read what is queued
_DISCARD_MAX_S = _CLOSE_GRACE_S  # close_gracefully: how long a peer that keeps sending is read and dropped
# (the sweeper, when on, aborts a connection CLOSING for longer anyway)
_DISCARD_CHUNK = 64 * 1024
_now = time.monotonic


@dataclass(frozen=True)
class Limits:
    """A listener's connection limits; 0 turns one off. Seconds are monotonic-clock seconds."""

    max_connections: int = 0
    max_buffer_bytes: int = 4 * 1024 * 1024
    idle_timeout_s: float = 0.0
    frame_receive_timeout_s: float = 0.0
    send_stall_timeout_s: float = 0.0

    def timeout_for(self, phase: int) -> float:
        if phase == IDLE:
            return self.idle_timeout_s
        if phase == RECEIVING:
            return self.frame_receive_timeout_s
        if phase == SENDING:
            return self.send_stall_timeout_s
        if phase == CLOSING:
            return _CLOSE_GRACE_S
        return 0.0

    def sweep_interval_s(self) -> float:
        """How often the sweeper runs (0: no timeout is on, no sweeper)."""
        timeouts = [t for t in (self.idle_timeout_s, self.frame_receive_timeout_s, self.send_stall_timeout_s) if t > 0]
        return min(1.0, max(0.05, min(timeouts) / 4)) if timeouts else 0.0


class Connection:
    """One accepted connection as the listener sees it: its phase, since when, and how to end it.

    ``on_idle``, when a front-end sets it, runs when the idle timeout expires,
    before the close (the Iggy front-end queues an Eviction there).
    """

    __slots__ = ("peer", "closing", "phase", "since", "on_idle", "ending", "_writer", "_high", "_queued",
                 "_draining", "_stall_since")

    def __init__(self, peer: str, closing: asyncio.Event, writer: asyncio.StreamWriter | None = None, high: int = 0):
        self.peer = peer
        self.closing = closing  # set when the server shuts down: finish the request in hand, then return
        self.phase = IDLE
        self.since = _now()
        self.on_idle: Callable[[], None] | None = None
        self.ending = False  # its coroutine returned: being closed by close_gracefully (bounded)
        self._writer = writer
        self._high = high
        self._queued = 0
        self._draining = 0  # drains in progress (a Kafka connection's pipelined answers drain in tasks)
        self._stall_since = 0.0  # when the peer last read from what a drain waits on

    @property
    def high(self) -> int:
        """The write-buffer bound (bytes; 0: none): a reply that leaves more queued must be drained."""
        return self._high

    @property
    def busy(self) -> bool:
        """Handling a request or sending its reply (shutdown lets it finish)."""
        return self.phase == BUSY or self.phase == SENDING or self._draining > 0

    @property
    def deadline_phase(self) -> int:
        """The phase whose deadline applies: SENDING while any drain waits for the peer, even when
        the connection has meanwhile moved on to reading or handling the next request (a Kafka
        Produce answered ahead drains in a task of its own)."""
        return SENDING if self._draining and self.phase != CLOSING else self.phase

    async def receive(self, reader: asyncio.StreamReader | FrameReader, n: int, ahead: int = 0) -> bytes:
        """The first ``n`` bytes of the next frame: IDLE until one arrives, then RECEIVING.
        ``ahead`` (a :class:`FrameReader` only): the bytes after them the receive may stage.

        Raises IncompleteReadError when the peer closes first."""
        self.phase = IDLE
        self.since = _now()
        chunk = await (reader.read(n, ahead) if ahead else reader.read(n))
        self.phase = RECEIVING
        self.since = _now()
        if len(chunk) == n:
            return chunk
        if not chunk:
            raise asyncio.IncompleteReadError(b"", n)
        return chunk + await reader.readexactly(n - len(chunk))

    def waiting(self) -> None:
        """IDLE from now (for a read the front-end started itself)."""
        self.phase = IDLE
        self.since = _now()

    def receiving(self) -> None:
        self.phase = RECEIVING
        self.since = _now()

    def handling(self) -> None:
        """The whole frame is in: no deadline until the reply is written."""
        self.phase = BUSY

    async def reply(self, writer: asyncio.StreamWriter, out) -> None:
        """Queue ``out`` (bytes or a list of buffers); wait while more than the bound is queued.

        Raises ConnectionResetError when the connection was closed meanwhile (by the peer, or by the
        sweeper: a stuck connection is aborted, which ends its wait without an error)."""
        if writer.transport.is_closing():
            raise ConnectionResetError(f"connection to {self.peer} closed")
        if out:
            if isinstance(out, list):
                writer.writelines(out)
            else:
                writer.write(out)
        if self._high and writer.transport.get_write_buffer_size() > self._high:
            await self.drain(writer)

    async def drain(self, writer: asyncio.StreamWriter) -> None:
        """Wait until the peer has read the queued output down (SENDING: the stall clock runs,
        also when the connection meanwhile reads on: see :attr:`deadline_phase`)."""
        before = self.phase
        self.phase = SENDING
        self.since = self._stall_since = _now()
        self._queued = writer.transport.get_write_buffer_size()
        self._draining += 1
        try:
            await writer.drain()
        finally:
            self._draining -= 1
        if self.phase == SENDING and not self._draining:  # (else the connection moved on meanwhile)
            # back to the phase the drain interrupted, its clock restarted: a pipelined answer's
            # drain may have begun while the connection waited for its next request
            self.phase = BUSY if before == SENDING else before
            self.since = _now()

    def overdue(self, now: float, limits: Limits) -> bool:
        """True when this connection has been in its phase past the phase's limit."""
        phase, since = self.deadline_phase, self.since
        if phase == SENDING:
            if self._writer is not None:
                queued = self._writer.transport.get_write_buffer_size()
                if queued < self._queued:  # the peer read something: not stuck
                    self._queued = queued
                    self._stall_since = now
                    return False
            since = self._stall_since
        timeout = limits.timeout_for(phase)
        return timeout > 0 and now - since > timeout

    def expire(self, now: float) -> None:
        """End an overdue connection: politely when nothing is stuck, at once otherwise."""
        writer = self._writer
        if writer is None:
            return
        phase, self.phase, self.since = self.deadline_phase, CLOSING, now
        transport = writer.transport
        if phase == IDLE and self.on_idle is not None and not transport.is_closing():
            try:
                self.on_idle()
            except Exception:
                log.exception("idle hook failed", extra={"kv": {"peer": self.peer}})
        if phase in (IDLE, RECEIVING):
            transport.close()  # flushes what is queued (an Eviction), then EOF for the reader
        else:
            transport.abort()  # the peer does not read: drop what is queued


async def close_gracefully(reader: "asyncio.StreamReader | FrameReader | None", writer: asyncio.StreamWriter,
                           conn: "Connection | None" = None, linger_s: float = _LINGER_S) -> None:
    """Close a connection the server ends without resetting it (a "lingering close").

    1. flush: wait until the peer has read everything queued (``conn`` given: in its SENDING
       phase, so the listener's send-stall timeout applies), for at most ``_FLUSH_S``;
    2. half-close: send FIN (``write_eof``) so the peer sees the end of our output, where the
       transport can (plain TCP; asyncio's SSL transport cannot: a TLS connection skips this and
       step 3, its ``close`` sends close_notify; docs/gaps.md);
    3. discard what the peer still sends until its end of stream (``reader``: the connection's
       reader, no read waiting on it; None skips this), while the peer goes no more than
       ``linger_s`` seconds without sending and for at most ``_DISCARD_MAX_S`` in all;
    4. close the transport. A peer that does not read in time (step 1) is aborted (what is
       queued would never leave); one that does not close in time (step 3) is closed anyway.

    Why: closing a socket with input not yet read makes the kernel send an RST, which can
    destroy the last reply still in the peer's receive buffer (the peer sees ECONNRESET).
    Never raises but CancelledError (the transport is closed first)."""
    transport = writer.transport
    if transport.is_closing():
        return
    loop = asyncio.get_running_loop()
    try:
        if transport.get_write_buffer_size():
            transport.set_write_buffer_limits(high=0, low=0)  # drain() now waits until all of it is sent
            flush = conn.drain(writer) if conn is not None else writer.drain()
            try:
                await asyncio.wait_for(flush, _FLUSH_S)
            except asyncio.TimeoutError:
                transport.abort()
                return
        if reader is None or not transport.can_write_eof() or writer.get_extra_info("sslcontext") is not None:
            return
        if conn is not None:
            conn.phase, conn.since = CLOSING, _now()
        transport.write_eof()
        end = loop.time() + _DISCARD_MAX_S
        while not transport.is_closing():
            left = end - loop.time()
            if left <= 0:
                return
            try:
                chunk = await asyncio.wait_for(reader.read(_DISCARD_CHUNK), min(left, linger_s))
            except asyncio.TimeoutError:
                return
            if not chunk:
                return  # the peer's end of stream: both sides are done, nothing left unread
    except (ConnectionError, OSError, RuntimeError, asyncio.IncompleteReadError):
        pass  # broken meanwhile (RuntimeError: another read still waits on the reader): just close
    finally:
        if not transport.is_closing():
            transport.close()


Serve = Callable[[asyncio.StreamReader | FrameReader, asyncio.StreamWriter, Connection], Awaitable[None]]


def bind(host: str, port: int) -> list[socket.socket]:
    """Bind (without listening) every address ``host`` resolves to, as ``asyncio.start_server``
    would (SO_REUSEADDR, IPv6 sockets v6-only); returns non-blocking sockets. Until a
    :class:`Listener` serves them (``listen`` then), a client connecting is refused.

    Raises socket.gaierror when ``host`` does not resolve, OSError (EADDRINUSE,
    EADDRNOTAVAIL, EACCES...) when an address cannot be bound; binds nothing then.
    """
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    socks: list[socket.socket] = []
    seen = set()
    try:
        for family, type_, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, type_, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.setblocking(False)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


class Listener:
    def __init__(self, name: str, host: str, port: int, serve: Serve, *, limit: int = 1 << 20,
                 limits: Limits | None = None, sockets: list[socket.socket] | None = None,
                 ssl: "ssl_mod.SSLContext | None" = None, protocol: str = "", transport: str = "tcp",
                 framed: bool = False):
        """``limits``: see the module doc (None: every limit off). ``sockets``: already
        bound by :func:`bind` (the listener owns them from now on; :meth:`start` listens
        on them); None: :meth:`start` binds ``host:port`` itself. ``ssl``: serve TLS (the
        handshake must finish within ``frame_receive_timeout_s``, else 60 s; a failed one
        closes that connection before ``serve`` sees it). ``protocol`` ("iggy", "kafka";
        default ``name``) and ``transport`` ("tcp", "tls-tcp", "websocket", "wss", "kafka",
        "kafka-ssl"...): for logs and the labels of its ``headwater_connections`` gauge.
        ``framed``: ``serve`` gets a :class:`~headwater.frontends.frames.FrameReader` (``read``,
        ``readexactly``, ``read_frame``: a body received in place) instead of an
        ``asyncio.StreamReader``; ``limit`` bounds its staging buffer the same way."""
        self.name = name
        self.transport = transport
        self._ssl = ssl
        self._connections = metrics.connections_gauge(protocol or name, transport)
        self.host = host
        self.port = port
        self._serve = serve
        self._limit = limit
        self._sockets = sockets
        self._framed = framed
        self.limits = limits or Limits()
        self._server: asyncio.base_events.Server | None = None
        self._more_servers: list[asyncio.base_events.Server] = []  # one per further bound address
        self._tasks: dict[asyncio.Task, Connection] = {}
        self._sweeper: asyncio.Task | None = None
        self._refused = 0  # refused since the last log line
        self._refused_logged_at = -1e9
        self.closing = asyncio.Event()

    @property
    def bound_port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    @property
    def connection_count(self) -> int:
        """Connections open now (for a per-transport gauge: label it with ``transport``)."""
        return len(self._tasks)

    async def start(self) -> None:
        tls = {}
        if self._ssl is not None:
            tls = {"ssl": self._ssl, "ssl_handshake_timeout": self.limits.frame_receive_timeout_s or 60.0}
        if self._framed:
            loop, limit = asyncio.get_running_loop(), self._limit

            def serve_on(**where):  # a FrameProtocol per connection (see .frames)
                return loop.create_server(lambda: FrameProtocol(self._on_connect, limit), backlog=1024, **where, **tls)
        else:
            def serve_on(**where):
                return asyncio.start_server(self._on_connect, limit=self._limit, backlog=1024, **where, **tls)
        if self._sockets is None:
            self._server = await serve_on(host=self.host, port=self.port, reuse_address=True)
        else:
            servers = [await serve_on(sock=s) for s in self._sockets]
            self._server, self._more_servers = servers[0], servers[1:]
        interval = self.limits.sweep_interval_s()
        if interval:
            self._sweeper = asyncio.create_task(self._sweep(interval))
        log.info("listening", extra={"kv": {"listener": self.name, "transport": self.transport,
                                            "address": format_address(self.host, self.bound_port)}})

    def _refuse(self, writer: asyncio.StreamWriter, peer: str) -> None:
        writer.transport.abort()
        self._refused += 1
        self._log_refusals(_now(), peer)

    def _log_refusals(self, now: float, peer: str = "") -> None:
        if self._refused and now - self._refused_logged_at >= _REFUSAL_LOG_EVERY_S:
            kv = {"listener": self.name, "max_connections": self.limits.max_connections, "open": len(self._tasks),
                  "refused": self._refused}
            if peer:
                kv["peer"] = peer
            log.warning("connections refused: limit reached", extra={"kv": kv})
            self._refused = 0
            self._refused_logged_at = now

    async def _on_connect(self, reader: asyncio.StreamReader | FrameReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = writer.get_extra_info("peername")
        peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        limits = self.limits
        if limits.max_connections and len(self._tasks) >= limits.max_connections:
            self._refuse(writer, peer)
            return
        conn = Connection(peer, self.closing, writer, limits.max_buffer_bytes)
        self._tasks[task] = conn
        self._connections.inc()
        if limits.max_buffer_bytes:
            writer.transport.set_write_buffer_limits(high=limits.max_buffer_bytes)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        try:
            await self._serve(reader, writer, conn)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            if not self.closing.is_set():
                raise
            # shutting down: an idle connection cancelled by stop() ends quietly
        except Exception:
            log.exception("connection failed", extra={"kv": {"listener": self.name}})
        finally:
            try:
                if conn.deadline_phase == SENDING or conn.phase == CLOSING:
                    writer.transport.abort()  # what is queued would never leave
                else:
                    conn.ending = True
                    await close_gracefully(reader, writer, conn)
            except BaseException:
                writer.transport.abort()
                raise
            finally:
                # (still counted while it closes: stop() waits for it, max_connections counts it)
                self._tasks.pop(task, None)
                self._connections.dec()

    async def _sweep(self, interval: float) -> None:
        """Close connections overdue in their phase (see the module table); log a line per reason."""
        limits = self.limits
        while True:
            await asyncio.sleep(interval)
            now = _now()
            expired: dict[int, list[str]] = {}
            for conn in list(self._tasks.values()):
                if conn.overdue(now, limits):
                    expired.setdefault(conn.deadline_phase, []).append(conn.peer)
                    conn.expire(now)
            for phase, peers in expired.items():
                log.info(
                    "connections closed",
                    extra={"kv": {"listener": self.name, "reason": _REASONS[phase], "count": len(peers), "peer": peers[0],
                                  "after_s": limits.timeout_for(phase)}},
                )
            self._log_refusals(now)

    async def stop(self, deadline_s: float = 5.0) -> None:
        self.closing.set()
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is None and self._sockets:
            for sock in self._sockets:  # bound, never served
                sock.close()
        for server in self._more_servers:
            server.close()
        if self._server is not None:
            self._server.close()
        for task, conn in list(self._tasks.items()):
            if not conn.busy and not conn.ending:
                task.cancel()  # idle: waiting for the next request (one ending closes by itself, bounded)
        tasks = list(self._tasks)
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=deadline_s)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), timeout=1.0)
            except asyncio.TimeoutError:
                pass
