"""QA session 14: what session 14 loads on first use (Kafka handler modules, the web console),
attacked as a hostile client and an operator would, against real servers.

- Many connections send the first request of every Kafka API at once, after malformed first
  requests of the same APIs (a version out of range, a truncated body): each good request is
  answered with its correlation id, each bad one refused as Kafka refuses it, nothing fails.
- On a listener that requires SASL, an unauthenticated first request of an API closes the
  connection; the same API's first request after SaslHandshake/SaslAuthenticate is answered.
- A SIGTERM right after the first requests of every API were sent: each is answered or its
  connection closed, never a failed handler, and the server stops cleanly.
- A console that cannot be loaded (its template engine missing from the install: the server
  now starts without importing it) answers 503 with one line saying so, every time, and the
  server logs the reason once, not a traceback per request; the rest of the HTTP listener and
  the Kafka listener go on serving.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from headwater.codec.kafka import messages
from hw_server import ServerProcess, free_port
from kafka_wire import Closed, KafkaWire
from test_kafka_sasl import wire_request
from test_server_start import ADVERTISED, _first_request

CONNECTIONS_PER_API = 5


def _server(tmp_path, env: dict | None = None) -> ServerProcess:
    return ServerProcess(tmp_path / "data", free_port(), free_port()).start(env=env)


def _answered(server: ServerProcess, api_key: int, version: int) -> str | None:
    """None if a first-style request of (api_key, version) on a new connection is answered as the
    server answers any request (its correlation id, the API's response type), else what went wrong."""
    wire = KafkaWire(server.kafka_address)
    try:
        frame, sent = wire.frame(api_key, version, _first_request(api_key, version))
        wire.send_raw(frame)
        correlation, response = wire.read_response(api_key, version)
        if correlation != sent or type(response) is not messages.response_class(api_key, version):
            return f"API {api_key} v{version}: correlation {correlation} (sent {sent}), {type(response).__name__}"
        return None
    except (Closed, OSError) as e:
        return f"API {api_key} v{version}: {e!r}"
    finally:
        wire.close()


def _raw_request(server: ServerProcess, api_key: int, version: int, body: bytes, declared_extra: int = 0) -> bytes:
    """Send one frame (header v1, client id "q") with ``body``, its size claiming ``declared_extra``
    bytes more than are sent (a truncated request: the write side is shut), and return what
    the server sends back before it closes (ApiVersions: its one answer; the connection stays,
    so that the client can ask again at a version the server knows)."""
    payload = struct.pack(">hhih", api_key, version, 7, 1) + b"q" + body
    wire = KafkaWire(server.kafka_address)
    try:
        wire.send_raw(struct.pack(">i", len(payload) + declared_extra) + payload)
        if declared_extra:
            wire.sock.shutdown(1)
        if api_key == 18 and not declared_extra:
            return wire.read_frame()
        data = b""
        while chunk := wire.sock.recv(65536):
            data += chunk
        return data
    finally:
        wire.close()


def test_many_first_requests_of_every_api_at_once_after_malformed_ones(tmp_path):
    server = _server(tmp_path)
    try:
        for api_key, low, high in ADVERTISED:
            # refused as Kafka refuses them: the connection closed, no answer (ApiVersions: v0 error 35)
            out_of_range = _raw_request(server, api_key, high + 1, b"")
            if api_key == 18:
                correlation, error = struct.unpack(">ih", out_of_range[:6])
                assert (correlation, error) == (7, 35), out_of_range
            else:
                assert out_of_range == b"", (api_key, out_of_range)
            if low > 0:
                assert _raw_request(server, api_key, low - 1, b"") == b"", api_key
            assert _raw_request(server, api_key, high, b"\xff\x00", declared_extra=64) == b"", api_key
        assert _raw_request(server, 99, 0, b"") == b""  # an API key nobody serves

        jobs = [(api_key, version) for api_key, low, high in ADVERTISED for version in {low, high}
                if not (api_key == 0 and version < 3)] * CONNECTIONS_PER_API  # Produce v0-2: no kio schema
        barrier = threading.Barrier(len(jobs))

        def first(job):
            barrier.wait(timeout=60)
            return _answered(server, *job)

        with ThreadPoolExecutor(len(jobs)) as pool:
            failures = [f for f in pool.map(first, jobs) if f is not None]
        assert failures == []
        log = server.log()
        assert "handler failed" not in log and "Traceback" not in log
    finally:
        assert server.stop() == 0


def test_sasl_required_first_requests(tmp_path):
    server = _server(tmp_path, env={"HEADWATER_KAFKA_AUTHENTICATION_REQUIRED": "true"})
    try:
        # before authentication: the first request of each API (but ApiVersions and SASL) closes the connection
        for api_key in (3, 0, 1, 19, 32, 10):
            wire = KafkaWire(server.kafka_address)
            high = {key: high for key, _, high in ADVERTISED}[api_key]
            wire.send_raw(wire.frame(api_key, high, _first_request(api_key, high))[0])
            assert wire.closed_by_server(), api_key
            wire.close()
        wire = KafkaWire(server.kafka_address)
        try:
            assert int(wire.call(17, 1, wire_request(17, 1, mechanism="PLAIN")).error_code) == 0
            r = wire.call(36, 2, wire_request(36, 2, auth_bytes=b"\0iggy\0iggy"))
            assert int(r.error_code) == 0, r.error_message
            meta = wire.call(3, 12, wire_request(3, 12, topics=None, allow_auto_topic_creation=False,
                                                 include_topic_authorized_operations=False))
            assert meta.brokers
        finally:
            wire.close()
        for api_key, _, high in ADVERTISED:  # after another connection authenticated: still refused
            if api_key in (17, 18, 36):
                continue
            wire = KafkaWire(server.kafka_address)
            wire.send_raw(wire.frame(api_key, high, _first_request(api_key, high))[0])
            assert wire.closed_by_server(), api_key
            wire.close()
        assert "handler failed" not in server.log()
    finally:
        assert server.stop() == 0


def test_sigterm_right_after_the_first_requests_of_every_api(tmp_path):
    server = _server(tmp_path)
    wires = []
    try:
        for api_key, _, high in ADVERTISED:
            wire = KafkaWire(server.kafka_address)
            frame, sent = wire.frame(api_key, high, _first_request(api_key, high))
            wires.append((api_key, high, sent, wire, frame))
        for _, _, _, wire, frame in wires:
            wire.send_raw(frame)
        server.proc.send_signal(signal.SIGTERM)
        for api_key, high, sent, wire, _ in wires:
            try:
                correlation, response = wire.read_response(api_key, high)
            except (Closed, ConnectionResetError):
                continue  # not read before the server closed its connections (unread: a reset): never run
            assert correlation == sent and type(response) is messages.response_class(api_key, high), api_key
    finally:
        for *_, wire, _ in wires:
            wire.close()
        assert server.stop() == 0
    log = server.log()
    assert "handler failed" not in log and "Traceback" not in log


def _get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.headers.get_content_type(), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get_content_type(), e.read()


def test_a_console_that_cannot_be_loaded_says_so_and_the_server_serves_on(tmp_path):
    # an install whose jinja2 cannot be imported: a package of that name earlier on the path that fails
    shadow = tmp_path / "shadow" / "jinja2"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('jinja2 is broken in this install (QA)')\n")
    path = os.pathsep.join(p for p in (str(shadow.parent), os.environ.get("PYTHONPATH")) if p)
    server = _server(tmp_path, env={"PYTHONPATH": path})
    try:
        base = f"http://127.0.0.1:{server.http_port}"
        paths = ["/console/", "/console/login", "/console/static/console.css", "/console/login"]
        with ThreadPoolExecutor(len(paths)) as pool:  # first requests at once, then later ones
            answers = list(pool.map(_get, [base + p for p in paths])) + [_get(base + p) for p in paths]
        for status, content_type, body in answers:
            assert status == 503 and content_type == "text/plain", (status, body)
            assert b"web console could not be loaded" in body and b"jinja2 is broken" not in body
        assert _get(base + "/metrics")[0] == 200
        assert _answered(server, 18, 3) is None
    finally:
        assert server.stop() == 0
    log = server.log()
    assert log.count("web console could not be loaded") == 1, log[-3000:]
    assert "jinja2 is broken in this install (QA)" in log  # the reason, for the operator
    assert "Exception in ASGI application" not in log


def test_sigterm_stops_a_client_command_whose_argument_is_serve_as_any_other(tmp_path):
    # `headwater` takes SIGTERM over while "serve" is an argument (for serve's start); a client
    # command following a stream named serve must still be stopped by it as with any other name
    server = _server(tmp_path)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")},
           "HEADWATER_SERVER": server.iggy_address, "HEADWATER_USERNAME": "iggy", "HEADWATER_PASSWORD": "iggy"}
    try:
        for name in ("serve", "other"):
            for argv in (["stream", "create", name], ["topic", "create", name, name, "--partitions", "1"],
                         ["message", "send", name, name, "hello"]):
                done = subprocess.run([sys.executable, "-m", "headwater", *argv], env=env, capture_output=True,
                                      text=True, timeout=120)
                assert done.returncode == 0, (argv, done.stderr)
            follow = subprocess.Popen([sys.executable, "-m", "headwater", "message", "poll", name, name, "--follow"],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                assert "hello" in follow.stdout.readline()  # following now
                follow.send_signal(signal.SIGTERM)
                assert follow.wait(60) == -signal.SIGTERM, (name, follow.stderr.read())
            finally:
                if follow.poll() is None:
                    follow.kill()
                    follow.wait()
    finally:
        assert server.stop() == 0
