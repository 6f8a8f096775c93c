"""One blocking TCP connection speaking Iggy's binary protocol 0.11.0.

Source: ``framing.mdx`` and ``connection-lifecycle.mdx`` (apache/iggy-website);
the frame layouts are in :mod:`headwater.codec.iggy.framing`. A request is a
256-byte header plus the command body; the reply is a 256-byte header (``status``
at 216: 0 ok, else an Iggy error code and an empty body) plus the payload, behind
a result section (``[count u32]``, 0 = ok) for result-framed operations. The server
may answer with a 256-byte Eviction instead (reason at byte 255) and close.

Session rules followed (``request_fields_problem``): the header ``client`` is a
random non-zero u128; Register (login) carries session 0 and request 0; every
replicated operation after it carries the session from the login reply and the next
request number; metadata operations (128..159) and Register carry the xxh3-64 of
the body as ``request_checksum``.

Errors: :class:`ConnectError` (cannot reach the server, it closed, a frame that is
not a reply), :class:`AuthError` (login refused: a status or an eviction),
:class:`ServerError` (a reply status or result code: ``code`` and its Iggy name).
"""

from __future__ import annotations

import secrets
import socket
from typing import Any

import xxhash

from headwater.codec.errors import CodecError
from headwater.codec.iggy import framing, version
from headwater.codec.iggy.codes import (
    COMMAND_TO_OPERATION,
    Command,
    EvictionReason,
    HeaderCommand,
    IggyErrorCode,
    Operation,
)
from headwater.codec.iggy.commands import COMMANDS, encode_request_body

DEFAULT_ADDRESS = "127.0.0.1:8090"
SDK_NAME = "headwater-cli"
_METADATA_OPS = range(128, 160)


class ClientError(Exception):
    """Anything the client reports to its caller."""


class ConnectError(ClientError):
    """The server cannot be reached, closed the connection, or sent something that is not a reply."""


class AuthError(ClientError):
    """Login refused (bad credentials, inactive user, invalid token...)."""


def error_name(code: int) -> str:
    """The Iggy name of an error code (``stream_id_not_found``), or ``unknown``."""
    try:
        return IggyErrorCode(code).name.lower()
    except ValueError:
        return "unknown"


class ServerError(ClientError):
    """The server refused a request: ``code`` is the Iggy error code, ``name`` its Iggy name."""

    def __init__(self, code: int, command: str = ""):
        self.code = code
        self.name = error_name(code)
        super().__init__(f"error {code} ({self.name})" + (f" on {command}" if command else ""))


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 as ``[::1]:8090``) -> ``(host, port)``; raises ValueError."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not HOST:PORT: {address!r}")
    return host.strip("[]"), int(port)


