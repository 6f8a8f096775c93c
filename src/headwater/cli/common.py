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
import sys
from typing import Any, Callable, Iterator

import click

from ..client import AuthError, Client, ConnectError, ServerError
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


def identifier(value: str) -> Identifier:
    """A numeric id (``"3"`` -> 3) or a name."""
    return int(value) if value.isdigit() else value


class IdentifierType(click.ParamType):
    name = "ID|NAME"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        if not value:
            self.fail("empty identifier", param, ctx)
        return identifier(value)


ID = IdentifierType()


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
    connection or refused login into exit 3."""
    try:
        yield
    except ServerError as e:
        fail(f"server error {e.code} ({e.name})", EXIT_SERVER_ERROR)
    except (ConnectError, AuthError) as e:
        fail(str(e), EXIT_CONNECT)


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
