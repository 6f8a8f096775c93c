"""Group commit (storage.local.flusher) with real files and real fdatasync calls.

The counters the Flusher exposes (``rounds``, ``fdatasync_calls``, ``acknowledged``,
``failed``) say how many syncs ran and whom they covered; nothing here mocks ``os``.
Failures are real: an fd swapped for a pipe under the log (fdatasync -> EINVAL), and
an ext4 filesystem on a loop device whose backing file sits on a full tmpfs, so the
kernel's writeback fails and fdatasync returns EIO (root only).
"""

from __future__ import annotations

import asyncio
import os

import pytest

from headwater.storage.api import SegmentPolicy, StorageError, SyncFailed
from headwater.storage.local.flusher import Flusher
from headwater.storage.local.log import LocalPartitionLog

from failing_disk import failing_disk
from storage_batches import stamped_batch

FSYNC = SegmentPolicy(enforce_fsync=True)


@pytest.fixture
def flusher():
    f = Flusher()
    yield f
    f.close()


@pytest.fixture
def make_log(tmp_path, flusher):
    opened = []

    def _open(policy: SegmentPolicy = FSYNC, directory=None) -> LocalPartitionLog:
        log = LocalPartitionLog.open(str(directory or tmp_path / f"p{len(opened)}"), policy, flusher)
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log.close()


def append_one(log: LocalPartitionLog, count: int = 3, payload_size: int = 100):
    return log.append(stamped_batch(log.next_offset, 1_000_000 + log.next_offset, count, payload_size))


def test_one_sync_covers_every_append_queued_before_it_starts(make_log, flusher):
    log = make_log()

    async def go():
        waiters = [append_one(log) for _ in range(50)]  # one loop iteration: all queue for one round
        assert all(isinstance(w, asyncio.Future) and not w.done() for w in waiters)
        await asyncio.gather(*waiters)

    asyncio.run(go())
    assert flusher.rounds == 1
    assert flusher.fdatasync_calls == 1  # the .log (the .index is synced at seal and close)
    assert flusher.acknowledged == 50 and flusher.failed == 0


def test_appends_during_a_sync_are_accepted_and_covered_by_the_next_one(make_log, flusher):
    log = make_log()
    rounds_at_completion = {}

    def track(name, fut):
        fut.add_done_callback(lambda _f: rounds_at_completion.__setitem__(name, flusher.rounds))
        return fut

    async def go():
        first = track("first", append_one(log))
        await asyncio.sleep(0)  # the round for ``first`` starts (in a worker thread)
        later = [track(f"later{i}", append_one(log)) for i in range(5)]  # accepted while it runs
        await asyncio.gather(first, *later)

    asyncio.run(go())
    assert rounds_at_completion == {"first": 1, **{f"later{i}": 2 for i in range(5)}}
    assert flusher.rounds == 2 and flusher.acknowledged == 6
    assert log.next_offset == 18
    assert len(log.read(0, 100, 1 << 30)) == 6


def test_no_waiter_is_acknowledged_before_its_sync_returned(make_log, flusher):
    log = make_log()

    async def go():
        for _ in range(20):
            before = flusher.rounds
            w = append_one(log)
            await w
            assert flusher.rounds > before  # its completion came from a finished round

    asyncio.run(go())
    assert flusher.acknowledged == 20


def test_periodic_sync_without_enforce_fsync_runs_off_the_loop_and_is_not_awaited(make_log, flusher):
    log = make_log(SegmentPolicy(messages_required_to_save=6, size_of_messages_required_to_save=1 << 30))

    async def go():
        assert append_one(log) is None  # 3 messages: below the threshold
        assert log.pending_sync() is None  # no sync asked for
        assert append_one(log) is None  # 6 messages: a round is asked for, nobody awaits it
        barrier = log.pending_sync()
        assert barrier is not None
        await barrier

    asyncio.run(go())
    assert flusher.rounds >= 1 and flusher.fdatasync_calls >= 1


def test_without_a_running_loop_the_sync_is_inline(make_log, flusher):
    log = make_log()
    assert append_one(log) is None
    log.sync()
    assert flusher.rounds == 0 and flusher.fdatasync_calls == 0
    assert log.next_offset == 3


def test_rotation_while_waiters_are_queued(make_log, flusher):
    """Batches of 700 B, 2000-B segments: appends in one loop iteration cross several
    segment seals; every waiter completes and every batch reads back."""
    log = make_log(SegmentPolicy(enforce_fsync=True, segment_size=2000, index_interval_bytes=1))

    async def go():
        waiters = [append_one(log) for _ in range(10)]
        await asyncio.gather(*waiters)

    asyncio.run(go())
    assert len(log.segments()) == 4
    assert flusher.acknowledged == 10
    assert len(log.read(0, 100, 1 << 30)) == 10


