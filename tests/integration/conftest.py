"""Fixtures: a real ``headwater serve`` process on loopback, started per test module (or per test)."""

from __future__ import annotations

import importlib.util

import pytest

from hw_server import ServerProcess, free_port

__all__ = ["ServerProcess", "free_port"]


SERVER_LOG_LINES = 80
"""How much of each server's log a failed test's report carries (the tail)."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report ends with the tail of the log of every server it used (its
    ServerProcess fixtures), so a failure seen once in CI, whose tmp directory is gone
    afterwards, still shows what the server did (its requests, refusals, group rebalances)."""
    report = yield
    if report.failed and call.when in ("setup", "call"):
        for name, value in getattr(item, "funcargs", {}).items():
            if isinstance(value, ServerProcess):
                tail = "\n".join(value.log().splitlines()[-SERVER_LOG_LINES:])
                report.sections.append((f"server log of fixture {name!r} ({value.log_path}), last lines", tail))
    return report


def _server(tmp_path_factory) -> ServerProcess:
    base = tmp_path_factory.mktemp("headwater")
    return ServerProcess(base / "data", free_port(), free_port())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server per test module."""
    s = _server(tmp_path_factory).start()
    yield s
    if s.proc is not None:
        rc = s.stop()
        assert rc == 0, f"server exited with {rc} on SIGTERM:\n{s.log()}"


@pytest.fixture
def fresh_server(tmp_path_factory):
    """A server of the test's own (for restart and crash tests)."""
    s = _server(tmp_path_factory).start()
    yield s
    if s.proc is not None:
        s.stop()


@pytest.fixture(scope="module")
def via(request, tmp_path_factory):
    """One server per test module and transport, and the SDK's way to it (``iggy_transports.Via``).
    Tests choose transports with ``@pytest.mark.parametrize("via", [...], indirect=True)``;
    ``http`` is skipped while the server has no HTTP listener."""
    from iggy_transports import Via, has_http_listener, start_server

    transport = getattr(request, "param", "tcp")
    if transport == "http" and importlib.util.find_spec("headwater.frontends.http") is None:
        pytest.skip("this server has no HTTP front-end yet")
    s, certs = start_server(tmp_path_factory.mktemp(f"headwater-{transport}"), tls=transport == "tls-tcp")
    try:
        if transport == "http" and not has_http_listener(s):
            pytest.skip("this server has no HTTP listener yet")
        yield Via(transport, s, certs)
    finally:
        if s.proc is not None:
            rc = s.stop()
            assert rc == 0, f"server exited with {rc} on SIGTERM:\n{s.log()}"
