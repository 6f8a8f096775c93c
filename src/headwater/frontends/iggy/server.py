"""The Iggy binary-protocol connection: frames in, session checks, registry lookups, replies out.

Per connection: read the 256-byte header and check ``size`` against the
configured maximum (and the ``command`` byte) *before* reading the body;
decode; ask the session rules (``session.py``) what the request is and what
to do; deduplicate metadata operations; run the handler; write the reply.
Replies go out in request order. A broken frame or a refused login gets an
Eviction frame and closes this connection only; a bad request gets its Iggy
error code in the reply ``status`` (pre-commit, empty body) and the
connection goes on.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import struct
import time

from ... import metrics
from ...codec.errors import CodecError
from ...codec.iggy import framing, version
from ...codec.iggy.codes import COMMAND_TO_OPERATION, Command, ConsumerKind, HeaderCommand, Operation
from ...codec.iggy.commands import COMMANDS
from ...codec.iggy.commands.messages import (
    encode_send_reply_to_head,
    poll_messages_fields,
    send_messages_batch,
    send_messages_fields,
)
from ...codec.iggy.errors import InvalidOperation
from ...config import TcpConfig
from ...core import errors as core_errors
from ...core.broker import Broker
from ...core.users import USER_ACTIVE
from .. import corrupt
from ..frames import FrameReader
from ..listener import IDLE, Connection, Limits
from . import handlers  # noqa: F401  (registers every handler)
from .errors import code_for
from .handlers.messages import (
    append_batch,
    append_routed,
    poll_batches,
    poll_route,
    route_stamp,
    poll_routed,
    same_stamp,
    send_route,
)
from .registry import HANDLERS, Context
from .session import Action, ClientTable, Event, State, Verdict, classify, step

log = logging.getLogger("headwater.iggy")

_HEADER = framing.HEADER_SIZE
_SIZE = struct.Struct("<I")
_CLIENT = struct.Struct("<QQ")
_SESSION = struct.Struct("<Q")  # the request header's session at 184
_METADATA_OPS = range(128, 160)
_REPLICATED_CODES = frozenset(int(c) for c in COMMAND_TO_OPERATION)
_KNOWN_CODES = frozenset(int(c) for c in Command)
_UNAUTHENTICATED = 40
_INVALID_COMMAND = 3
_FEATURE_UNAVAILABLE = 5
_REQUEST_ALREADY_APPLIED = 59
_OPERATION_OFFSET = 176  # the request header's operation byte (framing: 128 + client u128, checksum u128, ...)
_SEND_MESSAGES_OPERATION = int(COMMAND_TO_OPERATION[Command.SEND_MESSAGES])  # (a write rides only its own)
# request latency histograms by command code (headwater.metrics): produce and fetch only
_SEND_CODE = int(Command.SEND_MESSAGES)
if framing.result_prefix(_SEND_MESSAGES_OPERATION):  # (encode_send_reply_to_head writes no result prefix)
    raise ImportError("SendMessages replies became result-framed: the fast path's reply encoding must follow")
_perf_counter = time.perf_counter
_SEND_TIMED = metrics.request_histogram("iggy", "tcp", metrics.PRODUCE)
_READ_OPERATION = int(Operation.NON_REPLICATED)  # reads carry their command code at 196
_POLL_CODE = int(Command.POLL_MESSAGES)
_POLL_TIMED = metrics.request_histogram("iggy", "tcp", metrics.FETCH)
_TIMED = {_SEND_CODE: _SEND_TIMED, _POLL_CODE: _POLL_TIMED}
_CODE = struct.Struct("<I")  # the request header's command code at framing.CODE_OFFSET
_READ_AHEAD = 512  # body bytes a header's receive may stage (see IggyFrontend.serve)
# a PollMessages body ends in the strategy's kind (u8) and value (u64), count (u32), auto_commit (u8);
# the bytes before them (consumer, stream, topic, partition) name the poll's route
_POLL_END = struct.Struct("<BQIB")
_POLL_ROUTES = 8  # routes a connection keeps (IggyFrontend._poll_body)


def _client_of(head: bytes) -> int:
    lo, hi = _CLIENT.unpack_from(head, 128)
    return lo | (hi << 64)


# The largest frame read before a connection has logged in (bytes, header included).
# Login, LoginWithPersonalAccessToken and Ping are far smaller; anything bigger is
# evicted as a frame-size violation before its body is read (docs/gaps.md).
PRE_LOGIN_MAX_FRAME_SIZE = 64 * 1024


class IggyFrontend:
    """State shared by all Iggy connections: the broker, the client table, limits."""

    def __init__(self, broker: Broker, config: TcpConfig, data_dir: str = "."):
        self.broker = broker
        self.config = config
        self._hashing = asyncio.Semaphore(2)  # concurrent Argon2id verifications
        self.clients = ClientTable(config.session_reply_cache)
        self.data_dir = data_dir
        # transport -> bound port, for GET_CLUSTER_METADATA (the app fills it once its listeners listen)
        self.node_ports: dict[str, int] = {}
        # SendMessages and PollMessages of a logged-in session skip the generic decode (see
        # _send_ready, _poll_ready); False sends every such request the full way (the tests
        # compare the two)
        self.send_fast_path = True
        self.poll_fast_path = True

    def session(self, peer: str, transport: str) -> "IggySession":
        """A new connection's session (``transport``: "tcp", "quic" or "websocket"; TLS is
        still "tcp" as Iggy reports it). The caller must :meth:`IggySession.close` it."""
        return IggySession(self, peer, transport)

    async def serve(self, reader: asyncio.StreamReader | FrameReader, writer: asyncio.StreamWriter,
                    conn: Connection) -> None:
        """One TCP (or TLS-over-TCP) connection: a byte stream of whole frames. With a
        :class:`FrameReader` a SendMessages body is received straight into its own bytearray."""
        session = self.session(conn.peer, "tcp")

        def evict_stale() -> None:  # the listener's idle timeout (or the heartbeat allowance) ran out
            writer.write(session.evict_stale())

        conn.on_idle = evict_stale
        read_frame = getattr(reader, "read_frame", None)  # a FrameReader (framed listener)
        # a FrameReader's header receive may bring a small body along (a poll's, ~40 bytes):
        # its read then needs no second wake-up and receive (a SendMessages body is received in
        # place after the few bytes staged with its header)
        ahead = _READ_AHEAD if read_frame is not None else 0
        # a FrameReader serves SendMessages and PollMessages on the fast path from its protocol
        # callbacks while this coroutine waits between requests (_InlineRequests)
        inline = None
        if read_frame is not None and self.config.serve_inline:
            inline = _InlineRequests(self, session, conn, writer)
        try:
            while not conn.closing.is_set():
                if inline is not None:
                    conn.waiting()
                    try:
                        handoff = await reader.serve_inline(inline, ahead)  # type: ignore[union-attr]
                    except asyncio.CancelledError:
                        return  # shutdown while idle between requests (or mid-frame): close
                    if handoff is not None:
                        if not await inline.finish(handoff):
                            return
                        continue
                    # the stream ended, or a frame the fast path does not take is staged: read it here
                try:
                    head = await conn.receive(reader, _HEADER, ahead)
                except asyncio.CancelledError:
                    return  # shutdown while idle between requests: nothing is lost, just close
                refusal = session.check_head(head)
                if refusal is not None:  # refused before a single body byte is read or buffered
                    writer.write(refusal)
                    await conn.drain(writer)
                    return
                size = _SIZE.unpack_from(head, framing.SIZE_OFFSET)[0]
                if size <= _HEADER:
                    body = b""
                elif read_frame is not None and head[_OPERATION_OFFSET] == _SEND_MESSAGES_OPERATION:
                    body = await read_frame(size - _HEADER)  # received in place, stamped in place
                else:
                    body = await reader.readexactly(size - _HEADER)
                conn.handling()
                out = await session.handle(head, body)
                await conn.reply(writer, out)
                if session.closed:  # evicted: the Eviction frame leaves, then the connection closes
                    await conn.drain(writer)
                    return
        finally:
            session.close()

    # ------------------------------------------------------------------ one request
    def _evict(self, cs: "_ConnState", client: int, event: Event, window: tuple[int, int] = (0, 0)) -> bytes:
        outcome = step(cs.state, event)
        cs.state = outcome.next_state
        assert outcome.action is Action.EVICT and outcome.reason is not None
        return framing.encode_eviction(client, outcome.reason, *window)

    async def _handle(self, ctx: Context, cs: "_ConnState", head: bytes, body: bytes):
        operation = head[_OPERATION_OFFSET]
        if operation == _SEND_MESSAGES_OPERATION:
            if self.send_fast_path and self._send_ready(ctx, cs, head):
                fields = send_messages_fields(body)
                if fields is not None:
                    return await self._send(ctx, cs, head, fields)
        elif operation == _READ_OPERATION and self.poll_fast_path and self._poll_ready(ctx, cs, head):
            out = self._poll_body(ctx, cs, head, body)
            if out is not None:
                return out if isinstance(out, (list, bytes)) else await out
        try:
            header = framing.decode_request_header(head)
        except InvalidOperation as e:
            return self._evict(cs, e.client, Event.FRAME_OPERATION)
        except CodecError:
            return self._evict(cs, _client_of(head), Event.FRAME_COMMAND)
        ctx.header = header
        if header.operation is Operation.REGISTER:
            return await self._login(ctx, cs, header, body)

        user_alive = self._sync_user(ctx)
        event = classify(
            cs.state,
            header.operation,
            header.command_code,
            header.client,
            header.session,
            bound_client=cs.client,
            bound_epoch=cs.epoch,
            current_epoch=self.clients.epoch(cs.client) if cs.client is not None else None,
            user_alive=user_alive,
        )
        outcome = step(cs.state, event)
        if outcome.action is Action.EVICT:
            log.info("session evicted", extra={"kv": {"client_id": ctx.client.id, "event": event.value}})
            return self._evict(cs, header.client, event)
        if outcome.action is Action.DENY:
            return framing.encode_reply(header, b"", status=_UNAUTHENTICATED)
        op = cs.epoch or 0
        code = header.command_code
        if header.operation is Operation.NON_REPLICATED and code in _REPLICATED_CODES:
            # a write must ride its own operation (dedup, result framing); never a read's
            return framing.encode_reply(header, b"", status=_INVALID_COMMAND, op=op)

        # --- metadata deduplication: (client, request) -> cached reply ---
        is_metadata = int(header.operation) in _METADATA_OPS
        if is_metadata:
            verdict, cached = self.clients.check_request(header.client, header.request, header.request_checksum)
            if verdict is Verdict.CACHED:
                status, reply_body = cached  # type: ignore[misc]
                return framing.encode_reply(header, reply_body, status=status, op=op)
            if verdict is Verdict.STALE:
                return framing.encode_reply(header, b"", status=_REQUEST_ALREADY_APPLIED, op=op)

        timed = _TIMED.get(code)
        if timed is None:
            status, payload = await self._dispatch(ctx, code, body)
        else:
            t0 = time.perf_counter()
            status, payload = await self._dispatch(ctx, code, body)
            timed.observe(time.perf_counter() - t0)
        if event is Event.LOGOUT and status == 0:
            cs.state = outcome.next_state
            if cs.client is not None and cs.epoch is not None:
                self.clients.forget(cs.client, cs.epoch)
            cs.client = cs.epoch = None
        if status:
            if is_metadata:
                self.clients.remember(header.client, header.request, header.request_checksum, status, b"")
            return framing.encode_reply(header, b"", status=status, op=op)
        if isinstance(payload, list):  # poll: prefix + stored batch buffers, never copied
            length = sum(len(b) for b in payload)
            return [framing.reply_header_for(header, length, op=op), *payload]
        reply_body = framing.reply_body(header.operation, payload)
        if is_metadata:
            self.clients.remember(header.client, header.request, header.request_checksum, 0, reply_body)
        return framing.encode_reply(header, reply_body, op=op)

    def _sync_user(self, ctx: Context) -> bool:
        """Pick up changes to the session's user (permissions); False when it is gone or inactive."""
        if ctx.user is None:
            return True
        current = self.broker.users.users.get(ctx.user.id)
        if current is None or current.status != USER_ACTIVE:
            return False
        if current is not ctx.user:
            ctx.login(current)
        return True

    async def _dispatch(self, ctx: Context, code: int, body: bytes) -> tuple[int, object]:
        handler = HANDLERS.get(code)
        if handler is None:
            return (_FEATURE_UNAVAILABLE if code in _KNOWN_CODES else _INVALID_COMMAND), b""
        try:
            request = COMMANDS[Command(code)].decode(body)
            result = handler(ctx, request)
            if inspect.isawaitable(result):
                result = await result
            return 0, result
        except Exception as e:
            return self._refusal(code, e), b""

    def _refusal(self, code: int, e: Exception) -> int:
        """The Iggy status for a request of command ``code`` that raised ``e`` (logged)."""
        if isinstance(e, core_errors.CorruptData):
            # stored data failed verification: the read is refused, and an operator must hear of it
            # (once a minute per partition: a consumer polling the damage in a loop does not flood the log)
            corrupt.report(e, "iggy", code=code)
            return code_for(e)
        if isinstance(e, core_errors.BrokerError):
            log.debug("request refused", extra={"kv": {"code": code, "error": str(e)}})
            return code_for(e)
        if isinstance(e, CodecError):
            log.debug("request undecodable", extra={"kv": {"code": code, "error": str(e)}})
            return e.code
        log.error("handler failed", exc_info=e, extra={"kv": {"code": code}})
        return 1

    # ------------------------------------------------------------------ SendMessages, PollMessages fast paths
    def _session_live(self, ctx: Context, cs: "_ConnState", head: bytes) -> bool:
        """Whether ``head`` is a well-formed request header on an authenticated connection whose
        session the full path would serve: its epoch still the client id's current one (not
        fenced), its user unchanged and active. Checked on every request, from live state: a
        fence, a logout, a deleted/deactivated user or new permissions send the request the
        full way (which evicts, denies or picks up the new permissions)."""
        if cs.state is not State.AUTHENTICATED or len(head) != _HEADER:
            return False
        if head[framing.COMMAND_OFFSET] != HeaderCommand.REQUEST or _SIZE.unpack_from(head, framing.SIZE_OFFSET)[0] < _HEADER:
            return False
        return self._still_live(ctx, cs)

    def _still_live(self, ctx: Context, cs: "_ConnState") -> bool:
        """The live-state half of :meth:`_session_live` (authenticated, epoch current, user
        unchanged and active), for a header that passed the whole check when it arrived: what
        the header says cannot change while its body comes in, the session can."""
        if cs.state is not State.AUTHENTICATED:
            return False
        epoch = cs.epoch
        if epoch is None or self.clients.epoch(cs.client) != epoch:
            return False
        user = ctx.user
        return user is not None and user.status == USER_ACTIVE and self.broker.users.users.get(user.id) is user

    def _send_ready(self, ctx: Context, cs: "_ConnState", head: bytes) -> bool:
        """Whether ``head`` is a SendMessages header that the full path would serve as a WRITE:
        :meth:`_session_live`, and the header carries this connection's client id and session."""
        return (
            self._session_live(ctx, cs, head)
            and _SESSION.unpack_from(head, 184)[0] == cs.epoch
            and _client_of(head) == cs.client
        )

    def _poll_ready(self, ctx: Context, cs: "_ConnState", head: bytes) -> bool:
        """Whether ``head`` (a NonReplicated operation) is a PollMessages header that the full
        path would serve as a READ: the command code is 100 and :meth:`_session_live` (reads
        are sessionless in Iggy: the header's client id and session are not checked)."""
        return _CODE.unpack_from(head, framing.CODE_OFFSET)[0] == _POLL_CODE and self._session_live(ctx, cs, head)

    def _poll_body(self, ctx: Context, cs: "_ConnState", head: bytes, body):
        """Serve a PollMessages that :meth:`_poll_ready` passed, from its raw ``body``: what
        :meth:`_poll` returns, or None when ``poll_messages_fields`` does not read the body (the
        full path answers it then).

        A single consumer's poll keeps its route (:func:`.handlers.messages.poll_route`: topic,
        partition, permission, consumer key) under the body's bytes before the strategy,
        ``cs.polls``: a later poll of the same bytes reads straight from that partition while
        :func:`.handlers.messages.route_stamp` is the same and the topic still holds the
        partition, with the same reply, status and metrics as resolving it again."""
        size = len(body)
        routes = cs.polls
        if routes and size > _POLL_END.size:
            at = size - _POLL_END.size
            route = routes.get(bytes(body[:at]))
            if route is not None:
                strategy, value, count, auto_commit = _POLL_END.unpack_from(body, at)
                t, p = route[1], route[2]
                if (1 <= strategy <= 5 and same_stamp(route[0], route_stamp(ctx))
                        and t.partitions.get(p.id) is p):
                    return self._poll_reading(ctx, cs, head, route, strategy, value, count, auto_commit != 0)
        fields = poll_messages_fields(body)
        if fields is None:
            return None
        return self._poll(ctx, cs, head, fields, body)

    def _poll(self, ctx: Context, cs: "_ConnState", head: bytes, fields, body=None):
        """Serve a PollMessages that :meth:`_poll_ready` passed and whose body
        ``poll_messages_fields`` read: the same reply bytes, status and metrics as the full
        path (the reply header, the 16-byte prefix, the stored batches as they were read).
        Returns the reply (bytes or a list of buffers), or, when the bytes to return are not
        in the page cache, a coroutine that reads them in off the event loop and returns it.
        ``body`` given (the raw body ``fields`` came from): a single consumer's route is kept
        in ``cs.polls`` for :meth:`_poll_body`."""
        op = cs.epoch or 0
        ctx.header = None  # (the full path's decoded header: not built here, no handler reads it)
        t0 = time.perf_counter()
        try:
            consumer = fields[0]
            if body is None or consumer.kind != ConsumerKind.CONSUMER:
                payload = poll_batches(ctx, *fields)
            else:  # a single consumer (its route is never a whole reply): keep it for the next poll
                stamp = route_stamp(ctx)
                route = poll_route(ctx, consumer, fields[1], fields[2], fields[3])
                routes = cs.polls
                if len(routes) >= _POLL_ROUTES:
                    routes.clear()
                routes[bytes(body[:len(body) - _POLL_END.size])] = (stamp, *route)
                payload = poll_routed(ctx, route[1], route[2], route[3], *fields[4:])
        except Exception as e:
            return self._poll_refused(head, e, t0, op)
        if type(payload) is not list:
            return self._poll_later(head, payload, t0, op)
        return self._poll_reply(head, payload, t0, op)

    def _poll_reading(self, ctx: Context, cs: "_ConnState", head: bytes, route: tuple, strategy: int, value: int,
                      count: int, auto_commit: bool):
        """:meth:`_poll` of a poll whose kept ``route`` (stamp, topic, partition, kind, name) holds."""
        op = cs.epoch or 0
        ctx.header = None
        t0 = time.perf_counter()
        try:
            payload = poll_routed(ctx, route[2], route[3], route[4], strategy, value, count, auto_commit)
        except Exception as e:
            return self._poll_refused(head, e, t0, op)
        if type(payload) is not list:
            return self._poll_later(head, payload, t0, op)
        return self._poll_reply(head, payload, t0, op)

    async def _poll_later(self, head: bytes, reading, t0: float, op: int) -> bytes | list:
        try:
            payload = await reading
        except Exception as e:
            return self._poll_refused(head, e, t0, op)
        return self._poll_reply(head, payload, t0, op)

    def _poll_refused(self, head: bytes, e: Exception, t0: float, op: int) -> bytes:
        _POLL_TIMED.observe(time.perf_counter() - t0)
        return framing.encode_reply_to_head(head, b"", self._refusal(_POLL_CODE, e), op=op)

    @staticmethod
    def _poll_reply(head: bytes, payload: list, t0: float, op: int) -> list:
        _POLL_TIMED.observe(time.perf_counter() - t0)
        length = 0
        for b in payload:
            length += len(b)
        return [framing.reply_header_to_head(head, length, op=op), *payload]

    async def _send(self, ctx: Context, cs: "_ConnState", head: bytes, fields) -> bytes:
        """Serve a SendMessages that :meth:`_send_ready` passed and whose body
        ``send_messages_fields`` read: the same reply, status and metrics as the full path."""
        out = self._send_now(ctx, cs, head, fields)
        if not isinstance(out, bytes):
            out = await out
        return out

    def _send_now(self, ctx: Context, cs: "_ConnState", head: bytes, fields):
        """:meth:`_send` up to the append: the reply bytes, or (an append that must wait for
        its sync: enforce_fsync) a coroutine that waits and returns them."""
        op = cs.epoch or 0
        ctx.header = None  # (the full path's decoded header: not built here, no handler reads it)
        t0 = time.perf_counter()
        try:
            t, p, done = append_batch(ctx, *fields)
        except Exception as e:
            return self._send_refused(head, e, t0, op)
        return self._send_done(head, t, p, done, t0, op)

    def _send_body(self, ctx: Context, cs: "_ConnState", head: bytes, body, kept: "_InlineRequests"):
        """:meth:`_send_now` of a SendMessages that :meth:`_send_ready` passed, from its raw
        ``body``; None when ``send_messages_fields`` does not read it (the full path answers).

        A send to a partition by id keeps its route (:func:`.handlers.messages.send_route`:
        topic, send right, partition) in ``kept.route`` under the body's metadata bytes (u32
        length, stream and topic identifiers, partitioning): a later body of the same metadata
        bytes goes straight to :func:`.handlers.messages.append_routed` while
        :func:`.handlers.messages.route_stamp` is the same (:func:`.handlers.messages.same_stamp`) and the topic still holds the
        partition, with the same reply, status and metrics as resolving it again (a route that
        does not resolve is never kept: the general path answers its error)."""
        route = kept.route
        if route is not None and len(body) >= 4:
            prefix, stamp, t, p = route
            n = _SIZE.unpack_from(body, 0)[0]
            if (n == len(prefix) and body[:n] == prefix and same_stamp(stamp, route_stamp(ctx))
                    and t.partitions.get(p.id) is p):
                batch = send_messages_batch(body, n)
                if batch is not None:
                    return self._send_routed(ctx, cs, head, t, p, batch)
        fields = send_messages_fields(body)
        if fields is None:
            return None
        if fields[2] != "partition":
            return self._send_now(ctx, cs, head, fields)
        stamp = route_stamp(ctx)
        try:
            t, p = send_route(ctx, *fields[:4])
        except Exception:
            return self._send_now(ctx, cs, head, fields)  # (resolves again and answers the error)
        kept.route = (bytes(body[:_SIZE.unpack_from(body, 0)[0]]), stamp, t, p)
        return self._send_routed(ctx, cs, head, t, p, fields[4])

    def _send_routed(self, ctx: Context, cs: "_ConnState", head: bytes, t, p, batch):
        """:meth:`_send_now` of a send whose topic ``t`` and partition ``p`` are resolved."""
        op = cs.epoch or 0
        ctx.header = None
        t0 = _perf_counter()
        try:
            done = append_routed(ctx, t, p, batch)
        except Exception as e:
            return self._send_refused(head, e, t0, op)
        return self._send_done(head, t, p, done, t0, op)

    def _send_done(self, head: bytes, t, p, done, t0: float, op: int):
        if done.durable is not None:  # enforce_fsync: reply once a sync covering the batch returned
            return self._send_durable(head, t, p, done, t0, op)
        return self._send_reply(head, t, p, done, t0, op)

    async def _send_durable(self, head: bytes, t, p, done, t0: float, op: int) -> bytes:
        try:
            await done.durable
        except Exception as e:
            return self._send_refused(head, e, t0, op)
        return self._send_reply(head, t, p, done, t0, op)

    @staticmethod
    def _send_reply(head: bytes, t, p, done, t0: float, op: int) -> bytes:
        _SEND_TIMED.observe(_perf_counter() - t0)
        return encode_send_reply_to_head(head, op, t.stream_id, t.id, p.id, done.base_offset)

    def _send_refused(self, head: bytes, e: Exception, t0: float, op: int) -> bytes:
        _SEND_TIMED.observe(time.perf_counter() - t0)
        return framing.encode_reply_to_head(head, b"", self._refusal(_SEND_CODE, e), op=op)

    # ------------------------------------------------------------------ login-register
    async def _login(self, ctx: Context, cs: "_ConnState", header, body: bytes) -> bytes:
        try:
            req = version.decode_login_register_any(body)
        except CodecError:
            return self._evict(cs, header.client, Event.LOGIN_MALFORMED)
        if not version.is_protocol_compatible(req.version.protocol_version):
            window = (version.PROTOCOL_VERSION, version.PROTOCOL_VERSION_MIN)
            return self._evict(cs, header.client, Event.LOGIN_INCOMPATIBLE, window)
        if header.client == 0:
            return self._evict(cs, header.client, Event.LOGIN_NO_CLIENT_ID)
        if framing.request_fields_problem(header) is not None:
            # a Register must carry session 0 and request 0 (connection-lifecycle.mdx)
            return self._evict(cs, header.client, Event.LOGIN_MALFORMED)
        try:
            user = await self._authenticate(req, body)
        except core_errors.UserInactive:
            return self._evict(cs, header.client, Event.LOGIN_USER_INACTIVE)
        except (core_errors.InvalidToken, core_errors.TokenExpired):
            return self._evict(cs, header.client, Event.LOGIN_BAD_TOKEN)
        except core_errors.InvalidCredentials:
            return self._evict(cs, header.client, Event.LOGIN_BAD_CREDENTIALS)
        cs.state = step(cs.state, Event.LOGIN_OK).next_state
        if cs.client is not None and cs.epoch is not None and cs.client != header.client:
            self.clients.forget(cs.client, cs.epoch)  # this connection's previous session
        cs.client = header.client
        cs.epoch = self.clients.register(header.client, user.id)
        ctx.login(user)
        reply = version.encode_login_reply_body(version.LoginReply(user.id, cs.epoch))
        log.info(
            "login",
            extra={"kv": {"user": user.username, "client_id": ctx.client.id, "sdk": req.version.sdk_name}},
        )
        return framing.encode_reply(header, reply, op=cs.epoch)

    async def _authenticate(self, req, body: bytes):
        """The user a Register body logs in. A body that reads as a password login but does not
        authenticate is retried as a token login (Iggy does the same: the shapes can overlap)."""
        users = self.broker.users
        if isinstance(req, version.LoginRegisterWithPat):
            return users.authenticate_token(req.token, self.broker.clock())
        loop = asyncio.get_running_loop()
        try:
            # Argon2id takes tens of milliseconds and 64 MiB: keep it off the event loop, and
            # bound how many run at once so a burst of logins cannot balloon memory.
            async with self._hashing:
                return await loop.run_in_executor(None, users.authenticate, req.username, req.password)
        except core_errors.InvalidCredentials as refused:
            try:
                as_token = version.decode_login_register_with_pat(body)
            except CodecError:
                raise refused from None
            try:
                return users.authenticate_token(as_token.token, self.broker.clock())
            except (core_errors.InvalidToken, core_errors.TokenExpired):
                raise refused from None


