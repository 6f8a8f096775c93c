"""Segment commands.

Sources: ``commands.mdx`` "Segments"; crate ``requests/segments/delete_segments.rs``,
``consensus/operation.rs`` (``is_metadata`` leaves DeleteSegments out, so its
reply is NOT result-framed).

================  ====  ===  ==========================================================  ==================
command           code  op   request body                                                reply payload
================  ====  ===  ==========================================================  ==================
DELETE_SEGMENTS   503   138  [stream_id Identifier][topic_id Identifier]                 empty (NOT framed)
                             [partition_id u32][segments_count u32]
================  ====  ===  ==========================================================  ==================

Deletes the ``segments_count`` oldest sealed segments of the partition.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..primitives import Identifier, Reader, decode_identifier, encode_identifier
from ._common import Buffer

__all__ = ["DeleteSegments", "decode_delete_segments", "encode_delete_segments"]

_TAIL = struct.Struct("<II")


@dataclass(frozen=True, slots=True)
class DeleteSegments:
    stream_id: Identifier
    topic_id: Identifier
    partition_id: int
    segments_count: int


def decode_delete_segments(body: Buffer) -> DeleteSegments:
    """``[stream_id][topic_id][partition_id u32][segments_count u32]``; raises :class:`InvalidFormat`."""
    r = Reader(body)
    stream_id = decode_identifier(r, "stream_id")
    topic_id = decode_identifier(r, "topic_id")
    partition_id = r.u32("partition_id")
    segments_count = r.u32("segments_count")
    r.expect_end("delete_segments")
    return DeleteSegments(stream_id, topic_id, partition_id, segments_count)


def encode_delete_segments(value: DeleteSegments) -> bytes:
    return (
        encode_identifier(value.stream_id)
        + encode_identifier(value.topic_id)
        + _TAIL.pack(value.partition_id, value.segments_count)
    )
