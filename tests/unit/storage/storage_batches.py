"""Stamped test batches for the storage tests (a uniquely named module, imported by tests)."""

from __future__ import annotations

import random

from headwater.codec.batch import Message, build_batch, stamp


def stamped_batch(base_offset: int, base_timestamp_us: int, count: int = 3, payload_size: int = 100) -> bytes:
    """A stamped batch whose payloads depend only on (base_offset, count, payload_size)."""
    rng = random.Random(base_offset * 7919 + count)
    messages = [
        Message(payload=rng.randbytes(payload_size), id=base_offset + i + 1, origin_timestamp=base_timestamp_us + i)
        for i in range(count)
    ]
    batch = bytearray(build_batch(messages))
    stamp(batch, 0, base_offset, base_timestamp_us)
    return bytes(batch)
