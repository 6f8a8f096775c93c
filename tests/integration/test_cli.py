"""The client commands (``headwater NOUN VERB``) against a real ``headwater serve`` process.

Commands run in-process through click's ``CliRunner`` (the same code as the
installed ``headwater`` script), except where a separate process is the point
(``--follow``, the OS keyring backend). Every test gets its own config directory,
so saved contexts and tokens never leak between tests or into the user's.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import uuid

import pytest
from click.testing import CliRunner
from hw_server import free_port

from headwater.cli.main import main
from headwater.client import Client
from headwater.codec.iggy.commands.system import GetMe

ROOT = ("iggy", "iggy")


class Hw:
    """Run ``headwater ...`` in-process against one server with one config directory."""

    def __init__(self, server, config_home, token=None):
        self.server = server
        self.env = {
            "XDG_CONFIG_HOME": str(config_home),
            "HEADWATER_SERVER": server.iggy_address,
            "HEADWATER_USERNAME": None if token else ROOT[0],
            "HEADWATER_PASSWORD": None if token else ROOT[1],
            "HEADWATER_TOKEN": token,
            "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring",
        }

    def __call__(self, *args, input=None, env=None, code=0):
        result = CliRunner().invoke(main, [str(a) for a in args], input=input, env={**self.env, **(env or {})},
                                    prog_name="headwater")
        if result.exception and not isinstance(result.exception, SystemExit):
            raise result.exception
        assert result.exit_code == code, (args, result.exit_code, result.output)
        return result

    def json(self, *args, **kw):
        return json.loads(self(*args, "-o", "json", **kw).stdout)

    def lines(self, *args, **kw):
        return [json.loads(line) for line in self(*args, "-o", "json", **kw).stdout.splitlines()]


@pytest.fixture(scope="module")
def root_token(server, tmp_path_factory):
    """Root's token for the module: a token login skips the server's Argon2 password check."""
    return Hw(server, tmp_path_factory.mktemp("config")).json("pat", "create", "cli-tests")["token"]


@pytest.fixture
def hw(server, tmp_path, root_token):
    return Hw(server, tmp_path / "config", root_token)


NO_CREDENTIALS = {"HEADWATER_USERNAME": None, "HEADWATER_PASSWORD": None, "HEADWATER_TOKEN": None}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# --------------------------------------------------------------------------- help, completion


def test_help_documents_the_exit_codes_and_shell_completion(hw):
    text = hw("--help").stdout
    assert "Exit codes:\n    0  ok\n    1  the server refused the request" in text
    assert "\n    3  cannot connect, or login refused\n" in text
    assert '\n    eval "$(_HEADWATER_COMPLETE=bash_source headwater)"\n' in text


def test_bash_completion_completes_nouns_and_verbs(hw):
    env = {"_HEADWATER_COMPLETE": "bash_complete", "COMP_WORDS": "headwater consumer-", "COMP_CWORD": "1"}
    out = hw(env=env).stdout
    assert "consumer-group" in out and "consumer-offset" in out and "stream" not in out
    env = {"_HEADWATER_COMPLETE": "bash_complete", "COMP_WORDS": "headwater stream p", "COMP_CWORD": "2"}
    assert hw(env=env).stdout.split() == ["plain,purge"]


# --------------------------------------------------------------------------- streams, topics, partitions, segments


def test_stream_topic_partition_and_segment_commands(hw):
    name = unique("st")
    created = hw.json("stream", "create", name)
    assert created["name"] == name and isinstance(created["id"], int) and created["topics"] == []
    listed = hw.json("stream", "list")
    assert isinstance(listed, list) and name in [s["name"] for s in listed]
    assert set(listed[0]) >= {"id", "name", "created_at", "topics_count", "size_bytes", "messages_count"}
    renamed = name + "-x"
    assert hw.json("stream", "update", name, renamed) == {"ok": True, "stream_id": name, "name": renamed}
    stream_id = created["id"]
    assert hw.json("stream", "get", stream_id)["name"] == renamed

    topic = hw.json("topic", "create", renamed, "t", "--partitions", 2, "--message-expiry", "1h",
                    "--option", "segment_size=1 MiB")
    assert topic["name"] == "t" and [p["id"] for p in topic["partitions"]] == [0, 1]
    assert topic["message_expiry"] == 3600 * 1_000_000
    assert [t["name"] for t in hw.json("topic", "list", renamed)] == ["t"]
    # the table, on a pipe (not a terminal), COLUMNS not exported (as in a shell; xdist sets it)
    table = hw("topic", "list", renamed, env={"COLUMNS": None}).stdout
    header = next(line for line in table.splitlines() if "name" in line)
    # one line per row and header on a pipe, not wrapped at 80 columns (a grep or awk would split it)
    assert len(header) > 80 and all(c in header for c in ("partitions", "compression")), table
    assert len([line for line in table.splitlines() if " t " in line]) == 1, table
    hw("partition", "create", renamed, "t", 2)
    assert len(hw.json("topic", "get", renamed, "t")["partitions"]) == 4
    assert hw.json("partition", "delete", renamed, "t", 1)["partitions_count"] == 1
    assert len(hw.json("topic", "get", stream_id, 0)["partitions"]) == 3

    hw("message", "send", renamed, "t", "--partition", 1, "a", "b", "c")
    assert hw.json("topic", "get", renamed, "t")["messages_count"] == 3
    assert hw.json("segment", "delete", renamed, "t", 1, 1)["segments_count"] == 1  # the active one stays
    hw("topic", "update", renamed, "t", "t2", "--compression", "gzip", "--option", "enforce_fsync=true")
    r = hw("topic", "update", renamed, "t2", "t2", "--option", "segment_size=2MiB", code=1)
    assert "server error 4041 (unsupported_option_key)" in r.stderr, r.stderr  # create-only
    t2 = hw.json("topic", "get", renamed, "t2")
    assert t2["compression_algorithm"] == 2 and t2["messages_count"] == 3
    hw("topic", "purge", renamed, "t2")
    assert hw.json("topic", "get", renamed, "t2")["messages_count"] == 0
    hw("message", "send", renamed, "t2", "--partition", 0, "d")
    hw("stream", "purge", renamed)
    assert hw.json("stream", "get", renamed)["messages_count"] == 0
    hw("topic", "delete", renamed, "t2")
    assert hw.json("topic", "list", renamed) == []
    assert hw.json("stream", "delete", renamed) == {"ok": True, "stream_id": renamed}
    assert renamed not in [s["name"] for s in hw.json("stream", "list")]


def test_refusals_exit_1_with_the_iggy_code_and_name(hw):
    name = unique("dup")
    hw("stream", "create", name)
    r = hw("stream", "create", name, code=1)
    assert r.stderr.strip() == "headwater: server error 1012 (stream_name_already_exists)"
    r = hw("topic", "create", "no-such-stream", "t", code=1)
    assert "server error 1009 (stream_id_not_found)" in r.stderr
    assert hw("stream", "get", "no-such-stream", code=1).stderr.strip() == \
        "headwater: stream 'no-such-stream' not found"
    hw("stream", "delete", name)


def test_connection_and_login_failures_exit_3_and_usage_errors_exit_2(hw):
    r = hw("stream", "list", env={"HEADWATER_SERVER": f"127.0.0.1:{free_port()}"}, code=3)
    assert r.stderr.startswith("headwater: cannot connect to 127.0.0.1:")
    r = hw("stream", "list", env={"HEADWATER_USERNAME": "iggy", "HEADWATER_PASSWORD": "wrong"}, code=3)
    assert "invalid_credentials" in r.stderr
    r = hw("stream", "list", env=NO_CREDENTIALS, code=3)
    assert "no credentials" in r.stderr
    assert "both a username and a password" in hw("stream", "list", env={"HEADWATER_USERNAME": "iggy"},
                                                   code=3).stderr
    hw("--token", "not-a-token", "stream", "list", code=3)
    # a flag takes its own field only; the other comes from its variable (as Iggy's CLI does)
    hw("-p", ROOT[1], "stream", "list", env={"HEADWATER_USERNAME": ROOT[0], "HEADWATER_TOKEN": None})
    hw("-u", ROOT[0], "stream", "list", env={"HEADWATER_PASSWORD": ROOT[1], "HEADWATER_TOKEN": None})
    r = hw("-p", "wrong", "stream", "list", env={"HEADWATER_USERNAME": ROOT[0], "HEADWATER_PASSWORD": ROOT[1],
                                                 "HEADWATER_TOKEN": None}, code=3)
    assert "invalid_credentials" in r.stderr  # the flag's password, not the variable's
    hw("stream", "list", "--bogus", code=2)
    hw("topic", "create", "s", "t", "--option", "novalue", code=2)
    hw("message", "send", "s", "t", "--partition", 0, "--key", "k", "x", code=2)
    hw("--output", "xml", "stream", "list", code=2)
    # flags beat the environment
    assert hw.json("--server", hw.server.iggy_address, "ping", env={"HEADWATER_SERVER": "127.0.0.1:1"})["ok"]


# --------------------------------------------------------------------------- users, tokens


def test_user_commands_and_permissions(hw):
    name = unique("u")[:20]
    created = hw.json("user", "create", name, "pass1", "-g", "read_streams,p_msg")
    assert created["username"] == name and created["status"] == 1
    g = hw.json("user", "get", name)["permissions"]["global"]
    assert g["read_streams"] and g["poll_messages"] and not g["manage_streams"]
    as_user = {"HEADWATER_USERNAME": name, "HEADWATER_PASSWORD": "pass1"}
    assert hw.json("me", env=as_user)["user_id"] == created["id"]
    r = hw("stream", "create", unique("nope"), env=as_user, code=1)
    assert "server error 41 (unauthorized)" in r.stderr
    hw("user", "permissions", name, "-g", "manage_streams,read_streams", "-s", "0:p_msg")
    perms = hw.json("user", "get", created["id"])["permissions"]
    assert perms["global"]["manage_streams"] and perms["streams"][0]["stream_id"] == 0
    hw("user", "status", name, "inactive")
    assert "user_inactive" in hw("me", env=as_user, code=3).stderr
    hw("user", "status", name, "active")
    hw("user", "password", name, "pass1", "pass2")
    hw("me", env=as_user, code=3)
    new_name = name + "x"
    hw("user", "name", name, new_name)
    assert hw.json("me", env={"HEADWATER_USERNAME": new_name, "HEADWATER_PASSWORD": "pass2"})["user_id"] == \
        created["id"]
    assert new_name in [u["username"] for u in hw.json("user", "list")]
    hw("user", "permissions", new_name)  # none given: removed
    assert hw.json("user", "get", new_name)["permissions"] is None
    hw("user", "create", name, "x", code=1)  # too short a password: Iggy's 44
    hw("user", "delete", new_name)
    hw("user", "get", new_name, code=1)
    hw("user", "create", name, "p", "-g", "fly", code=2)


def test_personal_access_tokens(hw):
    name = unique("pat")
    token = hw.json("pat", "create", name, "--expiry", "1d")
    assert token["name"] == name and len(token["token"]) > 20
    listed = {t["name"]: t for t in hw.json("pat", "list")}
    assert listed[name]["expiry_at"] > 0
    env = {**NO_CREDENTIALS, "HEADWATER_TOKEN": token["token"]}
    assert hw.json("me", env=env)["user_id"] == 0
    assert hw.json("--token", token["token"], "me", env=NO_CREDENTIALS)["user_id"] == 0
    hw("pat", "delete", name)
    assert name not in [t["name"] for t in hw.json("pat", "list")]
    assert "evicted" in hw("me", env=env, code=3).stderr
    hw("pat", "create", name, "--expiry", "soon", code=2)


# --------------------------------------------------------------------------- messages


def _topic(hw, partitions: int = 1) -> str:
    stream = unique("m")
    hw("stream", "create", stream)
    hw("topic", "create", stream, "t", "--partitions", partitions)
    return stream


def test_send_and_poll_with_headers_keys_and_formats(hw):
    stream = _topic(hw, partitions=3)
    sent = hw.json("message", "send", stream, "t", "--partition", 2, "hello", '{"a": 1}', "--header", "k=v",
                   "-H", "n=2", "-H", "count:uint32:7", "-H", "ok:bool:true", "-H", "ratio:float64:0.5")
    assert sent["messages_count"] == 2 and sent["confirmations"][0]["partition_id"] == 2
    hw("message", "send", stream, "t", "-p", 2, input="line one\nline two\n")
    msgs = hw.lines("message", "poll", stream, "t", "--partition", 2, "--count", 10)
    assert [m["offset"] for m in msgs] == [0, 1, 2, 3]
    assert [m["payload"] for m in msgs] == ["hello", '{"a": 1}', "line one", "line two"]
    assert msgs[0]["headers"] == {"k": "v", "n": "2", "count": 7, "ok": True, "ratio": 0.5}
    assert msgs[2]["headers"] == {}
    assert set(msgs[0]) == {"partition_id", "offset", "timestamp", "origin_timestamp", "id", "checksum",
                            "payload", "headers", "kafka_key"}
    as_json = hw.lines("message", "poll", stream, "t", "-p", 2, "--offset", 1, "--count", 1, "--format", "json")
    assert as_json[0]["payload"] == {"a": 1} and as_json[0]["offset"] == 1
    as_hex = hw.lines("message", "poll", stream, "t", "-p", 2, "--last", "--count", 1, "--format", "hex")
    assert as_hex[0]["payload"] == b"line two".hex()
    text = hw("message", "poll", stream, "t", "-p", 2, "--count", 1).stdout
    assert text.startswith("offset=0 ") and 'headers={"k": "v", "n": "2", "count": 7, "ok": true, "ratio": 0.5} hello' \
        in text
    hw("message", "send", stream, "t", "x", "-H", "n:uint8:300", code=2)
    hw("message", "send", stream, "t", "x", "-H", "n:nokind:1", code=2)
    # the same key always lands in the same partition
    parts = {hw.json("message", "send", stream, "t", "--key", "user-7", "x")["confirmations"][0]["partition_id"]
             for _ in range(3)}
    assert len(parts) == 1
    hw("message", "poll", stream, "t", "--offset", 0, "--first", code=2)
    hw("message", "send", stream, "t", input="", code=2)
    # Headwater answers FlushUnsavedBuffer with FeatureUnavailable (docs/gaps.md)
    r = hw("message", "flush", stream, "t", 2, "--fsync", code=1)
    assert r.stderr.strip() == "headwater: server error 5 (feature_unavailable)"


def test_poll_shows_the_kafka_key_and_headers_of_a_kafka_record(hw, server):
    from kafka import KafkaProducer

    stream = _topic(hw)
    producer = KafkaProducer(bootstrap_servers=server.kafka_address)
    try:
        producer.send(f"{stream}.t", value=b"v1", key=b"order-17",
                      headers=[("trace", b"abc"), ("bin", b"\xff\x00")]).get(timeout=30)
    finally:
        producer.close()
    (m,) = hw.lines("message", "poll", stream, "t")
    assert m["kafka_key"] == "order-17" and m["payload"] == "v1"
    assert m["headers"] == {"trace": "abc", "bin": {"hex": "ff00"}}
    assert 'key="order-17"' in hw("message", "poll", stream, "t").stdout


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_poll_follow_streams_new_messages_until_interrupted(hw, server, tmp_path):
    stream = _topic(hw)
    hw("message", "send", stream, "t", "-p", 0, "first")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
    env.update({k: v for k, v in hw.env.items() if v is not None})
    # SIGINT at its default disposition in the child, as for a command typed at a terminal: a pytest
    # started in the background by a non-interactive shell (`pytest &` in a script) ignores SIGINT,
    # the child would inherit the ignore across exec, and Ctrl-C (the signal below) would never stop it
    proc = subprocess.Popen([sys.executable, "-m", "headwater", "-o", "json", "message", "poll", stream, "t",
                             "--follow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            preexec_fn=_default_sigint)
    try:
        assert json.loads(proc.stdout.readline())["payload"] == "first"
        hw("message", "send", stream, "t", "-p", 0, "second", "third")
        assert [json.loads(proc.stdout.readline())["payload"] for _ in range(2)] == ["second", "third"]
        hw("message", "send", stream, "t", "-p", 0, "fourth")
        line = json.loads(proc.stdout.readline())
        assert (line["offset"], line["payload"]) == (3, "fourth")
    finally:
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(20)
    assert rc == 0, proc.stderr.read()


# --------------------------------------------------------------------------- groups, offsets, clients, system


def test_consumer_groups_and_offsets(hw):
    stream = _topic(hw, partitions=2)
    group = hw.json("consumer-group", "create", stream, "t", "g1")
    assert group["name"] == "g1" and group["partitions_count"] == 2 and group["members"] == []
    assert [g["name"] for g in hw.json("consumer-group", "list", stream, "t")] == ["g1"]
    assert hw.json("consumer-group", "get", stream, "t", "g1")["id"] == group["id"]
    hw("consumer-group", "create", stream, "t", "g1", code=1)
    hw("message", "send", stream, "t", "-p", 1, "a", "b", "c", "d")
    hw("consumer-offset", "get", "c1", stream, "t", 1, code=1)
    hw("consumer-offset", "set", "c1", stream, "t", 1, 1)
    assert hw.json("consumer-offset", "get", "c1", stream, "t", 1) == {
        "partition_id": 1, "current_offset": 3, "stored_offset": 1, "lag": 2}
    # a group's offsets are written by its members only (Iggy's commit fence); the CLI is none
    r = hw("consumer-offset", "set", "g1", stream, "t", 1, 2, "--kind", "consumer-group", code=1)
    assert r.stderr.strip() == "headwater: server error 5009 (consumer_group_partition_not_owned)"
    hw("consumer-offset", "get", "g1", stream, "t", 1, "-k", "consumer-group", code=1)  # nothing stored
    hw("consumer-offset", "delete", "c1", stream, "t", 1)
    hw("consumer-offset", "get", "c1", stream, "t", 1, code=1)
    # --next with --auto-commit moves the stored offset along
    polled = hw.lines("message", "poll", stream, "t", "-p", 1, "--next", "--consumer", "c2", "--auto-commit",
                      "--count", 2)
    assert [m["offset"] for m in polled] == [0, 1]
    assert hw.json("consumer-offset", "get", "c2", stream, "t", 1)["stored_offset"] == 1
    # a group poll joins the group for the poll: its offsets then move with --auto-commit
    hw("message", "send", stream, "t", "-p", 0, "p0")
    polled = hw.lines("message", "poll", stream, "t", "--consumer", "g1", "--consumer-group", "--next",
                      "--auto-commit", "--count", 10)
    assert polled and {m["partition_id"] for m in polled} <= {0, 1}
    (first,) = {m["partition_id"] for m in polled}
    stored = hw.json("consumer-offset", "get", "g1", stream, "t", first, "-k", "consumer-group")
    assert stored["stored_offset"] == polled[-1]["offset"]
    assert hw.json("consumer-group", "get", stream, "t", "g1")["members"] == []  # it left again
    hw("message", "poll", stream, "t", "--consumer", "g1", "--consumer-group", "--follow", code=2)
    hw("consumer-group", "delete", stream, "t", "g1")
    hw("consumer-group", "get", stream, "t", "g1", code=1)


def test_ping_me_clients_and_stats(hw):
    ping = hw.json("ping", "--count", 2, env=NO_CREDENTIALS)
    assert ping["ok"] and len(ping["round_trip_ms"]) == 2  # no login needed
    me = hw.json("me")
    assert me["user_id"] == 0 and me["transport"] == 1 and me["address"].startswith("127.0.0.1:")
    with Client(hw.server.iggy_address) as other:  # a connection that stays while the commands look
        other.login(*ROOT)
        other_id = other.call(GetMe()).client_id
        clients = {c["client_id"]: c for c in hw.json("client", "list")}
        assert set(clients[other_id]) == {"client_id", "user_id", "transport", "address", "consumer_groups_count"}
        got = hw.json("client", "get", other_id)
        assert (got["client_id"], got["user_id"], got["consumer_groups"]) == (other_id, 0, [])
        assert str(other_id) in hw("client", "list").stdout
    hw("client", "get", 4_000_000_000, code=1)
    stats = hw.json("stats")
    assert stats["streams_count"] >= 0 and "hostname" in stats and isinstance(stats["cache_metrics"], list)
    assert "process_id" in hw("stats").stdout
    table = hw("me").stdout
    assert "tcp" in table and "transport" in table  # the table names the transport


# --------------------------------------------------------------------------- contexts, login, logout


def test_contexts_login_logout_and_the_0600_token_file(hw, tmp_path):
    anon = {**NO_CREDENTIALS, "HEADWATER_SERVER": None}
    hw("context", "create", "dev", "--server", hw.server.iggy_address, "--use", env=anon)
    hw("context", "create", "other", "--server", "127.0.0.1:1", env=anon)
    hw("context", "create", "dev", env=anon, code=1)
    listed = hw.json("context", "list", env=anon)
    assert [(c["name"], c["current"], c["logged_in"]) for c in listed] == [("dev", True, False),
                                                                           ("other", False, False)]
    hw("stream", "list", env=anon, code=3)  # no credentials yet
    login = hw.json("-u", "iggy", "-p", "iggy", "login", "--expiry", "1h", env=anon)
    path = tmp_path / "config" / "headwater" / "tokens" / "dev.json"
    assert login["stored_in"] == str(path) and login["context"] == "dev"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert json.loads(path.read_text())["name"] == login["token_name"]
    assert isinstance(hw.json("stream", "list", env=anon), list)  # the saved token logs in
    assert login["token_name"] in [t["name"] for t in hw.json("pat", "list")]
    hw("--context", "other", "stream", "list", env=anon, code=3)  # its server is not there
    hw("--context", "missing", "stream", "list", env=anon, code=2)
    hw("context", "use", "missing", env=anon, code=1)
    assert hw.json("logout", env=anon)["deleted_on_server"] is True
    assert not path.exists()
    assert login["token_name"] not in [t["name"] for t in hw.json("pat", "list")]
    hw("stream", "list", env=anon, code=3)
    hw("logout", env=anon, code=1)
    hw("context", "use", "other", env=anon)
    hw("context", "delete", "dev", env=anon)
    assert [c["name"] for c in hw.json("context", "list", env=anon)] == ["other"]


def test_credentials_after_the_command_and_a_second_login_retires_the_first_token(hw, tmp_path):
    anon = {**NO_CREDENTIALS}
    hw("pat", "list", env=anon, code=3)
    listed = hw.json("pat", "list", "-u", "iggy", "-p", "iggy", env=anon)  # after the command, short
    assert isinstance(listed, list)
    assert isinstance(hw.json("stream", "list", "--username", "iggy", "--password", "iggy", env=anon), list)
    hw("pat", "list", "--token", "not-a-token", env=anon, code=3)
    hw("-t", "not-a-token", "pat", "list", "--token", hw.env["HEADWATER_TOKEN"], env=anon)  # after wins
    hw("--server", "127.0.0.1:1", "pat", "list", "--server", hw.server.iggy_address)
    hw("pat", "list", "--server", "127.0.0.1:1", code=3)
    first = hw.json("login", "--username", "iggy", "--password", "iggy", env=anon)
    path = tmp_path / "config" / "headwater" / "tokens" / "default.json"
    assert first["stored_in"] == str(path)
    second = hw.json("login", "-u", "iggy", "-p", "iggy", env=anon)
    assert json.loads(path.read_text())["name"] == second["token_name"] != first["token_name"]
    names = [t["name"] for t in hw.json("pat", "list")]
    assert second["token_name"] in names and first["token_name"] not in names  # deleted on re-login
    assert hw.json("logout", env=anon)["deleted_on_server"] is True
    assert second["token_name"] not in [t["name"] for t in hw.json("pat", "list")]


def test_login_uses_the_os_keyring_when_one_is_usable(hw, server, tmp_path):
    """A real keyring backend (keyrings.alt's plaintext file keyring, in its own data dir)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
    env.update({"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_DATA_HOME": str(tmp_path / "data"),
                "PYTHON_KEYRING_BACKEND": "keyrings.alt.file.PlaintextKeyring",
                "HEADWATER_SERVER": server.iggy_address})

    def run(*args, creds=False):
        extra = {"HEADWATER_USERNAME": "iggy", "HEADWATER_PASSWORD": "iggy"} if creds else {}
        return subprocess.run([sys.executable, "-m", "headwater", "-o", "json", *args], capture_output=True,
                              text=True, env={**env, **extra}, timeout=60)

    r = run("login", creds=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["stored_in"] == "keyring"
    assert not (tmp_path / "config" / "headwater" / "tokens").exists()
    assert run("me").returncode == 0
    assert run("logout").returncode == 0
    assert run("me").returncode == 3


# --------------------------------------------------------------------------- odd input


def _one_line_usage_error(r) -> str:
    assert r.stderr.startswith("headwater: ") and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.output
    return r.stderr


def test_out_of_range_ids_counts_offsets_and_overlong_names_are_one_line_usage_errors(hw):
    """Ids, partition ids and counts are u32, offsets and timestamps u64, names 1..255 UTF-8
    bytes: anything outside is refused before a request is built (exit 2, one line)."""
    stream = unique("odd")
    hw("stream", "create", stream)
    hw("topic", "create", stream, "t")
    too_big_id, too_long = str(2**32), "a" * 256
    cases = [
        ("stream", "get", "99999999999999999999"),
        ("stream", "get", too_big_id),
        ("stream", "get", too_long),
        ("stream", "create", "a" * 300),
        ("stream", "create", "é" * 128),  # 256 UTF-8 bytes
        ("stream", "update", stream, too_long),
        ("topic", "create", stream, too_long),
        ("topic", "create", stream, "t2", "--partitions", too_big_id),
        ("topic", "get", stream, too_big_id),
        ("partition", "create", stream, "t", too_big_id),
        ("segment", "delete", stream, "t", too_big_id, 1),
        ("consumer-group", "create", stream, "t", too_long),
        ("consumer-group", "get", stream, "t", too_big_id),
        ("consumer-offset", "set", "c", stream, "t", 0, str(2**64)),
        ("consumer-offset", "get", "c", stream, "t", too_big_id),
        ("message", "send", stream, "t", "--partition", too_big_id, "x"),
        ("message", "send", stream, "t", "--key", too_long, "x"),
        ("message", "poll", stream, "t", "--offset", str(2**64)),
        ("message", "poll", stream, "t", "--timestamp", str(2**64)),
        ("message", "poll", stream, "t", "--count", too_big_id),
        ("message", "poll", stream, "t", "--consumer", too_big_id),
        ("user", "create", too_long, "pass1"),
        ("user", "create", unique("u")[:20], "pass1", "-s", f"{too_big_id}:p_msg"),
        ("user", "get", too_big_id),
        ("user", "name", "iggy", too_long),
        ("client", "get", too_big_id),
    ]
    for args in cases:
        _one_line_usage_error(hw(*args, code=2))
    assert "out of range" in hw("stream", "get", "99999999999999999999", code=2).stderr
    assert "1..255 UTF-8 bytes" in hw("stream", "create", "a" * 300, code=2).stderr
    # past the param types, the encoders' refusals are usage errors too (the backstop)
    _one_line_usage_error(hw("user", "create", unique("u")[:20], "p" * 300, code=2))
    _one_line_usage_error(hw("message", "send", stream, "t", "-H", "h=" + "v" * 100_000, "x", code=2))
    # the largest in-range values still reach the server (no such stream: exit 1, not 2)
    assert "not found" in hw("stream", "get", str(2**32 - 1), code=1).stderr
    assert "not found" in hw("stream", "get", "b" * 255, code=1).stderr
