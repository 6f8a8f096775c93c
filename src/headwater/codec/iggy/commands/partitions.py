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

from ..codes import Command
from ..primitives import Identifier
from ..schema import IDENTIFIER, U32, Field, request

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


_FIELDS = [
    Field("stream_id", IDENTIFIER),
    Field("topic_id", IDENTIFIER),
    Field("partitions_count", U32),
]
CREATE_PARTITIONS = request(Command.CREATE_PARTITIONS, CreatePartitions, _FIELDS)
DELETE_PARTITIONS = request(Command.DELETE_PARTITIONS, DeletePartitions, _FIELDS)

decode_create_partitions, encode_create_partitions = CREATE_PARTITIONS.codec()
decode_delete_partitions, encode_delete_partitions = DELETE_PARTITIONS.codec()
