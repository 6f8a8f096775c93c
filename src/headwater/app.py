"""Composition root: config -> storage engine -> Broker -> listeners, plus background jobs.

Start-up order (each step runs only if every earlier one succeeded, so a start
that fails leaves nothing behind):

1. the config is parsed and validated (``config.load``, in the CLI);
2. the data directory's exclusive lock is taken (``storage.api.lock_engine``;
   it creates the directory if missing and writes only ``<data>/.lock``);
3. every listener's sockets are bound (``frontends.listener.bind``; QUIC's UDP
   socket by ``frontends.iggy.quic.bind_udp``), not yet listening: a client
   connecting now is refused, never left waiting (configured TLS certificates
   were loaded once in step 1, so a bad one fails before step 2);
4. ``--fresh`` empties the data directory (still locked: never another live
   server's), the engine opens it and the broker loads its state;
5. the root user is created on first start (its password printed if random);
6. the listeners listen on their sockets and serve them (a TLS listener with no
   certificate configured gets the self-signed pair of ``<data>/certs/``, made
   now if missing: ``frontends/tls.py``). One ``IggyFrontend`` serves the Iggy
   TCP, QUIC and WebSocket listeners, so their sessions share one client table.

A failure raises :class:`StartupError` naming the option at fault; a failure in
step 3 removes the directory (and lock file) step 2 created. ``run(config)``
then serves until SIGTERM/SIGINT and shuts down cleanly: stop accepting, let
in-flight requests finish (bounded), sync and close every partition log and
metadata store, release the lock.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import secrets
import signal
import socket
from dataclasses import dataclass, field
from typing import Mapping

from . import _native
from .config import Config, format_address, parse_address
from .core.broker import Broker
from .core.errors import BrokerError
from .core.users import check_password, validate_password, validate_username
from .frontends import listener as listener_mod
from .frontends import tls
from .frontends.http.app import build_app as build_http_app
from .frontends.http.server import HttpListener, TlsError, tls_context
from .frontends.iggy.quic import QuicListener, bind_udp
from .frontends.iggy.server import IggyFrontend, iggy_limits
from .frontends.iggy.websocket import make_websocket_serve
from .frontends.kafka.server import kafka_limits, make_kafka_serve
from .frontends.listener import Listener
from .frontends.operator import operator_routes
from .storage.api import EngineLock, StorageError, lock_engine, open_engine

log = logging.getLogger("headwater.app")

DEFAULT_ROOT_USERNAME = "iggy"
DEFAULT_ROOT_PASSWORD = "iggy"


class StartupError(Exception):
    """The server cannot start. ``option`` is the config key at fault (``"tcp.address"``),
    ``problem`` a one-line reason; ``bad_value``: the option's value is wrong (not the
    machine's state)."""

    def __init__(self, option: str, problem: str, *, bad_value: bool = False):
        super().__init__(f"{option}: {problem}")
        self.option = option
        self.problem = problem
        self.bad_value = bad_value


@dataclass
class BoundListener:
    """A listener's sockets, bound but not yet listening, before anything serves them (QUIC: one UDP socket)."""

    name: str
    option: str  # the config key of its address
    host: str
    port: int
    sockets: list[socket.socket]
    tls: object = None  # the ssl.SSLContext a TLS listener serves with

    def addresses(self) -> str:
        """"HOST:PORT[, HOST:PORT]" of the sockets (the configured address where a socket
        cannot say: closed). Never raises."""
        where = []
        for sock in self.sockets:
            try:
                host, port = sock.getsockname()[:2]
            except OSError:
                host, port = self.host, self.port
            where.append(format_address(host, port))
        return ", ".join(where)

    def listen(self) -> None:
        """``listen()`` on the stream sockets, before an event loop serves them. Raises
        OSError (EADDRINUSE: another socket bound the port with SO_REUSEADDR since our
        ``bind`` and listened first). uvloop's ``create_server(sock=...)`` does not raise
        when its own ``listen`` fails: it closes the socket and only logs, leaving a
        server that never accepts; listening here first turns that into this OSError.
        The loop's own ``listen`` afterwards only sets its backlog."""
        for sock in self.sockets:
            if sock.type == socket.SOCK_STREAM:
                sock.listen(LISTEN_BACKLOG)

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


LISTEN_BACKLOG = 1024
"""The backlog of :meth:`BoundListener.listen` (each listener's loop sets its own after)."""


