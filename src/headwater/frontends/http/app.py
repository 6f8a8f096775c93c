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

from typing import Callable, Iterable, Sequence

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from ...config import HttpConfig, split_list
from ...core.broker import Broker

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


def cors_middleware(config: HttpConfig) -> list[Middleware]:
    """Iggy's ``[http.cors]`` as Starlette's CORSMiddleware (none when ``cors_enabled`` is off)."""
    if not config.cors_enabled:
        return []
    origins = split_list(config.cors_allowed_origins)
    kwargs = {}
    if config.cors_allow_private_network:
        kwargs["allow_private_network"] = True
    return [
        Middleware(
            CORSMiddleware,
            allow_origins=["*"] if origins[:1] == ["*"] else origins,
            allow_methods=[m.upper() for m in split_list(config.cors_allowed_methods)],
            allow_headers=split_list(config.cors_allowed_headers),
            expose_headers=split_list(config.cors_exposed_headers),
            allow_credentials=config.cors_allow_credentials,
            **kwargs,
        )
    ]


def build_app(
    broker: Broker,
    config: HttpConfig,
    *,
    data_dir: str = ".",
    extra_routes: Sequence[BaseRoute] = (),
) -> Starlette:
    """The REST API over ``broker`` with ``config`` ([http]); ``data_dir`` holds the JWT
    secret when none is configured. ``extra_routes`` are served beside Iggy's routes."""
    routes: list[BaseRoute] = [Route("/ping", ping, methods=["GET"])]
    for factory in ROUTE_FACTORIES:
        routes.extend(factory(broker, config))
    routes.extend(extra_routes)
    app = Starlette(routes=routes, middleware=cors_middleware(config))
    app.state.broker = broker
    app.state.config = config
    return app
