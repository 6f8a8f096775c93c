"""The HTTP app's route table, its OpenAPI document, the route hook, and JWT tokens (real
broker and files in ``tmp_path``)."""

from __future__ import annotations

import dataclasses
import time

import pytest
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from headwater.config import HttpConfig
from headwater.core import errors
from headwater.core.broker import Broker
from headwater.frontends.http import app as http_app
from headwater.frontends.http.auth import Tokens
from headwater.storage.api import open_engine


@pytest.fixture
def broker(tmp_path):
    b = Broker(open_engine(str(tmp_path / "data")))
    yield b
    b.close()


def served(app) -> set[tuple[str, str]]:
    return {(m, r.path) for r in app.routes if isinstance(r, Route) and r.include_in_schema
            for m in r.methods if m != "HEAD"}


def documented(app) -> set[tuple[str, str]]:
    doc = http_app.openapi_document(app)
    return {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}


def test_openapi_describes_exactly_the_served_routes(broker, tmp_path):
    async def metrics(request):
        return PlainTextResponse("")

    app = http_app.build_app(broker, HttpConfig(), data_dir=str(tmp_path),
                             extra_routes=[Route("/metrics", metrics, methods=["GET"])])
    assert served(app) == documented(app)
    assert ("GET", "/metrics") in documented(app)
    assert ("POST", "/streams/{stream_id}/topics/{topic_id}/messages") in documented(app)
    assert len(served(app)) >= 40


def test_registered_route_factories_are_served(broker, tmp_path):
    async def console(request):
        return PlainTextResponse("console")

    def factory(b, config):
        assert b is broker and isinstance(config, HttpConfig)
        return [Route("/console", console, methods=["GET"])]

    http_app.register_routes(factory)
    try:
        app = http_app.build_app(broker, HttpConfig(), data_dir=str(tmp_path))
        assert ("GET", "/console") in served(app) and ("GET", "/console") in documented(app)
    finally:
        http_app.ROUTE_FACTORIES.remove(factory)


def test_tokens_survive_a_restart_and_revocations_persist(tmp_path):
    now = [float(int(time.time()))]
    config = HttpConfig(jwt_access_token_expiry_s=60, jwt_refresh_token_expiry_s=120, jwt_clock_skew_s=0)
    first = Tokens(config, str(tmp_path), clock=lambda: now[0])
    identity = first.issue(7)
    token = identity["access_token"]["token"]
    assert identity["access_token"]["expiry"] == now[0] + 60
    again = Tokens(config, str(tmp_path), clock=lambda: now[0])  # a restart: same secret from the data dir
    claims = again.verify(token)
    assert claims["user_id"] == 7
    again.revoke(claims)
    with pytest.raises(errors.Unauthenticated, match="revoked"):
        Tokens(config, str(tmp_path), clock=lambda: now[0]).verify(token)


def test_expired_token_refreshable_only_inside_its_window(tmp_path):
    now = [float(int(time.time()))]
    config = HttpConfig(jwt_access_token_expiry_s=60, jwt_refresh_token_expiry_s=120, jwt_clock_skew_s=0)
    tokens = Tokens(config, str(tmp_path), clock=lambda: now[0])
    token = tokens.issue(1)["access_token"]["token"]
    now[0] += 61
    # PyJWT checks exp against the wall clock too, so the clock here only moves our own checks
    with pytest.raises(errors.Unauthenticated):
        tokens.verify(token)
    assert tokens.refreshable(token)["user_id"] == 1
    now[0] += 120
    with pytest.raises(errors.Unauthenticated, match="too old"):
        tokens.refreshable(token)


def test_configured_secret_and_algorithm(tmp_path):
    config = HttpConfig(jwt_encoding_secret="s" * 64, jwt_algorithm="HS512")
    token = Tokens(config, str(tmp_path)).issue(3)["access_token"]["token"]
    assert Tokens(config, str(tmp_path / "elsewhere")).verify(token)["user_id"] == 3
    other = dataclasses.replace(config, jwt_encoding_secret="t" * 64)
    with pytest.raises(errors.Unauthenticated):
        Tokens(other, str(tmp_path)).verify(token)
