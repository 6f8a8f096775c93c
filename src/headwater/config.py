"""Server configuration: frozen dataclasses with embedded defaults.

Precedence, lowest to highest: defaults < TOML file (``--config``) <
environment (``HEADWATER_<SECTION>_<KEY>``, e.g. ``HEADWATER_TCP_ADDRESS``) <
command-line flags. Unknown keys in the file or environment are errors, so a
typo never silently leaves a default in force.

Every value is validated before the server touches its data directory or a
socket, and a :class:`ConfigError` names the key as the user wrote it
(``--tcp-address``, ``HEADWATER_TCP_ADDRESS`` or ``tcp.address in FILE``):
the type of every value given (in each layer), and for the final value of every
key: numbers (never negative; some keys have a higher minimum), addresses
(``HOST:PORT``, port 0..65535, an IP literal or a DNS name), the log level and
format, two enabled listeners on one port, and a data directory that exists
but is not a directory.

Example file::

    [system]
    data_dir = "local_data"
    [tcp]
    address = "0.0.0.0:8090"
    [kafka]
    enabled = false

``[http]`` (Iggy's HTTP REST API, port 3000) has Iggy's ``[http]``, ``[http.cors]``,
``[http.jwt]`` and ``[http.tls]`` keys flattened with prefixes: ``max_request_size``,
``cors_*``, ``jwt_*``, ``tls_*``; :class:`HttpConfig` lists them with their defaults.
CORS lists are comma-separated strings or TOML arrays of strings.

Connection limits (``max_connections``, ``max_connection_buffer_bytes``,
``frame_receive_timeout_s``, ``send_stall_timeout_s``, the idle timeouts) are
the same in ``[tcp]`` and ``[kafka]``; each 0 turns one off. They are enforced
in ``frontends/listener.py``; docs/gaps.md says where they differ from Iggy and
Kafka. ``[websocket]`` and ``[quic]`` connections obey ``[tcp]``'s limits.

TLS: ``tls_enabled``, ``tls_cert_file``, ``tls_key_file`` in ``[tcp]``,
``[websocket]`` and ``[kafka]``; ``cert_file``, ``key_file`` in ``[quic]`` (QUIC is
always TLS). An empty certificate path means the self-signed pair in
``<data_dir>/certs/`` (``frontends/tls.py``); an empty key path with a certificate
means the key is in the certificate's file.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import tomllib
from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

from .core.broker import MAX_PARTITIONS
from .core.catalog import validate_name


NOT_CONFIG_VARIABLES = frozenset({
    "HEADWATER_NO_EXTENSIONS",
    # the client commands' connection and credentials (``headwater.cli.contexts``)
    "HEADWATER_SERVER",
    "HEADWATER_USERNAME",
    "HEADWATER_PASSWORD",
    "HEADWATER_TOKEN",
})
"""``HEADWATER_*`` environment variables that are not settings (see ``headwater._native`` and
``headwater.cli.contexts``): ``serve`` ignores them."""


class ConfigError(ValueError):
    """A refused setting: ``option`` names it as the user gave it, ``problem`` says why.

    :func:`load` checks every setting before it raises: ``others`` holds the refused settings
    after this first one (empty when only one was refused); :meth:`every` gives them all.
    """

    def __init__(self, option: str, problem: str | None = None):
        if problem is None:  # a message already naming its option
            option, _, problem = option.partition(": ")
        super().__init__(f"{option}: {problem}" if problem else option)
        self.option = option
        self.problem = problem
        self.others: tuple[ConfigError, ...] = ()

    def every(self) -> tuple[ConfigError, ...]:
        """This refused setting and the others found in the same :func:`load`, in the order
        checked: each layer's values (file, environment, flags), then each key's final value."""
        return (self, *self.others)


class _Refusals:
    """The ConfigErrors of one :func:`load`, gathered so a user sees every bad setting at once."""

    def __init__(self) -> None:
        self.errors: list[ConfigError] = []

    def apply(self, cfg: Config, section: str, key: str, value: Any, where: str) -> Config:
        """:func:`_apply`, a refusal noted (``cfg`` returned unchanged)."""
        try:
            return _apply(cfg, section, key, value, where)
        except ConfigError as e:
            self.errors.append(e)
            return cfg

    def raise_any(self) -> None:
        """Raise the first refusal, the rest in its ``others``; nothing when there is none."""
        if self.errors:
            first = self.errors[0]
            first.others = tuple(self.errors[1:])
            raise first


LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
LOG_FORMATS = ("text", "json")


@dataclass(frozen=True)
class SystemConfig:
    data_dir: str = "local_data"
    validate_checksum: bool = True  # re-verify batches read from disk
    retention_interval_s: float = 60.0  # how often the segment cleaner runs
    token_cleaner_interval_s: float = 60.0
    # bytes of the most recently appended log data (all partitions together) left in the OS page
    # cache; older appended data is written back (sync_file_range) and dropped from the cache, so a
    # busy server reuses its cache pages instead of taking new ones. Not a sync: fsync semantics are
    # unchanged. 0 = off (the kernel alone decides). storage/local/writebehind.py says why.
    write_behind_cache_bytes: int = 256 << 20  # 2 GiB until session 15 (docs/benchmarks.md "Session 15")
    # a consumer reading data not in the page cache (what write-behind dropped) is read by the
    # worker threads with O_DIRECT into buffers they reuse, not through the page cache, so it
    # takes no new page-cache pages (storage/local/readahead.py). false = through the page cache
    # with the kernel reading ahead (POSIX_FADV_WILLNEED). Filesystems refusing O_DIRECT
    # read through the page cache either way.
    catchup_direct_io: bool = True
    # make each partition's next segment, and reserve its blocks (fallocate KEEP_SIZE), on a
    # worker thread before the roll, so no append on the event loop waits for ext4's block
    # allocation (storage/local/prealloc.py). false = off (the files are made at the roll).
    preallocate_next_segment: bool = True
    # bytes reserved ahead of the write position in a segment not made from a spare (a
    # partition's first, the active one after a restart), topped up every half of it; spares
    # are whole segments, made once the active segment is half written
    preallocate_window_bytes: int = 64 << 20
    # reserved, unwritten bytes all partitions together may hold; partitions past it reserve
    # nothing (as with preallocate_next_segment = false). 0 = reserve nothing
    preallocate_budget_bytes: int = 4 << 30


@dataclass(frozen=True)
class TcpConfig:
    enabled: bool = True
    address: str = "127.0.0.1:8090"
    max_frame_size: int = 64 * 1024 * 1024  # bytes, header included; larger frames close the connection
    session_reply_cache: int = 64  # cached metadata replies kept per client for deduplication
    heartbeat_interval_s: float = 0.0  # > 0: evict (reason 13, StaleClient) a connection silent for 1.2x this
    # connection limits (Headwater's own: Iggy's server has none of these); 0 turns one off
    max_connections: int = 10_000  # open connections; one accepted past this is closed at once (logged)
    max_connection_buffer_bytes: int = 4 * 1024 * 1024  # replies queued per connection before it stops reading
    frame_receive_timeout_s: float = 60.0  # a frame not whole this long after its first byte: connection closed
    send_stall_timeout_s: float = 60.0  # queued replies the client has not read from for this long: dropped
    idle_timeout_s: float = 0.0  # > 0: evict (reason 13) a connection with no request started for this long
    # fast-path SendMessages/PollMessages of a logged-in session served from the socket's read callback
    # (no task wake-up per request); false: every request through the connection's coroutine (same replies)
    serve_inline: bool = True
    # TLS (Iggy's [tcp.tls]); no cert file: a self-signed one is generated into <data_dir>/certs/ (see certs.py)
    tls_enabled: bool = False
    tls_cert_file: str = ""  # PEM certificate chain
    tls_key_file: str = ""  # PEM private key


@dataclass(frozen=True)
class KafkaConfig:
    enabled: bool = True
    address: str = "127.0.0.1:9092"
    auto_create_topics: bool = True
    default_partitions: int = 1
    stream: str = "kafka"  # the Iggy stream that holds topics created through Kafka
    max_request_size: int = 100 * 1024 * 1024
    advertised_address: str = ""  # HOST:PORT clients are told to connect to ("" = address; 0.0.0.0 -> 127.0.0.1)
    # consumer groups (Kafka's broker settings of the same names, group.*)
    group_initial_rebalance_delay_ms: int = 3_000  # a group's first rebalance waits this long for more joiners
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_max_size: int = 0  # members per group; 0 = unlimited
    offset_metadata_max_bytes: int = 4_096  # longer commit metadata gets OFFSET_METADATA_TOO_LARGE
    # Kafka's offsets.retention.minutes (KIP-211): offsets of a group Empty (or unknown) and not
    # committed this long are deleted, checked every offsets.retention.check.interval.ms
    offsets_retention_minutes: float = 10_080.0  # Kafka's is an int; fractions are accepted here
    offsets_retention_check_interval_ms: int = 600_000
    # transactions (Kafka's transaction.max.timeout.ms; a longer transaction.timeout.ms is refused)
    transaction_max_timeout_ms: int = 900_000
    # Kafka's transactional.id.expiration.ms: an id with no transaction in progress and no
    # coordinator activity this long is forgotten (producer id and epoch), checked every
    # transaction.remove.expired.transaction.cleanup.interval.ms
    transactional_id_expiration_ms: int = 604_800_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    # connection limits; 0 turns one off
    connections_max_idle_ms: int = 600_000  # Kafka's connections.max.idle.ms: close a connection idle this long
    max_connections: int = 10_000  # Kafka's max.connections (unlimited there); past it: closed at once (logged)
    max_connection_buffer_bytes: int = 4 * 1024 * 1024  # responses queued per connection before it stops reading
    frame_receive_timeout_s: float = 60.0  # a request not whole this long after its first byte: closed
    send_stall_timeout_s: float = 60.0  # queued responses the client has not read from for this long: dropped
    # TLS (clients: security.protocol=SSL); no cert file: self-signed into <data_dir>/certs/
    tls_enabled: bool = False
    tls_cert_file: str = ""
    tls_key_file: str = ""
    # SASL (docs/security.md)
    sasl_enabled_mechanisms: str = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"  # comma-separated; "" turns SASL off
    authentication_required: bool = False  # true: only ApiVersions and SASL until a client authenticates
    connections_max_reauth_ms: int = 0  # Kafka's connections.max.reauth.ms: session lifetime; 0 = unlimited
    connection_failed_authentication_delay_ms: int = 100  # Kafka's setting (KIP-306): wait before closing


@dataclass(frozen=True)
class HttpConfig:
    """Iggy's HTTP REST API (and ``/metrics``); Iggy's default port 3000.

    Keys (Iggy's ``[http]``, ``[http.cors]``, ``[http.jwt]`` and ``[http.tls]`` flattened
    into one section, each with the Iggy server's default):

    - ``max_request_size``: bytes of one request body (Iggy's ``"2 MB"``); a larger body is
      answered 413 and the connection closed.
    - ``cors_enabled`` and ``cors_allowed_methods``, ``cors_allowed_origins``,
      ``cors_allowed_headers``, ``cors_exposed_headers`` (comma-separated strings, or TOML
      arrays of strings; ``"*"`` as the first origin allows any), ``cors_allow_credentials``
      (refused with a wildcard origin or header list, as Iggy refuses it),
      ``cors_allow_private_network``.
    - ``jwt_algorithm`` (HS256, HS384 or HS512), ``jwt_issuer``, ``jwt_audience``,
      ``jwt_access_token_expiry_s`` (seconds an access token lives; Iggy's ``"1 h"``),
      ``jwt_refresh_token_expiry_s`` (seconds a refresh token lives),
      ``jwt_clock_skew_s`` (leeway when checking ``exp``/``nbf``), ``jwt_encoding_secret``
      (empty: a random secret is generated on first start and kept in
      ``<data_dir>/http/jwt_secret``, so tokens survive a restart).
    - ``tls_enabled``, ``tls_cert_file``, ``tls_key_file`` (PEM): serve HTTPS instead.
    - ``request_timeout_s`` (Headwater's own; 0 turns it off): a connection still receiving
      one request (headers or body) this long after it began is closed.
    """

    enabled: bool = True
    address: str = "127.0.0.1:3000"
    max_request_size: int = 2_000_000  # Iggy's "2 MB" (decimal megabytes)
    cors_enabled: bool = True
    cors_allowed_methods: str = "GET,POST,PUT,DELETE"
    cors_allowed_origins: str = "*"
    cors_allowed_headers: str = "content-type,authorization"
    cors_exposed_headers: str = ""
    cors_allow_credentials: bool = False
    cors_allow_private_network: bool = False
    jwt_algorithm: str = "HS256"
    jwt_issuer: str = "iggy.apache.org"
    jwt_audience: str = "iggy.apache.org"
    jwt_access_token_expiry_s: int = 3600
    jwt_refresh_token_expiry_s: int = 86_400
    jwt_clock_skew_s: int = 5
    jwt_encoding_secret: str = ""
    tls_enabled: bool = False
    tls_cert_file: str = ""
    tls_key_file: str = ""
    request_timeout_s: float = 60.0
    # Prometheus text exposition (Iggy's [http.metrics] enabled / endpoint); no login needed, as in Iggy
    metrics_enabled: bool = True
    metrics_endpoint: str = "/metrics"
    # the web console at /console (Iggy users log in)
    console_enabled: bool = True


@dataclass(frozen=True)
class QuicConfig:
    """Iggy's binary protocol over QUIC (UDP); Iggy's default port 8080."""

    enabled: bool = True
    address: str = "127.0.0.1:8080"
    # QUIC always runs TLS 1.3: no cert file -> a self-signed one generated into <data_dir>/certs/
    cert_file: str = ""  # PEM certificate chain
    key_file: str = ""  # PEM private key
    max_idle_timeout_s: float = 60.0  # QUIC idle timeout: a connection silent this long is dropped (0: off)


@dataclass(frozen=True)
class WebSocketConfig:
    """Iggy's binary protocol over WebSocket; Iggy's default port 8092."""

    enabled: bool = True
    address: str = "127.0.0.1:8092"
    # wss:// (Iggy's [websocket.tls]); no cert file -> self-signed into <data_dir>/certs/
    tls_enabled: bool = False
    tls_cert_file: str = ""
    tls_key_file: str = ""


@dataclass(frozen=True)
class CompactionConfig:
    """The log cleaner of compacted topics (cleanup.policy=compact)."""

    interval_s: float = 1.0  # how often the cleaner looks for a partition to compact (one pass per run)
    max_dirty_bytes: int = 256 * 1024 * 1024  # bytes of uncompacted segments one pass reads at most


@dataclass(frozen=True)
class RootConfig:
    username: str = ""
    password: str = ""


@dataclass(frozen=True)
class LoggingConfig:
    level: str = "info"
    format: str = "text"  # "text" (key=value) or "json"


@dataclass(frozen=True)
class Config:
    system: SystemConfig = field(default_factory=SystemConfig)
    tcp: TcpConfig = field(default_factory=TcpConfig)
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    quic: QuicConfig = field(default_factory=QuicConfig)
    websocket: WebSocketConfig = field(default_factory=WebSocketConfig)
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    root: RootConfig = field(default_factory=RootConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)


_TYPE_NAMES = {bool: "a boolean (true/false)", int: "an integer", float: "a number", str: "a string"}


def _coerce(value: Any, to: type, where: str) -> Any:
    if to is str and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ",".join(value)  # a TOML array of strings (the [http] cors_* lists)
    if isinstance(value, str) and to is not str:
        v = value.strip()
        if to is bool:
            if v.lower() in ("1", "true", "yes", "on"):
                return True
            if v.lower() in ("0", "false", "no", "off"):
                return False
            raise ConfigError(where, f"{value!r} is not {_TYPE_NAMES[bool]}")
        try:
            return to(v)
        except ValueError:
            raise ConfigError(where, f"{value!r} is not {_TYPE_NAMES[to]}") from None
    if to is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, to) or (to is int and isinstance(value, bool)):
        raise ConfigError(where, f"{value!r} is not {_TYPE_NAMES[to]}")
    return value


_HOSTNAME_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")

# keys whose smallest sensible value is above 0 (every other number must be >= 0)
_MINIMUM = {
    "system.retention_interval_s": 0.001,
    "system.token_cleaner_interval_s": 0.001,
    "system.preallocate_window_bytes": 4096,  # one block
    "compaction.interval_s": 0.001,
    "compaction.max_dirty_bytes": 1,
    "tcp.max_frame_size": 256,  # one Iggy header
    "kafka.default_partitions": 1,
    "kafka.max_request_size": 1,
    "kafka.transaction_max_timeout_ms": 1,
    "kafka.transactional_id_expiration_ms": 1,
    "kafka.offsets_retention_minutes": 0.0001,
    "kafka.offsets_retention_check_interval_ms": 1,
    "kafka.transaction_remove_expired_transaction_cleanup_interval_ms": 1,
    "http.max_request_size": 1,
    "http.jwt_access_token_expiry_s": 1,
    "http.jwt_refresh_token_expiry_s": 1,
}

JWT_ALGORITHMS = ("HS256", "HS384", "HS512")
CORS_METHODS = ("GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "CONNECT", "PATCH", "TRACE")


def split_list(value: str) -> list[str]:
    """A comma-separated config list -> its non-blank, trimmed entries."""
    return [v.strip() for v in value.split(",") if v.strip()]


def _check_host(host: str) -> str | None:
    """None if ``host`` is an IP literal or a DNS name, else the problem."""
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    if len(name) > 253 or not all(_HOSTNAME_LABEL.fullmatch(label) for label in name.split(".")):
        return f"host {host!r} is neither an IP address nor a host name"
    if name.replace(".", "").isdigit():
        return f"host {host!r} is not a valid IPv4 address"
    return None


def _check_value(dotted: str, value: Any, where: str) -> Any:
    """Range and shape checks for one key's coerced value; returns it (normalized)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        low = _MINIMUM.get(dotted, 0)
        if not value >= low:  # also NaN
            raise ConfigError(where, f"{value!r} is below the minimum {low}")
    if dotted in LISTENER_ADDRESSES or (dotted == "kafka.advertised_address" and value):
        parse_address(value, where)
    elif dotted == "logging.level":
        if value.lower() not in LOG_LEVELS:
            raise ConfigError(where, f"{value!r} is not a log level ({', '.join(LOG_LEVELS)})")
        value = value.lower()
    elif dotted == "logging.format":
        if value.lower() not in LOG_FORMATS:
            raise ConfigError(where, f"{value!r} is not a log format ({', '.join(LOG_FORMATS)})")
        value = value.lower()
    elif dotted == "kafka.default_partitions" and value > MAX_PARTITIONS:
        raise ConfigError(where, f"{value} is above the maximum {MAX_PARTITIONS} partitions per topic")
    elif dotted == "kafka.sasl_enabled_mechanisms":
        names = [m.strip().upper() for m in value.split(",") if m.strip()]
        unknown = [m for m in names if m not in SASL_MECHANISMS]
        if unknown:
            raise ConfigError(where, f"unknown SASL mechanism {unknown[0]!r} (known: {', '.join(SASL_MECHANISMS)})")
        value = ",".join(dict.fromkeys(names))
    elif dotted == "kafka.stream":
        try:
            validate_name(value, "stream", ValueError)
        except ValueError as e:
            raise ConfigError(where, f"{e} (the stream that holds topics created through Kafka)") from None
    elif dotted == "http.jwt_algorithm":
        if value.upper() not in JWT_ALGORITHMS:
            raise ConfigError(where, f"{value!r} is not a supported JWT algorithm ({', '.join(JWT_ALGORITHMS)})")
        value = value.upper()
    elif dotted == "http.cors_allowed_methods":
        bad = [m for m in split_list(value) if m.upper() not in CORS_METHODS]
        if bad:
            raise ConfigError(where, f"{bad[0]!r} is not an HTTP method ({', '.join(CORS_METHODS)})")
    elif dotted == "http.cors_allowed_origins" and "*" in split_list(value)[1:]:
        raise ConfigError(where, '"*" is honoured only as the first origin')
    elif dotted == "system.data_dir":
        if not value:
            raise ConfigError(where, "the data directory must not be empty")
        if os.path.exists(value) and not os.path.isdir(value):
            raise ConfigError(where, f"{value} exists and is not a directory")
        parent = os.path.dirname(os.path.abspath(value))
        while not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise ConfigError(where, f"{parent} is not a directory")
    return value


def _apply(cfg: Config, section: str, key: str, value: Any, where: str) -> Config:
    sec_fields = {f.name: f for f in fields(Config)}
    if section not in sec_fields:
        raise ConfigError(where, f"unknown section {section!r}")
    sec = getattr(cfg, section)
    types = {f.name: f.type for f in fields(sec)}
    if key not in types:
        raise ConfigError(where, f"unknown key {section}.{key}")
    typ = {"str": str, "bool": bool, "int": int, "float": float}[types[key]]
    return replace(cfg, **{section: replace(sec, **{key: _coerce(value, typ, where)})})


def _check_all(cfg: Config, sources: Mapping[str, str], refusals: _Refusals) -> Config:
    """Check every key's final value (a value a higher layer overrode is not checked);
    returns the config with normalized values. A refused value is noted in ``refusals``
    and left as it was."""
    for section in fields(Config):
        sec = getattr(cfg, section.name)
        changes = {}
        for f in fields(sec):
            dotted = f"{section.name}.{f.name}"
            value = getattr(sec, f.name)
            try:
                checked = _check_value(dotted, value, sources.get(dotted, dotted))
            except ConfigError as e:
                refusals.errors.append(e)
                continue
            if checked != value:
                changes[f.name] = checked
        if changes:
            cfg = replace(cfg, **{section.name: replace(sec, **changes)})
    return cfg


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
"""The SASL mechanisms the Kafka listener can offer (``kafka.sasl_enabled_mechanisms``)."""

LISTENER_ADDRESSES = ("tcp.address", "kafka.address", "http.address", "quic.address", "websocket.address")
"""The ``address`` key of every listener section (QUIC's is a UDP port, the others TCP)."""

_TCP_LISTENERS = ("tcp", "kafka", "http", "websocket")


def _is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::")


def _check_listeners(cfg: Config, sources: Mapping[str, str]) -> None:
    """At least one listener; two enabled TCP listeners on one port of one address (or a
    wildcard) cannot both bind (QUIC listens on UDP, so it shares no port space with them)."""
    enabled = [name for name in ("tcp", "kafka", "http", "quic", "websocket") if getattr(cfg, name).enabled]
    if not enabled:
        raise ConfigError(
            sources.get("kafka.enabled", sources.get("tcp.enabled", "tcp.enabled")),
            "every listener is turned off (tcp, kafka, http, quic and websocket .enabled are false): "
            "nothing would be served",
        )
    seen: list[tuple[str, str, int]] = []
    for name in _TCP_LISTENERS:
        if name not in enabled:
            continue
        address = getattr(cfg, name).address
        host, port = parse_address(address)
        for other, other_host, other_port in seen:
            if port != 0 and port == other_port and (
                host == other_host or _is_wildcard(host) or _is_wildcard(other_host)
            ):
                other_address = getattr(cfg, other).address
                raise ConfigError(
                    sources.get(f"{name}.address", f"{name}.address"),
                    f"{address} clashes with the {other} listener's {other_address} "
                    f"({sources.get(f'{other}.address', f'{other}.address')}): give each listener its own port",
                )
        seen.append((name, host, port))
    endpoint = cfg.http.metrics_endpoint
    if not endpoint.startswith("/") or endpoint.rstrip("/") in ("", "/console") or endpoint.startswith("/console/"):
        raise ConfigError(
            sources.get("http.metrics_endpoint", "http.metrics_endpoint"),
            f"{endpoint!r} is not a path of its own: give a path such as /metrics (not / or under /console)",
        )


def _check_http(http: HttpConfig, sources: Mapping[str, str]) -> None:
    """Combinations Iggy refuses at start: credentials with a wildcard CORS origin or header
    list; TLS without both PEM files."""
    if not http.enabled:
        return
    if http.cors_enabled and http.cors_allow_credentials:
        for key in ("cors_allowed_origins", "cors_allowed_headers", "cors_exposed_headers"):
            if split_list(getattr(http, key))[:1] == ["*"]:
                raise ConfigError(
                    sources.get("http.cors_allow_credentials", "http.cors_allow_credentials"),
                    f"allow_credentials cannot be combined with a wildcard http.{key}",
                )
    if http.tls_enabled:
        for key in ("tls_cert_file", "tls_key_file"):
            path = getattr(http, key)
            if not path:
                raise ConfigError(sources.get("http.tls_enabled", "http.tls_enabled"), f"TLS needs http.{key}")
            if not os.path.isfile(path):
                raise ConfigError(sources.get(f"http.{key}", f"http.{key}"), f"{path} is not a file")


def load(
    path: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    flag_names: Mapping[str, str] | None = None,
    sources: dict[str, str] | None = None,
) -> Config:
    """Build and validate the config: defaults < file < env < ``overrides`` (``"section.key" -> value``).

    ``flag_names`` maps ``"section.key"`` to the flag that set it (``"--tcp-address"``),
    for messages. ``sources``, if given, is filled with ``"section.key" -> where the
    value came from`` for every key not left at its default. Raises ConfigError: the
    first refused setting, every other one found in its ``others`` (each value given in
    each layer and each key's final value are checked before it raises; the checks of
    combinations, such as two listeners on one port, run once every value is good).
    """
    cfg = Config()
    refusals = _Refusals()
    origin: dict[str, str] = {} if sources is None else sources
    if path:
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            # one refusal: the environment's and the flags' are still checked and reported
            refusals.errors.append(ConfigError("--config", f"cannot read config file {path}: {e}"))
            doc = {}
        for section, table in doc.items():
            if not isinstance(table, dict):
                refusals.errors.append(ConfigError(f"{section} in {path}", "a top-level key must be a [section]"))
                continue
            for key, value in table.items():
                where = f"{section}.{key} in {path}"
                cfg = refusals.apply(cfg, section, key, value, where)
                origin[f"{section}.{key}"] = where
    env = os.environ if env is None else env
    sections = {f.name for f in fields(Config)}
    for name, value in env.items():
        if not name.startswith("HEADWATER_") or name in NOT_CONFIG_VARIABLES:
            continue
        rest = name[len("HEADWATER_"):].lower()
        section, _, key = rest.partition("_")
        if section not in sections or not key:
            refusals.errors.append(ConfigError(name, "unknown environment variable"))
            continue
        cfg = refusals.apply(cfg, section, key, value, name)
        origin[f"{section}.{key}"] = name
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        section, _, key = dotted.partition(".")
        where = (flag_names or {}).get(dotted, dotted)
        cfg = refusals.apply(cfg, section, key, value, where)
        origin[dotted] = where
    cfg = _check_all(cfg, origin, refusals)
    refusals.raise_any()
    _check_listeners(cfg, origin)
    if cfg.kafka.authentication_required and not cfg.kafka.sasl_enabled_mechanisms:
        raise ConfigError(
            origin.get("kafka.sasl_enabled_mechanisms", "kafka.sasl_enabled_mechanisms"),
            "kafka.authentication_required is true but no SASL mechanism is enabled: no client could authenticate",
        )
    _check_http(cfg.http, origin)
    return cfg


def format_address(host: str, port: int) -> str:
    """``HOST:PORT``, with an IPv6 host in brackets (``[::1]:8090``), as :func:`parse_address` reads it."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_address(address: str, option: str = "address") -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6; an empty HOST is 0.0.0.0) -> (host, port).

    PORT is 0..65535 (0: any free port); HOST an IP literal or a DNS name.
    Raises ConfigError naming ``option``.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not port.isascii():
        raise ConfigError(option, f"{address!r} is not HOST:PORT")
    if int(port) > 65535:
        raise ConfigError(option, f"port {int(port)} in {address!r} is out of range (0..65535)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if ":" not in host:
            raise ConfigError(option, f"{address!r}: only an IPv6 address goes in brackets")
    elif ":" in host:
        raise ConfigError(option, f"{address!r}: write an IPv6 address in brackets, [ADDRESS]:PORT")
    host = host or "0.0.0.0"
    problem = _check_host(host)
    if problem:
        raise ConfigError(option, f"{problem} (in {address!r})")
    return host, int(port)


def as_dict(cfg: Config) -> dict[str, Any]:
    d = dataclasses.asdict(cfg)
    if d["root"]["password"]:
        d["root"]["password"] = "***"
    return d
