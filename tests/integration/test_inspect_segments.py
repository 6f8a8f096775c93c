"""``headwater inspect`` on segment and index files a real server wrote (Iggy SDK and Kafka
producers), run as the command a user types."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import apache_iggy as ig
import pytest
from kafka import KafkaProducer


def inspect(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "headwater", "inspect", *args], input=stdin,
                          capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    from hw_server import ServerProcess, free_port

    server = ServerProcess(tmp_path_factory.mktemp("inspect") / "data", free_port(), free_port()).start()

    async def send():
        c = ig.IggyClient(server.iggy_address)
        await c.connect()
        await c.login_user("iggy", "iggy")
        await c.create_stream("ins")
        await c.create_topic("ins", "t", 1)
        for i in range(3):
            await c.send_messages("ins", "t", 0, [ig.SendMessage(b"iggy-%d-%d" % (i, j), user_headers={"n": j})
                                                  for j in range(4)])

    asyncio.run(send())
    producer = KafkaProducer(bootstrap_servers=server.kafka_address)
    producer.send("orders", key=b"customer-7", value=b"kafka value", headers=[("h", b"v")]).get(timeout=30)
    producer.close()
    assert server.stop() == 0
    return server.data_dir


def logs(data_dir, suffix=".log"):
    return sorted(p for p in data_dir.rglob(f"*{suffix}") if p.stat().st_size)


def test_every_segment_a_server_wrote_inspects_with_valid_checksums(data_dir):
    found = logs(data_dir)
    assert len(found) >= 2  # the Iggy topic's and the Kafka topic's
    messages = 0
    for path in found:
        result = inspect(str(path), "--output", "json")
        assert result.returncode == 0, result.stderr.decode()
        tree = json.loads(result.stdout)
        batches = [b for b in tree["children"] if b["name"].startswith("batch[")]
        for b in batches:
            checks = [c["check"] for c in b["children"] if c["check"]]
            assert checks == ["valid"]  # the batch checksum; frames are one level down
            frames = [f for f in b["children"] if f["name"].startswith("frame[")]
            assert all(f["children"][0]["check"] == "valid" for f in frames)
            messages += len(frames)
    assert messages == 3 * 4 + 1


def test_kafka_key_is_shown_in_the_frame_user_headers(data_dir):
    kafka_log = [p for p in logs(data_dir) if "kafka" in str(p) or "orders" in str(p)]
    text = "".join(inspect(str(p)).stdout.decode() for p in logs(data_dir))
    assert "'kafka.key': 'customer-7'" in text, text[-3000:]
    assert "carries a Kafka record field" in text
    assert kafka_log or text


def test_index_files_and_stdin_hex_and_a_damaged_copy(data_dir, tmp_path):
    for path in logs(data_dir, ".index"):
        result = inspect(str(path))
        assert result.returncode == 0, result.stderr.decode()
        assert "entry[0]" in result.stdout.decode()
    segment = logs(data_dir)[0]
    data = segment.read_bytes()
    as_hex = inspect("-", "--as", "segment", "--output", "json", stdin=data.hex().encode())
    assert as_hex.returncode == 0
    from_hex, from_file = json.loads(as_hex.stdout), json.loads(inspect(str(segment), "--output", "json").stdout)
    assert from_hex["name"] == "segment" and from_file["name"] == str(segment)
    assert from_hex["children"] == from_file["children"]
    damaged = bytearray(data)
    damaged[256 + 48] ^= 0xFF  # first payload byte of the first frame
    copy = tmp_path / segment.name
    copy.write_bytes(bytes(damaged))
    result = inspect(str(copy))
    assert result.returncode == 1
    assert b"checksum mismatch: checksum at byte 256 (0x0100)" in result.stderr
