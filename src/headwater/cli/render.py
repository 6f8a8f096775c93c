"""Output of the client commands: rich tables for people, JSON (``--output json``) for programs.

JSON shapes: a list command prints a JSON array of objects, a get/create command
one object, an action without a reply ``{"ok": true, ...}``. Field names are the
codec's (``id``, ``created_at``, ``size_bytes``, ``messages_count``); times are
microseconds since the epoch as Iggy sends them; options blocks are decoded to
``{key: value}``.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
import os
import sys
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import click

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

from ..codec.errors import CodecError
from ..codec.headers import decode_options_block, unpack_value

OUTPUTS = ("table", "json")


PIPE_WIDTH = 1000
"""Columns a table may take when the output is not a terminal and ``COLUMNS`` is not set (rich
would assume 80 and wrap cells over several lines, which a pipe to grep or awk then splits)."""


def console(err: bool = False) -> Console:
    """A console on the current stdout/stderr (so click's test runner captures it); on a pipe or
    file, tables are :data:`PIPE_WIDTH` wide at most instead of 80 (``COLUMNS`` still decides
    when set). rich is imported here, at a command's first table: ``serve`` and ``--version``
    never load it."""
    from rich.console import Console

    out = sys.stderr if err else sys.stdout
    isatty = getattr(out, "isatty", None)
    width = PIPE_WIDTH if not (isatty and isatty()) and not os.environ.get("COLUMNS") else None
    return Console(file=out, soft_wrap=True, highlight=False, width=width)


def _table(title: str | None) -> Table:
    from rich.table import Table

    return Table(title=title, show_header=True)


def decode_options(block: bytes) -> dict[str, Any]:
    """An options TLV block as ``{key: python value}`` (raw hex for what does not decode)."""
    if not block:
        return {}
    try:
        return {k: _plain(unpack_value(kind, v)) for k, (kind, v) in decode_options_block(block).items()}
    except CodecError:
        return {"_raw_hex": bytes(block).hex()}


def _plain(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(raw).decode("ascii")}
    return value


def jsonable(value: Any) -> Any:
    """Dataclasses, enums, tuples and bytes as JSON values (``options`` fields decoded)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            name = f.name.rstrip("_")
            if f.name in ("options", "derived_options") and isinstance(v, (bytes, bytearray)):
                out[name] = decode_options(v)
            else:
                out[name] = jsonable(v)
        return out
    if isinstance(value, enum.Enum):
        return value.name.lower()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _plain(value)
    return value


def time_us(value: int) -> str:
    """Microseconds since the epoch as UTC text (``-`` for 0)."""
    if not value:
        return "-"
    try:
        return datetime.fromtimestamp(value / 1e6, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return str(value)


def duration_us(value: int) -> str:
    """A duration in microseconds as ``7d``, ``1h30m``, ``45s`` (``never`` for 0 and u64::MAX)."""
    if value in (0, (1 << 64) - 1):
        return "never"
    seconds, rest = divmod(value, 1_000_000)
    if rest or not seconds:
        return f"{value} µs"
    parts = []
    for unit, length in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, length)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def size(value: int) -> str:
    """Bytes in the largest binary unit that keeps a number >= 1."""
    n = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(value)  # pragma: no cover


def emit(output: str, data: Any, columns: Sequence[tuple[str, Any]] | None = None,
         rows: Iterable[Any] | None = None, title: str | None = None) -> None:
    """Print ``data`` as JSON, or ``rows`` as a table of ``columns`` ``(header, getter)``.

    Without ``columns`` the table output is a two-column field/value table of
    ``jsonable(data)`` (an object) or a line of text (a string).
    """
    if output == "json":
        click.echo(json.dumps(jsonable(data), indent=2, ensure_ascii=False, default=str))
        return
    if columns is None:
        plain = jsonable(data)
        if isinstance(plain, dict):
            table = _table(title)
            table.add_column("field")
            table.add_column("value", overflow="fold")
            for k, v in plain.items():
                table.add_row(str(k), v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))
            console().print(table)
        else:
            click.echo(plain if isinstance(plain, str) else json.dumps(plain))
        return
    table = _table(title)
    for header, _ in columns:
        table.add_column(header, overflow="fold")
    for row in rows if rows is not None else data:
        table.add_row(*(str(getter(row)) for _, getter in columns))
    console().print(table)


TRANSPORTS = {1: "tcp", 2: "quic", 3: "http", 4: "websocket"}
"""Iggy's transport codes (GetMe/GetClient ``transport`` u8) and their names."""


def transport_name(code: int) -> str | int:
    """``1`` -> ``tcp`` (an unknown code stays a number)."""
    return TRANSPORTS.get(code, code)


def emit_client(output: str, info: Any) -> None:
    """A GetMe/GetClient reply: JSON keeps Iggy's transport number, the table shows its name."""
    if output == "json":
        emit(output, info)
    else:
        emit(output, {**jsonable(info), "transport": transport_name(info.transport)})


def done(output: str, message: str, **fields: Any) -> None:
    """An action that has no reply payload: a line of text, or ``{"ok": true, ...}``."""
    if output == "json":
        click.echo(json.dumps({"ok": True, **jsonable(fields)}, ensure_ascii=False))
    else:
        click.echo(message)
