"""Start-up safety with real ``headwater serve`` processes: one server per data directory
(the ``.lock``), and the start order (validate every option -> lock -> bind -> open the
data -> create root), so a start that fails prints one line and changes nothing.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time

import apache_iggy as ig
import pytest

from hw_server import ServerProcess, free_port
from test_iggy_restart import all_messages, login

pytestmark = pytest.mark.slow  # a file of long tests: handed out first (tests/conftest.py)

PREFIX = "headwater: cannot start: "
OTHER_LISTENERS = ("--http-address", "127.0.0.1:0", "--quic-address", "127.0.0.1:0", "--websocket-address", "127.0.0.1:0")


def serve_fails(data_dir, *args: str, env: dict | None = None, tcp: str | None = None, kafka: str | None = None,
                code: int | None = None, count: int = 1):
    """Run ``headwater serve`` expecting it to refuse; returns its one stderr line (without
    the prefix), or the list of ``count`` lines when more than one is expected.

    Asserts: a non-zero exit (``code`` if given), exactly ``count`` lines on stderr (one
    per refused option), nothing on stdout (no password printed), no traceback anywhere."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
    full_env.update(env or {})
    cmd = [sys.executable, "-m", "headwater", "serve", "--data-dir", str(data_dir),
           "--tcp-address", tcp or f"127.0.0.1:{free_port()}",
           "--kafka-address", kafka or f"127.0.0.1:{free_port()}",
           # port 0: never Iggy's default ports, which a parallel test may hold
           *OTHER_LISTENERS, *args]
    p = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=120)
    assert p.returncode != 0, f"started:\n{p.stdout}\n{p.stderr}"
    assert code is None or p.returncode == code, (p.returncode, p.stderr)
    assert "Traceback" not in p.stdout + p.stderr, p.stderr
    assert p.stdout == "", p.stdout
    lines = p.stderr.splitlines()
    assert len(lines) == count, p.stderr
    for line in lines:
        assert line.startswith(PREFIX), line
    problems = [line[len(PREFIX):] for line in lines]
    return problems[0] if count == 1 else problems


def tree(path) -> dict[str, bytes | None]:
    """Every entry under ``path`` with its bytes (None for a directory)."""
    out: dict[str, bytes | None] = {}
    for root, dirs, files in os.walk(path):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), path)] = None
        for f in files:
            full = os.path.join(root, f)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, path)] = fh.read()
    return out


def send(server, stream: str, payloads: list[bytes], *, create: bool = False) -> None:
    async def go():
        c = await login(server, retries=0)
        if create:
            await c.create_stream(stream)
            await c.create_topic(stream, "t", 1)
        await c.send_messages(stream, "t", 0, [ig.SendMessage(p) for p in payloads])

    asyncio.run(go())


def stored(server, stream: str) -> list[bytes]:
    async def go():
        c = await login(server, retries=0)
        return [m[2] for m in (await all_messages(c, stream, "t", 1))[0]]

    return asyncio.run(go())


def can_login(server, user: str, password: str) -> bool:
    async def go():
        try:
            await login(server, user, password, retries=0)
        except RuntimeError:
            return False
        return True

    return asyncio.run(go())


# --------------------------------------------------------------------------- the lock


def test_a_second_server_on_the_same_data_dir_is_refused_and_the_first_keeps_its_data(fresh_server):
    send(fresh_server, "locked", [b"first-%d" % i for i in range(10)], create=True)
    line = serve_fails(fresh_server.data_dir, "--with-default-root-credentials", code=1)
    assert line.startswith("--data-dir: "), line
    assert str(fresh_server.data_dir) in line and f"pid {fresh_server.proc.pid}" in line, line
    assert (fresh_server.data_dir / ".lock").read_text() == f"{fresh_server.proc.pid}\n"  # the refused wrote nothing
    send(fresh_server, "locked", [b"second-%d" % i for i in range(10)])  # the first serves on
    assert fresh_server.stop() == 0, fresh_server.log()
    fresh_server.start()
    assert stored(fresh_server, "locked") == [b"first-%d" % i for i in range(10)] + [b"second-%d" % i for i in range(10)]


