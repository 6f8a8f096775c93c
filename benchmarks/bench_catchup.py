"""Catch-up reads: a consumer far behind reads a topic back from the disk, not the page cache.

Usage::

    python benchmarks/bench_catchup.py --server-python /work/wt/before6/.venv/bin/python \\
        --server-python .venv/bin/python --gb 2 --passes 2
    python benchmarks/bench_catchup.py --server-python /work/main/.venv/bin/python \\
        --server-python .venv/bin/python --gb 1 --passes 1 --protocol kafka --consumers 2

For each ``--server-python`` (that venv's code, ``headwater serve`` on 127.0.0.1) it writes
``--gb`` GB of ``--size``-byte messages into a one-partition topic with our raw generator
(batches of 1000, 8 in flight), with ``[system] write_behind_cache_bytes`` set to ``--budget``
(smaller than the topic, so the topic does not fit the budget, as compare.py's 1 KB topic does
not fit the default 2 GiB). Then, pass after pass and server after server, it reads the whole
topic back from offset 0 with compare.py's raw poller (``RAW_POLL_COUNT`` = 10000 messages per
poll, ``RAW_POLL_WINDOW`` = 2 polls in flight), or with ``--protocol kafka`` compare.py's
confluent-kafka consumer (topic ``bench.poll``, its ``CONFLUENT_CONSUMER`` settings);
``--consumers N`` has N such readers (threads, a connection each) read the whole topic at once:

- ``as written`` (first pass only): the page cache as writing the topic left it, what compare.py's
  consume row after its produce row meets;
- ``cold``: every segment file first written back (``fdatasync``) and dropped from the page
  cache (``posix_fadvise(POSIX_FADV_DONTNEED)``), so every byte comes from the disk;
- ``warm``: right after, with whatever the cold pass left in the page cache.

During each read a second connection sends Ping (code 1) one at a time and records the round
trips: a read that blocks the server's event loop shows up as that client's latency.

Per pass it prints GB/s of payload and messages/s (all readers together), the server's CPU per
million messages read (``/proc/<pid>/stat``,
user + system), the share of the read the event loop's thread spent waiting for the disk
(:class:`LoopSampler`), the Ping round trip p50 / p99 / max in ms, and how much of the topic's files is
in the page cache after the read (``fincore``). The disk's own reference, measured right before
each cold read: ``O_DIRECT`` sequential reads of the same segment files (8 MiB reads, one and two
at a time, nothing cached), and buffered reads (1 MiB ``readinto``) after the same DONTNEED drop,
which include the cost of putting the pages into the page cache. (On this VM the virtual disk's
host may cache what was read recently: a disk figure above ~1.3 GB/s is that, not the disk.)

Numbers only; nothing here asserts a speed (docs/benchmarks.md keeps the results).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import glob
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tools"))

from bench_iggy_poll import fill, sdk_client  # noqa: E402
from compare_servers import Headwater  # noqa: E402

GB = 1_000_000_000


class BudgetHeadwater(Headwater):
    """``headwater serve`` with ``[system] write_behind_cache_bytes`` set through its env key."""

    def __init__(self, base: Path, python: str, budget: int | None):
        super().__init__(base, python)
        self.budget = budget

    def env(self) -> dict:
        env = super().env()
        if self.budget is not None:
            env["HEADWATER_SYSTEM_WRITE_BEHIND_CACHE_BYTES"] = str(self.budget)
        return env


def segment_files(data: Path) -> list[str]:
    return sorted(glob.glob(str(data / "**" / "*.log"), recursive=True))


def drop_cache(files: list[str]) -> None:
    """Write each file back and drop its pages from the page cache."""
    from headwater.storage.local.readahead import evict

    for path in files:
        evict(path)


def cached_bytes(files: list[str]) -> int:
    """Bytes of ``files`` in the page cache (util-linux ``fincore``)."""
    if not files or shutil.which("fincore") is None:
        return -1
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *files],
                         capture_output=True, text=True, check=False).stdout
    return sum(int(x) for x in out.split() if x.isdigit())


def _direct(path: str, position: int, block: int) -> int:
    buf = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT wants
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        return os.preadv(fd, [buf], position)
    finally:
        os.close(fd)
        buf.close()


def disk_reference(files: list[str], block: int = 8 << 20) -> tuple[float, float, float]:
    """GB/s of reading ``files`` front to back: ``O_DIRECT`` reads of ``block`` bytes one at a
    time and two at a time, then buffered 1 MiB reads after dropping the files' pages."""
    out = []
    for threads in (1, 2):
        jobs = [(path, pos) for path in files for pos in range(0, os.path.getsize(path), block)]
        t0 = time.perf_counter()
        try:
            with concurrent.futures.ThreadPoolExecutor(threads) as pool:
                total = sum(pool.map(lambda job: _direct(job[0], job[1], block), jobs))
        except OSError:  # a filesystem without O_DIRECT (tmpfs)
            total = float("nan")
        out.append(total / (time.perf_counter() - t0) / GB)
    drop_cache(files)
    chunk = bytearray(1 << 20)
    total, t0 = 0, time.perf_counter()
    for path in files:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(chunk):
                total += n
    out.append(total / (time.perf_counter() - t0) / GB)
    drop_cache(files)
    return out[0], out[1], out[2]


