"""How the slowest 1 % of a bench_ack_latency.py --probe JSON window split (session 13): own pwrite >= 1 ms
(on CPU: the copy into new page-cache pages; off CPU: preempted or blocked inside it), queued behind the
previous request, the client blocked in send(), or else the run queue. Usage: python classify_tail.py RUN.json..."""
import gzip, json, sys
for path in sys.argv[1:]:
    d = json.load(gzip.open(path) if path.endswith(".gz") else open(path))
    for w in d["windows"]:
        a = w.get("analysis")
        if not a: continue
        st = {s["i"]: s for s in a["stalls"]}
        tail = [s for s in a["stalls"] if s["ack_ms"] >= a["p99"]]
        cls = {"own pwrite>=1ms on CPU": 0, "own pwrite>=1ms off CPU": 0, "behind previous": 0, "client late/send blocked": 0, "other (run queue)": 0}
        for s in tail:
            prev = st.get(s["i"] - 1)
            if s.get("pwrite", 0) >= 1.0:
                cls["own pwrite>=1ms on CPU" if s["serve_cpu"] >= 0.5 * s["serve"] else "own pwrite>=1ms off CPU"] += 1
            elif prev and prev["at_ms"] + prev["ack_ms"] > s["at_ms"] + 0.2:
                cls["behind previous"] += 1
            elif s["send_call_ms"] >= 1.0:
                cls["client late/send blocked"] += 1
            else:
                cls["other (run queue)"] += 1
        print(f"{path.split('/')[-1]} w{w['window']} tick {w['tick_ms']:g} load {w['load']} probe {w['page_cache_ms_mib']} "
              f"p50 {a['p50']:.2f} p99 {a['p99']:.2f} p99.9 {a['p999']:.2f} tail n {len(tail)}: {cls}; "
              f"pwrite p50/p99/max {a.get('serve_pwrite_ms')} verify {a.get('serve_verify_ms')} recv_cpu {a.get('receiving_cpu_ms')} s/M {w['server_cpu_s_per_m']}")
