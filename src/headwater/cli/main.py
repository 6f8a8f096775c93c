"""``headwater`` command line: ``serve`` starts the server; the other commands are its clients
(Iggy binary protocol over TCP, :mod:`headwater.client`) and offline tools on a data directory."""

from __future__ import annotations

import sys
from importlib import import_module
from typing import NoReturn

import click

from .. import __version__
from ..__main__ import interrupted_start, not_serving, server_imported
from . import render
from .common import EXIT_CODES_HELP, Obj, RootGroup

COMMAND_MODULES = {
    "resources": ("stream", "topic", "partition", "segment", "consumer-group", "consumer-offset"),
    "identity": ("user", "pat", "context", "login", "logout", "me"),
    "messaging": ("message", "client", "ping", "stats"),
    "offline": ("admin", "verify", "dump"),
    "inspect_cmd": ("inspect",),
}
"""The modules of this package that define the other commands (their ``GROUPS`` and
``COMMANDS``), and the names of those commands. A module is imported when one of its
commands is used (or listed: ``--help``, completion), so ``serve`` and ``--version`` do not
import the client commands (~60 ms of a server start)."""
_MODULE_OF = {name: module for module, names in COMMAND_MODULES.items() for name in names}


class _Root(RootGroup):
    """The ``headwater`` group, its client and offline commands loaded on use (COMMAND_MODULES)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *_MODULE_OF})

    def resolve_command(self, ctx: click.Context, args: list[str]):
        if args and args[0] not in self.commands and args[0] not in _MODULE_OF:
            for module_name in COMMAND_MODULES:  # an unknown name: "Did you mean" looks at every command
                _add_commands(module_name)
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: click.Context, name: str):
        if name not in self.commands and name in _MODULE_OF:
            _add_commands(_MODULE_OF[name])
        return super().get_command(ctx, name)


def _add_commands(module_name: str) -> None:
    """Import ``module_name`` of this package and add its groups and commands to ``main``."""
    module = import_module(f"{__package__}.{module_name}")
    for command in (*getattr(module, "GROUPS", ()), *getattr(module, "COMMANDS", ())):
        main.add_command(command)


def _print_version(ctx: click.Context, _param, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from .. import _native

    click.echo(f"headwater {__version__} (hot loops: {_native.probe()})")
    ctx.exit()


_EPILOG = f"""{EXIT_CODES_HELP}

\b
Shell completion (bash; zsh_source and fish_source for zsh and fish):
  eval "$(_HEADWATER_COMPLETE=bash_source headwater)"
