"""``headwater user|pat|context ...``, ``login``, ``logout``: users, tokens, saved connections.

User verbs follow Iggy's CLI: list, get, create, delete, name, status, password,
permissions. Global permissions are given as Iggy's CLI names them, long or short
(``-g p_msg,s_msg``); stream permissions as ``STREAM_ID[:PERMS]`` (``-s 1:r_str,p_msg``).
"""

from __future__ import annotations

import contextlib
import secrets
import socket

import click

from ..client import AuthError, ConnectError, ServerError
from ..codec.iggy.commands import system as wsys
from ..codec.iggy.commands import tokens as wtok
from ..codec.iggy.commands import users as wu
from ..codec.iggy.primitives import GlobalPermissions, Permissions, StreamPermissions
from . import contexts, render
from .common import (ID, NAME, U32_MAX, EXIT_CONNECT, EXIT_SERVER_ERROR, Obj, client_command, connection_options,
                     exits_on_errors, fail, found, output_option)

_U64_MAX = (1 << 64) - 1
_STATUS = {"active": 1, "inactive": 2}
_GLOBAL = {
    "manage_servers": "m_srv", "read_servers": "r_srv", "manage_users": "m_usr", "read_users": "r_usr",
    "manage_streams": "m_str", "read_streams": "r_str", "manage_topics": "m_top", "read_topics": "r_top",
    "poll_messages": "p_msg", "send_messages": "s_msg",
}
_STREAM = {
    "manage_stream": "m_str", "read_stream": "r_str", "manage_topics": "m_top", "read_topics": "r_top",
    "poll_messages": "p_msg", "send_messages": "s_msg",
}


def _flags(text: str, table: dict[str, str], what: str) -> dict[str, bool]:
    short = {v: k for k, v in table.items()}
    out = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name = item if item in table else short.get(item)
        if name is None:
            raise click.BadParameter(f"unknown {what} permission {item!r}; one of {', '.join(table)} "
                                     f"or {', '.join(short)}")
        out[name] = True
    return out


def permissions_of(global_text: str | None, stream_texts: tuple[str, ...]) -> Permissions | None:
    """Permissions from ``-g`` and ``-s`` values, or None when neither is given."""
    if global_text is None and not stream_texts:
        return None
    g = GlobalPermissions(**_flags(global_text or "", _GLOBAL, "global"))
    streams = []
    for text in stream_texts:
        sid, _, perms = text.partition(":")
        if not (sid.isascii() and sid.isdigit()) or int(sid) > U32_MAX:
            raise click.BadParameter(f"expected STREAM_ID[:PERMS], got {text!r}", param_hint="-s")
        streams.append(StreamPermissions(int(sid), **_flags(perms, _STREAM, "stream")))
    return Permissions(g, tuple(streams))


_perm_options = [
    click.option("--global-permissions", "-g", "global_permissions", metavar="PERMS",
                 help="Comma-separated: " + ", ".join(f"{k}/{v}" for k, v in _GLOBAL.items())),
    click.option("--stream-permissions", "-s", "stream_permissions", multiple=True, metavar="ID[:PERMS]",
                 help="Per stream (repeatable): " + ", ".join(f"{k}/{v}" for k, v in _STREAM.items())),
]


def _with_permissions(f):
    for option in reversed(_perm_options):
        f = option(f)
    return f


_USER_COLUMNS = [
    ("id", lambda u: u.id),
    ("username", lambda u: u.username),
    ("status", lambda u: {1: "active", 2: "inactive"}.get(u.status, u.status)),
    ("created", lambda u: render.time_us(u.created_at)),
]


@click.group()
def user() -> None:
    """Users: list, get, create, delete, name, status, password, permissions."""


@client_command(user, "list")
def user_list(client, out):
    """List users."""
    render.emit(out, client.call(wu.GetUsers()), _USER_COLUMNS)


@client_command(user, "get")
@click.argument("user_id", type=ID)
def user_get(client, out, user_id):
    """Show a user and their permissions."""
    render.emit(out, found(client.call(wu.GetUser(user_id)), f"user {user_id!r}"))


@client_command(user, "create")
@click.argument("username", type=NAME)
@click.argument("password")
@click.option("--user-status", "-u", "status", type=click.Choice(list(_STATUS)), default="active",
              show_default=True)
@_with_permissions
def user_create(client, out, username, password, status, global_permissions, stream_permissions):
    """Create a user."""
    u = client.call(wu.CreateUser(username, password, _STATUS[status],
                                  permissions_of(global_permissions, stream_permissions)))
    render.emit(out, u) if out == "json" else render.done(out, f"user {u.username!r} created with id {u.id}")


