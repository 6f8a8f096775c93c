"""What every client command shares: the connection, argument types, exit codes.

Exit codes (also in ``headwater --help`` and the README)::

    0  ok
    1  the server refused the request (its Iggy error code and name are printed),
       or ``verify`` found damage
    2  usage: a bad option or argument
    3  cannot connect, or login refused
    4  the data directory is in use by a running server, or is not one (offline tools)
"""

from __future__ import annotations

import contextlib
import functools
import struct
import sys
from typing import Any, Callable, Iterator

import click

from ..client import AuthError, Client, ConnectError, ServerError
from ..codec.errors import CodecError
from ..codec.iggy.primitives import Identifier
from . import contexts, render

EXIT_OK = 0
EXIT_SERVER_ERROR = 1
EXIT_USAGE = 2
EXIT_CONNECT = 3
EXIT_DATA_DIR = 4

EXIT_CODES_HELP = """\b
Exit codes:
  0  ok
  1  the server refused the request (its Iggy error code and name are printed),
     or verify found damage
  2  usage error (a bad option or argument)
  3  cannot connect, or login refused
  4  the data directory is in use by a server, or is not one (offline tools)"""


def fail(message: str, code: int) -> None:
    click.echo(f"headwater: {message}", err=True)
    sys.exit(code)


def found(value, what: str):
    """``value``, or exit 1 with "WHAT not found" when the server answered "none" (an
    empty reply: Iggy's not-found for a get)."""
    if value is None:
        fail(f"{what} not found", EXIT_SERVER_ERROR)
    return value


U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1
NAME_MAX_BYTES = 255
"""Iggy's limits: ids, partition ids and counts are u32, offsets and timestamps u64, a name is
1..255 UTF-8 bytes (Iggy binary protocol 0.11.0, the identifier and name fields)."""


def identifier(value: str) -> Identifier:
    """A numeric id (``"3"`` -> 3) or a name."""
    return int(value) if value.isascii() and value.isdigit() else value


def _name_problem(value: str) -> str | None:
    """Why ``value`` is not a valid Iggy name (1..255 UTF-8 bytes), or None."""
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    if not 1 <= size <= NAME_MAX_BYTES:
        return f"must be 1..{NAME_MAX_BYTES} UTF-8 bytes, got {size}"
    return None


class IdentifierType(click.ParamType):
    """A numeric id (u32, 0..4294967295) or a name (1..255 UTF-8 bytes); anything else is a
    usage error (exit 2)."""

    name = "ID|NAME"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        if not value:
            self.fail("empty identifier", param, ctx)
        ident = identifier(value)
        if isinstance(ident, int):
            if ident > U32_MAX:
                self.fail(f"numeric id {value} is out of range 0..{U32_MAX}", param, ctx)
        elif (problem := _name_problem(ident)) is not None:
            self.fail(f"name {problem}", param, ctx)
        return ident


class NameType(click.ParamType):
    """A stream, topic, consumer-group or user name: 1..255 UTF-8 bytes."""

    name = "NAME"

    def convert(self, value, param, ctx):
        if (problem := _name_problem(value)) is not None:
            self.fail(f"name {problem}", param, ctx)
        return value


ID = IdentifierType()
NAME = NameType()
U32 = click.IntRange(0, U32_MAX)
U64 = click.IntRange(0, U64_MAX)
COUNT = click.IntRange(1, U32_MAX)


_HELP_ERRORS = tuple(getattr(click.exceptions, n) for n in ("NoArgsIsHelpError",) if hasattr(click.exceptions, n))
"""Usage errors click shows as the help text (a bare ``headwater``): left to click."""


@contextlib.contextmanager
def one_line_usage_errors() -> Iterator[None]:
    """A usage error (bad option, argument or value) prints one line ``headwater: PROBLEM (see
    CMD --help)`` on stderr and exits 2, instead of click's usage block."""
    try:
        yield
    except click.UsageError as e:
        if isinstance(e, _HELP_ERRORS):
            raise
        hint = f" (see {e.ctx.command_path} --help)" if e.ctx is not None else ""
        fail(" ".join(e.format_message().split()) + hint, EXIT_USAGE)


class RootGroup(click.Group):
    """The ``headwater`` group: every usage error below it is one line (:func:`one_line_usage_errors`)."""

    def make_context(self, info_name, args, parent=None, **extra):
        with one_line_usage_errors():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx):
        with one_line_usage_errors():
            return super().invoke(ctx)


