"""Start and stop time of a real server over a data directory holding many partitions.

Usage: ``python benchmarks/bench_startstop.py [--partitions 2000] [--rounds 3]
[--busy none|dd|fsync] [--evict] [--server-python PY ...] [--data-dir DIR]``

Setup (once, with the first server interpreter): a server on a fresh data directory
gets one stream and ``--partitions`` partitions in topics of at most 1000 (the
per-topic cap), one message sent to each, and is stopped with SIGTERM.

Then, ``--rounds`` times for each ``--server-python`` in turn (A/B alternating over the
same data directory; the default is this interpreter): ``headwater serve`` is started
and *start* is the wall time from the spawn to its ``headwater started`` log line
(interpreter start and imports included: compare it with ``--partitions 0``'s figure);
then SIGTERM is sent and *stop* is the wall time from the signal to the exit.

``--busy``: another process keeps the disk busy for the whole measurement:
``dd`` writes 2000 MiB with ``oflag=direct`` in a loop to a file beside the data
directory; ``fsync`` writes 1 MiB and fsyncs it in a loop (a journal commit each).
``--evict``: the data files' pages are dropped from the page cache before each start
(``posix_fadvise(POSIX_FADV_DONTNEED)``), so recovery reads them from the disk.
Prints one line per run and the median of each server's starts and stops.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from ports import free_port  # noqa: E402  (a sibling module: benchmarks run as scripts)

STARTED = "headwater started"


class Server:
    def __init__(self, python: str, data_dir: str, log_path: str):
        self.python = python
        self.data_dir = data_dir
        self.log_path = log_path
        self.tcp = free_port()
        self.proc: subprocess.Popen | None = None

    def start(self) -> float:
        """Spawn and wait for the started line; returns the seconds it took."""
        before = self._log().count(STARTED)
        args = [
            self.python, "-m", "headwater", "serve", "--data-dir", self.data_dir,
            "--tcp-address", f"127.0.0.1:{self.tcp}",
            # the other listeners on port 0 (the kernel's pick): only Iggy TCP is talked to
            "--kafka-address", "127.0.0.1:0", "--http-address", "127.0.0.1:0",
            "--quic-address", "127.0.0.1:0", "--websocket-address", "127.0.0.1:0",
            "--with-default-root-credentials",
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(args, stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT, env=env)
        while self._log().count(STARTED) == before:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self._log()[-3000:]}")
            time.sleep(0.005)
        return time.perf_counter() - t0

    def stop(self) -> float:
        """SIGTERM and wait for the exit; returns the seconds it took."""
        assert self.proc is not None
        t0 = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait()
        took = time.perf_counter() - t0
        self.proc = None
        if rc != 0:
            raise RuntimeError(f"server exited with {rc}:\n{self._log()[-3000:]}")
        return took

    def _log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""


async def _populate(address: str, partitions: int) -> None:
    import apache_iggy as ig

    c = ig.IggyClient(ig.TcpConfig(server_address=address, reconnection=ig.TcpReconnectionConfig(enabled=False)))
    await c.connect()
    await c.login_user("iggy", "iggy")
    await c.create_stream("startstop")
    left, n = partitions, 0
    while left > 0:
        count = min(left, 1000)
        await c.create_topic("startstop", f"t{n}", count)
        for p in range(count):
            await c.send_messages("startstop", f"t{n}", p, [ig.SendMessage(b"x" * 100)])
        left -= count
        n += 1


def _busy(kind: str, directory: str) -> subprocess.Popen | None:
    if kind == "none":
        return None
    target = os.path.join(directory, "busy.tmp")
    if kind == "dd":
        loop = f"while true; do dd if=/dev/zero of={target} bs=1M count=2000 oflag=direct status=none; done"
        return subprocess.Popen(["sh", "-c", loop], start_new_session=True)
    code = (
        "import os,sys\n"
        f"fd=os.open({target!r},os.O_WRONLY|os.O_CREAT,0o644)\nb=os.urandom(1<<20)\n"
        "while True:\n os.pwrite(fd,b,0)\n os.fsync(fd)\n"
    )
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def _evict(data_dir: str) -> None:
    """Drop the data files' pages from the page cache (``POSIX_FADV_DONTNEED``, clean pages
    only): the next start reads them from the disk, as after a reboot (directories stay cached)."""
    for root, _, files in os.walk(data_dir):
        for name in files:
            try:
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--busy", choices=("none", "dd", "fsync"), default="none")
    ap.add_argument("--server-python", action="append", help="interpreter(s) to run the server with (A/B)")
    ap.add_argument("--data-dir", help="reuse (or make) this data directory; default: a temporary one")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--evict", action="store_true", help="drop the data files from the page cache before each start")
    args = ap.parse_args()
    pythons = args.server_python or [sys.executable]
    root = tempfile.mkdtemp(prefix="bench-startstop-", dir="/work" if os.path.isdir("/work") else None)
    data_dir = args.data_dir or os.path.join(root, "data")
    busy = None
    try:
        if not os.path.isdir(os.path.join(data_dir, "streams")):
            s = Server(pythons[0], data_dir, os.path.join(root, "setup.log"))
            s.start()
            t0 = time.perf_counter()
            asyncio.run(_populate(f"127.0.0.1:{s.tcp}", args.partitions))
            print(f"setup: {args.partitions} partitions made and written in {time.perf_counter() - t0:.1f} s")
            s.stop()
        print(f"load average before: {os.getloadavg()[0]:.2f}; busy: {args.busy}")
        busy = _busy(args.busy, root)
        if busy is not None:
            time.sleep(2)  # let it get going
        results: dict[str, tuple[list[float], list[float]]] = {p: ([], []) for p in pythons}
        for r in range(args.rounds):
            for i, py in enumerate(pythons):
                s = Server(py, data_dir, os.path.join(root, f"server-{i}.log"))
                if args.evict:
                    _evict(data_dir)
                start = s.start()
                time.sleep(0.5)
                stop = s.stop()
                results[py][0].append(start)
                results[py][1].append(stop)
                print(f"round {r} server {i} ({py}): start {start:.2f} s, stop {stop:.2f} s, "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)
        for i, py in enumerate(pythons):
            starts, stops = results[py]
            print(f"server {i} ({py}): start median {statistics.median(starts):.2f} s "
                  f"(min {min(starts):.2f}, max {max(starts):.2f}); stop median {statistics.median(stops):.2f} s "
                  f"(min {min(stops):.2f}, max {max(stops):.2f})")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        if busy is not None:
            os.killpg(busy.pid, signal.SIGTERM)
            busy.wait()
        if not args.keep:  # (a --data-dir given lives elsewhere and stays)
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
