"""``python -m headwater`` and the ``headwater`` command (:func:`run`).

The command's modules take a while to import (~1 s on a loaded machine: click, the
protocol front-ends, the event loop); a SIGINT (Ctrl-C) meanwhile raises
KeyboardInterrupt here, before the command's own handling exists. It gets what a
later one gets: one line on stderr and exit status 130, no traceback.

``serve`` also takes SIGTERM (a supervisor's stop) from the start: until the server takes
both signals over once it serves, a SIGTERM raises :class:`StartTerminated` (a
KeyboardInterrupt, so every clean-up a SIGINT runs runs), and the start ends with one
line and exit status 143 (128 + 15) instead of being killed halfway (-15).

The command never imports hypothesis (:func:`_without_hypothesis`), and ``serve`` imports its
modules with the cyclic garbage collector off (:func:`server_imported`).
"""

import gc
import signal
import sys
from typing import NoReturn


_INTERRUPTED = "headwater: start-up interrupted ({}); nothing was served"
INTERRUPTED_START = _INTERRUPTED.format("SIGINT")
"""The line ``serve`` prints for a SIGINT before the server took SIGINT over (exit 130)."""


class StartTerminated(KeyboardInterrupt):
    """SIGTERM during ``serve``'s start, before the server took SIGTERM over."""


def _on_sigterm(_signum, _frame) -> None:
    raise StartTerminated()


def interrupted_start(exc: BaseException) -> NoReturn:
    """One line on stderr for a start stopped by ``exc`` (SIGINT or SIGTERM), then exit with
    the shell's status for that signal (130 or 143). What started was stopped on the way out
    (the clean-ups a KeyboardInterrupt runs)."""
    term = isinstance(exc, StartTerminated)
    sys.stderr.write(_INTERRUPTED.format("SIGTERM" if term else "SIGINT") + "\n")
    sys.exit(143 if term else 130)


def _without_hypothesis() -> None:
    """Make ``import hypothesis`` fail in this process (a ``None`` entry in ``sys.modules`` is
    the import system's "not importable": ImportError), unless something imported it already.

    Kafka's schema package kio (``kio.static._phantom``) imports ``hypothesis.strategies``
    whenever it can and registers a strategy for each of its primitive types: with the test
    extra installed, that is 0.1-0.4 s of every ``serve`` and client command, and about 2 s
    more plus a ``.hypothesis/`` directory in the working directory when that directory has
    no hypothesis cache yet (the text strategy builds its character table there). kio takes
    the ImportError as "hypothesis is not installed", as in a production install. The command
    generates no test data; tests that want kio's strategies import hypothesis in their own
    process first."""
    sys.modules.setdefault("hypothesis", None)


def server_imported() -> None:
    """``serve`` calls this once the server's modules are imported. Until then (from
    :func:`run`) the cyclic collector is off: the imports make some 75k objects that live as
    long as the process, and the ~180 automatic collections they would trigger, each walking
    what is there so far, were ~0.1 s of a start's CPU. Now one collection frees the imports'
    garbage, :func:`gc.freeze` keeps what survives out of every later collection's walk (the
    start's own collect-and-freeze in ``app.serve`` then walks only what the start made), and
    the collector runs again. A no-op where the collector is on (``serve`` not started by
    :func:`run`, e.g. in a test's process)."""
    if not gc.isenabled():
        gc.collect()
        gc.freeze()
        gc.enable()


def not_serving() -> None:
    """Undo what :func:`run` set up for ``serve`` when the command is not ``serve`` after all
    (``serve`` was another argument, e.g. a stream's name): the cyclic collector back on, and
    SIGTERM back to its default (the command ends as any other command does on SIGTERM, not as
    an interrupted start or a Ctrl-C: a ``message poll serve serve --follow`` had exited 0)."""
    gc.enable()
    if signal.getsignal(signal.SIGTERM) is _on_sigterm:  # run()'s (not a test process's own handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def run() -> None:
    _without_hypothesis()
    starting = "serve" in sys.argv[1:]
    if starting:
        signal.signal(signal.SIGTERM, _on_sigterm)
        gc.disable()  # until server_imported() (or not_serving(): another command)
    try:
        from .cli.main import main
    except KeyboardInterrupt as exc:
        if starting:
            interrupted_start(exc)
        sys.stderr.write("headwater: interrupted (SIGINT)\n")
        sys.exit(130)
    main()


if __name__ == "__main__":
    # ``python -m headwater`` runs this file as ``__main__``, a module apart from
    # ``headwater.__main__`` that the command imports: run the latter's, so that
    # StartTerminated is one class for the handler and the command
    from headwater.__main__ import run as _run

    _run()
