"""Codec errors: each class carries the Iggy error code a peer should hear.

The batch layout is Iggy's, so batch errors use Iggy's numbering
(``core/common/src/error/iggy_error.rs`` in apache/iggy: a variant's value is
its wire code). The Kafka edge maps these to Kafka codes in its own front-end.

Every error records *where* it failed when that is known: ``offset`` is the
byte offset inside the buffer that was being decoded, ``frame_index`` the
0-based index of the frame inside a batch.
"""

from __future__ import annotations


class CodecError(Exception):
    """Base of every codec error. ``code`` is the Iggy error code (u32)."""

    code: int = 4  # InvalidFormat

    def __init__(self, message: str, *, offset: int | None = None, frame_index: int | None = None):
        where = []
        if frame_index is not None:
            where.append(f"frame {frame_index}")
        if offset is not None:
            where.append(f"byte {offset}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.offset = offset
        self.frame_index = frame_index


class InvalidFormat(CodecError):
    """Bytes that do not decode: short buffer, bad length, frame outside the blob (Iggy 4)."""

    code = 4


class InvalidMessagesCount(CodecError):
    """``message_count`` does not match the frames walked, or is zero (Iggy 4009)."""

    code = 4009


class InvalidMessageChecksum(CodecError):
    """A frame's XxHash3-64 checksum does not match its bytes (Iggy 4027)."""

    code = 4027


class InvalidMessageTimestampDelta(CodecError):
    """A frame's timestamp_delta breaks the u32-microsecond bound (Iggy 4038)."""

    code = 4038


class InvalidBatchChecksum(CodecError):
    """The batch checksum does not match header fields + frame checksums (Iggy 4039)."""

    code = 4039


class InvalidReservedField(CodecError):
    """A reserved region (batch bytes 52..256 or frame bytes 40..48) is nonzero (Iggy 4101)."""

    code = 4101


class InvalidHeaderKind(CodecError):
    """A user-header TLV field has kind 0 or an undecodable kind (Iggy 4040)."""

    code = 4040


class InvalidHeaderKey(CodecError):
    """A user-header key is not a valid String field (Iggy 4018)."""

    code = 4018


class InvalidHeaderValue(CodecError):
    """A user-header value has a bad length for its kind (Iggy 4019)."""

    code = 4019
