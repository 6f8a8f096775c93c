"""The Kafka wire-protocol connection: size-prefixed frames in, registry lookups, responses out.

Responses leave in request order, as Kafka guarantees per connection. A
Produce with acks 1 or -1 may be answered ahead (``_Pipeline``): its batches
are appended as soon as its frame is in, and while it waits for its
fdatasync the connection reads and appends the next ones (librdkafka sends up
to 5 before reading an answer), each answer written after the one before it.
Every other request waits until the requests before it are answered and runs
alone, as Kafka's broker does (it mutes a channel while a request is in
flight). Per request: read the 4-byte size and check it against ``max_request_size`` *before*
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
from collections import deque
from dataclasses import dataclass
from typing import Any, Awaitable
import logging
import struct
import time

from ... import metrics
from ...config import KafkaConfig, parse_address
from ...core import errors as core_errors
from ...core.broker import Broker
from ...core.sasl import AuthenticationFailed
from ..listener import Connection, Limits
from . import authz, configs  # noqa: F401  (shared by most handlers: loaded now, so a first request imports only its own module)
from . import handlers
from ...codec.kafka import messages
from ...codec.kafka.produce import parse_request as parse_produce_request
from ...codec.kafka.framing import SIZE, FrameError, decode_request_header, peek_header, response_prefix
from .errors import CloseConnection
from .groups import KafkaGroups
from .names import Names
from .registry import APIS, Api, ApiKey, Context
from .session import Session

log = logging.getLogger("headwater.kafka")

NODE_ID = 1
_API_VERSIONS_V0_ERROR = struct.Struct(">hihhh")  # error_code, [api_keys] count, key, min, max
UNAUTHENTICATED_MAX_RECEIVE_SIZE = 512 * 1024
"""Kafka's ``sasl.server.max.receive.size`` default: the largest frame read before authentication."""
PIPELINE_DEPTH = 8
"""Produce requests of one connection answered ahead at most (librdkafka's default
``max.in.flight.requests.per.connection`` is 5; see ``_Pipeline``)."""
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


IN_PLACE_MAX = 2 << 20
"""Request frames up to this many bytes are received in place by the listener's FrameReader (which
allocates the whole frame when its size arrives: one kernel copy, no staging); larger ones are read
1 MiB at a time and joined, so a connection's memory grows with the bytes that came, as with
asyncio's StreamReader (2 x its 1 MiB limit), not with the size a peer claims (up to
``max_request_size``, 100 MiB by default, before any authentication unless it is required)."""
_CHUNK = 1 << 20