def test_fresh_does_not_wipe_a_directory_another_server_holds(fresh_server):
    send(fresh_server, "kept", [b"m%d" % i for i in range(5)], create=True)
    before = tree(fresh_server.data_dir)
    line = serve_fails(fresh_server.data_dir, "--fresh", "--with-default-root-credentials")
    assert f"pid {fresh_server.proc.pid}" in line, line
    after = tree(fresh_server.data_dir)
    assert set(after) >= set(before)  # nothing deleted
    assert stored(fresh_server, "kept") == [b"m%d" % i for i in range(5)]


def test_sigkill_of_the_holder_releases_the_lock(fresh_server):
    send(fresh_server, "killed", [b"acked-%d" % i for i in range(5)], create=True)
    fresh_server.kill()
    assert (fresh_server.data_dir / ".lock").exists()  # the file stays; the kernel dropped the flock
    fresh_server.start()
    assert stored(fresh_server, "killed") == [b"acked-%d" % i for i in range(5)]
    assert (fresh_server.data_dir / ".lock").read_text().strip() == str(fresh_server.proc.pid)


def test_fresh_empties_a_directory_nobody_holds(fresh_server):
    send(fresh_server, "old", [b"x"], create=True)
    fresh_server.stop()
    fresh_server.start("--fresh")

    async def go():
        c = await login(fresh_server, retries=0)
        return [s.name for s in await c.get_streams()]

    assert asyncio.run(go()) == []


# --------------------------------------------------------------------------- bad options


BAD_OPTIONS = [
    # (args, env, config file text, expected start of the line, words it must contain)
    (["--tcp-address", "foo"], {}, None, "--tcp-address: ", ["'foo'", "HOST:PORT"]),
    (["--tcp-address", "127.0.0.1:99999"], {}, None, "--tcp-address: ", ["99999", "range"]),
    (["--kafka-address", "300.1.2.3:9092"], {}, None, "--kafka-address: ", ["300.1.2.3"]),
    (["--kafka-address", "bad_host!:9092"], {}, None, "--kafka-address: ", ["bad_host!"]),
    (["--log-level", "verbose"], {}, None, "--log-level: ", ["'verbose'", "debug"]),
    ([], {}, '[logging]\nformat = "xml"\n', "logging.format in ", ["'xml'", "json"]),
    ([], {"HEADWATER_KAFKA_DEFAULT_PARTITIONS": "three"}, None, "HEADWATER_KAFKA_DEFAULT_PARTITIONS: ", ["'three'", "integer"]),
    ([], {"HEADWATER_KAFKA_DEFAULT_PARTITIONS": "0"}, None, "HEADWATER_KAFKA_DEFAULT_PARTITIONS: ", ["minimum 1"]),
    ([], {"HEADWATER_TCP_ENABLED": "maybe"}, None, "HEADWATER_TCP_ENABLED: ", ["'maybe'", "boolean"]),
    ([], {}, "[tcp]\nmax_frame_size = -5\n", "tcp.max_frame_size in ", ["-5"]),
    ([], {"HEADWATER_TCP_NO_SUCH_KEY": "1"}, None, "HEADWATER_TCP_NO_SUCH_KEY: ", ["unknown key"]),
    ([], {"HEADWATER_ROOT_PASSWORD": "x"}, None, "HEADWATER_ROOT_PASSWORD: ", ["3-100"]),
    ([], {"HEADWATER_ROOT_USERNAME": "no spaces"}, None, "HEADWATER_ROOT_USERNAME: ", ["'no spaces'"]),
]


@pytest.mark.parametrize("args,env,config_text,start,words", BAD_OPTIONS, ids=[" ".join(c[0]) or next(iter(c[1]), "config") for c in BAD_OPTIONS])
def test_a_bad_option_prints_one_line_and_creates_nothing(tmp_path, args, env, config_text, start, words):
    data_dir = tmp_path / "data"
    if config_text is not None:
        (tmp_path / "headwater.toml").write_text(config_text)
        args = [*args, "--config", str(tmp_path / "headwater.toml")]
    line = serve_fails(data_dir, *args, env=env, code=2)  # 2: a bad option (1: the machine's state)
    assert line.startswith(start), line
    for word in words:
        assert word in line, line
    assert not data_dir.exists()