class IggySession:
    """One connection's Iggy session, independent of how its bytes travel (sans-I/O for
    framing: TCP, TLS, QUIC streams and WebSocket messages all feed it whole frames).

    Contract: :meth:`check_head` on each 256-byte request header before its body is read
    (an Eviction frame to send, then close, or None); :meth:`handle` on the whole frame
    (the reply: bytes or a list of buffers; after it, :attr:`closed` says whether it
    was an Eviction and the connection must close); :meth:`close` once, when the
    connection ends (forgets the client's session, drops its group memberships).
    """

    __slots__ = ("frontend", "ctx", "cs", "peer")

    def __init__(self, frontend: "IggyFrontend", peer: str, transport: str):
        self.frontend = frontend
        self.peer = peer
        client = frontend.broker.connect_client(peer, transport)
        self.ctx = Context(frontend.broker, client, frontend)
        self.cs = _ConnState()

    @property
    def closed(self) -> bool:
        return self.cs.state is State.CLOSED

    @property
    def authenticated(self) -> bool:
        return self.cs.state is State.AUTHENTICATED

    def max_frame_size(self) -> int:
        """The largest request frame accepted now (bytes, header included): before login
        only small frames (login, ping), so an unauthenticated connection can make the
        server buffer at most PRE_LOGIN_MAX_FRAME_SIZE bytes."""
        max_size = self.frontend.config.max_frame_size
        return max_size if self.authenticated else min(max_size, PRE_LOGIN_MAX_FRAME_SIZE)

    def check_head(self, head: bytes) -> bytes | None:
        """The Eviction frame refusing ``head`` (``size`` under 256 or over
        :meth:`max_frame_size`: reason 6; ``command`` byte not 5: reason 5), or None."""
        size = _SIZE.unpack_from(head, framing.SIZE_OFFSET)[0]
        if size < _HEADER or size > self.max_frame_size():
            log.info("frame size refused", extra={"kv": {"peer": self.peer, "size": size}})
            return self.frontend._evict(self.cs, _client_of(head), Event.FRAME_SIZE)
        if head[framing.COMMAND_OFFSET] != HeaderCommand.REQUEST:
            return self.frontend._evict(self.cs, _client_of(head), Event.FRAME_COMMAND)
        return None

    async def handle(self, head: bytes, body: bytes):
        """The reply to one whole request frame (``head``: its 256-byte header)."""
        return await self.frontend._handle(self.ctx, self.cs, head, body)

    def evict_frame_size(self, head: bytes) -> bytes:
        """The Eviction frame (reason 6) for a frame whose bytes do not match its ``size``."""
        return self.frontend._evict(self.cs, _client_of(head), Event.FRAME_SIZE)

    def evict_stale(self) -> bytes:
        """The Eviction frame (reason 13 StaleClient) for a connection silent too long."""
        return self.frontend._evict(self.cs, self.cs.client or 0, Event.STALE)

    def close(self) -> None:
        cs = self.cs
        if cs.client is not None and cs.epoch is not None:
            self.frontend.clients.forget(cs.client, cs.epoch)
        self.frontend.broker.disconnect_client(self.ctx.client.id)


