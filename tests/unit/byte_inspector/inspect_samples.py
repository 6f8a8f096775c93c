"""Sample inputs for the byte-inspector tests, each built by hand from its spec (not by our codecs).

- :func:`seed_produce_v12`: the smallest legal ProduceRequest v12 of
  ``shared/spec/kafka-produce-v12.txt`` (94 bytes: empty strings, one topic, one
  partition, one empty 61-byte RecordBatch v2).
- :func:`spec_batch`: an Iggy batch laid out field by field from
  ``shared/spec/iggy-message-batches.md``: two frames, the second with a user
  header, both checksums computed with xxhash as the spec defines them.
"""

from __future__ import annotations

import struct

import crc32c
import xxhash

SPEC_PRODUCE_TREE = [
    # (offset, size) of every line of the spec's "object tree", in order
    (0x00, 94), (0x00, 4), (0x00, 4), (0x04, 11), (0x04, 2), (0x06, 2), (0x08, 4), (0x0C, 2), (0x0E, 1),
    (0x0F, 79), (0x0F, 1), (0x10, 2), (0x12, 4), (0x16, 71), (0x16, 1), (0x17, 70), (0x17, 1), (0x18, 68),
    (0x18, 1), (0x19, 67), (0x19, 4), (0x1D, 62), (0x1D, 1), (0x1E, 61), (0x1E, 8), (0x26, 4), (0x2A, 4),
    (0x2E, 1), (0x2F, 4), (0x33, 2), (0x35, 4), (0x39, 8), (0x41, 8), (0x49, 8), (0x51, 2), (0x53, 4),
    (0x57, 4), (0x5B, 1), (0x5C, 1), (0x5D, 1),
]


def seed_produce_v12() -> bytes:
    tail = struct.pack(">hiqqqhii", 0, -1, -1, -1, -1, -1, -1, 0)  # attributes .. recordsCount
    batch = struct.pack(">qiib", 0, 49, -1, 2) + struct.pack(">I", crc32c.crc32c(tail)) + tail
    body = (
        b"\x01"  # TransactionalId "" (compact, len+1 = 1)
        + struct.pack(">hi", 0, 0)  # Acks, TimeoutMs
        + b"\x02" + b"\x01"  # TopicData: 1 element; Name ""
        + b"\x02" + struct.pack(">i", 0)  # PartitionData: 1 element; Index
        + bytes([62]) + batch  # Records: 61 bytes (compact, n+1)
        + b"\x00\x00\x00"  # tagged fields: partition, topic, body
    )
    header = struct.pack(">hhih", 0, 12, 0, 0) + b"\x00"  # key, version, correlation, client_id "", tags
    return struct.pack(">i", len(header) + len(body)) + header + body


def _frame(msg_id: int, offset_delta: int, timestamp_delta: int, payload: bytes, headers: bytes) -> bytes:
    rest = struct.pack("<QQIIIIQ", msg_id & (2**64 - 1), msg_id >> 64, offset_delta, timestamp_delta,
                       len(headers), len(payload), 0) + payload + headers
    return struct.pack("<Q", xxhash.xxh3_64_intdigest(rest)) + rest


def spec_batch(*, partition_id=3, base_offset=41, base_timestamp=1_764_547_200_000_000,
               origin_timestamp=1_764_547_199_000_000) -> bytes:
    header_tlv = (struct.pack("<BI", 2, 3) + b"key") + (struct.pack("<BI", 2, 5) + b"value")
    frames = [
        _frame(0x0123456789ABCDEF0011223344556677, 0, 0, b"hello", b""),
        _frame(2, 1, 1500, b'{"n": 1}', header_tlv),
    ]
    length = 256 + sum(map(len, frames))
    sums = b"".join(f[:8] for f in frames)
    fields = struct.pack("<5QI", partition_id, base_offset, base_timestamp, origin_timestamp, length, len(frames))
    checksum = xxhash.xxh3_64_intdigest(fields + sums)
    head = struct.pack("<QQQQQQI", partition_id, base_offset, base_timestamp, origin_timestamp, length,
                       checksum, len(frames)) + bytes(204)
    return head + b"".join(frames)
