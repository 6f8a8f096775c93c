"""Print compare.py result files side by side, one row per (label, fsync, op).

Usage: python side_by_side.py r1-2048.json.gz r1-256.json.gz ...  (plain .json works too)

Each cell: msg/s (millions), server CPU s/M, ack p50/p99 ms where the row has latencies, and the
page-cache probe (ms/MiB) measured just before the row. kafka-python and aiokafka rows are left out.
"""
import gzip
import json
import sys


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)["rows"]


def cell(r):
    if r is None:
        return "-"
    c = f"{r['msg_s'] / 1e6:.2f}M {r['cpu_s_per_m']:.3f}"
    if r["lat_us"]:
        c += f" p50 {r['lat_us'].get('p50', 0) / 1000:.2f} p99 {r['lat_us'].get('p99', 0) / 1000:.2f}"
    return c + f" ({r.get('page_cache_ms_mib')})"


def main(files):
    data = [load(f) for f in files]
    keys = []
    for rows in data:
        for r in rows:
            k = (r["label"], r["fsync"], r["op"])
            if k not in keys and "kafka-python" not in r["label"] and "aiokafka" not in r["label"]:
                keys.append(k)
    print("row | " + " | ".join(f.rsplit("/", 1)[-1] for f in files))
    for k in keys:
        cells = [cell(next((r for r in rows if (r["label"], r["fsync"], r["op"]) == k), None)) for rows in data]
        print(f"{k[0]} {k[1]} {k[2]} | " + " | ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1:])
