"""QA, session 9: trying to break what landed this session, on real server processes.

Damaged batches mid-segment and lookups by timestamp: a batch damaged at rest must never be
stepped over silently. A poll by timestamp that would begin in (or before) a damaged batch has
to fail closed (Iggy 4027) or begin at or before the damaged batch (whose read then fails); it
must never answer with the messages after the damage as if the damaged batch were not there.
"""

from __future__ import annotations

import struct

import apache_iggy as ig
import pytest

from headwater.codec import batch as batch_codec
from headwater.codec.iggy.codes import ConsumerKind, PollingKind
from headwater.codec.iggy.commands import messages as wm
from headwater.codec.iggy.commands.messages import Consumer, PollingStrategy
from kafka_wire import KafkaWire
from test_kafka_transactions import admin_create
from test_robustness_disk import index_positions
from test_robustness_disk_prefix import frames_of, partition_log, stored_batches, value
from test_robustness_wire import Raw, healthy, run, sdk_client

BATCHES = 40  # per partition, 3 messages each
INVALID_MESSAGE_CHECKSUM = 4027
CORRUPT_MESSAGE = 2
LIST_OFFSETS = 2


async def _fill(server, topic: str, partitions: int) -> tuple[int, int]:
    c = await sdk_client(server)
    for p in range(partitions):
        for b in range(BATCHES):
            await c.send_messages("kafka", topic, p, [ig.SendMessage(value(topic, p, b, m)) for m in range(3)])
    return (await c.get_stream("kafka")).id, (await c.get_topic("kafka", topic)).id


def _base_timestamp(batch: bytes) -> int:
    return batch_codec.read_header(batch).base_timestamp


def _poll_by_timestamp(stream, topic, partition: int, timestamp_us: int, count: int = 100_000) -> bytes:
    return wm.encode_poll_messages(wm.PollMessages(
        Consumer(ConsumerKind.CONSUMER, 1), stream, topic, partition,
        PollingStrategy(PollingKind.TIMESTAMP, timestamp_us), count, False))


@pytest.fixture(scope="module")
def ts_damaged(tmp_path_factory):
    """``ts`` partition 0: batch k's base_timestamp lowered on disk (its highest set bit cleared:
    the batch now looks older than the one before it); partition 1: batch k's batch_length
    damaged (under the 256-byte minimum). Yields (server, k, {partition: batches as stored})."""
    from hw_server import ServerProcess, free_port

    server = ServerProcess(tmp_path_factory.mktemp("qa-ts") / "data", free_port(), free_port()).start()
    try:
        admin_create(server, "ts", partitions=2)
        ids = run(_fill(server, "ts", 2))
        assert server.stop() == 0
        k = BATCHES // 3
        stored = {}
        for p in (0, 1):
            log = partition_log(server, {"ts": ids}, "ts", p)
            batches = stored_batches(log)
            stored[p] = batches
            position, damaged_batch = batches[k]
            assert max(index_positions(log)) > position + len(damaged_batch)  # not walked at boot
            with open(log, "r+b") as f:
                if p == 0:
                    ts = _base_timestamp(damaged_batch)
                    f.seek(position + 16)
                    f.write(struct.pack("<Q", ts & ~(1 << (ts.bit_length() - 1))))
                else:
                    f.seek(position + 32)  # batch_length (u64 at 32..40)
                    f.write(struct.pack("<Q", 100))
        server.start()
        yield server, k, stored
    finally:
        if server.proc is not None:
            assert server.stop() == 0, server.log()


@pytest.mark.parametrize("partition", [0, 1], ids=["timestamp damaged", "length damaged"])
def test_an_iggy_poll_by_timestamp_never_steps_over_a_damaged_batch(ts_damaged, partition):
    """The timestamps asked for are the damaged batch's own (as written) and one µs past the
    batch before it: the first message at or after either is in the damaged batch, so the answer
    is 4027 (or messages from offset 3k on, whose read then fails): never offsets past it."""
    server, k, stored = ts_damaged
    true_ts = _base_timestamp(stored[partition][k][1])
    before = _base_timestamp(stored[partition][k - 1][1]) + 1
    with Raw(server.iggy_address) as r:
        r.login()
        for timestamp in (before, true_ts):
            kind, status, body = r.call(100, _poll_by_timestamp("kafka", "ts", partition, timestamp))
            assert kind == "reply", (timestamp, kind, status)
            if status == 0:
                offsets = [o for o, _ in frames_of(wm.decode_poll_reply(body)[1])]
                assert not offsets or offsets[0] <= 3 * k, (
                    f"poll by timestamp {timestamp} stepped over the damaged batch {3 * k}..{3 * k + 2}: "
                    f"answered from offset {offsets[0]}")
            else:
                assert status == INVALID_MESSAGE_CHECKSUM, status
        # a timestamp in the prefix is still served from the prefix
        kind, status, body = r.call(100, _poll_by_timestamp("kafka", "ts", partition, 0))
        assert (kind, status) == ("reply", 0)
        assert [o for o, _ in frames_of(wm.decode_poll_reply(body)[1])] == list(range(3 * k))
    healthy(server)
