"""QA, session 12, about branch hw12-send: the Iggy send path's admission in one compiled call
(``_batch_c.verify_and_stamp``, reference ``batch._py_verify_and_stamp``) and the reply packed
in one go, attacked on two real ``headwater serve`` processes side by side, one with the
compiled extensions and one with ``HEADWATER_NO_EXTENSIONS=1``.

Several hundred SendMessages bodies, valid ones mutated (bytes flipped, counts, lengths,
checksums and reserved bytes set to odd and huge values, truncations, trailing bytes, zero
messages) go to both servers over raw connections: each must answer the same way (the same
reply status, or the same eviction), both keep serving another client, and each partition
holds exactly the messages of the sends it acknowledged, byte-identical (nothing half
appended)."""

from __future__ import annotations

import asyncio
import random
import struct

import apache_iggy as ig
import pytest

from headwater.codec import batch as batch_codec
from headwater.codec.iggy.commands import encode_request_body
from headwater.codec.iggy.commands import messages as wm
from headwater.codec.iggy.commands import streams as ws
from headwater.codec.iggy.commands import topics as wtop
from headwater.codec.iggy.primitives import Partitioning
from hw_server import ServerProcess, free_port
from test_iggy_raw import ConnectionClosed, RawConnection

STREAM, TOPIC = "qa12send", "t"


def valid_body(rng: random.Random, partition: int) -> tuple[int, bytes, list[bytes]]:
    payloads = [rng.randbytes(rng.choice([0, 1, 7, 100, 3000])) for _ in range(rng.randint(1, 6))]
    batch = batch_codec.build_batch(batch_codec.Message(p, id=rng.getrandbits(128)) for p in payloads)
    code, body = encode_request_body(
        wm.SendMessages(STREAM, TOPIC, Partitioning.by_partition(partition), len(payloads), memoryview(batch)))
    return int(code), body, payloads


ODD_U32 = [0, 1, 2, 47, 48, 255, 256, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF]
ODD_U64 = ODD_U32 + [1 << 32, (1 << 63), (1 << 64) - 1, (1 << 64) - (1 << 32), (1 << 64) - (1 << 32) + 1]


def mutate(rng: random.Random, body: bytes, metadata_end: int) -> bytes:
    b = bytearray(body)
    batch0 = metadata_end  # the batch starts right after the metadata
    kind = rng.randrange(12)
    if kind == 0:  # flip a byte anywhere
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncate
        del b[rng.randrange(len(b)):]
    elif kind == 2:  # trailing bytes
        b += rng.randbytes(rng.choice([1, 7, 48, 300]))
    elif kind == 3:  # the metadata's messages_count
        struct.pack_into("<I", b, batch0 - 4, rng.choice(ODD_U32))
    elif kind == 4:  # the batch header's message_count (and the metadata's, agreeing)
        v = rng.choice(ODD_U32)
        struct.pack_into("<I", b, batch0 + 48, v)
        struct.pack_into("<I", b, batch0 - 4, v)
    elif kind == 5:  # batch_length
        struct.pack_into("<Q", b, batch0 + 32, rng.choice(ODD_U64 + [len(b) - batch0 + 1, len(b) - batch0 - 1]))
    elif kind == 6:  # origin_timestamp
        struct.pack_into("<Q", b, batch0 + 24, rng.choice(ODD_U64))
    elif kind == 7:  # batch checksum
        struct.pack_into("<Q", b, batch0 + 40, rng.getrandbits(64))
    elif kind == 8:  # a reserved byte of the batch header
        b[batch0 + rng.randrange(52, 256)] = rng.randrange(1, 256)
    elif kind == 9:  # the first frame's payload_length / user_headers_length
        struct.pack_into("<I", b, batch0 + 256 + rng.choice([32, 36]), rng.choice(ODD_U32))
    elif kind == 10:  # the first frame's offset_delta / timestamp_delta / reserved
        at = rng.choice([24, 28, 40, 44])
        struct.pack_into("<I", b, batch0 + 256 + at, rng.choice(ODD_U32))
    else:  # zero messages: the header alone, counts 0
        del b[batch0 + 256:]
        struct.pack_into("<I", b, batch0 + 48, 0)
        struct.pack_into("<Q", b, batch0 + 32, 256)
        struct.pack_into("<I", b, batch0 - 4, 0)
    return bytes(b)


