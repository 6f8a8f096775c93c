"""The byte inspector: a field tree of any Headwater or Kafka bytes, with offsets, sizes and checksums.

``inspect_bytes(data, kind)`` returns a :class:`~.tree.Node` tree; :func:`~.tree.render`
prints it. Kinds:

=================  ============================================================
``segment``        a segment ``.log``: stamped Iggy batches back to back
``index``          a segment ``.index``: 24-byte entries
``batch``          one Iggy batch (a SendMessages batch, a poll reply's batch)
``iggy``           captured Iggy frames (requests, replies, evictions)
``kafka-request``  a captured Kafka request, size prefix included
``kafka-response`` a captured Kafka response (needs ``api_key`` and ``api_version``)
``auto``           guess from the bytes (and the file name: ``.log``, ``.index``)
=================  ============================================================

Input may be raw bytes or hex text (whitespace, ``0x`` and ``:`` ignored; see
:func:`read_input`). A layout the bytes break raises :class:`LayoutError` with
the offset of the first offending byte; ``error.tree`` holds what was read
before it.
"""

from __future__ import annotations

import re

from . import iggy_batch, iggy_frame
from .tree import Cursor, LayoutError, Node, render, walk

__all__ = ["KINDS", "inspect_bytes", "read_input", "detect", "render", "Node", "LayoutError", "walk", "explain"]

def _kafka():
    """The Kafka layouts (:mod:`.kafka`), imported at the first Kafka input: they import kio's
    schemas (~0.5 s), which the command line's other commands should not wait for."""
    from . import kafka

    return kafka


KINDS = ("auto", "segment", "index", "batch", "iggy", "kafka-request", "kafka-response")

_HEX_TEXT = re.compile(rb"[0-9a-fA-Fx:\s]+")


def read_input(raw: bytes) -> bytes:
    """``raw`` itself, or the bytes it spells when it is hex text (``0a 1b``, ``0x0a1b``,
    ``0a:1b``; an even number of hex digits, nothing else but whitespace)."""
    if raw and _HEX_TEXT.fullmatch(raw):
        digits = re.sub(rb"0x|[:\s]", b"", raw)
        if digits and len(digits) % 2 == 0 and re.fullmatch(rb"[0-9a-fA-F]+", digits):
            return bytes.fromhex(digits.decode())
    return raw


def detect(data: bytes, filename: str = "") -> str:
    """The kind ``data`` most plausibly is; raises ValueError when none fits."""
    if filename.endswith(".index"):
        return "index"
    if filename.endswith(".log"):
        return "segment"
    if iggy_frame.looks_like_frame(data):
        return "iggy"
    if iggy_frame.looks_like_batch(data):
        length = int.from_bytes(data[32:40], "little")
        return "batch" if length == len(data) else "segment"
    if _kafka().looks_like_request(data):
        return "kafka-request"
    raise ValueError(
        "cannot tell what these bytes are (not an Iggy frame, batch or segment, nor a Kafka request); "
        "name the kind with --as (a Kafka response also needs --api-key and --api-version)"
    )


def inspect_bytes(data: bytes, kind: str = "auto", *, filename: str = "", api_key: int | None = None,
                  api_version: int | None = None, command: int | None = None) -> Node:
    """The field tree of ``data`` read as ``kind`` (see the module docstring).

    Raises :class:`LayoutError` (with ``.tree``) where the bytes break the layout, and
    ValueError for an unknown kind or missing ``api_key``/``api_version``."""
    if kind == "auto":
        kind = detect(data, filename)
    root: Node | None = None
    try:
        if kind == "segment":
            return iggy_batch.segment_file(data, filename or "segment")
        if kind == "index":
            return iggy_batch.index_file(data, filename or "index")
        if kind == "batch":
            root = Node("input", "bytes", "", 0, len(data))
            c = Cursor(data, root)
            node = iggy_batch.batch(c)
            if c.remaining:
                raise c.fail(f"{c.remaining} bytes after the batch (a segment? use --as segment)")
            return node
        if kind == "iggy":
            return iggy_frame.frames(data, command=command)
        if kind == "kafka-request":
            return _kafka().request(data)
        if kind == "kafka-response":
            if api_key is None or api_version is None:
                raise ValueError("a Kafka response does not name its API: give --api-key and --api-version")
            return _kafka().response(data, api_key, api_version)
    except LayoutError as e:
        if getattr(e, "tree", None) is None:
            e.tree = root
        raise
    raise ValueError(f"unknown kind {kind!r} (one of {', '.join(KINDS)})")


def explain(data: bytes, error: LayoutError, *, context: int = 16) -> str:
    """A hex excerpt around ``error.offset`` with a caret under the first offending byte."""
    at = min(error.offset, len(data))
    start = max(0, at - context) // 16 * 16
    stop = min(len(data), at + context + 1)
    lines = [f"the layout breaks at byte {at} (0x{at:04x}): {error.reason}"]
    for row in range(start, max(stop, start + 1), 16):
        chunk = data[row:row + 16]
        lines.append(f"{row:08x}  {chunk.hex(' ')}")
        if row <= at < row + 16:
            lines.append(" " * (10 + 3 * (at - row)) + "^^")
    if at >= len(data):
        lines.append(f"(the input ends at byte {len(data)})")
    return "\n".join(lines) + "\n"
