"""The web console: a Starlette (ASGI) app of server-rendered Jinja2 pages over the broker core.

Mounted at ``/console`` on the HTTP listener (``[http] console_enabled``). Every page reads the
broker directly on the event loop's thread (all endpoints are ``async``, so Starlette never
moves them to its thread pool); the message browser's segment reads that the page cache cannot
answer are done by the catch-up workers (:mod:`headwater.core.catchup`), as a poll's are, and every change goes through the same broker methods the
protocol front-ends call; permissions are checked with :class:`headwater.core.permissions.Checker`
as the Iggy front-end checks them.

Sessions: ``POST /login`` with an Iggy username and password (Argon2id, verified off the loop)
sets an opaque random cookie ``hw_console`` (HttpOnly, SameSite=Strict, path ``/console``) that
maps to the user id in memory for ``SESSION_TTL_S``; restarting the server logs everyone out.
A deleted or deactivated user's session ends at its next request.

Routes (relative to the mount point): ``/`` streams and the throughput chart, ``/streams/{s}``
topics, ``/streams/{s}/topics/{t}`` partitions with segments, groups and the send form,
``/streams/{s}/topics/{t}/partitions/{p}`` the message browser, ``/groups`` consumer groups of
both protocols with lag, ``/users`` users, permissions and tokens, ``/api/throughput`` the
counters the chart polls (JSON), ``/static/...`` our CSS and JS.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ...codec import batch as batch_codec
from ...codec.errors import CodecError
from ...codec.kafka.convert import kafka_user_headers
from ...codec.kafka.errors import KafkaCodecError
from ...core import catchup, errors
from ...core.broker import Broker
from ...core.catalog import Topic
from ...core.groups.classic import GroupCoordinator
from ...core.offsets import CONSUMER
from ...core.permissions import Checker
from ...core.users import USER_ACTIVE, User
from ...metrics import CONSOLE
from . import frames
from .groups import group_rows, lags

HERE = Path(__file__).parent
COOKIE = "hw_console"
SESSION_TTL_S = 8 * 3600
PAGE_SIZE = 50


@dataclass
class _Session:
    user_id: int
    expires: float


class Console:
    """The console's state: the broker, the Kafka group coordinator (None without a Kafka
    listener), the sessions and the templates."""

    def __init__(self, broker: Broker, coordinator: GroupCoordinator | None = None, *, metrics_path: str = "/metrics"):
        self.broker = broker
        self.coordinator = coordinator
        self.metrics_path = metrics_path
        self.sessions: dict[str, _Session] = {}
        self.env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]))
        self.env.filters["us_time"] = _us_time
        self.env.filters["size"] = _size

    # --------------------------------------------------------------- sessions
    def user_of(self, request: Request) -> User | None:
        sid = request.cookies.get(COOKIE)
        s = self.sessions.get(sid or "")
        if s is None:
            return None
        user = self.broker.users.users.get(s.user_id)
        if s.expires < time.monotonic() or user is None or user.status != USER_ACTIVE:
            self.sessions.pop(sid or "", None)
            return None
        return user

    def page(self, request: Request, name: str, user: User | None, status: int = 200, **values: Any) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        html = self.env.get_template(name).render(user=user, base=root, **values)
        return HTMLResponse(html, status_code=status)


def _us_time(us: int) -> str:
    if not us:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(us / 1e6)) + f".{us % 1_000_000:06d}Z"


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


class Forbidden(Exception):
    pass


def _require(allowed: bool, what: str) -> None:
    if not allowed:
        raise Forbidden(f"not allowed to {what}")


def _ident(text: str) -> int | str:
    return int(text) if text.isdigit() else text


def build_console(broker: Broker, coordinator: GroupCoordinator | None = None, *, metrics_path: str = "/metrics") -> Starlette:
    """The console ASGI app (mount it, e.g. at ``/console``)."""
    c = Console(broker, coordinator, metrics_path=metrics_path)

    def authed(handler):
        async def endpoint(request: Request) -> Response:
            user = c.user_of(request)
            base = request.scope.get("root_path", "")
            if user is None:
                return RedirectResponse(f"{base}/login", status_code=303)
            checker = Checker(user.permissions, user.is_root)
            try:
                return await handler(request, user, checker)
            except Forbidden as e:
                return c.page(request, "error.html", user, 403, message=str(e))
            except (errors.BrokerError, CodecError, KafkaCodecError, ValueError, OverflowError) as e:
                # bad input of any form (a broker refusal, a batch or Kafka-conversion codec error,
                # an unparsable or out-of-range number): the error page with 400, never a bare 500
                status = 404 if type(e).__name__.endswith("NotFound") else 400
                return c.page(request, "error.html", user, status, message=str(e))

        return endpoint

    # ----------------------------------------------------------- login
    async def login_form(request: Request) -> Response:
        return c.page(request, "login.html", None)

    async def login(request: Request) -> Response:
        form = await request.form()
        username, password = str(form.get("username", "")), str(form.get("password", ""))
        loop = asyncio.get_running_loop()
        try:
            user = await loop.run_in_executor(None, broker.users.authenticate, username, password)
        except errors.BrokerError:
            return c.page(request, "login.html", None, 401, error="Invalid username or password.")
        now = time.monotonic()
        for old in [k for k, s in c.sessions.items() if s.expires < now]:  # forget expired sessions
            del c.sessions[old]
        sid = secrets.token_urlsafe(32)
        c.sessions[sid] = _Session(user.id, now + SESSION_TTL_S)
        base = request.scope.get("root_path", "")
        response = RedirectResponse(f"{base}/", status_code=303)
        response.set_cookie(COOKIE, sid, max_age=SESSION_TTL_S, path=base or "/", httponly=True, samesite="strict")
        return response

    async def logout(request: Request) -> Response:
        c.sessions.pop(request.cookies.get(COOKIE) or "", None)
        base = request.scope.get("root_path", "")
        response = RedirectResponse(f"{base}/login", status_code=303)
        response.delete_cookie(COOKIE, path=base or "/")
        return response

    # ----------------------------------------------------------- streams and topics
    @authed
    async def streams(request: Request, user: User, checker: Checker) -> Response:
        rows = []
        for s in sorted(broker.catalog.streams.values(), key=lambda s: s.id):
            if not checker.read_stream(s.id):
                continue
            parts = [p for t in s.topics.values() for p in t.partitions.values()]
            rows.append((s, len(s.topics), sum(p.messages_count for p in parts), sum(p.size_bytes for p in parts)))
        return c.page(request, "streams.html", user, streams=rows, stats=broker.stats(), metrics_path=c.metrics_path)

    @authed
    async def create_stream(request: Request, user: User, checker: Checker) -> Response:
        _require(checker.manage_stream(), "create streams")
        form = await request.form()
        s = broker.create_stream(str(form.get("name", "")).strip())
        return RedirectResponse(f"{request.scope.get('root_path', '')}/streams/{s.id}", status_code=303)

    @authed
    async def stream(request: Request, user: User, checker: Checker) -> Response:
        s = broker.stream(_ident(request.path_params["stream"]))
        _require(checker.read_stream(s.id), "read this stream")
        topics = [
            (t, sum(p.messages_count for p in t.partitions.values()), sum(p.size_bytes for p in t.partitions.values()))
            for t in sorted(s.topics.values(), key=lambda t: t.id)
            if checker.read_topic(s.id, t.id)
        ]
        return c.page(request, "stream.html", user, stream=s, topics=topics)

    @authed
    async def create_topic(request: Request, user: User, checker: Checker) -> Response:
        s = broker.stream(_ident(request.path_params["stream"]))
        _require(checker.manage_topic(s.id), "create topics in this stream")
        form = await request.form()
        count = int(str(form.get("partitions", "1")) or "1")
        t = broker.create_topic(s.id, str(form.get("name", "")).strip(), count, {})
        return RedirectResponse(f"{request.scope.get('root_path', '')}/streams/{s.id}/topics/{t.id}", status_code=303)

    def _topic(request: Request, checker: Checker) -> Topic:
        t = broker.topic(_ident(request.path_params["stream"]), _ident(request.path_params["topic"]))
        _require(checker.read_topic(t.stream_id, t.id), "read this topic")
        return t

    @authed
    async def topic(request: Request, user: User, checker: Checker) -> Response:
        t = _topic(request, checker)
        parts = []
        for p in sorted(t.partitions.values(), key=lambda p: p.id):
            parts.append((p, p.log.segments()))
        groups = [g for g in group_rows(broker, c.coordinator) if any(r.topic is t for r in g.lags)]
        return c.page(request, "topic.html", user, stream=broker.stream(t.stream_id), topic=t, partitions=parts,
                      groups=groups, sent=request.query_params.get("sent"))

    @authed
    async def send(request: Request, user: User, checker: Checker) -> Response:
        t = _topic(request, checker)
        _require(checker.send_messages(t.stream_id, t.id), "send messages to this topic")
        form = await request.form()
        payload = str(form.get("payload", "")).encode()
        key = str(form.get("key", "")).encode()
        headers = []
        for line in str(form.get("headers", "")).splitlines():
            if line.strip():
                k, _, v = line.partition("=")
                headers.append((k.strip().encode(), v.strip().encode()))
        pid = str(form.get("partition", "")).strip()
        if pid:
            p = broker.route(t, "partition", int(pid))
        elif key:
            p = broker.route(t, "key", key)
        else:
            p = broker.route(t, "balanced", None)
        user_headers = kafka_user_headers(key or None, False, headers)
        batch = bytearray(batch_codec.build_batch([batch_codec.Message(payload, origin_timestamp=broker.clock(), user_headers=user_headers)]))
        done = broker.append(p, batch)
        if done.durable is not None:
            await done.durable
        base = request.scope.get("root_path", "")
        return RedirectResponse(
            f"{base}/streams/{t.stream_id}/topics/{t.id}/partitions/{p.id}?offset={done.base_offset}", status_code=303
        )

    # ----------------------------------------------------------- message browser
    @authed
    async def messages(request: Request, user: User, checker: Checker) -> Response:
        t = _topic(request, checker)
        _require(checker.poll_messages(t.stream_id, t.id), "read messages of this topic")
        p = t.partition(int(request.path_params["partition"]))
        q = request.query_params
        fmt = q.get("format", "text")
        if fmt not in frames.FORMATS:
            fmt = "text"
        seek = q.get("timestamp", "").strip()
        present = lambda: broker.require_present(p)  # noqa: E731 (deleted while the disk was read)
        if seek:  # (catch-up reads: bytes not in the page cache are read by a worker, not the loop)
            start = await catchup.read_in(CONSOLE, p.offset_for_timestamp, _parse_time(seek), check=present)
        else:
            text = q.get("offset", "").strip()
            start = int(text) if text else max(p.log_start_offset, p.high_watermark - PAGE_SIZE)
        start = max(start, p.log_start_offset)
        batches, _ = await catchup.read_in(CONSOLE, p.read, start, PAGE_SIZE, metered=False, check=present)
        shown = frames.show_batches(batches, fmt, start, PAGE_SIZE)
        return c.page(request, "messages.html", user, stream=broker.stream(t.stream_id), topic=t, partition=p,
                      messages=shown, fmt=fmt, start=start, seek=seek, page=PAGE_SIZE)

    # ----------------------------------------------------------- groups, users
    @authed
    async def groups(request: Request, user: User, checker: Checker) -> Response:
        rows = []
        for g in group_rows(broker, c.coordinator):
            g.lags = [r for r in g.lags if checker.read_topic(r.topic.stream_id, r.topic.id)]
            rows.append(g)
        consumers = sorted(broker.committed_names(CONSUMER))
        return c.page(request, "groups.html", user, groups=rows, consumers=[
            (name, [r for r in lags(broker, CONSUMER, name) if checker.read_topic(r.topic.stream_id, r.topic.id)])
            for name in consumers])

    @authed
    async def users(request: Request, user: User, checker: Checker) -> Response:
        _require(checker.read_users(), "read users")
        rows = [(u, broker.users.user_tokens(u.id)) for u in sorted(broker.users.users.values(), key=lambda u: u.id)]
        return c.page(request, "users.html", user, users=rows, now_us=broker.clock())

    # ----------------------------------------------------------- throughput
    async def throughput(request: Request) -> Response:
        if c.user_of(request) is None:
            return JSONResponse({"error": "not logged in"}, status_code=401)
        totals = {"messages_in": 0, "messages_out": 0, "bytes_in": 0, "bytes_out": 0}
        for s in broker.catalog.streams.values():
            for t in s.topics.values():
                for p in t.partitions.values():
                    totals["messages_in"] += p.messages_in
                    totals["messages_out"] += p.messages_out
                    totals["bytes_in"] += p.bytes_in
                    totals["bytes_out"] += p.bytes_out
        totals["time_s"] = time.time()
        return JSONResponse(totals)

    routes = [
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/", streams),
        Route("/streams", create_stream, methods=["POST"]),
        Route("/streams/{stream}", stream),
        Route("/streams/{stream}/topics", create_topic, methods=["POST"]),
        Route("/streams/{stream}/topics/{topic}", topic),
        Route("/streams/{stream}/topics/{topic}/messages", send, methods=["POST"]),
        Route("/streams/{stream}/topics/{topic}/partitions/{partition:int}", messages),
        Route("/groups", groups),
        Route("/users", users),
        Route("/api/throughput", throughput),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(routes=routes)


def _parse_time(text: str) -> int:
    """A seek time: microseconds since the epoch, or an ISO 8601 date-time (UTC unless it says)."""
    if text.isdigit():
        return int(text)
    from datetime import datetime, timezone

    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1_000_000)