def answer(conn_box: list, server, code: int, body: bytes):
    """The server's answer to one request: ('status', n) or ('evicted', reason) or ('closed',)."""
    conn = conn_box[0]
    try:
        a = conn.call(code, body)
    except (ConnectionClosed, ConnectionResetError, BrokenPipeError):
        result = ("closed",)
    else:
        if a.kind == "eviction":
            result = ("evicted", a.reason)
        else:
            return ("status", a.status)
    conn.close()
    conn_box[0] = RawConnection(server.iggy_address)
    conn_box[0].login()
    return result


async def read_partition(server, partition: int) -> list[bytes]:
    c = ig.IggyClient(server.iggy_address)
    await c.connect()
    await c.login_user("iggy", "iggy")
    got: list[bytes] = []
    while True:
        batch = await c.poll_messages(STREAM, TOPIC, consumer=ig.Consumer.Single("audit"),
                                      polling_strategy=ig.PollingStrategy.Offset(len(got)),
                                      count=1000, auto_commit=False, partition_id=partition)
        if not batch:
            return got
        got += [m.payload() for m in batch]


def test_mutated_send_bodies_get_the_same_answer_compiled_and_pure_python(tmp_path):
    servers = [ServerProcess(tmp_path / "c" / "data", free_port(), free_port()),
               ServerProcess(tmp_path / "p" / "data", free_port(), free_port(),
                             extra_env={"HEADWATER_NO_EXTENSIONS": "1"})]
    for s in servers:
        s.data_dir.parent.mkdir(parents=True)
        s.start()
    try:
        boxes = []
        for s in servers:
            c = RawConnection(s.iggy_address)
            c.login()
            assert c.call_request(ws.CreateStream(STREAM)).status == 0
            assert c.call_request(wtop.CreateTopic(STREAM, 2, TOPIC)).status == 0
            boxes.append([c])
        rng = random.Random("qa12-send")
        stored: list[list[bytes]] = [[], []]  # partition -> payloads acknowledged (same on both)
        differences = []
        statuses: dict = {}
        for i in range(400):
            partition = i % 2
            code, body, payloads = valid_body(rng, partition)
            metadata_end = 4 + struct.unpack_from("<I", body, 0)[0]
            mutated = body if rng.random() < 0.15 else mutate(rng, body, metadata_end)
            results = [answer(box, s, code, mutated) for box, s in zip(boxes, servers)]
            statuses[results[0]] = statuses.get(results[0], 0) + 1
            if results[0] != results[1]:
                differences.append((i, results, mutated[:metadata_end + 64].hex()))
            if results[0] == ("status", 0) and results[1] == ("status", 0):
                if mutated[metadata_end:] == body[metadata_end:]:
                    stored[partition] += payloads
                else:  # a mutation both accepted (an id flipped...): its frames as sent
                    stored[partition] += [bytes(f.payload) for f in batch_codec.iter_frames(mutated[metadata_end:])]
        print("answers:", statuses)
        assert not differences, f"{len(differences)} different answers, e.g. {differences[:3]}"
        assert statuses.get(("status", 0), 0) > 40, statuses
        for s in servers:
            assert s.proc.poll() is None, s.log()[-3000:]
            for partition in range(2):
                assert asyncio.run(read_partition(s, partition)) == stored[partition], f"partition {partition}"
            assert "Traceback" not in s.log(), s.log()[-4000:]
    finally:
        for s in servers:
            if s.proc is not None:
                assert s.stop() == 0, s.log()[-3000:]
