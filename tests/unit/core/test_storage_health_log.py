"""StorageHealth's log lines when episodes come and go by the request (a server at its
open-files limit: every roll refused, other appends succeeding in between): at most
EPISODES_LOGGED_PER_WINDOW starts (and their ends) per window, the rest counted; an unlogged
episode that lasts is logged. Session 12's QA saw 2,835 start lines in 10 s without this."""

from __future__ import annotations

import logging

from headwater.core import storage_health
from headwater.core.storage_health import StorageHealth

FAILING, RECOVERED = "storage writes failing", "storage writes succeed again"


class Clock:
    def __init__(self):
        self.us = 1_000_000

    def __call__(self) -> int:
        return self.us


def lines(caplog) -> list[str]:
    out = []
    for r in caplog.records:
        if r.name != "headwater.storage":
            continue
        msg = r.getMessage()
        out.append("failing" if msg.startswith(FAILING) else "recovered" if msg.startswith(RECOVERED) else msg)
    return out


def test_flapping_episodes_are_logged_a_few_per_window_and_counted(caplog):
    caplog.set_level(logging.INFO)
    clock = Clock()
    h = StorageHealth("/data", lambda: (100, 50), clock)
    for _ in range(1000):  # 1000 episodes in 1 s
        h.write_failed("append", "EMFILE", False)
        assert not h.snapshot().healthy  # every episode still counts for the front-ends
        clock.us += 500
        h.write_succeeded()
        assert h.snapshot().healthy
        clock.us += 500
    n = storage_health.EPISODES_LOGGED_PER_WINDOW
    assert lines(caplog) == ["failing", "recovered"] * n
    assert h.episodes_unlogged == 1000 - n
    caplog.clear()
    clock.us += storage_health.LOG_WINDOW_US  # a new window: the next start is logged, with the count
    h.write_failed("append", "EMFILE", False)
    starts = [r for r in caplog.records if r.getMessage().startswith(FAILING)]
    assert len(starts) == 1 and starts[0].kv["episodes_unlogged"] == 1000 - n
    assert h.episodes_unlogged == 0


def test_an_unlogged_episode_that_lasts_is_logged(caplog):
    caplog.set_level(logging.INFO)
    clock = Clock()
    h = StorageHealth("/data", lambda: (100, 50), clock)
    for _ in range(storage_health.EPISODES_LOGGED_PER_WINDOW):
        h.write_failed("append", "EIO", False)
        h.write_succeeded()
    caplog.clear()
    h.write_failed("append", "ENOSPC", True)  # over the window's count: not logged yet
    clock.us += storage_health.LONG_EPISODE_US - 1
    h.write_failed("append", "ENOSPC", True)
    assert lines(caplog) == []
    clock.us += 1  # it lasted LONG_EPISODE_US: the next refused write logs it, once
    h.write_failed("append", "ENOSPC", True)
    h.write_failed("append", "ENOSPC", True)
    h.write_succeeded()
    assert lines(caplog) == ["failing", "recovered"]
    assert "disk is full" in caplog.records[0].getMessage()
