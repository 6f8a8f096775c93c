"""frontends/corrupt.py: refused reads of damaged data are logged once a minute per partition."""

from __future__ import annotations

import logging

from headwater.core import errors
from headwater.frontends.corrupt import CorruptionLog


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def damaged(partition=(1, 2, 3), offset: int = 15) -> errors.CorruptBatch:
    return errors.CorruptBatch(f"partition {partition}: damaged batch at offset {offset}", partition, offset)


def test_one_line_a_minute_per_partition_with_the_count_since(caplog):
    clock = Clock()
    corrupt = CorruptionLog(every_s=60.0, clock=clock)
    with caplog.at_level(logging.ERROR, logger="headwater.corrupt"):
        assert corrupt.report(damaged(), "iggy")
        assert not any(corrupt.report(damaged(offset=o), "kafka") for o in (15, 16, 17))  # same partition
        assert corrupt.report(damaged((1, 2, 4)), "kafka")  # another partition has its own line
        clock.now += 59.9
        assert not corrupt.report(damaged(), "iggy")
        clock.now += 0.1
        assert corrupt.report(damaged(), "iggy")
    lines = [r for r in caplog.records if r.name == "headwater.corrupt"]
    assert len(lines) == 3
    assert lines[0].kv["partition_id"] == 3 and lines[0].kv["offset"] == 15 and lines[0].kv["protocol"] == "iggy"
    assert "refused_since_last_line" not in lines[0].kv
    assert lines[2].kv["refused_since_last_line"] == 4


def test_a_fenced_partition_is_keyed_by_its_reason():
    corrupt = CorruptionLog(clock=Clock())
    fenced = errors.CorruptData("partition fenced: /data/streams/1/topics/2/partitions/3/0.log: bad")
    assert corrupt.report(fenced, "iggy")
    assert not corrupt.report(errors.CorruptData(str(fenced)), "kafka")
    assert corrupt.report(errors.CorruptData("partition fenced: another"), "kafka")
