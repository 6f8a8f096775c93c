"""Shared pieces of the soak and fuzz tools: a real ``headwater serve`` process,
blocking raw Iggy and Kafka clients built on our codecs and kio, and the log check.

Nothing here is imported by the server; the tools import it from their own
directory (``python tools/soak.py`` puts ``tools/`` first on ``sys.path``).
Everything listens and connects on 127.0.0.1 only.
"""

from __future__ import annotations

import io
import os
import re
import random
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import xxhash
from kio.serial import entity_reader, entity_writer

from headwater.codec.errors import CodecError
from headwater.codec.iggy import framing, version
from headwater.codec.iggy.codes import COMMAND_TO_OPERATION, Command, Operation
from headwater.codec.iggy.primitives import encode_name
from headwater.codec.kafka import messages as kmsg

HEADER = framing.HEADER_SIZE
_METADATA_OPS = range(128, 160)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- the server process

LOG_PROBLEM = re.compile(
    r"Traceback|Exception in callback|Task exception was never retrieved|Exception ignored"
    r"|unhandled|^\S+ (?:error|critical) ",
    re.M,
)
"""What must never be in a server log during a soak or a fuzz run: a Python traceback, an
asyncio "exception never retrieved" report, or any line logged at error or critical."""


def log_problems(text: str, limit: int = 20) -> list[str]:
    """The offending lines of a server log (each with the 3 lines after it), at most ``limit``."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        if LOG_PROBLEM.search(line):
            out.append("\n".join(lines[i:i + 4]))
            if len(out) >= limit:
                break
    return out


class Server:
    """A ``headwater serve`` child process on loopback; restarts reuse the data directory and ports.

    Its stdout and stderr go to ``log_path`` (appended across restarts). ``env`` adds
    ``HEADWATER_*`` settings; inherited ``HEADWATER_*`` variables are dropped.
    """

    def __init__(self, data_dir: Path, *, log_path: Path | None = None, env: dict | None = None,
                 tcp_port: int | None = None, kafka_port: int | None = None):
        self.data_dir = Path(data_dir)
        self.tcp_port = tcp_port or free_port()
        self.kafka_port = kafka_port or free_port()
        self.log_path = Path(log_path) if log_path else self.data_dir.parent / f"{self.data_dir.name}-server.log"
        self.env = dict(env or {})
        self.proc: subprocess.Popen | None = None
        self._log_read = 0

    @property
    def iggy_address(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    @property
    def kafka_address(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 30.0) -> float:
        """Start and wait until both listeners accept and the start-up line (``headwater started``,
        logged once every listener serves, the HTTP one last) is in the log; returns the seconds
        that took."""
        assert self.proc is None, "already running"
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
        env.update(self.env)
        started = time.monotonic()
        log_start = self.log_path.stat().st_size if self.log_path.exists() else 0  # the log is appended to
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "headwater", "serve", "--data-dir", str(self.data_dir),
                 "--tcp-address", self.iggy_address, "--kafka-address", self.kafka_address,
                 "--http-address", "127.0.0.1:0", "--quic-address", "127.0.0.1:0", "--websocket-address", "127.0.0.1:0",
                 "--with-default-root-credentials"],
                stdout=log, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL,
            )
        pending = [self.tcp_port, self.kafka_port]
        while time.monotonic() - started < timeout:
            if self.proc.poll() is not None:
                rc = self.proc.returncode
                self.proc = None
                raise RuntimeError(f"server exited with {rc} while starting; log: {self.log_path}")
            if not pending:
                with open(self.log_path, "rb") as log:
                    log.seek(log_start)
                    this_start = log.read()
                if b"headwater started" in this_start:
                    return time.monotonic() - started
                time.sleep(0.05)
                continue
            try:
                with socket.create_connection(("127.0.0.1", pending[0]), timeout=0.2):
                    pending.pop(0)
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"server did not start within {timeout} s; log: {self.log_path}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> tuple[int, bool]:
        """Send ``sig`` and wait: (exit code, exited within ``timeout``). Kills after the timeout."""
        assert self.proc is not None, "not running"
        self.proc.send_signal(sig)
        in_time = True
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            in_time = False
            self.proc.kill()
            rc = self.proc.wait()
        self.proc = None
        return rc, in_time

    def kill(self) -> None:
        if self.proc is not None:
            self.stop(signal.SIGKILL)

    def rss_kb(self) -> int | None:
        """VmRSS of the server process in KiB (None when it is not running)."""
        pid = self.pid
        if pid is None:
            return None
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            return None
        return None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def new_log(self) -> str:
        """The log written since the previous call."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_read)
                data = f.read()
        except OSError:
            return ""
        self._log_read += len(data)
        return data.decode(errors="replace")

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_text()[-chars:]


