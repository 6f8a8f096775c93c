"""QA, session 13: the preallocation "early roll" (storage/local/prealloc.py, docs/gaps.md
"Blocks reserved ahead of the appends") under SIGKILL and restart, on a real server.

A segment not made from a whole spare (a partition's first, the active one after a restart)
asks for its spare at its first top-up and rolls onto it early once it is ready: a short
segment. Rounds of: send through the apache-iggy SDK until the early roll has happened (a
second .log), a little more, then SIGKILL mid-send and restart; the restarted server's active
segment is again not whole, so every round makes another short segment. After each restart:
every acknowledged message polls back in order with contiguous offsets (Iggy), Kafka fetch
(kafka-python) reads the same, a time-based poll and Kafka ListOffsets by time at each short
segment's boundary find its first message, a Kafka group offset committed at a boundary
survives the kill; no spare file or reserved block is left once the server stops, and
``headwater verify`` on the stopped directory is clean.
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time

import apache_iggy as ig
import pytest

from headwater.storage.local import prealloc
from hw_server import ServerProcess, free_port

pytestmark = pytest.mark.slow

MIB = 1 << 20
WINDOW, SEGMENT = 8 * MIB, 64 * MIB
OPTIONS = {"enforce_fsync": "false", "messages_required_to_save": str(16 << 20),
           "size_of_messages_required_to_save": str(1 << 30), "segment_size": str(SEGMENT)}
PER_SEND = 100  # messages of 2000 bytes: ~0.2 MiB a send


def logs(server) -> list[str]:
    return sorted(glob.glob(str(server.data_dir / "streams" / "*" / "topics" / "*" / "partitions" / "*" / "*.log")))


def payload(i: int) -> bytes:
    return i.to_bytes(8, "big") + bytes([i % 251]) * 1992


async def client(server) -> ig.IggyClient:
    c = ig.IggyClient(server.iggy_address)
    await c.connect()
    await c.login_user("iggy", "iggy")
    return c


async def poll_all(server, stream: str = "kafka", topic: str = "t", partition: int = 0) -> list:
    """Every message of the partition, from its log start, through the apache-iggy SDK."""
    c = await client(server)
    got: list = []
    while True:
        batch = await c.poll_messages(stream, topic, consumer=ig.Consumer.Single("r"),
                                      polling_strategy=ig.PollingStrategy.Offset(got[-1].offset() + 1 if got else 0),
                                      count=1000, auto_commit=False, partition_id=partition)
        if not batch:
            return got
        got += batch


def early_server(tmp_path, **env: str) -> ServerProcess:
    """A started server with an 8 MiB window and write-behind off (``env`` added); skips the
    test on tmpfs, where nothing is reserved."""
    server = ServerProcess(tmp_path / "data", free_port(), free_port(),
                           extra_env={"HEADWATER_SYSTEM_PREALLOCATE_WINDOW_BYTES": str(WINDOW),
                                      "HEADWATER_SYSTEM_WRITE_BEHIND_CACHE_BYTES": "0", **env}).start()
    if prealloc.memory_backed(str(server.data_dir)):
        server.stop()
        pytest.skip("the data directory is on tmpfs: nothing is reserved there")
    return server


async def create_topic(server) -> None:
    c = await client(server)
    await c.create_stream("kafka")
    await c.create_topic("kafka", "t", 1, options=OPTIONS)


async def every_ack_kept(server, acked: int) -> list:
    """The partition's messages, checked: offsets from 0 without a gap, the first ``acked``
    the payloads sent (what a kill kept past the last acknowledgement may follow)."""
    messages = await poll_all(server)
    assert len(messages) >= acked, (len(messages), acked)
    assert [m.offset() for m in messages] == list(range(len(messages)))
    assert [m.payload() for m in messages[:acked]] == [payload(i) for i in range(acked)]
    return messages


def stopped_and_clean(server) -> dict:
    """Stop the server (a clean stop: exit 0); then its stream files hold no spare and no block
    reserved past their end, and ``headwater verify`` finds nothing; returns verify's report."""
    assert server.stop() == 0, server.log()
    files = [p for p in glob.glob(str(server.data_dir / "streams" / "**" / "*"), recursive=True) if os.path.isfile(p)]
    assert [p for p in files if os.path.basename(p).startswith(prealloc.SPARE_PREFIX)] == []
    for path in files:
        assert prealloc.held_past_data(os.stat(path)) <= prealloc.SLACK_BYTES, path
    r = subprocess.run([sys.executable, "-m", "headwater", "-o", "json", "verify", str(server.data_dir)],
                       capture_output=True, text=True, timeout=300)
    report = json.loads(r.stdout)
    assert r.returncode == 0 and report["ok"] is True and report["findings"] == [], r.stdout + r.stderr
    return report


