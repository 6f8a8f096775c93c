"""Iggy command handlers, one module per command family; importing registers them."""

from . import groups, messages, streams, system, topics, users  # noqa: F401  (offsets live in messages.py)
