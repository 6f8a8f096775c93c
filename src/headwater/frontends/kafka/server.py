"""The Kafka wire-protocol connection: size-prefixed frames in, registry lookups, responses out.

Per connection, one request at a time, as Kafka's broker does (it mutes a
channel while a request is in flight), so responses leave in request order:
read the 4-byte size and check it against ``max_request_size`` *before*
reading the frame; peek ``api_key``/``api_version``; look the API up in the
registry; decode the header (v1, or v2 for flexible versions) and the body
with kio; run the handler; write the response header (v0, or v1 for flexible
versions except ApiVersions) and body. A handler returning None sends
nothing (Produce acks=0).

A handler that parks (JoinGroup, SyncGroup waiting for the rest of the
group; a Fetch long poll) asks ``ctx.peer_gone()``: the connection then
reads the next request's 4-byte size ahead, so that a peer closing the
connection ends the parked request at once (nothing is sent; see
``groups.py``, ``handlers/fetch.py``). A request that arrives early is held
and handled after the parked one, in order.

What closes the connection (and only it): a size below 8 or above the cap,
an API key or version that is not registered (except ApiVersions, answered
in v0 with UNSUPPORTED_VERSION and its own range, as Kafka does), a header
or body that does not decode, a handler raising ``errors.CloseConnection``
(a failed acks=0 Produce), or a handler failing unexpectedly. SASL adds
(``session.Session``, docs/security.md): a request other than ApiVersions and
SASL before authentication when ``authentication_required``, any request after
the session's end (``connections_max_reauth_ms``), and a refused SASL exchange
(answered first, closed ``connection_failed_authentication_delay_ms`` later).
After SaslHandshake v0, frames are bare SASL tokens until the exchange ends.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import struct
import time

from ... import metrics
from ...config import KafkaConfig, parse_address
from ...core import errors as core_errors
from ...core.broker import Broker
from ...core.sasl import AuthenticationFailed
from ..listener import Connection, Limits
from . import handlers  # noqa: F401  (registers every API)
from ...codec.kafka import messages
from ...codec.kafka.framing import SIZE, FrameError, decode_request_header, peek_header, response_prefix
from .errors import CloseConnection
from .groups import KafkaGroups
from .names import Names
from .registry import APIS, ApiKey, Context
from .session import Session

log = logging.getLogger("headwater.kafka")

NODE_ID = 1
_API_VERSIONS_V0_ERROR = struct.Struct(">hihhh")  # error_code, [api_keys] count, key, min, max
UNAUTHENTICATED_MAX_RECEIVE_SIZE = 512 * 1024
"""Kafka's ``sasl.server.max.receive.size`` default: the largest frame read before authentication."""
_BEFORE_AUTH = frozenset((ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE))

# request latency histograms by API key (headwater.metrics): produce and fetch only
_TIMED = {
    int(ApiKey.PRODUCE): metrics.request_histogram("kafka", "tcp", metrics.PRODUCE),
    int(ApiKey.FETCH): metrics.request_histogram("kafka", "tcp", metrics.FETCH),
}


class Close(Exception):
    """Close this connection (logged with the reason)."""


class _Input:
    """A connection's input side: request sizes, read in turn or one ahead while a request is parked."""

    __slots__ = ("reader", "ahead")

    def __init__(self, reader: asyncio.StreamReader):
        self.reader = reader
        self.ahead: asyncio.Future | None = None

    async def next_size(self, conn: Connection) -> bytes:
        if self.ahead is not None:
            ahead, self.ahead = self.ahead, None
            conn.waiting()
            size = await ahead
            conn.receiving()
            return size
        return await conn.receive(self.reader, 4)

    def read_ahead(self) -> asyncio.Future:
        """The next request's size, being read now: fails with IncompleteReadError once the peer closes."""
        if self.ahead is None:
            self.ahead = asyncio.ensure_future(self.reader.readexactly(4))
        return self.ahead


