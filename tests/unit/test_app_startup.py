"""The start-up steps in process, on real sockets and a real data directory: a listen()
that loses its port after bind() is reported against the listener's option."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from headwater import app
from headwater.config import load

# never Iggy's default ports (8080, 8092, 3000), which a parallel test may hold
OTHERS_ON_PORT_0 = {"http.address": "127.0.0.1:0", "quic.address": "127.0.0.1:0", "websocket.address": "127.0.0.1:0"}


def _runners():
    """asyncio's own loop, and uvloop (the loop ``headwater serve`` runs on) where installed."""
    yield pytest.param(asyncio.run, id="asyncio")
    try:
        import uvloop
    except ImportError:
        return
    yield pytest.param(uvloop.run, id="uvloop")


@pytest.mark.parametrize("run", list(_runners()))
@pytest.mark.parametrize("name, option", [("kafka", "kafka.address"), ("iggy-tcp", "tcp.address"),
                                          ("iggy-websocket", "websocket.address"), ("iggy-http", "http.address")])
def test_a_listen_that_loses_its_port_after_bind_names_the_option(tmp_path, name, option, run):
    # uvloop's create_server(sock=...) closes the socket and only logs when its listen()
    # fails: once this surfaced as "[Errno 9] Bad file descriptor" (HTTP) or an
    # AttributeError (the others) instead of the port's StartupError
    cfg = load(env={}, overrides={"system.data_dir": str(tmp_path / "data"), **OTHERS_ON_PORT_0,
                                  "tcp.address": "127.0.0.1:0", "kafka.address": "127.0.0.1:0"})
    lock = app.lock_data_dir(cfg)
    bound = app.bind_listeners(cfg)
    port = next(b for b in bound if b.name == name).sockets[0].getsockname()[1]
    with socket.socket() as thief:  # another process takes the port between our bind and listen
        thief.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        thief.bind(("127.0.0.1", port))
        thief.listen()
        server = app.App(cfg, app.open_broker(cfg, lock))

        async def go():
            try:
                with pytest.raises(app.StartupError) as e:
                    await server.start(bound)
            finally:
                await server.stop()
            return e.value

        err = run(go())
    assert err.option == option and f"cannot listen on 127.0.0.1:{port}: " in err.problem and "in use" in err.problem

    app.lock_data_dir(cfg).release()  # stop() released the lock


def test_a_failed_bind_removes_the_directory_the_lock_created(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        cfg = load(env={}, overrides={"system.data_dir": str(tmp_path / "a" / "data"), **OTHERS_ON_PORT_0,
                                      "tcp.address": "127.0.0.1:0",
                                      "kafka.address": f"127.0.0.1:{taken.getsockname()[1]}"})
        with pytest.raises(app.StartupError) as e:
            asyncio.run(app.start(cfg))
    assert e.value.option == "kafka.address"
    assert os.listdir(tmp_path) == []


def test_every_listener_names_its_transport_and_counts_its_connections(tmp_path):
    cfg = load(env={}, overrides={"system.data_dir": str(tmp_path / "data"), **OTHERS_ON_PORT_0,
                                  "tcp.address": "127.0.0.1:0", "kafka.address": "127.0.0.1:0",
                                  "websocket.tls_enabled": "true"})
    lock = app.lock_data_dir(cfg)
    bound = app.bind_listeners(cfg)
    server = app.App(cfg, app.open_broker(cfg, lock))

    async def go():
        await server.start(bound)
        try:
            tcp = next(listener for listener in server.listeners if listener.transport == "tcp")
            _, writer = await asyncio.open_connection("127.0.0.1", tcp.bound_port)
            for _ in range(100):  # bounded: until the listener has accepted it
                if server.connection_counts()["tcp"] == 1:
                    break
                await asyncio.sleep(0.01)
            counts = server.connection_counts()
            writer.close()
            return counts
        finally:
            await server.stop()

    counts = asyncio.run(go())
    assert counts == {"quic": 0, "wss": 0, "http": 0, "tcp": 1, "kafka": 0}
    assert (tmp_path / "data" / "certs" / "server_cert.pem").exists()  # wss without a cert file: self-signed


@pytest.mark.parametrize("run", list(_runners()))
def test_a_first_start_that_loses_a_port_after_writing_removes_its_data_directory(tmp_path, monkeypatch, caplog, run):
    # the port is taken once the data directory is open (root user, certificates written):
    # the start fails naming the option, every listener that started stops without an error,
    # and the directory this start created is gone again (the next first start makes its own root)
    data = tmp_path / "new" / "data"
    cfg = load(env={}, overrides={"system.data_dir": str(data), **OTHERS_ON_PORT_0,
                                  "tcp.address": "127.0.0.1:0", "kafka.address": "127.0.0.1:0"})
    thief = socket.socket()
    thief.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    real_bind, real_open = app.bind_listeners, app.open_broker
    taken = {}

    def bind_then_share(config, sources=None):
        bound = real_bind(config, sources)
        taken["port"] = next(b for b in bound if b.name == "iggy-tcp").sockets[0].getsockname()[1]
        thief.bind(("127.0.0.1", taken["port"]))
        return bound

    def open_then_take(config, lock, *, fresh=False):
        broker = real_open(config, lock, fresh=fresh)
        thief.listen()
        return broker

    monkeypatch.setattr(app, "bind_listeners", bind_then_share)
    monkeypatch.setattr(app, "open_broker", open_then_take)
    with thief, caplog.at_level("INFO", logger="headwater"):
        with pytest.raises(app.StartupError) as e:
            run(app.start(cfg, default_root=True))
    assert e.value.option == "tcp.address" and f"127.0.0.1:{taken['port']}: " in e.value.problem
    assert "root user created" in caplog.text.lower()  # it failed after writing
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
    assert os.listdir(tmp_path) == []  # "new" and "new/data" were made by this start: both gone


def test_a_restart_that_loses_a_port_keeps_the_data_directory(tmp_path, monkeypatch):
    data = tmp_path / "data"
    cfg = load(env={}, overrides={"system.data_dir": str(data), **OTHERS_ON_PORT_0,
                                  "tcp.address": "127.0.0.1:0", "kafka.address": "127.0.0.1:0"})

    async def first_then_stop():
        server = await app.start(cfg, default_root=True)
        try:
            server.broker.create_stream("kept")
        finally:
            await server.stop()

    asyncio.run(first_then_stop())
    before = sorted(p.relative_to(data) for p in data.rglob("*"))
    with socket.socket() as thief:
        thief.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        real_bind = app.bind_listeners

        def bind_then_take(config, sources=None):
            bound = real_bind(config, sources)
            thief.bind(bound[-1].sockets[0].getsockname()[:2])
            thief.listen()
            return bound

        monkeypatch.setattr(app, "bind_listeners", bind_then_take)
        with pytest.raises(app.StartupError):
            asyncio.run(app.start(cfg))
    assert sorted(p.relative_to(data) for p in data.rglob("*")) == before
