"""The machine's memory state, measured and (optionally) prepared before a benchmark run.

Why: on this machine (a Firecracker guest with virtio-balloon free page reporting, kernel
``page_reporting`` module, ``min_free_ms`` 0) free guest memory is handed back to the host
within seconds (``/sys/module/page_reporting/parameters/reported_kib`` grows by ~90 MB/s while
the guest is idle), and the first write to such a page costs a host fault, seen in the guest as
a slow copy (``copy_folio_from_iter_atomic`` for a ``pwrite`` into new page-cache pages, the
page-fault path for anonymous memory). A server that appends buffered writes takes a new
page-cache page per 4 KiB it keeps cached, so its system CPU per message depends on how much
recently used (still backed) memory the guest has free: in session 8, ~40 % of the server's
samples while serving 1000 x 100 B SendMessages were that copy (docs/benchmarks.md, "The
machine's memory state (session 8)"). Neither the server nor the client decides it; a
benchmark figure without it cannot be compared with another sitting's.

- :func:`page_cache_cost`: system CPU of ``pwrite``-ing ``mb`` MiB into a new file, in ms per
  MiB (1 MiB writes, the file deleted afterwards). Backed memory: ~0.25-0.4 ms/MiB here; memory
  just reported to the host: 2-5 ms/MiB. Printed with each row so a figure carries the state it
  was measured in.
- :func:`warm_memory`: touch ``gib`` GiB of anonymous memory, one byte per 4 KiB page, and
  release it: the freed pages are backed and are handed out first (reported pages go to the tail
  of the free lists), until the host takes them back again (about a minute for 4 GiB here). The
  state of a long-running host whose page cache has filled its memory, where a new page-cache
  page is a reclaimed one. Costs ~2 s of CPU per GiB on cold memory.

Neither changes anything outside this process. Nothing here asserts a speed.
"""

from __future__ import annotations

import mmap
import os
import resource

_PAGE = 4096
_MIB = 1 << 20


def page_cache_cost(directory: str, mb: int = 64) -> float:
    """System CPU ms per MiB of ``pwrite`` into a new file in ``directory`` (``mb`` MiB, deleted after)."""
    path = os.path.join(directory, f".page-cache-probe-{os.getpid()}")
    chunk = os.urandom(_MIB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        s0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
        for i in range(mb):
            os.pwrite(fd, chunk, i * _MIB)
        s1 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
    finally:
        os.close(fd)
        os.unlink(path)
    return (s1 - s0) * 1e3 / mb


def warm_memory(gib: float) -> float:
    """Touch and release ``gib`` GiB of anonymous memory; returns the system CPU seconds it took."""
    size = int(gib * (1 << 30)) // _PAGE * _PAGE
    if size <= 0:
        return 0.0
    s0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
    area = mmap.mmap(-1, size)
    try:
        for offset in range(0, size, _PAGE):
            area[offset] = 1
    finally:
        area.close()
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime - s0


def reported_kib() -> int | None:
    """KiB of free memory reported to the host since boot (None without ``page_reporting``)."""
    try:
        with open("/sys/module/page_reporting/parameters/reported_kib") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None
