"""Iggy command handlers, one module per command family; importing registers them."""

from . import groups, messages, offsets, streams, system, topics, users  # noqa: F401