@dataclass
class App:
    config: Config
    broker: Broker
    listeners: list[Listener | HttpListener] = field(default_factory=list)
    _jobs: list[asyncio.Task] = field(default_factory=list)
    _kafka: object = None  # the Kafka front-end, once its listener is made

    async def start(self, bound: list[BoundListener]) -> None:
        """Serve the already-bound listeners (their Listener owns the sockets from now on).
        One IggyFrontend serves every Iggy transport (one client table: sessions, fencing)."""
        cfg = self.config
        data_dir = cfg.system.data_dir
        iggy = IggyFrontend(self.broker, cfg.tcp, data_dir)
        made = {b.name: self._listener(b, iggy) for b in bound if b.name != "iggy-http"}
        for b in bound:  # the HTTP app last: the console shows the Kafka front-end's groups
            if b.name == "iggy-http":
                made[b.name] = self._http_listener(b, iggy)
        self.listeners.extend(made[b.name] for b in bound)
        for b, listener in zip(bound, self.listeners):
            where = b.addresses()  # now: a failed start may have closed the sockets
            try:
                b.listen()
                await listener.start()
            except OSError as e:  # listen() lost a race for the port since bind()
                raise StartupError(b.option, f"cannot listen on {where}: {e.strerror or e}") from None
        for listener in self.listeners:
            kind = {"iggy-tcp": "tcp", "iggy-quic": "quic", "iggy-websocket": "websocket",
                    "iggy-http": "http"}.get(listener.name)
            if kind:
                iggy.node_ports[kind] = listener.bound_port
        self._jobs.append(asyncio.create_task(self._every(cfg.system.retention_interval_s, self.broker.apply_retention)))
        self._jobs.append(asyncio.create_task(self._compaction(cfg.compaction.interval_s, cfg.compaction.max_dirty_bytes)))
        self._jobs.append(asyncio.create_task(self._every(1.0, self.broker.abort_expired_transactions)))
        self._jobs.append(asyncio.create_task(self._every(
            cfg.kafka.transaction_remove_expired_transaction_cleanup_interval_ms / 1000,
            self.broker.expire_transactional_ids)))
        if self._kafka is not None:
            kafka, retention_ms = self._kafka, round(cfg.kafka.offsets_retention_minutes * 60_000)
            self._jobs.append(asyncio.create_task(self._every(
                cfg.kafka.offsets_retention_check_interval_ms / 1000,
                lambda: kafka.groups.expire_offsets(self.broker, retention_ms))))
        self._jobs.append(
            asyncio.create_task(
                self._every(cfg.system.token_cleaner_interval_s, lambda: self.broker.users.purge_expired_tokens(self.broker.clock()))
            )
        )

    def connection_counts(self) -> dict[str, int]:
        """Open connections per transport ("tcp", "tls-tcp", "quic", "websocket", "wss", "http",
        "https", "kafka", "kafka-ssl"): each listener's ``transport`` and ``connection_count``."""
        counts: dict[str, int] = {}
        for listener in self.listeners:
            counts[listener.transport] = counts.get(listener.transport, 0) + listener.connection_count
        return counts

    def _http_listener(self, b: BoundListener, iggy: IggyFrontend) -> HttpListener:
        """Iggy's REST API, with ``/metrics`` and ``/console`` (frontends/operator.py) on it."""
        cfg = self.config
        coordinator = self._kafka.groups.coordinator if self._kafka is not None else None
        http_app = build_http_app(self.broker, cfg.http, data_dir=cfg.system.data_dir, tcp=cfg.tcp,
                                  extra_routes=operator_routes(self.broker, cfg.http, coordinator),
                                  node_ports=iggy.node_ports)
        return HttpListener(b.name, b.host, b.port, http_app, cfg.http, b.sockets, b.tls)

    def _listener(self, b: BoundListener, iggy: IggyFrontend):
        """The listener serving ``b``'s sockets (TLS contexts built here: a self-signed pair
        is written into the data directory, open by now). Raises StartupError."""
        cfg = self.config
        data_dir = cfg.system.data_dir
        try:
            if b.name == "kafka":
                bound_port = b.sockets[0].getsockname()[1] if b.sockets else None
                k = cfg.kafka
                ctx = tls.server_context(k.tls_cert_file, k.tls_key_file, data_dir, "kafka.tls_cert_file") if k.tls_enabled else None
                serve = make_kafka_serve(self.broker, k, bound_port)
                self._kafka = serve.__self__  # its group coordinator, for the console
                return Listener(b.name, b.host, b.port, serve, limits=kafka_limits(k), sockets=b.sockets, ssl=ctx,
                                protocol="kafka", transport="kafka-ssl" if ctx else "kafka", framed=True)
            if b.name == "iggy-quic":
                q = cfg.quic
                cert, key = tls.cert_pair(q.cert_file, q.key_file, data_dir, "quic.cert_file")
                try:
                    return QuicListener(b.name, b.host, b.port, iggy, sock=b.sockets[0], cert_file=cert, key_file=key,
                                        max_connections=cfg.tcp.max_connections, idle_timeout_s=q.max_idle_timeout_s)
                except (ValueError, OSError) as e:
                    raise tls.TlsConfigError("quic.cert_file", f"cannot load the certificate {cert} with the key {key}: {e}") from None
            if b.name == "iggy-websocket":
                w = cfg.websocket
                ctx = tls.server_context(w.tls_cert_file, w.tls_key_file, data_dir, "websocket.tls_cert_file") if w.tls_enabled else None
                return Listener(b.name, b.host, b.port, make_websocket_serve(iggy), limits=iggy_limits(cfg.tcp),
                                sockets=b.sockets, ssl=ctx, protocol="iggy", transport="wss" if ctx else "websocket")
            t = cfg.tcp
            ctx = tls.server_context(t.tls_cert_file, t.tls_key_file, data_dir, "tcp.tls_cert_file") if t.tls_enabled else None
            return Listener(b.name, b.host, b.port, iggy.serve, limits=iggy_limits(t), sockets=b.sockets, ssl=ctx,
                            protocol="iggy", transport="tls-tcp" if ctx else "tcp", framed=True)
        except tls.TlsConfigError as e:
            raise StartupError(e.option, e.problem, bad_value=True) from None

    async def _every(self, seconds: float, fn) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                fn()
            except Exception:
                log.exception("background job failed")

    async def _compaction(self, seconds: float, max_dirty_bytes: int) -> None:
        """The log cleaner: every ``seconds``, at most one compaction pass (its I/O in a thread)."""
        while True:
            await asyncio.sleep(seconds)
            try:
                await self.broker.compact_once(max_dirty_bytes)
            except Exception:
                log.exception("compaction failed")

    async def stop(self) -> None:
        for j in self._jobs:
            j.cancel()
        # every listener at once: each waits (bounded) for its connections' requests in hand and
        # graceful closes, so one after another would add their deadlines up
        results = await asyncio.gather(*(listener.stop() for listener in self.listeners), return_exceptions=True)
        for listener, result in zip(self.listeners, results):
            if isinstance(result, BaseException):
                log.error("listener stop failed", exc_info=result, extra={"kv": {"listener": listener.name}})
        self.broker.close()
        log.info("stopped")