def test_every_bad_option_is_one_line_each_in_one_start(tmp_path):
    """Three refused options from three layers: three lines in the order checked (each
    layer's types: file, environment, flags; then each key's final value), exit 2, nothing
    created."""
    data_dir = tmp_path / "data"
    (tmp_path / "headwater.toml").write_text("[tcp]\nmax_frame_size = -5\n")
    lines = serve_fails(data_dir, "--config", str(tmp_path / "headwater.toml"), "--log-level", "verbose",
                        env={"HEADWATER_TCP_ENABLED": "maybe"}, code=2, count=3)
    assert lines[0].startswith("HEADWATER_TCP_ENABLED: ") and "'maybe'" in lines[0], lines
    assert lines[1].startswith("tcp.max_frame_size in ") and "-5" in lines[1], lines
    assert lines[2].startswith("--log-level: ") and "'verbose'" in lines[2], lines
    assert not data_dir.exists()


def test_a_bad_option_leaves_an_existing_data_dir_untouched(fresh_server):
    send(fresh_server, "s", [b"m"], create=True)
    fresh_server.stop()
    before = tree(fresh_server.data_dir)
    serve_fails(fresh_server.data_dir, "--log-level", "loud")
    serve_fails(fresh_server.data_dir, "--tcp-address", "127.0.0.1:70000")
    assert tree(fresh_server.data_dir) == before


def test_both_listeners_on_one_port_is_named_a_clash(tmp_path):
    port = free_port()
    line = serve_fails(tmp_path / "data", tcp=f"127.0.0.1:{port}", kafka=f"0.0.0.0:{port}")
    assert line.startswith("--kafka-address: ") and "--tcp-address" in line and "clashes" in line, line
    assert "already in use" not in line
    # a host name is compared after it resolves, still before anything is written
    line = serve_fails(tmp_path / "data", tcp=f"localhost:{port}", kafka=f"127.0.0.1:{port}")
    assert "--tcp-address" in line and "already in use" not in line, line
    assert not (tmp_path / "data").exists()


def test_a_data_dir_that_is_a_file_is_named(tmp_path):
    f = tmp_path / "data"
    f.write_bytes(b"not a directory")
    line = serve_fails(f, code=2)
    assert line == f"--data-dir: {f} exists and is not a directory", line
    assert f.read_bytes() == b"not a directory"
    line = serve_fails(f / "sub")
    assert line.startswith("--data-dir: ") and "is not a directory" in line and "Errno" not in line, line


# --------------------------------------------------------------------------- ports taken


@pytest.mark.parametrize("taken", ["tcp", "kafka"])
def test_ports_taken_create_no_root_user_and_a_later_start_uses_default_credentials(tmp_path, taken):
    data_dir = tmp_path / "data"
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        busy = f"127.0.0.1:{blocker.getsockname()[1]}"
        # no --with-default-root-credentials: a successful first start would print a random password
        line = serve_fails(data_dir, code=1, **{taken: busy})
    flag = "--tcp-address" if taken == "tcp" else "--kafka-address"
    assert line.startswith(f"{flag}: cannot listen on {busy}: "), line
    assert "in use" in line, line
    assert not data_dir.exists()  # the directory the failed start created is gone again
    server = ServerProcess(data_dir, free_port(), free_port()).start()  # with default credentials
    try:
        assert can_login(server, "iggy", "iggy")
        assert "root credentials ignored" not in server.log()
    finally:
        server.stop()


