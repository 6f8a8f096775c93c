"""``headwater inspect``: print the field tree of a segment, index, batch, Iggy frame or Kafka message."""

from __future__ import annotations

import dataclasses
import json
import sys

import click

from .. import inspect as inspector
from .common import Obj

EXIT_DAMAGED = 1
"""The bytes break their layout, or a checksum does not match."""


def _as_json(node: inspector.Node) -> dict:
    return dataclasses.asdict(node)


@click.command("inspect")
@click.argument("source", type=click.Path(allow_dash=True, dir_okay=False))
@click.option("--as", "kind", type=click.Choice(inspector.KINDS), default="auto", show_default=True,
              help="What the bytes are (auto: guess from the bytes and the file name).")
@click.option("--api-key", type=int, help="Kafka response: the API key of the request it answers.")
@click.option("--api-version", type=int, help="Kafka response: the version of the request it answers.")
@click.option("--command", "command", type=int,
              help="Iggy reply to a NonReplicated (operation 2) request: the command code it answers.")
@click.option("--explain-error", is_flag=True,
              help="On a broken layout, print the tree read so far and point at the first offending byte.")
@click.option("--output", "-o", type=click.Choice(["text", "table", "json"]), default=None,
              help="text (the default; table is a synonym) or json; `headwater -o json inspect` works too.")
@click.pass_context
def inspect_command(ctx: click.Context, source, kind, api_key, api_version, command, explain_error, output) -> None:
    """Print every field of SOURCE (a file, or - for stdin; raw bytes or hex text) with its
    type, decoded value, byte offset and size; checksums are recomputed and shown valid or not.

    \b
    Kinds: segment (.log), index (.index), batch (one Iggy batch), iggy (Iggy request,
    reply or eviction frames), kafka-request, kafka-response (with --api-key/--api-version).
    Exit status: 0 the layout holds and every checksum matches; 1 damage (the first
    offending byte is named); 2 usage (unknown kind, unreadable file).
    """
    if output is None:  # the root group's -o/--output (table or json)
        root = ctx.find_object(Obj)
        output = root.output if root is not None else "text"
    try:
        raw = sys.stdin.buffer.read() if source == "-" else open(source, "rb").read()
    except OSError as e:
        raise click.UsageError(f"cannot read {source}: {e.strerror}") from None
    data = inspector.read_input(raw)
    name = "" if source == "-" else source
    try:
        tree = inspector.inspect_bytes(data, kind, filename=name, api_key=api_key, api_version=api_version,
                                       command=command)
    except ValueError as e:
        if not isinstance(e, inspector.LayoutError):
            raise click.UsageError(str(e)) from None
        partial = getattr(e, "tree", None)
        if output == "json":
            click.echo(json.dumps({"error": {"offset": e.offset, "reason": e.reason},
                                   "tree": _as_json(partial) if partial else None}, indent=2))
        else:
            if explain_error and partial is not None:
                click.echo(inspector.render(partial), nl=False)
                click.echo()
            click.echo(inspector.explain(data, e) if explain_error else f"error: {e}", err=not explain_error,
                       nl=not explain_error)
        sys.exit(EXIT_DAMAGED)
    bad = [n for _, n in inspector.walk(tree) if n.check.startswith("INVALID")]
    if output == "json":
        click.echo(json.dumps(_as_json(tree), indent=2))
    else:
        click.echo(inspector.render(tree), nl=False)
        for n in bad:
            click.echo(f"checksum mismatch: {n.name} at byte {n.offset} (0x{n.offset:04x}): {n.check}", err=True)
    if bad:
        sys.exit(EXIT_DAMAGED)


COMMANDS = (inspect_command,)
"""What :mod:`.main` adds to the ``headwater`` group."""
