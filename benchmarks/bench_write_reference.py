"""What the kernel charges a plain writer for a GB written like Headwater writes it: the reference
for the server's CPU per GB at 1 KB (docs/benchmarks.md, "Cost per byte at 1 KB (session 5)").

No Headwater code runs here. Cases (``--cases``, comma separated; all by default):

- ``new``: 1 MiB ``os.pwrite`` calls (one SendMessages of 1000 x 1 KB) appending to a new file
  in ``--dir``, an ``os.fdatasync`` per MiB in a second thread (the default save policy:
  1024 messages or 1 MiB, synced off the writing thread), at most two syncs queued.
- ``off``: the same appends, no fdatasync (the fsync-off topic).
- ``over``: the same appends over a file written once before (its pages already in the page
  cache: no new page-cache memory), fdatasync per MiB.
- ``anon``: anonymous memory written twice, 1 MiB at a time: the first write touches every
  page for the first time, the second does not.

Prints CPU seconds (user + system, this process, every thread) per GB for each case. The file
is removed after its case. Run it in the same minute as the server benchmark it explains: the
first-touch cost depends on the machine's memory state at that moment.
"""

from __future__ import annotations

import argparse
import mmap
import os
import queue
import resource
import threading
import time

CHUNK = 1 << 20


def _cpu() -> tuple[float, float, int]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime, r.ru_minflt


def _report(label: str, gb: float, t0: tuple, w0: float) -> None:
    u0, s0, f0 = t0
    u1, s1, f1 = _cpu()
    print(f"{label}: {gb:g} GB in {time.perf_counter() - w0:.2f} s wall; CPU user {(u1 - u0) / gb:.2f}"
          f" + system {(s1 - s0) / gb:.2f} = {(u1 - u0 + s1 - s0) / gb:.2f} s/GB; {(f1 - f0) / gb:,.0f} page faults/GB",
          flush=True)


def write_file(label: str, path: str, gb: float, sync: bool, cached: bool) -> None:
    chunks = int(gb * 1024)
    data = os.urandom(CHUNK)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if cached:
            for i in range(chunks):
                os.pwrite(fd, data, i * CHUNK)
            os.fdatasync(fd)
        asks: queue.Queue = queue.Queue()

        def syncer() -> None:
            while asks.get() is not None:
                os.fdatasync(fd)

        worker = threading.Thread(target=syncer)
        worker.start()
        t0, w0 = _cpu(), time.perf_counter()
        for i in range(chunks):
            os.pwrite(fd, data, i * CHUNK)
            if sync and asks.qsize() < 2:
                asks.put(True)
        asks.put(None)
        worker.join()
        _report(label, gb, t0, w0)
    finally:
        os.close(fd)
        os.unlink(path)


def anonymous(gb: float) -> None:
    size = int(gb * (1 << 30))
    data = os.urandom(CHUNK)
    m = mmap.mmap(-1, size)
    try:
        for label in ("anonymous memory, first write", "anonymous memory, second write"):
            t0, w0 = _cpu(), time.perf_counter()
            for off in range(0, size, CHUNK):
                m[off:off + CHUNK] = data
            _report(label, gb, t0, w0)
    finally:
        m.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=".", help="directory for the files (the server's data disk)")
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--cases", default="new,off,over,anon")
    args = ap.parse_args()
    for case in args.cases.split(","):
        path = os.path.join(args.dir, f"headwater-write-reference-{os.getpid()}-{case}")
        if case == "new":
            write_file("new file, fdatasync per MiB", path, args.gb, sync=True, cached=False)
        elif case == "off":
            write_file("new file, no fdatasync", path, args.gb, sync=False, cached=False)
        elif case == "over":
            write_file("cached file rewritten, fdatasync per MiB", path, args.gb, sync=True, cached=True)
        elif case == "anon":
            anonymous(args.gb)
        else:
            raise SystemExit(f"unknown case {case!r}")


if __name__ == "__main__":
    main()