@pytest.mark.parametrize("taken", ["websocket", "quic"])
def test_a_taken_websocket_or_quic_port_is_one_line_naming_its_flag(tmp_path, taken):
    kind = socket.SOCK_DGRAM if taken == "quic" else socket.SOCK_STREAM  # QUIC listens on UDP
    with socket.socket(type=kind) as blocker:
        blocker.bind(("127.0.0.1", 0))
        if taken == "websocket":
            blocker.listen()
        busy = f"127.0.0.1:{blocker.getsockname()[1]}"
        line = serve_fails(tmp_path / "data", f"--{taken}-address", busy, code=1)  # the last flag wins
    assert line.startswith(f"--{taken}-address: cannot listen on {busy}: ") and "in use" in line, line
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("section", ["tcp", "websocket", "kafka"])
def test_a_tls_certificate_that_does_not_load_is_one_line_before_the_data_dir_is_touched(tmp_path, section):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    env = {f"HEADWATER_{section.upper()}_TLS_ENABLED": "true", f"HEADWATER_{section.upper()}_TLS_CERT_FILE": str(junk)}
    line = serve_fails(tmp_path / "data", env=env, code=2)
    assert line.startswith(f"HEADWATER_{section.upper()}_TLS_CERT_FILE: cannot load the certificate {junk}"), line
    assert not (tmp_path / "data").exists()


