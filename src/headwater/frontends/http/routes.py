"""Iggy's REST routes: each is (method, path) -> an Iggy command, run by the TCP handler.

A request is turned into the command's request dataclass by the JSON mapping
derived from the command's declaration (``codec.iggy.json.load``), handed to the
same handler the binary protocol runs (``frontends.iggy.registry.HANDLERS``) with a
context logged in as the bearer's user (so permission checks are the TCP ones),
and the handler's reply payload is decoded by the codec and rendered by the same
mapping. Where each value comes from is this table's: a field named by a
parameter of the route's path (``{stream_id}``) is read from the path; any other
from the JSON body of a POST or PUT, or from the query string of a GET or DELETE
(``?partitions_count=N``, ``?consumer_id=..&kind=offset&value=0&count=10``). Paths, methods and success statuses follow the Iggy server's router
(apache/iggy ``core/server/src/http.rs``, ``http/handlers.rs``, SDK 0.11.0's
``core/sdk/src/http``):

========  ===================================================================  ======  ====================
method    path                                                                 status  command
========  ===================================================================  ======  ====================
GET       /stats                                                               200     GetStats
GET       /cluster/metadata                                                    200     GetClusterMetadata
GET       /clients, /clients/{client_id}                                       200     GetClients, GetClient
GET/POST  /users                                                               200     GetUsers, CreateUser
GET/PUT/  /users/{user_id}  (``me``: the caller)                               200/204 Get/Update/DeleteUser
DELETE
PUT       /users/{user_id}/password, /users/{user_id}/permissions              204     ChangePassword, UpdatePermissions
GET/POST  /personal-access-tokens                                              200     Get/CreatePersonalAccessToken(s)
DELETE    /personal-access-tokens/{name}                                       204     DeletePersonalAccessToken
GET/POST  /streams ; GET/PUT/DELETE /streams/{stream_id} ; DELETE .../purge    200/204 streams
GET/POST  /streams/{stream_id}/topics ; GET/PUT/DELETE .../{topic_id} ; purge  200/204 topics
POST/DEL  /streams/{s}/topics/{t}/partitions  (DELETE: ?partitions_count=N)    200/204 Create/DeletePartitions
DELETE    /streams/{s}/topics/{t}/partitions/{p}  (?segments_count=N)          204     DeleteSegments
GET/POST  /streams/{s}/topics/{t}/consumer-groups ; GET/DELETE .../{group_id}  200/204 consumer groups
GET/PUT   /streams/{s}/topics/{t}/consumer-offsets  (GET: query)               200/204 Get/StoreConsumerOffset
DELETE    /streams/{s}/topics/{t}/consumer-offsets/{consumer_id}               204     DeleteConsumerOffset
GET/POST  /streams/{s}/topics/{t}/messages  (GET: query)                       200/201 Poll/SendMessages
GET       /streams/{s}/topics/{t}/messages/flush/{p}/fsync={fsync}             400     FlushUnsavedBuffer (5)
========  ===================================================================  ======  ====================

Authentication routes (``/users/login``, ``/users/refresh-token``, ``/users/logout``,
``/personal-access-tokens/login``) are in :mod:`.app`. A GET of one resource that
does not exist answers 404 with ``{"id": 404, "code": "not_found", ...}``.

HTTP is stateless in Iggy: a request is served by a client that is not in the
client table (id 0) and joins no consumer group; a consumer over HTTP is always a
single consumer (Iggy's JSON has no consumer kind).
"""

from __future__ import annotations

import asyncio
import inspect
import json as stdjson
import time
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ... import metrics
from ...codec import batch as batch_codec
from ...codec.errors import CodecError
from ...codec.iggy import json as ij
from ...codec.iggy.codes import Command
from ...codec.iggy.commands import COMMANDS
from ...codec.iggy.commands import messages as wm
from ...core import errors as core_errors
from ...core.broker import Client
from ...core.users import USER_ACTIVE
from ..iggy import handlers  # noqa: F401  (registers every handler)
from ..iggy.registry import HANDLERS, Context
from .errors import NOT_FOUND_BODY, response_for

C = Command
HTTP_CLIENT_ID = 0  # stateless: never in the client table, never a group member


@dataclass(frozen=True)
class Api:
    """One REST route. ``reply``: ``"json"`` (render the decoded reply), ``"maybe"`` (an
    empty reply is 404), ``"none"`` (no body); ``status`` on success."""

    method: str
    path: str
    command: Command
    reply: str = "none"
    status: int = 204
    summary: str = ""


