"""Headwater side by side with its peers, every server started here on loopback, in one run.

Usage (the documented command; see ``docs/benchmarks.md``)::

    .venv/bin/python benchmarks/compare.py [--sizes 100,1024] [--duration 5] [--only headwater,iggyref,mock,redis,nats]
        [--server-python PATH] [--json out.json] [--chart out.png] [--profile DIR] [--quick]

Systems (``--only`` takes these names):

- ``headwater``: one ``headwater serve`` (run by ``--server-python``, default this interpreter).
  Iggy protocol: apache-iggy ``send_messages`` from 1 and from 4 producer processes (each its own
  connection), our raw generator (``headwater.codec.batch`` + ``headwater.codec.iggy`` on a
  socket), the apache-iggy poll consumer (count 1000, one poll at a time) and our raw poller
  (count 10000, two polls in flight, replies read into one buffer). Kafka protocol: confluent-kafka producer (linger.ms 5,
  batch.num.messages 10000, acks all) and consumer; kafka-python and aiokafka for reference.
  fsync on = topics created with the Iggy topic option ``enforce_fsync`` (every append
  fdatasynced before its acknowledgement); fsync off = ``messages_required_to_save`` and
  ``size_of_messages_required_to_save`` at their maxima (16 Mi messages, 1 GiB: no fdatasync
  within a run that stores less than that per topic; the server's default is left alone).
- ``iggyref``: our Iggy reference peer (``iggy_reference_peer.py``: thread-per-connection,
  blocking sockets, no storage), so the SDK's send and poll rates split into the client's share
  and the server's. With ``--verify`` (it walks every batch and checks every message checksum, as
  Headwater does): apache-iggy ``send_messages`` x1 then the apache-iggy poll consumer reading
  those messages back (count 1000, one poll at a time; the peer serves prebuilt batches, only what
  it was sent, so the poll ends by count, else at its deadline), and x4; then a peer without
  ``--verify``, x1 only (label "(no verify)"). fsync ``none``: nothing is stored. Also the raw
  generator against the verifying peer: its peak and its ack latency at both ticks, paced at the
  rate of Headwater's fsync-off latency rows of this run when Headwater ran first (else half the
  peer's own peak): the floor of the ack time on this machine.
- ``mock``: librdkafka's in-process mock cluster (``test.mock.num.brokers=1``), same confluent
  settings: the ceiling of the Kafka client path. No server process, so no server CPU.
- ``redis``: Debian ``redis-server`` with ``appendonly yes``, ``appendfsync everysec`` (fsync
  "1 s") and ``always`` (fsync on); XADD through ``redis-benchmark -P 100`` and redis-py pipelines,
  XRANGE back with redis-py (the redis-py rows are skipped without it).
- ``nats``: Debian ``nats-server -js`` (file store); nats-py ``publish_async`` (acknowledged by the
  stream) and a pull consumer.

Per message size, each client produces for ``--duration`` seconds (or ``--max-messages``), reads
the same messages back, then a paced producer runs at half the measured produce rate for the ack
latency. Server CPU seconds per million messages come from ``/proc/<pid>/stat`` of the server
process across each measured window; client CPU µs per message from each client process's own
CPU time (``time.process_time``, all its threads; redis-benchmark's from ``RUSAGE_CHILDREN``)
across its phase. A missing peer (binary or client library) is skipped with a
note. Everything binds and connects to 127.0.0.1; every server and client started is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import queue
import resource
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from importlib.util import find_spec
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import compare_report as report  # noqa: E402
from compare_servers import Headwater, IggyReferencePeer, Nats, Redis, ServerProcess, cpu_seconds, nats_version  # noqa: E402
from machine_state import page_cache_cost, warm_memory  # noqa: E402

CLIENTS_PY = HERE / "compare_clients.py"
SYSTEMS = ("headwater", "iggyref", "mock", "redis", "nats")
HW_DEFAULT = report.HW_DEFAULT_FSYNC
"""Headwater's default: acknowledged appends are fdatasynced once 1024 messages (or 1 MiB) are unsynced
(topic options ``messages_required_to_save`` / ``size_of_messages_required_to_save``)."""
HW_OFF = report.HW_OFF_FSYNC
"""Both thresholds at their maxima (16 Mi messages, 1 GiB): no fdatasync within a short run."""
TOPIC_OPTIONS = {
    "on": {"enforce_fsync": "true"},
    HW_DEFAULT: {"enforce_fsync": "false"},
    HW_OFF: {"enforce_fsync": "false", "messages_required_to_save": str(16 * 1024 * 1024),
             "size_of_messages_required_to_save": str(1 << 30)},
}
RAW_POLLER = "Iggy: raw poller (count 10000, 2 in flight)"
"""The consume row of our raw poller (``consume_raw`` in compare_clients.py): what the server serves
when the client costs little, next to the apache-iggy poll consumer (count 1000, one at a time)."""
ONE_MS_TICK = 0.001
"""The raw Iggy generator's second latency tick: Iggy clients have no linger, so how much a
request carries is the client's choice; at 5 ms a request holds ~5,000 messages at 1 M msg/s."""
PEER_NO_VERIFY = report.PEER_NO_VERIFY
"""Label suffix of the reference peer's rows without ``--verify``."""
REDIS_BENCHMARK_CLIENTS = 8
REDIS_BENCHMARK_PIPELINE = 100