def test_ports_taken_on_an_existing_empty_dir_leave_only_the_lock_file(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        serve_fails(data_dir, tcp=f"127.0.0.1:{blocker.getsockname()[1]}")
    assert [p.name for p in data_dir.iterdir()] in ([], [".lock"])


# --------------------------------------------------------------------------- root credentials


def test_default_credentials_over_an_existing_root_are_ignored_with_a_warning(tmp_path):
    s = ServerProcess(tmp_path / "data", free_port(), free_port())
    s.start(env={"HEADWATER_ROOT_USERNAME": "admin", "HEADWATER_ROOT_PASSWORD": "s3cret-pw"})
    try:
        assert "root credentials ignored" not in s.log()
        s.stop()
        s.start()  # --with-default-root-credentials (the fixture's flags)
        warnings = [line for line in s.log().splitlines() if "root credentials ignored" in line]
        assert len(warnings) == 1, s.log()
        assert "--with-default-root-credentials" in warnings[0] and "first start" in warnings[0], warnings[0]
        assert not can_login(s, "iggy", "iggy")
        assert can_login(s, "admin", "s3cret-pw")
        s.stop()
        # requested credentials are validated on every start, not only the first (as Iggy's)
        line = serve_fails(s.data_dir, env={"HEADWATER_ROOT_PASSWORD": "no"}, code=2)
        assert line == "HEADWATER_ROOT_PASSWORD: password must be 3-100 characters", line
        s.start(env={"HEADWATER_ROOT_USERNAME": "admin", "HEADWATER_ROOT_PASSWORD": "other-pw"})
        warnings = [line for line in s.log().splitlines() if "root credentials ignored" in line]
        assert len(warnings) == 2 and "HEADWATER_ROOT_PASSWORD" in warnings[1], s.log()
        assert "other-pw" not in s.log()  # the ignored password is never logged
        s.stop()
        s.start(env={"HEADWATER_ROOT_USERNAME": "admin", "HEADWATER_ROOT_PASSWORD": "s3cret-pw"})
        assert len([line for line in s.log().splitlines() if "root credentials ignored" in line]) == 2  # they match
    finally:
        if s.proc is not None:
            s.stop()


def test_fresh_refuses_a_directory_that_is_not_a_data_directory(tmp_path):
    """A mistyped ``--data-dir ~ --fresh`` must not wipe a home directory."""
    home = tmp_path / "home"
    (home / "docs").mkdir(parents=True)
    (home / "docs" / "thesis.txt").write_bytes(b"precious")
    line = serve_fails(home, "--fresh", "--with-default-root-credentials")
    assert "does not look like a Headwater data directory" in line and "docs" in line
    assert (home / "docs" / "thesis.txt").read_bytes() == b"precious"


def test_listeners_on_port_0_advertise_the_port_they_bound(tmp_path):
    """``--kafka-address 127.0.0.1:0``: Metadata must name the bound port, or no Kafka
    client gets past its bootstrap."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    full_env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "headwater", "serve", "--data-dir", str(tmp_path / "data"),
             "--tcp-address", "127.0.0.1:0", "--kafka-address", "127.0.0.1:0", *OTHER_LISTENERS,
             "--with-default-root-credentials"],
            stdout=log, stderr=subprocess.STDOUT, env=full_env,
        )
    try:
        kafka_port = None
        for _ in range(400):  # bounded: 40 s
            text = log_path.read_text(errors="replace")
            if "headwater started" in text:
                listeners = text.split("listeners=", 1)[1].split()[0]
                kafka_port = int(dict(x.split("=", 1) for x in listeners.split(","))["kafka"].rsplit(":", 1)[1])
                break
            assert proc.poll() is None, text
            subprocess.run(["sleep", "0.1"])
        assert kafka_port, log_path.read_text()
        bootstrap = f"127.0.0.1:{kafka_port}"
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        delivered = []
        p.produce("port0", value=b"v", on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
        assert p.flush(30) == 0
        assert delivered == [(None, 0)]
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "port0", "auto.offset.reset": "earliest"})
        try:
            c.assign([TopicPartition("port0", 0, 0)])
            msg = None
            for _ in range(100):  # bounded
                msg = c.poll(0.3)
                if msg is not None and msg.error() is None:
                    break
            assert msg is not None and msg.error() is None and msg.value() == b"v"
        finally:
            c.close()
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


def test_http_address_taken_is_one_line(tmp_path):
    """The HTTP listener binds in step 3 like the others: a taken --http-address is one
    line naming the flag, and nothing is left in the data directory."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        data = tmp_path / "data"
        p = subprocess.run(
            [sys.executable, "-m", "headwater", "serve", "--data-dir", str(data),
             "--tcp-address", f"127.0.0.1:{free_port()}", "--kafka-address", f"127.0.0.1:{free_port()}",
             "--http-address", f"127.0.0.1:{port}",
             # port 0: QUIC and WebSocket never meet another server on Iggy's default ports
             "--quic-address", "127.0.0.1:0", "--websocket-address", "127.0.0.1:0"],
            capture_output=True, text=True, timeout=60,
            env={k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")},
        )
    assert p.returncode != 0
    assert p.stderr.strip().splitlines() == [
        f"headwater: cannot start: --http-address: cannot listen on 127.0.0.1:{port}: Address already in use"
    ], p.stderr
    assert not data.exists()


# --------------------------------------------------------------------------- interrupted


def _sigint_default() -> None:
    """In the child before exec: SIGINT back to SIG_DFL (see :func:`_sigint_once`)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _sigint_once(cmd: list[str], env: dict, ready, sig: int = signal.SIGINT) -> subprocess.Popen:
    """Run ``cmd``, poll ``ready(pid)`` (bounded) until it holds or the process exits, send
    ``sig`` (SIGINT), and wait; returns the finished process with ``out`` / ``err`` attributes.

    The child starts with SIGINT at its default disposition, as a shell's foreground job (the user
    who presses Ctrl-C) has it, whatever this process inherited: a suite run as a background job
    of a shell without job control has SIGINT ignored, and an ignored SIGINT is inherited through
    exec (Python then installs no handler for it, rightly: that is how shells keep Ctrl-C away
    from background jobs)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         preexec_fn=_sigint_default)
    try:
        for _ in range(200_000):
            if p.poll() is not None or ready(p.pid):
                break
            time.sleep(0.0002)
        p.send_signal(sig)
        p.out, p.err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_while_the_data_directory_opens_is_one_line_and_the_next_start_works(tmp_path, sig, status):
    # the signal as soon as the lock file names the server: the lock is taken, the listeners
    # are being bound or the data directory opened, the server has not taken the signal over.
    # SIGTERM (a supervisor's stop) gets what SIGINT gets, with its own status (128 + 15)
    data_dir = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
    cmd = [sys.executable, "-m", "headwater", "serve", "--data-dir", str(data_dir),
           "--tcp-address", "127.0.0.1:0", "--kafka-address", "127.0.0.1:0", *OTHER_LISTENERS,
           "--with-default-root-credentials"]
    def locked(_pid: int) -> bool:
        try:
            return bool((data_dir / ".lock").read_text().strip())
        except OSError:
            return False

    p = _sigint_once(cmd, env, locked, sig)
    out, err = p.out, p.err
    lines = err.strip().splitlines()
    name = signal.Signals(sig).name
    if p.returncode == 0 and "headwater started" in err:
        pytest.skip(f"the start finished before {name} arrived (then it stops the server cleanly)")
    assert p.returncode == status, err
    assert "Traceback" not in out + err and "Aborted" not in err, err
    assert lines[-1] == f"headwater: start-up interrupted ({name}); nothing was served", err
    server = ServerProcess(data_dir, free_port(), free_port()).start()
    try:
        assert can_login(server, "iggy", "iggy")
    finally:
        server.stop()


