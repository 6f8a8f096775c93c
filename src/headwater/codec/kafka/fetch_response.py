"""FetchResponse (api key 1) bodies, versions 4-17, written straight to bytes.

Source: Kafka's ``FetchResponse.json``. The generic encoder (kio, ``messages.encode``) copies a
partition's records into its output buffer after the caller has already joined the record
batches into one ``bytes``: two copies of every fetched byte. Here the body is one
``b"".join`` of small header pieces and the caller's record batches themselves, so each fetched
byte is copied once; the result is identical to kio's encoding of the same response
(``tests/unit/codec/kafka/test_kafka_fetch_response.py``). All integers big-endian; "compact" (v12+,
flexible) means an unsigned-varint length + 1 (0 = null) and a tagged-field section after each
structure, written empty (a single 0 byte: every tagged field here has its default)::

    FetchResponse      throttle_time_ms int32 | error_code int16 (v7+) | session_id int32 (v7+) |
                       responses [FetchableTopicResponse] | tagged fields (v12+; node_endpoints, v16+,
                       is tag 0 and always empty here, so never written)
    FetchableTopic     topic string (v4-12) | topic_id uuid, 16 bytes, None as zeros (v13+) | partitions [PartitionData]
    PartitionData      partition_index int32 | error_code int16 | high_watermark int64 |
                       last_stable_offset int64 | log_start_offset int64 (v5+) |
                       aborted_transactions nullable [producer_id int64, first_offset int64] |
                       preferred_read_replica int32 (v11+) | records nullable bytes
                       (diverging_epoch, current_leader and snapshot_id, tags 0-2 from v12, keep
                       their defaults and are not written)

Arrays are int32 counts (-1 = null) before v12. Strings are int16-length UTF-8 before v12,
compact from v12. Raises ``ValueError`` for a version outside 4-17.
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple, Sequence

from .guard import uvarint

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I16_I32 = struct.Struct(">hi")
_PARTITION = struct.Struct(">ihqq")  # partition_index, error_code, high_watermark, last_stable_offset
_I64 = struct.Struct(">q")
_PAIR = struct.Struct(">qq")
MIN_VERSION, MAX_VERSION = 4, 17
_EMPTY_TAGS = b"\x00"
_NIL_UUID = bytes(16)  # a null topic id (kio reads the all-zero id as None)


class Partition(NamedTuple):
    """One partition's answer: the fields of ``PartitionData`` this broker sets.

    ``aborted``: (producer_id, first_offset) pairs, or None (null: read_uncommitted);
    ``records``: the record batches, concatenated on the wire, or None (null)."""

    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: Sequence[tuple[int, int]] | None
    preferred_read_replica: int
    records: Sequence[bytes] | None


class Topic(NamedTuple):
    """One topic's answer: its name (v4-12) or id (v13+) and its partitions."""

    name: str | None
    topic_id: uuid.UUID | None
    partitions: Sequence[Partition]


def _count(n: int | None, flexible: bool) -> bytes:
    """An array count or bytes length: int32 (-1 null), or compact uvarint n + 1 (0 null)."""
    if flexible:
        return uvarint(0 if n is None else n + 1)
    return _I32.pack(-1 if n is None else n)


def encode_fetch_response(version: int, throttle_time_ms: int, error_code: int, session_id: int,
                          topics: Sequence[Topic]) -> bytes:
    """The FetchResponse body (no response header) for ``version``, as one ``bytes``."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"FetchResponse v{version} is not supported (v{MIN_VERSION}-v{MAX_VERSION})")
    flexible = version >= 12
    parts: list = [_I32.pack(throttle_time_ms)]
    if version >= 7:
        parts.append(_I16_I32.pack(error_code, session_id))
    parts.append(_count(len(topics), flexible))
    for topic in topics:
        if version >= 13:
            parts.append(_NIL_UUID if topic.topic_id is None else topic.topic_id.bytes)
        else:
            name = topic.name.encode()
            parts.append(uvarint(len(name) + 1) if flexible else _I16.pack(len(name)))
            parts.append(name)
        parts.append(_count(len(topic.partitions), flexible))
        for p in topic.partitions:
            parts.append(_PARTITION.pack(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset))
            if version >= 5:
                parts.append(_I64.pack(p.log_start_offset))
            aborted = p.aborted
            parts.append(_count(None if aborted is None else len(aborted), flexible))
            if aborted:
                for pid, first in aborted:
                    parts.append(_PAIR.pack(pid, first))
                    if flexible:
                        parts.append(_EMPTY_TAGS)
            if version >= 11:
                parts.append(_I32.pack(p.preferred_read_replica))
            records = p.records
            parts.append(_count(None if records is None else sum(len(b) for b in records), flexible))
            if records:
                parts.extend(records)
            if flexible:
                parts.append(_EMPTY_TAGS)
        if flexible:
            parts.append(_EMPTY_TAGS)
    if flexible:
        parts.append(_EMPTY_TAGS)
    return b"".join(parts)
