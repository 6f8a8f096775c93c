"""Errors of the Iggy binary-protocol codec.

Every class subclasses :class:`headwater.codec.errors.CodecError`, so a caller
that catches ``CodecError`` catches everything this package raises. Each class
carries two hints for the connection that hit it, h2-style:

* ``code``: the Iggy error code (``IggyError`` in ``core/common/src/error/
  iggy_error.rs``) to put in a reply's ``status`` when the request can still be
  answered (the frame boundaries are intact, only the body is bad);
* ``eviction_reason``: when not ``None``, the :class:`~.codes.EvictionReason`
  the server should send in an Eviction frame instead, because the session (or
  the byte stream) cannot go on.

``frame_fatal`` says whether the byte stream itself is broken (a bad ``size``
or a header that is not a request): the connection must be closed after
whatever it sends, since the next frame boundary is unknown.
"""

from __future__ import annotations

from ..errors import CodecError, InvalidFormat

__all__ = [
    "CodecError",
    "InvalidFormat",
    "InvalidFrame",
    "FrameTooLarge",
    "InvalidOperation",
    "InvalidCommandCode",
    "InvalidIdentifier",
    "MalformedLogin",
    "eviction_reason_of",
    "is_frame_fatal",
]


class InvalidFrame(InvalidFormat):
    """The 256-byte header is not a client request: ``size < 256`` or ``command != 5`` (Iggy 4).

    The stream cannot be re-synchronised: close the connection.
    """

    code = 4
    eviction_reason: int | None = 6  # InvalidRequestBodySize
    frame_fatal = True


class FrameTooLarge(InvalidFrame):
    """The declared ``size`` exceeds the configured ``max_frame_size`` (Iggy 4029, CommandLengthError).

    Raised before a single body byte is buffered. Close the connection.
    """

    code = 4029
    eviction_reason: int | None = 6  # InvalidRequestBodySize
    frame_fatal = True


class InvalidOperation(CodecError):
    """The header's ``operation`` byte is 0, reserved for the server (64..127) or unknown (Iggy 3).

    The frame was consumed whole, so the stream is still in sync; the server
    answers with an Eviction, reason 4 (InvalidRequestOperation).
    """

    code = 3
    eviction_reason: int | None = 4  # InvalidRequestOperation
    frame_fatal = False

    def __init__(
        self, message: str, *, offset: int | None = None, client: int = 0, operation: int = 0
    ):
        super().__init__(message, offset=offset)
        self.client = client
        self.operation = operation


class InvalidCommandCode(CodecError):
    """A command code that no decoder handles (Iggy 3, InvalidCommand). Answer with ``status = 3``."""

    code = 3
    eviction_reason: int | None = None
    frame_fatal = False


class InvalidIdentifier(InvalidFormat):
    """An Identifier with an unknown kind, a numeric length other than 4, or an empty string (Iggy 6)."""

    code = 6
    eviction_reason: int | None = None
    frame_fatal = False


class MalformedLogin(InvalidFormat):
    """A login-register body without a decodable ClientVersionInfo prefix (Iggy 4).

    Per ``connection-lifecycle.mdx`` the server answers with an Eviction,
    reason 15 (MalformedLogin), with a zero protocol window.
    """

    code = 4
    eviction_reason: int | None = 15  # MalformedLogin
    frame_fatal = False


def eviction_reason_of(error: CodecError) -> int | None:
    """The eviction reason an error asks for, or ``None`` for a plain status reply.

    Works for every ``CodecError`` (the shared base classes carry no reason).
    """
    return getattr(error, "eviction_reason", None)


def is_frame_fatal(error: CodecError) -> bool:
    """Whether the byte stream is broken after ``error`` (the connection must close)."""
    return bool(getattr(error, "frame_fatal", False))
