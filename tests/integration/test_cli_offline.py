"""``headwater verify``, ``dump`` and ``admin reset-root-password`` on data directories a real
server wrote, with bytes deliberately damaged; and refused while a server holds the directory.

One server writes the data (started with the client's ``HEADWATER_SERVER``,
``HEADWATER_USERNAME``, ``HEADWATER_PASSWORD`` and ``HEADWATER_TOKEN`` in its
environment, which ``serve`` must ignore); each test works on its own copy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner
from hw_server import ServerProcess, free_port

from headwater.cli.main import main
from headwater.codec import batch as batch_codec

PAYLOAD = "x" * 100_000  # 9 lines per send: about 0.9 MB a batch, so 1 MiB segments roll


def hw(*args, input=None, code=0, env=None):
    result = CliRunner().invoke(main, [str(a) for a in args], input=input, prog_name="headwater",
                                env={"HEADWATER_USERNAME": None, "HEADWATER_PASSWORD": None, "HEADWATER_TOKEN": None,
                                     "HEADWATER_SERVER": None, **(env or {})})
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == code, (args, result.exit_code, result.output)
    return result


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A stopped server's data directory: stream ``s``, topic ``t`` (2 partitions, 1 MiB
    segments; partition 0's three 0.9 MB batches span two segments), topic ``small``."""
    base = tmp_path_factory.mktemp("offline")
    server = ServerProcess(base / "data", free_port(), free_port())
    server.start(env={"HEADWATER_SERVER": "127.0.0.1:1", "HEADWATER_USERNAME": "nobody",
                      "HEADWATER_PASSWORD": "nothing", "HEADWATER_TOKEN": "none"})
    env = {"HEADWATER_SERVER": server.iggy_address, "HEADWATER_USERNAME": "iggy", "HEADWATER_PASSWORD": "iggy"}
    try:
        hw("stream", "create", "s", env=env)
        hw("topic", "create", "s", "t", "--partitions", 2, "--option", "segment_size=1 MiB", env=env)
        hw("topic", "create", "s", "small", env=env)
        for i in range(3):
            hw("message", "send", "s", "t", "-p", 0, input="\n".join(f"{i}-{j}-{PAYLOAD}" for j in range(9)),
               env=env)
        hw("message", "send", "s", "small", "-p", 0, "hello", "world", "-H", "k=v", env=env)
        hw("message", "send", "s", "t", "-p", 1, "one", env=env)
        # while the server runs, every offline tool is refused with one line and exit 4
        for args in (("verify", server.data_dir), ("dump", server.data_dir, "--stream", "s", "--topic", "t",
                                                   "--partition", 0),
                     ("admin", "reset-root-password", server.data_dir, "--password", "newpass")):
            r = hw(*args, code=4)
            assert r.stderr.count("\n") == 1 and "is in use by another process (pid " in r.stderr, r.stderr
            assert "stop the server first" in r.stderr
    finally:
        rc = server.stop()
    assert rc == 0, server.log()
    return server.data_dir


@pytest.fixture
def data(written, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(written, copy)
    return copy


def _partition(data, topic_id: int = 0, partition_id: int = 0):
    return data / "streams" / "0" / "topics" / str(topic_id) / "partitions" / str(partition_id)


def _flip(path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x5A]))


def test_verify_walks_everything_and_reports_ok(data):
    assert len(list(_partition(data).glob("*.log"))) >= 2, "partition 0 should span segments"
    segments = len(list(data.glob("streams/*/topics/*/partitions/*/*.log")))
    r = hw("-o", "json", "verify", data)
    report = json.loads(r.stdout)
    assert report["ok"] is True and report["data_dir"] == str(data)
    assert report["segments"] == segments and report["indexes"] == segments and report["batches"] == 5
    assert report["messages"] == 3 * 9 + 2 + 1 and report["metadata_files"] >= 2
    assert report["findings"] == []
    files = [*data.glob("metadata/*.journal"), *data.glob("metadata/*.snapshot"),
             *data.glob("streams/*/topics/*/partitions/*/*.log"), *data.glob("streams/*/topics/*/partitions/*/*.index")]
    assert report["bytes"] == sum(f.stat().st_size for f in files)
    text = hw("verify", data).stdout
    assert text.rstrip().endswith("ok") and f"{segments} segments" in text