_S = "/streams/{stream_id}"
_T = _S + "/topics/{topic_id}"
APIS: tuple[Api, ...] = (
    Api("GET", "/stats", C.GET_STATS, "json", 200, "Server statistics"),
    Api("GET", "/cluster/metadata", C.GET_CLUSTER_METADATA, "json", 200, "Cluster metadata (one node)"),
    Api("GET", "/clients", C.GET_CLIENTS, "json", 200, "Connected clients"),
    Api("GET", "/clients/{client_id}", C.GET_CLIENT, "maybe", 200, "One connected client"),
    Api("GET", "/users", C.GET_USERS, "json", 200, "List users"),
    Api("POST", "/users", C.CREATE_USER, "json", 200, "Create a user"),
    Api("GET", "/users/{user_id}", C.GET_USER, "maybe", 200, "Get a user (`me`: the caller)"),
    Api("PUT", "/users/{user_id}", C.UPDATE_USER, summary="Update a user"),
    Api("DELETE", "/users/{user_id}", C.DELETE_USER, summary="Delete a user"),
    Api("PUT", "/users/{user_id}/password", C.CHANGE_PASSWORD, summary="Change a password"),
    Api("PUT", "/users/{user_id}/permissions", C.UPDATE_PERMISSIONS, summary="Replace a user's permissions"),
    Api("GET", "/personal-access-tokens", C.GET_PERSONAL_ACCESS_TOKENS, "json", 200, "List the caller's tokens"),
    Api("POST", "/personal-access-tokens", C.CREATE_PERSONAL_ACCESS_TOKEN, "json", 200, "Create a token"),
    Api("DELETE", "/personal-access-tokens/{name}", C.DELETE_PERSONAL_ACCESS_TOKEN, summary="Delete a token"),
    Api("GET", "/streams", C.GET_STREAMS, "json", 200, "List streams"),
    Api("POST", "/streams", C.CREATE_STREAM, "json", 200, "Create a stream"),
    Api("GET", _S, C.GET_STREAM, "maybe", 200, "Get a stream"),
    Api("PUT", _S, C.UPDATE_STREAM, summary="Rename a stream"),
    Api("DELETE", _S, C.DELETE_STREAM, summary="Delete a stream"),
    Api("DELETE", _S + "/purge", C.PURGE_STREAM, summary="Purge a stream's messages"),
    Api("GET", _S + "/topics", C.GET_TOPICS, "json", 200, "List topics"),
    Api("POST", _S + "/topics", C.CREATE_TOPIC, "json", 200, "Create a topic"),
    Api("GET", _T, C.GET_TOPIC, "maybe", 200, "Get a topic"),
    Api("PUT", _T, C.UPDATE_TOPIC, summary="Update a topic"),
    Api("DELETE", _T, C.DELETE_TOPIC, summary="Delete a topic"),
    Api("DELETE", _T + "/purge", C.PURGE_TOPIC, summary="Purge a topic's messages"),
    Api("POST", _T + "/partitions", C.CREATE_PARTITIONS, status=200, summary="Add partitions"),
    Api("DELETE", _T + "/partitions", C.DELETE_PARTITIONS, summary="Remove the last partitions"),
    Api("DELETE", _T + "/partitions/{partition_id}", C.DELETE_SEGMENTS, summary="Delete the oldest segments"),
    Api("GET", _T + "/consumer-groups", C.GET_CONSUMER_GROUPS, "json", 200, "List consumer groups"),
    Api("POST", _T + "/consumer-groups", C.CREATE_CONSUMER_GROUP, "json", 200, "Create a consumer group"),
    Api("GET", _T + "/consumer-groups/{group_id}", C.GET_CONSUMER_GROUP, "maybe", 200, "Get a consumer group"),
    Api("DELETE", _T + "/consumer-groups/{group_id}", C.DELETE_CONSUMER_GROUP, summary="Delete a consumer group"),
    Api("GET", _T + "/consumer-offsets", C.GET_CONSUMER_OFFSET, "maybe", 200, "Get a stored offset"),
    Api("PUT", _T + "/consumer-offsets", C.STORE_CONSUMER_OFFSET, summary="Store an offset"),
    Api("DELETE", _T + "/consumer-offsets/{consumer_id}", C.DELETE_CONSUMER_OFFSET, summary="Delete a stored offset"),
    Api("GET", _T + "/messages", C.POLL_MESSAGES, "json", 200, "Poll messages"),
    Api("POST", _T + "/messages", C.SEND_MESSAGES, "json", 201, "Send messages"),
    # the SDK's flush route (Iggy's current router does not serve it); the TCP handler answers
    # FeatureUnavailable (5), so this is 400 with that code instead of a bare 404
    Api("GET", _T + "/messages/flush/{partition_id}/fsync={fsync}", C.FLUSH_UNSAVED_BUFFER, status=200,
        summary="Flush a partition's unsaved buffer (FeatureUnavailable: use enforce_fsync)"),
)


class HttpFrontend:
    """What the handlers see as ``ctx.frontend`` (the TCP section's limits, the data dir,
    ``node_ports``: the bound port per transport, for the cluster metadata; shared with
    the binary front-end's when the server runs both)."""

    def __init__(self, broker, tcp_config, data_dir: str, tokens, hashing_slots: int = 2,
                 node_ports: dict[str, int] | None = None):
        self.broker = broker
        self.config = tcp_config
        self.data_dir = data_dir
        self.tokens = tokens
        self.hashing = asyncio.Semaphore(hashing_slots)
        self.node_ports = {} if node_ports is None else node_ports


