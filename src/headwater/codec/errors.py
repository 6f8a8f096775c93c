"""Codec errors: each class carries the Iggy error code a peer should hear.

The batch layout is Iggy's, so batch errors use Iggy's numbering
(``core/common/src/error/iggy_error.rs`` in apache/iggy: a variant's value is
its wire code). The Kafka edge maps these to Kafka codes in its own front-end.

Every error records *where* it failed when that is known: ``offset`` is the
byte offset inside the buffer that was being decoded, ``frame_index`` the
0-based index of the frame inside a batch.

Class tree (code in brackets)::

    CodecError [4]
      InvalidFormat [4]                 bytes that do not decode
        TruncatedBatch [4]              fewer than 256 header bytes
        InvalidBatchLength [4]          batch_length != bytes given (or < 256)
        FrameOutOfBounds [4]            a frame header or body runs past the blob
        InvalidOffsetDelta [4]          offset_delta != frame index
      InvalidMessagesCount [4009]       message_count != frames walked, or zero
      InvalidMessageChecksum [4027]     frame checksum mismatch
      InvalidMessageTimestampDelta [4038]
      InvalidBatchChecksum [4039]       batch checksum mismatch
      InvalidReservedField [4101]       nonzero reserved bytes
      TooBigUserHeaders [4017]          user-headers block over 100 000 bytes
      InvalidHeaderKey [4018]           bad key field in a TLV block
        DuplicateOptionKey [4018]       a key repeated in an options block
      InvalidHeaderValue [4019]         bad value field in a TLV block
      InvalidHeaderKind [4040]          kind 0, or a kind a typed accessor cannot read
      OptionsBlockTooLarge [4043]       options block over 1024 entries or 100 000 bytes

Iggy's own server answers structural batch errors (everything under
``InvalidFormat`` here) with ``InvalidCommand`` (3) rather than 4; see
``core/server_common/src/send_messages.rs``, ``batch_error``.
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


class TruncatedBatch(InvalidFormat):
    """Fewer than the 256 batch-header bytes were given (Iggy 4)."""


class InvalidBatchLength(InvalidFormat):
    """``batch_length`` (header bytes 32..40) is not the number of bytes given (Iggy 4)."""


class FrameOutOfBounds(InvalidFormat):
    """A frame's 48-byte header or its payload + user headers run past the blob (Iggy 4)."""


class InvalidOffsetDelta(InvalidFormat):
    """A frame's ``offset_delta`` is not its index in the batch (Iggy 4).

    Iggy's server does not check this (it trusts ``base_offset + offset_delta``);
    Headwater's storage relies on it, and every Iggy producer writes the index.
    """


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


class TooBigUserHeaders(CodecError):
    """A user-headers block is longer than 100 000 bytes (Iggy 4017)."""

    code = 4017


class InvalidHeaderKind(CodecError):
    """A user-header TLV field has kind 0, or a kind a typed accessor cannot decode (Iggy 4040)."""

    code = 4040


class InvalidHeaderKey(CodecError):
    """A user-header or option key field is malformed: length, kind or UTF-8 (Iggy 4018)."""

    code = 4018


class DuplicateOptionKey(InvalidHeaderKey):
    """An options block names the same key twice (Iggy 4018)."""


class InvalidHeaderValue(CodecError):
    """A user-header value is missing or has a bad length for its kind (Iggy 4019)."""

    code = 4019


class OptionsBlockTooLarge(CodecError):
    """An options block has more than 1024 entries or 100 000 bytes (Iggy 4043)."""

    code = 4043
