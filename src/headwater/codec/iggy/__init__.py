"""Sans-I/O codec for Apache Iggy's binary protocol 0.11.0.

Modules, one job each:

* :mod:`.codes`: command codes, operations, eviction reasons, Iggy error codes;
* :mod:`.framing`: the 256-byte Request / Reply / Eviction headers, the
  result section, and the :class:`~.framing.Framer` (feed bytes, pull frames);
* :mod:`.version`: packed protocol version, the login-register bodies and reply;
* :mod:`.primitives`: Identifier, Consumer, Partitioning, PollingStrategy,
  Permissions and the bounds-checked :class:`~.primitives.Reader`;
* :mod:`.schema`: the declaration language of command bodies and replies (wire
  types, fields, records), the codec compiled from it, and the field walkers;
* :mod:`.commands`: one declaration per request and reply, per command family,
  the codecs derived from them, and the :data:`~.commands.COMMANDS` table;
* :mod:`.errors`: the errors, each carrying its Iggy code and, when the
  session must end, an eviction reason.

Pure functions over bytes: no asyncio, sockets, files or clocks.
"""

from .codes import Command, EvictionReason, HeaderCommand, IggyErrorCode, Operation
from .commands import COMMANDS, CommandSpec, decode_request
from .errors import (
    FrameTooLarge,
    InvalidCommandCode,
    InvalidFrame,
    InvalidIdentifier,
    InvalidOperation,
    MalformedLogin,
    eviction_reason_of,
    is_frame_fatal,
)
from .framing import (
    HEADER_SIZE,
    RESULT_OK,
    Framer,
    RequestHeader,
    encode_eviction,
    encode_reply,
    is_result_framed,
    reply_body,
    reply_header_for,
    result_error,
    result_ok,
)
from .version import PROTOCOL_VERSION, PROTOCOL_VERSION_MIN, is_protocol_compatible

__all__ = [
    "Command",
    "EvictionReason",
    "HeaderCommand",
    "IggyErrorCode",
    "Operation",
    "COMMANDS",
    "CommandSpec",
    "decode_request",
    "FrameTooLarge",
    "InvalidCommandCode",
    "InvalidFrame",
    "InvalidIdentifier",
    "InvalidOperation",
    "MalformedLogin",
    "eviction_reason_of",
    "is_frame_fatal",
    "HEADER_SIZE",
    "RESULT_OK",
    "Framer",
    "RequestHeader",
    "encode_eviction",
    "encode_reply",
    "is_result_framed",
    "reply_body",
    "reply_header_for",
    "result_error",
    "result_ok",
    "PROTOCOL_VERSION",
    "PROTOCOL_VERSION_MIN",
    "is_protocol_compatible",
]