async def read_json(request: Request) -> Any:
    """The request body as JSON (empty -> ``{}``). Raises InvalidJson (400, Iggy 4)."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        return stdjson.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ij.InvalidJson(f"the request body is not JSON: {e}") from None


def bearer(request: Request) -> str:
    value = request.headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def authenticated_context(request: Request) -> Context:
    """A handler context logged in as the bearer token's user. Raises Unauthenticated."""
    front: HttpFrontend = request.app.state.frontend
    claims = front.tokens.verify(bearer(request))
    user = front.broker.users.find(claims["user_id"])
    if user is None or user.status != USER_ACTIVE:
        raise core_errors.Unauthenticated("the token's user no longer exists or is inactive")
    peer = request.client
    client = Client(HTTP_CLIENT_ID, f"{peer.host}:{peer.port}" if peer else "", "http", user.id)
    ctx = Context(front.broker, client, front)
    ctx.login(user)
    return ctx


# request latency histograms (headwater.metrics): the handler's run, produce and fetch only
_TIMED = {
    int(Command.SEND_MESSAGES): metrics.request_histogram("iggy", "http", metrics.PRODUCE),
    int(Command.POLL_MESSAGES): metrics.request_histogram("iggy", "http", metrics.FETCH),
}


async def run(ctx: Context, command: Command, req: Any) -> Any:
    """Run ``command``'s TCP handler; returns its reply payload (bytes or buffer list)."""
    t0 = time.perf_counter()
    result = HANDLERS[int(command)](ctx, req)
    if inspect.isawaitable(result):
        result = await result
    timed = _TIMED.get(int(command))
    if timed is not None:
        timed.observe(time.perf_counter() - t0)
    return result


def _params(request: Request) -> tuple[dict, dict]:
    return dict(request.path_params), dict(request.query_params)


async def build_request(api: Api, request: Request, ctx: Context) -> Any:
    spec = COMMANDS[api.command]
    path, query = _params(request)
    if api.command == C.SEND_MESSAGES:
        body = await read_json(request)
        partitioning, msgs = ij.load_send_messages(body)
        now = int(time.time() * 1_000_000)
        batch = batch_codec.build_batch(
            batch_codec.Message(m.payload, m.id, now, m.user_headers) for m in msgs
        )
        stream_id = ij.IDENTIFIER.load(path["stream_id"], "stream_id")
        topic_id = ij.IDENTIFIER.load(path["topic_id"], "topic_id")
        return wm.SendMessages(stream_id, topic_id, partitioning, len(msgs), memoryview(batch))
    if api.command == C.GET_USER and path.get("user_id") == "me" and ctx.user is not None:
        path["user_id"] = str(ctx.user.id)
    # path parameters by name; the rest from the body (POST, PUT) or else the query
    body = await read_json(request) if api.method in ("POST", "PUT") else None
    return ij.load(spec.request_type, body=body, path=path, query=query)


def render(api: Api, payload: Any) -> Response:
    spec = COMMANDS[api.command]
    if api.reply == "none":
        return Response(status_code=api.status)
    if isinstance(payload, list):
        payload = b"".join(bytes(p) for p in payload)
    if api.reply == "maybe" and not payload:
        return JSONResponse(NOT_FOUND_BODY, status_code=404)
    if api.command == C.POLL_MESSAGES:
        prefix, batches = wm.decode_poll_reply(payload)
        return JSONResponse(ij.dump_polled_messages(prefix, batches), status_code=api.status)
    reply = spec.reply_decode(payload) if spec.reply_decode is not None else None
    if api.command == C.SEND_MESSAGES:
        return JSONResponse({"confirmations": ij.dump(list(reply))}, status_code=api.status)
    return JSONResponse(ij.dump(list(reply) if isinstance(reply, tuple) else reply), status_code=api.status)


def endpoint(api: Api):
    async def handle(request: Request) -> Response:
        try:
            ctx = authenticated_context(request)
            req = await build_request(api, request, ctx)
            payload = await run(ctx, api.command, req)
            return render(api, payload)
        except (core_errors.BrokerError, CodecError) as e:
            return response_for(e)

    handle.__name__ = f"{api.method.lower()}_{api.command.name.lower()}"
    handle.__doc__ = api.summary
    return handle


def api_routes() -> list[Route]:
    """One Starlette route per path, its methods from :data:`APIS`."""
    by_path: dict[str, dict[str, Api]] = {}
    for api in APIS:
        by_path.setdefault(api.path, {})[api.method] = api
    routes = []
    for path, methods in by_path.items():
        handlers_by_method = {m: endpoint(a) for m, a in methods.items()}

        async def dispatch(request: Request, _h=handlers_by_method) -> Response:
            return await _h[request.method](request)

        routes.append(Route(path, dispatch, methods=list(methods)))
    return routes

