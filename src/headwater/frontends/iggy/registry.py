"""The Iggy command registry: command code -> handler, filled by ``@iggy_command``.

A handler takes ``(ctx, request)`` where ``request`` is the decoded request
dataclass from ``codec.iggy.commands`` and returns the reply payload (bytes,
or a list of buffers for the poll path), or an awaitable of that. The
connection adds the result section for result-framed operations. One dict:
no second list, no ``if`` chain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Union

from ...codec.iggy.codes import Command
from ...core.broker import Broker, Client
from ...core.permissions import Checker
from ...core.users import User

Payload = Union[bytes, bytearray, list]
Handler = Callable[["Context", Any], Union[Payload, Awaitable[Payload]]]

HANDLERS: dict[int, Handler] = {}


def iggy_command(code: Command) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        if int(code) in HANDLERS:
            raise RuntimeError(f"command {code!r} registered twice")
        HANDLERS[int(code)] = fn
        return fn

    return register


@dataclass
class Context:
    """What a handler sees: the broker, this connection's client and user."""

    broker: Broker
    client: Client
    frontend: Any  # the IggyFrontend (client table, config)
    user: User | None = None
    checker: Checker = field(default_factory=lambda: Checker(None, False))
    header: Any = None  # the RequestHeader being served

    def login(self, user: User) -> None:
        self.user = user
        self.client.user_id = user.id
        self.checker = Checker(user.permissions, user.is_root)

    def logout(self) -> None:
        self.user = None
        self.client.user_id = None
        self.checker = Checker(None, False)

    def refresh_user(self) -> None:
        """Pick up changed permissions (e.g. after UpdatePermissions)."""
        if self.user is not None:
            u = self.broker.users.find(self.user.id)
            if u is None:
                self.logout()
            else:
                self.login(u)