def test_reads_while_a_sync_is_in_flight(make_log, flusher):
    log = make_log()

    async def go():
        for i in range(1, 30):
            w = append_one(log)
            await asyncio.sleep(0)  # its round is in flight
            assert len(log.read(0, 1000, 1 << 30)) == i
            await w

    asyncio.run(go())


def test_close_with_a_round_in_flight(make_log, flusher, tmp_path):
    log = make_log()

    async def go():
        first = append_one(log)
        await asyncio.sleep(0)  # round 1 in flight with ``first``
        second = append_one(log)  # queued for round 2
        log.close()
        await first  # its round returned successfully
        with pytest.raises(StorageError):
            await second  # closed before a sync covered it (and a round in flight may hold an error)

    asyncio.run(go())
    reopened = LocalPartitionLog.open(log.directory, FSYNC, flusher)
    assert reopened.next_offset == 6  # the write is there; it was just not acknowledged
    reopened.close()


# -- failures ------------------------------------------------------------------


def test_a_waiter_fails_rather_than_hangs_when_the_flusher_was_shut_down(make_log, flusher):
    log = make_log()
    flusher.close()

    async def go():
        with pytest.raises(SyncFailed):
            await append_one(log)

    asyncio.run(go())
    assert flusher.failed == 1


def test_a_failed_fdatasync_fails_every_waiter_and_fences_the_log(make_log, flusher):
    """The active segment's .log fd is swapped for a pipe after the writes: the round's
    fdatasync fails for real (EINVAL), so all its waiters and queued ones fail."""
    log = make_log()
    active = log._segments[-1]

    async def go():
        await append_one(log)  # one good round first
        waiters = [append_one(log) for _ in range(5)]
        r, w = os.pipe()
        saved = os.dup(active._fd)
        os.dup2(r, active._fd)  # the file descriptor is replaced under the log
        try:
            results = await asyncio.gather(*waiters, return_exceptions=True)
        finally:
            os.dup2(saved, active._fd)
            for fd in (saved, r, w):
                os.close(fd)
        assert all(isinstance(x, SyncFailed) for x in results), results
        with pytest.raises(SyncFailed):
            append_one(log)  # fenced: refused before writing
        with pytest.raises(SyncFailed):
            log.pending_sync()
        with pytest.raises(SyncFailed):
            log.sync()

    asyncio.run(go())
    assert flusher.failed == 5 and flusher.acknowledged == 1
    assert log.next_offset == 18  # the unacknowledged batches were written, never acknowledged
    assert len(log.read(0, 100, 1 << 30)) == 6  # reads are still served


def test_a_round_that_returns_after_a_failed_inline_sync_acknowledges_nothing(make_log, flusher):
    """Linux reports a writeback error to one fsync only: when an inline sync (here
    ``sync()``; likewise a seal or close) fails while a round is in flight, that round's
    success proves nothing, so its waiters fail too."""
    log = make_log()
    active = log._segments[-1]

    async def go():
        waiter = append_one(log)
        await asyncio.sleep(0)  # its round is in flight on a dup of the real file
        r, w = os.pipe()
        saved = os.dup(active._fd)
        os.dup2(r, active._fd)
        try:
            with pytest.raises(SyncFailed):
                log.sync()  # fdatasync of a pipe: EINVAL
        finally:
            os.dup2(saved, active._fd)
            for fd in (saved, r, w):
                os.close(fd)
        with pytest.raises(SyncFailed):
            await waiter

    asyncio.run(go())
    assert flusher.acknowledged == 0 and flusher.failed == 1


@pytest.fixture
def disk_that_fails(tmp_path):
    with failing_disk(tmp_path) as mnt:
        yield mnt


def test_eio_from_a_failing_disk_fails_the_waiters_and_nothing_later_is_acknowledged(
    make_log, flusher, disk_that_fails
):
    log = make_log(SegmentPolicy(enforce_fsync=True, segment_size=1 << 30), directory=disk_that_fails / "p")
    outcomes: list[list] = []

    async def go():
        for _ in range(40):  # 3 x 300 KB per round: the 6 MiB behind the device run out well before
            waiters = [append_one(log, count=300, payload_size=1000) for _ in range(3)]
            results = await asyncio.gather(*waiters, return_exceptions=True)
            outcomes.append(results)
            if any(isinstance(x, BaseException) for x in results):
                break
        with pytest.raises(SyncFailed):
            append_one(log)
        with pytest.raises(SyncFailed):
            log.pending_sync()

    asyncio.run(go())
    log.close()  # fenced: closes without syncing
    failed_round = outcomes[-1]
    assert all(isinstance(x, SyncFailed) for x in failed_round), failed_round  # one round: all or none
    assert "Input/output error" in str(failed_round[0]) or "No space" in str(failed_round[0])
    assert all(x is None for results in outcomes[:-1] for x in results)
    assert flusher.failed == 3 and flusher.acknowledged == 3 * (len(outcomes) - 1)
