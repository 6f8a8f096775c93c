"""One module per Kafka API (``registry.APIS`` names each API's module); a module registers its
handlers when it is imported, which :func:`handler` does on an API's first request.

A server that never sees a Kafka request, or only a few APIs, does not import the others (the
handler modules and what only they use: some 45 ms of a server start on this machine)."""

from __future__ import annotations

from importlib import import_module

from ..registry import APIS, HANDLERS, Api, Handler


def handler(api: Api) -> Handler:
    """The handler of ``api``, its module imported first if this is the API's first use."""
    fn = HANDLERS.get(api.key)
    if fn is None:
        import_module(f"{__name__}.{api.module}")
        fn = HANDLERS[api.key]
    return fn


def load_all() -> None:
    """Import every handler module (what a first request of each API would do)."""
    for api in APIS.values():
        handler(api)
