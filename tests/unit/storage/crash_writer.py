"""Crash-test writer: appends batches to a partition log forever, printing each offset.

Run as ``python crash_writer.py DATA_DIR PREALLOCATE(0|1) [SEGMENT_SIZE]``. Prints ``ready
<next_offset>`` once the log is open, then the base_offset of every batch whose
``append`` returned, flushed. The batch for a base offset is always the same
bytes (:func:`batch_for`), so the test can check what survived a SIGKILL.
"""

from __future__ import annotations

import random
import sys

from headwater.codec.batch import Message, build_batch, stamp
from headwater.storage.api import SegmentPolicy
from headwater.storage.local.log import LocalPartitionLog


def policy(preallocate: bool, segment_size: int = 64 * 1024) -> SegmentPolicy:
    return SegmentPolicy(
        segment_size=segment_size,
        index_interval_bytes=1024,
        preallocate_segments=preallocate,
        messages_required_to_save=500,
    )


def batch_for(base_offset: int) -> bytes:
    """The one batch written at ``base_offset``: 1-8 messages of 1-3000 bytes."""
    rng = random.Random(base_offset)
    count = rng.randint(1, 8)
    messages = [
        Message(payload=rng.randbytes(rng.randint(1, 3000)), id=base_offset + i, origin_timestamp=base_offset)
        for i in range(count)
    ]
    batch = bytearray(build_batch(messages))
    stamp(batch, 0, base_offset, 1_000_000 + base_offset)
    return bytes(batch)


def main() -> None:
    directory, preallocate = sys.argv[1], sys.argv[2] == "1"
    segment_size = int(sys.argv[3]) if len(sys.argv) > 3 else 64 * 1024
    log = LocalPartitionLog.open(directory, policy(preallocate, segment_size))
    out = sys.stdout
    out.write(f"ready {log.next_offset}\n")
    out.flush()
    while True:
        base = log.next_offset
        log.append(batch_for(base))
        out.write(f"{base}\n")
        out.flush()


if __name__ == "__main__":
    main()