async def _read_frame_bytes(reader, size: int) -> bytes:
    """``size`` bytes as ``bytes``; raises IncompleteReadError when the peer closes first."""
    if size <= _CHUNK:
        return await reader.readexactly(size)
    parts = []
    left = size
    while left:
        part = await reader.readexactly(min(left, _CHUNK))
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


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
        task = asyncio.current_task()
        pipeline = _Pipeline(writer, conn, task)
        try:
            await self._loop(source, writer, conn, max_size, session, pipeline)
            await pipeline.settled()  # shutting down: the requests in hand are answered
        except asyncio.CancelledError:
            if pipeline.closed and pipeline.ended_us and not conn.closing.is_set():
                task.uncancel()  # a request answered ahead ended the connection (see _Pipeline._answer)
                return
            # the listener cancels a connection that waits for its next request at shutdown:
            # Produce requests answered ahead are appended, so their answers are still written
            if conn.closing.is_set():
                await pipeline.settled()
            raise
        finally:
            pipeline.abandon()
            ahead = source.ahead
            if ahead is not None:
                if not ahead.done():
                    ahead.cancel()
                    # its read must be over before the listener's close reads the rest of the input
                    await asyncio.wait((ahead,))
                if not ahead.cancelled():
                    ahead.exception()  # retrieved: the peer closed while we were leaving anyway

    async def _loop(
        self, source: _Input, writer: asyncio.StreamWriter, conn: Connection, max_size: int, session: Session,
        pipeline: _Pipeline,
    ) -> None:
        reader = source.reader
        read_frame = getattr(reader, "read_frame", None)  # a FrameReader: a frame received in place
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
            frame = await (read_frame(size) if read_frame is not None and not raw and size <= IN_PLACE_MAX
                           else _read_frame_bytes(reader, size))
            conn.handling()
            if pipeline.failed():
                return  # a request answered ahead closed the connection (logged there)
            try:
                if session.expired():
                    raise Close("SASL session expired (connections_max_reauth_ms) without re-authentication")
                request = None if raw else self._decode(frame, session)
                if request is not None and request.pipelined:
                    if not await pipeline.room():
                        return
                    out = self._start(request, conn, source, session)
                    if inspect.isawaitable(out) or pipeline.busy():
                        pipeline.push(self._finish(request, out))
                        continue
                    out = self._handle(request, out)
                else:
                    # anything else waits until every request before it is answered, then runs alone
                    if not await pipeline.settled():
                        return
                    if request is None:
                        out = await self._raw_token(frame, session)
                    else:
                        out = await self._finish(request, self._start(request, conn, source, session))
            except Close as e:
                if await pipeline.settled():  # the requests before this one are answered first
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

    def _decode(self, frame: bytes | bytearray, session: Session) -> _Request:
        """Check and decode one request frame (no handler runs yet). Raises Close."""
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
                return _Request(None, api_key, version, correlation_id, False, None,
                                [response_prefix(correlation_id, len(body), False), body])
            raise Close(f"unsupported API {api_key} v{version}")
        schema = messages.has_schema(api_key, version)
        flexible = schema and messages.is_flexible(api_key, version)
        try:
            header, pos = decode_request_header(frame, flexible)
            # Produce, the hot path, is read straight from the frame when it can be (records not copied)
            body = parse_produce_request(frame, pos, version) if api_key == ApiKey.PRODUCE else None
            if body is None and type(frame) is bytearray:
                frame = bytes(frame)  # (a FrameReader's frame) every other request is decoded from bytes, as before
            if body is None and schema:
                body = messages.decode(messages.request_class(api_key, version), frame, pos)
            elif body is None:
                body = memoryview(frame)[pos:]
        except Exception as e:  # FrameError, or kio's SerialError family
            raise Close(f"undecodable request {api_key} v{version}: {e}") from e
        request = _Request(api, api_key, version, correlation_id, flexible, header.client_id, body)
        # a Produce that is answered (acks 1 / -1) may be answered ahead: see _Pipeline
        request.pipelined = api_key == ApiKey.PRODUCE and schema and body.acks != 0
        return request

    def _start(self, request: _Request, conn: Connection, source: _Input, session: Session):
        """Run the request's handler up to its first wait: its result, or an awaitable of it.
        A Produce's appends are all made here, so appends follow the order of the requests."""
        if request.api is None:
            return request.body
        ctx = Context(
            self.broker,
            self,
            peer=conn.peer,
            api_key=request.api_key,
            version=request.version,
            correlation_id=request.correlation_id,
            client_id=request.client_id,
            closing=conn.closing,
            peer_gone=source.read_ahead,
            session=session,
        )
        request.t0 = time.perf_counter()
        body, request.body = request.body, None  # a Produce body holds views of the frame: not kept
        try:
            return handlers.handler(request.api)(ctx, body)
        except Exception as e:
            raise _handler_failed(request, e) from e

    async def _finish(self, request: _Request, result) -> list[bytes] | None:
        """Wait for the handler's result and encode the response frame. Raises Close."""
        if request.api is None:
            return result
        try:
            if inspect.isawaitable(result):
                result = await result
        except Exception as e:
            raise _handler_failed(request, e) from e
        return self._handle(request, result)

    def _handle(self, request: _Request, result) -> list[bytes] | None:
        """The response frame (size, header, body) of a handler's result; None sends nothing."""
        api_key, correlation_id, flexible = request.api_key, request.correlation_id, request.flexible
        timed = _TIMED.get(api_key)
        if timed is not None:
            timed.observe(time.perf_counter() - request.t0)
        if result is None:
            return None
        body = bytes(result) if isinstance(result, (bytes, bytearray, memoryview)) else messages.encode(result)
        flexible_response = flexible and api_key != ApiKey.API_VERSIONS
        return [response_prefix(correlation_id, len(body), flexible_response), body]


@dataclass(slots=True)
class _Request:
    """One decoded request: its API, header fields and body (the kio entity, or the raw body bytes;
    an already-built answer when ``api`` is None)."""

    api: Api | None
    api_key: int
    version: int
    correlation_id: int
    flexible: bool
    client_id: str | None
    body: Any
    pipelined: bool = False
    t0: float = 0.0


def _handler_failed(request: _Request, e: Exception) -> Close:
    """The Close for a handler that raised (CloseConnection, a refused write, or a failure)."""
    if isinstance(e, Close):
        return e
    if isinstance(e, CloseConnection):
        return Close(str(e))
    if isinstance(e, core_errors.StorageWriteFailed):
        # a write the filesystem refused outside a per-partition answer: the episode is
        # logged once by core.storage_health; the client reconnects and retries
        return Close(f"storage write failed: {e}")
    log.error("handler failed", exc_info=e, extra={"kv": {"api_key": request.api_key, "version": request.version}})
    return Close(f"handler failed: {e!r}")


