"""``python -m headwater`` and the ``headwater`` command (:func:`run`).

The command's modules take a while to import (~1 s on a loaded machine: click, the
protocol front-ends, the event loop); a SIGINT (Ctrl-C) meanwhile raises
KeyboardInterrupt here, before the command's own handling exists. It gets what a
later one gets: one line on stderr and exit status 130, no traceback.
"""

import sys


INTERRUPTED_START = "headwater: start-up interrupted (SIGINT); nothing was served"
"""The line ``serve`` prints for a SIGINT before the server took SIGINT over (exit 130)."""


def run() -> None:
    try:
        from .cli.main import main
    except KeyboardInterrupt:
        starting = "serve" in sys.argv[1:]
        sys.stderr.write((INTERRUPTED_START if starting else "headwater: interrupted (SIGINT)") + "\n")
        sys.exit(130)
    main()


if __name__ == "__main__":
    run()
