"""The HTTP app: ``build_app(broker, config, ...)`` -> a Starlette ASGI app.

Adding routes (``/metrics``, ``/console``...): either pass them to :func:`build_app`
as ``extra_routes`` (Starlette ``Route``/``Mount`` objects), or register a factory
that builds them from the broker and the ``[http]`` config::

    from headwater.frontends.http.app import register_routes

    @register_routes
    def metrics_routes(broker, config):
        return [Route("/metrics", endpoint, methods=["GET"])]

Factories registered before the server starts are called once by every
:func:`build_app` (the module that registers must be imported by then, e.g. by
``headwater.app``). Routes added either way are served with the same CORS and
body-size limits and appear in ``/openapi.json`` (``include_in_schema`` honoured).
"""

from __future__ import annotations

import asyncio
from typing import Callable, Iterable, Sequence

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from ...codec.errors import CodecError
from ...codec.iggy import json as ij
from ...codec.iggy.codes import IggyErrorCode
from ...codec.iggy.commands import tokens as wtok
from ...codec.iggy.commands import users as wu
from ...config import HttpConfig, TcpConfig, split_list
from ...core import errors as core_errors
from ...core.broker import Broker
from .auth import Tokens
from .errors import error_response, response_for
from .routes import APIS, HttpFrontend, api_routes, authenticated_context, bearer, read_json

RouteFactory = Callable[[Broker, HttpConfig], Iterable[BaseRoute]]
ROUTE_FACTORIES: list[RouteFactory] = []


def register_routes(factory: RouteFactory) -> RouteFactory:
    """Add ``factory(broker, config) -> routes`` to every app built from now on (a decorator)."""
    if factory not in ROUTE_FACTORIES:
        ROUTE_FACTORIES.append(factory)
    return factory


async def ping(request: Request) -> Response:
    """``GET /ping``: ``pong`` (text/plain, 200), no authentication (Iggy's health probe)."""
    return PlainTextResponse("pong")


def _front(request: Request) -> HttpFrontend:
    return request.app.state.frontend


def _answers_errors(fn):
    """Render a core or codec error the handler raises as Iggy's error reply."""

    async def wrapped(request: Request) -> Response:
        try:
            return await fn(request, _front(request))
        except (core_errors.BrokerError, CodecError) as e:
            return response_for(e)

    wrapped.__name__, wrapped.__doc__ = fn.__name__, fn.__doc__
    return wrapped


@_answers_errors
async def login_user(request: Request, front: HttpFrontend) -> Response:
    """``POST /users/login`` ``{"username", "password", "version"?, "context"?}`` -> IdentityInfo."""
    req = ij.load(wu.LoginUser, body=await read_json(request))
    loop = asyncio.get_running_loop()
    async with front.hashing:  # Argon2id off the loop, bounded as over TCP
        user = await loop.run_in_executor(None, front.broker.users.authenticate, req.username, req.password)
    return JSONResponse(front.tokens.issue(user.id))


@_answers_errors
async def login_with_personal_access_token(request: Request, front: HttpFrontend) -> Response:
    """``POST /personal-access-tokens/login`` ``{"token"}`` -> IdentityInfo."""
    req = ij.load(wtok.LoginWithPersonalAccessToken, body=await read_json(request))
    try:
        user = front.broker.users.authenticate_token(req.token, front.broker.clock())
    except (core_errors.InvalidToken, core_errors.TokenExpired) as e:
        return error_response(IggyErrorCode.INVALID_PERSONAL_ACCESS_TOKEN, str(e))
    return JSONResponse(front.tokens.issue(user.id))


@_answers_errors
async def refresh_token(request: Request, front: HttpFrontend) -> Response:
    """``POST /users/refresh-token`` ``{"token": "<access token>"}`` -> a new IdentityInfo;
    the presented token is revoked."""
    body = await read_json(request)
    token = body.get("token") if isinstance(body, dict) else None
    if not isinstance(token, str):
        raise ij.InvalidJson("missing field 'token'", "token")
    claims = front.tokens.refreshable(token)
    user = front.broker.users.find(claims["user_id"])
    if user is None:
        raise core_errors.Unauthenticated("the token's user no longer exists")
    front.tokens.revoke(claims)
    return JSONResponse(front.tokens.issue(user.id))


@_answers_errors
async def logout_user(request: Request, front: HttpFrontend) -> Response:
    """``DELETE /users/logout``: revoke the caller's access token; 204."""
    authenticated_context(request)
    front.tokens.revoke(front.tokens.verify(bearer(request)))
    return Response(status_code=204)