class KafkaFrontend:
    """State shared by every Kafka connection: the broker, the config, name resolution, the groups."""

    def __init__(self, broker: Broker, config: KafkaConfig):
        self.broker = broker
        self.config = config
        self.names = Names(broker, config.stream)
        host, port = parse_address(config.advertised_address or config.address)
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        self.advertised_host = host
        self.advertised_port = port
        self.node_id = NODE_ID
        self.groups = KafkaGroups(config)
        broker.authorizer.kafka_stream = config.stream
        self.mechanisms = tuple(m for m in config.sasl_enabled_mechanisms.split(",") if m)
        broker.transactions  # noqa: B018 - loaded now: boot completes or aborts transactions a crash left

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: Connection) -> None:
        max_size = self.config.max_request_size
        source = _Input(reader)
        session = Session(conn.peer.rpartition(":")[0] or conn.peer)
        try:
            await self._loop(source, writer, conn, max_size, session)
        finally:
            ahead = source.ahead
            if ahead is not None:
                if not ahead.done():
                    ahead.cancel()
                elif not ahead.cancelled():
                    ahead.exception()  # retrieved: the peer closed while we were leaving anyway

    async def _loop(
        self, source: _Input, writer: asyncio.StreamWriter, conn: Connection, max_size: int, session: Session
    ) -> None:
        reader = source.reader
        while not conn.closing.is_set():
            head = await source.next_size(conn)
            (size,) = SIZE.unpack(head)
            raw = session.raw_tokens
            # before authentication on a listener that requires it, Kafka's sasl.server.max.receive.size
            # (512 KiB) bounds a frame: an unauthenticated peer cannot make the server read 100 MiB
            limit = max_size if session.authenticated or not self.config.authentication_required else min(
                max_size, UNAUTHENTICATED_MAX_RECEIVE_SIZE)
            if size < (0 if raw else 8) or size > limit:
                log.info("request size refused", extra={"kv": {"peer": conn.peer, "size": size, "max": limit}})
                return
            frame = await reader.readexactly(size)
            conn.handling()
            try:
                if session.expired():
                    raise Close("SASL session expired (connections_max_reauth_ms) without re-authentication")
                if raw:
                    out = await self._raw_token(frame, session)
                else:
                    out = await self._handle(frame, conn, source, session)
            except Close as e:
                log.info("connection closed", extra={"kv": {"peer": conn.peer, "reason": str(e)}})
                return
            await conn.reply(writer, out)
            if session.close_after is not None:
                log.info("connection closed", extra={"kv": {"peer": conn.peer, "reason": session.close_after}})
                await conn.drain(writer)
                # KIP-306: a refused client reads the answer before the connection goes (clients that
                # see the close first report a lost connection instead of the authentication error)
                await asyncio.sleep(self.config.connection_failed_authentication_delay_ms / 1000)
                return

    async def _raw_token(self, token: bytes, session: Session) -> list[bytes]:
        """A bare SASL token after SaslHandshake v0: the reply token goes back size-prefixed, no header.
        A failure closes the connection without a reply (the v0 protocol has no way to say why)."""
        try:
            reply, _ = await session.step(token, self.config.connections_max_reauth_ms)
        except AuthenticationFailed as e:
            raise Close(f"SASL authentication failed: {e}") from e
        return [SIZE.pack(len(reply)), reply]

    async def _handle(self, frame: bytes, conn: Connection, source: _Input, session: Session) -> list[bytes] | None:
        try:
            api_key, version, correlation_id = peek_header(frame)
        except FrameError as e:
            raise Close(str(e)) from e
        if not session.authenticated and self.config.authentication_required and api_key not in _BEFORE_AUTH:
            raise Close(f"API {api_key} before SASL authentication (authentication_required)")
        session.refresh(self.broker.users)
        api = APIS.get(api_key)
        if api is None or not api.min_version <= version <= api.max_version:
            if api_key == ApiKey.API_VERSIONS and api is not None:
                body = _API_VERSIONS_V0_ERROR.pack(35, 1, api.key, api.min_version, api.max_version)
                return [response_prefix(correlation_id, len(body), False), body]
            raise Close(f"unsupported API {api_key} v{version}")
        schema = messages.has_schema(api_key, version)
        flexible = schema and messages.is_flexible(api_key, version)
        try:
            header, pos = decode_request_header(frame, flexible)
            if schema:
                request = messages.decode(messages.request_class(api_key, version), frame, pos)
            else:
                request = memoryview(frame)[pos:]
        except Exception as e:  # FrameError, or kio's SerialError family
            raise Close(f"undecodable request {api_key} v{version}: {e}") from e
        ctx = Context(
            self.broker,
            self,
            peer=conn.peer,
            api_key=api_key,
            version=version,
            correlation_id=correlation_id,
            client_id=header.client_id,
            closing=conn.closing,
            peer_gone=source.read_ahead,
            session=session,
        )
        timed = _TIMED.get(api_key)
        t0 = time.perf_counter()
        try:
            result = api.handler(ctx, request)
            if inspect.isawaitable(result):
                result = await result
            if timed is not None:
                timed.observe(time.perf_counter() - t0)
        except CloseConnection as e:
            raise Close(str(e)) from e
        except core_errors.StorageWriteFailed as e:
            # a write the filesystem refused outside a per-partition answer: the episode is
            # logged once by core.storage_health; the client reconnects and retries
            raise Close(f"storage write failed: {e}") from e
        except Exception as e:
            log.exception("handler failed", extra={"kv": {"api_key": api_key, "version": version}})
            raise Close(f"handler failed: {e!r}") from e
        if result is None:
            return None
        body = bytes(result) if isinstance(result, (bytes, bytearray, memoryview)) else messages.encode(result)
        flexible_response = flexible and api_key != ApiKey.API_VERSIONS
        return [response_prefix(correlation_id, len(body), flexible_response), body]


def make_kafka_serve(broker: Broker, config: KafkaConfig, bound_port: int | None = None):
    """The connection coroutine of a Kafka listener. ``bound_port``: the port the listener
    really bound; it is what Metadata, FindCoordinator and DescribeCluster advertise when
    no ``advertised_address`` is set and ``address`` asks for port 0 (any free port)."""
    frontend = KafkaFrontend(broker, config)
    if bound_port is not None and not config.advertised_address and frontend.advertised_port == 0:
        frontend.advertised_port = bound_port
    return frontend.serve


def kafka_limits(config: KafkaConfig) -> Limits:
    """The Kafka listener's connection limits from ``[kafka]`` (idle: ``connections_max_idle_ms``,
    Kafka's ``connections.max.idle.ms``)."""
    return Limits(
        max_connections=config.max_connections,
        max_buffer_bytes=config.max_connection_buffer_bytes,
        idle_timeout_s=config.connections_max_idle_ms / 1000,
        frame_receive_timeout_s=config.frame_receive_timeout_s,
        send_stall_timeout_s=config.send_stall_timeout_s,
    )