class Pinger:
    """A second client: Ping after Ping on its own connection, round trips recorded (ms)."""

    def __init__(self, address: str):
        from _harness import IggyConn

        self.conn = IggyConn(address, timeout=60)
        self.conn.login()
        self.frame = self.conn.frame(1)
        self.lat: list[float] = []
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self.stop.is_set():
            t0 = time.perf_counter()
            self.conn.send(self.frame)
            if self.conn.read()[:2] != ("reply", 0):
                raise RuntimeError("Ping refused")
            self.lat.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.001)

    def start(self) -> None:
        self.lat, self.stop = [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def finish(self) -> tuple[float, float, float]:
        self.stop.set()
        self.thread.join()
        lat = sorted(self.lat) or [0.0]
        return lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))], lat[-1]


class LoopSampler:
    """Samples the state of the server's main thread (the event loop) every millisecond from
    ``/proc/<pid>/task/<pid>/stat``: the share of samples in ``D`` (uninterruptible sleep: a
    ``pread`` waiting for the disk) is how much of the read the loop spent blocked on the disk,
    whatever the load on the machine does to the Ping round trips."""

    def __init__(self, pid: int):
        self.path = f"/proc/{pid}/task/{pid}/stat"
        self.samples = self.blocked = 0
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                with open(self.path) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                return
            self.samples += 1
            self.blocked += state == "D"
            time.sleep(0.001)

    def start(self) -> None:
        self.samples = self.blocked = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def finish(self) -> float:
        self.stop.set()
        self.thread.join()
        return 100.0 * self.blocked / max(1, self.samples)


def _read_once(server, messages: int, size: int, protocol: str) -> dict:
    """One consumer reading the topic from offset 0: compare.py's raw poller (``iggy``) or its
    confluent-kafka consumer (``kafka``, the topic's Kafka name ``bench.poll``)."""
    from compare_clients import Confluent, IggyRaw

    phase = {"expect": messages, "deadline_s": 600}
    if protocol == "kafka":
        client = Confluent({"target": {"kafka": server.kafka, "kafka_topic": "bench.poll"}, "size": size})
        res = client.consume(phase)
    else:
        raw = IggyRaw({"target": {"iggy": server.iggy, "stream": "bench", "topic": "poll"}, "size": size})
        try:
            res = raw.consume_raw(phase)
        finally:
            raw.conn.close()
    if res["count"] < messages:
        raise RuntimeError(f"read back {res['count']} of {messages}")
    return res