class _Pipeline:
    """Produce requests answered ahead, so a connection keeps reading while a Produce waits.

    librdkafka, the Java client and aiokafka send up to ``max.in.flight.requests.per.connection``
    (5) requests before reading an answer. A Produce with acks 1 or -1 is decoded and its
    batches appended as soon as its frame is in (appends keep the order of the requests); what
    it then waits for (a group-commit fdatasync with ``enforce_fsync``) runs in a task, and the
    connection reads the next frame meanwhile. Each task writes its response only after the
    task before it has written its own, so responses leave in request order, as Kafka
    guarantees per connection. At most ``PIPELINE_DEPTH`` are pending; the next frame is then
    read only once the oldest is answered (with the transport's write buffer bound, the
    backpressure). Every other request (and an acks=0 Produce, whose failure closes the
    connection, and SASL tokens) waits until every request before it is answered and runs
    alone, as before. A pipelined request that closes the connection (a failed handler, a
    peer gone) ends the connection after the answers before it; the requests read after it
    get no answer (their batches may have been appended, as with any connection lost before
    the answer: the producer retries, idempotent producers without duplicates).
    """

    __slots__ = ("writer", "conn", "tasks", "closed", "main", "ended_us")

    def __init__(self, writer: asyncio.StreamWriter, conn: Connection, main: asyncio.Task | None = None):
        self.writer = writer
        self.conn = conn
        self.tasks: deque[asyncio.Task] = deque()
        self.closed = False  # a request answered ahead closed the connection
        self.main = main  # the connection's coroutine (cancelled when an answer ends the connection)
        self.ended_us = False  # an answer cancelled ``main`` to end the connection

    def _prune(self) -> None:
        tasks = self.tasks
        while tasks and tasks[0].done():
            if not _succeeded(tasks.popleft()):
                self.closed = True

    def busy(self) -> bool:
        """Whether a request before the next one still waits for its answer to be written."""
        self._prune()
        return bool(self.tasks)

    def failed(self) -> bool:
        """Whether a request answered ahead closed the connection."""
        self._prune()
        return self.closed

    def push(self, answer: Awaitable[list[bytes] | None]) -> None:
        prev = self.tasks[-1] if self.tasks else None
        self.tasks.append(asyncio.ensure_future(self._answer(prev, answer)))

    async def room(self) -> bool:
        """Wait until fewer than PIPELINE_DEPTH requests are pending; False once one closed the connection."""
        self._prune()
        while len(self.tasks) >= PIPELINE_DEPTH and not self.closed:
            await asyncio.wait((self.tasks[0],))
            self._prune()
        return not self.closed

    async def settled(self) -> bool:
        """Wait until every pending request is answered; False when one closed the connection."""
        if self.tasks and not self.closed:
            await asyncio.wait((self.tasks[-1],))  # each task ends after the one before it
        self._prune()
        return not self.closed

    def abandon(self) -> None:
        """The connection ends: pending answers are not written (their tasks end by themselves)."""
        self.tasks.clear()
        self.closed = True

    async def _answer(self, prev: asyncio.Task | None, answer: Awaitable[list[bytes] | None]) -> bool:
        """Finish one request, wait for the answer before it, write this one: False closes the connection."""
        reason = None
        try:
            out = await answer
        except Close as e:
            out, reason = None, str(e)
        except Exception as e:  # a response that does not encode
            log.error("handler failed", exc_info=e)
            out, reason = None, f"handler failed: {e!r}"
        if prev is not None:
            await asyncio.wait((prev,))
            if not _succeeded(prev):
                return False
        if self.closed:
            return False
        conn, writer = self.conn, self.writer
        if reason is not None:
            log.info("connection closed", extra={"kv": {"peer": conn.peer, "reason": reason}})
            # the connection's coroutine ends now (it may be waiting for the next request); the
            # listener then closes the connection gracefully: what is queued leaves first, the
            # input the peer sent meanwhile is read and dropped (no reset)
            self.closed = True
            main = self.main
            if main is not None and not main.done() and not self.ended_us:
                self.ended_us = True
                main.cancel()
            return False
        try:
            await conn.reply(writer, out)
        except (ConnectionError, OSError):
            return False
        return True


def _succeeded(task: asyncio.Task) -> bool:
    return not task.cancelled() and task.exception() is None and task.result()


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
