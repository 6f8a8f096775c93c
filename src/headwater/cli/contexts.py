"""Where the client commands connect and who they are: flags, environment, saved contexts.

Precedence for the server: ``--server`` > ``HEADWATER_SERVER`` > the context's
server > ``127.0.0.1:8090``. For credentials: ``--username/--password`` >
``--token`` > ``HEADWATER_USERNAME/HEADWATER_PASSWORD`` > ``HEADWATER_TOKEN`` > the
context's stored personal access token (``headwater login``). The username and the password are
taken field by field, as Iggy's CLI does (each flag has its variable): ``-p`` alone uses
``HEADWATER_USERNAME`` for the username, ``-u`` alone ``HEADWATER_PASSWORD`` (or a prompt on a
terminal when that is not set).

Files, under the user's config directory (``click.get_app_dir("headwater")``:
``$XDG_CONFIG_HOME/headwater`` or ``~/.config/headwater`` on Linux)::

    contexts.json          {"current": NAME, "contexts": {NAME: {"server": ..., "username": ...}}}
    tokens/NAME.json       {"name": PAT name, "token": PAT}, mode 0600 (directory 0700),
                           only when no OS keyring is usable

A token goes to the OS keyring (``keyring``, service ``headwater``, user = context
name) when one is usable; "no backend" (the fail or null backend, or one that
raises) counts as absent and the 0600 file is used instead. keyrings.alt's file
backends (PlaintextKeyring, a plaintext file; EncryptedKeyring) count as absent too
when keyring picked them by itself; they are used only when the user chose a backend
with ``PYTHON_KEYRING_BACKEND``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import click

DEFAULT_CONTEXT = "default"
KEYRING_SERVICE = "headwater"
ENV_SERVER = "HEADWATER_SERVER"
ENV_USERNAME = "HEADWATER_USERNAME"
ENV_PASSWORD = "HEADWATER_PASSWORD"
ENV_TOKEN = "HEADWATER_TOKEN"


def config_dir() -> str:
    return click.get_app_dir("headwater")


def _contexts_path() -> str:
    return os.path.join(config_dir(), "contexts.json")


def load_contexts() -> dict[str, Any]:
    try:
        with open(_contexts_path(), encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {"current": None, "contexts": {}}
    except (OSError, ValueError) as e:
        raise click.ClickException(f"cannot read {_contexts_path()}: {e}") from None
    data.setdefault("current", None)
    data.setdefault("contexts", {})
    return data


def save_contexts(data: dict[str, Any]) -> None:
    os.makedirs(config_dir(), mode=0o700, exist_ok=True)
    tmp = _contexts_path() + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, _contexts_path())


# ---------------------------------------------------------------- token storage


def _keyring():
    """The OS keyring module when a real backend is usable, else None."""
    try:
        import keyring
        from keyring.backends import fail, null
    except Exception:  # not installed or broken: no keyring
        return None
    try:
        backend = keyring.get_keyring()
    except Exception:
        return None
    if isinstance(backend, (fail.Keyring, null.Keyring)):
        return None
    if getattr(backend, "backends", None) == []:  # a chainer with nothing to chain
        return None
    if not os.environ.get("PYTHON_KEYRING_BACKEND") and _only_plaintext_files(backend):
        return None  # keyrings.alt's file backends are no safer than our 0600 file unless asked for
    return keyring


def _only_plaintext_files(backend) -> bool:
    """True when ``backend`` (or every backend a chainer holds) is one of keyrings.alt's
    file keyrings (``keyrings.alt.file``: PlaintextKeyring, EncryptedKeyring)."""
    members = getattr(backend, "backends", None) or [backend]
    return all(type(b).__module__.startswith("keyrings.alt.file") for b in members)


def token_file(context: str) -> str:
    return os.path.join(config_dir(), "tokens", f"{context}.json")


def store_token(context: str, name: str, token: str) -> str:
    """Save the context's PAT; returns where (``keyring`` or the file path)."""
    payload = json.dumps({"name": name, "token": token})
    kr = _keyring()
    if kr is not None:
        try:
            kr.set_password(KEYRING_SERVICE, context, payload)
            return "keyring"
        except Exception:
            pass  # a backend that cannot store: fall back to the file
    path = token_file(context)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    os.chmod(os.path.dirname(path), 0o700)
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(payload)
    os.chmod(path + ".tmp", 0o600)
    os.replace(path + ".tmp", path)
    return path


def load_token(context: str) -> dict[str, str] | None:
    """The context's saved ``{"name", "token"}``, or None."""
    kr = _keyring()
    if kr is not None:
        try:
            raw = kr.get_password(KEYRING_SERVICE, context)
        except Exception:
            raw = None
        if raw:
            return json.loads(raw)
    try:
        with open(token_file(context), encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise click.ClickException(f"cannot read {token_file(context)}: {e}") from None


def delete_token(context: str) -> bool:
    """Remove the context's saved token from the keyring and the file; True if one was there."""
    found = False
    kr = _keyring()
    if kr is not None:
        try:
            if kr.get_password(KEYRING_SERVICE, context):
                kr.delete_password(KEYRING_SERVICE, context)
                found = True
        except Exception:
            pass
    try:
        os.unlink(token_file(context))
        found = True
    except FileNotFoundError:
        pass
    return found


# ---------------------------------------------------------------- resolution


@dataclass
class Target:
    """Where to connect and how to log in (``username``/``password`` or ``token``, or nothing)."""

    server: str
    context: str
    username: str | None = None
    password: str | None = None
    token: str | None = None


def resolve(server: str | None, username: str | None, password: str | None, token: str | None,
            context: str | None) -> Target:
    """Apply the precedence of the module doc."""
    data = load_contexts()
    name = context or data.get("current") or DEFAULT_CONTEXT
    if context and context not in data["contexts"]:
        raise click.UsageError(f"no context named {context!r} (headwater context list)")
    saved = data["contexts"].get(name, {})
    target = Target(server or os.environ.get(ENV_SERVER) or saved.get("server") or "127.0.0.1:8090", name)
    if username or password:
        target.username = username or os.environ.get(ENV_USERNAME)
        target.password = password or os.environ.get(ENV_PASSWORD)
    elif token:
        target.token = token
    elif os.environ.get(ENV_USERNAME) or os.environ.get(ENV_PASSWORD):
        target.username, target.password = os.environ.get(ENV_USERNAME), os.environ.get(ENV_PASSWORD)
    elif os.environ.get(ENV_TOKEN):
        target.token = os.environ[ENV_TOKEN]
    else:
        stored = load_token(name)
        if stored:
            target.token = stored["token"]
    return target
