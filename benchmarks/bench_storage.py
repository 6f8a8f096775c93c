"""Local storage engine throughput: append and read back 1000-message batches.

Usage: ``python benchmarks/bench_storage.py [--dir DIR] [--mb 100]``

For payloads of 100 B and 1 KB, builds stamped batches of 1000 messages
(before timing), appends them through ``LocalPartitionLog.append`` under
three sync policies (after one unmeasured warm-up run), then reads everything back through ``read`` with and
without checksum validation. Prints messages/s and MB/s (MB = 10**6 bytes
of batch bytes, headers included). The data directory defaults to a
temporary directory on the same filesystem as /tmp.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from headwater.codec.batch import Message, build_batch, stamp
from headwater.storage.api import SegmentPolicy
from headwater.storage.local.log import LocalPartitionLog

MESSAGES_PER_BATCH = 1000


def make_batches(payload_size: int, total_bytes: int) -> list[bytes]:
    template = build_batch(
        Message(payload=os.urandom(payload_size), id=i + 1, origin_timestamp=1_700_000_000_000_000 + i)
        for i in range(MESSAGES_PER_BATCH)
    )
    count = max(1, total_bytes // len(template))
    out = []
    for i in range(count):
        b = bytearray(template)
        stamp(b, 0, i * MESSAGES_PER_BATCH, 1_700_000_000_000_000 + i)
        out.append(bytes(b))
    return out


def run(directory: str, batches: list[bytes], policy: SegmentPolicy, label: str, quiet: bool = False) -> None:
    path = os.path.join(directory, label.replace(" ", "_"))
    log = LocalPartitionLog.open(path, policy)
    total = sum(len(b) for b in batches)
    messages = len(batches) * MESSAGES_PER_BATCH
    start = time.perf_counter()
    for b in batches:
        log.append(b)
    log.sync()
    elapsed = time.perf_counter() - start
    if not quiet:
        print(f"  append {label:<28} {messages / elapsed:>12,.0f} msg/s {total / elapsed / 1e6:>9,.1f} MB/s")
    log.close()
    for validate in (True, False):
        log = LocalPartitionLog.open(path, SegmentPolicy(segment_size=policy.segment_size, validate_checksum=validate))
        start = time.perf_counter()
        offset, got = 0, 0
        while offset < log.next_offset:
            views = log.read(offset, 10 * MESSAGES_PER_BATCH, 16 << 20)
            got += sum(len(v) for v in views)
            offset += len(views) * MESSAGES_PER_BATCH
        elapsed = time.perf_counter() - start
        assert got == total
        what = "read (verified)" if validate else "read (unverified)"
        if not quiet:
            print(f"  {what:<35} {messages / elapsed:>12,.0f} msg/s {total / elapsed / 1e6:>9,.1f} MB/s")
        log.close()
    shutil.rmtree(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="data directory (default: a temporary one)")
    parser.add_argument("--mb", type=int, default=100, help="MB of batches per payload size")
    args = parser.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="hw-bench-")
    os.makedirs(directory, exist_ok=True)
    try:
        for payload_size in (100, 1000):
            batches = make_batches(payload_size, args.mb * 10**6)
            print(f"{payload_size} B payloads: {len(batches)} batches of {MESSAGES_PER_BATCH} messages, {len(batches[0]):,} B each")
            policies = {
                "default (sync per 1024 msgs)": SegmentPolicy(),
                "no sync until 1 GiB": SegmentPolicy(
                    messages_required_to_save=1 << 24, size_of_messages_required_to_save=1 << 30
                ),
                "enforce_fsync": SegmentPolicy(enforce_fsync=True),
            }
            run(directory, batches, SegmentPolicy(), "warm-up", quiet=True)  # the first run is cold
            for label, policy in policies.items():
                run(directory, batches, policy, label)
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