def read_back(server, messages: int, size: int, protocol: str = "iggy", consumers: int = 1) -> tuple[float, float]:
    """(seconds, server CPU seconds) of ``consumers`` consumers (threads; each its own
    connection) each reading the whole topic from offset 0 at once: from the first start to
    the last end."""
    s0 = server.cpu()
    with concurrent.futures.ThreadPoolExecutor(consumers) as pool:
        results = list(pool.map(lambda _: _read_once(server, messages, size, protocol), range(consumers)))
    return max(r["t1"] for r in results) - min(r["t0"] for r in results), server.cpu() - s0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server-python", action="append", default=[],
                    help="a venv's python whose code serves (repeatable; default this interpreter)")
    ap.add_argument("--gb", type=float, default=2.0, help="GB of payload written (default 2)")
    ap.add_argument("--size", type=int, default=1024, help="payload bytes (default 1024)")
    ap.add_argument("--budget", type=int, action="append", default=[],
                    help="write_behind_cache_bytes of each server, in --server-python order (repeatable; "
                         "default 512 MiB; the last one given applies to the servers after it)")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--protocol", choices=("iggy", "kafka"), default="iggy",
                    help="the readers: our raw Iggy poller, or confluent-kafka consumers (default iggy)")
    ap.add_argument("--consumers", type=int, default=1, help="readers at once, each reading the whole topic")
    args = ap.parse_args()
    pythons = args.server_python or [sys.executable]
    messages = int(args.gb * GB / args.size) // 1000 * 1000
    base = Path(tempfile.mkdtemp(prefix="bench-catchup-", dir=os.environ.get("BENCH_DIR")))
    servers = []
    try:
        for i, python in enumerate(pythons):
            budgets = args.budget or [512 << 20]
            budget = budgets[min(i, len(budgets) - 1)]
            server = BudgetHeadwater(base / str(i), os.path.abspath(python), budget).start()
            servers.append(server)
            loop = asyncio.new_event_loop()
            loop.run_until_complete(sdk_client(server.iggy, create=True))
            t0, s0 = time.perf_counter(), server.cpu()
            fill(server.iggy, args.size, messages)
            print(f"server {i} ({python}, write_behind_cache_bytes {budget}): wrote {messages:,} x {args.size} B "
                  f"in {time.perf_counter() - t0:.1f} s, {(server.cpu() - s0) / messages * 1e6:.2f} s/M", flush=True)
            server.files = segment_files(server.data)
            server.pinger = Pinger(server.iggy)
            server.sampler = LoopSampler(server.pid)
        print(f"readers: {args.consumers} x {args.protocol}")
        print("| pass | server | read | GB/s | msg/s | server CPU s/M | loop in disk wait | Ping p50 / p99 / max ms | "
              "cached after GB | disk O_DIRECT x1 / x2 GB/s | disk buffered GB/s | load |")
        print("|---|---|---|---:|---:|---:|---:|---|---:|---|---:|---|")
        for n in range(args.passes):
            for i, server in enumerate(servers):
                # pass 1 first reads the topic as writing left the page cache (compare.py's case)
                for kind in ("as written", "cold", "warm") if n == 0 else ("cold", "warm"):
                    ref = "- | -"
                    if kind == "cold":  # the disk's reference right before, then every page dropped
                        direct, direct2, buffered = disk_reference(server.files)
                        ref = f"{direct:.2f} / {direct2:.2f} | {buffered:.2f}"
                        drop_cache(server.files)
                    server.pinger.start()
                    server.sampler.start()
                    wall, cpu = read_back(server, messages, args.size, args.protocol, args.consumers)
                    blocked = server.sampler.finish()
                    p50, p99, top = server.pinger.finish()
                    read = messages * args.consumers
                    print(f"| {n + 1} | {i} | {kind} | {read * args.size / wall / GB:.2f} | {read / wall:,.0f} | "
                          f"{cpu / read * 1e6:.3f} | {blocked:.0f} % | {p50:.2f} / {p99:.2f} / {top:.1f} | "
                          f"{cached_bytes(server.files) / GB:.2f} | {ref} | "
                          f"{os.getloadavg()[0]:.1f} |", flush=True)
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
