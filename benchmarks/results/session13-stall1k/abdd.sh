#!/bin/bash
# A/B with the disk loaded (sessions 11-12's dd loop), 1 KB, fixed rate; alternating.
R=/work/wt/stall1k/benchmarks/results/session13-stall1k
cd /work/wt/stall1k
run() { # name python size rate
  echo "== $1 $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  flock /work/bench.lock bash -c "
    rm -f /tmp/s1k/stopdd
    ( while [ ! -e /tmp/s1k/stopdd ]; do dd if=/dev/zero of=/tmp/s1k/ddload bs=1M count=256 conv=fdatasync 2>>/tmp/s1k/dd.log; done ) &
    ddp=\$!
    .venv/bin/python benchmarks/bench_ack_latency.py --server-python $2 --size $3 --rate $4 \
       --ticks 5,1 --windows 3 --warm-memory 2 --probe --json $R/$1.json > /tmp/s1k/$1.txt 2>&1
    touch /tmp/s1k/stopdd; wait \$ddp; rm -f /tmp/s1k/ddload /tmp/s1k/stopdd"
  tail -1 /tmp/s1k/$1.txt
}
B=/tmp/stall1k-base/.venv/bin/python
N=/work/wt/stall1k/.venv/bin/python
run dd-1k-run1-branch $N 1024 120000
run dd-1k-run2-main $B 1024 120000
run dd-1k-run3-main $B 1024 120000
run dd-1k-run4-branch $N 1024 120000
echo finished $(date +%T)