def test_verify_names_the_file_and_byte_of_a_damaged_payload(data):
    log = sorted(_partition(data).glob("*.log"))[1]
    raw = log.read_bytes()
    (batch,) = list(batch_codec.split_batches(raw))
    frames = batch_codec.frame_positions(batch)
    target = frames[4] + batch_codec.FRAME_HEADER_SIZE + 1000  # inside the 5th message's payload
    _flip(log, target)
    r = hw("-o", "json", "verify", data, code=1)
    report = json.loads(r.stdout)
    assert report["ok"] is False
    (finding,) = [f for f in report["findings"] if f["damage"]]
    assert finding["path"] == str(log) and finding["byte"] == frames[4]  # the frame whose checksum fails
    assert "frame checksum" in finding["message"]
    text = hw("verify", data, code=1).stdout
    assert f"DAMAGE: {log}: byte {frames[4]}: frame checksum" in text


def test_verify_catches_a_damaged_batch_header_and_a_damaged_index(data):
    log = sorted(_partition(data).glob("*.log"))[0]
    _flip(log, 20)  # base_timestamp: only the batch checksum covers it
    index = _partition(data, 1) / ("0" * 20 + ".index")
    _flip(index, 8)  # entry 0's timestamp
    report = json.loads(hw("-o", "json", "verify", data, code=1).stdout)
    damaged = {(f["path"], f["byte"]) for f in report["findings"] if f["damage"]}
    assert damaged == {(str(log), 40), (str(index), 0)}, report["findings"]


def test_verify_names_a_damaged_metadata_journal_record(data):
    journal = data / "metadata" / "catalog.journal"
    _flip(journal, 16 + 8 + 2)  # inside the first record's JSON
    report = json.loads(hw("-o", "json", "verify", data, code=1).stdout)
    (finding,) = report["findings"]
    assert (finding["path"], finding["byte"], finding["damage"]) == (str(journal), 16, True)
    assert "crc32" in finding["message"]


def test_a_torn_tail_is_a_note_not_damage(data):
    log = sorted(_partition(data).glob("*.log"))[-1]
    (_partition(data) / "clean-shutdown").unlink()  # a crash leaves no clean-close marker
    size = log.stat().st_size
    with open(log, "ab") as f:
        f.write(b"\x07" * 100)  # a header cut short by a crash
    report = json.loads(hw("-o", "json", "verify", data).stdout)
    assert report["ok"] is True
    (note,) = report["findings"]
    assert (note["path"], note["byte"], note["damage"]) == (str(log), size, False)
    assert "torn tail" in note["message"]


def test_a_torn_looking_tail_after_a_clean_close_is_damage(data):
    """The server was stopped cleanly (the copy holds its clean-close marker): a partial last
    batch is then damage to acknowledged data, which the next start refuses; verify says so."""
    assert (_partition(data) / "clean-shutdown").exists()
    log = sorted(_partition(data).glob("*.log"))[-1]
    size = log.stat().st_size
    with open(log, "ab") as f:
        f.write(b"\x07" * 100)
    report = json.loads(hw("-o", "json", "verify", data, code=1).stdout)
    assert report["ok"] is False
    (finding,) = report["findings"]
    assert (finding["path"], finding["byte"], finding["damage"]) == (str(log), size, True)
    assert "after a clean close" in finding["message"]