def test_sigint_while_the_modules_import_is_one_line_exit_130(tmp_path):
    # SIGINT once the process has mapped its first compiled module (ours or a dependency's):
    # the command's modules are being imported, nothing handles SIGINT yet but the entry
    # point (headwater.__main__.run)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
    cmd = [sys.executable, "-m", "headwater", "serve", "--data-dir", str(tmp_path / "data"),
           "--tcp-address", "127.0.0.1:0", "--kafka-address", "127.0.0.1:0", *OTHER_LISTENERS]
    def importing(pid: int) -> bool:
        try:
            maps = open(f"/proc/{pid}/maps").read()
        except OSError:
            return True  # gone: nothing to wait for
        # an extension of ours or of a dependency (xxhash, uvloop): a pure-Python build has only the latter
        return any(line.endswith(".so") and ("/headwater/" in line or "site-packages" in line)
                   for line in maps.splitlines())

    p = _sigint_once(cmd, env, importing)
    out, err = p.out, p.err
    if p.returncode == 0 and "headwater started" in err:
        pytest.skip("the start finished before SIGINT arrived (then SIGINT stops it cleanly)")
    assert p.returncode == 130, err
    assert "Traceback" not in out + err and "Aborted" not in err, err
    assert err.strip().splitlines()[-1] == "headwater: start-up interrupted (SIGINT); nothing was served", err


def test_a_key_with_a_line_break_or_a_control_character_is_still_one_line_each(tmp_path):
    """QA session 13: TOML's quoted keys may hold any character; a refused one must not break
    its refusal over two lines (a newline) nor send raw escape sequences to the terminal
    (ESC): one line per refusal, the characters escaped."""
    data_dir = tmp_path / "data"
    (tmp_path / "headwater.toml").write_text('[tcp]\n"a\\nb" = 1\n"x\\u001b[31my" = 2\n"c\\rd" = 3\n')
    lines = serve_fails(data_dir, "--config", str(tmp_path / "headwater.toml"), code=2, count=3)
    for line in lines:
        assert "\x1b" not in line and "\r" not in line, lines
    assert "a\\nb" in lines[0] and "x\\x1b[31my" in lines[1] and "c\\rd" in lines[2], lines
    assert not data_dir.exists()


def test_an_unreadable_config_file_is_one_refusal_among_the_others(tmp_path):
    """QA session 13: a config file that is not UTF-8 (or TOML) is one refusal; the
    environment's and the flags' refusals are reported beside it, not hidden behind it."""
    data_dir = tmp_path / "data"
    (tmp_path / "headwater.toml").write_bytes(b'[tcp]\naddress = "\xff\xfe"\n')
    lines = serve_fails(data_dir, "--config", str(tmp_path / "headwater.toml"), "--log-level", "loud",
                        env={"HEADWATER_TCP_ENABLED": "maybe"}, code=2, count=3)
    assert lines[0].startswith("--config: ") and "utf-8" in lines[0], lines
    assert lines[1].startswith("HEADWATER_TCP_ENABLED: "), lines
    assert lines[2].startswith("--log-level: "), lines
    assert not data_dir.exists()
