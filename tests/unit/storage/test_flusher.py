"""Group commit (storage.local.flusher) with real files and real fdatasync calls.

The counters the Flusher exposes (``rounds``, ``fdatasync_calls``, ``acknowledged``,
``failed``) say how many syncs ran and whom they covered; nothing here mocks ``os``.
Failures are real: an fd swapped for a pipe under the log (fdatasync -> EINVAL), and
an ext4 filesystem on a loop device whose backing file sits on a full tmpfs, so the
kernel's writeback fails and fdatasync returns EIO (root only).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import resource
import subprocess
import sys
import threading

import pytest

from headwater.storage.api import SegmentPolicy, StorageError, SyncFailed
from headwater.storage.local import flusher as flusher_module
from headwater.storage.local.flusher import FLUSHER_THREADS, Flusher
from headwater.storage.local.log import LocalPartitionLog

from failing_disk import failing_disk
from storage_batches import stamped_batch

FSYNC = SegmentPolicy(enforce_fsync=True)


@pytest.fixture(params=["compiled", "python"])
def native(request) -> bool:
    """Every test runs on both kinds of worker: the compiled one (``_sync_c``: the round
    without the GIL) and the pure-Python reference."""
    if request.param == "compiled" and flusher_module._sync_c is None:
        pytest.skip("headwater.storage.local._sync_c is not built (or HEADWATER_NO_EXTENSIONS=1)")
    return request.param == "compiled"


@pytest.fixture
def flusher(native):
    f = Flusher(native=native)
    assert f.native is native
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


def round_tracker(flusher: Flusher):
    """(track, seen): ``track(name, fut)`` records in ``seen[name]`` how many rounds had
    finished when ``fut`` completed; returns ``fut``."""
    seen: dict[str, int] = {}

    def track(name: str, fut):
        fut.add_done_callback(lambda _f: seen.__setitem__(name, flusher.rounds))
        return fut

    return track, seen


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
    track, rounds_at_completion = round_tracker(flusher)

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


async def _until_returned(log: LocalPartitionLog) -> None:
    """Until the round in flight (if any) has returned in its worker, settled or not."""
    commit = log._commit
    for _ in range(30_000):
        if not commit.round_in_flight or commit._round_done:
            return
        await asyncio.sleep(0.001)
    raise AssertionError("a round never returned")


def test_a_periodic_round_nobody_waits_for_returns_without_waking_the_loop(make_log, flusher):
    log = make_log(SegmentPolicy(messages_required_to_save=3, size_of_messages_required_to_save=1 << 30))

    async def go():
        assert append_one(log) is None  # 3 messages: a periodic round, no waiter
        await asyncio.sleep(0)  # it starts
        await _until_returned(log)
        await asyncio.sleep(0.01)  # a wake-up, had there been one, would have settled it by now
        assert log._commit.round_in_flight and flusher.rounds == 0  # returned, not settled: no call back
        assert log.pending_sync() is None  # settled here: nothing left to sync
        assert not log._commit.round_in_flight and flusher.rounds == 1
        assert append_one(log) is None  # the next periodic round starts as usual
        await log.pending_sync()

    asyncio.run(go())
    assert flusher.rounds == 2 and flusher.fdatasync_calls == 2


def test_a_sync_asked_for_while_a_silent_round_runs_gets_its_own_round(make_log, flusher):
    """Appends asking for periodic syncs at every chance, some while a round runs, some
    after it returned unsettled: every ask ends in a round that started after it."""
    log = make_log(SegmentPolicy(messages_required_to_save=3, size_of_messages_required_to_save=1 << 30))

    async def go():
        for i in range(200):
            assert append_one(log) is None
            if i % 3 == 0:
                await asyncio.sleep(0)
            elif i % 3 == 1:
                await asyncio.sleep(0)
                await _until_returned(log)  # the next ask finds a returned, unsettled round
        commit = log._commit
        for _ in range(30_000):  # the last ask's round starts without another request (a lost
            if not commit._wanted and not commit._scheduled:  # wake-up would leave it asked forever)
                break
            await asyncio.sleep(0.001)
        assert not commit._wanted and not commit._waiters and not commit._scheduled
        barrier = log.pending_sync()
        if barrier is not None:
            await barrier

    asyncio.run(go())
    assert flusher.fdatasync_calls == flusher.rounds >= 2


def test_close_right_after_a_silent_round_acknowledges_the_waiters_its_final_sync_covered(make_log, flusher):
    """A periodic round returned silently (unsettled); the topic then turns enforce_fsync on, an
    append waits for a sync, and the log closes before the loop ran again: the final inline
    sync covers that append, so its waiter succeeds (the returned round is not one in flight)."""
    log = make_log(SegmentPolicy(messages_required_to_save=3, size_of_messages_required_to_save=1 << 30))

    async def go():
        assert append_one(log) is None  # a periodic round, nobody waits
        await asyncio.sleep(0)
        await _until_returned(log)
        assert log._commit.round_in_flight  # returned, not settled
        log.set_policy(FSYNC)
        waiter = append_one(log)
        assert waiter is not None
        log.close()  # before the loop runs the scheduled round start
        await waiter  # raises SyncFailed("closed before a sync covered this write") if failed

    asyncio.run(go())


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

    gate = threading.Event()
    for _ in range(FLUSHER_THREADS):  # every worker busy: round 1 stays in flight until the gate opens
        flusher.submit(gate.wait)

    async def go():
        first = append_one(log)
        await asyncio.sleep(0)  # round 1 in flight with ``first``
        second = append_one(log)  # queued for round 2
        log.close()
        gate.set()
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


# -- sealing: the sealed segment's fdatasync runs in the next round, off the loop ------------

SEAL_EVERY_3 = SegmentPolicy(enforce_fsync=True, segment_size=2000, index_interval_bytes=1)
"""700-B batches (append_one): the third append of a segment seals it; an index entry per batch."""


def test_a_seal_leaves_its_sync_to_the_next_round_which_covers_waiters_before_and_after_it(make_log, flusher):
    """Waiter ``a`` is in a round in flight when the segment seals; ``b`` and ``c`` (the
    batch that seals it) are in the sealed segment, queued; ``d`` is in the new segment.
    The seal syncs nothing on the loop: its .log and .index (and the directory holding
    the new segment's entry) wait for round 2, which acknowledges b, c and d only after
    fdatasyncing them with the new active .log."""
    log = make_log(SEAL_EVERY_3)
    track, done_in_round = round_tracker(flusher)

    async def go():
        a = track("a", append_one(log))
        await asyncio.sleep(0)  # round 1 in flight with ``a`` (a dup of the first segment's .log)
        b = track("b", append_one(log))
        calls_before = flusher.fdatasync_calls
        c = track("c", append_one(log))  # 2100 B >= 2000: the segment seals after this append
        assert [s.sealed for s in log.segments()] == [True, False]
        assert log._commit.sealed_pending == 3  # .log, .index and the directory: not synced on the loop
        assert flusher.fdatasync_calls == calls_before
        assert len(log.read(0, 100, 1 << 30)) == 3  # the sealed segment is readable meanwhile
        d = track("d", append_one(log))
        await asyncio.gather(a, b, c, d)
        assert log._commit.sealed_pending == 0

    asyncio.run(go())
    assert done_in_round == {"a": 1, "b": 2, "c": 2, "d": 2}
    assert flusher.rounds == 2
    assert flusher.fdatasync_calls == 1 + 4  # round 2: sealed .log and .index, directory, active .log
    assert flusher.acknowledged == 4
    assert [b.tobytes() for b in log.read(0, 100, 1 << 30)] == [
        stamped_batch(o, 1_000_000 + o, 3, 100) for o in range(0, 12, 3)
    ]


def _swap_for_pipe(fd: int):
    """Replace ``fd`` by a pipe (fdatasync on it fails for real: EINVAL); returns the undo."""
    r, w = os.pipe()
    saved = os.dup(fd)
    os.dup2(r, fd)

    def undo():
        os.dup2(saved, fd)
        for x in (saved, r, w):
            os.close(x)

    return undo


def test_a_failed_sync_of_the_sealed_segment_fails_its_waiters_and_fences_the_log(make_log, flusher):
    """The fd the group commit holds for the just-sealed .log is swapped for a pipe
    before its round starts: that round fails, so the waiters in the sealed segment
    and in the new one fail, and the log is fenced (as for a failed active sync)."""
    log = make_log(SEAL_EVERY_3)

    async def go():
        await append_one(log)  # one good round first
        waiters = [append_one(log), append_one(log)]  # the second seals the segment
        sealed_log_fd = log._commit._sealed[0][0]
        waiters.append(append_one(log))  # in the new segment
        undo = _swap_for_pipe(sealed_log_fd)
        try:
            results = await asyncio.gather(*waiters, return_exceptions=True)
        finally:
            undo()
        assert all(isinstance(x, SyncFailed) for x in results), results
        assert "sync failed" in str(results[0])
        with pytest.raises(SyncFailed):
            append_one(log)
        with pytest.raises(SyncFailed):
            log.pending_sync()
        assert log._commit.sealed_pending == 0  # closed: a fenced log syncs nothing more

    asyncio.run(go())
    assert flusher.acknowledged == 1 and flusher.failed == 3
    assert len(log.read(0, 100, 1 << 30)) == 4  # reads are still served


def test_sync_and_close_also_sync_a_sealed_segment_whose_round_has_not_run(make_log, flusher, tmp_path):
    """``sync()`` (inline) fdatasyncs the sealed segment too, even while a round holds it;
    a failure there fences. ``close()`` syncs what is pending; without a running loop a
    seal is synced inline at once."""
    log = make_log(SegmentPolicy(segment_size=2000, index_interval_bytes=1))

    async def go():
        for _ in range(3):
            assert append_one(log) is None
        assert log._commit.sealed_pending == 3
        log.sync()  # before its round started
        assert log._commit.sealed_pending == 0
        for _ in range(3):
            append_one(log)
        await asyncio.sleep(0)  # its round is in flight
        assert log._commit.sealed_pending == 3
        undo = _swap_for_pipe(log._commit._sealed[0][0])
        try:
            with pytest.raises(SyncFailed):
                log.sync()  # the inline sync of the sealed .log fails: fenced
        finally:
            undo()
        with pytest.raises(SyncFailed):
            append_one(log)
        assert log._commit.sealed_pending == 0
        while log._commit.round_in_flight:  # let it return (it held sealed fds: it wakes the loop)
            await asyncio.sleep(0.001)  # its success proves nothing now
        with pytest.raises(SyncFailed):
            log.pending_sync()

    asyncio.run(go())

    closing = make_log(SegmentPolicy(segment_size=2000), directory=tmp_path / "closing")

    async def seal_then_close():
        for _ in range(3):
            append_one(closing)
        assert closing._commit.sealed_pending >= 1
        closing.close()  # syncs the sealed segment inline before its round runs
        assert closing._commit.sealed_pending == 0

    asyncio.run(seal_then_close())
    reopened = LocalPartitionLog.open(str(tmp_path / "closing"), SegmentPolicy(segment_size=2000), flusher)
    assert reopened.next_offset == 9 and len(reopened.segments()) == 2
    reopened.close()

    inline = make_log(SegmentPolicy(segment_size=2000), directory=tmp_path / "inline")
    for _ in range(3):
        append_one(inline)  # no event loop: the seal's sync is done inline
    assert inline._commit.sealed_pending == 0 and len(inline.segments()) == 2


def test_retention_may_delete_a_sealed_segment_whose_sync_is_pending(make_log, flusher):
    log = make_log(SEAL_EVERY_3)

    async def go():
        waiters = [append_one(log) for _ in range(4)]
        assert log._commit.sealed_pending == 3
        assert log.delete_oldest_segments(1) == 1  # unlinked; the held fds keep the inode
        await asyncio.gather(*waiters)
        assert log._commit.sealed_pending == 0

    asyncio.run(go())
    assert flusher.acknowledged == 4 and flusher.failed == 0
    assert log.log_start_offset == 9 and len(log.read(0, 100, 1 << 30)) == 1


def test_eio_syncing_a_sealed_segment_on_a_failing_disk_fences_the_log(make_log, flusher, disk_that_fails):
    """Sync thresholds at their maxima (the fsync-off benchmark topic): the first fdatasync
    is the one of the sealed 8-MiB segment, in a round; the 6 MiB behind the device run out,
    so it fails with EIO and the log is fenced."""
    policy = SegmentPolicy(
        segment_size=8 << 20, messages_required_to_save=16_777_216, size_of_messages_required_to_save=1 << 30
    )
    log = make_log(policy, directory=disk_that_fails / "p")

    async def go():
        while len(log.segments()) == 1:
            assert append_one(log, count=300, payload_size=1000) is None
        assert flusher.fdatasync_calls == 0 and log._commit.sealed_pending >= 1
        barrier = log.pending_sync()
        with pytest.raises(SyncFailed) as failed:
            await barrier
        assert "Input/output error" in str(failed.value) or "No space" in str(failed.value)
        with pytest.raises(SyncFailed):
            append_one(log)

    asyncio.run(go())
    assert len(log.read(0, 1, 1 << 30)) == 1  # reads are still served
    log.close()  # fenced: closes without syncing


def test_rounds_of_different_logs_run_on_up_to_the_flusher_threads_at_once(tmp_path, native):
    """Jobs blocked in their worker do not hold up others while fewer than ``threads``
    are busy; past that, a job waits its turn and still runs."""
    flusher = Flusher(threads=3, native=native)
    gate = threading.Event()
    running = threading.Semaphore(0)
    ran = []

    def blocked(i):
        def job():
            running.release()
            gate.wait()
            ran.append(i)
        return job

    for i in range(3):
        flusher.submit(blocked(i))
    for _ in range(3):  # all three run at the same time: each took its own thread
        assert running.acquire(timeout=30)
    flusher.submit(lambda: ran.append("queued"))  # every thread busy: waits for one
    assert len(flusher._threads) == 3
    gate.set()
    flusher.close()  # waits for every job submitted before it
    assert sorted(map(str, ran)) == ["0", "1", "2", "queued"]
    with pytest.raises(RuntimeError):
        flusher.submit(lambda: None)


def test_rounds_of_more_logs_than_threads_in_flight_together_acknowledge_every_waiter(make_log, flusher):
    logs = [make_log() for _ in range(2 * FLUSHER_THREADS)]

    async def go():
        waiters = [append_one(log) for log in logs]
        await asyncio.sleep(0)  # the rounds start (call_soon) and queue for the workers
        await asyncio.gather(*waiters)

    asyncio.run(go())
    assert flusher.acknowledged == len(logs)
    assert flusher.fdatasync_calls >= len(logs)


def fds_open_on(path: str) -> int:
    """How many fds of this process name ``path`` (from /proc/self/fd)."""
    n = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{name}") == path
        except OSError:  # the listing's own fd, gone by now
            pass
    return n


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
@pytest.mark.parametrize("when", ["returned before the close", "returns after the close"])
def test_a_rounds_dup_fds_are_closed_exactly_once_whoever_closes_them(make_log, flusher, when):
    """The loop closes a round's fds when it settles it; a log closed while its round ran
    leaves that to the worker. Either way none is left open."""
    log = make_log(SegmentPolicy(messages_required_to_save=1))  # a silent periodic round per append
    log.append(stamped_batch(0, 1_000_000, 3, 100))  # no loop: inline
    path = os.path.realpath(os.path.join(log.directory, "00000000000000000000.log"))
    assert fds_open_on(path) == 1  # the active segment's own
    gate = threading.Event()
    if when == "returns after the close":
        for _ in range(FLUSHER_THREADS):  # every worker busy: the round stays queued
            flusher.submit(gate.wait)

    async def go():
        append_one(log)  # asks for a round nobody waits for
        await asyncio.sleep(0)  # the round starts: its dup'd fd is open
        n = fds_open_on(path)
        if n != 2:  # only a compiled worker that already returned closed it (itself: the module doc)
            assert flusher.native and n == 1
            while not log._commit._round_done:  # (it closes the fds just before it says so)
                await asyncio.sleep(0.001)
        if when == "returned before the close":
            while not log._commit._round_done:
                await asyncio.sleep(0.001)
        log.close()
        gate.set()

    asyncio.run(go())
    flusher.close()  # every round returned
    assert fds_open_on(path) == 0


def test_a_flusher_never_closed_still_finishes_its_queued_rounds_at_exit(tmp_path):
    """The workers are daemon threads; an exit hook closes every flusher left open, so
    a job queued before the interpreter stops still runs (as with a ThreadPoolExecutor)."""
    marker = tmp_path / "ran"
    script = (
        "import sys, time\n"
        "from headwater.storage.local.flusher import Flusher\n"
        "f = Flusher()\n"
        "f.submit(lambda: (time.sleep(0.5), open(sys.argv[1], 'w').write('x')))\n"
    )  # the script ends at once: only the exit hook keeps the interpreter for the job
    done = subprocess.run([sys.executable, "-c", script, str(marker)], timeout=60)
    assert done.returncode == 0
    assert marker.read_text() == "x"


# -- out of file descriptors: a dup refused with EMFILE is not a failed sync ----------------------

@contextlib.contextmanager
def _no_fd_left():
    """Every fd number below the soft RLIMIT_NOFILE taken (by /dev/null), the limit lowered
    so that this takes few; all given back and the limit restored on exit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    probe = os.open(os.devnull, os.O_RDONLY)
    os.close(probe)
    fillers = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (probe + 32, hard))
    try:
        while True:
            try:
                fillers.append(os.open(os.devnull, os.O_RDONLY))
            except OSError as e:
                assert e.errno == errno.EMFILE
                break
        yield
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_round_whose_dup_finds_no_fd_syncs_inline_and_acknowledges_without_fencing(make_log, flusher):
    log = make_log(SegmentPolicy(enforce_fsync=True, segment_size=2000, index_interval_bytes=1))

    async def go():
        await append_one(log)
        calls = flusher.fdatasync_calls
        with _no_fd_left():
            with pytest.raises(OSError):
                os.dup(0)
            waiters = [append_one(log) for _ in range(2)]  # the second seals: its dups are refused too
            assert waiters[0] is not None
            await asyncio.gather(*waiters)
            assert log._commit.fenced is None
        assert flusher.dup_refused >= 1
        assert flusher.failed == 0 and flusher.acknowledged == 3
        assert flusher.fdatasync_calls == calls  # the inline syncs are not rounds'
        await append_one(log)  # fds back: rounds again, the log writable
        await append_one(log)

    asyncio.run(go())
    assert log.next_offset == 15
