"""The data directory's write health: episodes of failed writes, logged once each.

An *episode* starts with the first write the filesystem refuses (ENOSPC,
EDQUOT, EIO...) and ends with the next write that succeeds. The start is
logged once at error level, without a traceback (``storage writes failing``,
with the data directory, the error and whether the disk is full); writes
refused during the episode are only counted; the end is logged at warning
(``storage writes succeed again``, with the count and the duration in
seconds). Front-ends read :meth:`StorageHealth.snapshot` to report the
directory's state (Kafka DescribeLogDirs: an offline directory is
KAFKA_STORAGE_ERROR while an episode lasts).

Episodes that come and go by the request (a server at its open-files limit: each
roll refused, the other partitions' appends succeeding in between) would log a
pair of lines per request. At most :data:`EPISODES_LOGGED_PER_WINDOW` episodes
are logged per :data:`LOG_WINDOW_US`; the others are counted, and the next
logged start says how many went unlogged (``episodes_unlogged``). An unlogged
episode that lasts :data:`LONG_EPISODE_US` is logged at its next refused write.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

from ..storage.api import MetadataStore, StorageWriteError
from . import errors

log = logging.getLogger("headwater.storage")

LOG_WINDOW_US = 60_000_000
"""The window (µs) within which at most EPISODES_LOGGED_PER_WINDOW episodes are logged."""
EPISODES_LOGGED_PER_WINDOW = 5
LONG_EPISODE_US = 10_000_000
"""An episode not logged (over the window's count) is logged once it lasted this long (µs)."""


@dataclass(frozen=True, slots=True)
class HealthSnapshot:
    """The data directory as front-ends report it. ``total_bytes`` / ``usable_bytes``:
    the volume's size and the bytes an unprivileged writer may still use (-1 when
    unknown). ``error``: the failure of the current episode (None when healthy)."""

    location: str
    total_bytes: int
    usable_bytes: int
    error: str | None
    no_space: bool
    failing_since_us: int
    refused_writes: int

    @property
    def healthy(self) -> bool:
        return self.error is None


class StorageHealth:
    """Write-failure episodes of one data directory (see the module doc).

    ``usage`` returns (total_bytes, usable_bytes) of the volume or None;
    ``clock`` gives microseconds. Not thread-safe (the event loop's thread).
    """

    def __init__(self, location: str, usage: Callable[[], tuple[int, int] | None], clock: Callable[[], int]):
        self.location = location
        self._usage = usage
        self._clock = clock
        self.error: str | None = None
        self.no_space = False
        self.failing_since_us = 0
        self.refused_writes = 0
        self._logged = False  # the current episode's start was logged
        self._window_start_us: int | None = None  # the log window's start (see the module doc)
        self._window_logged = 0  # episodes logged in it
        self.episodes_unlogged = 0  # episodes not logged since the last logged start

    def write_failed(self, what: str, error: str, no_space: bool) -> None:
        """Record a refused write (``what``: "append", "metadata"...). Logs the first of an
        episode (within the window's count; see the module doc)."""
        self.refused_writes += 1
        if self.error is not None:
            if not self._logged and self._clock() - self.failing_since_us >= LONG_EPISODE_US:
                self._log_start(what, error, self.no_space)  # over the count, but it lasts
            return
        self.error = error
        self.no_space = no_space
        now = self.failing_since_us = self._clock()
        if self._window_start_us is None or now - self._window_start_us >= LOG_WINDOW_US:
            self._window_start_us, self._window_logged = now, 0
        if self._window_logged < EPISODES_LOGGED_PER_WINDOW:
            self._log_start(what, error, no_space)
        else:
            self._logged = False
            self.episodes_unlogged += 1

    def _log_start(self, what: str, error: str, no_space: bool) -> None:
        kv = {"data_dir": self.location, "write": what, "error": error, "usable_bytes": self._usable()}
        if self.episodes_unlogged:
            kv["episodes_unlogged"] = self.episodes_unlogged
        log.error("storage writes failing: the disk is full" if no_space else "storage writes failing: I/O error",
                  extra={"kv": kv})
        self._logged = True
        self._window_logged += 1
        self.episodes_unlogged = 0

    def write_succeeded(self) -> None:
        """A write went through: ends an episode (logged at warning when its start was), else nothing."""
        if self.error is None:
            return
        if self._logged:
            seconds = max(0, self._clock() - self.failing_since_us) / 1e6
            log.warning(
                "storage writes succeed again",
                extra={"kv": {"data_dir": self.location, "refused_writes": self.refused_writes,
                              "failing_seconds": round(seconds, 3), "usable_bytes": self._usable()}},
            )
        self.error = None
        self.no_space = False
        self.refused_writes = 0
        self._logged = False

    def _usable(self) -> int:
        usage = self._usage()
        return -1 if usage is None else usage[1]

    def snapshot(self) -> HealthSnapshot:
        usage = self._usage() or (-1, -1)
        return HealthSnapshot(self.location, usage[0], usage[1], self.error, self.no_space,
                              self.failing_since_us, self.refused_writes)


class GuardedStore:
    """A metadata store whose writes report to a :class:`StorageHealth`: a failed
    ``put`` / ``put_many`` (storage's StorageWriteError) is recorded and raised as
    ``errors.MetadataNotSaved``; a successful one ends an episode. Reads pass through."""

    __slots__ = ("store", "health")

    def __init__(self, store: MetadataStore, health: StorageHealth):
        self.store = store
        self.health = health

    def load(self) -> dict[str, Any]:
        return self.store.load()

    @property
    def torn_bytes(self) -> int:
        return self.store.torn_bytes

    @property
    def damage(self) -> str | None:
        return self.store.damage

    def put(self, key: str, value: Any | None) -> None:
        self.put_many({key: value})

    def put_many(self, items: dict[str, Any | None]) -> None:
        try:
            self.store.put_many(items)
        except StorageWriteError as e:
            self.health.write_failed("metadata", str(e), e.no_space)
            raise errors.MetadataNotSaved(f"metadata not saved: {e}", e.no_space) from e
        self.health.write_succeeded()

    def close(self) -> None:
        self.store.close()