@dataclass
class Case:
    """One row: a client against a system, the phases it runs, how many producer processes."""

    system: str
    label: str
    client: str
    fsync: str  # when the server fsyncs: "on" (before every ack), its default, or off (see TOPIC_OPTIONS)
    phases: tuple[str, ...] = ("produce", "consume", "latency")
    producers: int = 1
    consumer_label: str = ""
    ticks: tuple[float, ...] = ()  # latency phases at these ticks (s) after the default 5 ms one
    # latency phases paced at the rate of this run's (system, label, fsync) latency row of the same
    # size when there is one (the same batches every tick, so the two ack times compare), else at
    # half this case's own peak
    rate_of: tuple[str, str, str] | None = None


@dataclass
class Row:
    system: str
    label: str
    fsync: str
    size: int
    op: str  # produce, consume, latency
    count: int = 0
    seconds: float = 0.0
    msg_s: float = 0.0
    mb_s: float = 0.0
    cpu_s_per_m: float | None = None
    client_cpu_us: float | None = None  # client processes' CPU µs per message (all their threads)
    lat_us: dict = field(default_factory=dict)
    lat_unit: str = ""
    rate: float = 0.0
    expected: int | None = None
    stopped_by: str = ""
    error: str = ""
    page_cache_ms_mib: float | None = None  # machine_state.page_cache_cost just before the window


# --------------------------------------------------------------------------- worker processes


