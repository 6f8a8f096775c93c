"""The operator's routes on the HTTP listener: Prometheus ``/metrics`` and the ``/console`` app.

:func:`operator_routes` returns Starlette routes for the HTTP listener's ASGI app to include:

- ``[http] metrics_endpoint`` (default ``/metrics``, when ``metrics_enabled``): GET answers
  :func:`headwater.metrics.exposition` (Prometheus text format, prometheus_client's
  ``CONTENT_TYPE_LATEST``), without login, as Iggy serves it. The endpoint is ``async`` so the
  scrape runs on the event loop's thread, where the broker state it reads lives.
- ``/console`` (when ``console_enabled``): :func:`headwater.frontends.console.build_console`,
  imported and built on the console's first request (:class:`_LazyConsole`: jinja2 and the
  console's modules were ~70 ms of every server start, most of which never show a page).

``coordinator`` is the Kafka front-end's group coordinator (None without a Kafka listener), for
the console's group members.
"""

from __future__ import annotations

import asyncio
import logging
from importlib import import_module

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route

from .. import metrics
from ..config import HttpConfig
from ..core.broker import Broker
from ..core.groups.classic import GroupCoordinator

CONSOLE_PATH = "/console"
CONSOLE_UNAVAILABLE = "headwater: the web console could not be loaded (the server log says why); the rest of the server serves on.\n"
"""The body of every console request's 503 answer when the console's modules failed to import."""

log = logging.getLogger("headwater.operator")


async def metrics_endpoint(request: Request) -> Response:
    body, content_type = metrics.exposition()
    return Response(body, headers={"Content-Type": content_type})


class _LazyConsole:
    """The console's ASGI app, made on its first request: its modules are imported in a worker
    thread (the event loop goes on serving meanwhile; requests that arrive before it is ready
    wait for the same import), then ``build_console`` runs once on the loop. Every request,
    the first included, is then the console's own.

    If the console cannot be made (an install whose jinja2 or templates are broken: before the
    console was loaded on first use, such a server did not start), the reason is logged once
    and every console request is answered 503 with :data:`CONSOLE_UNAVAILABLE`, not a bare 500
    with a traceback in the log per request (which any client could repeat)."""

    def __init__(self, broker: Broker, coordinator: GroupCoordinator | None, metrics_path: str):
        self._args = (broker, coordinator)
        self._metrics_path = metrics_path
        self._app = None
        self._making: asyncio.Future | None = None

    async def __call__(self, scope, receive, send) -> None:
        app = self._app
        if app is None:
            if self._making is None:
                self._making = asyncio.ensure_future(self._make())
            app = await asyncio.shield(self._making)
        await app(scope, receive, send)

    async def _make(self):
        try:
            console = await asyncio.to_thread(import_module, f"{__package__}.console")
            self._app = console.build_console(*self._args, metrics_path=self._metrics_path)
        except Exception:
            log.exception("web console could not be loaded: its requests are answered 503")
            self._app = _console_unavailable
        return self._app


async def _console_unavailable(scope, receive, send) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1011})
        return
    await Response(CONSOLE_UNAVAILABLE, status_code=503, media_type="text/plain")(scope, receive, send)


def operator_routes(broker: Broker, http: HttpConfig, coordinator: GroupCoordinator | None = None) -> list[BaseRoute]:
    routes: list[BaseRoute] = []
    if http.metrics_enabled:
        routes.append(Route(http.metrics_endpoint, metrics_endpoint, methods=["GET"]))
    if http.console_enabled:
        routes.append(Mount(CONSOLE_PATH, app=_LazyConsole(broker, coordinator, http.metrics_endpoint)))
    return routes
