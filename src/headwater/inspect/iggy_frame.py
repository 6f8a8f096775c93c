"""Field trees of captured Iggy 0.11.0 frames: requests, replies and evictions, with their bodies.

Layouts: ``framing.mdx`` (every frame is a 256-byte header then ``size - 256``
body bytes; the header layouts are in :mod:`headwater.codec.iggy.framing`'s
docstring), ``commands.mdx`` for the bodies, ``encodings.mdx`` for Identifier
(``[kind u8][len u8][value]``) and Partitioning. All little-endian.

Bodies shown field by field: SendMessages (metadata, then the batch) and the
PollMessages reply (partition, offset, count, then the batches), the result
section of result-framed replies, and an error reply's status. Every other
command's body is decoded with Headwater's own codec
(:data:`headwater.codec.iggy.commands.COMMANDS`) and shown as its decoded
fields; those lines span the whole body (the codec does not report per-field
offsets). A capture may hold several frames back to back.
"""

from __future__ import annotations

from ..codec.errors import InvalidFormat
from ..codec.iggy.codes import (
    Command,
    EvictionReason,
    HeaderCommand,
    IggyErrorCode,
    OPERATION_TO_COMMAND,
    Operation,
)
from ..codec.iggy.commands import COMMANDS
from ..codec.iggy.framing import RESULT_FRAMED_OPERATIONS
from .iggy_batch import BATCH_HEADER_SIZE, batch, batches
from .tree import Cursor, LayoutError, Node, building

__all__ = ["frames", "HEADER_SIZE"]

HEADER_SIZE = 256


def _enum(enum, value: int) -> str:
    try:
        return f"{value} ({enum(value).name})"
    except ValueError:
        return f"{value} (unknown)"


def _hex(value: int) -> str:
    return f"0x{value:x}" if value else "0"


def _zero(c: Cursor, name: str, n: int, about: str = "zero") -> None:
    c.raw(name, n, about=about, show=lambda b: "zero" if not any(b) else f"0x{b.hex()}")


def _head(c: Cursor) -> int:
    """Bytes 0..128, the same in requests and replies; returns ``size``."""
    c.int("checksum", "u128", "zero on client frames", show=_hex)
    c.int("checksum_body", "u128", "zero", show=_hex)
    c.int("cluster", "u128", "zero", show=_hex)
    size = c.int("size", "u32", "256 + body length")
    c.int("view", "u32")
    c.int("release", "u32")
    c.int("command", "u8", show=lambda v: _enum(HeaderCommand, v))
    c.int("replica", "u8")
    _zero(c, "reserved", 66)
    return size


def _request_header(c: Cursor) -> tuple[int, int]:
    """Returns (size, command code)."""
    with c.group("header", "request header", about="framing.mdx, RequestHeader"):
        size = _head(c)
        c.int("client", "u128", "session identity chosen by the client", show=_hex)
        c.int("request_checksum", "u128", show=_hex)
        c.int("timestamp", "u64")
        c.int("request", "u64", "per-client request number")
        operation = c.int("operation", "u8", show=lambda v: _enum(Operation, v))
        _zero(c, "padding", 7)
        c.int("session", "u64", "from the login reply")
        c.int("user_id", "u32")
        code = c.int("command_code", "u32", "operation 2 only", show=lambda v: _enum(Command, v) if v else "0")
        _zero(c, "reserved", 56)
    if operation != Operation.NON_REPLICATED:
        code = int(OPERATION_TO_COMMAND.get(operation, code))
    return size, code


