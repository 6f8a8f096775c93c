"""Which sealed segments retention deletes: a pure decision over SegmentInfo values.

Source: Iggy ``server/storage-engine.mdx``, "Retention and cleanup", and
``server/topic-options.mdx``. Two independent policies, both only ever over
*sealed* segments (the active one is never deleted, even when expired):

- time (``message_expiry_us`` > 0): a sealed segment whose newest batch
  (``max_timestamp_us``, a base_timestamp in µs) is older than
  ``now_us - message_expiry_us`` is deleted;
- size (``max_partition_bytes`` > 0): while the sealed segments hold more
  than ``max_partition_bytes`` bytes, the oldest is deleted.

Deletion is always a prefix (oldest first) so the log never gets a hole:
time retention stops at the first sealed segment that has not expired.
The larger of the two counts wins.
"""

from __future__ import annotations

from typing import Sequence

from headwater.storage.api import SegmentInfo, SegmentPolicy


def expired_count(segments: Sequence[SegmentInfo], message_expiry_us: int, now_us: int) -> int:
    """How many oldest sealed segments are wholly older than the expiry (0 = never expire)."""
    if message_expiry_us <= 0:
        return 0
    cutoff = now_us - message_expiry_us
    n = 0
    for seg in segments:
        if not seg.sealed or seg.max_timestamp_us >= cutoff:
            break
        n += 1
    return n


def over_size_count(segments: Sequence[SegmentInfo], max_partition_bytes: int) -> int:
    """How many oldest sealed segments must go for the sealed bytes to fit (0 = unlimited)."""
    if max_partition_bytes <= 0:
        return 0
    sealed = [seg for seg in segments if seg.sealed]
    excess = sum(seg.size_bytes for seg in sealed) - max_partition_bytes
    n = 0
    for seg in sealed:
        if excess <= 0:
            break
        excess -= seg.size_bytes
        n += 1
    return n


def segments_to_delete(segments: Sequence[SegmentInfo], policy: SegmentPolicy, now_us: int) -> int:
    """Number of oldest segments retention deletes now (never the active one)."""
    n = max(
        expired_count(segments, policy.message_expiry_us, now_us),
        over_size_count(segments, policy.max_partition_bytes),
    )
    sealed = sum(1 for seg in segments if seg.sealed)
    return min(n, sealed)