def check_root_credentials(config: Config) -> None:
    """Part of step 1: requested root credentials must be valid on every start, not
    only the first (as Iggy validates them). Raises StartupError; never shows the password."""
    try:
        if config.root.username:
            validate_username(config.root.username)
    except BrokerError as e:
        raise StartupError("root.username", str(e), bad_value=True) from None
    try:
        if config.root.password:
            validate_password(config.root.password)
    except BrokerError as e:
        raise StartupError("root.password", str(e), bad_value=True) from None


def _tls_pairs(config: Config) -> list[tuple[str, str, str]]:
    """(option, cert_file, key_file) of every enabled TLS listener that names a certificate."""
    pairs = []
    for section, on in (("tcp", config.tcp.tls_enabled), ("websocket", config.websocket.tls_enabled),
                        ("kafka", config.kafka.tls_enabled)):
        sec = getattr(config, section)
        if on and sec.enabled and sec.tls_cert_file:
            pairs.append((f"{section}.tls_cert_file", sec.tls_cert_file, sec.tls_key_file))
    if config.quic.enabled and config.quic.cert_file:
        pairs.append(("quic.cert_file", config.quic.cert_file, config.quic.key_file))
    return pairs


def check_tls_files(config: Config) -> None:
    """Part of step 1: every configured certificate and key must load (so a bad path fails
    before the data directory is touched). Raises StartupError."""
    for option, cert, key in _tls_pairs(config):
        try:
            tls.server_context(cert, key, config.system.data_dir, option)
        except tls.TlsConfigError as e:
            raise StartupError(e.option, e.problem, bad_value=True) from None


def lock_data_dir(config: Config) -> EngineLock:
    """Step 2: take the data directory's exclusive lock. Raises StartupError
    (naming the holder's PID when another process has it)."""
    try:
        return lock_engine(config.system.data_dir)
    except StorageError as e:
        raise StartupError("system.data_dir", str(e)) from None


