"""The Iggy reference peer of ``compare.py`` (``benchmarks/iggy_reference_peer.py``) over its own
socket, frame by frame: with ``--verify`` it refuses a batch whose message checksum is wrong (the
work it stands in for), assigns offsets only to what it accepted, and its poll replies carry the
right offsets in a batch that verifies. The apache-iggy SDK's use of it is covered by
``test_bench_smoke.py``. Nothing here looks at a time.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _harness import IggyConn  # noqa: E402
from compare_servers import IggyReferencePeer  # noqa: E402
from headwater.codec import batch as bc  # noqa: E402
from headwater.codec.iggy.codes import Command, ConsumerKind, IggyErrorCode, PollingKind  # noqa: E402
from headwater.codec.iggy.commands import messages as wm  # noqa: E402
from headwater.codec.iggy.commands import streams as ws  # noqa: E402
from headwater.codec.iggy.commands import topics as wt  # noqa: E402
from headwater.codec.iggy.primitives import Consumer, Partitioning, PollingStrategy  # noqa: E402


@pytest.fixture
def peer(tmp_path):
    p = IggyReferencePeer(tmp_path, verify=True).start()
    yield p
    p.stop()


def send_body(messages: list[bc.Message], corrupt: bool = False) -> bytes:
    batch = bytearray(bc.build_batch(messages))
    if corrupt:  # one payload byte of the last frame: its checksum no longer matches
        batch[-1] ^= 0xFF
    return wm.encode_send_messages(wm.SendMessages("bench", "t", Partitioning.by_partition(0), len(messages),
                                                   memoryview(batch)))


def poll_body(offset: int, count: int) -> bytes:
    return wm.encode_poll_messages(wm.PollMessages(Consumer(ConsumerKind.CONSUMER, 1), "bench", "t", 0,
                                                   PollingStrategy(PollingKind.OFFSET, offset), count, False))


def test_verifying_peer_refuses_bad_checksums_and_serves_right_offsets(peer):
    send, poll = int(Command.SEND_MESSAGES), int(Command.POLL_MESSAGES)
    with IggyConn(peer.iggy) as c:
        assert c.call(int(Command.GET_STREAMS))[:2] == ("reply", IggyErrorCode.UNAUTHENTICATED)  # before login
        c.login()
        c.ok(int(Command.CREATE_STREAM), ws.encode_create_stream(ws.CreateStream("bench")))
        c.ok(int(Command.CREATE_TOPIC), wt.encode_create_topic(wt.CreateTopic("bench", 1, "t")))
        ten = [bc.Message(bytes([i]) * 100) for i in range(10)]

        bases = [wm.decode_send_messages_reply(c.ok(send, send_body(ten)))[0].base_offset for _ in range(2)]
        assert bases == [0, 10]
        assert c.call(send, send_body(ten, corrupt=True))[:2] == ("reply", IggyErrorCode.INVALID_MESSAGE_CHECKSUM)
        assert wm.decode_send_messages_reply(c.ok(send, send_body(ten)))[0].base_offset == 20  # nothing skipped

        prefix, batches = wm.decode_poll_reply(c.ok(poll, poll_body(5, 100)))
        assert (prefix.partition_id, prefix.current_offset, prefix.messages_count) == (0, 29, 25)
        header = bc.verify(batches)  # frame and batch checksums hold, offset deltas are 0..24
        assert (header.base_offset, header.message_count, header.last_offset) == (5, 25, 29)
        assert {len(f.payload) for f in bc.iter_frames(batches)} == {100}  # as long as what was sent

        prefix, batches = wm.decode_poll_reply(c.ok(poll, poll_body(30, 100)))
        assert (prefix.current_offset, prefix.messages_count, len(batches)) == (29, 0, 0)
        # a command the SDK's benchmark runs never send: refused, and the connection still serves
        assert c.call(int(Command.GET_STATS))[:2] == ("reply", IggyErrorCode.INVALID_COMMAND)
        assert struct.unpack_from("<I", c.ok(poll, poll_body(0, 1)), 12)[0] == 1
    peer.stop()
    assert "unanswered: code 10 x1" in peer.summary(), peer.summary()