AUTH_ROUTES = (
    ("POST", "/users/login", login_user, "Log in with username and password (public)"),
    ("POST", "/users/refresh-token", refresh_token, "Exchange an access token for a new one (public)"),
    ("DELETE", "/users/logout", logout_user, "Revoke the caller's access token"),
    ("POST", "/personal-access-tokens/login", login_with_personal_access_token, "Log in with a personal access token (public)"),
    ("GET", "/ping", ping, "Health probe (public): pong"),
)


def cors_middleware(config: HttpConfig) -> list[Middleware]:
    """Iggy's ``[http.cors]`` as Starlette's CORSMiddleware (none when ``cors_enabled`` is off)."""
    if not config.cors_enabled:
        return []
    origins = split_list(config.cors_allowed_origins)
    return [
        Middleware(
            CORSMiddleware,
            allow_origins=["*"] if origins[:1] == ["*"] else origins,
            allow_methods=[m.upper() for m in split_list(config.cors_allowed_methods)],
            allow_headers=split_list(config.cors_allowed_headers),
            expose_headers=split_list(config.cors_exposed_headers),
            allow_credentials=config.cors_allow_credentials,
            allow_private_network=config.cors_allow_private_network,
        )
    ]


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` is answered 413 with Iggy's error JSON
    (code 4 InvalidFormat... see docs/gaps.md) and ``Connection: close``, before it is read whole
    (a declared Content-Length is checked first; a chunked body is counted as it arrives)."""

    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await self._refuse(scope, receive, send)
        seen = 0
        too_big = False

        async def counted():
            nonlocal seen, too_big
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    too_big = True
                    raise _TooLarge()
            return message

        started = False

        async def tracked_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, tracked_send)
        except _TooLarge:
            if not started:
                await self._refuse(scope, receive, send)
        except ClientDisconnect:
            pass  # the client went (or was closed for a request timeout): nobody to answer

    async def _refuse(self, scope, receive, send):
        response = error_response(
            IggyErrorCode.INVALID_FORMAT,
            f"request body larger than max_request_size ({self.max_bytes} bytes)",
            status=413,
            headers={"connection": "close"},
        )
        await response(scope, receive, send)


class _TooLarge(Exception):
    pass


def openapi_document(app: Starlette) -> dict:
    """OpenAPI 3.1 of every route the app serves (its path, methods and summary)."""
    summaries = {(a.method, a.path): a.summary for a in APIS}
    summaries.update({(m, p): s for m, p, _, s in AUTH_ROUTES})
    paths: dict[str, dict] = {}
    for route in app.routes:
        if not isinstance(route, Route) or not route.include_in_schema:
            continue
        for method in sorted(route.methods or ()):
            if method == "HEAD":
                continue
            op = {
                "summary": summaries.get((method, route.path), (route.endpoint.__doc__ or "").strip().split("\n")[0]),
                "operationId": f"{method.lower()}_{route.path.strip('/').replace('/', '_').replace('{', '').replace('}', '')}",
                "responses": {"default": {"description": "Iggy's JSON reply, or {id, code, reason, field} on error"}},
            }
            params = [
                {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                for name in route.param_convertors
            ]
            if params:
                op["parameters"] = params
            paths.setdefault(route.path, {})[method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "Headwater: Iggy HTTP REST API", "version": "0.11.0"},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}}},
        "security": [{"bearer": []}],
        "paths": paths,
    }


async def openapi(request: Request) -> Response:
    """The OpenAPI document of this app."""
    return JSONResponse(openapi_document(request.app))


def build_app(
    broker: Broker,
    config: HttpConfig,
    *,
    data_dir: str = ".",
    tcp: TcpConfig | None = None,
    extra_routes: Sequence[BaseRoute] = (),
    node_ports: dict[str, int] | None = None,
) -> Starlette:
    """The REST API over ``broker`` with ``config`` ([http]); ``data_dir`` holds the JWT
    secret when none is configured and the revoked tokens; ``tcp`` ([tcp]) gives the
    handlers their limits (poll reply size) and the cluster metadata its TCP address.
    ``extra_routes`` are served beside Iggy's routes; ``node_ports`` (transport -> bound
    port) feeds the cluster metadata."""
    routes: list[BaseRoute] = [Route(p, fn, methods=[m]) for m, p, fn, _ in AUTH_ROUTES]
    routes.extend(api_routes())
    for factory in ROUTE_FACTORIES:
        routes.extend(factory(broker, config))
    routes.extend(extra_routes)
    routes.append(Route("/openapi.json", openapi, methods=["GET"], include_in_schema=False))
    middleware = [*cors_middleware(config), Middleware(BodyLimit, max_bytes=config.max_request_size)]
    app = Starlette(routes=routes, middleware=middleware)
    app.state.broker = broker
    app.state.config = config
    app.state.frontend = HttpFrontend(broker, tcp or TcpConfig(), data_dir, Tokens(config, data_dir),
                                      node_ports=node_ports)
    return app