class Obj:
    """The root group's options, handed down in ``ctx.obj``."""

    def __init__(self, server, username, password, token, context, output):
        self.server, self.username, self.password = server, username, password
        self.token, self.context, self.output = token, context, output

    def target(self) -> contexts.Target:
        return contexts.resolve(self.server, self.username, self.password, self.token, self.context)

    def connect(self, login: bool = True) -> Client:
        """A connected (and, with ``login``, logged-in) client; exits 3 when it cannot be."""
        target = self.target()
        try:
            client = Client(target.server)
        except ConnectError as e:
            fail(str(e), EXIT_CONNECT)
        if not login:
            return client
        try:
            if target.username and target.password is None and sys.stdin.isatty():
                target.password = click.prompt("Password", hide_input=True)
            if target.username is not None or target.password is not None:
                if not target.username or not target.password:
                    client.close()
                    fail("both a username and a password are needed", EXIT_CONNECT)
                client.login(target.username, target.password)
            elif target.token:
                client.login_token(target.token)
            else:
                client.close()
                fail("no credentials: pass --username/--password or --token, set HEADWATER_USERNAME/"
                     "HEADWATER_PASSWORD or HEADWATER_TOKEN, or run `headwater login`", EXIT_CONNECT)
        except (AuthError, ConnectError) as e:
            client.close()
            fail(str(e), EXIT_CONNECT)
        return client


@contextlib.contextmanager
def exits_on_errors() -> Iterator[None]:
    """Turn a refused request into exit 1 (printing its Iggy code and name), a lost
    connection or refused login into exit 3, a value the request or batch encoders refuse
    (ValueError, OverflowError, struct.error, CodecError) into exit 2."""
    try:
        yield
    except ServerError as e:
        fail(f"server error {e.code} ({e.name})", EXIT_SERVER_ERROR)
    except (ConnectError, AuthError) as e:
        fail(str(e), EXIT_CONNECT)
    except (ValueError, OverflowError, struct.error, CodecError) as e:
        # backstop behind the param types: a value the request encoders refuse (a field out of
        # its u32/u64 range, a name past 255 bytes) is a usage error, not a traceback
        fail(f"invalid argument: {e}", EXIT_USAGE)


def output_option(f: Callable) -> Callable:
    """``--output table|json`` on a leaf command too (it overrides the root's)."""

    def remember(ctx: click.Context, _param, value):
        if value is not None:
            ctx.find_object(Obj).output = value
        return value

    return click.option("--output", "-o", type=click.Choice(render.OUTPUTS), default=None, expose_value=False,
                        callback=remember, help="table (default) or json.")(f)


_CONNECTION_OPTIONS = (
    # (attribute of Obj, long flag, short flag, help)
    ("server", "--server", None, "Iggy TCP address HOST:PORT (as before the command)."),
    ("username", "--username", "-u", "Log in as this user (as before the command)."),
    ("password", "--password", "-p", "Password for --username (as before the command)."),
    ("token", "--token", "-t", "Log in with this personal access token (as before the command)."),
)


def connection_options(f: Callable) -> Callable:
    """``--server/--username/--password/--token`` (``-u/-p/-t``) on a leaf command too, as the
    root group has them, so ``headwater login -u iggy -p iggy`` works like ``headwater -u iggy -p
    iggy login``; a value given after the command wins. A flag the command already uses for
    itself is left out (``message send -p`` is ``--partition``, ``user create -u`` is
    ``--user-status``): there only the long form is added, or nothing."""
    taken = {opt for param in getattr(f, "__click_params__", ()) for opt in param.opts}

    def remember(attribute: str):
        def callback(ctx: click.Context, _param, value):
            if value is not None:
                setattr(ctx.find_object(Obj), attribute, value)
            return value

        return callback

    for attribute, long, short, help_text in _CONNECTION_OPTIONS:
        flags = [flag for flag in (long, short) if flag and flag not in taken]
        if long in flags:
            f = click.option(*flags, f"_{attribute}_after", default=None, expose_value=False,
                             callback=remember(attribute), help=help_text)(f)
            f.__click_params__.insert(0, f.__click_params__.pop())  # listed last in --help
    return f


def client_command(group: click.Group | None, name: str, login: bool = True, **kwargs) -> Callable:
    """Register ``f(client, out, **params)`` as a command of ``group`` that talks to the server.

    The client is connected (and logged in) before ``f`` runs and closed after; a
    :class:`ServerError` exits 1 printing its code and name, a lost connection exits 3.
    """

    def wrap(f: Callable) -> click.Command:
        @functools.wraps(f)
        @click.pass_context
        def run(ctx: click.Context, **params: Any):
            obj = ctx.find_object(Obj)
            client = obj.connect(login=login)
            with exits_on_errors(), contextlib.closing(client):
                return f(client, obj.output, **params)

        make = group.command if group is not None else click.command
        return make(name, **kwargs)(connection_options(output_option(run)))

    return wrap
