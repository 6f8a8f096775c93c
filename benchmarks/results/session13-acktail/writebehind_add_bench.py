"""WriteBehind.add wall time on the calling thread, with a real worker doing real ranges."""
import os, sys, tempfile, time, statistics
from headwater.storage.local.writebehind import WriteBehind
n, chunk = int(sys.argv[1]), 1 << 20
d = tempfile.mkdtemp(prefix="addbench-")
path = os.path.join(d, "seg.log")
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
data = os.urandom(chunk)
wb = WriteBehind(64 << 20)
times = []
for i in range(n):
    os.pwrite(fd, data, i * chunk)
    x = sum(range(2000))  # some Python work on this thread, as the loop does between appends
    t0 = time.perf_counter_ns()
    wb.add(path, i * chunk, (i + 1) * chunk)
    times.append(time.perf_counter_ns() - t0)
wb.close()
os.close(fd); os.unlink(path); os.rmdir(d)
times.sort()
q = lambda p: times[min(len(times) - 1, int(p * len(times)))] / 1e3
print(f"{sys.executable}: add() µs p50 {q(.5):.1f} p99 {q(.99):.1f} p99.9 {q(.999):.1f} max {times[-1]/1e3:.1f}; >= 1 ms: {sum(t >= 1e6 for t in times)} of {n}; load {os.getloadavg()[0]:.2f}")
