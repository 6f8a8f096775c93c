"""Structured logging: one line per event, ``key=value`` text or JSON.

Callers pass structured fields as ``extra={"kv": {...}}``.
"""

from __future__ import annotations

import json
import logging
import sys
import time

from .config import LOG_FORMATS


class _Formatter(logging.Formatter):
    def __init__(self, as_json: bool):
        super().__init__()
        self.as_json = as_json

    def format(self, record: logging.LogRecord) -> str:
        kv = getattr(record, "kv", None) or {}
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        if self.as_json:
            doc = {"ts": ts, "level": record.levelname.lower(), "logger": record.name, "msg": record.getMessage(), **kv}
            if record.exc_info:
                doc["exc"] = self.formatException(record.exc_info)
            return json.dumps(doc, default=str)
        fields = " ".join(f"{k}={json.dumps(v, default=str) if isinstance(v, str) and (' ' in v or not v) else v}" for k, v in kv.items())
        line = f"{ts} {record.levelname.lower():5} {record.name}: {record.getMessage()}" + (f" {fields}" if fields else "")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup(level: str = "info", fmt: str = "text") -> None:
    """Send ``headwater.*`` logs to stderr at ``level`` (debug, info, warning, error,
    critical) as ``fmt`` (text or json). Raises ValueError for anything else (the
    config has already refused it, naming the key)."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"unknown log format {fmt!r}")
    if not isinstance(logging.getLevelName(level.upper()), int):
        raise ValueError(f"unknown log level {level!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter(fmt == "json"))
    root = logging.getLogger("headwater")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
