"""Server configuration: frozen dataclasses with embedded defaults.

Precedence, lowest to highest: defaults < TOML file (``--config``) <
environment (``HEADWATER_<SECTION>_<KEY>``, e.g. ``HEADWATER_TCP_ADDRESS``) <
command-line flags. Unknown keys in the file or environment are errors, so a
typo never silently leaves a default in force.

Example file::

    [system]
    data_dir = "local_data"
    [tcp]
    address = "0.0.0.0:8090"
    [kafka]
    enabled = false
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping


NOT_CONFIG_VARIABLES = frozenset({"HEADWATER_NO_EXTENSIONS"})
"""``HEADWATER_*`` environment variables that are not settings (see ``headwater._native``)."""


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class SystemConfig:
    data_dir: str = "local_data"
    validate_checksum: bool = True  # re-verify batches read from disk
    retention_interval_s: float = 60.0  # how often the segment cleaner runs
    token_cleaner_interval_s: float = 60.0


@dataclass(frozen=True)
class TcpConfig:
    enabled: bool = True
    address: str = "127.0.0.1:8090"
    max_frame_size: int = 64 * 1024 * 1024  # bytes, header included; larger frames close the connection
    session_reply_cache: int = 64  # cached metadata replies kept per client for deduplication
    heartbeat_interval_s: float = 0.0  # > 0: evict (reason 13, StaleClient) a connection silent for 1.2x this


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
    root: RootConfig = field(default_factory=RootConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)


def _coerce(value: Any, to: type, where: str) -> Any:
    if isinstance(value, str) and to is not str:
        v = value.strip()
        if to is bool:
            if v.lower() in ("1", "true", "yes", "on"):
                return True
            if v.lower() in ("0", "false", "no", "off"):
                return False
            raise ConfigError(f"{where}: {value!r} is not a boolean")
        try:
            return to(v)
        except ValueError as e:
            raise ConfigError(f"{where}: {value!r} is not a {to.__name__}") from e
    if to is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, to) or (to is int and isinstance(value, bool)):
        raise ConfigError(f"{where}: expected {to.__name__}, got {value!r}")
    return value


def _apply(cfg: Config, section: str, key: str, value: Any, where: str) -> Config:
    sec_fields = {f.name: f for f in fields(Config)}
    if section not in sec_fields:
        raise ConfigError(f"{where}: unknown section {section!r}")
    sec = getattr(cfg, section)
    types = {f.name: f.type for f in fields(sec)}
    if key not in types:
        raise ConfigError(f"{where}: unknown key {section}.{key}")
    typ = {"str": str, "bool": bool, "int": int, "float": float}[types[key]]
    return replace(cfg, **{section: replace(sec, **{key: _coerce(value, typ, where)})})


def load(
    path: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Build the config: defaults < file < env < ``overrides`` (``"section.key" -> value``)."""
    cfg = Config()
    if path:
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"cannot read config file {path}: {e}") from e
        for section, table in doc.items():
            if not isinstance(table, dict):
                raise ConfigError(f"{path}: top-level key {section!r} must be a [section]")
            for key, value in table.items():
                cfg = _apply(cfg, section, key, value, path)
    env = os.environ if env is None else env
    sections = {f.name for f in fields(Config)}
    for name, value in env.items():
        if not name.startswith("HEADWATER_") or name in NOT_CONFIG_VARIABLES:
            continue
        rest = name[len("HEADWATER_"):].lower()
        section, _, key = rest.partition("_")
        if section not in sections or not key:
            raise ConfigError(f"environment: unknown variable {name}")
        cfg = _apply(cfg, section, key, value, f"environment {name}")
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        section, _, key = dotted.partition(".")
        cfg = _apply(cfg, section, key, value, f"flag for {dotted}")
    return cfg


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) -> (host, port). Raises ConfigError."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"address {address!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def as_dict(cfg: Config) -> dict[str, Any]:
    d = dataclasses.asdict(cfg)
    if d["root"]["password"]:
        d["root"]["password"] = "***"
    return d