def test_garbage_over_a_first_header_with_whole_batches_after_is_damage_not_a_torn_tail(data):
    """Recovery refuses such a partition ("a whole valid batch follows"): verify must not
    call it a torn tail, and dump must fail rather than print nothing."""
    log = next(p for p in sorted(_partition(data).glob("*.log"))
               if len(list(batch_codec.split_batches(p.read_bytes()))) >= 2)
    first = next(iter(batch_codec.split_batches(log.read_bytes())))
    with open(log, "r+b") as f:
        f.write(b"\xde\xad\xbe\xef" * 16)
    log.with_suffix(".index").unlink()
    report = json.loads(hw("-o", "json", "verify", data, code=1).stdout)
    (finding,) = [f for f in report["findings"] if f["damage"]]
    assert (finding["path"], finding["byte"]) == (str(log), 0), report["findings"]
    assert f"a whole valid batch follows at byte {len(first)}" in finding["message"]
    assert not [f for f in report["findings"] if "torn tail (" in f["message"]], report["findings"]
    assert f"DAMAGE: {log}: byte 0: " in hw("verify", data, code=1).stdout
    r = hw("dump", data, "--stream", "s", "--topic", "t", "--partition", 0, code=1)
    assert f"damaged data: {log}: byte 0: " in r.stderr and "not a torn tail" in r.stderr


def test_dump_prints_messages_like_poll(data):
    lines = [json.loads(line) for line in hw("-o", "json", "dump", data, "--stream", "s", "--topic", "small",
                                             "--partition", 0).stdout.splitlines()]
    assert [(m["offset"], m["payload"], m["headers"]) for m in lines] == [(0, "hello", {"k": "v"}),
                                                                          (1, "world", {"k": "v"})]
    assert set(lines[0]) == {"partition_id", "offset", "timestamp", "origin_timestamp", "id", "checksum",
                             "payload", "headers", "kafka_key"}
    # across segments, from an offset, bounded, by ids
    out = hw("-o", "json", "dump", data, "--stream", 0, "--topic", 0, "--partition", 0, "--from", 16, "--count", 4,
             "--format", "hex").stdout.splitlines()
    got = [json.loads(line) for line in out]
    assert [m["offset"] for m in got] == [16, 17, 18, 19]
    assert bytes.fromhex(got[0]["payload"]).decode().startswith("1-7-x")
    assert bytes.fromhex(got[2]["payload"]).decode().startswith("2-0-x")
    text = hw("dump", data, "--stream", "s", "--topic", "small", "--partition", 0, "--from", 1).stdout
    assert text.startswith("offset=1 ") and text.rstrip().endswith('headers={"k": "v"} world')
    hw("dump", data, "--stream", "nope", "--topic", "t", "--partition", 0, code=1)
    hw("dump", data, "--stream", "s", "--topic", "t", "--partition", 7, code=1)


def test_dump_stops_at_damage_with_its_place(data):
    log = sorted(_partition(data).glob("*.log"))[0]
    _flip(log, 600)
    r = hw("dump", data, "--stream", "s", "--topic", "t", "--partition", 0, code=1)
    assert f"damaged data: {log}: byte " in r.stderr


def test_offline_tools_refuse_a_directory_that_is_not_a_data_directory(tmp_path):
    r = hw("verify", tmp_path, code=4)
    assert "is not a Headwater data directory" in r.stderr
    hw("verify", tmp_path / "missing", code=2)


def test_reset_root_password_then_the_server_takes_only_the_new_one(data):
    r = hw("admin", "reset-root-password", data, input="abc123\nabc123\n")
    assert "password of root user 'iggy' reset" in r.stdout
    hw("admin", "reset-root-password", data, "--password", "x", code=2)  # too short, nothing written
    server = ServerProcess(data, free_port(), free_port()).start()
    try:
        env = {"HEADWATER_SERVER": server.iggy_address, "HEADWATER_USERNAME": "iggy"}
        assert json.loads(hw("-o", "json", "me", env={**env, "HEADWATER_PASSWORD": "abc123"}).stdout)["user_id"] == 0
        assert "invalid_credentials" in hw("me", env={**env, "HEADWATER_PASSWORD": "iggy"}, code=3).stderr
    finally:
        assert server.stop() == 0


def test_verify_shows_a_progress_bar_with_bytes_per_second(data):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
    env.update({"COLUMNS": "120", "TERM": "xterm", "FORCE_COLOR": "1"})
    r = subprocess.run([sys.executable, "-m", "headwater", "verify", str(data)], capture_output=True, text=True,
                       env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "verify" in r.stderr and "/s" in r.stderr  # rich's transfer-speed column
