"""Bench-only probe of a ``headwater serve`` process (``bench_ack_latency.py --probe``): never
imported by the server itself; it is loaded because the bench puts this directory first on the
server's ``PYTHONPATH`` (Python imports ``sitecustomize`` at start-up).

With ``HW_ACK_PROBE=<path>`` set, it records, in ``time.monotonic_ns`` (the same clock in every
process of the machine, so the client's send and ack times line up with these):

- ``gc``: every collection of the cyclic GC (start, duration, generation, objects collected);
- ``frames``: per SendMessages served inline, the time its first bytes were received
  (``receiving``), how many receive callbacks its bytes took, when ``serve`` started and ended,
  its size, the loop thread's CPU time and run-queue wait (``schedstat``) during ``serve``
  (wall minus both: blocked in a system call), and the wall time of its ``pwrite`` calls; since
  session 13 also the wall time of ``verify_and_stamp`` (XXH3 of every frame) and of the log's
  ``append`` (its ``pwrite`` included) within ``serve``, and the loop thread's CPU time and
  run-queue wait from the first byte to ``serve`` (the receive);
- ``lag``: with ``HW_ACK_PROBE_LAG_MS`` (e.g. 1), a task sleeping that long in a loop, recording
  every wake-up later than the sleep by 2 ms or more, with the loop thread's CPU time and
  run-queue wait meanwhile (busy, preempted, or else blocked in a system call); it adds ~1000 timer wake-ups a second, so it is off unless asked for;
- ``calls``: the wall time of calls that may block the loop: segment rotation and creation,
  ``Segment.seal``, index flushes, ``os.posix_fallocate``/``ftruncate`` on the loop thread, and
  the write-behind worker's ranges and the flusher's rounds (their own threads);

and writes them as JSON to the path when the process exits (SIGTERM: the server shuts down
cleanly). Records are plain tuples in lists; the probe costs a few µs per request.
"""

from __future__ import annotations

import os

_OUT = os.environ.get("HW_ACK_PROBE")

