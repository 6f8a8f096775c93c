"""Disk held by preallocation: ``du`` against the data of many partitions written a little.

Starts ``headwater serve`` (``--server-python``: another venv's interpreter runs that venv's
code, e.g. main's for an A/B), creates one topic of ``--partitions`` partitions (the server's
segment size, 1 GiB, unless ``--segment-size``), sends ``--mib`` MiB of 1 KB messages to each
through the apache-iggy SDK, waits until the preallocating worker is done (the partitions'
allocated bytes unchanged for a second, at most ``--settle`` seconds), and prints, for the
partitions' files: the data (sum of ``st_size``), what the disk holds for them (sum of
``st_blocks`` x 512, what ``du`` counts), the difference, and the spare files left; then
stops the server with SIGTERM (a clean stop) and prints the same again. ``--server-env``
passes settings (``HEADWATER_SYSTEM_PREALLOCATE_WINDOW_BYTES=...``). ``--json`` writes the
figures. docs/benchmarks.md "Disk held by preallocation (session 12)" has a run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from compare_servers import Headwater  # noqa: E402

MIB = 1 << 20


class EnvHeadwater(Headwater):
    def __init__(self, base: Path, python: str, extra_env: dict[str, str]):
        super().__init__(base, python)
        self.extra_env = extra_env

    def env(self) -> dict:
        env = super().env()
        env.update(self.extra_env)
        return env

    def stop_keeping_data(self) -> int | None:
        """SIGTERM (a clean stop) and wait; unlike ``stop`` the data directory stays."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait(10)


def disk(data_dir: Path) -> dict[str, int]:
    """Data bytes, allocated bytes and spare files under the partitions' directories."""
    data = held = spares = files = 0
    for path in data_dir.glob("streams/*/topics/*/partitions/*/*"):
        try:
            st = path.stat()
        except FileNotFoundError:  # a spare linked and removed meanwhile
            continue
        files += 1
        data += st.st_size
        held += st.st_blocks * 512
        spares += path.name.startswith("spare-")
    return {"data": data, "allocated": held, "extra": held - data, "spares": spares, "files": files}


def settle(data_dir: Path, limit_s: float) -> dict[str, int]:
    """``disk()`` once it has not changed for a second (the worker done), or after ``limit_s``."""
    last, since, deadline = None, time.monotonic(), time.monotonic() + limit_s
    while time.monotonic() < deadline:
        now = disk(data_dir)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= 1.0:
            break
        time.sleep(0.1)
    return last or disk(data_dir)


async def produce(address: str, partitions: int, mib: int, segment_size: str | None) -> int:
    from apache_iggy import IggyClient, SendMessage

    c = IggyClient(address)
    await c.connect()
    await c.login_user("iggy", "iggy")
    await c.create_stream("bench")
    options = {"enforce_fsync": "false", "messages_required_to_save": str(1 << 24),
               "size_of_messages_required_to_save": str(1 << 30)}
    if segment_size:
        options["segment_size"] = segment_size
    await c.create_topic("bench", "disk", partitions, options=options)
    batch = [SendMessage(os.urandom(1000)) for _ in range(1000)]  # ~1 MiB with headers
    sent = 0
    for _ in range(mib):
        for p in range(partitions):
            await c.send_messages("bench", "disk", p, batch)
            sent += len(batch)
    return sent


def show(label: str, d: dict[str, int]) -> None:
    print(f"{label}: data {d['data'] / MIB:,.1f} MiB, allocated (du) {d['allocated'] / MIB:,.1f} MiB, "
          f"past the data {d['extra'] / MIB:,.1f} MiB, spare files {d['spares']}, files {d['files']}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server-python", default=sys.executable)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--mib", type=int, default=12, help="MiB sent to each partition (default 12)")
    ap.add_argument("--segment-size", help="the topic's segment_size (default: the server's, 1 GiB)")
    ap.add_argument("--settle", type=float, default=60.0, help="seconds to wait for the worker at most")
    ap.add_argument("--server-env", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="hw-prealloc-disk-"))
    server = EnvHeadwater(base, os.path.abspath(args.server_python),
                          dict(kv.split("=", 1) for kv in args.server_env)).start()
    out: dict = {"args": vars(args), "load_start": os.getloadavg()}
    try:
        data_dir = server.data
        out["messages"] = asyncio.run(produce(server.iggy, args.partitions, args.mib, args.segment_size))
        out["running"] = settle(data_dir, args.settle)
        show(f"{args.partitions} partitions x {args.mib} MiB, server running", out["running"])
        out["stop_rc"] = server.stop_keeping_data()
        out["stopped"] = disk(data_dir)
        show("after a clean stop (SIGTERM)", out["stopped"])
        out["load_end"] = os.getloadavg()
        print(f"# load {out['load_start'][0]:.2f} -> {out['load_end'][0]:.2f}; server stop rc {out['stop_rc']}")
    finally:
        if server.pid is not None:
            server.stop()
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