SENDER = """
import asyncio, sys
import apache_iggy as ig
address, sent, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def payload(i):
    return i.to_bytes(8, "big") + bytes([i % 251]) * 1992
async def go():
    global sent
    c = ig.IggyClient(address)
    await c.connect()
    await c.login_user("iggy", "iggy")
    while True:
        await c.send_messages("kafka", "t", 0, [ig.SendMessage(payload(i)) for i in range(sent, sent + per)])
        sent += per
        print(sent, flush=True)
asyncio.run(go())
"""


class Sender:
    """The apache-iggy SDK sending from ``sent`` on, PER_SEND messages a call, in a process of
    its own that prints the count acknowledged after each call (a killed server leaves the
    SDK reconnecting; its process is killed too, so no send of it reaches the next server)."""

    def __init__(self, server, sent: int) -> None:
        self.acked = sent
        self.proc = subprocess.Popen([sys.executable, "-c", SENDER, server.iggy_address, str(sent), str(PER_SEND)],
                                     stdout=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.acked = int(line)

    def stop(self) -> int:
        self.proc.kill()
        self.proc.wait()
        self.thread.join()
        return self.acked


def kafka_fetch_all(server, total: int) -> list:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=server.kafka_address, enable_auto_commit=False, consumer_timeout_ms=5000,
                      max_partition_fetch_bytes=4 * MIB, fetch_max_bytes=8 * MIB)
    try:
        tp = TopicPartition("t", 0)
        c.assign([tp])
        c.seek(tp, 0)
        out = []
        for m in c:
            out.append((m.offset, m.value))
            if len(out) >= total:
                break
        return out
    finally:
        c.close()


def kafka_offset_for_time(server, ts_ms: int) -> int | None:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=server.kafka_address, enable_auto_commit=False)
    try:
        tp = TopicPartition("t", 0)
        found = c.offsets_for_times({tp: ts_ms})[tp]
        return None if found is None else found.offset
    finally:
        c.close()


def kafka_group(server, commit: int | None = None) -> int | None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    c = KafkaConsumer(bootstrap_servers=server.kafka_address, group_id="g13", enable_auto_commit=False)
    try:
        tp = TopicPartition("t", 0)
        if commit is not None:
            c.commit({tp: OffsetAndMetadata(commit, "", -1)} if _three_fields() else {tp: OffsetAndMetadata(commit, "")})
        return c.committed(tp)
    finally:
        c.close()


def _three_fields() -> bool:
    from kafka.structs import OffsetAndMetadata

    return len(OffsetAndMetadata._fields) == 3


def first_offsets(server) -> list[int]:
    return [int(os.path.basename(p)[:-4]) for p in logs(server)]