_FRAME, _REPLY, _DRAIN = range(3)  # what _InlineRequests.serve hands the connection's coroutine


class _InlineRequests:
    """SendMessages and PollMessages served from the protocol callbacks (the ``inline`` server of
    :meth:`~headwater.frontends.frames.FrameReader.serve_inline`) while the connection's
    coroutine (:meth:`IggyFrontend.serve`) waits between requests: no task wake-up, future or
    pause/resume of reading per request.

    A frame is taken (``body_size``) when the fast path would serve it: a SendMessages that
    ``_send_ready`` passes, a PollMessages that ``_poll_ready`` passes, its size within the
    frame limit, the connection neither closing nor shutting down. Any other header goes to the
    coroutine untouched (its refusal, eviction, login, metadata command), as does a taken frame
    whose body the fast read does not decode or whose session changed while its body came in
    (handed over whole: the full path serves it). The reply is written to the transport at once,
    in order: the coroutine has no request while frames are served here. Handed to the coroutine
    after a reply: an append that must wait for its sync (enforce_fsync), and a write buffer over
    ``max_connection_buffer_bytes`` (it drains, reading stopped, before reading on).
    """

    __slots__ = ("frontend", "session", "conn", "writer", "transport", "high", "route")
    head_size = _HEADER

    def __init__(self, frontend: IggyFrontend, session: "IggySession", conn: Connection, writer: asyncio.StreamWriter):
        self.frontend = frontend
        self.session = session
        self.conn = conn
        self.writer = writer
        self.transport = writer.transport
        self.high = conn.high
        self.route: tuple | None = None  # the last SendMessages route kept (IggyFrontend._send_body)

    def body_size(self, head: bytes) -> int:
        """The body bytes of the frame whose header is ``head`` when it is served here, else -1."""
        if self.conn.closing.is_set() or self.transport.is_closing():
            return -1
        frontend, session = self.frontend, self.session
        operation = head[_OPERATION_OFFSET]
        if operation == _SEND_MESSAGES_OPERATION:
            if not (frontend.send_fast_path and frontend._send_ready(session.ctx, session.cs, head)):
                return -1
        elif operation != _READ_OPERATION or not (
                frontend.poll_fast_path and frontend._poll_ready(session.ctx, session.cs, head)):
            return -1
        size = _SIZE.unpack_from(head, framing.SIZE_OFFSET)[0]
        if size > frontend.config.max_frame_size:
            return -1  # (the coroutine's check_head refuses it before its body is read)
        return size - _HEADER

    def receiving(self) -> None:
        if self.conn.phase == IDLE:  # the frame's first bytes: its receive clock starts (once)
            self.conn.receiving()

    def serve(self, head: bytes, body: bytearray):
        """Serve one whole frame that :meth:`body_size` took; None, or the handoff for :meth:`finish`."""
        frontend, ctx, cs = self.frontend, self.session.ctx, self.session.cs
        if head[_OPERATION_OFFSET] == _SEND_MESSAGES_OPERATION:
            # (body_size passed this header whole: only the session's live state is looked at again)
            out = frontend._send_body(ctx, cs, head, body, self) if frontend._still_live(ctx, cs) else None
            if out is None:
                self.conn.handling()
                return (_FRAME, head, body if body else b"")
            if not isinstance(out, bytes):
                self.conn.handling()  # (busy: a shutdown lets it finish)
                return (_REPLY, out)
            self.transport.write(out)
        else:
            out = frontend._poll_body(ctx, cs, head, body) if frontend._poll_ready(ctx, cs, head) else None
            if out is None:
                self.conn.handling()
                return (_FRAME, head, bytes(body))
            if not isinstance(out, (list, bytes)):  # bytes not in the page cache: read in off the loop
                self.conn.handling()  # (busy: a shutdown lets it finish)
                return (_REPLY, out)
            if isinstance(out, list):
                self.transport.writelines(out)
            else:
                self.transport.write(out)
        self.conn.waiting()
        if self.high and self.transport.get_write_buffer_size() > self.high:
            return (_DRAIN,)
        return None

    def drop(self, handoff) -> None:
        """A handoff the coroutine will never finish (cancelled at shutdown's deadline)."""
        if handoff[0] == _REPLY:
            handoff[1].close()

    async def finish(self, handoff) -> bool:
        """Finish what :meth:`serve` handed over, as the coroutine serves a request; False when the
        connection must close (evicted)."""
        conn, writer = self.conn, self.writer
        if handoff[0] == _DRAIN:
            await conn.drain(writer)
            return True
        conn.handling()
        if handoff[0] == _REPLY:
            out = await handoff[1]
        else:
            out = await self.session.handle(handoff[1], handoff[2])
        await conn.reply(writer, out)
        if self.session.closed:
            await conn.drain(writer)
            return False
        return True


