"""Which implementation of each hot loop is active: compiled (Cython) or pure Python.

Every compiled module ``headwater.….<name>_c`` has a pure-Python reference in the
module that imports it; the reference is the specification, and the tests check
that both give identical bytes and identical errors. ``HEADWATER_NO_EXTENSIONS=1``
in the environment forces the pure-Python code (read once, at import).

``load("headwater.codec._batch_c")`` returns the compiled module, or None when it
is disabled or not built; ``implementations()`` reports what each caller chose,
for ``headwater --version`` and the startup log.
"""

from __future__ import annotations

import importlib
import os

DISABLED = os.environ.get("HEADWATER_NO_EXTENSIONS", "") not in ("", "0")

_chosen: dict[str, str] = {}


def load(module: str):
    """The compiled module named ``module``, or None (disabled, not built, or raising
    ImportError: the pure-Python reference is then used, and :func:`implementations`
    records why)."""
    if DISABLED:
        _chosen[module] = "python (HEADWATER_NO_EXTENSIONS=1)"
        return None
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        # not built, or built but refusing to import (e.g. headwater.codec._xxh3_c, which the
        # compiled modules cimport, finding no usable xxHash library): say which
        missing = isinstance(exc, ModuleNotFoundError) and exc.name == module
        _chosen[module] = "python (extension not built)" if missing else f"python (extension failed to import: {exc})"
        return None
    _chosen[module] = "compiled"
    return mod


# the modules that choose an implementation at import (kept here so --version and the
# startup log can import them all before reporting)
CHOOSERS = ("headwater.codec.batch", "headwater.codec.kafka.convert", "headwater.storage.local.readahead",
            "headwater.storage.local.flusher")


def probe() -> str:
    """Import every module that chooses an implementation, then return :func:`summary`."""
    for name in CHOOSERS:
        try:
            importlib.import_module(name)
        except ImportError:  # pragma: no cover - a broken install shows in the summary
            pass
    return summary()


def implementations() -> dict[str, str]:
    """``{compiled module name: "compiled" | "python (why)"}`` for every module asked for so far."""
    return dict(_chosen)


def summary() -> str:
    """One line: ``compiled`` when every hot loop is compiled, ``python`` when none is
    (``python (why)`` when every module gave the same reason, e.g. ``python (extension
    not built)``), else ``mixed (name=..., ...)``; ``python`` when no compiled module
    exists at all."""
    kinds = implementations()
    if not kinds or all(v.startswith("python") for v in kinds.values()):
        reasons = set(kinds.values())
        return reasons.pop() if len(reasons) == 1 else "python" + (" (HEADWATER_NO_EXTENSIONS=1)" if DISABLED else "")
    if all(v == "compiled" for v in kinds.values()):
        return "compiled"
    return "mixed (" + ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in sorted(kinds.items())) + ")"
