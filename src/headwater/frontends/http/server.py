"""Serve the HTTP app with uvicorn on sockets ``headwater.app`` already bound (step 3 of its
start order), inside the server's own event loop; HTTPS when ``[http] tls_enabled``.

:class:`HttpListener` has the interface of ``frontends.listener.Listener`` that the
composition root uses: ``name``, ``host``, ``bound_port``, ``start()``, ``stop()``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl

import time

import h11
import uvicorn

from ... import metrics
from ...config import HttpConfig, format_address
from .. import tls

log = logging.getLogger("headwater.http")


class TlsError(ValueError):
    """The ``[http]`` TLS certificate or key cannot be loaded."""


def tls_context(config: HttpConfig) -> ssl.SSLContext | None:
    """The server-side TLS context of ``[http]`` (None when ``tls_enabled`` is off): the PEM
    certificate chain and key, built by :func:`headwater.frontends.tls.server_context` as for
    every TLS listener. Raises :class:`TlsError`."""
    if not config.tls_enabled:
        return None
    try:  # the config requires tls_cert_file with tls_enabled: no self-signed fallback here
        return tls.server_context(config.tls_cert_file, config.tls_key_file, "", "http.tls_cert_file")
    except tls.TlsConfigError as e:
        raise TlsError(f"cannot load the TLS certificate/key: {e.problem}") from None


class HttpListener:
    """uvicorn's server over pre-bound, not yet listening sockets (it owns them)."""

    def __init__(self, name: str, host: str, port: int, app, config: HttpConfig, sockets: list[socket.socket],
                 tls: ssl.SSLContext | None = None):
        """``tls``: serve HTTPS with this context (from :func:`tls_context`)."""
        self.name = name
        self.host = host
        self.port = port
        self.transport = "https" if tls is not None else "http"
        self._sockets = sockets
        self._server = uvicorn.Server(
            uvicorn.Config(
                app,
                lifespan="off",
                log_config=None,
                log_level="warning",
                access_log=False,
                server_header=False,
                proxy_headers=False,
                http="h11",
                timeout_graceful_shutdown=5,
                **({"ssl_context_factory": lambda _config, _default: tls} if tls is not None else {}),
            )
        )
        self._started = False
        self._request_timeout_s = config.request_timeout_s
        self._waiting: dict[object, tuple[object, float]] = {}
        self._sweeper: asyncio.Task | None = None
        metrics.count_connections("iggy", self.transport, lambda: self.connection_count)

    @property
    def bound_port(self) -> int:
        return self._sockets[0].getsockname()[1]

    @property
    def connection_count(self) -> int:
        """HTTP connections open now (uvicorn's own table)."""
        return len(self._server.server_state.connections)

    async def start(self) -> None:
        """Listen on the sockets and serve. Raises OSError when ``listen`` fails."""
        config = self._server.config
        if not config.loaded:
            config.load()
        self._server.lifespan = config.lifespan_class(config)
        await self._server.startup(sockets=self._sockets)
        self._started = True
        if self._request_timeout_s > 0:
            self._sweeper = asyncio.create_task(self._sweep_loop(min(1.0, self._request_timeout_s / 4)))
        scheme = "https" if self._server.config.ssl is not None else "http"
        log.info(
            "listening",
            extra={"kv": {"listener": self.name, "address": format_address(self.host, self.bound_port), "scheme": scheme}},
        )

    async def _sweep_loop(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            self.sweep(time.monotonic())

    def sweep(self, now: float) -> int:
        """Close the connections that have been receiving one request (its headers or its
        body; a new connection counts from its first byte or its accept) for longer than
        ``[http] request_timeout_s``, so slow or silent clients cannot hold connections
        forever (uvicorn times out only idle keep-alive connections). Returns how many."""
        waiting: dict[object, tuple[object, float]] = {}
        closed = 0
        for proto in list(self._server.server_state.connections):
            conn = getattr(proto, "conn", None)
            if conn is None or proto.transport.is_closing():
                continue
            cycle = getattr(proto, "cycle", None)
            receiving = conn.their_state is h11.SEND_BODY or (
                conn.their_state is h11.IDLE and (cycle is None or len(conn.trailing_data[0]) > 0)
            )
            if not receiving:
                continue
            marker = (conn.their_state, id(cycle), len(conn.trailing_data[0]))
            previous = self._waiting.get(proto)
            since = previous[1] if previous is not None and previous[0][:2] == marker[:2] else now
            if now - since > self._request_timeout_s:
                proto.transport.close()
                closed += 1
                continue
            waiting[proto] = (marker, since)
        self._waiting = waiting
        if closed:
            log.info("connections closed", extra={"kv": {"listener": self.name, "reason": "request timeout",
                                                         "count": closed, "after_s": self._request_timeout_s}})
        return closed

    async def stop(self, deadline_s: float = 5.0) -> None:
        """Stop accepting, let in-flight requests finish (up to ``deadline_s``), close."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        if not self._started:
            for sock in self._sockets:
                sock.close()
            return
        self._server.should_exit = True
        try:
            await asyncio.wait_for(self._server.shutdown(), timeout=deadline_s + 1.0)
        except asyncio.TimeoutError:
            pass
        for sock in self._sockets:
            sock.close()
