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

from dataclasses import dataclass

from ..codes import Command
from ..primitives import Identifier
from ..schema import IDENTIFIER, U32, Field, request

__all__ = ["DeleteSegments", "decode_delete_segments", "encode_delete_segments"]


@dataclass(frozen=True, slots=True)
class DeleteSegments:
    stream_id: Identifier
    topic_id: Identifier
    partition_id: int
    segments_count: int


DELETE_SEGMENTS = request(
    Command.DELETE_SEGMENTS,
    DeleteSegments,
    [
        Field("stream_id", IDENTIFIER),
        Field("topic_id", IDENTIFIER),
        Field("partition_id", U32),
        Field("segments_count", U32),
    ],
)
decode_delete_segments, encode_delete_segments = DELETE_SEGMENTS.codec()
