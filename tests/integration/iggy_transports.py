"""The official SDK's transports to one ``headwater serve``: TCP, TLS over TCP, QUIC,
WebSocket, and HTTP once the server has an HTTP listener.

A :class:`Via` is a server plus one transport; ``via.client()`` is an ``IggyClient`` over
it (``IggyClient(TcpConfig | QuicConfig | WebSocketConfig | HttpConfig)``), with the
reconnection that tests want (fail fast, redial at once). The ``tls-tcp`` server runs TLS on
its TCP, WebSocket and Kafka listeners with a test CA's certificate; clients trust the CA.
"""

from __future__ import annotations

import datetime
import socket
from dataclasses import dataclass
from pathlib import Path

import apache_iggy as ig

from hw_server import ServerProcess, free_port
from tls_certs import TestCerts, make_certs

import pytest

TRANSPORTS = ("tcp", "tls-tcp", "quic", "websocket", "http")
BINARY_TRANSPORTS = ("tcp", "tls-tcp", "quic", "websocket")  # those with send_binary_request

# A test runs on the transports its mark names (the ``via`` fixture, indirect); a module's
# default is TCP only.
EVERY_TRANSPORT = pytest.mark.parametrize("via", TRANSPORTS, indirect=True)
EVERY_BINARY_TRANSPORT = pytest.mark.parametrize("via", BINARY_TRANSPORTS, indirect=True)
TCP_ONLY = pytest.mark.parametrize("via", ("tcp",), indirect=True)
# the ``transport`` byte of GET_ME (Iggy's TransportProtocol); TLS is still tcp
TRANSPORT_CODES = {"tcp": 1, "tls-tcp": 1, "quic": 2, "http": 3, "websocket": 4, "wss": 4}

_MS50 = datetime.timedelta(milliseconds=50)
# An eviction the SDK maps to Unauthenticated (reasons 1, 7, 11, 12) makes it redial before it
# reports the error; with the default 5 s cooldown that is slow, so tests redial at once, once.
_RECONNECT = {
    "tcp": ig.TcpReconnectionConfig, "tls-tcp": ig.TcpReconnectionConfig,
    "quic": ig.QuicReconnectionConfig, "websocket": ig.WebSocketReconnectionConfig, "wss": ig.WebSocketReconnectionConfig,
}


def tls_env(certs: TestCerts) -> dict:
    """Environment that turns TLS on for the Iggy TCP, WebSocket and Kafka listeners."""
    env = {}
    for section in ("TCP", "WEBSOCKET", "KAFKA"):
        env[f"HEADWATER_{section}_TLS_ENABLED"] = "true"
        env[f"HEADWATER_{section}_TLS_CERT_FILE"] = str(certs.cert)
        env[f"HEADWATER_{section}_TLS_KEY_FILE"] = str(certs.key)
    return env


def start_server(base: Path, tls: bool = False, env: dict | None = None) -> tuple[ServerProcess, TestCerts | None]:
    """A started server (``tls``: TLS on its TCP, WebSocket and Kafka listeners) and its test certificates."""
    certs = make_certs(base / "certs") if tls else None
    server = ServerProcess(base / "data", free_port(), free_port(), extra_env={**(tls_env(certs) if certs else {}),
                                                                            **(env or {})})
    return server.start(), certs


def has_http_listener(server: ServerProcess) -> bool:
    """True when the server serves HTTP (its log names an ``http`` listener and the port accepts)."""
    if "listener=http" not in server.log() and "listener=iggy-http" not in server.log():
        return False
    try:
        with socket.create_connection(("127.0.0.1", server.http_port), timeout=1):
            return True
    except OSError:
        return False


@dataclass
class Via:
    transport: str
    server: ServerProcess
    certs: TestCerts | None = None

    @property
    def address(self) -> str:
        port = {"quic": self.server.quic_port, "websocket": self.server.websocket_port,
                "wss": self.server.websocket_port, "http": self.server.http_port}.get(self.transport, self.server.tcp_port)
        return f"127.0.0.1:{port}"

    @property
    def transport_code(self) -> int:
        return TRANSPORT_CODES[self.transport]

    def config(self, auto_login=None):
        t = self.transport
        if t == "http":
            return ig.HttpConfig(api_url=f"http://{self.address}")
        kw = {"server_address": self.address, "auto_login": auto_login,
              "reconnection": _RECONNECT[t](max_retries=0, interval=_MS50, reestablish_after=_MS50)}
        if t == "tcp":
            return ig.TcpConfig(**kw)
        if t == "tls-tcp":
            assert self.certs is not None
            return ig.TcpConfig(**kw, tls_enabled=True, tls_domain="localhost", tls_ca_file=str(self.certs.ca))
        if t == "quic":
            return ig.QuicConfig(**kw, validate_certificate=False)  # the server's self-signed certificate
        if t == "wss":
            assert self.certs is not None
            return ig.WebSocketConfig(**kw, tls_enabled=True, tls_domain="localhost", tls_ca_file=str(self.certs.ca))
        return ig.WebSocketConfig(**kw)

    def client(self, auto_login=None) -> ig.IggyClient:
        return ig.IggyClient(self.config(auto_login))

    def connection_string(self, username: str = "iggy", password: str = "iggy", **options) -> str:
        """The SDK's URL for this transport (``iggy+tcp://...?tls=true&...`` and so on);
        ``options`` are added to its query."""
        t = self.transport
        base = f"{username}:{password}@{self.address}"
        if t in ("tls-tcp", "wss"):
            assert self.certs is not None
            options = {"tls": "true", "tls_domain": "localhost", "tls_ca_file": str(self.certs.ca), **options}
        scheme = {"tcp": "tcp", "tls-tcp": "tcp", "quic": "quic", "websocket": "ws", "wss": "ws", "http": "http"}[t]
        query = "&".join(f"{k}={v}" for k, v in options.items())
        return f"iggy+{scheme}://{base}" + (f"?{query}" if query else "")
