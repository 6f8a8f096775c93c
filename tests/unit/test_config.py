"""Config validation: every refused value names the key as the user gave it (flag,
environment variable, or key in the file), before the server touches anything."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.config import ConfigError, load, parse_address

FLAGS = {"tcp.address": "--tcp-address", "kafka.address": "--kafka-address", "logging.level": "--log-level",
         "system.data_dir": "--data-dir"}


def refused(**kw) -> ConfigError:
    kw.setdefault("env", {})
    kw.setdefault("flag_names", FLAGS)
    with pytest.raises(ConfigError) as e:
        load(**kw)
    assert str(e.value) == f"{e.value.option}: {e.value.problem}"
    return e.value


@pytest.mark.parametrize("address,words", [
    ("foo", ["'foo'", "HOST:PORT"]),
    ("127.0.0.1", ["HOST:PORT"]),
    ("127.0.0.1:", ["HOST:PORT"]),
    ("127.0.0.1:-1", ["HOST:PORT"]),
    ("127.0.0.1:99999", ["99999", "0..65535"]),
    ("127.0.0.1:８０", ["HOST:PORT"]),  # non-ASCII digits
    ("1.2.3:80", ["not a valid IPv4"]),
    ("300.0.0.1:80", ["300.0.0.1"]),
    ("under_score:80", ["under_score"]),
    ("-lead.example:80", ["-lead.example"]),
    ("::1:80", ["brackets"]),
    ("[127.0.0.1]:80", ["only an IPv6"]),
    ("[::g]:80", ["::g"]),
])
def test_a_bad_address_names_the_flag(address, words):
    e = refused(overrides={"tcp.address": address})
    assert e.option == "--tcp-address"
    for w in words:
        assert w in e.problem, e.problem


@pytest.mark.parametrize("address,expected", [
    ("127.0.0.1:0", ("127.0.0.1", 0)),
    (":9092", ("0.0.0.0", 9092)),
    ("[::1]:65535", ("::1", 65535)),
    ("localhost:1", ("localhost", 1)),
    ("broker-1.example.com.:9092", ("broker-1.example.com.", 9092)),
])
def test_good_addresses_parse(address, expected):
    assert parse_address(address) == expected
    assert load(env={}, overrides={"kafka.address": address}).kafka.address == address


@given(st.one_of(st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(lambda a: f"[{a}]")),
       st.integers(0, 65535))
def test_every_ip_literal_and_port_round_trips(host, port):
    parsed_host, parsed_port = parse_address(f"{host}:{port}")
    assert ipaddress.ip_address(parsed_host) == ipaddress.ip_address(host.strip("[]"))
    assert parsed_port == port


@given(st.integers(65536, 10**12))
def test_every_port_past_65535_is_refused(port):
    with pytest.raises(ConfigError, match="out of range"):
        parse_address(f"127.0.0.1:{port}", "--tcp-address")


def test_the_option_is_named_as_the_user_gave_it(tmp_path):
    f = tmp_path / "hw.toml"
    f.write_text("[kafka]\ndefault_partitions = 'three'\n")
    e = refused(path=str(f))
    assert e.option == f"kafka.default_partitions in {f}" and e.problem == "'three' is not an integer"
    e = refused(env={"HEADWATER_KAFKA_DEFAULT_PARTITIONS": "three"})
    assert e.option == "HEADWATER_KAFKA_DEFAULT_PARTITIONS"
    e = refused(overrides={"logging.level": "verbose"})
    assert e.option == "--log-level" and "debug, info, warning, error, critical" in e.problem
    e = refused(overrides={"kafka.default_partitions": "x"}, flag_names={})
    assert e.option == "kafka.default_partitions"  # no flag: the dotted key


@pytest.mark.parametrize("env,problem", [
    ({"HEADWATER_TCP_ENABLED": "maybe"}, "'maybe' is not a boolean (true/false)"),
    ({"HEADWATER_SYSTEM_RETENTION_INTERVAL_S": "soon"}, "'soon' is not a number"),
    ({"HEADWATER_SYSTEM_RETENTION_INTERVAL_S": "0"}, "0.0 is below the minimum 0.001"),
    ({"HEADWATER_SYSTEM_RETENTION_INTERVAL_S": "nan"}, "nan is below the minimum 0.001"),
    ({"HEADWATER_KAFKA_DEFAULT_PARTITIONS": "0"}, "0 is below the minimum 1"),
    ({"HEADWATER_KAFKA_GROUP_MAX_SIZE": "-1"}, "-1 is below the minimum 0"),
    ({"HEADWATER_TCP_MAX_FRAME_SIZE": "100"}, "100 is below the minimum 256"),
    ({"HEADWATER_KAFKA_TRANSACTIONAL_ID_EXPIRATION_MS": "0"}, "0 is below the minimum 1"),
    ({"HEADWATER_KAFKA_TRANSACTION_REMOVE_EXPIRED_TRANSACTION_CLEANUP_INTERVAL_MS": "0"}, "0 is below the minimum 1"),
    ({"HEADWATER_KAFKA_TRANSACTION_MAX_TIMEOUT_MS": "0"}, "0 is below the minimum 1"),
    ({"HEADWATER_KAFKA_OFFSETS_RETENTION_MINUTES": "0"}, "0.0 is below the minimum 0.0001"),
    ({"HEADWATER_KAFKA_OFFSETS_RETENTION_CHECK_INTERVAL_MS": "0"}, "0 is below the minimum 1"),
    ({"HEADWATER_LOGGING_FORMAT": "xml"}, "'xml' is not a log format (text, json)"),
    ({"HEADWATER_LOGGING_LEVEL": "verbose"}, "'verbose' is not a log level (debug, info, warning, error, critical)"),
    ({"HEADWATER_KAFKA_ADVERTISED_ADDRESS": "nope"}, "'nope' is not HOST:PORT"),
    ({"HEADWATER_TCP_NOPE": "1"}, "unknown key tcp.nope"),
    ({"HEADWATER_NOPE": "1"}, "unknown environment variable"),
])
def test_bad_values_name_the_variable(env, problem):
    e = refused(env=env)
    assert e.option == next(iter(env)) and e.problem == problem


def test_the_client_commands_variables_are_not_server_settings():
    """``headwater stream list`` and friends read these; ``serve`` in the same shell must not refuse them."""
    env = {"HEADWATER_SERVER": "10.0.0.1:8090", "HEADWATER_USERNAME": "alice", "HEADWATER_PASSWORD": "secret",
           "HEADWATER_TOKEN": "abc"}
    assert load(env=env) == load(env={})
    assert refused(env={**env, "HEADWATER_SERVERS": "x"}).problem == "unknown environment variable"


def test_toml_types_are_checked_too(tmp_path):
    f = tmp_path / "hw.toml"
    f.write_text("[tcp]\nenabled = 3\n")
    assert refused(path=str(f)).problem == "3 is not a boolean (true/false)"
    f.write_text("[kafka]\ndefault_partitions = true\n")
    assert refused(path=str(f)).problem == "True is not an integer"
    f.write_text("[logging]\nformat = 'xml'\n")
    assert refused(path=str(f)).option == f"logging.format in {f}"
    f.write_text("tcp = 1\n")
    assert refused(path=str(f)).problem == "a top-level key must be a [section]"
    e = refused(path=str(tmp_path / "missing.toml"))
    assert e.option == "--config" and "missing.toml" in e.problem


def test_level_and_format_are_case_insensitive_and_normalized():
    cfg = load(env={"HEADWATER_LOGGING_FORMAT": "JSON"}, overrides={"logging.level": "Warning"})
    assert (cfg.logging.level, cfg.logging.format) == ("warning", "json")


@pytest.mark.parametrize("tcp,kafka", [
    ("127.0.0.1:9000", "127.0.0.1:9000"),
    ("0.0.0.0:9000", "127.0.0.1:9000"),
    ("127.0.0.2:9000", ":9000"),
    ("[::]:9000", "127.0.0.1:9000"),
])
def test_two_listeners_on_one_port_clash(tcp, kafka):
    e = refused(overrides={"tcp.address": tcp, "kafka.address": kafka})
    assert e.option == "--kafka-address"
    assert "clashes" in e.problem and "--tcp-address" in e.problem and tcp in e.problem


@pytest.mark.parametrize("tcp,kafka,env", [
    ("127.0.0.1:9000", "127.0.0.2:9000", {}),  # two addresses, one port each
    ("127.0.0.1:0", "127.0.0.1:0", {}),  # each gets its own free port
    ("127.0.0.1:9000", "127.0.0.1:9000", {"HEADWATER_KAFKA_ENABLED": "false"}),
])
def test_listeners_that_can_both_bind_do_not_clash(tcp, kafka, env):
    load(env=env, overrides={"tcp.address": tcp, "kafka.address": kafka})


def test_a_data_dir_that_is_a_file_or_under_one_is_named(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    e = refused(overrides={"system.data_dir": str(f)})
    assert (e.option, e.problem) == ("--data-dir", f"{f} exists and is not a directory")
    e = refused(overrides={"system.data_dir": str(f / "a" / "b")})
    assert (e.option, e.problem) == ("--data-dir", f"{f} is not a directory")
    assert refused(env={"HEADWATER_SYSTEM_DATA_DIR": ""}).problem == "the data directory must not be empty"
    assert not (tmp_path / "missing").exists()
    load(env={}, overrides={"system.data_dir": str(tmp_path / "missing" / "deeper")})  # created later, by the lock
    assert not (tmp_path / "missing").exists()  # validating writes nothing


def test_sources_say_where_each_value_came_from(tmp_path):
    f = tmp_path / "hw.toml"
    f.write_text("[tcp]\naddress = '127.0.0.1:1'\n[kafka]\naddress = '127.0.0.1:2'\n")
    sources: dict[str, str] = {}
    cfg = load(str(f), env={"HEADWATER_KAFKA_ADDRESS": "127.0.0.1:3"}, overrides={"logging.level": "debug"},
               flag_names=FLAGS, sources=sources)
    assert cfg.kafka.address == "127.0.0.1:3"
    assert sources == {"tcp.address": f"tcp.address in {f}", "kafka.address": "HEADWATER_KAFKA_ADDRESS",
                       "logging.level": "--log-level"}


def test_only_the_final_value_of_a_key_is_checked_but_every_layer_is_type_checked(tmp_path):
    f = tmp_path / "hw.toml"
    f.write_text("[tcp]\naddress = 'nonsense'\n[logging]\nlevel = 'loud'\n")
    cfg = load(str(f), env={"HEADWATER_TCP_ADDRESS": "127.0.0.1:1"}, overrides={"logging.level": "error"})
    assert (cfg.tcp.address, cfg.logging.level) == ("127.0.0.1:1", "error")  # overridden: never in force
    f.write_text("[kafka]\ndefault_partitions = 'three'\n")
    e = refused(path=str(f), env={"HEADWATER_KAFKA_DEFAULT_PARTITIONS": "2"})
    assert e.option == f"kafka.default_partitions in {f}"  # a malformed file is refused anyway


def test_defaults_are_checked_too(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "local_data").write_text("a file where the default data directory goes")
    e = refused()
    assert (e.option, e.problem) == ("system.data_dir", "local_data exists and is not a directory")


@pytest.mark.parametrize("env,words", [
    ({"HEADWATER_KAFKA_STREAM": ""}, ["HEADWATER_KAFKA_STREAM", "1-255 bytes"]),
    ({"HEADWATER_KAFKA_STREAM": "x" * 300}, ["HEADWATER_KAFKA_STREAM", "1-255 bytes"]),
    ({"HEADWATER_KAFKA_STREAM": "a/b"}, ["HEADWATER_KAFKA_STREAM", "forbidden character"]),
    ({"HEADWATER_KAFKA_DEFAULT_PARTITIONS": "1001"}, ["HEADWATER_KAFKA_DEFAULT_PARTITIONS", "maximum 1000"]),
    ({"HEADWATER_KAFKA_DEFAULT_PARTITIONS": "99999999999999999999999"}, ["maximum 1000"]),
    ({f"HEADWATER_{name}_ENABLED": "false" for name in ("TCP", "KAFKA", "HTTP", "QUIC", "WEBSOCKET")},
     ["every listener is turned off"]),
])
def test_values_the_server_could_never_use_are_refused_at_start(env, words):
    """Accepted, these would start a server whose every Kafka auto-create fails (or that serves nothing)."""
    e = refused(env=env)
    for w in words:
        assert w in str(e)


def test_a_config_file_that_is_not_utf8_or_is_a_directory_is_one_clear_error(tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_bytes(b"\xff\xfe[tcp]\n")
    e = refused(path=str(bad))
    assert e.option == "--config" and "cannot read config file" in e.problem
    e = refused(path=str(tmp_path))
    assert e.option == "--config" and str(tmp_path) in e.problem


def test_tcp_listeners_on_one_port_are_refused_and_quic_may_share_a_port_number():
    """HTTP and WebSocket are TCP listeners like Iggy TCP and Kafka; QUIC is UDP."""
    e = refused(env={"HEADWATER_HTTP_ADDRESS": "127.0.0.1:9092"})
    assert e.option == "HEADWATER_HTTP_ADDRESS" and "kafka listener" in e.problem
    e = refused(env={"HEADWATER_WEBSOCKET_ADDRESS": "0.0.0.0:3000"})
    assert e.option == "HEADWATER_WEBSOCKET_ADDRESS" and "http listener" in e.problem
    cfg = load(env={"HEADWATER_QUIC_ADDRESS": "127.0.0.1:8090"})
    assert cfg.quic.address == "127.0.0.1:8090"


def test_sasl_settings():
    cfg = load(env={}, overrides={"kafka.sasl_enabled_mechanisms": " scram-sha-512, PLAIN,plain "})
    assert cfg.kafka.sasl_enabled_mechanisms == "SCRAM-SHA-512,PLAIN"
    assert not cfg.kafka.authentication_required and cfg.kafka.connections_max_reauth_ms == 0
    e = refused(env={}, overrides={"kafka.sasl_enabled_mechanisms": "PLAIN,GSSAPI"})
    assert "GSSAPI" in str(e)
    e = refused(env={"HEADWATER_KAFKA_AUTHENTICATION_REQUIRED": "true", "HEADWATER_KAFKA_SASL_ENABLED_MECHANISMS": ""})
    assert "no SASL mechanism" in str(e) and "HEADWATER_KAFKA_SASL_ENABLED_MECHANISMS" in str(e)


# --------------------------------------------------------------------------- [http]


def test_http_cors_lists_from_a_toml_array_or_a_string(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[http]\ncors_allowed_methods = ["get", "POST"]\ncors_allowed_origins = "https://a.example, https://b.example"\n')
    cfg = load(str(f), env={})
    assert cfg.http.cors_allowed_methods == "get,POST"
    assert cfg.http.cors_allowed_origins == "https://a.example, https://b.example"


@pytest.mark.parametrize("env,option,words", [
    ({"HEADWATER_HTTP_CORS_ALLOWED_METHODS": "GET,FETCH"}, "HEADWATER_HTTP_CORS_ALLOWED_METHODS", ["'FETCH'"]),
    ({"HEADWATER_HTTP_CORS_ALLOWED_ORIGINS": "https://a.example,*"}, "HEADWATER_HTTP_CORS_ALLOWED_ORIGINS", ["first origin"]),
    ({"HEADWATER_HTTP_CORS_ALLOW_CREDENTIALS": "true"}, "HEADWATER_HTTP_CORS_ALLOW_CREDENTIALS", ["wildcard", "allowed_origins"]),
    ({"HEADWATER_HTTP_JWT_ALGORITHM": "RS256"}, "HEADWATER_HTTP_JWT_ALGORITHM", ["HS256"]),
    ({"HEADWATER_HTTP_JWT_ACCESS_TOKEN_EXPIRY_S": "0"}, "HEADWATER_HTTP_JWT_ACCESS_TOKEN_EXPIRY_S", ["minimum"]),
    ({"HEADWATER_HTTP_MAX_REQUEST_SIZE": "0"}, "HEADWATER_HTTP_MAX_REQUEST_SIZE", ["minimum"]),
    ({"HEADWATER_HTTP_TLS_ENABLED": "true"}, "HEADWATER_HTTP_TLS_ENABLED", ["tls_cert_file"]),
    ({"HEADWATER_HTTP_TLS_ENABLED": "true", "HEADWATER_HTTP_TLS_CERT_FILE": "/nonexistent.pem",
      "HEADWATER_HTTP_TLS_KEY_FILE": "/nonexistent.key"}, "HEADWATER_HTTP_TLS_CERT_FILE", ["not a file"]),
])
def test_bad_http_settings_are_refused(env, option, words):
    e = refused(env=env)
    assert e.option == option
    for w in words:
        assert w in e.problem


def test_http_credentials_with_explicit_origins_are_accepted():
    cfg = load(env={"HEADWATER_HTTP_CORS_ALLOW_CREDENTIALS": "true",
                    "HEADWATER_HTTP_CORS_ALLOWED_ORIGINS": "https://app.example"})
    assert cfg.http.cors_allow_credentials and cfg.http.jwt_algorithm == "HS256"


def test_the_preallocation_bound_keys(tmp_path):
    """[system] preallocate_window_bytes / preallocate_budget_bytes: defaults (64 MiB, 4 GiB),
    from the file and the environment; a window below one 4 KiB block or a negative budget
    is refused naming the key; a budget of 0 (reserve nothing) is allowed."""
    cfg = load(env={})
    assert (cfg.system.preallocate_window_bytes, cfg.system.preallocate_budget_bytes) == (64 << 20, 4 << 30)
    f = tmp_path / "c.toml"
    f.write_text("[system]\npreallocate_window_bytes = 16777216\npreallocate_budget_bytes = 0\n")
    cfg = load(str(f), env={})
    assert (cfg.system.preallocate_window_bytes, cfg.system.preallocate_budget_bytes) == (16 << 20, 0)
    cfg = load(env={"HEADWATER_SYSTEM_PREALLOCATE_WINDOW_BYTES": "8388608",
                    "HEADWATER_SYSTEM_PREALLOCATE_BUDGET_BYTES": "1073741824"})
    assert (cfg.system.preallocate_window_bytes, cfg.system.preallocate_budget_bytes) == (8 << 20, 1 << 30)
    with pytest.raises(ConfigError, match="HEADWATER_SYSTEM_PREALLOCATE_WINDOW_BYTES.*minimum 4096"):
        load(env={"HEADWATER_SYSTEM_PREALLOCATE_WINDOW_BYTES": "100"})
    with pytest.raises(ConfigError, match="HEADWATER_SYSTEM_PREALLOCATE_BUDGET_BYTES"):
        load(env={"HEADWATER_SYSTEM_PREALLOCATE_BUDGET_BYTES": "-1"})


def test_every_refused_setting_is_reported_at_once(tmp_path):
    """A user fixing a config sees every bad setting in one go, not one per start: bad
    values in the file, the environment and the flags, and each key's final value."""
    path = tmp_path / "bad.toml"
    path.write_text('[tcp]\naddress = 5\nnonsense = 1\n[nowhere]\nx = 1\n[system]\nretention_interval_s = -1\n')
    e = refused(path=str(path), env={"HEADWATER_KAFKA_PORTS": "1", "HEADWATER_BOGUS": "x"},
                overrides={"logging.level": "loud"})
    options = [r.option for r in e.every()]
    assert options == [
        f"tcp.address in {path}", f"tcp.nonsense in {path}", f"nowhere.x in {path}",
        "HEADWATER_KAFKA_PORTS", "HEADWATER_BOGUS", f"system.retention_interval_s in {path}",
        "--log-level",
    ], options
    assert e.others == e.every()[1:]
    assert "unknown key tcp.nonsense" in e.every()[1].problem


def test_one_refused_setting_has_no_others():
    e = refused(overrides={"tcp.address": "nope"})
    assert e.others == () and e.every() == (e,)


def test_combination_checks_wait_for_good_values():
    """Two listeners on one port are reported once each value parses; a bad address is not
    reported twice (once as a value, once as a clash)."""
    e = refused(overrides={"tcp.address": "127.0.0.1:9092", "kafka.address": "127.0.0.1:9092"})
    assert e.others == () and "clashes" in e.problem
    e = refused(overrides={"tcp.address": "127.0.0.1:x", "kafka.address": "127.0.0.1:9092"})
    assert [r.option for r in e.every()] == ["--tcp-address"]