"""


@click.group(cls=_Root, epilog=_EPILOG)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and which hot-loop implementation is active, then exit.")
@click.option("--server", metavar="HOST:PORT",
              help="Iggy TCP address of the server (env HEADWATER_SERVER; default 127.0.0.1:8090).")
@click.option("--username", "-u", help="Log in as this user (env HEADWATER_USERNAME).")
@click.option("--password", "-p", help="Password for --username (env HEADWATER_PASSWORD).")
@click.option("--token", "-t", help="Log in with this personal access token (env HEADWATER_TOKEN).")
@click.option("--context", "-c", "context_name", help="Use this saved context (default: the current one).")
@click.option("--output", "-o", type=click.Choice(render.OUTPUTS), default="table", show_default=True,
              help="Output format of every command (also accepted after the command).")
@click.pass_context
def main(ctx: click.Context, server, username, password, token, context_name, output) -> None:
    """Headwater: a message-streaming server speaking Iggy's binary protocol and Kafka's.

    `headwater serve` runs the server; `headwater NOUN VERB` talks to a running one
    over the Iggy protocol (e.g. `headwater stream list`); `verify`, `dump` and
    `admin` work on a stopped server's data directory.
    """
    ctx.obj = Obj(server, username, password, token, context_name, output)
    if ctx.invoked_subcommand != "serve":
        not_serving()  # "serve" was only an argument (e.g. a stream's name): see headwater.__main__.run


_FLAGS = {
    "system.data_dir": "--data-dir",
    "tcp.address": "--tcp-address",
    "kafka.address": "--kafka-address",
    "http.address": "--http-address",
    "quic.address": "--quic-address",
    "websocket.address": "--websocket-address",
    "logging.level": "--log-level",
}


def _named(option: str, sources: dict[str, str]) -> str:
    """How a failed start names ``option``: as it was given (flag, variable, file), or, for a
    default nobody gave (e.g. a default port another program holds), its key and the flag
    that changes it."""
    if option in sources:
        return sources[option]
    flag = _FLAGS.get(option)
    return f"{option} (the default; {flag} changes it)" if flag else option


def _refusal_line(option: str, problem: str) -> str:
    """One refusal's line. Its parts may come from a TOML quoted key, a path or a value,
    any of which may hold a line break or an escape sequence: those are written escaped
    (as Python writes them in a repr), so a refusal stays one line and the terminal shows
    what was given."""
    text = f"headwater: cannot start: {option}: {problem}"
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _cannot_start(option: str, problem: str, code: int) -> NoReturn:
    """The one line a failed start prints (stderr), then exit with ``code``."""
    click.echo(_refusal_line(option, problem), err=True)
    sys.exit(code)


@main.command(short_help="Start the server (Kafka 9092; Iggy TCP 8090, HTTP 3000, QUIC 8080, WS 8092).")
@click.option("--config", "config_path", metavar="FILE", help="TOML config file.")
@click.option("--data-dir", metavar="DIR", help="Data directory (default: ./local_data).")
@click.option("--tcp-address", help="Iggy TCP listener HOST:PORT (default 127.0.0.1:8090).")
@click.option("--kafka-address", help="Kafka listener HOST:PORT (default 127.0.0.1:9092).")
@click.option("--http-address", help="Iggy HTTP REST listener HOST:PORT (default 127.0.0.1:3000).")
@click.option("--quic-address", help="Iggy QUIC listener HOST:PORT, UDP (default 127.0.0.1:8080).")
@click.option("--websocket-address", help="Iggy WebSocket listener HOST:PORT (default 127.0.0.1:8092).")
@click.option("--with-default-root-credentials", is_flag=True, help="On first start, create root as iggy/iggy (development).")
@click.option("--fresh", is_flag=True, help="Empty the data directory before starting (refused while another server holds it).")
@click.option("--log-level", help="debug, info, warning, error, critical.")
def serve(config_path, data_dir, tcp_address, kafka_address, http_address, quic_address, websocket_address,
          with_default_root_credentials, fresh, log_level) -> None:
    """Start the server: data in ./local_data; Kafka on 9092, Iggy on TCP 8090, HTTP 3000, QUIC 8080, WebSocket 8092 (127.0.0.1).

    Every listener is on by default, on 127.0.0.1; the HTTP port also serves the web
    console (/console) and Prometheus metrics (/metrics). "enabled = false" under [SECTION] in
    the --config file (or HEADWATER_SECTION_ENABLED=false) turns one off.

    Configuration precedence: defaults < --config file < HEADWATER_* environment < flags.
    Start order: validate every option, lock the data directory, bind every
    listener, then open the data and create the root user. A failure prints one
    line "headwater: cannot start: OPTION: PROBLEM" (one per refused option: every
    option is checked first) and exits 2 for a bad option, 1 otherwise; SIGINT or
    SIGTERM before the server is ready: one line, exit 130 or 143.
    """
    # the server's modules are imported here, not at the top: the client commands and
    # --version would otherwise import all of them (~1.8 s) for nothing
    try:
        from .. import app, logs
        from ..config import ConfigError, load
        from ..storage.api import StorageError
    except KeyboardInterrupt as exc:  # SIGINT (or SIGTERM) while they import: as below
        interrupted_start(exc)
    server_imported()

    values = {"system.data_dir": data_dir, "tcp.address": tcp_address, "kafka.address": kafka_address,
              "http.address": http_address, "quic.address": quic_address,
              "websocket.address": websocket_address, "logging.level": log_level}
    sources: dict[str, str] = {}
    try:
        try:
            cfg = load(config_path, overrides=values, flag_names=_FLAGS, sources=sources)
        except ConfigError as e:
            *earlier, last = e.every()  # in the order checked (config.load)
            for refused in earlier:
                click.echo(_refusal_line(refused.option, refused.problem), err=True)
            _cannot_start(last.option, last.problem, 2)
        logs.setup(cfg.logging.level, cfg.logging.format)
        app.run(cfg, fresh=fresh, default_root=with_default_root_credentials, sources=sources)
    except app.StartupError as e:
        _cannot_start(_named(e.option, sources), e.problem, 2 if e.bad_value else 1)
    except (OSError, StorageError) as e:
        # a storage failure after start-up began (the message names the file):
        # refusing to start is right, a traceback is not
        _cannot_start(sources.get("system.data_dir", "system.data_dir"), str(e), 1)
    except KeyboardInterrupt as exc:
        interrupted_start(exc)


if __name__ == "__main__":
    main()