class Client:
    """A blocking connection: :meth:`login` / :meth:`login_token`, then :meth:`call`.

    ``call(request)`` takes a request dataclass of :mod:`headwater.codec.iggy.commands`
    and returns its decoded reply (``None`` for an empty payload).
    """

    def __init__(self, address: str = DEFAULT_ADDRESS, *, timeout: float = 10.0):
        self.address = address
        try:
            host, port = parse_address(address)
        except ValueError as e:
            raise ConnectError(str(e)) from None
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise ConnectError(f"cannot connect to {address}: {e.strerror or e}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client = secrets.randbits(127) | 1
        self.session = 0
        self.request = 0
        self.user_id: int | None = None

    # ------------------------------------------------------------------ frames
    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def settimeout(self, timeout: float | None) -> None:
        self.sock.settimeout(timeout)

    def _frame(self, code: int, body: bytes, operation: int) -> bytes:
        if operation == Operation.REGISTER:
            request, session = 0, 0
        elif operation == Operation.NON_REPLICATED:
            request, session = self.request, self.session
        else:
            self.request += 1
            request, session = self.request, self.session
        checksum = (
            xxhash.xxh3_64_intdigest(body)
            if operation in _METADATA_OPS or operation == Operation.REGISTER
            else 0
        )
        header = framing.encode_request_header(
            size=framing.HEADER_SIZE + len(body),
            client=self.client,
            request=request,
            operation=operation,
            session=session,
            command_code=code,
            request_checksum=checksum,
        )
        return header + body

    def _read_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            try:
                chunk = self.sock.recv(min(n - len(out), 1 << 20))
            except socket.timeout:
                raise ConnectError(f"{self.address}: no reply in time") from None
            except OSError as e:
                raise ConnectError(f"{self.address}: {e.strerror or e}") from None
            if not chunk:
                raise ConnectError(f"{self.address}: the server closed the connection")
            out += chunk
        return bytes(out)

    def _exchange(self, code: int, body: bytes, operation: int) -> tuple[int, bytes]:
        """Send one request, read its answer: ``(status, body)``; an eviction raises."""
        try:
            self.sock.sendall(self._frame(code, body, operation))
        except OSError as e:
            raise ConnectError(f"{self.address}: {e.strerror or e}") from None
        head = self._read_exact(framing.HEADER_SIZE)
        if head[framing.COMMAND_OFFSET] == HeaderCommand.EVICTION:
            reason = framing.decode_eviction(head).reason
            try:
                name = EvictionReason(reason).name.lower()
            except ValueError:
                name = "unknown"
            exc = AuthError if operation == Operation.REGISTER else ConnectError
            raise exc(f"evicted by the server: reason {reason} ({name})")
        try:
            reply = framing.decode_reply_header(head)
        except CodecError as e:
            raise ConnectError(f"{self.address}: not an Iggy reply: {e}") from None
        payload = self._read_exact(reply.size - framing.HEADER_SIZE)
        if reply.status == 0 and framing.is_result_framed(reply.operation):
            try:
                status, rest = framing.split_result(payload)
            except CodecError as e:
                raise ConnectError(f"{self.address}: bad result section: {e}") from None
            return status, bytes(rest)
        return reply.status, payload

    # ------------------------------------------------------------------ login
    def _version_info(self) -> version.ClientVersionInfo:
        from headwater import __version__

        return version.ClientVersionInfo(version.PROTOCOL_VERSION, SDK_NAME, __version__)

    def _login(self, code: Command, body: bytes) -> version.LoginReply:
        status, payload = self._exchange(int(code), body, int(Operation.REGISTER))
        if status:
            raise AuthError(f"login refused: error {status} ({error_name(status)})")
        reply = version.decode_login_reply(payload)
        self.session = reply.session
        self.user_id = reply.user_id
        self.request = 0
        return reply

    def login(self, username: str, password: str) -> version.LoginReply:
        """Register with a username and password (command 40); raises AuthError."""
        body = version.encode_login_register(
            version.LoginRegister(self._version_info(), username, password)
        )
        return self._login(Command.LOGIN_REGISTER, body)

    def login_token(self, token: str) -> version.LoginReply:
        """Register with a personal access token (command 45); raises AuthError."""
        body = version.encode_login_register_with_pat(
            version.LoginRegisterWithPat(self._version_info(), token)
        )
        return self._login(Command.LOGIN_REGISTER_WITH_PAT, body)

    # ------------------------------------------------------------------ commands
    def call(self, request: Any) -> Any:
        """Send a request dataclass; return its decoded reply, or None for an empty one.

        Raises :class:`ServerError` on a nonzero status or result code,
        :class:`ConnectError` when the connection fails.
        """
        code, body = encode_request_body(request)
        spec = COMMANDS[code]
        operation = int(COMMAND_TO_OPERATION.get(code, Operation.NON_REPLICATED))
        status, payload = self._exchange(int(code), body, operation)
        if status:
            raise ServerError(status, code.name.lower())
        if spec.reply_decode is None or (not payload and spec.empty_reply):
            return None
        try:
            return spec.reply_decode(payload)
        except CodecError as e:
            raise ConnectError(f"{self.address}: cannot decode the {code.name} reply: {e}") from None
