"""Composition root: config -> storage engine -> Broker -> listeners, plus background jobs.

``run(config)`` serves until SIGTERM/SIGINT, then shuts down cleanly: stop
accepting, let in-flight requests finish (bounded), sync and close every
partition log and metadata store.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
import signal
from dataclasses import dataclass, field

from . import _native
from .config import Config, parse_address
from .core.broker import Broker
from .frontends.listener import Listener
from .storage.api import open_engine

log = logging.getLogger("headwater.app")

DEFAULT_ROOT_USERNAME = "iggy"
DEFAULT_ROOT_PASSWORD = "iggy"


@dataclass
class App:
    config: Config
    broker: Broker
    listeners: list[Listener] = field(default_factory=list)
    _jobs: list[asyncio.Task] = field(default_factory=list)

    async def start(self) -> None:
        from .frontends.iggy.server import iggy_limits, make_iggy_serve

        cfg = self.config
        if cfg.tcp.enabled:
            host, port = parse_address(cfg.tcp.address)
            self.listeners.append(Listener(
                "iggy-tcp", host, port, make_iggy_serve(self.broker, cfg.tcp, cfg.system.data_dir), limits=iggy_limits(cfg.tcp)
            ))
        if cfg.kafka.enabled:
            try:
                from .frontends.kafka.server import kafka_limits, make_kafka_serve
            except ImportError:
                make_kafka_serve = None
            if make_kafka_serve is not None:
                host, port = parse_address(cfg.kafka.address)
                self.listeners.append(Listener("kafka", host, port, make_kafka_serve(self.broker, cfg.kafka), limits=kafka_limits(cfg.kafka)))
        for listener in self.listeners:
            await listener.start()
        self._jobs.append(asyncio.create_task(self._every(cfg.system.retention_interval_s, self.broker.apply_retention)))
        self._jobs.append(
            asyncio.create_task(
                self._every(cfg.system.token_cleaner_interval_s, lambda: self.broker.users.purge_expired_tokens(self.broker.clock()))
            )
        )

    async def _every(self, seconds: float, fn) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                fn()
            except Exception:
                log.exception("background job failed")

    async def stop(self) -> None:
        for j in self._jobs:
            j.cancel()
        for listener in self.listeners:
            await listener.stop()
        self.broker.close()
        log.info("stopped")


def prepare(config: Config, *, fresh: bool = False, default_root: bool = False) -> Broker:
    """Open the data dir (wiping it first with ``fresh``) and ensure the root user exists."""
    data_dir = config.system.data_dir
    if fresh and os.path.exists(data_dir):
        shutil.rmtree(data_dir)
    os.makedirs(data_dir, exist_ok=True)
    broker = Broker(open_engine(data_dir), validate_checksum=config.system.validate_checksum)
    if not broker.users.users:
        username = config.root.username or DEFAULT_ROOT_USERNAME
        password = config.root.password
        if not password:
            if default_root:
                password = DEFAULT_ROOT_PASSWORD
            else:
                password = secrets.token_urlsafe(18)
                print(f"Root user created: username={username} password={password} (shown once; store it now)", flush=True)
        broker.ensure_root(username, password)
        log.info("root user created", extra={"kv": {"username": username}})
    return broker


async def serve(config: Config, *, fresh: bool = False, default_root: bool = False, ready=None) -> None:
    broker = prepare(config, fresh=fresh, default_root=default_root)
    app = App(config, broker)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    try:
        await app.start()
    except OSError:
        await app.stop()  # close what did start (listeners, broker) before reporting
        raise
    log.info(
        "headwater started",
        extra={
            "kv": {
                "data_dir": config.system.data_dir,
                "listeners": ",".join(f"{l.name}={l.host}:{l.bound_port}" for l in app.listeners),
                "hot_loops": _native.probe(),
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


def run(config: Config, *, fresh: bool = False, default_root: bool = False) -> None:
    limits = raise_open_files_limit()
    if limits is not None:
        log.info("open files limit", extra={"kv": {"before": limits[0], "now": limits[1]}})
    try:
        import uvloop  # type: ignore

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    runner(serve(config, fresh=fresh, default_root=default_root))
