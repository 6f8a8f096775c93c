"""A small blocking client of Headwater's (and Iggy's) binary protocol 0.11.0 over TCP.

It frames requests and decodes replies with our own codec (:mod:`headwater.codec.iggy`);
the command line (:mod:`headwater.cli`) is its user. :class:`~.connection.Client` is the
one class; errors are in :mod:`.connection` too.
"""

from .connection import (
    AuthError,
    Client,
    ClientError,
    ConnectError,
    ServerError,
    parse_address,
)

__all__ = ["AuthError", "Client", "ClientError", "ConnectError", "ServerError", "parse_address"]