def bind_listeners(config: Config, sources: Mapping[str, str] | None = None) -> list[BoundListener]:
    """Step 3: bind every enabled listener's address. Raises StartupError naming the
    listener's option, with nothing left bound (``sources``: how to name an option
    in the message, e.g. ``--tcp-address``)."""
    # QUIC, WebSocket and HTTP listen first: once TCP and Kafka accept, every listener does
    plan = []
    if config.quic.enabled:
        plan.append(("iggy-quic", "quic.address", config.quic.address))
    if config.websocket.enabled:
        plan.append(("iggy-websocket", "websocket.address", config.websocket.address))
    if config.http.enabled:
        plan.append(("iggy-http", "http.address", config.http.address))
    if config.tcp.enabled:
        plan.append(("iggy-tcp", "tcp.address", config.tcp.address))
    if config.kafka.enabled:
        plan.append(("kafka", "kafka.address", config.kafka.address))
    bound: list[BoundListener] = []
    try:
        for name, option, address in plan:
            host, port = parse_address(address, option)
            try:
                sockets = [bind_udp(host, port)] if name == "iggy-quic" else listener_mod.bind(host, port)
            except socket.gaierror as e:
                raise StartupError(option, f"cannot resolve host {host!r} of {address}: {e.strerror}") from None
            except OSError as e:
                raise StartupError(option, f"cannot listen on {address}: {e.strerror or e}") from None
            bound.append(BoundListener(name, option, host, port, sockets))
            _check_overlap(bound, sources or {})
            if name == "iggy-http":
                try:  # the certificate is loaded with the bind: a bad one fails before the data dir opens
                    bound[-1].tls = tls_context(config.http)
                except TlsError as e:
                    raise StartupError("http.tls_cert_file", str(e)) from None
    except BaseException:
        for b in bound:
            b.close()
        raise
    return bound


def _overlaps(a: tuple, b: tuple) -> bool:
    wildcard = ("0.0.0.0", "::")
    return a[1] == b[1] and (a[0] == b[0] or a[0] in wildcard or b[0] in wildcard)


def _check_overlap(bound: list[BoundListener], sources: Mapping[str, str]) -> None:
    """The last listener's sockets must not share a port with an earlier one's (bound
    sockets that do not listen yet would not clash until ``listen``, after the data
    directory is open). Raises StartupError."""
    last = bound[-1]
    for earlier in bound[:-1]:
        for a in earlier.sockets:
            for b in last.sockets:
                if a.family == b.family and a.type == b.type and _overlaps(a.getsockname()[:2], b.getsockname()[:2]):
                    raise StartupError(
                        last.option,
                        f"cannot listen on {b.getsockname()[0]}:{b.getsockname()[1]}: "
                        f"that port is already this server's {sources.get(earlier.option, earlier.option)}",
                    )


def open_broker(config: Config, lock: EngineLock, *, fresh: bool = False) -> Broker:
    """Step 4: empty the locked data directory with ``fresh``, open the engine on it
    (it adopts ``lock``) and load the broker. Raises StartupError for storage failures,
    the lock released."""
    engine = None
    try:
        if fresh:
            lock.empty()
        engine = open_engine(config.system.data_dir, lock=lock,
                             write_behind_cache_bytes=config.system.write_behind_cache_bytes,
                             catchup_direct_io=config.system.catchup_direct_io,
                             preallocate=config.system.preallocate_next_segment,
                             preallocate_window_bytes=config.system.preallocate_window_bytes,
                             preallocate_budget_bytes=config.system.preallocate_budget_bytes)
        return Broker(engine, validate_checksum=config.system.validate_checksum,
                      transaction_max_timeout_ms=config.kafka.transaction_max_timeout_ms,
                      transactional_id_expiration_ms=config.kafka.transactional_id_expiration_ms)
    except (StorageError, OSError) as e:
        if engine is not None:
            try:
                engine.close()  # releases the lock
            except (StorageError, OSError):
                pass
        raise StartupError("system.data_dir", str(e)) from None
    finally:
        if engine is None:
            lock.release()


