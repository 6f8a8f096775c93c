"""Iggy's HTTP REST API against a real ``headwater serve``: raw HTTP and the official SDK
(apache-iggy 0.9.0, ``iggy+http://``)."""

from __future__ import annotations

import http.client
import json
import time

import pytest


def _request(port: int, method: str, path: str, body=None, token: str | None = None, headers=None):
    """One request on a fresh connection -> (status, headers, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        h = dict(headers or {})
        if token:
            h["Authorization"] = f"Bearer {token}"
        if body is not None and not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def wait_http(port: int) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            _request(port, "GET", "/ping")
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.fixture(scope="module")
def http_port(server) -> int:
    wait_http(server.http_port)
    return server.http_port


def test_ping_answers_pong(http_port):
    status, headers, body = _request(http_port, "GET", "/ping")
    assert (status, body) == (200, b"pong")
    assert headers["content-type"].startswith("text/plain")


def test_serve_logs_the_http_listener(server, http_port):
    assert f"listener=iggy-http address=127.0.0.1:{http_port}" in server.log()
