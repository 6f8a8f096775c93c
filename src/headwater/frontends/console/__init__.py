"""The web console served at ``/console`` by the HTTP listener (see :mod:`.app`)."""

from .app import build_console

__all__ = ["build_console"]
