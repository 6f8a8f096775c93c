"""Iggy's HTTP REST API (port 3000): an ASGI app (Starlette) served by uvicorn in the server's loop.

Modules: ``app`` (the app, its routes and the hook other features add routes with),
``routes`` (the REST routes: path + method -> Iggy command), ``auth`` (JWT access and
refresh tokens), ``errors`` (Iggy's error JSON and statuses), ``server`` (uvicorn on
the sockets ``headwater.app`` bound).
"""
