"""Iggy 0.11.0 framing: 256-byte Request / Reply / Eviction headers, the result section, a Framer.

Source: ``framing.mdx`` (apache/iggy-website) and the crate
``core/binary_protocol/src/consensus/header.rs`` and ``reply_result.rs``
(apache/iggy 0.11.0-edge.4). Every frame is a 256-byte header plus a body of
``size - 256`` bytes. All integers little-endian; u128 fields are two u64
halves, low half first.

Request header (client -> server)::

    off size field             notes
      0   16 checksum          zero on client frames
     16   16 checksum_body     zero
     32   16 cluster           zero
     48    4 size              256 + body length
     52    4 view              zero
     56    4 release           zero
     60    1 command           5 (Request)
     61    1 replica           zero
     62   66 reserved
    128   16 client            client-chosen session identity, non-zero
    144   16 request_checksum  xxh3 widened to u128 for metadata ops, else zero
    160    8 timestamp         echoed into the reply; the SDK sends zero
    168    8 request           per-client request number
    176    1 operation         see codes.Operation
    177    7 padding
    184    8 session           fence epoch from the login reply (0 on Register)
    192    4 user_id           ignored
    196    4 command code      only for operation 2 (NonReplicated), else zero
    200   56 reserved

Reply header (server -> client)::

      0   48 checksum, checksum_body, cluster (echoed)
     48    4 size
     52    4 view              echoed
     56    4 release           echoed
     60    1 command           8 (Reply)
     61    1 replica           echoed
    128   16 request_checksum  echoed
    144   16 context           zero
    160   16 client            echoed
    176    8 op                Iggy stamps the session epoch here
    184    8 commit            commit point (0 is fine for us)
    192    8 timestamp         echoed
    200    8 request           echoed (the SDK correlates on it)
    208    1 operation         echoed (the SDK picks result framing by it)
    216    4 status            0 = ok; else an IggyError code and an EMPTY body
    220   36 reserved

Eviction header (server -> client, never a body)::

     48    4 size              always 256
     60    1 command           13 (Eviction)
    128   16 client
    144    4 server_protocol_version      only for reason 14, else zero
    148    4 server_protocol_version_min  only for reason 14, else zero
    255    1 reason            codes.EvictionReason

Result section (``framing.mdx`` "Result section"): replies to result-framed
operations start with ``[count u32]`` then ``count x {index u32, result u32}``;
success is ``count = 0`` followed by the payload, a committed business
rejection is ``count = 1, {0, code}`` and no payload.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .codes import (
    COMMAND_TO_OPERATION,
    OPERATION_TO_COMMAND,
    Command,
    EvictionReason,
    HeaderCommand,
    Operation,
    is_client_operation,
)
from ..errors import InvalidFormat
from .errors import FrameTooLarge, InvalidFrame, InvalidOperation

__all__ = [
    "HEADER_SIZE",
    "SIZE_OFFSET",
    "STATUS_OFFSET",
    "DEFAULT_MAX_FRAME_SIZE",
    "RequestHeader",
    "ReplyHeader",
    "EvictionHeader",
    "decode_request_header",
    "request_fields_problem",
    "encode_request",
    "encode_request_header",
    "encode_reply_header",
    "reply_header_for",
    "encode_reply",
    "encode_reply_to_head",
    "reply_header_to_head",
    "decode_reply_header",
    "encode_eviction",
    "decode_eviction",
    "Framer",
    "RESULT_FRAMED_OPERATIONS",
    "RESULT_FRAMED_COMMANDS",
    "RESULT_OK",
    "is_result_framed",
    "result_ok",
    "result_error",
    "result_prefix",
    "reply_body",
    "split_result",
]

HEADER_SIZE = 256
SIZE_OFFSET = 48
COMMAND_OFFSET = 60
STATUS_OFFSET = 216
CODE_OFFSET = 196
DEFAULT_MAX_FRAME_SIZE = 64 * 1024 * 1024
"""Default cap on a request frame (header included): 64 MiB."""

_U32 = struct.Struct("<I")
# 48..62: size, view, release, command, replica
_FRAME_HEAD = struct.Struct("<IIIBB")
# 128..200 of a request: client, request_checksum, timestamp, request, operation, pad, session, user_id, code
_REQUEST_TAIL = struct.Struct("<QQQQQQB7xQII")
# 128..220 of a reply: request_checksum, context, client, op, commit, timestamp, request, operation, pad, status
_REPLY_TAIL = struct.Struct("<QQQQQQQQQQB7xI")
# 128..152 of an eviction: client, server_protocol_version, server_protocol_version_min
_EVICTION_TAIL = struct.Struct("<QQII")
_U128 = struct.Struct("<QQ")
_MASK64 = (1 << 64) - 1


def _lo_hi(value: int) -> tuple[int, int]:
    return value & _MASK64, (value >> 64) & _MASK64


# ---------------------------------------------------------------- request header


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """A decoded client request header (layout in the module docstring).

    ``command_code`` is the u32 command: read from bytes 196..200 for
    ``operation = NON_REPLICATED`` (possibly a code we do not know), implied by
    the operation otherwise. ``REGISTER`` reports ``LOGIN_REGISTER`` (40): the
    header cannot tell 40 from 45, only the body can
    (:func:`headwater.codec.iggy.version.decode_login_register_any`).
    """

    size: int
    client: int
    request: int
    operation: Operation
    session: int
    command_code: int
    request_checksum: int = 0
    timestamp: int = 0
    user_id: int = 0
    cluster: int = 0
    view: int = 0
    release: int = 0
    replica: int = 0

    @property
    def body_length(self) -> int:
        return self.size - HEADER_SIZE

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> RequestHeader:
        """Same as :func:`decode_request_header`."""
        return decode_request_header(data)

    def encode(self) -> bytes:
        """The 256 header bytes (for tests, fuzzers and clients)."""
        return encode_request_header(
            size=self.size,
            client=self.client,
            request=self.request,
            operation=self.operation,
            session=self.session,
            command_code=self.command_code,
            request_checksum=self.request_checksum,
            timestamp=self.timestamp,
            user_id=self.user_id,
            cluster=self.cluster,
            view=self.view,
            release=self.release,
            replica=self.replica,
        )


def decode_request_header(data: bytes | bytearray | memoryview) -> RequestHeader:
    """Decode the first 256 bytes of ``data`` as a request header.

    Raises :class:`~.errors.InvalidFrame` when fewer than 256 bytes are given,
    ``command != 5`` or ``size < 256``; :class:`~.errors.InvalidOperation`
    (eviction reason 4) when ``operation`` is 0, 64..127 or unknown. Does not
    check ``size`` against any cap (the :class:`Framer` does) nor the
    session/request rules (the session layer's job).
    """
    if len(data) < HEADER_SIZE:
        raise InvalidFrame(f"request header needs {HEADER_SIZE} bytes, got {len(data)}", offset=0)
    size, view, release, command, replica = _FRAME_HEAD.unpack_from(data, SIZE_OFFSET)
    if command != HeaderCommand.REQUEST:
        raise InvalidFrame(f"header command {command}, expected 5 (Request)", offset=COMMAND_OFFSET)
    if size < HEADER_SIZE:
        raise InvalidFrame(f"frame size {size} below {HEADER_SIZE}", offset=SIZE_OFFSET)
    (
        client_lo,
        client_hi,
        rc_lo,
        rc_hi,
        timestamp,
        request,
        operation,
        session,
        user_id,
        code,
    ) = _REQUEST_TAIL.unpack_from(data, 128)
    cluster_lo, cluster_hi = _U128.unpack_from(data, 32)
    client = client_lo | (client_hi << 64)
    if not is_client_operation(operation):
        raise InvalidOperation(
            f"operation {operation} is not a client operation",
            offset=176,
            client=client,
            operation=operation,
        )
    op = Operation(operation)
    if op is Operation.NON_REPLICATED:
        command_code = code
    elif op is Operation.REGISTER:
        command_code = int(Command.LOGIN_REGISTER)
    else:
        command_code = int(OPERATION_TO_COMMAND[op])
    return RequestHeader(
        size=size,
        client=client,
        request=request,
        operation=op,
        session=session,
        command_code=command_code,
        request_checksum=rc_lo | (rc_hi << 64),
        timestamp=timestamp,
        user_id=user_id,
        cluster=cluster_lo | (cluster_hi << 64),
        view=view,
        release=release,
        replica=replica,
    )


def request_fields_problem(header: RequestHeader) -> str | None:
    """The session-field rules of the crate's ``validate_request_fields``; ``None`` when they hold.

    ``client`` must be non-zero; a Register must carry ``session = 0`` and
    ``request = 0``; every operation other than Register and NonReplicated
    must carry ``session > 0`` and ``request > 0`` (NonReplicated is
    sessionless: a ping before login sends ``session = 0``). What to do about
    a violation is the session layer's call (Iggy refuses the frame).
    """
    if header.client == 0:
        return "client must be non-zero"
    if header.operation is Operation.REGISTER:
        if header.session != 0 or header.request != 0:
            return "register must carry session 0 and request 0"
    elif header.operation is not Operation.NON_REPLICATED:
        if header.session == 0 or header.request == 0:
            return "a replicated request needs a session and a request number"
    return None


def encode_request_header(
    *,
    size: int,
    client: int,
    request: int,
    operation: int,
    session: int,
    command_code: int = 0,
    request_checksum: int = 0,
    timestamp: int = 0,
    user_id: int = 0,
    cluster: int = 0,
    view: int = 0,
    release: int = 0,
    replica: int = 0,
) -> bytes:
    """Build a 256-byte request header. ``command_code`` is written at 196..200 only for operation 2."""
    buf = bytearray(HEADER_SIZE)
    _U128.pack_into(buf, 32, *_lo_hi(cluster))
    _FRAME_HEAD.pack_into(buf, SIZE_OFFSET, size, view, release, HeaderCommand.REQUEST, replica)
    code = command_code if operation == Operation.NON_REPLICATED else 0
    _REQUEST_TAIL.pack_into(
        buf,
        128,
        *_lo_hi(client),
        *_lo_hi(request_checksum),
        timestamp,
        request,
        operation,
        session,
        user_id,
        code,
    )
    return bytes(buf)


def encode_request(
    command_code: int,
    body: bytes | bytearray | memoryview = b"",
    *,
    client: int = 1,
    request: int = 0,
    session: int = 0,
    operation: int | None = None,
) -> bytes:
    """A whole request frame the way the SDK builds it (header + body), for tests and clients.

    ``operation`` defaults to the operation the code implies
    (:data:`~.codes.COMMAND_TO_OPERATION`, else NonReplicated).
    """
    if operation is None:
        try:
            operation = COMMAND_TO_OPERATION[Command(command_code)]
        except (ValueError, KeyError):
            operation = Operation.NON_REPLICATED
    header = encode_request_header(
        size=HEADER_SIZE + len(body),
        client=client,
        request=request,
        operation=operation,
        session=session,
        command_code=command_code,
    )
    return header + bytes(body)


# ---------------------------------------------------------------- reply header


@dataclass(frozen=True, slots=True)
class ReplyHeader:
    """A decoded reply header (for tests and clients)."""

    size: int
    client: int
    request: int
    operation: int
    status: int
    request_checksum: int = 0
    timestamp: int = 0
    op: int = 0
    commit: int = 0
    context: int = 0
    cluster: int = 0
    view: int = 0
    release: int = 0
    replica: int = 0


def encode_reply_header(
    *,
    body_length: int,
    client: int,
    request: int,
    operation: int,
    status: int = 0,
    request_checksum: int = 0,
    timestamp: int = 0,
    op: int = 0,
    commit: int = 0,
    context: int = 0,
    cluster: int = 0,
    view: int = 0,
    release: int = 0,
    replica: int = 0,
) -> bytes:
    """Build a 256-byte reply header for a body of ``body_length`` bytes.

    ``status`` is 0 or an IggyError code (then the body must be empty).
    Raises ``ValueError`` on a negative length, a body over u32, or a
    nonzero status with a body.
    """
    if body_length < 0 or HEADER_SIZE + body_length > 0xFFFFFFFF:
        raise ValueError(f"reply body length {body_length} out of range")
    if status and body_length:
        raise ValueError("a reply with a nonzero status must have an empty body")
    buf = bytearray(HEADER_SIZE)
    _U128.pack_into(buf, 32, *_lo_hi(cluster))
    _FRAME_HEAD.pack_into(
        buf, SIZE_OFFSET, HEADER_SIZE + body_length, view, release, HeaderCommand.REPLY, replica
    )
    _REPLY_TAIL.pack_into(
        buf,
        128,
        *_lo_hi(request_checksum),
        *_lo_hi(context),
        *_lo_hi(client),
        op,
        commit,
        timestamp,
        request,
        operation,
        status,
    )
    return bytes(buf)


def reply_header_for(
    request: RequestHeader, body_length: int, *, status: int = 0, op: int = 0, commit: int = 0
) -> bytes:
    """The reply header answering ``request``: echoes cluster, view, release, replica, client,
    request_checksum, timestamp, request and operation (as Iggy's ``build_reply_with_body``).

    Use it with ``transport.writelines([header, prefix, *batches])`` when the
    body is a list of buffers. ``op``: Iggy stamps the session epoch there.
    """
    return encode_reply_header(
        body_length=body_length,
        client=request.client,
        request=request.request,
        operation=request.operation,
        status=status,
        request_checksum=request.request_checksum,
        timestamp=request.timestamp,
        op=op,
        commit=commit,
        cluster=request.cluster,
        view=request.view,
        release=request.release,
        replica=request.replica,
    )


def encode_reply(
    request: RequestHeader,
    body: bytes | bytearray | memoryview = b"",
    status: int = 0,
    *,
    op: int = 0,
    commit: int = 0,
) -> bytes:
    """A whole reply frame (header + body) answering ``request``.

    ``status`` nonzero = a pre-commit failure with that IggyError code and an
    empty body (``ValueError`` otherwise). Result framing is NOT added here:
    pass a body built with :func:`reply_body` / :func:`result_ok`.
    """
    return reply_header_for(request, len(body), status=status, op=op, commit=commit) + bytes(body)


def encode_reply_to_head(
    head: bytes | bytearray | memoryview, body: bytes | bytearray = b"", status: int = 0, *, op: int = 0
) -> bytes:
    """:func:`encode_reply` answering a raw request header, without decoding it: the same
    bytes as ``encode_reply(decode_request_header(head), body, status, op=op)`` for any
    ``head`` that :func:`decode_request_header` accepts (the caller must know it does).
    Echoes cluster (32..48), view, release, replica, client (128..144), request_checksum
    (144..160), timestamp (160), request (168) and operation (176); ``op`` at 176, status
    at 216. Raises ``ValueError`` on a nonzero status with a body.
    """
    if status and body:
        raise ValueError("a reply with a nonzero status must have an empty body")
    header = reply_header_to_head(head, len(body), status, op=op)
    return header + body if body else header


def reply_header_to_head(head: bytes | bytearray | memoryview, body_length: int, status: int = 0, *, op: int = 0) -> bytes:
    """The 256-byte reply header of :func:`encode_reply_to_head` for a body of ``body_length``
    bytes sent separately (``transport.writelines([header, *buffers])``): the same bytes as
    ``reply_header_for(decode_request_header(head), body_length, status=status, op=op)``.
    Does not check ``body_length`` against ``status`` (the caller's job). One unpack of the
    request's echoed fields, one pack of the whole reply (every poll and send builds one)."""
    cluster, view, release, replica, client, checksum, timestamp, request, operation = _REQUEST_ECHO.unpack_from(head)
    return _REPLY_WHOLE.pack(cluster, HEADER_SIZE + body_length, view, release, _REPLY_COMMAND, replica, checksum,
                             client, op, timestamp, request, operation, status)


def reply_packer(body: struct.Struct):
    """A function ``pack(head, op, *fields) -> bytes``: the whole success reply (status 0)
    answering the raw request header ``head`` whose body is ``body.pack(*fields)``, in one
    pack: the same bytes as ``encode_reply_to_head(head, body.pack(*fields), op=op)`` for a
    reply that is not result-framed (the caller's to know). ``body``'s format must be
    little-endian standard size (``<``). Raises ``struct.error`` on a field out of range."""
    if not body.format.startswith("<"):
        raise ValueError(f"body struct {body.format!r} is not little-endian standard size")
    whole = struct.Struct(_REPLY_WHOLE.format + body.format[1:])
    size = HEADER_SIZE + body.size
    echo = _REQUEST_ECHO.unpack_from
    pack_whole = whole.pack

    def pack(head: bytes | bytearray | memoryview, op: int, *fields) -> bytes:
        cluster, view, release, replica, client, checksum, timestamp, request, operation = echo(head)
        return pack_whole(cluster, size, view, release, _REPLY_COMMAND, replica, checksum, client, op, timestamp,
                          request, operation, 0, *fields)

    return pack


# what a reply echoes of a request: cluster @32, view @52, release @56, replica @61, client @128,
# request_checksum @144, timestamp @160, request @168, operation @176
_REQUEST_ECHO = struct.Struct("<32x16s4xII1xB66x16s16sQQB")
# a whole reply header: cluster @32, size @48, view, release, command @60, replica, request_checksum
# @128, context (zero) @144, client @160, op @176, commit (zero) @184, timestamp @192, request @200,
# operation @208, status @216, zeros to 256
_REPLY_WHOLE = struct.Struct("<32x16sIIIBB66x16s16x16sQ8xQQB7xI36x")
_REPLY_COMMAND = int(HeaderCommand.REPLY)


def decode_reply_header(data: bytes | bytearray | memoryview) -> ReplyHeader:
    """Decode a 256-byte reply header; raises :class:`~.errors.InvalidFrame` if it is not one."""
    if len(data) < HEADER_SIZE:
        raise InvalidFrame(f"reply header needs {HEADER_SIZE} bytes, got {len(data)}", offset=0)
    size, view, release, command, replica = _FRAME_HEAD.unpack_from(data, SIZE_OFFSET)
    if command != HeaderCommand.REPLY:
        raise InvalidFrame(f"header command {command}, expected 8 (Reply)", offset=COMMAND_OFFSET)
    if size < HEADER_SIZE:
        raise InvalidFrame(f"frame size {size} below {HEADER_SIZE}", offset=SIZE_OFFSET)
    rc_lo, rc_hi, cx_lo, cx_hi, cl_lo, cl_hi, op, commit, timestamp, request, operation, status = (
        _REPLY_TAIL.unpack_from(data, 128)
    )
    cluster_lo, cluster_hi = _U128.unpack_from(data, 32)
    return ReplyHeader(
        size=size,
        client=cl_lo | (cl_hi << 64),
        request=request,
        operation=operation,
        status=status,
        request_checksum=rc_lo | (rc_hi << 64),
        timestamp=timestamp,
        op=op,
        commit=commit,
        context=cx_lo | (cx_hi << 64),
        cluster=cluster_lo | (cluster_hi << 64),
        view=view,
        release=release,
        replica=replica,
    )


# ---------------------------------------------------------------- eviction


@dataclass(frozen=True, slots=True)
class EvictionHeader:
    """A decoded eviction frame (for tests and clients)."""

    client: int
    reason: int
    server_protocol_version: int = 0
    server_protocol_version_min: int = 0


def encode_eviction(
    client: int, reason: int, server_version: int = 0, server_version_min: int = 0
) -> bytes:
    """A 256-byte Eviction frame (``size = 256``, ``command = 13``, reason at byte 255).

    The protocol window (bytes 144 max, 148 min, packed versions) travels only
    with reason 14 (IncompatibleProtocol) and must then satisfy
    ``1 <= min <= max``; for every other reason it must be zero. Raises
    ``ValueError`` otherwise, or for reason 0 / over 255.
    """
    if not 1 <= reason <= 255:
        raise ValueError(f"eviction reason {reason} out of range 1..255")
    if reason == EvictionReason.INCOMPATIBLE_PROTOCOL:
        if not 1 <= server_version_min <= server_version:
            raise ValueError(
                "incompatible-protocol eviction needs 1 <= server_version_min <= server_version"
            )
    elif server_version or server_version_min:
        raise ValueError("protocol window is only sent with reason 14 (IncompatibleProtocol)")
    buf = bytearray(HEADER_SIZE)
    _FRAME_HEAD.pack_into(buf, SIZE_OFFSET, HEADER_SIZE, 0, 0, HeaderCommand.EVICTION, 0)
    _EVICTION_TAIL.pack_into(buf, 128, *_lo_hi(client), server_version, server_version_min)
    buf[255] = reason
    return bytes(buf)


def decode_eviction(data: bytes | bytearray | memoryview) -> EvictionHeader:
    """Decode a 256-byte eviction frame; raises :class:`~.errors.InvalidFrame` if it is not one."""
    if len(data) < HEADER_SIZE:
        raise InvalidFrame(f"eviction needs {HEADER_SIZE} bytes, got {len(data)}", offset=0)
    size, _view, _release, command, _replica = _FRAME_HEAD.unpack_from(data, SIZE_OFFSET)
    if command != HeaderCommand.EVICTION:
        raise InvalidFrame(
            f"header command {command}, expected 13 (Eviction)", offset=COMMAND_OFFSET
        )
    if size != HEADER_SIZE:
        raise InvalidFrame(f"eviction size {size}, expected 256", offset=SIZE_OFFSET)
    lo, hi, version, version_min = _EVICTION_TAIL.unpack_from(data, 128)
    return EvictionHeader(lo | (hi << 64), data[255], version, version_min)


# ---------------------------------------------------------------- framer


class Framer:
    """Splits a byte stream into request frames, sans I/O (h11-style).

    ``feed(data)`` appends bytes; ``next_frame()`` returns ``(header, body)``
    for the next complete frame or ``None`` when more bytes are needed. The
    body is a ``memoryview`` the framer no longer touches (the caller may keep
    it). Call ``next_frame()`` until it returns ``None`` after each ``feed``.

    As soon as 52 bytes of a frame are buffered, ``size`` (offset 48) is
    checked: ``size < 256`` raises :class:`~.errors.InvalidFrame` and ``size >
    max_frame_size`` raises :class:`~.errors.FrameTooLarge`, before the body is
    waited for; at 61 bytes the ``command`` byte must be 5. These errors are
    fatal: the framer re-raises them on every later call. An
    :class:`~.errors.InvalidOperation` consumes its frame first, so the stream
    stays in sync (the server should still evict, reason 4).
    """

    __slots__ = ("max_frame_size", "_buf", "_checked", "_error")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE):
        if max_frame_size < HEADER_SIZE:
            raise ValueError(f"max_frame_size must be at least {HEADER_SIZE}")
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._checked = 0  # how far the current frame's head has been validated: 0, 52 or 61
        self._error: InvalidFrame | None = None

    @property
    def buffered(self) -> int:
        """Bytes held, not yet returned as a frame."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes; raises the fatal framing error as soon as the head shows one."""
        if self._error is not None:
            raise self._error
        self._buf += data
        self._check_head()

    def _check_head(self) -> int | None:
        """Validate what is buffered of the current frame's head; return its size once known."""
        buf = self._buf
        if len(buf) < SIZE_OFFSET + 4:
            return None
        size = _U32.unpack_from(buf, SIZE_OFFSET)[0]
        if self._checked < SIZE_OFFSET + 4:
            if size < HEADER_SIZE:
                self._error = InvalidFrame(
                    f"frame size {size} below {HEADER_SIZE}", offset=SIZE_OFFSET
                )
                raise self._error
            if size > self.max_frame_size:
                self._error = FrameTooLarge(
                    f"frame size {size} exceeds the maximum {self.max_frame_size}",
                    offset=SIZE_OFFSET,
                )
                raise self._error
            self._checked = SIZE_OFFSET + 4
        if self._checked < COMMAND_OFFSET + 1 and len(buf) > COMMAND_OFFSET:
            command = buf[COMMAND_OFFSET]
            if command != HeaderCommand.REQUEST:
                self._error = InvalidFrame(
                    f"header command {command}, expected 5 (Request)", offset=COMMAND_OFFSET
                )
                raise self._error
            self._checked = COMMAND_OFFSET + 1
        return size

    def next_frame(self) -> tuple[RequestHeader, memoryview] | None:
        """The next complete frame as ``(header, body)``, or ``None`` if more bytes are needed."""
        if self._error is not None:
            raise self._error
        size = self._check_head()
        if size is None or len(self._buf) < size:
            return None
        if len(self._buf) == size:
            frame = self._buf  # hand the whole buffer over: no copy
            self._buf = bytearray()
        else:
            frame = self._buf[:size]
            del self._buf[:size]
        self._checked = 0
        view = memoryview(frame)
        header = decode_request_header(
            view[:HEADER_SIZE]
        )  # may raise InvalidOperation; frame already consumed
        return header, view[HEADER_SIZE:]


# ---------------------------------------------------------------- result section

RESULT_FRAMED_OPERATIONS: frozenset[Operation] = frozenset(
    {
        Operation.REGISTER,
        Operation.CREATE_STREAM,
        Operation.UPDATE_STREAM,
        Operation.DELETE_STREAM,
        Operation.PURGE_STREAM,
        Operation.CREATE_TOPIC,
        Operation.UPDATE_TOPIC,
        Operation.DELETE_TOPIC,
        Operation.PURGE_TOPIC,
        Operation.CREATE_PARTITIONS,
        Operation.DELETE_PARTITIONS,
        Operation.CREATE_CONSUMER_GROUP,
        Operation.DELETE_CONSUMER_GROUP,
        Operation.CREATE_USER,
        Operation.UPDATE_USER,
        Operation.DELETE_USER,
        Operation.CHANGE_PASSWORD,
        Operation.UPDATE_PERMISSIONS,
        Operation.CREATE_PERSONAL_ACCESS_TOKEN,
        Operation.DELETE_PERSONAL_ACCESS_TOKEN,
        Operation.JOIN_CONSUMER_GROUP,
        Operation.LEAVE_CONSUMER_GROUP,
        Operation.STORE_CONSUMER_OFFSET,
        Operation.DELETE_CONSUMER_OFFSET,
    }
)
"""Operations whose reply body starts with a result section.

The SDK decides by the reply's ``operation`` byte (``core/sdk/src/vsr.rs``
``split_metadata_result``): every metadata op (128..149) except
``DELETE_SEGMENTS`` (138, which the crate's ``Operation::is_metadata`` leaves
out), plus the consumer-offset writes (161, 162), plus ``REGISTER`` whenever
the body is non-empty (so a login reply is always ``u32 0`` + payload).
Not framed: ``NON_REPLICATED`` reads, ``LOGOUT``, ``SEND_MESSAGES``,
``DELETE_SEGMENTS``.
"""

RESULT_FRAMED_COMMANDS: frozenset[Command] = frozenset(
    c for c, o in COMMAND_TO_OPERATION.items() if o in RESULT_FRAMED_OPERATIONS
)
"""The command codes whose replies are result-framed (same rule, keyed by code)."""

RESULT_OK = b"\x00\x00\x00\x00"
"""The 4-byte success result section (``count = 0``)."""

_RESULT_ERROR = struct.Struct("<III")


def is_result_framed(operation: int) -> bool:
    """Whether replies to ``operation`` carry the result section."""
    return operation in RESULT_FRAMED_OPERATIONS


def result_ok(payload: bytes | bytearray | memoryview = b"") -> bytes:
    """Success body: ``[count u32 = 0]`` then ``payload``."""
    return RESULT_OK + bytes(payload)


def result_error(code: int) -> bytes:
    """Committed business rejection body: ``[count u32 = 1][index u32 = 0][result u32 = code]``."""
    if not 1 <= code <= 0xFFFFFFFF:
        raise ValueError(f"result code {code} must be a nonzero u32")
    return _RESULT_ERROR.pack(1, 0, code)


def result_prefix(operation: int) -> bytes:
    """``RESULT_OK`` when ``operation`` is result-framed, else ``b""`` (for buffer lists)."""
    return RESULT_OK if operation in RESULT_FRAMED_OPERATIONS else b""


def reply_body(operation: int, payload: bytes | bytearray | memoryview = b"") -> bytes:
    """A success body for ``operation``: the payload, behind ``RESULT_OK`` when result-framed."""
    return result_prefix(operation) + bytes(payload)


def split_result(body: bytes | bytearray | memoryview) -> tuple[int, memoryview]:
    """Read a result section: ``(0, payload)`` on success, ``(code, empty)`` on a rejection.

    Raises :class:`~headwater.codec.errors.InvalidFormat` when the body is too
    short for the count or the entries it claims (never reads a short body as
    success). For tests and clients.
    """
    view = memoryview(body)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    if len(view) < 4:
        raise InvalidFormat("result section: missing count", offset=0)
    count = _U32.unpack_from(view, 0)[0]
    if count == 0:
        return 0, view[4:]
    end = 4 + 8 * count
    if len(view) < end:
        raise InvalidFormat(
            f"result section: {count} entries claimed, body has {len(view)} bytes", offset=4
        )
    code = _U32.unpack_from(view, 8)[0]
    return code, view[end:end]