@client_command(user, "delete")
@click.argument("user_id", type=ID)
def user_delete(client, out, user_id):
    """Delete a user (never the root user)."""
    client.call(wu.DeleteUser(user_id))
    render.done(out, f"user {user_id!r} deleted", user_id=user_id)


@client_command(user, "name")
@click.argument("user_id", type=ID)
@click.argument("username", type=NAME)
def user_name(client, out, user_id, username):
    """Change a user's username."""
    client.call(wu.UpdateUser(user_id, username=username))
    render.done(out, f"user {user_id!r} renamed to {username!r}", user_id=user_id, username=username)


@client_command(user, "status")
@click.argument("user_id", type=ID)
@click.argument("status", type=click.Choice(list(_STATUS)))
def user_status(client, out, user_id, status):
    """Make a user active or inactive."""
    client.call(wu.UpdateUser(user_id, status=_STATUS[status]))
    render.done(out, f"user {user_id!r} is {status}", user_id=user_id, status=status)


@client_command(user, "password")
@click.argument("user_id", type=ID)
@click.argument("current_password", required=False)
@click.argument("new_password", required=False)
def user_password(client, out, user_id, current_password, new_password):
    """Change a user's password (prompted for when not given)."""
    if current_password is None:
        current_password = click.prompt("Current password", hide_input=True)
    if new_password is None:
        new_password = click.prompt("New password", hide_input=True, confirmation_prompt=True)
    client.call(wu.ChangePassword(user_id, current_password, new_password))
    render.done(out, f"password of user {user_id!r} changed", user_id=user_id)


@client_command(user, "permissions")
@click.argument("user_id", type=ID)
@_with_permissions
def user_permissions(client, out, user_id, global_permissions, stream_permissions):
    """Replace a user's permissions (none given: remove them all)."""
    client.call(wu.UpdatePermissions(user_id, permissions_of(global_permissions, stream_permissions)))
    render.done(out, f"permissions of user {user_id!r} replaced", user_id=user_id)


# ---------------------------------------------------------------- personal access tokens


def parse_expiry(text: str | None) -> int:
    """``--expiry``: seconds, or ``30s``/``15m``/``12h``/``7d``, or ``never``; as µs (0 = server default)."""
    if text is None:
        return 0
    if text == "never":
        return _U64_MAX
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    if not number.isdigit() or int(number) == 0:
        raise click.BadParameter(f"expected e.g. 3600, 15m, 12h, 7d or never; got {text!r}", param_hint="--expiry")
    return int(number) * units[unit] * 1_000_000


_expiry_option = click.option("--expiry", "-e", help="Lifetime: 3600, 15m, 12h, 7d or never (default: never).")


@click.group()
def pat() -> None:
    """Personal access tokens: list, create, delete."""


@client_command(pat, "list")
def pat_list(client, out):
    """List your personal access tokens."""
    render.emit(out, client.call(wtok.GetPersonalAccessTokens()),
                [("name", lambda t: t.name), ("expires", lambda t: render.time_us(t.expiry_at) if t.expiry_at
                                                     else "never")])


@client_command(pat, "create")
@click.argument("name")
@_expiry_option
def pat_create(client, out, name, expiry):
    """Create a personal access token; it is printed once."""
    raw = client.call(wtok.CreatePersonalAccessToken(name, parse_expiry(expiry) or _U64_MAX))
    render.emit(out, {"name": name, "token": raw.token}) if out == "json" else click.echo(raw.token)


@client_command(pat, "delete")
@click.argument("name")
def pat_delete(client, out, name):
    """Delete a personal access token."""
    client.call(wtok.DeletePersonalAccessToken(name))
    render.done(out, f"token {name!r} deleted", name=name)


# ---------------------------------------------------------------- contexts, login, logout


@click.group()
def context() -> None:
    """Saved connections: create, use, list, delete."""


@context.command("create")
@click.argument("name")
@click.option("--server", "context_server", help="HOST:PORT of the Iggy TCP listener.")
@click.option("--username", "context_username", help="Username shown by `context list` (not a credential).")
@click.option("--use", "make_current", is_flag=True, help="Make it the current context.")
@output_option
@click.pass_obj
def context_create(obj: Obj, name, context_server, context_username, make_current):
    """Save a context NAME (a server; `headwater login` adds a token)."""
    data = contexts.load_contexts()
    if name in data["contexts"]:
        fail(f"context {name!r} exists", EXIT_SERVER_ERROR)
    data["contexts"][name] = {"server": context_server or "127.0.0.1:8090", "username": context_username}
    if make_current or data["current"] is None:
        data["current"] = name
    contexts.save_contexts(data)
    render.done(obj.output, f"context {name!r} created", name=name, current=data["current"] == name)