class Worker:
    """A ``compare_clients.py`` child: ``@@READY``, then ``RUN``/``@@DONE`` per phase."""

    def __init__(self, spec: dict, log: Path):
        self.log = log
        self.lines: queue.Queue = queue.Queue()
        with open(log, "ab") as err:
            self.proc = subprocess.Popen([sys.executable, str(CLIENTS_PY), json.dumps(spec)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, text=True, cwd=HERE.parent)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("@@"):
                self.lines.put(line.rstrip("\n"))
        self.lines.put("@@EOF")

    def expect(self, timeout: float) -> tuple[str, dict]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            return "DONE", {"error": f"no answer within {timeout:.0f} s"}
        if line == "@@READY":
            return "READY", {}
        if line.startswith("@@DONE "):
            return "DONE", json.loads(line[7:])
        return "DONE", {"error": f"worker exited: {report.tail(self.log)}"}

    def send(self, phase: dict) -> None:
        try:
            self.proc.stdin.write("RUN " + json.dumps(phase) + "\n")
            self.proc.stdin.flush()
        except OSError:
            pass

    def close(self) -> None:
        try:
            self.proc.stdin.write("EXIT\n")
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


# --------------------------------------------------------------------------- the run


class Run:
    def __init__(self, args):
        self.args = args
        self.base = Path(tempfile.mkdtemp(prefix="hw-compare-"))
        self.rows: list[Row] = []
        self.skipped: list[dict] = []
        self.profiles: dict = {}
        self.notes: list[str] = []  # one line per reference peer run: what it answered
        self.versions: dict = {}
        self.machine = machine_note()  # the load average before the first server starts
        self.page_cache_probe = 0.0  # ms/MiB, measured before each window (measure)

    # -- helpers ---------------------------------------------------------------------------

    def deadline(self, phases: int) -> float:
        return phases * (self.args.duration * 4 + 30) + 60

    def phase(self, op: str, **kw) -> dict:
        duration = self.args.latency_duration if op == "latency" else self.args.duration
        return {"op": op, "duration_s": duration, "max_messages": self.args.max_messages, **kw}

    def measure(self, workers: list[Worker], phase: dict, server: ServerProcess | None,
                profile: str | None = None) -> tuple[list[dict], float | None, float]:
        """Run one phase on all ``workers`` at once: their results, the server CPU seconds used
        and the wall seconds between the first send and the last answer."""
        if self.args.warm_memory:
            warm_memory(self.args.warm_memory)
        self.page_cache_probe = page_cache_cost(str(self.base), 32)
        spy = self.start_profile(server, profile) if profile else None
        cpu0 = server.cpu() if server else None
        t0 = time.monotonic()
        for w in workers:
            w.send(phase)
        results = [w.expect(phase.get("deadline_s", phase["duration_s"] * 6) + 60)[1] for w in workers]
        wall = time.monotonic() - t0
        cpu1 = server.cpu() if server else None
        if spy:
            self.stop_profile(spy, profile)
        used = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
        return results, used, wall

    def row(self, case: Case, size: int, op: str, results: list[dict], cpu: float | None,
            expected: int | None = None, rate: float = 0.0, label: str = "") -> Row:
        label = label or (case.consumer_label if op == "consume" and case.consumer_label else case.label)
        r = Row(case.system, label, case.fsync, size, op, expected=expected, rate=round(rate),
                page_cache_ms_mib=round(self.page_cache_probe, 3))
        errors = [x["error"] for x in results if "error" in x]
        if errors:
            r.error = errors[0][:500]
            return self.add(r)
        r.count = sum(x["count"] for x in results)
        r.seconds = max(x["t1"] for x in results) - min(x["t0"] for x in results)
        if r.seconds > 0:
            r.msg_s = r.count / r.seconds
            r.mb_s = sum(x["bytes"] for x in results) / r.seconds / 1e6
        if cpu is not None and r.count:
            r.cpu_s_per_m = cpu / r.count * 1e6
        client_cpu = [x["cpu_s"] for x in results if x.get("cpu_s") is not None]
        if r.count and len(client_cpu) == len(results):
            r.client_cpu_us = sum(client_cpu) / r.count * 1e6
        if op == "latency":
            r.lat_us, r.lat_unit = results[0].get("lat_us", {}), results[0].get("unit", "")
        if op == "produce":
            r.stopped_by = "count" if r.count >= self.args.max_messages else "time"
        elif op == "consume":
            r.stopped_by = "count" if r.count >= (expected or 0) else "time"
        return self.add(r)

    def add(self, r: Row) -> Row:
        self.rows.append(r)
        print(report.progress_line(r), flush=True)
        return r

    # -- one case ---------------------------------------------------------------------------

    def run_case(self, case: Case, size: int, target: dict, server: ServerProcess | None) -> None:
        n = case.producers
        spec = {"client": case.client, "size": size, "target": target, "phases": case.phases,
                "deadline_s": self.deadline(len(case.phases))}
        log = self.base / f"worker-{case.system}-{case.client}-{size}.log"
        workers = [Worker(spec, log) for _ in range(n)]
        try:
            for w in workers:
                kind, info = w.expect(spec["deadline_s"])
                if kind != "READY":
                    self.add(Row(case.system, case.label, case.fsync, size, case.phases[0],
                                 error=info.get("error", "no READY")[:500]))
                    return
            peak = None
            for op in case.phases:
                check_stop()
                if op == "produce":
                    ph = self.phase(op)
                    ph["max_messages"] = max(1, self.args.max_messages // n)
                    profile = self.profile_name(case, size)
                    results, cpu, _ = self.measure(workers, ph, server, profile)
                    peak = self.row(case, size, op, results, cpu)
                elif op in ("consume", "consume_raw"):
                    if peak is None or peak.error or not peak.count:
                        continue
                    # bounded in time too: the mock cluster serves a few thousand msg/s
                    ph = self.phase(op, expect=peak.count, deadline_s=max(30.0, self.args.duration * 6))
                    results, cpu, _ = self.measure(workers[:1], ph, server)
                    self.row(case, size, "consume", results, cpu, expected=peak.count,
                             label=RAW_POLLER if op == "consume_raw" else "")
                elif op == "latency":
                    if peak is None or peak.error or not peak.msg_s:
                        continue
                    rate = self.paced_rate(case, size, peak)
                    results, cpu, _ = self.measure(workers[:1], self.phase(op, rate=rate), server)
                    self.row(case, size, op, results, cpu, rate=rate)
                    for tick in case.ticks:  # a row of its own: "<label> (<tick> ms tick)"
                        check_stop()
                        results, cpu, _ = self.measure(workers[:1], self.phase(op, rate=rate, tick_s=tick), server)
                        self.row(case, size, op, results, cpu, rate=rate, label=f"{case.label} ({tick * 1000:g} ms tick)")
        finally:
            for w in workers:
                w.close()

    def paced_rate(self, case: Case, size: int, peak: Row) -> float:
        """msg/s of a latency phase: ``case.rate_of``'s row's in this run, else half ``peak``."""
        if case.rate_of is not None:
            for r in self.rows:
                if ((r.system, r.label, r.fsync) == case.rate_of and r.size == size and r.op == "latency"
                        and r.rate and not r.error):
                    return r.rate
        return peak.msg_s / 2

    def profile_name(self, case: Case, size: int) -> str | None:
        if not self.args.profile or case.system != "headwater" or case.fsync == "on" or size != self.args.sizes[0]:
            return None
        suffix = "" if case.fsync == HW_DEFAULT else ", fsync off"
        if case.client == "confluent" and not suffix:
            return "confluent-kafka produce"
        if case.client == "iggy-sdk" and case.producers == 1:
            return "apache-iggy send" + suffix
        return None

    def start_profile(self, server: ServerProcess | None, name: str):
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        if server is None or not Path(spy).exists():
            self.profiles[name] = {"error": "py-spy not found"}
            return None
        out = Path(self.args.profile) / (name.replace(" ", "-") + ".txt")
        out.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen([spy, "record", "--pid", str(server.pid), "--format", "raw", "--rate", "250",
                                 "--nonblocking", "-o", str(out)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # py-spy attaches before the window opens
        return proc, out, server.cpu()

    def stop_profile(self, spy, name: str) -> None:
        proc, out, _ = spy
        proc.send_signal(2)  # SIGINT: py-spy writes its output and exits
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        self.profiles[name] = {"raw": str(out), "size": self.args.sizes[0],
                              "fsync": HW_OFF if name.endswith("fsync off") else HW_DEFAULT}

    # -- systems ----------------------------------------------------------------------------

    def headwater(self) -> None:
        server = Headwater(self.base, self.args.server_python).start()
        self.versions["headwater"] = subprocess.run(
            [self.args.server_python, "-m", "headwater", "--version"], capture_output=True, text=True,
            timeout=60).stdout.strip()
        cases = [
            Case("headwater", "Iggy: apache-iggy x1", "iggy-sdk", HW_DEFAULT, ("produce",)),
            Case("headwater", "Iggy: apache-iggy x4", "iggy-sdk", HW_DEFAULT, ("produce",), producers=4),
            Case("headwater", "Iggy: raw generator", "iggy-raw", HW_DEFAULT, ("produce", "consume", "consume_raw", "latency"),
                 consumer_label="Iggy: apache-iggy poll"),
            Case("headwater", "Kafka: confluent-kafka", "confluent", HW_DEFAULT),
            Case("headwater", "Kafka: kafka-python", "kafka-python", HW_DEFAULT, ("produce", "consume")),
            Case("headwater", "Kafka: aiokafka", "aiokafka", HW_DEFAULT, ("produce", "consume")),
            Case("headwater", "Iggy: raw generator", "iggy-raw", "on", ("produce", "latency")),
            Case("headwater", "Kafka: confluent-kafka", "confluent", "on", ("produce", "latency")),
            Case("headwater", "Iggy: apache-iggy x1", "iggy-sdk", HW_OFF, ("produce",)),
            Case("headwater", "Iggy: apache-iggy x4", "iggy-sdk", HW_OFF, ("produce",), producers=4),
            Case("headwater", "Iggy: raw generator", "iggy-raw", HW_OFF, ("produce", "latency"),
                 ticks=(ONE_MS_TICK,)),
        ]
        try:
            for size in self.args.sizes:
                for i, case in enumerate(cases):
                    topic = f"t{i}-{case.client}-{size}"
                    asyncio.run(create_iggy_topic(server.iggy, topic, TOPIC_OPTIONS[case.fsync]))
                    target = {"iggy": server.iggy, "kafka": server.kafka, "stream": "bench", "topic": topic,
                              "kafka_topic": f"bench.{topic}"}
                    self.run_case(case, size, target, server)
                    # the next rows start from a disk as free as this one's: a run writes tens of
                    # GB, more than this machine's disk may hold at once (ENOSPC is reply 4006)
                    asyncio.run(delete_iggy_topic(server.iggy, topic))
        finally:
            rc = server.stop()
            if rc not in (0, None):
                self.skipped.append({"system": "headwater", "rows": "none", "why": f"server exited {rc} on SIGTERM"})

    def iggyref(self) -> None:
        """The apache-iggy SDK rows against our reference peer: with ``--verify`` x1 send then the
        SDK poll of what it sent, and x4 send; without it, x1 send."""
        self.versions["iggyref"] = "benchmarks/iggy_reference_peer.py (Iggy protocol 0.11.0)"
        runs = (
            (True, [Case("iggyref", "Iggy: apache-iggy x1", "iggy-sdk", "none", ("produce", "consume"),
                         consumer_label="Iggy: apache-iggy poll"),
                    Case("iggyref", "Iggy: apache-iggy x4", "iggy-sdk", "none", ("produce",), producers=4),
                    # the ack latency floor of this machine: the raw generator's sends, paced as
                    # Headwater's fsync-off ones were, to a server that verifies and stamps each
                    # batch but stores nothing
                    Case("iggyref", "Iggy: raw generator", "iggy-raw", "none", ("produce", "latency"),
                         ticks=(ONE_MS_TICK,), rate_of=("headwater", "Iggy: raw generator", HW_OFF))]),
            (False, [Case("iggyref", "Iggy: apache-iggy x1" + PEER_NO_VERIFY, "iggy-sdk", "none", ("produce",))]),
        )
        for verify, cases in runs:
            check_stop()
            peer = IggyReferencePeer(self.base, verify).start()
            try:
                for size in self.args.sizes:
                    for i, case in enumerate(cases):
                        topic = f"t{i}-{case.client}-{size}"
                        asyncio.run(create_iggy_topic(peer.iggy, topic, {}))
                        target = {"iggy": peer.iggy, "stream": "bench", "topic": topic}
                        self.run_case(case, size, target, peer)
                        asyncio.run(delete_iggy_topic(peer.iggy, topic))  # its kept batches go with it
            finally:
                peer.stop()
                self.notes.append(peer.summary())

    def mock(self) -> None:
        case = Case("mock", "librdkafka mock: confluent-kafka", "confluent", "memory")
        for size in self.args.sizes:
            self.run_case(case, size, {"mock": True, "kafka_topic": f"mock-{size}"}, None)

    def redis(self) -> None:
        missing = [x for x in ("redis-server", "redis-benchmark", "redis-cli") if not shutil.which(x)]
        if missing:
            self.skipped.append({"system": "redis", "rows": "all", "why": f"missing: {', '.join(missing)}"})
            return
        with_py = find_spec("redis") is not None
        if not with_py:
            self.skipped.append({"system": "redis", "rows": "redis-py", "why": "missing: redis-py (the bench extra)"})
        self.versions["redis"] = subprocess.run(["redis-server", "--version"], capture_output=True,
                                                text=True, timeout=10).stdout.strip()
        for mode, fsync in (("everysec", "1 s"), ("always", "on")):
            server = Redis(self.base, mode).start()
            try:
                for size in self.args.sizes:
                    self.redis_benchmark(server, size, fsync)
                    if with_py:
                        case = Case("redis", f"Redis: redis-py pipeline ({mode})", "redis-py", fsync)
                        self.run_case(case, size, {"redis": server.address, "topic": f"s-py-{size}"}, server)
            finally:
                server.stop()

    def redis_benchmark(self, server: Redis, size: int, fsync: str) -> None:
        """XADD through redis-benchmark (C): ``-P 100``, 8 connections, a count sized from a short
        calibration run so the measured run lasts about ``--duration``."""
        value = "".join(string.ascii_letters[i % 52] for i in range(size))
        key = f"s-bench-{size}"

        def cli(*words: str) -> str:
            return subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(server.port), *words],
                                  capture_output=True, text=True, timeout=60, check=True).stdout.strip()

        def xadd(n: int, stream: str) -> tuple[float, float | None, float]:
            kids0 = children_cpu()
            cpu0, t0 = server.cpu(), time.monotonic()
            subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(server.port), "-c",
                            str(REDIS_BENCHMARK_CLIENTS), "-P", str(REDIS_BENCHMARK_PIPELINE), "-n", str(n), "-q",
                            "XADD", stream, "*", "f", value],
                           capture_output=True, timeout=self.args.duration * 10 + 120, check=True)
            wall, cpu1 = time.monotonic() - t0, server.cpu()
            return wall, (cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None), children_cpu() - kids0

        label = f"Redis: redis-benchmark -P {REDIS_BENCHMARK_PIPELINE} ({server.appendfsync})"
        check_stop()
        try:
            n = self.args.max_messages
            if not self.args.quick:
                wall, _, _ = xadd(20000, key + "-calibrate")
                cli("DEL", key + "-calibrate")
                n = max(1000, min(n, int(20000 / wall * self.args.duration)))
            wall, cpu, client = xadd(n, key)
            stored = int(cli("XLEN", key))
        except (subprocess.SubprocessError, OSError, ValueError) as e:
            self.add(Row("redis", label, fsync, size, "produce", error=f"{type(e).__name__}: {e}"[:500]))
            return
        row = Row("redis", label, fsync, size, "produce", count=stored, seconds=wall, msg_s=stored / wall,
                  mb_s=stored * size / wall / 1e6, expected=n, stopped_by="count",
                  cpu_s_per_m=cpu / stored * 1e6 if cpu is not None and stored else None,
                  client_cpu_us=client / stored * 1e6 if stored else None)
        self.add(row)

    def nats(self) -> None:
        if not shutil.which("nats-server") or not find_spec("nats"):
            why = "missing: " + ", ".join(x for x, ok in (("nats-server", shutil.which("nats-server")),
                                                           ("nats-py", find_spec("nats"))) if not ok)
            self.skipped.append({"system": "nats", "rows": "all", "why": why})
            return
        self.versions["nats"] = nats_version()
        server = Nats(self.base).start()
        try:
            for size in self.args.sizes:
                case = Case("nats", "NATS JetStream: nats-py", "nats-py", "default")
                self.run_case(case, size, {"nats": server.address, "topic": f"S{size}"}, server)
        finally:
            server.stop()

    def go(self) -> dict:
        started = time.time()
        try:
            for system in self.args.only:
                try:
                    getattr(self, system)()
                except Exception as e:  # a system that cannot start is a note, not the end of the run
                    self.skipped.append({"system": system, "rows": "the rest",
                                         "why": f"{type(e).__name__}: {e}"[:800]})
                    print(f"# {system}: {type(e).__name__}: {e}", flush=True)
        finally:
            shutil.rmtree(self.base, ignore_errors=True)
        return {
            "command": " ".join(sys.argv),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "seconds": round(time.time() - started, 1),
            "machine": dict(self.machine, loadavg_at_end=[round(x, 2) for x in os.getloadavg()]),
            "versions": self.versions,
            "settings": {"sizes": self.args.sizes, "duration_s": self.args.duration,
                         "latency_duration_s": self.args.latency_duration, "max_messages": self.args.max_messages,
                         "server_python": self.args.server_python, "quick": self.args.quick},
            "rows": [asdict(r) for r in self.rows],
            "skipped": self.skipped,
            "notes": self.notes,
            "profiles": self.profiles,
        }