# --------------------------------------------------------------------------- raw Iggy client


class Closed(Exception):
    """The peer closed the connection."""


def read_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        try:
            chunk = sock.recv(n - len(out))
        except (ConnectionResetError, BrokenPipeError) as e:
            raise Closed(str(e)) from e
        if not chunk:
            raise Closed(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def login_register_body(username: str, password: str) -> bytes:
    """A LoginRegister (40) body as the SDK sends it."""
    return version.encode_login_register(version.LoginRegister(
        version.ClientVersionInfo(version.PROTOCOL_VERSION, "rust-sdk", "0.11.0"), username, password))


def login_pat_body(token: str) -> bytes:
    """A LoginRegisterWithPat (45) body."""
    return version.encode_login_register_with_pat(version.LoginRegisterWithPat(
        version.ClientVersionInfo(version.PROTOCOL_VERSION, "rust-sdk", "0.11.0"), token))


class IggyConn:
    """A blocking frame-level Iggy client: nothing hidden, nothing retried."""

    def __init__(self, address: str, *, timeout: float = 10.0, client: int | None = None):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.client = client if client is not None else (int.from_bytes(os.urandom(15), "little") | 1)
        self.session = 0
        self.request = 0

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "IggyConn":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def frame(self, code: int, body: bytes = b"", *, operation: int | None = None, request: int | None = None,
              session: int | None = None) -> bytes:
        """A request frame the way the SDK builds it: the code's operation, a fresh request number
        for replicated operations, this connection's client id and session."""
        if operation is None:
            try:
                operation = int(COMMAND_TO_OPERATION[Command(code)])
            except (ValueError, KeyError):
                operation = int(Operation.NON_REPLICATED)
        if request is None:
            if operation == Operation.REGISTER:
                request = 0
            else:
                if operation in _METADATA_OPS or operation >= 160 or operation == Operation.LOGOUT:
                    self.request += 1
                request = self.request
        if session is None:
            session = 0 if operation == Operation.REGISTER else self.session
        checksum = xxhash.xxh3_64_intdigest(body) if operation in _METADATA_OPS or operation == 1 else 0
        return framing.encode_request_header(
            size=HEADER + len(body), client=self.client, request=request, operation=operation,
            session=session, command_code=code, request_checksum=checksum) + body

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_raw(self) -> tuple[bytes, bytes]:
        """(256-byte header, body) of the next frame from the server."""
        head = read_exactly(self.sock, HEADER)
        size = struct.unpack_from("<I", head, framing.SIZE_OFFSET)[0]
        if head[framing.COMMAND_OFFSET] == 13 or size <= HEADER:
            return head, b""
        return head, read_exactly(self.sock, size - HEADER)

    def read(self) -> tuple[str, int, bytes]:
        """("reply", status, body) or ("eviction", reason, b"")."""
        head, body = self.read_raw()
        if head[framing.COMMAND_OFFSET] == 13:
            return "eviction", framing.decode_eviction(head).reason, b""
        return "reply", framing.decode_reply_header(head).status, body

    def call(self, code: int, body: bytes = b"", **kw) -> tuple[str, int, bytes]:
        self.send(self.frame(code, body, **kw))
        return self.read()

    def _register(self, code: int, body: bytes) -> int:
        kind, status, reply = self.call(code, body, operation=int(Operation.REGISTER))
        if (kind, status) != ("reply", 0):
            raise RuntimeError(f"login refused: {kind} {status}")
        self.session = version.decode_login_reply(reply[4:]).session
        return self.session

    def login(self, username: str = "iggy", password: str = "iggy") -> int:
        return self._register(int(Command.LOGIN_REGISTER), login_register_body(username, password))

    def login_pat(self, token: str) -> int:
        return self._register(int(Command.LOGIN_REGISTER_WITH_PAT), login_pat_body(token))

    def ok(self, code: int, body: bytes = b"", allow: tuple[int, ...] = ()) -> bytes:
        """Call and return the body; raises unless the status is 0 or in ``allow``."""
        kind, status, reply = self.call(code, body)
        if kind != "reply" or (status and status not in allow):
            raise RuntimeError(f"command {code}: {kind} {status}")
        return reply


def create_name_body(name: str) -> bytes:
    return encode_name(name)


# --------------------------------------------------------------------------- raw Kafka client


class KafkaConn:
    """A blocking Kafka client for kio request entities (request header v1/v2 by flexibility)."""

    def __init__(self, address: str, *, timeout: float = 10.0, client_id: str = "hw-tools"):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation = 0
        self.client_id = client_id.encode()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "KafkaConn":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def frame(self, api_key: int, version: int, request, correlation: int | None = None) -> tuple[bytes, int]:
        """A size-prefixed request frame for a kio entity (or raw body bytes)."""
        if correlation is None:
            self.correlation += 1
            correlation = self.correlation
        flexible = kmsg.has_schema(api_key, version) and kmsg.is_flexible(api_key, version)
        head = struct.pack(">hhih", api_key, version, correlation, len(self.client_id)) + self.client_id
        if flexible:
            head += b"\x00"
        if isinstance(request, (bytes, bytearray)):
            body = bytes(request)
        else:
            buf = io.BytesIO()
            entity_writer(type(request))(buf, request)
            body = buf.getvalue()
        payload = head + body
        return struct.pack(">i", len(payload)) + payload, correlation

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", read_exactly(self.sock, 4))[0]
        return read_exactly(self.sock, size)

    def read_response(self, api_key: int, version: int):
        """(correlation id, decoded response entity) of the next response frame."""
        data = self.read_frame()
        return decode_kafka_response(data, api_key, version)

    def call(self, api_key: int, version: int, request):
        frame, correlation = self.frame(api_key, version, request)
        self.send(frame)
        got, response = self.read_response(api_key, version)
        if got != correlation:
            raise RuntimeError(f"correlation id {got}, expected {correlation}")
        return response


def decode_kafka_response(data: bytes, api_key: int, version: int):
    """(correlation id, entity) of a response frame (without its size prefix).

    Header v1 (a tagged-field section) for flexible versions except ApiVersions.
    Raises ValueError when bytes are left over, kio's errors when it does not decode.
    """
    if len(data) < 4:
        raise ValueError(f"response of {len(data)} bytes has no correlation id")
    (correlation,) = struct.unpack_from(">i", data, 0)
    cls = kmsg.response_class(api_key, version)
    pos = 4
    if cls.__flexible__ and api_key != 18:
        if len(data) < 5 or data[4] != 0:
            raise ValueError("response header v1 must have an empty tagged-field section")
        pos = 5
    entity, size = entity_reader(cls)(data, pos)
    if pos + size != len(data):
        raise ValueError(f"{len(data) - pos - size} bytes after the response body")
    return correlation, entity


def kafka_build(cls: type, **values):
    """A kio entity with zero values for every required field not given (``messages.build``)."""
    return kmsg.build(cls, **values)


def kafka_entity_bytes(entity) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


# --------------------------------------------------------------------------- the fuzz loop, shared

_FRAME_LINE = re.compile(r'^\s*File "([^"]+)", line \d+, in (\S+)')


def failure_signature(problems: list[str], log: str) -> str:
    """A short name for a failure, the same for every input that hits the same bug: the
    innermost frame and exception of the server's traceback, else the first problem with its
    numbers and hex blobs blanked out."""
    lines = log.splitlines()
    for start in range(len(lines) - 1, -1, -1):
        if lines[start].startswith("Traceback"):
            where = ""
            for line in lines[start + 1:]:
                m = _FRAME_LINE.match(line)
                if m:
                    where = f"{Path(m.group(1)).name}:{m.group(2)}"
                elif line and not line[0].isspace():
                    return f"{where} {re.sub(r'[0-9]+', 'N', line.strip())}"
            return where
    text = problems[0] if problems else "?"
    text = re.sub(r"[0-9a-f]{16,}", "<hex>", text)
    return re.sub(r"[0-9]+", "N", text)[:200]


def run_fuzzer(tool: str, fz, server: Server, args, *, base: Path) -> int:
    """Drive a fuzzer (``setup``, ``healthy``, ``ensure_fixtures``, ``make_case``, ``run_case``,
    ``forget_connections``, ``stats``, ``summary``) against ``server`` for ``args.seconds``.

    Stops at the first failure unless ``args.keep_going``; failures whose signature contains
    one of ``args.known`` are counted and passed over. Saves the first input of each
    failure signature under ``args.out``. Returns the exit status.
    """
    import json
    import signal as _signal
    import tempfile
    from collections import deque

    out_dir = Path(args.out) if args.out else Path(tempfile.gettempdir()) / "headwater-fuzz"
    history: deque = deque(maxlen=6)
    failures: dict[str, dict] = {}
    known: dict[str, int] = {}
    fatal: tuple[str, list[str]] | None = None
    cases = 0
    started = time.monotonic()

    def record(title: str, problems: list[str], case: dict | None, log: str) -> bool:
        """Note a failure; True when the run must stop."""
        sig = failure_signature(problems, log)
        if any(k in sig for k in args.known):
            known[sig] = known.get(sig, 0) + 1
            return False
        entry = failures.setdefault(sig, {"count": 0, "title": title, "problems": problems, "case": case})
        entry["count"] += 1
        if entry["count"] == 1 and case is not None:
            name = f"{tool}-seed{args.seed}-case{case['case']}.json"
            out_dir.mkdir(parents=True, exist_ok=True)
            path = out_dir / name
            path.write_text(json.dumps({"seed": args.seed, "title": title, "signature": sig, "problems": problems,
                                        "case": case, "previous": [c for c in history if c is not case]},
                                       indent=2, default=str))
            entry["saved"] = str(path)
        return not args.keep_going

    try:
        fz.setup()
        log = server.new_log()
        if log_problems(log):
            fatal = ("server log problem during setup", log_problems(log)[:3])
        next_health = next_cleanup = time.monotonic()
        while fatal is None and time.monotonic() - started < args.seconds:
            now = time.monotonic()
            if now >= next_health:
                next_health = now + args.health_every
                problem = fz.healthy()
                if problem:
                    fatal = ("the healthy client failed", [problem])
                    break
            if now >= next_cleanup:
                next_cleanup = now + 2.0
                fz.ensure_fixtures()
            cases += 1
            case, conn = fz.make_case()
            case["case"] = cases
            history.append(case)
            problems = fz.run_case(case, conn)
            if not server.alive():
                fatal = ("the server process died", problems + [f"exit {server.proc.returncode if server.proc else '?'}"])
                record("the server process died", fatal[1], case, server.log_tail())
                break
            log = server.new_log()
            bad = log_problems(log)
            if bad:
                problems.append("server log: " + bad[0])
            if problems:
                fz.forget_connections()
                if record("an input broke the oracle", problems, case, log):
                    break
        if fatal is None:
            problem = fz.healthy()
            if problem:
                fatal = ("the healthy client failed", [problem])
    except (OSError, Closed, RuntimeError, CodecError) as e:
        fatal = ("the fuzzer's own fixtures failed", [f"{type(e).__name__}: {e}"])
    finally:
        if server.alive():
            rc, in_time = server.stop(_signal.SIGTERM, timeout=20)
            if fatal is None and (rc != 0 or not in_time):
                fatal = ("SIGTERM after the run did not exit 0", [f"exit {rc}, in time {in_time}"])
    elapsed = time.monotonic() - started
    stats = ", ".join(f"{k}={v}" for k, v in sorted(fz.stats.items()))
    print(f"{tool}: {cases} inputs in {elapsed:.1f} s; {stats}")
    for line in fz.summary():
        print(f"{tool}: {line}")
    for sig, n in known.items():
        print(f"{tool}: known failure x{n}: {sig}")
    if fatal is None and not failures:
        print(f"{tool}: OK (seed {args.seed})")
        import shutil
        shutil.rmtree(base, ignore_errors=True)
        return 0
    print(f"{tool}: FAILED (seed {args.seed})")
    if fatal is not None:
        print(f"  {fatal[0]}:")
        for p in fatal[1]:
            print("    " + p.replace("\n", "\n    "))
    for sig, entry in failures.items():
        print(f"  failure x{entry['count']}: {sig}")
        print(f"    {entry['title']}:")
        for p in entry["problems"]:
            print("      " + p.replace("\n", "\n      "))
        case = entry["case"]
        if case is not None:
            print(f"    input {case['case']}: mode={case['mode']} frames={case['frames']}")
            if case.get("expected"):
                print(f"    expected: {case['expected']}")
            print(f"    bytes: {case['data'][:400]}{'...' if len(case['data']) > 400 else ''}")
            print(f"    saved: {entry.get('saved')}  (replay: tools/{tool}.py --replay {entry.get('saved')})")
    print(f"  server log: {server.log_path}")
    return 1


def add_fuzz_arguments(ap) -> None:
    ap.add_argument("--seconds", type=float, default=60.0, help="how long to fuzz (default 60)")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: random, printed)")
    ap.add_argument("--out", help="where failing inputs are saved (default: $TMPDIR/headwater-fuzz)")
    ap.add_argument("--health-every", type=float, default=0.25, help="seconds between healthy-client checks")
    ap.add_argument("--keep-going", action="store_true",
                    help="do not stop at the first failure: collect one input per distinct failure")
    ap.add_argument("--known", action="append", default=[], metavar="TEXT",
                    help="count failures whose signature contains TEXT as known, and go on (repeatable)")
    ap.add_argument("--replay", help="re-send one saved input (a JSON file written on failure) and exit")
    ap.add_argument("--inject", choices=["bad-reply"], help="corrupt one answer before it is checked")


