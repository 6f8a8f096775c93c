"""The Iggy binary-protocol connection: frames in, registry lookups, replies out.

Per connection: read the 256-byte header, check ``size`` against the
configured maximum *before* reading the body, decode, consult the session
state machine (``session.py``), run the handler, write the reply. Replies go
out in request order. A broken frame or a refused login gets an Eviction
frame and closes this connection only; a bad request gets its Iggy error code
in the reply ``status`` and the connection goes on.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import struct

from ...codec.errors import CodecError
from ...codec.iggy import framing, version
from ...codec.iggy.codes import Command, EvictionReason, Operation
from ...codec.iggy.commands import COMMANDS
from ...codec.iggy.errors import eviction_reason_of, is_frame_fatal
from ...config import TcpConfig
from ...core import errors as core_errors
from ...core.broker import Broker
from ..listener import Connection
from . import handlers  # noqa: F401  (registers every handler)
from .errors import code_for
from .registry import HANDLERS, Context
from .session import Action, ClientTable, Event, State, step

log = logging.getLogger("headwater.iggy")

_SIZE = struct.Struct("<I")
_HEADER = framing.HEADER_SIZE
_LOGIN_CODES = (int(Command.LOGIN_REGISTER), int(Command.LOGIN_REGISTER_WITH_PAT))
_LEGACY_LOGIN = (int(Command.LOGIN_USER), int(Command.LOGIN_WITH_PERSONAL_ACCESS_TOKEN))
_METADATA_OPS = range(128, 160)
_WRITE_BUFFER_HIGH = 4 * 1024 * 1024


class IggyFrontend:
    """State shared by all Iggy connections: the broker, the client table, limits."""

    def __init__(self, broker: Broker, config: TcpConfig, data_dir: str = "."):
        self.broker = broker
        self.config = config
        self.clients = ClientTable(config.session_reply_cache)
        self.data_dir = data_dir

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: Connection) -> None:
        client = self.broker.connect_client(conn.peer, "tcp")
        ctx = Context(self.broker, client, self)
        conn_state = _ConnState()
        max_size = self.config.max_frame_size
        try:
            while not conn.closing.is_set():
                head = await reader.readexactly(_HEADER)
                size = _SIZE.unpack_from(head, 48)[0]
                if size < _HEADER or size > max_size:
                    writer.write(framing.encode_eviction(0, EvictionReason.INVALID_REQUEST_BODY_SIZE))
                    log.info("frame size refused", extra={"kv": {"peer": conn.peer, "size": size}})
                    return
                body = await reader.readexactly(size - _HEADER) if size > _HEADER else b""
                conn.busy = True
                out, close = await self._handle(ctx, conn_state, head, body)
                if out:
                    writer.writelines(out) if isinstance(out, list) else writer.write(out)
                if close:
                    await writer.drain()
                    return
                if writer.transport.get_write_buffer_size() > _WRITE_BUFFER_HIGH:
                    await writer.drain()
                conn.busy = False
        finally:
            if conn_state.client is not None and conn_state.epoch is not None:
                pass  # the client id's session stays valid for a reconnect; fencing handles zombies
            self.broker.disconnect_client(client.id)

    async def _handle(self, ctx: Context, cs: "_ConnState", head: bytes, body: bytes):
        try:
            header = framing.decode_request_header(head)
        except CodecError as e:
            reason = eviction_reason_of(e) or EvictionReason.INVALID_REQUEST_OPERATION
            return framing.encode_eviction(0, reason), True
        ctx.header = header
        code = header.command_code

        # --- session state machine ---
        if header.operation == Operation.REGISTER:
            return await self._login(ctx, cs, header, body), cs.state is State.CLOSED
        if code in _LEGACY_LOGIN:
            cs.state = step(cs.state, Event.LEGACY_LOGIN)[1]
            return framing.encode_eviction(header.client, EvictionReason.MALFORMED_LOGIN), True
        if code == Command.PING:
            event = Event.PING
        elif code == Command.LOGOUT_USER:
            event = Event.LOGOUT
        else:
            event = Event.COMMAND
        action, next_state = step(cs.state, event)
        if action is Action.DENY:
            return framing.encode_reply(header, b"", status=40), False
        if action is Action.EVICT:
            return framing.encode_eviction(header.client, EvictionReason.NO_SESSION), True
        if cs.state is State.AUTHENTICATED and code != Command.PING:
            # session fencing: the request must carry this connection's epoch
            current = self.clients.epoch(cs.client) if cs.client is not None else None
            if header.session != cs.epoch or current != cs.epoch or header.client != cs.client:
                return framing.encode_eviction(header.client, EvictionReason.SESSION_TOO_LOW), True

        # --- metadata deduplication ---
        is_metadata = int(header.operation) in _METADATA_OPS
        if is_metadata:
            verdict, cached = self.clients.check_request(header.client, header.request)
            if verdict == "cached":
                status, reply_body = cached
                return framing.encode_reply(header, reply_body, status=status), False
            if verdict == "stale":
                return framing.encode_reply(header, b"", status=59), False

        status, payload = await self._dispatch(ctx, code, body)
        if event is Event.LOGOUT and status == 0:
            cs.state = next_state
        if status:
            reply = framing.encode_reply(header, b"", status=status)
            if is_metadata:
                self.clients.remember(header.client, header.request, status, b"")
            return reply, False
        spec = COMMANDS.get(Command(code))
        if isinstance(payload, list):  # poll: prefix + stored batch buffers, never copied
            length = sum(len(b) for b in payload)
            return [framing.reply_header_for(header, length), *payload], False
        reply_body = framing.result_ok(payload) if spec is not None and spec.result_framed else bytes(payload)
        if is_metadata:
            self.clients.remember(header.client, header.request, 0, reply_body)
        return framing.encode_reply(header, reply_body), False

    async def _dispatch(self, ctx: Context, code: int, body: bytes) -> tuple[int, object]:
        handler = HANDLERS.get(code)
        if handler is None:
            if code in {int(c) for c in Command}:
                return 5, b""  # FeatureUnavailable
            return 3, b""  # InvalidCommand
        try:
            request = COMMANDS[Command(code)].decode(body)
            result = handler(ctx, request)
            if inspect.isawaitable(result):
                result = await result
            return 0, result
        except core_errors.BrokerError as e:
            log.debug("request refused", extra={"kv": {"code": code, "error": str(e)}})
            return code_for(e), b""
        except CodecError as e:
            log.debug("request undecodable", extra={"kv": {"code": code, "error": str(e)}})
            return e.code, b""
        except Exception:
            log.exception("handler failed", extra={"kv": {"code": code}})
            return 1, b""

    async def _login(self, ctx: Context, cs: "_ConnState", header, body: bytes):
        broker = self.broker
        try:
            req = version.decode_login_register_any(body)
        except CodecError:
            cs.state = step(cs.state, Event.LOGIN_FAILED)[1]
            return framing.encode_eviction(header.client, EvictionReason.MALFORMED_LOGIN)
        if not version.is_protocol_compatible(req.version.protocol_version):
            cs.state = step(cs.state, Event.LOGIN_FAILED)[1]
            return framing.encode_eviction(
                header.client,
                EvictionReason.INCOMPATIBLE_PROTOCOL,
                version.PROTOCOL_VERSION,
                version.PROTOCOL_VERSION_MIN,
            )
        if header.client == 0:
            cs.state = step(cs.state, Event.LOGIN_FAILED)[1]
            return framing.encode_eviction(header.client, EvictionReason.SESSION_ERROR)
        loop = asyncio.get_running_loop()
        try:
            if isinstance(req, version.LoginRegister):
                user = await loop.run_in_executor(None, broker.users.authenticate, req.username, req.password)
            else:
                user = broker.users.authenticate_token(req.token, broker.clock())
        except core_errors.UserInactive:
            cs.state = step(cs.state, Event.LOGIN_FAILED)[1]
            return framing.encode_eviction(header.client, EvictionReason.USER_INACTIVE)
        except (core_errors.InvalidToken, core_errors.TokenExpired):
            cs.state = step(cs.state, Event.LOGIN_FAILED)[1]
            return framing.encode_eviction(header.client, EvictionReason.INVALID_TOKEN)
        except core_errors.InvalidCredentials:
            cs.state = step(cs.state, Event.LOGIN_FAILED)[1]
            return framing.encode_eviction(header.client, EvictionReason.INVALID_CREDENTIALS)
        cs.state = step(cs.state, Event.LOGIN_OK)[1]
        cs.client = header.client
        cs.epoch = self.clients.register(header.client, user.id)
        ctx.login(user)
        reply = version.encode_login_reply_body(version.LoginReply(user.id, cs.epoch))
        log.info("login", extra={"kv": {"user": user.username, "client_id": ctx.client.id, "sdk": req.version.sdk_name}})
        return framing.encode_reply(header, reply)


class _ConnState:
    __slots__ = ("state", "client", "epoch")

    def __init__(self) -> None:
        self.state = State.ANONYMOUS
        self.client: int | None = None
        self.epoch: int | None = None


def make_iggy_serve(broker: Broker, config: TcpConfig, data_dir: str = "."):
    return IggyFrontend(broker, config, data_dir).serve