async def create_iggy_topic(address: str, topic: str, options: dict[str, str]) -> None:
    """Stream ``bench`` (once) and a one-partition topic with these topic ``options``."""
    from apache_iggy import IggyClient

    c = IggyClient(address)
    await c.connect()
    await c.login_user("iggy", "iggy")
    if await c.get_stream("bench") is None:
        await c.create_stream("bench")
    await c.create_topic("bench", topic, 1, options=options)


async def delete_iggy_topic(address: str, topic: str) -> None:
    """Delete topic ``topic`` of stream ``bench`` (its segments go with it)."""
    from apache_iggy import IggyClient

    c = IggyClient(address)
    await c.connect()
    await c.login_user("iggy", "iggy")
    await c.delete_topic("bench", topic)


def children_cpu() -> float:
    """User + system CPU seconds of this process's finished, waited-for children."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def machine_note() -> dict:
    load = os.getloadavg()
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release(),
            "loadavg_at_start": [round(x, 2) for x in load]}


def parse_args(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,1024", help="message payload sizes in bytes (default 100,1024)")
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per produce run (default 5)")
    ap.add_argument("--latency-duration", type=float, default=None, help="seconds of paced producing (default: --duration)")
    ap.add_argument("--max-messages", type=int, default=10_000_000, help="cap per produce run (default 10M)")
    ap.add_argument("--only", default=",".join(SYSTEMS), help=f"systems, comma separated: {','.join(SYSTEMS)}")
    ap.add_argument("--server-python", default=sys.executable,
                    help="interpreter that runs `headwater serve` (another venv/worktree; default this one)")
    ap.add_argument("--warm-memory", type=float, default=0.0, metavar="GIB",
                    help="before each measured window touch and release this much memory, so new page-cache "
                         "pages are backed ones (machine_state.py; docs/benchmarks.md, the machine's memory state)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 100 B only, 0.5 s runs")
    ap.add_argument("--json", help="write the results here (JSON; default: a new file in the temp directory)")
    ap.add_argument("--chart", help="render a PNG chart here (needs matplotlib: the bench extra)")
    ap.add_argument("--profile", metavar="DIR",
                    help="py-spy the server during the confluent-kafka produce and apache-iggy send runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.duration = min(args.duration, 0.5)
        if "--sizes" not in " ".join(argv or sys.argv):
            args.sizes = "100"
    args.latency_duration = args.latency_duration if args.latency_duration is not None else (
        0.5 if args.quick else args.duration)
    # absolute, not resolved: a venv's python is a symlink that must keep its venv path
    args.server_python = os.path.abspath(shutil.which(args.server_python) or args.server_python)
    args.sizes = [int(x) for x in str(args.sizes).split(",") if x]
    args.only = [x.strip() for x in args.only.split(",") if x.strip()]
    unknown = set(args.only) - set(SYSTEMS)
    if unknown:
        ap.error(f"unknown system(s) {sorted(unknown)}; choose from {','.join(SYSTEMS)}")
    if any(s < 8 for s in args.sizes):
        ap.error("sizes must be at least 8 bytes (the paced producers carry a send time in them)")
    return args


STOP = threading.Event()


def _on_sigterm(*_) -> None:
    """SIGTERM unwinds like Ctrl-C, so every server and worker started so far is stopped. The
    flag is checked again before every phase, in case a client library swallowed the exit."""
    STOP.set()
    raise SystemExit(143)


def check_stop() -> None:
    if STOP.is_set():
        raise SystemExit(143)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    result = Run(args).go()
    if args.profile:
        result["profiles"] = report.summarise_profiles(result)
    print(report.tables(result))
    if result["profiles"]:
        print()
        print(report.profile_text(result["profiles"]))
    path = Path(args.json or Path(tempfile.gettempdir()) / f"headwater-compare-{time.strftime('%Y%m%dT%H%M%S')}.json")
    path.write_text(json.dumps(result, indent=1))
    print(f"\nresults: {path}")
    if args.chart:
        report.chart(result, args.chart)
    return 0


if __name__ == "__main__":
    sys.exit(main())