@context.command("use")
@click.argument("name")
@output_option
@click.pass_obj
def context_use(obj: Obj, name):
    """Make NAME the current context."""
    data = contexts.load_contexts()
    if name not in data["contexts"] and name != contexts.DEFAULT_CONTEXT:
        fail(f"no context named {name!r}", EXIT_SERVER_ERROR)
    data["current"] = name
    contexts.save_contexts(data)
    render.done(obj.output, f"using context {name!r}", name=name)


@context.command("list")
@output_option
@click.pass_obj
def context_list(obj: Obj):
    """List the saved contexts (* = current)."""
    data = contexts.load_contexts()
    rows = [{"name": n, "server": c.get("server"), "username": c.get("username"),
             "current": n == data["current"], "logged_in": contexts.load_token(n) is not None}
            for n, c in sorted(data["contexts"].items())]
    render.emit(obj.output, rows, [("", lambda r: "*" if r["current"] else ""), ("name", lambda r: r["name"]),
                                   ("server", lambda r: r["server"]), ("username", lambda r: r["username"] or ""),
                                   ("token", lambda r: "yes" if r["logged_in"] else "no")])


@context.command("delete")
@click.argument("name")
@output_option
@click.pass_obj
def context_delete(obj: Obj, name):
    """Delete context NAME and its saved token (the token stays valid on the server: `logout` first)."""
    data = contexts.load_contexts()
    if name not in data["contexts"]:
        fail(f"no context named {name!r}", EXIT_SERVER_ERROR)
    del data["contexts"][name]
    if data["current"] == name:
        data["current"] = None
    contexts.save_contexts(data)
    contexts.delete_token(name)
    render.done(obj.output, f"context {name!r} deleted", name=name)


def _connect_plain(obj: Obj, target: contexts.Target):
    from ..client import Client

    try:
        return Client(target.server)
    except ConnectError as e:
        fail(str(e), EXIT_CONNECT)


def _delete_on_server(server: str, stored: dict[str, str]) -> bool:
    """Delete a saved personal access token on ``server``, logged in with that token itself;
    False (and a warning on stderr) when the server cannot be reached or refuses."""
    from ..client import Client

    try:
        with Client(server) as client:
            client.login_token(stored["token"])
            client.call(wtok.DeletePersonalAccessToken(stored["name"]))
            return True
    except (ServerError, AuthError, ConnectError) as e:
        click.echo(f"headwater: warning: the token {stored.get('name')!r} could not be deleted on the server: {e}",
                   err=True)
        return False


@click.command()
@click.option("--expiry", "-e", help="Token lifetime: 3600, 15m, 12h, 7d or never (default: never).")
@output_option
@connection_options
@click.pass_obj
def login(obj: Obj, expiry):
    """Log in with a username and password (flags, environment or prompt), create a personal
    access token and save it for the current context (OS keyring, else a 0600 file).
    A token saved by an earlier login of the context is deleted on the server (best effort)."""
    target = obj.target()
    username = target.username or click.prompt("Username")
    password = target.password or click.prompt("Password", hide_input=True)
    client = _connect_plain(obj, target)
    name = f"headwater-cli-{socket.gethostname()[:20]}-{secrets.token_hex(4)}"
    with exits_on_errors(), contextlib.closing(client):
        client.login(username, password)
        raw = client.call(wtok.CreatePersonalAccessToken(name, parse_expiry(expiry) or _U64_MAX))
    data = contexts.load_contexts()
    saved = data["contexts"].setdefault(target.context, {})
    previous = contexts.load_token(target.context)
    if previous is not None:  # a re-login replaces the saved token: retire the old one (best effort)
        _delete_on_server(saved.get("server") or target.server, previous)
    saved["server"] = target.server
    saved["username"] = username
    if data["current"] is None:
        data["current"] = target.context
    contexts.save_contexts(data)
    where = contexts.store_token(target.context, name, raw.token)
    render.done(obj.output, f"logged in to {target.server} as {username!r}; token {name!r} saved in {where}",
                context=target.context, server=target.server, token_name=name, stored_in=where)


@click.command()
@output_option
@connection_options
@click.pass_obj
def logout(obj: Obj):
    """Delete the current context's saved token, on the server and locally."""
    target = obj.target()
    stored = contexts.load_token(target.context)
    if stored is None:
        fail(f"context {target.context!r} has no saved token", EXIT_SERVER_ERROR)
    deleted_on_server = _delete_on_server(target.server, stored)
    contexts.delete_token(target.context)
    render.done(obj.output, f"logged out of context {target.context!r}", context=target.context,
                deleted_on_server=deleted_on_server)


# ---------------------------------------------------------------- whoami


@client_command(None, "me")
def me(client, out):
    """Show this connection as the server sees it (client id, user, address)."""
    render.emit_client(out, client.call(wsys.GetMe()))


GROUPS = (user, pat, context)
COMMANDS = (login, logout, me)
