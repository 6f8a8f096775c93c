"""Group commit: one fdatasync, run off the event loop, covers many appends.

Why: ``os.fdatasync`` takes a disk round trip (hundreds of µs to ms). Called
inline per append it stalls the event loop, and every producer waits for
every other producer's sync in turn. Here a partition log's syncs run in a
worker thread (``os.fdatasync`` releases the GIL) and are shared:

* An append writes its bytes (``os.pwrite``, on the loop thread), then asks
  its :class:`GroupCommit` for durability. With ``enforce_fsync`` it gets an
  ``asyncio.Future`` that the front-end awaits before acknowledging.
* A *round* starts on the next loop iteration after a request and takes every
  waiter registered up to that moment: it ``os.dup``'s the active segment's
  ``.log`` fd, then a worker runs ``os.fdatasync`` on it. (The ``.index`` is
  not synced per round: recovery re-adds entries a crash lost from the log,
  and it is synced after the segment is sealed or when the log closes.) The futures of those
  waiters complete when the round returned; appends that arrive meanwhile are
  accepted and queue for the next round, which starts as soon as this one
  ends. At most one round per partition log is in flight; rounds of different
  partitions run in parallel on the :class:`Flusher`'s threads.
* Without ``enforce_fsync`` the periodic sync (``messages_required_to_save`` /
  ``size_of_messages_required_to_save``) is a round with no waiters: nothing
  awaits it.
* Without a running event loop (tools, synchronous tests, boot) a request
  syncs inline, as before.
* After the round of a waiter returned, a front-end may acknowledge it; a
  waiter whose client went away (cancelled future) is skipped.
* Waking the loop: the worker that ran a round calls the loop back
  (``call_soon_threadsafe``) only when the loop has something to do: the round
  had waiters or sealed segments, it failed, or a waiter or another periodic
  sync was asked for while it ran. A periodic round nobody waits for (the
  default policy's every-1024-messages sync) returns silently; the loop settles
  it (its bookkeeping) when the log next asks for a sync, waits on a barrier or
  closes. Both sides use the same two flags in opposite order (the loop sets
  "asked" then reads "done"; the worker sets "done" then reads "asked"; the GIL
  orders them), so a request made while the round ran always gets its round.

The dup'd fds keep the file open for the worker even if the log rotates,
truncates or closes the segment meanwhile: a sync never hits a closed or
reused fd number. A ``dup`` refused for want of fds (EMFILE, ENFILE: the
process or the system at its limit) is not a failed sync (nothing was written
or synced) and does not fence: that round's fdatasyncs run inline on the loop
thread instead (no round is in flight then and only the loop closes these fds,
so no dup is needed), and its waiters complete after them
(``Flusher.dup_refused`` counts these). Waiting for fds to come back instead
could wait for ever: the sealed segments' fds are freed only by a sync.

Sealing: a rotation does not sync on the loop (a 1 GiB segment written with
the sync thresholds at their maxima took ~0.45 s to fdatasync, every client
of the server waiting). :meth:`GroupCommit.add_sealed` takes fds of the
sealed segment's ``.log`` and ``.index`` (and of the partition directory,
for the new segment's entry); the next round fdatasyncs them first, then the
active ``.log``, and closes them once it succeeded. Waiters queued before the
rotation (their batches are in the sealed segment) are in that round or a
later one, so an acknowledgement still means the batch is synced.
``sync_inline`` (the log's ``sync()`` and ``close()``) also syncs them, even
while a round holds them. A failed sync of a sealed segment fences the log as
any failed round does (the held fds are closed; nothing is synced after a
fence). Until that round returned, a power loss can leave the sealed segment
short or torn while the next segment exists on disk: see ``docs/reliability.md``
for what recovery then does.

Failure: a failed fdatasync (EIO, ENOSPC, ...) fences the log. Linux may
mark the dirty pages of a failed writeback clean and drop them, and reports
the error to one fsync only, so a later fsync "succeeding" proves nothing.
Hence (fence, not truncate-and-continue): every waiter of that round and
every queued waiter fails with :class:`~headwater.storage.api.SyncFailed`,
every later append, sync or durability wait raises it, and nothing written
since the last good round is ever acknowledged. Restarting the server
reopens the log; recovery then verifies what reached the disk and cuts a
torn tail. Reads keep being served (batches are re-verified when the policy
says ``validate_checksum``).

Thread use: all bookkeeping of a log runs on the event loop thread; the worker
calls ``os.fdatasync`` on the round's fds, stores the round's result and reads
the log's "asked" flags to decide whether to wake the loop. The loop closes the
round's fds when it settles it (so the worker does not take the GIL back once
more after an ``os.close``); for a log closed while its round ran, the worker
closes them (``close_fds``: exactly once, whichever side gets there).

Compiled workers (:mod:`._sync_c`, the default where built): the same rounds,
but the worker runs one (fdatasync each fd in order, close every fd, store
calls / errno / seconds, mark it done) without the GIL, and takes the GIL only
to call the loop back, in the same cases as above. The loop's "asked" is then a
flag of the round (``Round.ask``, set by :meth:`GroupCommit.request` while a
round is in flight) read by the worker with sequentially consistent atomics
instead of the GIL's ordering; the worker always closes the round's fds. The
pure-Python workers are the reference (``Flusher(native=False)``,
``HEADWATER_NO_EXTENSIONS=1``); the tests run on both.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import os
import queue
import threading
import time
import weakref
from typing import Callable

from headwater import _native, metrics
from headwater.storage.api import StorageError, SyncFailed

from .prealloc import DEFAULT_BUDGET_BYTES, DEFAULT_WINDOW_BYTES, Preallocator
from .writebehind import CACHE_BYTES, WriteBehind

FLUSHER_THREADS = 4
"""Worker threads per engine: how many partitions can be in a sync at the same time."""

# the compiled workers (rounds run without the GIL), or None: the pure-Python workers below
_sync_c = _native.load("headwater.storage.local._sync_c")


def fdatasync_all(fds: list[int]) -> tuple[int, OSError | None, float]:
    """``os.fdatasync`` each fd in order, stopping at the first failure. Returns
    (fdatasync calls made, the failure or None, seconds spent). Runs in a worker;
    the fds are closed by :func:`close_fds` (the loop, or the worker after a close)."""
    calls = 0
    error: OSError | None = None
    t0 = time.perf_counter()
    for fd in fds:
        calls += 1
        try:
            os.fdatasync(fd)
        except OSError as exc:
            error = exc
            break
    return calls, error, time.perf_counter() - t0


def close_fds(fds: list[int]) -> None:
    """Close and remove every fd in ``fds``. The loop thread and a worker may both call
    it on the same list: ``list.pop`` is atomic under the GIL, so each fd is closed
    exactly once (a number closed twice could by then name another file)."""
    while True:
        try:
            fd = fds.pop()
        except IndexError:
            return
        try:
            os.close(fd)
        except OSError:
            pass


class Flusher:
    """The worker threads that run sync rounds, shared by an engine's partition logs.

    Counters (read on the loop thread; tests and benchmarks use them; a round is
    counted when the loop settles it): ``rounds`` (sync rounds finished, failed ones
    included), ``fdatasync_calls``
    (``os.fdatasync`` calls made by rounds; inline syncs are not counted),
    ``acknowledged`` (waiters completed by a successful round), ``failed``
    (waiters failed by a failed round or a fence), ``sync_seconds`` (time the
    workers spent in rounds, summed).

    ``write_behind`` (:mod:`.writebehind`, ``write_behind_cache_bytes`` bytes of
    appended data left cached; 0 = off) runs on its own thread: the logs hand it
    what they append.

    ``native`` (default: when built): the workers are :mod:`._sync_c`'s, which run a
    round (fdatasync, close, result) without the GIL and take it only to call the loop
    back; False: the pure-Python workers (the reference; ``HEADWATER_NO_EXTENSIONS=1``).
    Both behave the same (``tests/unit/storage/test_flusher.py`` runs on both).

    ``preallocator`` (:mod:`.prealloc`; ``preallocate`` false: off) reserves the logs' blocks
    ahead of their appends on its own thread (``preallocate_window_bytes`` ahead of each, at
    most ``preallocate_budget_bytes`` for all).
    """

    def __init__(self, threads: int = FLUSHER_THREADS, write_behind_cache_bytes: int = CACHE_BYTES,
                 native: bool | None = None, preallocate: bool = True,
                 preallocate_window_bytes: int = DEFAULT_WINDOW_BYTES,
                 preallocate_budget_bytes: int = DEFAULT_BUDGET_BYTES):
        if native and _sync_c is None:
            raise RuntimeError("the compiled flusher (headwater.storage.local._sync_c) is not available")
        self._native = _sync_c.SyncQueue() if (_sync_c is not None if native is None else native) else None
        self._max_threads = threads
        self._threads: list[threading.Thread] = []
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._submitted = itertools.count(1)  # next() on a count is atomic under the GIL: the
        self._finished = itertools.count(1)  # loop thread and the workers each advance their own
        self._last_submitted = self._last_finished = 0
        self._shut = False
        self.write_behind = WriteBehind(write_behind_cache_bytes)
        self.preallocator = Preallocator(preallocate, preallocate_window_bytes, preallocate_budget_bytes)
        self.rounds = 0
        self.fdatasync_calls = 0
        self.acknowledged = 0
        self.failed = 0
        self.sync_seconds = 0.0
        self.dup_refused = 0  # rounds synced inline because os.dup found no fd free (EMFILE / ENFILE)

    def stats(self) -> dict[str, int | float]:
        """The counters, for a log line."""
        return {"rounds": self.rounds, "fdatasync_calls": self.fdatasync_calls, "acknowledged": self.acknowledged,
                "failed": self.failed, "sync_seconds": round(self.sync_seconds, 3)}

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` in a worker thread (RuntimeError once closed). Call from one
        thread (the event loop's).

        The hand-off is one ``SimpleQueue.put`` (C, lock-free under the GIL) to
        threads of our own blocked in ``get``: no ``concurrent.futures.Future``,
        work item or idle-semaphore probe per round as with a ThreadPoolExecutor
        (measured in docs/benchmarks.md, "Append latency and the flusher (session
        6)"). A worker is added, up to ``threads``, when every started one is busy
        (rounds of different partitions in flight at the same time). ``job``
        must not raise (a round catches its own errors); if it does, the worker
        survives and the error is dropped.
        """
        if self._shut:
            raise RuntimeError("the flusher is closed")
        if self._native is not None:
            self._native_worker()
            self._native.submit_call(job)
            return
        self._last_submitted = next(self._submitted)
        # jobs submitted minus jobs finished (read without a lock: a stale count only
        # starts a thread early, up to the cap, or leaves the job queued behind a busy one)
        if self._last_submitted - self._last_finished > len(self._threads) and len(self._threads) < self._max_threads:
            t = threading.Thread(target=self._work, name=f"headwater-fsync_{len(self._threads)}", daemon=True)
            self._threads.append(t)
            t.start()
            if len(self._threads) == 1:
                _at_exit(self)
        self._jobs.put(job)

    @property
    def native(self) -> bool:
        """Whether rounds run on the compiled workers (:mod:`._sync_c`)."""
        return self._native is not None

    def submit_round(self, round_, fds: list[int], wake: bool) -> None:
        """Queue a compiled round (``round_``: a new ``_sync_c.Round``) over ``fds``, which the
        worker closes, all of them, once it synced them (RuntimeError once closed: the fds are
        then still the caller's). Only when :attr:`native`."""
        if self._shut:
            raise RuntimeError("the flusher is closed")
        self._native_worker()
        self._native.submit_round(round_, fds, wake)  # type: ignore[union-attr]

    def _native_worker(self) -> None:
        """Start a compiled worker when none is waiting for a job (up to ``threads``)."""
        if self._native.idle_workers() == 0 and len(self._threads) < self._max_threads:  # type: ignore[union-attr]
            t = threading.Thread(target=self._native.run, name=f"headwater-fsync_{len(self._threads)}",  # type: ignore[union-attr]
                                 daemon=True)
            self._threads.append(t)
            t.start()
            if len(self._threads) == 1:
                _at_exit(self)

    def _work(self) -> None:
        get = self._jobs.get
        while True:
            job = get()
            if job is None:
                return
            try:
                job()
            except BaseException:  # pragma: no cover - rounds catch their own errors
                pass
            self._last_finished = next(self._finished)

    def close(self) -> None:
        """Wait for rounds in flight and queued write-behind work, then stop the threads."""
        if not self._shut:
            self._shut = True
            if self._native is not None:
                self._native.shutdown()  # the workers finish every queued job first
            else:
                for _ in self._threads:
                    self._jobs.put(None)  # after every queued round: FIFO
            for t in self._threads:
                t.join()
            if self._native is not None:
                self._native.release()
        self.write_behind.close()
        self.preallocator.close()


