"""A real ``headwater serve`` process on loopback (imported by tests as ``hw_server``: a
name of its own, so it never collides with another folder's ``conftest``)."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


_random = random.SystemRandom()  # not the `random` module's state, which hypothesis seeds per test


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _worker_share(low: int, high: int) -> tuple[int, int]:
    """This pytest-xdist worker's own slice of ``[low, high)`` (all of it outside xdist).

    Two workers picking ports from one range can both pick a port in the moments between
    one's check and its server's bind; both servers then bind it (SO_REUSEADDR, neither
    listening yet) and the second to ``listen`` fails ("Address already in use"). Slices
    that do not overlap leave only this process's own picks to meet."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    try:
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    except ValueError:
        count = 1
    if count <= 1 or not (worker.startswith("gw") and worker[2:].isdigit()):
        return low, high
    width = (high - low) // count
    start = low + (int(worker[2:]) % count) * width
    return start, start + width


_given: list[int] = []  # the ports this process handed out last: not handed out again soon
_GIVEN_KEPT = 512


def free_port(kind: str = "tcp") -> int:
    """A port free on 127.0.0.1 now, chosen at random below the kernel's ephemeral range,
    from this pytest-xdist worker's own slice of it, and not among this process's last
    512 answers (a server not started yet has not bound the ports it was given).

    A port the kernel hands out for ``bind(0)`` comes from the ephemeral range, where every
    outgoing connection on the machine (any test's client, under pytest-xdist another
    worker's) also takes its local port: in the moments between this check and the server's
    own bind, such a connection could take it ("Address already in use"). Below that range
    only another explicit bind can: another worker's (see :func:`_worker_share`) or another
    program's."""
    sock_type = socket.SOCK_DGRAM if kind == "udp" else socket.SOCK_STREAM
    below = _ephemeral_range()[0]
    low, high = _worker_share(10000, below) if below > 11000 else (0, 0)
    for _ in range(200):
        port = _random.randrange(low, high) if high > low else 0
        if port and port in _given:
            continue
        with socket.socket(type=sock_type) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = s.getsockname()[1]
        _given.append(port)
        del _given[:-_GIVEN_KEPT]
        return port
    raise RuntimeError("no free port found below the ephemeral range")


_STARTED = "headwater started"  # app.serve's line once it serves and handles SIGTERM/SIGINT


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (``/proc/PID/stat`` fields 14 and 15); 0 when gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class ServerProcess:
    data_dir: Path
    tcp_port: int
    kafka_port: int
    # the Iggy HTTP, QUIC (UDP) and WebSocket listeners; free ports by default, so parallel
    # servers never meet on Iggy's default ports
    http_port: int = field(default_factory=lambda: free_port())
    quic_port: int = field(default_factory=lambda: free_port("udp"))
    websocket_port: int = field(default_factory=lambda: free_port())
    proc: subprocess.Popen | None = None
    log_path: Path | None = None
    extra_env: dict | None = None

    @property
    def iggy_address(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    @property
    def kafka_address(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def start(self, *extra_args: str, env: dict | None = None) -> "ServerProcess":
        assert self.proc is None
        self.log_path = self.data_dir.parent / f"server-{self.tcp_port}.log"
        starts_before = self.log().count(_STARTED)
        # HEADWATER_NO_EXTENSIONS passes through: `HEADWATER_NO_EXTENSIONS=1 pytest` runs the
        # servers on the pure-Python hot loops too
        full_env = {
            k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_") or k == "HEADWATER_NO_EXTENSIONS"
        }
        full_env.update(self.extra_env or {})
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "headwater", "serve",
                "--data-dir", str(self.data_dir),
                "--tcp-address", self.iggy_address,
                "--kafka-address", self.kafka_address,
                "--http-address", f"127.0.0.1:{self.http_port}",
                "--quic-address", f"127.0.0.1:{self.quic_port}",
                "--websocket-address", f"127.0.0.1:{self.websocket_port}",
                "--with-default-root-credentials",
                *extra_args,
            ],
            stdout=open(self.log_path, "ab"),
            stderr=subprocess.STDOUT,
            env=full_env,
        )
        # Ready (its "headwater started" line, logged once SIGTERM/SIGINT stop it cleanly, and
        # both ports accept) or exited ends the wait. The bound is on the server's own CPU
        # time, not on the clock: on a loaded machine (pytest-xdist workers, other suites) a
        # start still importing after 20 s of wall time is slow, not broken; one that has burnt
        # 20 s of CPU without listening is. A server blocked for ever is pytest-timeout's.
        while _cpu_seconds(self.proc.pid) < 20:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:  # both listeners: a test may talk Kafka first
                if self.log().count(_STARTED) == starts_before:
                    raise OSError("not started yet")
                for port in (self.tcp_port, self.kafka_port):
                    with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                        pass
                return self
            except OSError:
                time.sleep(0.05)
        self.proc.kill()  # not left running (its ports and CPU) after the test that failed on it
        self.proc.wait()
        self.proc = None
        raise RuntimeError(f"server did not start:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.proc = None
        return rc

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def restart(self, *extra_args: str) -> "ServerProcess":
        self.stop()
        return self.start(*extra_args)
