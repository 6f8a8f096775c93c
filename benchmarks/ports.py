"""Ports for the servers a benchmark starts on loopback.

``bind(0)`` answers from the kernel's ephemeral range, where every outgoing connection on the
machine also takes its local port: between the check and the server's own bind, a client's
connection (the benchmark's own, or a test's when a smoke test runs this under pytest-xdist)
can take it, and the server fails with "Address already in use". A port below that range can
only be taken by another explicit bind, so :func:`free_port` picks one there at random (the
tests' ``hw_server.free_port`` does the same, with a slice per xdist worker).
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_pick = random.SystemRandom()
_recent: list[int] = []  # answers of this process: a server not started yet has not bound them
_RECENT_KEPT = 256


def _ephemeral_low() -> int:
    """The first port of Linux's ephemeral range (``ip_local_port_range``; 32768 by default)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, in 10000..(the ephemeral range's start), not among this
    process's last 256 answers; the kernel's choice when that range is too small."""
    low, high = 10000, _ephemeral_low()
    for _ in range(200):
        port = _pick.randrange(low, high) if high - low > 1000 else 0
        if port in _recent:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = s.getsockname()[1]
        _recent.append(port)
        del _recent[:-_RECENT_KEPT]
        return port
    raise RuntimeError("no free port found below the ephemeral range")
