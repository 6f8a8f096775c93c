"""The Iggy reference peer's ack latency at a fixed rate and the 5 ms tick, with --keep 1 (each
request's body freed at the next one: memory reused at once) against --keep 64 (compare.py's:
the last 64 batches of the partition held, so each request takes memory freed 64 requests
ago), alternated. Session 15: is the peer's p99 at the 5 ms tick the machine's floor or its
memory churn? Usage: python peer_keep.py RATE [ROUNDS]"""

import argparse
import asyncio
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HERE))

from compare import Run, Worker, create_iggy_topic  # noqa: E402
from compare_servers import IggyReferencePeer  # noqa: E402


class KeepPeer(IggyReferencePeer):
    def __init__(self, base, keep):
        super().__init__(base, True)
        self.keep = keep

    def argv(self):
        return super().argv() + ["--keep", str(self.keep)]


def main():
    rate, rounds = float(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 2
    args = argparse.Namespace(duration=3.0, latency_duration=3.0, max_messages=10**9, warm_memory=2.0, profile=None)
    run = Run(args)
    for r in range(rounds):
        for keep in (1, 64):
            peer = KeepPeer(run.base, keep).start()
            try:
                asyncio.run(create_iggy_topic(peer.iggy, f"k{keep}-{r}", {}))
                spec = {"client": "iggy-raw", "size": 100, "phases": ["latency"], "deadline_s": 120,
                        "target": {"iggy": peer.iggy, "stream": "bench", "topic": f"k{keep}-{r}"}}
                w = Worker(spec, run.base / "w.log")
                try:
                    assert w.expect(60)[0] == "READY"
                    for tick in (0.005, 0.001):
                        res, cpu, _ = run.measure([w], run.phase("latency", rate=rate, tick_s=tick), peer)
                        q = res[0].get("lat_us", {})
                        print(f"round {r} keep {keep:2d} tick {tick * 1000:g} ms: p50 {q.get('p50', 0) / 1000:.2f} "
                              f"p99 {q.get('p99', 0) / 1000:.2f} p99.9 {q.get('p999', 0) / 1000:.2f} ms "
                              f"cpu {cpu / max(1, res[0].get('count', 1)) * 1e6:.3f} s/M probe {run.page_cache_probe:.2f} "
                              f"{res[0].get('error', '')}", flush=True)
                finally:
                    w.close()
            finally:
                peer.stop()


main()
