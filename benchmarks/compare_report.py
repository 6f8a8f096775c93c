"""Tables, Headwater/peer ratios, Headwater against the Iggy reference peer, the PNG chart and the
py-spy summary of ``compare.py`` results.

Everything here reads the result dict ``compare.py`` writes as JSON (``rows``: one dict per
system, client, fsync setting, size and op), so a saved run can be re-rendered::

    .venv/bin/python benchmarks/compare_report.py results.json [--chart out.png] [--save]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path


PEER_NO_VERIFY = " (no verify)"
"""Label suffix of the Iggy reference peer's rows run without ``--verify``."""


def tail(path: Path, chars: int = 600) -> str:
    try:
        return Path(path).read_text(errors="replace")[-chars:].strip()
    except OSError:
        return ""


def _n(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "-"
    return f"{x:,.{digits}f}"


def _size(size: int) -> str:
    return f"{size // 1024} KB" if size >= 1024 and size % 1024 == 0 else f"{size} B"


def progress_line(r) -> str:
    if r.error:
        return f"# {r.system:9} {r.label:44} fsync {r.fsync:4} {_size(r.size):>6} {r.op:8} ERROR {r.error}"
    extra = ""
    if r.op == "latency" and r.lat_us:
        extra = f" p50 {r.lat_us['p50'] / 1000:.2f} ms p99 {r.lat_us['p99'] / 1000:.2f} ms ({r.lat_unit})"
    cpu = f" cpu {r.cpu_s_per_m:.3f} s/M" if r.cpu_s_per_m is not None else ""
    client = f" client {r.client_cpu_us:.2f} µs/msg" if r.client_cpu_us is not None else ""
    probe = getattr(r, "page_cache_ms_mib", None)
    page = f" page cache {probe:.2f} ms/MiB" if probe is not None else ""
    return (f"# {r.system:9} {r.label:44} fsync {r.fsync:4} {_size(r.size):>6} {r.op:8} {r.count:>9} msgs "
            f"{r.msg_s:>12,.0f} msg/s {r.mb_s:8.1f} MB/s{cpu}{client}{extra}{page}")


def _key(r: dict) -> tuple:
    return (r["system"], r["label"], r["fsync"], r["size"])


def _by_case(rows: list[dict]) -> dict:
    cases: dict = {}
    for r in rows:
        cases.setdefault(_key(r), {})[r["op"]] = r
    return cases


def tables(result: dict) -> str:
    """The results table (one line per client and size), the Headwater/peer ratios, Headwater
    against the Iggy reference peer, skips and notes. Client CPU µs/msg: the client processes'
    own CPU per message (for the mock, its in-process broker included). Page cache ms/MiB: the
    machine's page-cache write cost measured before the produce window (machine_state.py)."""
    out = ["| system | client | fsync | size | produce msg/s | MB/s | server CPU s/M | client CPU µs/msg |"
           " consume msg/s | MB/s | server CPU s/M | client CPU µs/msg | ack p50 / p99 / p99.9 ms (at msg/s, per) |"
           " page cache ms/MiB |",
           "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    cases = _by_case(result["rows"])
    for (system, label, fsync, size), ops in cases.items():
        p, c, lat = ops.get("produce"), ops.get("consume"), ops.get("latency")
        consume_label = c["label"] if c and c["label"] != label else ""
        cells = [system, label + (f" / {consume_label}" if consume_label else ""), fsync, _size(size)]
        for r in (p, c):
            if r is None:
                cells += ["", "", "", ""]
            elif r["error"]:
                cells += ["error", "", "", ""]
            else:
                partial = "" if r["op"] == "produce" or r["stopped_by"] != "time" else \
                    f" ({r['count']:,} of {r['expected']:,} in {r['seconds']:.0f} s)"
                cells += [_n(r["msg_s"]) + partial, _n(r["mb_s"], 1), _n(r["cpu_s_per_m"], 3),
                          _n(r.get("client_cpu_us"), 2)]
        if lat and lat["lat_us"]:
            q = lat["lat_us"]
            cells.append(f"{q['p50'] / 1000:.2f} / {q['p99'] / 1000:.2f} / {q['p999'] / 1000:.2f} "
                         f"({lat['rate']:,} msg/s, {lat['lat_unit']})")
        elif lat and lat["error"]:
            cells.append("error")
        else:
            cells.append("")
        # the machine's page-cache write cost before the produce window (machine_state.py): the
        # same code costs several times more system CPU per message when it is high
        probe = (p or {}).get("page_cache_ms_mib")
        cells.append(f"{probe:.2f}" if probe is not None else "")
        out.append("| " + " | ".join(cells) + " |")
    out += ["", *ratio_lines(result["rows"])]
    for extra in (reference_lines(result["rows"]), latency_reference_lines(result["rows"])):
        if extra:
            out += ["", *extra]
    errors = [r for r in result["rows"] if r["error"]]
    if errors:
        out += ["", "Errors:"] + [f"- {r['system']} {r['label']} {_size(r['size'])} {r['op']}: {r['error']}"
                                  for r in errors]
    for s in result.get("skipped", []):
        out.append(f"- skipped {s['system']} ({s.get('rows', 'all')} rows): {s['why']}")
    out += [f"- {note}" for note in result.get("notes", [])]
    return "\n".join(out)


def ratio_lines(rows: list[dict]) -> list[str]:
    """Headwater / peer, same size and op, from the same run: throughput (higher is better for
    Headwater above 1) and server CPU per message (lower is better for Headwater below 1).

    Headwater's figure is its best row (fastest, or least CPU) among those of the same fsync
    class: fsync "on" peers meet Headwater's ``enforce_fsync`` rows, all others its default rows
    (never its fsync "off" rows).
    The mock cluster is met by Headwater's confluent-kafka row alone (same client, same settings).
    """
    ok = [r for r in rows if not r["error"] and r["count"]]
    hw = [r for r in ok if r["system"] == "headwater"]
    lines = ["| size | op | peer | fsync | Headwater msg/s / peer (Headwater's fastest row) |"
             " Headwater CPU s/M / peer (its leanest row) |", "|---|---|---|---|---:|---:|"]
    peers = (r for r in ok if r["system"] not in ("headwater", "iggyref") and r["op"] in ("produce", "consume"))
    for peer in peers:
        want_on = peer["fsync"] == "on"
        mine = [r for r in hw if r["size"] == peer["size"] and r["op"] == peer["op"]
                and r["fsync"] == ("on" if want_on else HW_DEFAULT_FSYNC)]
        if peer["system"] == "mock":
            mine = [r for r in mine if "confluent" in r["label"]]
        if not mine:
            continue
        fast = max(mine, key=lambda r: r["msg_s"])
        lean = min((r for r in mine if r["cpu_s_per_m"]), key=lambda r: r["cpu_s_per_m"], default=None)
        cpu_ratio = (f"{lean['cpu_s_per_m'] / peer['cpu_s_per_m']:.2f} ({lean['label']})"
                     if lean and peer["cpu_s_per_m"] else "-")
        lines.append(f"| {_size(peer['size'])} | {peer['op']} | {peer['label']} | {peer['fsync']} | "
                     f"{fast['msg_s'] / peer['msg_s']:.2f} ({fast['label']}) | {cpu_ratio} |")
    return lines


def reference_lines(rows: list[dict]) -> list[str]:
    """Headwater against the Iggy reference peer (``iggyref``), same apache-iggy workload, size and
    run: each peer row beside every Headwater row of the same client label and op (one per fsync
    setting Headwater ran it at). Ratios are Headwater / peer: msg/s under 1 and server CPU s/M
    over 1 are what Headwater's server costs beyond the floor the peer shows. Empty when the run
    has no peer rows."""
    ok = [r for r in rows if not r["error"] and r["count"]]
    peer_rows = [r for r in ok if r["system"] == "iggyref" and r["op"] in ("produce", "consume")]
    if not peer_rows:
        return []
    lines = ["| size | apache-iggy workload | peer | Headwater fsync | Headwater msg/s | peer msg/s | Headwater / peer |"
             " Headwater server s/M | peer server s/M | Headwater / peer | client CPU µs/msg, Headwater / peer |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for peer in peer_rows:
        label = peer["label"].removesuffix(PEER_NO_VERIFY)
        mode = "no verify" if label != peer["label"] else "verify"
        mine = [r for r in ok if r["system"] == "headwater" and r["label"] == label and r["op"] == peer["op"]
                and r["size"] == peer["size"]]
        for hw in sorted(mine, key=lambda r: r["fsync"]):
            cpu_ratio = (f"{hw['cpu_s_per_m'] / peer['cpu_s_per_m']:.2f}"
                         if hw["cpu_s_per_m"] and peer["cpu_s_per_m"] else "-")
            lines.append(
                f"| {_size(peer['size'])} | {label.removeprefix('Iggy: ')} {peer['op']} | {mode} | {hw['fsync']} | "
                f"{_n(hw['msg_s'])} | {_n(peer['msg_s'])} | {hw['msg_s'] / peer['msg_s']:.2f} | "
                f"{_n(hw['cpu_s_per_m'], 3)} | {_n(peer['cpu_s_per_m'], 3)} | {cpu_ratio} | "
                f"{_n(hw.get('client_cpu_us'), 2)} / {_n(peer.get('client_cpu_us'), 2)} |")
    return lines


def latency_reference_lines(rows: list[dict]) -> list[str]:
    """Headwater's produce-ack latency beside the Iggy reference peer's at the same rate and tick
    (the peer's latency phases are paced at Headwater's fsync-off rate when the run has it): the
    peer verifies and stamps each batch and stores nothing, so its times are the floor this
    machine, its client and its scheduler give. Empty when no pair was measured."""
    ok = [r for r in rows if not r["error"] and r["count"] and r["op"] == "latency" and r["lat_us"]]
    lines = []
    for peer in (r for r in ok if r["system"] == "iggyref"):
        for hw in (r for r in ok if r["system"] == "headwater" and r["label"] == peer["label"]
                   and r["size"] == peer["size"] and r["rate"] == peer["rate"]):
            if not lines:
                lines = ["| size | client (tick) | msg/s paced | Headwater fsync | Headwater ack p50 / p99 / p99.9 ms"
                         " | peer ack p50 / p99 / p99.9 ms | p99 Headwater / peer |",
                         "|---|---|---:|---|---|---|---:|"]
            h, q = hw["lat_us"], peer["lat_us"]
            times = [f"{t['p50'] / 1000:.2f} / {t['p99'] / 1000:.2f} / {t['p999'] / 1000:.2f}" for t in (h, q)]
            ratio = f"{h['p99'] / q['p99']:.2f}" if q["p99"] else "-"
            lines.append(f"| {_size(peer['size'])} | {peer['label'].removeprefix('Iggy: ')} | {peer['rate']:,} | "
                         f"{hw['fsync']} | {times[0]} | {times[1]} | {ratio} |")
    return lines


# --------------------------------------------------------------------------- py-spy


def summarise_raw(path: Path, top: int = 12) -> dict:
    """Self and inclusive sample counts per function from a py-spy ``--format raw`` file
    (one ``frame;frame;...;frame count`` line per distinct stack, innermost frame last)."""
    self_n: Counter = Counter()
    incl: Counter = Counter()
    total = 0
    for line in Path(path).read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        count = int(n)
        total += count
        frames = [_short(f) for f in stack.split(";") if f]
        if not frames:
            continue
        self_n[frames[-1]] += count
        for f in set(frames):
            incl[f] += count
    return {"samples": total, "self": self_n.most_common(top), "inclusive": incl.most_common(top * 2)}


def _short(frame: str) -> str:
    """``func (path/to/module.py:123)`` -> ``func (module.py)``; the thread frame stays as is."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    file = where.rsplit(":", 1)[0]
    parts = Path(file).parts
    short = "/".join(parts[-2:]) if "headwater" in parts else Path(file).name
    return f"{name} ({short})" if where else name


HW_DEFAULT_FSYNC = "1024 msgs"
HW_OFF_FSYNC = "off"


def summarise_profiles(result: dict) -> dict:
    """Each profile's top functions with their share of busy samples and µs per message
    (share x the server CPU µs per message of the produce row measured in that window)."""
    out = {}
    rows = {(r["label"], r["op"], r["fsync"], r["size"]): r for r in result["rows"] if r["system"] == "headwater"}
    size = result["settings"]["sizes"][0]  # compare.py profiles the first size
    which = {"confluent-kafka produce": "Kafka: confluent-kafka", "apache-iggy send": "Iggy: apache-iggy x1",
             "apache-iggy send, fsync off": "Iggy: apache-iggy x1"}
    for name, info in result.get("profiles", {}).items():
        if "raw" not in info or not Path(info["raw"]).exists():
            out[name] = info
            continue
        s = summarise_raw(Path(info["raw"]))
        row = rows.get((which.get(name), "produce", info.get("fsync", HW_DEFAULT_FSYNC), info.get("size", size)), {})
        us = (row.get("cpu_s_per_m") or 0.0)  # s per million = µs per message
        total = s["samples"] or 1
        out[name] = {
            "raw": info["raw"], "size": info.get("size", size), "samples": s["samples"],
            "server_cpu_us_per_msg": us,
            "self": [{"function": f, "share": round(n / total, 4), "us_per_msg": round(us * n / total, 3)}
                     for f, n in s["self"]],
            "inclusive": [{"function": f, "share": round(n / total, 4), "us_per_msg": round(us * n / total, 3)}
                          for f, n in s["inclusive"]],
        }
    return out


def profile_text(profiles: dict) -> str:
    lines = []
    for name, p in profiles.items():
        if "self" not in p:
            lines.append(f"{name}: {p}")
            continue
        lines.append(f"{name}: {p['samples']} busy samples, server CPU {p['server_cpu_us_per_msg']:.2f} µs/message")
        lines.append("| function (self time) | share of busy samples | µs/message |\n|---|---:|---:|")
        lines += [f"| `{x['function']}` | {x['share'] * 100:.1f} % | {x['us_per_msg']:.3f} |" for x in p["self"]]
        lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------- chart


def chart(result: dict, path: str) -> None:
    """Three panels per message size: produce msg/s, consume msg/s (log scale), and server CPU
    seconds per million produced messages. One bar per client row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if not r["error"] and r["count"]]
    sizes = sorted({r["size"] for r in rows})
    if not sizes:
        return
    panels = (("produce", "msg_s", "produce msg/s"), ("consume", "msg_s", "consume msg/s"),
              ("produce", "cpu_s_per_m", "server CPU s / M msgs (produce)"))
    per_size = max(len([r for r in rows if r["size"] == s and r["op"] == "produce"]) for s in sizes)
    fig, axes = plt.subplots(len(sizes), 3, figsize=(17, 1.0 + (0.6 + 0.24 * per_size) * len(sizes)), squeeze=False)
    colors = {"headwater": "#1f77b4", "iggyref": "#9467bd", "mock": "#7f7f7f", "redis": "#d62728", "nats": "#2ca02c"}
    for i, size in enumerate(sizes):
        for j, (op, metric, title) in enumerate(panels):
            ax = axes[i][j]
            data = [(f"{r['label']} [fsync {r['fsync']}]", r[metric], colors.get(r["system"], "k"))
                    for r in rows if r["size"] == size and r["op"] == op and r[metric]]
            if not data:
                ax.set_visible(False)
                continue
            labels, values, cols = zip(*data)
            ax.barh(range(len(values)), values, color=cols)
            ax.set_yticks(range(len(values)))
            ax.set_yticklabels(labels, fontsize=7)
            ax.invert_yaxis()
            if metric == "msg_s":
                ax.set_xscale("log")
            ax.set_title(f"{title}, {_size(size)}", fontsize=9)
            ax.tick_params(axis="x", labelsize=7)
            for k, v in enumerate(values):
                ax.text(v, k, f" {v:,.0f}" if v >= 10 else f" {v:.1f}", va="center", fontsize=6)
    fig.suptitle(f"Headwater and peers on loopback, {result['started']} (a loaded 2-core VM: server CPU "
                 f"per message is the load-robust figure)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Re-render a compare.py JSON result")
    ap.add_argument("json")
    ap.add_argument("--chart")
    ap.add_argument("--save", action="store_true", help="write the re-summarised result back to the JSON file")
    args = ap.parse_args(argv)
    result = json.loads(Path(args.json).read_text())
    if result.get("profiles"):
        result["profiles"] = summarise_profiles(result)  # again, while the raw py-spy files exist
    print(tables(result))
    if result.get("profiles"):
        print()
        print(profile_text(result["profiles"]))
    if args.chart:
        chart(result, args.chart)
    if args.save:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