# --------------------------------------------------------------------------- mutation (both fuzzers)


def mutate_bytes(
    rng: random.Random,
    frame: bytes,
    donors: list[bytes],
    *,
    header_lo: int,
    body_lo: int,
    endian: str,
    widths: tuple[int, ...],
    interesting: list[int],
    extra_ints,
    header_bias: float = 0.15,
) -> tuple[bytearray, list[str]]:
    """Break a frame with 1-5 random edits (bit flips, bytes, integers of ``widths`` in ``endian``
    order drawn from ``interesting`` and ``extra_ints(len, pos)``, truncation, extension,
    insertion, deletion, duplication, splices from ``donors``). Edits land in
    ``[body_lo, len)``, or with probability ``header_bias`` (always for a frame no longer than
    ``body_lo``) in ``[header_lo, len)``. Returns the bytes (the caller fixes the size prefix)
    and what was done, for the report."""
    b = bytearray(frame)
    ops: list[str] = []
    in_header = rng.random() < header_bias or len(b) <= body_lo
    formats = {1: endian + "B", 2: endian + "H", 4: endian + "I", 8: endian + "Q"}

    def pos(end_ok: bool = False) -> int:
        lo = header_lo if in_header else min(len(b), body_lo)
        hi = len(b) + (1 if end_ok else 0)
        return rng.randrange(lo, hi) if hi > lo else len(b)

    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 5))):
        op = rng.choice(("flip", "flip", "byte", "int", "int", "truncate", "extend", "insert", "delete",
                         "duplicate", "splice"))
        if not b:
            b += rng.randbytes(4)
        if op == "flip":
            p = pos()
            if p < len(b):
                bit = rng.randrange(8)
                b[p] ^= 1 << bit
                ops.append(f"flip bit {bit} at {p}")
        elif op == "byte":
            p = pos()
            if p < len(b):
                v = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)))
                b[p] = v
                ops.append(f"byte {p}={v}")
        elif op == "int":
            width = rng.choice(widths)
            p = pos()
            if p + width <= len(b):
                v = rng.choice(interesting + [*extra_ints(len(b), p), rng.randrange(1 << (8 * width))])
                v &= (1 << (8 * width)) - 1
                struct.pack_into(formats[width], b, p, v)
                ops.append(f"u{8 * width} {p}={v}")
        elif op == "truncate":
            p = pos()
            del b[p:]
            ops.append(f"truncate at {p}")
        elif op == "extend":
            n = rng.choice((1, 2, 4, 8, rng.randint(1, 300)))
            b += rng.randbytes(n) if rng.random() < 0.7 else bytes(n)
            ops.append(f"extend {n}")
        elif op == "insert":
            p = pos(end_ok=True)
            n = rng.randint(1, 16)
            b[p:p] = rng.randbytes(n)
            ops.append(f"insert {n} at {p}")
        elif op == "delete":
            p = pos()
            n = rng.randint(1, 16)
            del b[p:p + n]
            ops.append(f"delete {n} at {p}")
        elif op == "duplicate":
            p = pos()
            n = rng.randint(1, 32)
            b[p:p] = b[p:p + n]
            ops.append(f"duplicate {n} at {p}")
        elif op == "splice":
            donor = rng.choice(donors)
            if len(donor) > body_lo:
                start = rng.randrange(body_lo, len(donor))
                chunk = donor[start:start + rng.randint(1, 64)]
                p = pos(end_ok=True)
                b[p:p + len(chunk)] = chunk
                ops.append(f"splice {len(chunk)} at {p}")
    return b, ops