class _ConnState:
    __slots__ = ("state", "client", "epoch", "polls")

    def __init__(self) -> None:
        self.state = State.ANONYMOUS
        self.client: int | None = None  # the client id this connection registered
        self.epoch: int | None = None  # its session epoch
        # a single consumer's poll route by the body bytes naming it (IggyFrontend._poll_body)
        self.polls: dict[bytes, tuple] = {}


def make_iggy_serve(broker: Broker, config: TcpConfig, data_dir: str = "."):
    return IggyFrontend(broker, config, data_dir).serve


def iggy_limits(config: TcpConfig) -> Limits:
    """The Iggy listener's connection limits from ``[tcp]``. Its idle timeout is the shorter of
    ``idle_timeout_s`` and the heartbeat allowance (1.2 x ``heartbeat_interval_s``, Iggy's grace);
    either expiring evicts with 13 StaleClient."""
    idle = [t for t in (config.idle_timeout_s, config.heartbeat_interval_s * 1.2) if t > 0]
    return Limits(
        max_connections=config.max_connections,
        max_buffer_bytes=config.max_connection_buffer_bytes,
        idle_timeout_s=min(idle) if idle else 0.0,
        frame_receive_timeout_s=config.frame_receive_timeout_s,
        send_stall_timeout_s=config.send_stall_timeout_s,
    )
