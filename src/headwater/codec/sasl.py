"""SASL messages: PLAIN (RFC 4616) and SCRAM (RFC 5802, RFC 7677), parsed and built as bytes.

Sans-I/O: no keys, no users, no clock; ``core.sasl`` runs the exchanges.

PLAIN, one client message, UTF-8::

    [authzid] NUL authcid NUL passwd

SCRAM (``attr=value`` pairs joined by ``,``; a SASL name escapes ``=`` as ``=3D``
and ``,`` as ``=2C``)::

    client-first  = gs2-header client-first-bare
    gs2-header    = ("n" | "y") "," ["a=" saslname] ","     (no channel binding: "p=" is refused)
    client-first-bare = "n=" saslname "," "r=" c-nonce ["," extensions]
    server-first  = "r=" c-nonce s-nonce "," "s=" base64(salt) "," "i=" iterations
    client-final  = "c=" base64(gs2-header) "," "r=" nonce ["," extensions] "," "p=" base64(proof)
    server-final  = "v=" base64(server-signature) | "e=" error-value

Kafka's SCRAM extensions (KIP-84's ``tokenauth=true`` for delegation tokens) ride
as extra ``key=value`` attributes in client-first-bare.

Every parse error is ``SaslMessageError`` (a ValueError) with what was wrong.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field


class SaslMessageError(ValueError):
    """A SASL message that does not follow its grammar."""


# ------------------------------------------------------------------ PLAIN


@dataclass(frozen=True, slots=True)
class PlainMessage:
    authzid: str
    username: str
    password: str


def parse_plain(token: bytes) -> PlainMessage:
    """``[authzid] NUL authcid NUL passwd`` (UTF-8, no NUL inside a field; authcid and passwd not empty)."""
    try:
        text = bytes(token).decode("utf-8")
    except UnicodeDecodeError as e:
        raise SaslMessageError(f"PLAIN message is not UTF-8: {e}") from None
    parts = text.split("\0")
    if len(parts) != 3:
        raise SaslMessageError(f"PLAIN message has {len(parts) - 1} NUL separators, expected 2")
    authzid, username, password = parts
    if not username:
        raise SaslMessageError("PLAIN message has an empty username")
    if not password:
        raise SaslMessageError("PLAIN message has an empty password")
    return PlainMessage(authzid, username, password)


def build_plain(message: PlainMessage) -> bytes:
    return f"{message.authzid}\0{message.username}\0{message.password}".encode()


# ------------------------------------------------------------------ SCRAM names and attributes


def escape_saslname(name: str) -> str:
    """RFC 5802 saslname: ``=`` -> ``=3D``, ``,`` -> ``=2C`` (``=`` first)."""
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_saslname(value: str) -> str:
    """Inverse of :func:`escape_saslname`; any other ``=`` sequence is an error."""
    out = []
    i = 0
    while i < len(value):
        c = value[i]
        if c == "=":
            seq = value[i : i + 3]
            if seq == "=3D":
                out.append("=")
            elif seq == "=2C":
                out.append(",")
            else:
                raise SaslMessageError(f"invalid escape {seq!r} in SASL name")
            i += 3
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _attributes(text: str, what: str) -> list[tuple[str, str]]:
    pairs = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise SaslMessageError(f"{what}: {part!r} is not attr=value")
        pairs.append((key, value))
    return pairs


def _text(token: bytes, what: str) -> str:
    try:
        text = bytes(token).decode("utf-8")
    except UnicodeDecodeError as e:
        raise SaslMessageError(f"{what} is not UTF-8: {e}") from None
    if not text:
        raise SaslMessageError(f"{what} is empty")
    return text


def _b64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as e:
        raise SaslMessageError(f"{what} is not base64: {e}") from None


def _nonce(value: str) -> str:
    if not value or not all("\x21" <= c <= "\x7e" and c != "," for c in value):
        raise SaslMessageError("nonce must be printable ASCII without ','")
    return value


def _b64text(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# ------------------------------------------------------------------ SCRAM messages


@dataclass(frozen=True, slots=True)
class ClientFirst:
    gs2_header: str  # "n,," or "n,a=NAME," ("y" accepted in place of "n")
    authzid: str  # "" when absent
    username: str
    nonce: str
    extensions: dict[str, str] = field(default_factory=dict)

    @property
    def bare(self) -> str:
        """client-first-message-bare, as it enters the AuthMessage."""
        parts = [f"n={escape_saslname(self.username)}", f"r={self.nonce}"]
        parts += [f"{k}={v}" for k, v in self.extensions.items()]
        return ",".join(parts)


def parse_client_first(token: bytes) -> ClientFirst:
    text = _text(token, "client-first-message")
    flag, sep, rest = text.partition(",")
    if not sep:
        raise SaslMessageError("client-first-message has no GS2 header")
    if flag.startswith("p="):
        raise SaslMessageError("channel binding is not supported")
    if flag not in ("n", "y"):
        raise SaslMessageError(f"invalid GS2 channel-binding flag {flag!r}")
    authz, sep, bare = rest.partition(",")
    if not sep:
        raise SaslMessageError("client-first-message has no GS2 header end")
    authzid = ""
    if authz:
        if not authz.startswith("a="):
            raise SaslMessageError(f"invalid GS2 authzid {authz!r}")
        authzid = unescape_saslname(authz[2:])
    pairs = _attributes(bare, "client-first-message-bare")
    if pairs[0][0] == "m":
        raise SaslMessageError("mandatory extension 'm' is not supported")
    if len(pairs) < 2 or pairs[0][0] != "n" or pairs[1][0] != "r":
        raise SaslMessageError("client-first-message-bare must start with n=...,r=...")
    username = unescape_saslname(pairs[0][1])
    if not username:
        raise SaslMessageError("empty username")
    extensions = {}
    for key, value in pairs[2:]:
        if key in extensions or len(key) == 1:
            raise SaslMessageError(f"invalid or repeated extension {key!r}")
        extensions[key] = value
    return ClientFirst(f"{flag},{authz},", authzid, username, _nonce(pairs[1][1]), extensions)


def build_client_first(msg: ClientFirst) -> bytes:
    return (msg.gs2_header + msg.bare).encode()


@dataclass(frozen=True, slots=True)
class ServerFirst:
    nonce: str  # the client's nonce followed by the server's
    salt: bytes
    iterations: int

    def text(self) -> str:
        return f"r={self.nonce},s={_b64text(self.salt)},i={self.iterations}"


def build_server_first(msg: ServerFirst) -> bytes:
    return msg.text().encode()


def parse_server_first(token: bytes) -> ServerFirst:
    pairs = _attributes(_text(token, "server-first-message"), "server-first-message")
    keys = [k for k, _ in pairs]
    if keys[:3] != ["r", "s", "i"]:
        raise SaslMessageError("server-first-message must be r=...,s=...,i=...")
    values = dict(pairs[:3])
    if not values["i"].isdigit() or not values["i"].isascii():
        raise SaslMessageError(f"iteration count {values['i']!r} is not a number")
    return ServerFirst(_nonce(values["r"]), _b64(values["s"], "salt"), int(values["i"]))


@dataclass(frozen=True, slots=True)
class ClientFinal:
    channel_binding: bytes  # the decoded c= attribute (the GS2 header for "n"/"y")
    nonce: str
    proof: bytes
    extensions: tuple[tuple[str, str], ...] = ()
    received: str = field(default="", compare=False)  # the parsed text without ",p=...", as sent

    @property
    def without_proof(self) -> str:
        """client-final-message-without-proof, as it enters the AuthMessage (as received, when parsed)."""
        if self.received:
            return self.received
        parts = [f"c={_b64text(self.channel_binding)}", f"r={self.nonce}"]
        parts += [f"{k}={v}" for k, v in self.extensions]
        return ",".join(parts)


def parse_client_final(token: bytes) -> ClientFinal:
    text = _text(token, "client-final-message")
    pairs = _attributes(text, "client-final-message")
    if len(pairs) < 3 or pairs[0][0] != "c" or pairs[1][0] != "r" or pairs[-1][0] != "p":
        raise SaslMessageError("client-final-message must be c=...,r=...[,ext],p=...")
    return ClientFinal(
        _b64(pairs[0][1], "channel binding"),
        _nonce(pairs[1][1]),
        _b64(pairs[-1][1], "proof"),
        tuple(pairs[2:-1]),
        text[: text.rindex(",p=")],
    )


def build_client_final(msg: ClientFinal) -> bytes:
    return f"{msg.without_proof},p={_b64text(msg.proof)}".encode()


def build_server_final(signature: bytes | None = None, error: str | None = None) -> bytes:
    """``v=SIGNATURE`` on success, ``e=ERROR`` (RFC 5802 server-error-value) on failure."""
    if error is not None:
        return f"e={error}".encode()
    assert signature is not None
    return f"v={_b64text(signature)}".encode()


def parse_server_final(token: bytes) -> tuple[bytes | None, str | None]:
    """(signature, None) or (None, error)."""
    text = _text(token, "server-final-message")
    key, sep, value = text.partition("=")
    if key == "v" and sep:
        return _b64(value, "server signature"), None
    if key == "e" and sep:
        return None, value
    raise SaslMessageError("server-final-message must be v=... or e=...")
