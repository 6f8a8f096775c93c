"""Offline tools on a data directory: ``verify``, ``dump``, ``admin reset-root-password``.

Each takes the data directory's lock first (:mod:`headwater.storage.local.lock`), so
it is refused with one line, exit 4, while a server holds the directory, and a
server cannot start while a tool runs. ``verify`` and ``dump`` change no file
(the lock file gets the tool's PID, as for a server).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

import click
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from ..core.users import ROOT_USER_ID, Users, hash_password, validate_password
from ..core.errors import BrokerError
from ..storage.api import StorageError
from ..storage.local import check
from ..storage.local.lock import DataDirLock, DataDirLocked
from ..storage.local.metadata import LocalMetadataStore, load_read_only
from . import messages_view, render
from .common import EXIT_DATA_DIR, EXIT_SERVER_ERROR, U32, U64, Obj, fail, output_option

_DATA_DIR = click.Path(file_okay=False, dir_okay=True, exists=True)


@contextmanager
def locked(data_dir: str) -> Iterator[str]:
    """Hold ``data_dir``'s lock for the block; exits 4 when a server (or another tool) holds it."""
    path = os.path.abspath(data_dir)
    if not (os.path.isdir(os.path.join(path, "metadata")) or os.path.isdir(os.path.join(path, "streams"))):
        fail(f"{path} is not a Headwater data directory (no metadata/ or streams/)", EXIT_DATA_DIR)
    try:
        lock = DataDirLock.acquire(path)
    except DataDirLocked as e:
        fail(f"{e}: stop the server first", EXIT_DATA_DIR)
    except StorageError as e:
        fail(str(e), EXIT_DATA_DIR)
    try:
        yield path
    finally:
        lock.release()


def _progress() -> Progress:
    return Progress(TextColumn("[bold]verify"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                    TimeRemainingColumn(), console=render.console(err=True), transient=False)


@click.command()
@click.argument("data_dir", type=_DATA_DIR)
@output_option
@click.pass_obj
def verify(obj: Obj, data_dir):
    """Check every segment, index and metadata journal of DATA_DIR: frame and batch xxh3
    checksums, offset continuity, index entries, journal crc32s. Exit 1 on damage, naming
    the file and byte; a torn tail a crash left (cut at the next start) is a note."""
    with locked(data_dir) as path:
        total = check.files_size(path)
        with _progress() as bar:
            task = bar.add_task("verify", total=total)
            report = check.check_data_dir(path, lambda n: bar.advance(task, n))
    damaged = report.damaged
    summary = {"ok": not damaged, "data_dir": path, "segments": report.segments, "indexes": report.indexes,
               "metadata_files": report.metadata_files, "batches": report.batches, "messages": report.messages,
               "bytes": report.bytes_checked,
               "findings": [{"path": f.path, "byte": f.position, "message": f.message, "damage": f.damage}
                            for f in report.findings]}
    if obj.output == "json":
        render.emit("json", summary)
    else:
        click.echo(f"{path}: {report.segments} segments, {report.indexes} indexes, {report.metadata_files} "
                   f"metadata files, {report.batches} batches, {report.messages} messages, "
                   f"{report.bytes_checked} bytes checked")
        for f in report.findings:
            click.echo(f"{'DAMAGE' if f.damage else 'note'}: {f.path}: byte {f.position}: {f.message}")
        click.echo("damaged" if damaged else "ok")
    if damaged:
        raise SystemExit(EXIT_SERVER_ERROR)


def _find(records: dict, prefix: str, ident: str, what: str) -> dict:
    found = [v for k, v in records.items() if k.startswith(prefix) and k.count("/") == prefix.count("/")
             and (str(v["id"]) == ident or v["name"] == ident)]
    by_id = [v for v in found if str(v["id"]) == ident]
    if not found:
        fail(f"no {what} {ident!r} in the catalog", EXIT_SERVER_ERROR)
    return (by_id or found)[0]


@click.command()
@click.argument("data_dir", type=_DATA_DIR)
@click.option("--stream", "stream_id", required=True, help="Stream id or name.")
@click.option("--topic", "topic_id", required=True, help="Topic id or name.")
@click.option("--partition", "partition_id", type=U32, required=True)
@click.option("--from", "from_offset", type=U64, default=0, show_default=True)
@click.option("--count", "-c", type=click.IntRange(1), help="At most this many messages (default: all).")
@click.option("--format", "fmt", type=click.Choice(messages_view.FORMATS), default="text", show_default=True)
@output_option
@click.pass_obj
def dump(obj: Obj, data_dir, stream_id, topic_id, partition_id, from_offset, count, fmt):
    """Print the messages of one partition of DATA_DIR from an offset, without a server
    (the same lines, or JSON objects, as `message poll`)."""
    with locked(data_dir) as path:
        try:
            records = load_read_only(os.path.join(path, "metadata"), "catalog")
        except StorageError as e:
            fail(str(e), EXIT_SERVER_ERROR)
        stream = _find(records, "stream/", stream_id, "stream")
        topic = _find(records, f"topic/{stream['id']}/", topic_id, f"topic in stream {stream['name']!r}")
        if str(partition_id) not in topic.get("partitions", {}):
            fail(f"topic {topic['name']!r} has no partition {partition_id}", EXIT_SERVER_ERROR)
        directory = os.path.join(path, "streams", str(stream["id"]), "topics", str(topic["id"]), "partitions",
                                 str(partition_id))
        shown = 0
        try:
            for one in check.read_partition(directory, from_offset):
                for m in messages_view.messages_of(one, from_offset, partition_id):
                    messages_view.show(m, fmt, obj.output)
                    shown += 1
                    if count is not None and shown >= count:
                        return
        except (ValueError, OSError) as e:
            fail(f"damaged data: {e}", EXIT_SERVER_ERROR)


@click.group()
def admin() -> None:
    """Offline administration of a data directory (no server running)."""


@admin.command("reset-root-password")
@click.argument("data_dir", type=_DATA_DIR)
@click.option("--password", help="The new password (prompted for when not given).")
@output_option
@click.pass_obj
def reset_root_password(obj: Obj, data_dir, password):
    """Set the root user's password in DATA_DIR (Argon2id, as the server stores it)."""
    if password is None:
        password = click.prompt("New root password", hide_input=True, confirmation_prompt=True)
    try:
        validate_password(password)
    except BrokerError as e:
        raise click.BadParameter(str(e), param_hint="--password") from None
    with locked(data_dir) as path:
        try:
            store = LocalMetadataStore(os.path.join(path, "metadata"), "catalog")
        except StorageError as e:
            fail(str(e), EXIT_SERVER_ERROR)
        try:
            users = Users(store.put)
            users.load(store.load())
            root = users.find(ROOT_USER_ID)
            if root is None:
                fail("no root user in this data directory (never started?)", EXIT_SERVER_ERROR)
            users.set_password_hash(ROOT_USER_ID, hash_password(password))
        except StorageError as e:
            fail(str(e), EXIT_SERVER_ERROR)
        finally:
            store.close()
    render.done(obj.output, f"password of root user {root.username!r} reset", username=root.username)


COMMANDS = (verify, dump)
GROUPS = (admin,)
