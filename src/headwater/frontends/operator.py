"""The operator's routes on the HTTP listener: Prometheus ``/metrics`` and the ``/console`` app.

:func:`operator_routes` returns Starlette routes for the HTTP listener's ASGI app to include:

- ``[http] metrics_endpoint`` (default ``/metrics``, when ``metrics_enabled``): GET answers
  :func:`headwater.metrics.exposition` (Prometheus text format, prometheus_client's
  ``CONTENT_TYPE_LATEST``), without login, as Iggy serves it. The endpoint is ``async`` so the
  scrape runs on the event loop's thread, where the broker state it reads lives.
- ``/console`` (when ``console_enabled``): :func:`headwater.frontends.console.build_console`.

``coordinator`` is the Kafka front-end's group coordinator (None without a Kafka listener), for
the console's group members.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route

from .. import metrics
from ..config import HttpConfig
from ..core.broker import Broker
from ..core.groups.classic import GroupCoordinator
from .console import build_console

CONSOLE_PATH = "/console"


async def metrics_endpoint(request: Request) -> Response:
    body, content_type = metrics.exposition()
    return Response(body, headers={"Content-Type": content_type})


def operator_routes(broker: Broker, http: HttpConfig, coordinator: GroupCoordinator | None = None) -> list[BaseRoute]:
    routes: list[BaseRoute] = []
    if http.metrics_enabled:
        routes.append(Route(http.metrics_endpoint, metrics_endpoint, methods=["GET"]))
    if http.console_enabled:
        routes.append(Mount(CONSOLE_PATH, app=build_console(broker, coordinator, metrics_path=http.metrics_endpoint)))
    return routes