@pytest.mark.skipif(not prealloc.available(), reason="needs Linux fallocate(2)")
@pytest.mark.parametrize("after", [0, 5], ids=["kill-at-the-roll", "kill-1MiB-after"])
def test_sigkill_after_early_rolls_loses_nothing_and_leaks_nothing(tmp_path, after):
    server = early_server(tmp_path)
    try:
        asyncio.run(create_topic(server))
        acked = 0
        committed = None
        for round_ in range(3):
            segments_before = len(logs(server))
            # until this round's early roll (one more .log), then ~1 MiB more, then the kill mid-send
            sender = Sender(server, acked)
            while len(logs(server)) == segments_before:
                assert sender.proc.poll() is None, "the sender stopped"
                time.sleep(0.01)
            rolled_at = sender.acked
            while sender.acked < rolled_at + after * PER_SEND:
                assert sender.proc.poll() is None, "the sender stopped"
                time.sleep(0.01)
            server.kill()
            acked = sender.stop()
            assert len(logs(server)) == segments_before + 1, logs(server)
            server.start()
            messages = asyncio.run(every_ack_kept(server, acked))
            acked = len(messages)  # what a restart kept past the last acknowledgement is the log now
            # each short segment's boundary: a time poll and ListOffsets by time find its first message
            for first in first_offsets(server)[1:]:
                if first >= acked:
                    continue
                ts = messages[first].timestamp()
                if messages[first - 1].timestamp() == ts:
                    continue  # one batch's timestamp on both sides: nothing to tell apart
                polled = asyncio.run(_poll_at(server, ts))
                assert polled == first, (round_, first, polled)
                # Kafka's timestamps are the producer's (origin), in ms: the first record at or after
                ms = messages[first].origin_timestamp() // 1000
                expected = next(i for i, m in enumerate(messages) if m.origin_timestamp() // 1000 >= ms)
                assert kafka_offset_for_time(server, ms) == expected, (round_, first, ms)
            boundary = first_offsets(server)[-1]
            if committed is not None:
                assert kafka_group(server) == committed, round_
            committed = kafka_group(server, commit=boundary)
            assert committed == boundary
        sizes = [os.path.getsize(p) for p in logs(server)]
        assert len(sizes) == 4 and all(size < SEGMENT - WINDOW for size in sizes[:-1]), sizes  # three early rolls
        fetched = kafka_fetch_all(server, acked)
        assert [o for o, _ in fetched] == list(range(acked))
        assert [v for _, v in fetched] == [m.payload() for m in asyncio.run(poll_all(server))]
        assert stopped_and_clean(server)["messages"] == acked
    finally:
        if server.proc is not None:
            server.stop(signal.SIGKILL)


async def _poll_at(server, ts: int) -> int:
    c = await client(server)
    batch = await c.poll_messages("kafka", "t", consumer=ig.Consumer.Single("r"),
                                  polling_strategy=ig.PollingStrategy.Timestamp(ts),
                                  count=1, auto_commit=False, partition_id=0)
    return batch[0].offset()



@pytest.mark.skipif(not prealloc.available(), reason="needs Linux fallocate(2)")
def test_sigkill_while_the_early_spare_is_being_made(tmp_path):
    """Three rounds of: send until the early spare's files appear (being made, or made and not
    yet rolled onto), SIGKILL at once, restart. Every acknowledged message reads back in order
    after each restart; the spare left behind is recovery's to remove; once stopped, nothing
    is reserved and verify is clean."""
    server = early_server(tmp_path)
    spares = str(server.data_dir / "streams" / "*" / "topics" / "*" / "partitions" / "*" / (prealloc.SPARE_PREFIX + "*"))
    try:
        asyncio.run(create_topic(server))
        acked = 0
        for round_ in range(3):
            sender = Sender(server, acked)
            while not glob.glob(spares):
                assert sender.proc.poll() is None, "the sender stopped"
                time.sleep(0.005)
            server.kill()
            acked = sender.stop()
            server.start()
            assert glob.glob(spares) == [], round_
            messages = asyncio.run(every_ack_kept(server, acked))
            acked = len(messages)
        assert stopped_and_clean(server)["messages"] == acked
    finally:
        if server.proc is not None:
            server.stop(signal.SIGKILL)
