"""Summarise bench_ack_latency JSON files (with --probe): per run and tick, ack percentiles over
all its windows' figures, the loop's pwrite >= 1 ms, the worker's fallocate >= 1 ms, overlaps."""
import json, sys, os
def q(v, p): return v[min(len(v) - 1, int(p * len(v)))]
for path in sys.argv[1:]:
    d = json.load(open(path))
    name = os.path.basename(path).replace(".json", "")
    by = {}
    for w in d["windows"]:
        by.setdefault(w["tick_ms"], []).append(w)
    for tick, ws in sorted(by.items(), reverse=True):
        p50 = [w["analysis"]["p50"] for w in ws]; p99 = [w["analysis"]["p99"] for w in ws]
        p999 = [w["analysis"]["p999"] for w in ws]; mx = [w["analysis"]["max"] for w in ws]
        pw = []; fa = []; ev = []
        for w in ws:
            calls = w["analysis"].get("server_calls_over_1ms", [])
            p = [c for c in calls if c[0] == "segment.pwrite_all" and c[2] >= 1]
            f = [c for c in calls if c[0] == "prealloc.reserve" and c[2] >= 1]
            pw += p; fa += f
            jobs = [c for c in calls if c[0] == "prealloc.job_reserve"]
            # fallocate calls into the active segment (inside a top-up job), not a spare's
            fact = [x for x in f if any(j[1] <= x[1] <= j[1] + j[2] for j in jobs)]
            ov = [c for c in p if any(x[1] < c[1] + c[2] and x[1] + x[2] > c[1] for x in fact)]
            ev += [c[0].split(":")[-1] for c in calls if c[0].startswith("prealloc.take_spare")]
            jr = [c for c in calls if c[0] == "prealloc.job_reserve"]
            w["_jr"] = jr
            w["_ov"] = ov
        ov = [c for w in ws for c in w["_ov"]]
        jr = [c for w in ws for c in w["_jr"]]
        pc = [w["page_cache_ms_mib"] for w in ws]
        print(f"| {name} | {ws[0]['load']:.1f} | {tick:g} | {min(p50):.2f}-{max(p50):.2f} | "
              f"{' / '.join(f'{x:.1f}' for x in p99)} | {' / '.join(f'{x:.1f}' for x in p999)} | {' / '.join(f'{x:.1f}' for x in mx)} | "
              f"{len(pw)}, {sum(c[2] for c in pw):.0f} ms, {max([c[2] for c in pw] or [0]):.1f} | "
              f"{len(fa)}, {max([c[2] for c in fa] or [0]):.1f} | {len(ov)}, {sum(c[2] for c in ov):.0f} ms | "
              f"{len(jr)}, {max([c[2] for c in jr] or [0]):.1f} | {len(ev)} | {min(pc):.2f}-{max(pc):.2f} |")
