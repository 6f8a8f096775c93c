"""compare.py's produce-ack latency phase alone, repeated, with each stall's time and make-up.

Usage::

    .venv/bin/python benchmarks/bench_ack_latency.py [--server-python PATH] [--windows 6] [--duration 3]
        [--ticks 5] [--rate MSG_S | --peak-duration 3] [--warm-memory 2] [--probe [--lag-ms 1]]
        [--stall-ms 2] [--segment-size BYTES] [--server-env NAME=VALUE] [--json out.json]

One ``headwater serve`` (``--server-python``, default this interpreter) on loopback, one
fsync-off topic (compare.py's: the sync thresholds at their maxima), one ``compare_clients.py``
worker of the raw Iggy generator. Unless ``--rate`` is given, it produces for
``--peak-duration`` seconds as fast as it goes (compare.py's produce phase) and paces at half
that rate. Then ``--windows`` latency windows of ``--duration`` s each at every tick of
``--ticks`` (ms), each preceded by ``--warm-memory`` GiB touched and released and the page-cache
probe (``machine_state.py``), as compare.py does. Per window: p50 / p99 / p99.9 / max of
send->ack per batch, the server's CPU s/M (``/proc/<pid>/stat``), and every batch over
``--stall-ms`` with its time in the window.

The client traces every request (due, send started, send returned, ack read, its own GC
collections: ``compare_clients.ClientTrace``). ``--probe`` loads ``benchmarks/ack_probe`` into the
server (its ``sitecustomize``: GC collections, per-frame receive/serve times, rotations, index
flushes, write-behind and flusher calls; ``--lag-ms``: an event-loop lag probe) and splits
each stall into: client late to send, send->first byte received by the server, first byte ->
serve (receiving the body), serve (verify, append, reply written), serve end -> ack read by the
client; serve itself into verify_and_stamp, the log's append (``pwrite`` in it) and the rest, and
per window the median make-up of the slowest 1 % of requests (those at or over p99). Both sides use ``time.monotonic_ns`` (one clock for every process of the machine).
Server threads' CPU and run-queue wait (``/proc/<pid>/task/*/schedstat``) per window too.
Nothing here asserts a speed; it prints what it measured.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from compare import HW_OFF, TOPIC_OPTIONS, Worker, create_iggy_topic  # noqa: E402
from compare_servers import Headwater  # noqa: E402
from machine_state import page_cache_cost, warm_memory  # noqa: E402

PROBE_DIR = HERE / "ack_probe"
MAX_STALLS_PRINTED = 12  # per window (the JSON keeps them all)
PHASES_PER_WORKER = 15  # compare_clients.py answers at most 16 RUN lines per worker


class ProbedHeadwater(Headwater):
    """``headwater serve`` with the bench probe on its ``PYTHONPATH`` (``--probe``)."""

    def __init__(self, base: Path, python: str, probe_out: str | None, lag_ms: float, extra_env: dict[str, str]):
        super().__init__(base, python)
        self.probe_out, self.lag_ms, self.extra_env = probe_out, lag_ms, extra_env

    def env(self) -> dict:
        env = super().env()
        env.update(self.extra_env)
        if self.probe_out:
            env["PYTHONPATH"] = str(PROBE_DIR) + os.pathsep + env.get("PYTHONPATH", "")
            env["HW_ACK_PROBE"] = self.probe_out
            if self.lag_ms:
                env["HW_ACK_PROBE_LAG_MS"] = str(self.lag_ms)
        return env


def threads(pid: int) -> dict[int, tuple[str, int, int]]:
    """tid -> (name, CPU ns, run-queue wait ns) of every thread of ``pid``."""
    out = {}
    base = Path(f"/proc/{pid}/task")
    try:
        tids = [int(t) for t in os.listdir(base)]
    except OSError:
        return out
    for tid in tids:
        try:
            name = (base / str(tid) / "comm").read_text().strip()
            run, wait, _ = (int(x) for x in (base / str(tid) / "schedstat").read_text().split())
        except (OSError, ValueError):
            continue
        out[tid] = (name, run, wait)
    return out


def q(sorted_values: list[float], p: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))]


def overlapping(events: list, t0: int, t1: int, start=lambda e: e[0], dur=lambda e: e[1]) -> list:
    return [e for e in events if start(e) < t1 and start(e) + dur(e) > t0]


def analyse(trace: dict, probe: dict | None, stall_ms: float) -> dict:
    """Per-window figures and the stalls, each split along the request's path."""
    send, sent, ack, due = trace["send"], trace["sent"], trace["ack"], trace["due"]
    lat_ms = [(a - s) / 1e6 for s, a in zip(send, ack)]
    s = sorted(lat_ms)
    out = {"n": len(s), "p50": q(s, 0.5), "p99": q(s, 0.99), "p999": q(s, 0.999), "max": s[-1],
           "late_send_ms_max": max((a - b) / 1e6 for a, b in zip(send, due)),
           "send_call_ms_p50": sorted((b - a) / 1e6 for a, b in zip(send, sent))[len(send) // 2],
           "send_call_ms_max": max((b - a) / 1e6 for a, b in zip(send, sent)),
           "late_send_ms": tuple(round(q(sorted((a - b) / 1e6 for a, b in zip(send, due)), p), 3)
                                 for p in (0.5, 0.99)),
           "send_call_ms": tuple(round(q(sorted((b - a) / 1e6 for a, b in zip(send, sent)), p), 3)
                                 for p in (0.5, 0.99)),
           "client_gc": [(round((g[0] - send[0]) / 1e6, 1), round(g[1] / 1e6, 2), g[2]) for g in trace["gc"]]}
    frames = None
    if probe is not None:
        fr = sorted(probe["frames"], key=lambda f: f[2])
        firsts = [f[0] for f in fr]
        k = bisect.bisect_left(firsts, send[0] - 1_000_000)
        window = fr[k:k + len(send)]
        if len(window) == len(send):
            frames = window
            # split every request: send -> first byte in, receiving, serve, serve end -> ack
            parts = [[(f[0] - sd) / 1e6, (f[2] - f[0]) / 1e6, (f[3] - f[2]) / 1e6, (a - f[3]) / 1e6]
                     for f, sd, a in zip(frames, send, ack)]
            cpu = sorted(f[5] / 1e6 for f in frames)
            out["serve_cpu_ms"] = (round(q(cpu, 0.5), 3), round(q(cpu, 0.99), 3), round(cpu[-1], 3))
            if len(frames[0]) > 7:
                pw = sorted(f[7] / 1e6 for f in frames)
                out["serve_pwrite_ms"] = (round(q(pw, 0.5), 3), round(q(pw, 0.99), 3), round(pw[-1], 3))
            for j, name in enumerate(("to_first_byte", "receiving", "serve", "to_ack")):
                col = sorted(p[j] for p in parts)
                out[f"{name}_ms"] = (round(q(col, 0.5), 3), round(q(col, 0.99), 3), round(col[-1], 3))
            out["recv_callbacks_p50"] = sorted(f[1] for f in frames)[len(frames) // 2]
            if len(frames[0]) > 11:  # session 13's probe: serve split, and the receive's CPU and wait
                for j, name in ((8, "serve_verify"), (9, "serve_append"), (10, "receiving_cpu"),
                                (11, "receiving_runq")):
                    col = sorted(f[j] / 1e6 for f in frames)
                    out[f"{name}_ms"] = (round(q(col, 0.5), 3), round(q(col, 0.99), 3), round(col[-1], 3))
                col = sorted((f[3] - f[2] - f[8] - f[9]) / 1e6 for f in frames)
                out["serve_rest_ms"] = (round(q(col, 0.5), 3), round(q(col, 0.99), 3), round(col[-1], 3))
        else:
            out["probe_note"] = f"{len(window)} server frames matched {len(send)} sends"
        t_lo, t_hi = send[0], ack[-1]
        out["server_gc"] = [(round((g[0] - send[0]) / 1e6, 1), round(g[1] / 1e6, 2), g[2], g[3])
                            for g in overlapping(probe["gc"], t_lo, t_hi)]
        out["server_calls_over_1ms"] = [(c[0], round((c[1] - send[0]) / 1e6, 1), round(c[2] / 1e6, 2),
                                         "loop" if c[3] else "thread")
                                        for c in overlapping(probe["calls"], t_lo, t_hi, lambda c: c[1], lambda c: c[2])
                                        if c[2] >= 1_000_000 or c[0].startswith(("log.", "segment.s", "segment.c", "prealloc.j",
                                                                                     "prealloc.t"))]
        # (start ms, late by ms, loop thread CPU ms, run-queue wait ms): the rest was blocked
        out["loop_lag"] = [(round((l[0] - send[0]) / 1e6, 1), round(l[1] / 1e6, 2), round(l[2] / 1e6, 2),
                            round(l[3] / 1e6, 2))
                           for l in overlapping(probe["lag"], t_lo, t_hi, lambda l: l[0], lambda l: l[1])]
    stalls = []
    for i, ms in enumerate(lat_ms):
        if ms < stall_ms:
            continue
        st = {"i": i, "at_ms": round((send[i] - send[0]) / 1e6, 1), "ack_ms": round(ms, 2),
              "late_send_ms": round((send[i] - due[i]) / 1e6, 2), "send_call_ms": round((sent[i] - send[i]) / 1e6, 2)}
        if frames is not None:
            f = frames[i]
            st.update(to_first_byte=round((f[0] - send[i]) / 1e6, 2), receiving=round((f[2] - f[0]) / 1e6, 2),
                      serve=round((f[3] - f[2]) / 1e6, 2), serve_cpu=round(f[5] / 1e6, 2),
                      serve_runq=round(f[6] / 1e6, 2), to_ack=round((ack[i] - f[3]) / 1e6, 2),
                      recv_callbacks=f[1])
            if len(f) > 11:
                st.update(verify=round(f[8] / 1e6, 2), append=round(f[9] / 1e6, 2), pwrite=round(f[7] / 1e6, 2),
                          receiving_cpu=round(f[10] / 1e6, 2), receiving_runq=round(f[11] / 1e6, 2))
        stalls.append(st)
    out["stalls"] = stalls
    # the slowest 1 % (the requests at or over p99): each part of their path, median over them
    tail = [i for i, ms in enumerate(lat_ms) if ms >= out["p99"]]
    parts = {"ack": [lat_ms[i] for i in tail], "late_send": [(send[i] - due[i]) / 1e6 for i in tail],
             "send_call": [(sent[i] - send[i]) / 1e6 for i in tail]}
    if frames is not None:
        for i in tail:
            f = frames[i]
            split = [("to_first_byte", f[0] - send[i]), ("receiving", f[2] - f[0]), ("serve", f[3] - f[2]),
                     ("serve_cpu", f[5]), ("serve_runq", f[6]), ("to_ack", ack[i] - f[3])]
            if len(f) > 11:
                split += [("verify", f[8]), ("append", f[9]), ("receiving_runq", f[11])]
            for name, v in split:
                parts.setdefault(name, []).append(v / 1e6)
    out["tail_n"] = len(tail)
    out["tail_median_ms"] = {k: round(sorted(v)[len(v) // 2], 3) for k, v in parts.items() if v}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server-python", default=sys.executable)
    ap.add_argument("--windows", type=int, default=6, help="latency windows per tick (default 6)")
    ap.add_argument("--duration", type=float, default=3.0, help="seconds per window (default 3)")
    ap.add_argument("--ticks", default="5", help="ticks in ms, comma separated (default 5)")
    ap.add_argument("--rate", type=float, help="msg/s to pace at (default: half the peak measured first)")
    ap.add_argument("--peak-duration", type=float, default=3.0, help="seconds of the peak produce run (default 3)")
    ap.add_argument("--size", type=int, default=100, help="payload bytes (default 100)")
    ap.add_argument("--warm-memory", type=float, default=2.0, metavar="GIB")
    ap.add_argument("--probe", action="store_true", help="load benchmarks/ack_probe into the server")
    ap.add_argument("--lag-ms", type=float, default=0.0, help="with --probe: the loop-lag probe's sleep (ms)")
    ap.add_argument("--stall-ms", type=float, default=2.0, help="print every batch acked later than this")
    ap.add_argument("--segment-size", help="the topic's segment_size (default: the server's, 1 GiB)")
    ap.add_argument("--topic-option", action="append", default=[], metavar="NAME=VALUE",
                    help="an Iggy topic option of the topic (repeatable), e.g. preallocate_segments=true")
    ap.add_argument("--server-env", action="append", default=[], metavar="NAME=VALUE",
                    help="an environment variable for the server (repeatable), e.g. "
                         "HEADWATER_SYSTEM_WRITE_BEHIND_CACHE_BYTES=0")
    ap.add_argument("--json", help="write every window's figures here")
    args = ap.parse_args(argv)
    args.server_python = os.path.abspath(args.server_python)
    ticks = [float(t) / 1000 for t in args.ticks.split(",") if t]

    base = Path(tempfile.mkdtemp(prefix="hw-ack-"))
    probe_out = str(base / "probe.json") if args.probe else None
    extra_env = dict(kv.split("=", 1) for kv in args.server_env)
    server = ProbedHeadwater(base, args.server_python, probe_out, args.lag_ms, extra_env).start()
    print(f"# server pid {server.pid}", flush=True)
    options = dict(TOPIC_OPTIONS[HW_OFF])
    if args.segment_size:
        options["segment_size"] = args.segment_size
    options.update(kv.split("=", 1) for kv in args.topic_option)
    asyncio.run(create_iggy_topic(server.iggy, "ack", options))
    target = {"iggy": server.iggy, "stream": "bench", "topic": "ack"}
    spec = {"client": "iggy-raw", "size": args.size, "target": target, "phases": ["produce", "latency"],
            "deadline_s": 3600}
    log = base / "worker.log"
    results: list[dict] = []
    traces: list[tuple[int, dict]] = []
    load0 = os.getloadavg()
    print(f"# server {args.server_python}, load {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}", flush=True)
    worker = None
    phases = 0
    try:
        worker = Worker(spec, log)
        kind, info = worker.expect(120)
        if kind != "READY":
            raise SystemExit(f"worker: {info}")
        rate = args.rate
        if rate is None:
            if args.warm_memory:
                warm_memory(args.warm_memory)
            worker.send({"op": "produce", "duration_s": args.peak_duration, "max_messages": 10**9})
            phases += 1
            _, r = worker.expect(args.peak_duration * 6 + 60)
            if "error" in r:
                raise SystemExit(f"produce: {r['error']}")
            peak = r["count"] / (r["t1"] - r["t0"])
            rate = peak / 2
            print(f"# peak {peak:,.0f} msg/s ({r['count']:,} messages); pacing at {rate:,.0f} msg/s", flush=True)
        for w in range(args.windows):
            for tick in ticks:
                if phases >= PHASES_PER_WORKER:
                    worker.close()
                    worker = Worker(spec, log)
                    worker.expect(120)
                    phases = 0
                if args.warm_memory:
                    warm_memory(args.warm_memory)
                probe_ms = page_cache_cost(str(base), 32)
                th0, cpu0, load = threads(server.pid), server.cpu(), os.getloadavg()[0]
                worker.send({"op": "latency", "duration_s": args.duration, "max_messages": 10**9, "rate": rate,
                             "tick_s": tick, "trace": True})
                phases += 1
                _, r = worker.expect(args.duration * 6 + 60)
                th1, cpu1 = threads(server.pid), server.cpu()
                if "error" in r:
                    print(f"window {w} tick {tick * 1000:g} ms: {r['error']}", flush=True)
                    continue
                row = {"window": w, "tick_ms": tick * 1000, "load": round(load, 2), "rate": round(rate),
                       "page_cache_ms_mib": round(probe_ms, 3), "unit": r.get("unit"),
                       "server_cpu_s_per_m": round((cpu1 - cpu0) / r["count"] * 1e6, 3) if cpu0 is not None else None,
                       "threads": {f"{th1[t][0]}:{t}": (round((th1[t][1] - th0[t][1]) / 1e6, 1),
                                                        round((th1[t][2] - th0[t][2]) / 1e6, 1))
                                   for t in th1 if t in th0 and th1[t][1] - th0[t][1] > 1e6}}
                traces.append((len(results), r["trace"]))
                row["trace"] = r["trace"]
                results.append(row)
                print(f"window {w} tick {tick * 1000:g} ms ({r.get('unit')}, load {load:.2f}, "
                      f"page cache {probe_ms:.2f} ms/MiB, {row['server_cpu_s_per_m']} s/M)", flush=True)
                if not args.probe:
                    print_window(analyse(r["trace"], None, args.stall_ms), row)
    finally:
        if worker is not None:
            worker.close()
        server.stop()
    probe = None
    if probe_out and Path(probe_out).exists():
        probe = json.loads(Path(probe_out).read_text())
        print(f"# server probe: {len(probe['frames'])} frames, {len(probe['gc'])} GC collections "
              f"({sum(1 for g in probe['gc'] if g[2] == 2)} full), frozen {probe['gc_frozen']}, "
              f"{len(probe['lag'])} loop lags >= 2 ms")
        for i, trace in traces:
            a = analyse(trace, probe, args.stall_ms)
            print(f"-- window {results[i]['window']} tick {results[i]['tick_ms']:g} ms")
            print_window(a, results[i])
            results[i]["analysis"] = a
    elif args.probe:
        print("# no probe output (the server did not exit cleanly?)")
    shutil.rmtree(base, ignore_errors=True)
    for row in results:
        row.pop("trace", None)
    load1 = os.getloadavg()
    print(f"# load at end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "load_start": load0, "load_end": load1,
                                               "windows": results}, indent=1))
    return 0


def print_window(a: dict, row: dict) -> None:
    print(f"   ack ms p50 {a['p50']:.2f} p99 {a['p99']:.2f} p99.9 {a['p999']:.2f} max {a['max']:.2f} (n {a['n']}); "
          f"client: late send max {a['late_send_ms_max']:.2f}, send() p50 {a['send_call_ms_p50']:.2f} "
          f"max {a['send_call_ms_max']:.2f}, gc {a['client_gc'] or '-'}")
    print(f"   client: late send p50/p99 {a['late_send_ms']}, send() p50/p99 {a['send_call_ms']}")
    for key in ("to_first_byte_ms", "receiving_ms", "receiving_cpu_ms", "receiving_runq_ms", "serve_ms",
                "serve_cpu_ms", "serve_verify_ms", "serve_append_ms", "serve_pwrite_ms", "serve_rest_ms",
                "to_ack_ms"):
        if key in a:
            print(f"   {key[:-3]:>14} p50/p99/max ms {a[key]}")
    if "recv_callbacks_p50" in a:
        print(f"   receive callbacks per frame p50 {a['recv_callbacks_p50']}")
    for key in ("probe_note", "server_gc", "loop_lag"):
        if a.get(key):
            print(f"   {key}: {a[key]}")
    if a.get("server_calls_over_1ms"):  # per call: count, sum ms, longest ms (the JSON keeps each one)
        by: dict[tuple, list] = {}
        for label, _, ms, where in a["server_calls_over_1ms"]:
            by.setdefault((label, where), []).append(ms)
        print("   server calls (>= 1 ms, or a roll) n/sum/max ms: "
              + ", ".join(f"{k[0]} ({k[1]}) {len(v)}/{sum(v):.1f}/{max(v):.1f}" for k, v in by.items()))
    busy = {k: v for k, v in row.get("threads", {}).items() if v[0] > 20}
    if busy:
        print(f"   server threads (CPU ms, run-queue wait ms): {busy}")
    print(f"   slowest 1 % (n {a['tail_n']}), median of each part: "
          f"{a['tail_median_ms']}")
    stalls = a["stalls"]
    if len(stalls) > MAX_STALLS_PRINTED:  # the longest ones, in time order
        keep = sorted(sorted(stalls, key=lambda st: -st["ack_ms"])[:MAX_STALLS_PRINTED], key=lambda st: st["i"])
        print(f"   {len(stalls)} batches over the stall threshold; the {MAX_STALLS_PRINTED} longest:")
        stalls = keep
    for st in stalls:
        print(f"   stall {st}")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
