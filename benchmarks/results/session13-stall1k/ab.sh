#!/bin/bash
# A/B: main (205d956, /tmp/stall1k-base venv) against this branch, alternating; fixed rates.
R=/work/wt/stall1k/benchmarks/results/session13-stall1k
cd /work/wt/stall1k
run() { # name python size rate
  echo "== $1 $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  flock /work/bench.lock .venv/bin/python benchmarks/bench_ack_latency.py --server-python $2 --size $3 --rate $4 \
     --ticks 5,1 --windows 3 --warm-memory 2 --probe --json $R/$1.json > /tmp/s1k/$1.txt 2>&1
  tail -1 /tmp/s1k/$1.txt
}
B=/tmp/stall1k-base/.venv/bin/python
N=/work/wt/stall1k/.venv/bin/python
run 1k-run1-main $B 1024 120000
run 1k-run2-branch $N 1024 120000
run 1k-run3-branch $N 1024 120000
run 1k-run4-main $B 1024 120000
run 100-run1-main $B 100 500000
run 100-run2-branch $N 100 500000
run 100-run3-branch $N 100 500000
run 100-run4-main $B 100 500000
echo finished $(date +%T)
