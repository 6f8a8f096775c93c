"""core.producers: idempotent-producer rules and their persistence (real metadata store)."""

from __future__ import annotations

import pytest

from headwater.core.producers import OutOfOrderSequence, ProducerFenced, ProducerStates, UnknownProducer
from headwater.storage.api import open_engine

KEY = (0, 0, 0)


def states(path, now=lambda: 1_000_000):
    engine = open_engine(str(path))
    return engine, ProducerStates(engine.metadata("producers"), now)


def test_sequence_rules(tmp_path):
    engine, s = states(tmp_path)
    try:
        pid, epoch = s.init_producer()
        assert (pid, epoch) == (0, 0) and s.init_producer()[0] == 1
        assert s.check(KEY, 5, pid, 0, 0, 2) is None
        s.record(KEY, 5, pid, 0, 0, 2, 10)
        assert s.check(KEY, 5, pid, 0, 0, 2) == (10, 11)  # duplicate
        with pytest.raises(OutOfOrderSequence):
            s.check(KEY, 5, pid, 0, 5, 1)
        assert s.check(KEY, 5, pid, 0, 2, 1) is None
        s.record(KEY, 5, pid, 0, 2, 1, 12)
        with pytest.raises(ProducerFenced):
            s.check(KEY, 5, pid, -1, 3, 1)  # an older epoch
        with pytest.raises(OutOfOrderSequence):
            s.check(KEY, 5, pid, 1, 3, 1)  # a new epoch starts at 0
        assert s.check(KEY, 5, pid, 1, 0, 1) is None
        assert s.check(KEY, 6, pid, 0, 99, 1) is None  # recreated topic: no state, any sequence
        # epoch bumps
        assert s.init_producer(pid, 0) == (pid, 1)
        with pytest.raises(ProducerFenced):
            s.init_producer(pid, 0)
        with pytest.raises(UnknownProducer):
            s.init_producer(99, 0)
        # sequence wrap-around
        s.record((0, 0, 1), 5, pid, 1, 0x7FFFFFFF, 1, 0)
        assert s.check((0, 0, 1), 5, pid, 1, 0, 1) is None
        s.flush()
    finally:
        engine.close()


def test_state_survives_reopen_and_window(tmp_path):
    engine, s = states(tmp_path)
    pid, _ = s.init_producer()
    for i in range(7):
        s.record(KEY, 5, pid, 0, i, 1, 100 + i)
    s.flush()
    engine.close()
    engine, s = states(tmp_path)
    try:
        assert s.next_id == 1
        assert s.check(KEY, 5, pid, 0, 6, 1) == (106, 106)
        assert s.check(KEY, 5, pid, 0, 2, 1) == (102, 102)
        with pytest.raises(OutOfOrderSequence):
            s.check(KEY, 5, pid, 0, 1, 1)  # fell out of the 5-batch window: not a known duplicate
        s.truncate(KEY, 105)
        assert s.check(KEY, 5, pid, 0, 5, 1) is None
    finally:
        engine.close()


def test_expiry(tmp_path):
    now = [1_000_000]
    engine, s = states(tmp_path, lambda: now[0])
    try:
        pid, _ = s.init_producer()
        s.record(KEY, 5, pid, 0, 0, 1, 0)
        now[0] += s.expiration_us + 1
        s.init_producer()
        assert (KEY, pid) not in s.entries and pid not in s.epochs
    finally:
        engine.close()
