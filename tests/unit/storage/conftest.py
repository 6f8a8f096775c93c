"""Fixtures for the local storage engine tests: stamped batches and open logs in tmp_path."""

from __future__ import annotations

import pytest

from headwater.storage.api import SegmentPolicy
from headwater.storage.local.log import LocalPartitionLog

from storage_batches import stamped_batch


@pytest.fixture
def open_log(tmp_path):
    """open_log(policy=None, name="p") -> LocalPartitionLog in tmp_path/name; closed at teardown."""
    opened = []

    def _open(policy: SegmentPolicy | None = None, name: str = "p") -> LocalPartitionLog:
        log = LocalPartitionLog.open(str(tmp_path / name), policy or SegmentPolicy())
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log.close()


def fill(
    log: LocalPartitionLog,
    batches: int,
    count: int = 3,
    payload_size: int = 100,
    ts0: int = 1_000_000,
    ts_step: int = 1_000,
) -> list[bytes]:
    """Append ``batches`` stamped batches at the log's next offset; returns their bytes."""
    out = []
    for i in range(batches):
        b = stamped_batch(log.next_offset, ts0 + ts_step * i, count, payload_size)
        log.append(b)
        out.append(b)
    return out


@pytest.fixture
def filler():
    return fill
