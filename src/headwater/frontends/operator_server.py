"""Serves :func:`.operator.operator_routes` (``/metrics``, ``/console``) on the ``[http]`` address
with uvicorn, in the server's event loop.

Interim: the HTTP REST listener (issue 10, item 1) serves Iggy's REST API and includes these
routes; until it is merged, this is the HTTP listener. uvicorn's own signal handling is off
(the server's ``run`` owns SIGTERM/SIGINT) and so is its lifespan protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

import uvicorn
from starlette.applications import Starlette

from ..config import format_address

log = logging.getLogger("headwater.http")


class _Server(uvicorn.Server):
    def capture_signals(self):  # the headwater process handles signals itself
        return contextlib.nullcontext()


class OperatorServer:
    """``name``/``host``/``port`` as the other listeners have them (for the start-up log line)."""

    def __init__(self, name: str, host: str, port: int, app: Starlette, sockets: list[socket.socket]):
        self.name = name
        self.host = host
        self.port = port
        self._sockets = sockets
        config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False, log_config=None)
        self._server = _Server(config)
        self._task: asyncio.Task | None = None

    @property
    def bound_port(self) -> int:
        return self._sockets[0].getsockname()[1]

    async def start(self) -> None:
        self._task = asyncio.create_task(self._server.serve(sockets=self._sockets))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises why it could not start
                raise OSError("the HTTP listener stopped while starting")
            await asyncio.sleep(0.01)
        log.info("listening", extra={"kv": {"listener": self.name, "address": format_address(self.host, self.bound_port)}})

    async def stop(self) -> None:
        if self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(Exception):
            await self._task
        for sock in self._sockets:
            sock.close()
