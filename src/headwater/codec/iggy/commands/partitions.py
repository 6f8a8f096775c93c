"""Partition commands.

Sources: ``commands.mdx`` "Partitions"; crate ``requests/partitions/*.rs``.

==================  ====  ===  =====================================================  ==============
command             code  op   request body                                           reply payload
==================  ====  ===  =====================================================  ==============
CREATE_PARTITIONS   402   136  [stream_id Identifier][topic_id Identifier][count u32]  empty (framed)
DELETE_PARTITIONS   403   137  [stream_id Identifier][topic_id Identifier][count u32]  empty (framed)
==================  ====  ===  =====================================================  ==============

The crate caps one request at 1000 partitions (``MAX_PARTITIONS_PER_REQUEST``);
that is a server rule, not checked here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..primitives import Identifier, Reader, decode_identifier, encode_identifier
from ._common import U32, Buffer

__all__ = [
    "MAX_PARTITIONS_PER_REQUEST",
    "CreatePartitions",
    "DeletePartitions",
    "decode_create_partitions",
    "encode_create_partitions",
    "decode_delete_partitions",
    "encode_delete_partitions",
]

MAX_PARTITIONS_PER_REQUEST = 1000


@dataclass(frozen=True, slots=True)
class CreatePartitions:
    stream_id: Identifier
    topic_id: Identifier
    partitions_count: int


@dataclass(frozen=True, slots=True)
class DeletePartitions:
    """Deletes the last ``partitions_count`` partitions."""

    stream_id: Identifier
    topic_id: Identifier
    partitions_count: int


def _read(body: Buffer, what: str) -> tuple[Identifier, Identifier, int]:
    r = Reader(body)
    stream_id = decode_identifier(r, "stream_id")
    topic_id = decode_identifier(r, "topic_id")
    count = r.u32("partitions_count")
    r.expect_end(what)
    return stream_id, topic_id, count


def decode_create_partitions(body: Buffer) -> CreatePartitions:
    """``[stream_id][topic_id][partitions_count u32]``; raises :class:`InvalidFormat`."""
    return CreatePartitions(*_read(body, "create_partitions"))


def encode_create_partitions(value: CreatePartitions) -> bytes:
    return (
        encode_identifier(value.stream_id)
        + encode_identifier(value.topic_id)
        + U32.pack(value.partitions_count)
    )


def decode_delete_partitions(body: Buffer) -> DeletePartitions:
    """``[stream_id][topic_id][partitions_count u32]``; raises :class:`InvalidFormat`."""
    return DeletePartitions(*_read(body, "delete_partitions"))


def encode_delete_partitions(value: DeletePartitions) -> bytes:
    return (
        encode_identifier(value.stream_id)
        + encode_identifier(value.topic_id)
        + U32.pack(value.partitions_count)
    )