def _reply_header(c: Cursor) -> tuple[int, int, int]:
    """Returns (size, operation, status)."""
    with c.group("header", "reply header", about="framing.mdx, ReplyHeader"):
        size = _head(c)
        c.int("request_checksum", "u128", "echoed", show=_hex)
        c.int("context", "u128", show=_hex)
        c.int("client", "u128", "echoed", show=_hex)
        c.int("op", "u64")
        c.int("commit", "u64")
        c.int("timestamp", "u64", "echoed")
        c.int("request", "u64", "echoed; the client correlates on it")
        operation = c.int("operation", "u8", "echoed", show=lambda v: _enum(Operation, v))
        _zero(c, "padding", 7)
        status = c.int("status", "u32", "0 = ok, else an IggyError code",
                       show=lambda v: "0 (ok)" if v == 0 else _enum(IggyErrorCode, v))
        _zero(c, "reserved", 36)
    return size, operation, status


def _eviction(c: Cursor) -> int:
    with c.group("header", "eviction header", about="framing.mdx, EvictionHeader"):
        _zero(c, "checksums_and_cluster", 48, "")
        size = c.int("size", "u32", "always 256")
        _zero(c, "view_release", 8, "")
        c.int("command", "u8", show=lambda v: _enum(HeaderCommand, v))
        _zero(c, "reserved", 67, "")
        c.int("client", "u128", show=_hex)
        c.int("server_protocol_version", "u32", "reason 14 only")
        c.int("server_protocol_version_min", "u32", "reason 14 only")
        _zero(c, "reserved", 106, "")
        c.int("reason", "u8", show=lambda v: _enum(EvictionReason, v))
    return size


def _identifier(c: Cursor, name: str) -> None:
    with c.group(name, "Identifier") as node:
        kind = c.int("kind", "u8", show=lambda v: {1: "1 (numeric)", 2: "2 (string)"}.get(v, f"{v} (invalid)"))
        length = c.int("length", "u8")
        if kind == 1:
            if length != 4:
                raise c.fail(f"a numeric identifier has length 4, not {length}", c.pos - 1)
            node.value = str(c.int("value", "u32"))
        else:
            node.value = c.raw("value", length, "utf8").decode("utf-8", "replace")


def _send_messages(c: Cursor, end: int) -> None:
    with c.group("SendMessages", "request body", about="commands.mdx, SendMessages"):
        c.int("metadata_length", "u32", "bytes from stream_id through messages_count")
        _identifier(c, "stream_id")
        _identifier(c, "topic_id")
        with c.group("partitioning", "Partitioning") as part:
            kind = c.int("kind", "u8", show=lambda v: {1: "1 (balanced)", 2: "2 (partition id)",
                                                       3: "3 (messages key)"}.get(v, f"{v} (invalid)"))
            length = c.int("length", "u8")
            if kind == 2 and length == 4:
                part.value = f"partition {c.int('partition_id', 'u32')}"
            elif length:
                c.raw("value", length)
        c.int("messages_count", "u32")
        batch(c)


def _poll_reply(c: Cursor) -> None:
    with c.group("PollMessages", "reply payload", about="commands.mdx, PollMessages"):
        c.int("partition_id", "u32")
        c.int("current_offset", "u64")
        c.int("messages_count", "u32")
        batches(c)


def _decoded(c: Cursor, title: str, decode, end: int) -> None:
    """A body our codec decodes whole: one line per decoded field, each spanning the body."""
    start = c.pos
    body = bytes(c.data[start:end])
    with c.group(title, "decoded body", about="fields decoded by headwater.codec.iggy") as node:
        try:
            value = decode(body)
        except InvalidFormat as e:
            where = getattr(e, "offset", None)
            raise c.fail(f"{title}: {e}", start + where if isinstance(where, int) else start) from None
        for name in getattr(value, "__dataclass_fields__", {}):
            field_value = getattr(value, name)
            c.leaf(name, type(field_value).__name__, _short(field_value), end - start, pos=start)
        c.pos = end
        node.value = type(value).__name__


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _request(c: Cursor, index: int) -> None:
    start = c.pos
    with c.group(f"request[{index}]", "Iggy request frame") as node:
        size, code = _request_header(c)
        end = _frame_end(c, start, size)
        node.value = _enum(Command, code)
        if code == Command.SEND_MESSAGES:
            _send_messages(c, end)
        elif end > c.pos:
            spec = COMMANDS.get(code)
            if spec is None:
                c.raw("body", end - c.pos, about="no decoder for this command")
            else:
                _decoded(c, spec.request_type.__name__, spec.decode, end)
        if c.pos != end:
            raise c.fail(f"{end - c.pos} body bytes left over", c.pos)