_OPEN: "weakref.WeakSet[Flusher]" = weakref.WeakSet()


def _finish_open_flushers() -> None:
    """At interpreter exit (before daemon threads are abandoned): let every flusher not
    closed yet finish its queued rounds, as a ThreadPoolExecutor's exit hook would."""
    for flusher in list(_OPEN):
        flusher.close()


def _at_exit(flusher: Flusher) -> None:
    _OPEN.add(flusher)


# the hook concurrent.futures uses: runs before the interpreter stops threads
getattr(threading, "_register_atexit", lambda fn: None)(_finish_open_flushers)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class GroupCommit:
    """One partition log's sync scheduling (see the module docstring).

    ``targets()`` returns fresh duplicates of the fds a sync must cover (the
    round closes them); ``sync_inline()`` fdatasyncs the same files on the
    calling thread. ``where`` names the log in errors. Not thread-safe: use it
    from the log's one writer (the event loop thread).
    """

    __slots__ = (
        "flusher", "where", "_targets", "_sync_inline", "_waiters", "_wanted", "_scheduled", "_round",
        "_failure", "_closed", "_sealed", "_returned", "_round_result", "_round_waiters", "_round_sealed", "_round_fds",
        "_native_round", "_loop",
    )

    def __init__(self, flusher: Flusher, where: str, targets: Callable[[], list[int]], sync_inline: Callable[[], None]):
        self.flusher = flusher
        self.where = where
        self._targets = targets
        self._sync_inline = sync_inline
        self._waiters: list[asyncio.Future] = []
        self._wanted = False  # a round without waiters was asked for (periodic sync)
        self._scheduled = False  # a round start is queued with call_soon
        self._round = False  # a round is in flight or returned and not yet settled
        self._returned = False  # its (pure-Python) worker returned (set by the worker)
        self._round_result: tuple[int, OSError | None, float] = (0, None, 0.0)  # set by the worker
        self._native_round = None  # the round on a compiled worker (a _sync_c.Round), or None
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop a compiled round calls back
        self._round_waiters: list[asyncio.Future] = []  # the round's waiters and sealed fds
        self._round_sealed: list[tuple[int, str]] = []
        self._round_fds: list[int] = []  # the round's dup'd fds, closed once it returned
        self._failure: str | None = None  # why the log is fenced
        self._closed = False
        # sealed, not yet synced: (fd we own, path for errors); tuples compared by identity
        self._sealed: list[tuple[int, str]] = []

    # -- state -----------------------------------------------------------------

    @property
    def fenced(self) -> str | None:
        """Why a failed sync fenced the log, or None."""
        return self._failure

    def check(self) -> None:
        """Raise SyncFailed when the log is fenced."""
        if self._failure is not None:
            raise SyncFailed(self._failure)

    def fence(self, exc: BaseException) -> SyncFailed:
        """Fence the log after a failed sync: fail every queued waiter. Returns the error."""
        if self._failure is None:
            self._failure = f"{self.where}: sync failed ({exc}); writes refused until restart"
        self._fail(self._waiters)
        self._waiters = []
        self._drop_sealed(list(self._sealed))  # never synced now: nothing after the failure is vouched for
        return SyncFailed(self._failure)

    def _drop_sealed(self, entries: list[tuple[int, str]]) -> None:
        """Forget and close these sealed-segment fds (those still held; identity match)."""
        for entry in entries:
            for i, held in enumerate(self._sealed):
                if held is entry:
                    del self._sealed[i]
                    try:
                        os.close(entry[0])
                    except OSError:
                        pass
                    break

    def add_sealed(self, fds: list[int], path: str) -> None:
        """Take ownership of fds of a segment just sealed and not yet synced (from
        :meth:`Segment.seal`): the next round fdatasyncs them with the active
        segment, and so do :meth:`sync_inline` and the log's close; then they are
        closed. The caller requests the round (:meth:`request`). Closes them at
        once when the log is fenced (nothing more is synced then)."""
        for fd in fds:
            self._sealed.append((fd, path))
        if self._failure is not None or self._closed:
            self._drop_sealed(list(self._sealed))

    @property
    def _round_done(self) -> bool:
        """The round's worker returned (its result is final)."""
        r = self._native_round
        return r.done() if r is not None else self._returned

    @property
    def round_in_flight(self) -> bool:
        """A round was started and the loop has not settled it yet."""
        return self._round

    @property
    def sealed_pending(self) -> int:
        """How many sealed-segment files (.log / .index) still wait for their sync."""
        return len(self._sealed)

    def _fail(self, waiters: list[asyncio.Future], reason: str | None = None) -> None:
        for fut in waiters:
            if not fut.done():
                error = SyncFailed(self._failure) if reason is None else StorageError(reason)
                fut.set_exception(error)
                self.flusher.failed += 1

    # -- requests ----------------------------------------------------------------

    def request(self, wait: bool) -> asyncio.Future | None:
        """Ask for a sync of everything written so far.

        ``wait``: return a future that completes when a round covering it
        returned (raises SyncFailed if that round failed); otherwise the round
        is not awaited (None). Without a running event loop the sync is done
        inline and None returned. Raises SyncFailed when the log is fenced, or
        when the inline sync fails (which fences it).
        """
        self.check()
        loop = _running_loop()
        if loop is None:
            self.sync_inline()
            return None
        fut: asyncio.Future | None = None
        if wait:
            fut = loop.create_future()
            self._waiters.append(fut)
        else:
            self._wanted = True
        if self._native_round is not None:
            self._native_round.ask()  # (a compiled worker reads this flag, not the two above)
        # "asked" is set above, "done" read here: see the module docstring
        if (not self._round or self._round_done) and not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._start, loop)
        return fut

    def barrier(self) -> asyncio.Future | None:
        """A future completing once everything written so far is synced, or None when
        nothing is waiting for a sync (or no event loop runs). Raises SyncFailed when fenced."""
        self._settle()
        self.check()
        if not self._round and not self._waiters and not self._scheduled and not self._sealed:
            return None
        return self.request(wait=True)

    def sync_inline(self, kind: str = "inline") -> None:
        """fdatasync on this thread (blocking): sealed segments not yet synced (also those
        a round in flight holds), then the active one. A failure fences the log and
        raises SyncFailed. ``kind``: the label its time is recorded under (metrics)."""
        self.check()
        t0 = time.perf_counter()
        try:
            for entry in list(self._sealed):
                os.fdatasync(entry[0])
                self._drop_sealed([entry])
            self._sync_inline()
        except OSError as exc:
            raise self.fence(exc) from exc
        metrics.observe_fsync(kind, time.perf_counter() - t0)

    def sealed_fds(self) -> list[int]:
        """The fds of sealed segments not yet synced, for a caller that fdatasyncs them
        itself (a close of many logs at once) and then calls :meth:`synced_by_caller`."""
        return [fd for fd, _ in self._sealed]

    def synced_by_caller(self) -> None:
        """The caller fdatasynced every fd :meth:`sealed_fds` returned (and the active
        segment) successfully: forget and close the sealed ones, as :meth:`sync_inline` does."""
        self.check()
        self._drop_sealed(list(self._sealed))

    # -- rounds ------------------------------------------------------------------

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the loop: settle a round whose worker returned, then start the next one if
        anything asked for it. Runs from ``call_soon`` and from the worker's wake-up;
        calling it again is harmless."""
        self._scheduled = False
        self._settle()
        if self._round:
            return
        if self._closed or self._failure is not None:
            return  # close() / fence() settled the waiters
        if not self._waiters and not self._wanted and not self._sealed:
            return
        waiters, self._waiters = self._waiters, []
        self._wanted = False
        sealed = list(self._sealed)  # sealed segments first: older data, and a waiter may be in one
        fds: list[int] = []
        try:
            for fd, _ in sealed:
                fds.append(os.dup(fd))
            fds += self._targets()
            flusher = self.flusher
            if flusher.native:
                self._loop = loop
                r = _sync_c.Round(self._wake)
                flusher.submit_round(r, fds, bool(waiters or sealed))  # the worker closes the fds
                self._round_waiters, self._round_sealed, self._round_fds = waiters, sealed, []
                self._native_round, self._round = r, True
            else:
                self._round_waiters, self._round_sealed, self._round_fds = waiters, sealed, fds
                self._returned, self._round = False, True
                flusher.submit(lambda: self._run(loop, fds, bool(waiters or sealed)))
        except (OSError, RuntimeError) as exc:
            for fd in fds:
                os.close(fd)
            self._round, self._round_waiters, self._round_sealed = False, [], []
            self._waiters = waiters + self._waiters
            if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
                # no fd left for the dup: nothing was synced, nor did a sync fail (no fence).
                # Sync here instead, on the loop: no round is in flight and nothing closes these
                # fds meanwhile, so no dup is needed (and waiting for fds other rounds hold could
                # wait for ever: the sealed segments' fds are freed only by a sync)
                self.flusher.dup_refused += 1
                try:
                    self.sync_inline("inline_no_fd")
                except SyncFailed:
                    return  # fenced: its waiters failed
                waiters, self._waiters = self._waiters, []
                self._wanted = False
                self._acknowledge(waiters)  # each was written before this sync started
                return
            self.fence(exc)  # the flusher was shut down: these waiters cannot be made durable

    def _wake(self) -> None:
        """A compiled round's call back (on its worker, with the GIL): :meth:`_start` on the loop."""
        loop = self._loop
        try:
            loop.call_soon_threadsafe(self._start, loop)  # type: ignore[union-attr]
        except RuntimeError:  # the loop is closed: nobody is left to tell
            pass

    def _run(self, loop: asyncio.AbstractEventLoop, fds: list[int], wake: bool) -> None:
        """The round, in a worker: fdatasync ``fds`` (closing them), store the result,
        mark it done, and wake the loop when it has something to do (``wake``: the
        round had waiters or sealed segments)."""
        try:
            result = fdatasync_all(fds)
        except BaseException as exc:  # not an fdatasync error: the round proves nothing
            result = (0, OSError(str(exc)), 0.0)
        error = result[1]
        self._round_result = result
        self._returned = True
        # the loop closes the fds when it settles the round (one GIL hand-off less here);
        # a log closed meanwhile settles nothing more: then this thread closes them. "done"
        # is set above and "closed" read here, the loop does the opposite (close())
        if self._closed:
            close_fds(fds)
        # "done" is set above, "asked" read here: see the module docstring
        if wake or error is not None or self._waiters or self._wanted:
            try:
                loop.call_soon_threadsafe(self._start, loop)
            except RuntimeError:  # the loop is closed: nobody is left to tell
                pass

    def _settle(self) -> None:
        """On the loop: the bookkeeping of a round whose worker returned (none otherwise):
        fence on failure, else close its sealed fds and complete its waiters."""
        if not self._round or not self._round_done:
            return
        r = self._native_round
        if r is not None:
            calls, errno, seconds = r.result()
            error = OSError(errno, os.strerror(errno)) if errno else None
            self._native_round = None
        else:
            calls, error, seconds = self._round_result
        waiters, sealed = self._round_waiters, self._round_sealed
        close_fds(self._round_fds)
        self._round, self._round_waiters, self._round_sealed, self._round_fds = False, [], [], []
        flusher = self.flusher
        flusher.rounds += 1
        flusher.fdatasync_calls += calls
        flusher.sync_seconds += seconds
        if calls:
            metrics.observe_fsync("group_commit", seconds)
        if error is not None or self._failure is not None:
            # a sync that failed meanwhile (inline: seal, close, sync()) may have been the one
            # Linux reported this file's error to: this round's success proves nothing then
            self._waiters = waiters + self._waiters
            self.fence(error or OSError("an earlier sync of this log failed"))
            return
        self._drop_sealed(sealed)  # synced: those segments are whole on disk
        self._acknowledge(waiters)

    def _acknowledge(self, waiters: list[asyncio.Future]) -> None:
        """A sync that covers the writes of ``waiters`` succeeded: complete them (a cancelled
        one, whose client left, is skipped)."""
        flusher = self.flusher
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
                flusher.acknowledged += 1

    def close(self, synced: bool) -> None:
        """The log closed after a final inline sync (``synced``: it succeeded). Waiters not
        in a round in flight complete when it did and no round is in flight (a round
        in flight might be the one that consumes a sync error); otherwise they fail."""
        self._settle()  # a round that returned unsettled (a silent periodic one) is not in flight
        self._closed = True
        if self._round_done:  # returned since the settle above (its worker may have missed the flag)
            close_fds(self._round_fds)
        self._drop_sealed(list(self._sealed))  # empty after a good final sync
        waiters, self._waiters = self._waiters, []
        if synced and not self._round and self._failure is None:
            self._acknowledge(waiters)
        elif self._failure is not None:
            self._fail(waiters)
        else:
            self._fail(waiters, f"{self.where}: closed before a sync covered this write")


_SHARED: Flusher | None = None


def shared_flusher() -> Flusher:
    """The process-wide Flusher for logs opened without one (created on first use)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = Flusher()
    return _SHARED