def ensure_root(
    broker: Broker, config: Config, *, default_root: bool = False, sources: Mapping[str, str] | None = None
) -> None:
    """Step 5: create the root user on first start (no user yet): ``[root]`` username and
    password, else iggy/iggy with ``default_root``, else a random password printed once
    on stdout.

    Root credentials apply only on first start (as Iggy's): when users exist, any
    requested credentials the existing root user does not match are ignored with a
    warning saying so (``sources`` names where they came from).
    """
    sources = sources or {}
    username = config.root.username or DEFAULT_ROOT_USERNAME
    password = config.root.password or (DEFAULT_ROOT_PASSWORD if default_root else "")
    if not broker.users.users:
        shown = not password
        if shown:
            password = secrets.token_urlsafe(18)
        broker.ensure_root(username, password)
        log.info("root user created", extra={"kv": {"username": username}})
        if shown:
            print(f"Root user created: username={username} password={password} (shown once; store it now)", flush=True)
        return
    requested = [sources.get(k, k) for k in ("root.username", "root.password") if getattr(config.root, k[5:])]
    if default_root and not config.root.password:
        requested.append("--with-default-root-credentials")
    if not requested:
        return
    root = broker.users.find(0)
    if root is not None and root.username == username and (not password or check_password(root.password_hash, password)):
        return  # they describe the existing root user: nothing is ignored
    log.warning(
        "root credentials ignored",
        extra={"kv": {
            "from": ",".join(requested),
            "reason": "root credentials apply only on the first start and this data directory already has "
                      "users; log in as the existing root user and change its password instead",
            "root_username": root.username if root is not None else "",
        }},
    )


async def start(
    config: Config, *, fresh: bool = False, default_root: bool = False, sources: Mapping[str, str] | None = None
) -> App:
    """Steps 2-6 of the start-up order (and the root credentials' and TLS files' part of step 1).
    Raises StartupError."""
    check_root_credentials(config)
    check_tls_files(config)
    lock = lock_data_dir(config)
    try:
        bound = bind_listeners(config, sources)
    except BaseException:
        lock.release(remove=True)  # removes only what taking it created
        raise
    try:
        broker = open_broker(config, lock, fresh=fresh)
    except BaseException:
        for b in bound:
            b.close()
        lock.discard()  # open_broker released the lock
        raise
    app = App(config, broker)
    try:
        ensure_root(broker, config, default_root=default_root, sources=sources)
        await app.start(bound)
    except BaseException:
        try:
            await app.stop()  # a listener that started closes its own sockets; the broker releases the lock
        finally:
            for b in bound:  # those of the listeners that did not start
                b.close()
            lock.discard()  # a data directory this start created goes again (root user included)
        raise
    return app


async def serve(
    config: Config,
    *,
    fresh: bool = False,
    default_root: bool = False,
    sources: Mapping[str, str] | None = None,
    ready=None,
    open_files: tuple[int, int] | None = None,
) -> None:
    app = await start(config, fresh=fresh, default_root=default_root, sources=sources)
    # the listeners accept from inside start(): take SIGTERM/SIGINT over at once, before the
    # collection below (50-120 ms, far longer on a loaded machine), or a stop sent as soon as the
    # ports answer kills the process (exit -15) instead of shutting it down cleanly
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    # What start-up made (modules, schemas, the catalog) lives as long as the server: move it out
    # of the collector's reach, so a full collection walks only what was made since (a full
    # collection over start-up's ~80k objects took 50-120 ms of the event loop on this machine).
    # Under `headwater serve` the modules were frozen once imported (headwater.__main__.
    # server_imported): this collection walks only what the start made since.
    gc.collect()
    gc.freeze()
    log.info(
        "headwater started",
        extra={
            "kv": {
                "data_dir": config.system.data_dir,
                "listeners": ",".join(f"{l.name}={format_address(l.host, l.bound_port)}" for l in app.listeners),
                "hot_loops": _native.probe(),
                **({"open_files_limit": f"{open_files[0]}->{open_files[1]}"} if open_files else {}),
            }
        },
    )
    if ready is not None:
        ready(app)
    await stop.wait()
    log.info("shutting down")
    await app.stop()


def raise_open_files_limit() -> tuple[int, int] | None:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns (before, after), None where
    unsupported. Each partition keeps its active segment's .log and .index open (plus a
    few sealed segments while they are read), so the common soft limit of 1024 runs out
    near 500 partitions; a create that hits it is rolled back with an error."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft >= hard:
        return soft, soft
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return soft, soft
    return soft, target


def run(
    config: Config, *, fresh: bool = False, default_root: bool = False, sources: Mapping[str, str] | None = None
) -> None:
    """Start (see the module docstring) and serve until SIGTERM/SIGINT. Raises StartupError."""
    limits = raise_open_files_limit()  # logged once started: a failed start prints one line only
    try:
        import uvloop  # type: ignore

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    runner(serve(config, fresh=fresh, default_root=default_root, sources=sources, open_files=limits))
