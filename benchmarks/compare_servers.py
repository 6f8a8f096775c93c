"""The server processes ``compare.py`` starts on loopback, and the CPU they use.

Each server is a child process of the harness, bound to 127.0.0.1 on a free port, with its data
in a temporary directory; ``stop()`` ends it (SIGTERM, then SIGKILL after 20 s). Server CPU is read
from ``/proc/<pid>/stat`` (fields 14 and 15, utime + stime of every thread, in clock ticks), so the
client processes and the rest of a busy machine never count in it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ports import free_port  # noqa: E402  (a sibling module: benchmarks run as scripts)

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None) -> float | None:
    """utime + stime of process ``pid`` in seconds (None when there is no such process)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # after "pid (comm)": state is field 3, so utime (14) and stime (15) are at 11 and 12
    return (int(fields[11]) + int(fields[12])) / _TICKS


def wait_listening(proc: subprocess.Popen, ports: list[int], timeout: float, log: Path) -> None:
    end = time.monotonic() + timeout
    pending = list(ports)
    while pending and time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} while starting: {tail(log)}")
        try:
            with socket.create_connection(("127.0.0.1", pending[0]), timeout=0.2):
                pending.pop(0)
        except OSError:
            time.sleep(0.05)
    if pending:
        raise RuntimeError(f"port {pending[0]} not listening after {timeout} s: {tail(log)}")


def tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


class ServerProcess:
    """A child server process: ``argv`` is built by the subclass from its ports and data dir."""

    name = "server"

    def __init__(self, base: Path):
        self.base = Path(base)
        self.data = self.base / f"{self.name}-data"
        self.log = self.base / f"{self.name}.log"
        self.proc: subprocess.Popen | None = None

    def argv(self) -> list[str]:
        raise NotImplementedError

    def ports(self) -> list[int]:
        raise NotImplementedError

    def env(self) -> dict:
        return dict(os.environ)

    def start(self) -> "ServerProcess":
        self.data.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env(), cwd=self.base)
        try:
            wait_listening(self.proc, self.ports(), 60, self.log)
        except Exception:
            self.stop()
            raise
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def cpu(self) -> float | None:
        return cpu_seconds(self.pid)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        rc, self.proc = self.proc.returncode, None
        shutil.rmtree(self.data, ignore_errors=True)
        return rc


class Headwater(ServerProcess):
    """``headwater serve`` run by ``python`` (another venv's interpreter runs that venv's code)."""

    name = "headwater"

    def __init__(self, base: Path, python: str = sys.executable):
        super().__init__(base)
        self.python = python
        self.tcp_port, self.kafka_port = free_port(), free_port()

    def argv(self) -> list[str]:
        return [self.python, "-m", "headwater", "serve", "--data-dir", str(self.data),
                "--tcp-address", self.iggy, "--kafka-address", self.kafka,
                "--http-address", "127.0.0.1:0", "--quic-address", "127.0.0.1:0", "--websocket-address", "127.0.0.1:0",
                "--with-default-root-credentials", "--log-level", "warning"]

    def env(self) -> dict:
        return {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}

    def ports(self) -> list[int]:
        return [self.tcp_port, self.kafka_port]

    @property
    def iggy(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    @property
    def kafka(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"


class IggyReferencePeer(ServerProcess):
    """``benchmarks/iggy_reference_peer.py`` (our minimal Iggy server, no storage), run by this
    interpreter; ``verify``: it checks every SendMessages batch as Headwater does and keeps the
    last ones (``--verify``)."""

    name = "iggyref"

    def __init__(self, base: Path, verify: bool):
        super().__init__(base)
        self.verify = verify
        self.name = "iggyref" if verify else "iggyref-noverify"
        self.data = self.base / f"{self.name}-data"
        self.log = self.base / f"{self.name}.log"
        self.port = free_port()

    def argv(self) -> list[str]:
        script = Path(__file__).resolve().parent / "iggy_reference_peer.py"
        return [sys.executable, str(script), "--address", self.iggy, *(["--verify"] if self.verify else [])]

    def ports(self) -> list[int]:
        return [self.port]

    @property
    def iggy(self) -> str:
        return f"127.0.0.1:{self.port}"

    def summary(self) -> str:
        """The peer's last stderr line once stopped: what it answered, and any command it did not."""
        lines = tail(self.log).strip().splitlines()
        return lines[-1] if lines else ""


class Redis(ServerProcess):
    """Debian's ``redis-server``: AOF on (``appendonly yes``) with ``appendfsync`` everysec or
    always, RDB snapshots off, no persistence of the config."""

    name = "redis"

    def __init__(self, base: Path, appendfsync: str):
        super().__init__(base)
        self.name = f"redis-{appendfsync}"
        self.data = self.base / f"{self.name}-data"
        self.log = self.base / f"{self.name}.log"
        self.appendfsync = appendfsync
        self.port = free_port()

    def argv(self) -> list[str]:
        return ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.data),
                "--appendonly", "yes", "--appendfsync", self.appendfsync, "--save", "",
                "--daemonize", "no", "--protected-mode", "yes", "--logfile", ""]

    def ports(self) -> list[int]:
        return [self.port]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


class Nats(ServerProcess):
    """Debian's ``nats-server -js`` with a file store in the data directory."""

    name = "nats"

    def __init__(self, base: Path):
        super().__init__(base)
        self.port = free_port()

    def argv(self) -> list[str]:
        return ["nats-server", "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(self.data)]

    def ports(self) -> list[int]:
        return [self.port]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def nats_version() -> str:
    try:
        return subprocess.run(["nats-server", "--version"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"