def _reply(c: Cursor, index: int, command: int | None) -> None:
    start = c.pos
    with c.group(f"reply[{index}]", "Iggy reply frame") as node:
        size, operation, status = _reply_header(c)
        end = _frame_end(c, start, size)
        node.value = "ok" if status == 0 else _enum(IggyErrorCode, status)
        if status != 0 and end != c.pos:
            raise c.fail("an error reply has an empty body", c.pos)
        if operation in RESULT_FRAMED_OPERATIONS and end > c.pos:
            with c.group("result", "result section", about="framing.mdx, Result section"):
                count = c.int("count", "u32", "0 = success")
                for i in range(count):
                    with c.group(f"result[{i}]"):
                        c.int("index", "u32")
                        c.int("code", "u32", show=lambda v: _enum(IggyErrorCode, v))
        if command is None and operation != Operation.NON_REPLICATED:
            command = OPERATION_TO_COMMAND.get(operation)
        if end > c.pos:
            if command == Command.POLL_MESSAGES:
                _poll_reply(c)
            else:
                spec = COMMANDS.get(command) if command is not None else None
                if spec is None or spec.reply_decode is None:
                    c.raw("payload", end - c.pos,
                          about="pass --command to decode a NonReplicated reply" if command is None else "")
                else:
                    _decoded(c, "payload", spec.reply_decode, end)
        c.pos = max(c.pos, end)


def _frame_end(c: Cursor, start: int, size: int) -> int:
    if size < HEADER_SIZE:
        raise c.fail(f"size {size} is below the 256-byte header", start + 48)
    if start + size > c.end:
        raise c.fail(f"size {size} runs past the end of the input ({c.end - start} bytes from here)", start + 48)
    return start + size


def frames(data: bytes, *, command: int | None = None, name: str = "capture") -> Node:
    """Every Iggy frame in ``data``, back to back. ``command`` names the command a
    reply answers when its header cannot (operation 2, NonReplicated)."""
    root = Node(name, "Iggy frames")
    c = Cursor(data, root)
    i = 0
    with building(root, c):
        while c.remaining > 0:
            if c.remaining < HEADER_SIZE:
                raise c.fail(f"a frame header is {HEADER_SIZE} bytes, {c.remaining} left")
            kind = c.data[c.pos + 60]
            if kind == HeaderCommand.REQUEST:
                _request(c, i)
            elif kind == HeaderCommand.REPLY:
                _reply(c, i, command)
            elif kind == HeaderCommand.EVICTION:
                with c.group(f"eviction[{i}]", "Iggy eviction frame"):
                    _eviction(c)
            else:
                raise c.fail(f"header byte 60 (command) is {kind}: not 5 (request), 8 (reply) or 13 (eviction)",
                             c.pos + 60)
            i += 1
        root.value = f"{i} frame{'s' if i != 1 else ''}"
    return root


def looks_like_frame(data: bytes) -> bool:
    """A plausible Iggy frame: byte 60 is 5, 8 or 13 and the size at 48 fits the input."""
    if len(data) < HEADER_SIZE or data[60] not in (5, 8, 13):
        return False
    size = int.from_bytes(data[48:52], "little")
    return HEADER_SIZE <= size <= len(data)


def looks_like_batch(data: bytes) -> bool:
    """A plausible batch: batch_length at 32 in 256..len and zero reserved bytes."""
    if len(data) < BATCH_HEADER_SIZE:
        return False
    length = int.from_bytes(data[32:40], "little")
    return BATCH_HEADER_SIZE <= length <= len(data) and not any(data[52:256])


__all__ += ["looks_like_frame", "looks_like_batch", "LayoutError"]
