"""The shared asyncio TCP listener: accept, track connections, shut down gracefully.

Each front-end hands in a connection coroutine ``serve(reader, writer)``. On
``stop`` the listener stops accepting, asks every connection to finish (the
coroutine sees ``closing`` set and returns after its in-flight request), waits
up to a deadline, then cancels what is left (uvicorn's shape).

:func:`bind` binds a listener's sockets before anything else is opened (the
start-up order in ``headwater.app``); ``Listener(..., sockets=...)`` then
serves on them.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Awaitable, Callable

log = logging.getLogger("headwater.listener")

class Connection:
    """What a connection coroutine tells the listener: ``busy`` while it handles a request."""

    __slots__ = ("busy", "peer", "closing")

    def __init__(self, peer: str, closing: asyncio.Event):
        self.busy = False
        self.peer = peer
        self.closing = closing  # set when the server shuts down: finish the request in hand, then return


Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter, Connection], Awaitable[None]]


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
                 sockets: list[socket.socket] | None = None):
        """``sockets``: already bound by :func:`bind` (the listener owns them from now on;
        :meth:`start` listens on them); None: :meth:`start` binds ``host:port`` itself."""
        self.name = name
        self.host = host
        self.port = port
        self._serve = serve
        self._limit = limit
        self._sockets = sockets
        self._server: asyncio.base_events.Server | None = None
        self._more_servers: list[asyncio.base_events.Server] = []  # one per further bound address
        self._tasks: dict[asyncio.Task, Connection] = {}
        self.closing = asyncio.Event()

    @property
    def bound_port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        if self._sockets is None:
            self._server = await asyncio.start_server(
                self._on_connect, self.host, self.port, limit=self._limit, reuse_address=True, backlog=1024
            )
        else:
            servers = [
                await asyncio.start_server(self._on_connect, sock=s, limit=self._limit, backlog=1024) for s in self._sockets
            ]
            self._server, self._more_servers = servers[0], servers[1:]
        log.info("listening", extra={"kv": {"listener": self.name, "address": f"{self.host}:{self.bound_port}"}})

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = writer.get_extra_info("peername")
        conn = Connection(f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer), self.closing)
        self._tasks[task] = conn
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
            self._tasks.pop(task, None)
            try:
                writer.close()
            except Exception:
                pass

    async def stop(self, deadline_s: float = 5.0) -> None:
        self.closing.set()
        if self._server is None and self._sockets:
            for sock in self._sockets:  # bound, never served
                sock.close()
        for server in self._more_servers:
            server.close()
        if self._server is not None:
            self._server.close()
        for task, conn in list(self._tasks.items()):
            if not conn.busy:
                task.cancel()  # idle: waiting for the next request
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
