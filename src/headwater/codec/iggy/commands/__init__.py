"""Request and reply payload codecs of every Iggy 0.11.0 command, and one table of them all.

One module per family (``system``, ``users``, ``tokens``, ``streams``,
``topics``, ``partitions``, ``segments``, ``messages``, ``offsets``,
``groups``; the login-register bodies are in :mod:`..version`). Each module
declares its requests and replies once (:mod:`..schema`: fields in wire order
with their wire types) and derives from that ``decode_<command>(body) ->
dataclass`` and ``encode_<command>(dataclass) -> bytes`` for every command,
``encode_<reply>`` / ``decode_<reply>`` for every reply payload. Reply
encoders return the PAYLOAD: the result section of result-framed operations
is added by :func:`..framing.reply_body`.

:data:`COMMANDS` maps each :class:`~..codes.Command` to a :class:`CommandSpec`,
built from the declarations (:data:`..schema.REQUESTS`); :func:`decode_request`
dispatches on a code. How to add a command: :mod:`..schema` and
``docs/iggy-wire.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..codes import COMMAND_TO_OPERATION, Command, Operation
from ..errors import InvalidCommandCode
from ..framing import RESULT_FRAMED_OPERATIONS
from ..schema import REQUESTS, Record, WireType
from .. import version  # noqa: F401  (declares LOGIN_REGISTER*)
from . import (  # noqa: F401  (each module declares its commands)
    groups,
    messages,
    offsets,
    partitions,
    segments,
    streams,
    system,
    tokens,
    topics,
    users,
)

__all__ = ["CommandSpec", "COMMANDS", "decode_request", "encode_request_body"]


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """What the codec knows about one command, derived from its declaration.

    ``reply_decode`` is ``None`` when a successful reply has an empty payload.
    ``empty_reply`` says what an empty payload means for commands that also
    have a typed one (``"not found"``, ``"none"``), else ``""``.
    ``request_schema`` / ``reply_schema``: the declarations themselves
    (:mod:`..schema`), for the JSON mapping and the byte inspector.
    """

    command: Command
    operation: Operation
    request_type: type
    decode: Callable[[Any], Any]
    encode: Callable[[Any], bytes]
    reply_decode: Callable[[Any], Any] | None
    result_framed: bool
    empty_reply: str = ""
    request_schema: Record | None = None
    reply_schema: WireType | None = None


def _spec(record: Record) -> CommandSpec:
    assert record.command is not None
    operation = COMMAND_TO_OPERATION.get(record.command, Operation.NON_REPLICATED)
    decode, encode = record.codec()
    reply = record.reply
    return CommandSpec(
        record.command,
        operation,
        record.cls,
        decode,
        encode,
        None if reply is None else reply.payload_decoder,
        operation in RESULT_FRAMED_OPERATIONS,
        record.empty_reply,
        record,
        reply,
    )


COMMANDS: dict[Command, CommandSpec] = {c: _spec(REQUESTS[c]) for c in Command if c in REQUESTS}
"""Every command of ``commands.mdx``, by code, from the declarations in :data:`..schema.REQUESTS`."""

_BY_TYPE: dict[type, CommandSpec] = {s.request_type: s for s in COMMANDS.values()}


def decode_request(command_code: int, body: bytes | bytearray | memoryview) -> Any:
    """Decode a request body by its command code.

    Raises :class:`~..errors.InvalidCommandCode` (Iggy 3) for an unknown
    code; the decoder's :class:`~headwater.codec.errors.CodecError` otherwise.
    Register bodies (40) are decoded as the password shape only: use
    :func:`..version.decode_login_register_any` for ``operation = 1``.
    """
    try:
        spec = COMMANDS[Command(command_code)]
    except ValueError:
        raise InvalidCommandCode(f"unknown command code {command_code}") from None
    return spec.decode(body)


def encode_request_body(request: Any) -> tuple[Command, bytes]:
    """The command code and body bytes of a request dataclass (for tests and clients)."""
    spec = _BY_TYPE.get(type(request))
    if spec is None:
        raise ValueError(f"not a request dataclass: {type(request).__name__}")
    return spec.command, spec.encode(request)