if _OUT:
    import atexit
    import gc
    import json
    import threading
    import time

    _ns = time.monotonic_ns
    _gc: list[tuple] = []
    _frames: list[tuple] = []
    _lag: list[tuple] = []
    _calls: list[tuple] = []
    _gc_start = [0]
    _cpu = time.thread_time_ns  # (called on the loop thread: its own CPU time)
    _schedstat = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)

    def _wait() -> int:
        """The main thread's run-queue wait so far (ns; schedstat's second field)."""
        return int(os.pread(_schedstat, 64, 0).split()[1])
    _main = threading.main_thread().ident

    def _on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            _gc_start[0] = _ns()
        else:
            t0 = _gc_start[0]
            _gc.append((t0, _ns() - t0, info.get("generation"), info.get("collected"),
                        threading.get_ident() == _main))

    gc.callbacks.append(_on_gc)

    def _timed(owner, name: str, label: str) -> None:
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            t0 = _ns()
            try:
                return original(*args, **kwargs)
            finally:
                t1 = _ns()
                _calls.append((label, t0, t1 - t0, threading.get_ident() == _main))

        wrapper.__wrapped__ = original
        setattr(owner, name, wrapper)

    def _install() -> None:
        from headwater.frontends import frames as frames_mod
        from headwater.frontends.iggy import server as iggy_server
        from headwater.storage.local import flusher as flusher_mod
        from headwater.storage.local import index as index_mod
        from headwater.storage.local import log as log_mod
        from headwater.storage.local import segment as segment_mod
        from headwater.storage.local import writebehind as wb_mod

        inline_cls = iggy_server._InlineRequests
        state = {"first": 0, "updates": 0, "pwrite": 0, "verify": 0, "append": 0, "c_first": 0, "w_first": 0}
        original_receiving = inline_cls.receiving
        original_serve = inline_cls.serve

        def receiving(self):
            if state["first"] == 0:
                state["first"] = _ns()
                state["c_first"], state["w_first"] = _cpu(), _wait()
            return original_receiving(self)

        def serve(self, head, body):
            t0, c0, w0 = _ns(), _cpu(), _wait()
            try:
                return original_serve(self, head, body)
            finally:
                t1 = _ns()
                # 8.. (session 13): verify_and_stamp ns, the log's append ns (its pwrite included),
                # the loop thread's CPU and run-queue wait from the first byte to serve's start
                _frames.append((state["first"] or t0, state["updates"], t0, t1, len(body), _cpu() - c0, _wait() - w0,
                                state["pwrite"], state["verify"], state["append"],
                                c0 - (state["c_first"] or c0), w0 - (state["w_first"] or w0)))
                state["first"] = state["updates"] = state["pwrite"] = state["verify"] = state["append"] = 0
                state["c_first"] = state["w_first"] = 0

        inline_cls.receiving = receiving
        inline_cls.serve = serve

        original_updated = frames_mod.FrameReader.buffer_updated

        def buffer_updated(self, nbytes):
            state["updates"] += 1
            return original_updated(self, nbytes)

        frames_mod.FrameReader.buffer_updated = buffer_updated

        from headwater.codec import batch as batch_mod

        original_verify = batch_mod.verify_and_stamp

        def verify_and_stamp(*args, **kwargs):  # summed per served frame (frames' field 8)
            t0 = _ns()
            try:
                return original_verify(*args, **kwargs)
            finally:
                state["verify"] += _ns() - t0

        batch_mod.verify_and_stamp = verify_and_stamp
        original_append = log_mod.LocalPartitionLog.append

        def log_append(self, batch):  # summed per served frame (frames' field 9)
            t0 = _ns()
            try:
                return original_append(self, batch)
            finally:
                state["append"] += _ns() - t0

        log_mod.LocalPartitionLog.append = log_append

        _timed(log_mod.LocalPartitionLog, "_rotate", "log._rotate")
        _timed(log_mod.LocalPartitionLog, "_open_next_segment", "log._open_next_segment")
        _timed(segment_mod.Segment, "seal", "segment.seal")
        original_create = segment_mod.Segment.create.__func__

        def create(cls, *args, **kwargs):
            t0 = _ns()
            try:
                return original_create(cls, *args, **kwargs)
            finally:
                _calls.append(("segment.create", t0, _ns() - t0, threading.get_ident() == _main))

        segment_mod.Segment.create = classmethod(create)
        for name in dir(index_mod):
            obj = getattr(index_mod, name)
            if isinstance(obj, type) and obj.__module__ == index_mod.__name__:
                for meth in ("flush", "_flush", "write_pending", "_write_pending"):
                    if meth in obj.__dict__ and callable(obj.__dict__[meth]):
                        _timed(obj, meth, f"index.{name}.{meth}")
        _timed(segment_mod, "pwrite_all", "segment.pwrite_all")
        timed_pwrite = segment_mod.pwrite_all

        def pwrite_all(fd, data, position):  # also summed per served frame (frames' last field)
            t0 = _ns()
            try:
                return timed_pwrite(fd, data, position)
            finally:
                state["pwrite"] += _ns() - t0

        segment_mod.pwrite_all = pwrite_all
        _timed(index_mod, "_pwrite_all", "index._pwrite_all")
        _timed(wb_mod.WriteBehind, "add", "writebehind.add")
        _timed(wb_mod.WriteBehind, "_run", "writebehind._run")
        _timed(flusher_mod, "fdatasync_all", "flusher.fdatasync_all")
        try:  # the preallocating worker's fallocate calls (session 11 on)
            from headwater.storage.local import prealloc as prealloc_mod
        except ImportError:
            prealloc_mod = None
        if prealloc_mod is not None:
            _timed(prealloc_mod, "reserve", "prealloc.reserve")
            _timed(prealloc_mod.Reservations, "_job_spare", "prealloc.job_spare")
            _timed(prealloc_mod.Reservations, "_job_reserve", "prealloc.job_reserve")
            original_take = prealloc_mod.Reservations.take_spare

            def take_spare(self):  # at a roll: whether the spare was ready (hit) or not (miss)
                spare = original_take(self)
                _calls.append(("prealloc.take_spare:" + ("hit" if spare is not None else "miss"), _ns(), 0,
                               threading.get_ident() == _main))
                return spare

            prealloc_mod.Reservations.take_spare = take_spare

        chunk = os.environ.get("HW_ACK_PROBE_CHUNK_BYTES")  # an experiment: write-behind's hand-over step
        if chunk:
            log_mod.CHUNK_BYTES = int(chunk)
        lag_ms = float(os.environ.get("HW_ACK_PROBE_LAG_MS", "0") or 0)
        if lag_ms > 0:
            from headwater import app as app_mod

            original_start = app_mod.App.start

            async def start(self, bound):
                import asyncio

                await original_start(self, bound)
                sleep_s, late_ns = lag_ms / 1000, 2_000_000

                async def probe():
                    while True:
                        t0, c0, w0 = _ns(), _cpu(), _wait()
                        await asyncio.sleep(sleep_s)
                        over = _ns() - t0 - int(sleep_s * 1e9)
                        if over >= late_ns:
                            _lag.append((t0, over, _cpu() - c0, _wait() - w0))

                self._jobs.append(asyncio.get_running_loop().create_task(probe()))

            app_mod.App.start = start

    def _dump() -> None:
        try:
            with open(_OUT, "w") as f:
                json.dump({"gc": _gc, "frames": _frames, "lag": _lag, "calls": _calls,
                           "gc_frozen": gc.get_freeze_count()}, f)
        except OSError:
            pass

    try:
        _install()
    except Exception as e:  # the probe must never keep the server from starting
        _calls.append(("probe-install-failed: " + repr(e), 0, 0, True))
    atexit.register(_dump)
