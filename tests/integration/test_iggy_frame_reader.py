"""The Iggy TCP listener's frame reader (``headwater.frontends.frames``) against a real server,
over plain TCP and TLS: however the bytes of a request are split on the wire, the body that is
stored is the body that was sent; a frame over the limit is refused from its header; a peer
that closes mid-body stores nothing and leaves the server serving others."""

from __future__ import annotations

import random
import socket
import ssl
import time

import pytest

from headwater.codec import batch as batch_codec
from headwater.codec.iggy.codes import EvictionReason
from headwater.codec.iggy.commands import encode_request_body
from headwater.codec.iggy.commands import messages as wm
from headwater.codec.iggy.commands import streams as ws
from headwater.codec.iggy.commands import topics as wtop
from headwater.codec.iggy.primitives import Partitioning
from iggy_transports import start_server
from test_iggy_raw import RawConnection, poll

MAX_FRAME = 256 * 1024  # tcp.max_frame_size of these servers


@pytest.fixture(scope="module", params=["tcp", "tls-tcp"])
def reader_server(request, tmp_path_factory):
    s, certs = start_server(tmp_path_factory.mktemp(f"frames-{request.param}"), tls=request.param == "tls-tcp",
                            env={"HEADWATER_TCP_MAX_FRAME_SIZE": str(MAX_FRAME)})
    try:
        yield s, certs
    finally:
        if s.proc is not None:
            rc = s.stop()
            assert rc == 0, f"server exited with {rc} on SIGTERM:\n{s.log()}"


def connect(reader_server) -> RawConnection:
    server, certs = reader_server
    c = RawConnection(server.iggy_address)
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if certs is not None:
        ctx = ssl.create_default_context(cafile=str(certs.ca))
        c.sock = ctx.wrap_socket(c.sock, server_hostname="localhost")
    return c


def send_frame(c: RawConnection, stream: str, topic: str, payloads: list[bytes]) -> bytes:
    batch = batch_codec.build_batch(batch_codec.Message(p, id=i + 1) for i, p in enumerate(payloads))
    code, body = encode_request_body(
        wm.SendMessages(stream, topic, Partitioning.by_partition(0), len(payloads), memoryview(batch)))
    return c.frame(int(code), body)


def stored(c: RawConnection, stream: str, topic: str) -> list[bytes]:
    a = poll(c, stream, topic, 0, count=10_000)
    assert a.status == 0, a
    _, blob = wm.decode_poll_reply(a.body)
    return [bytes(f.payload) for b in batch_codec.split_batches(blob) for f in batch_codec.iter_frames(b)]


def topic_for(c: RawConnection, name: str) -> tuple[str, str]:
    assert c.call_request(ws.CreateStream(name)).status == 0
    assert c.call_request(wtop.CreateTopic(name, 1, "t")).status == 0
    return name, "t"


def test_a_send_split_byte_by_byte_and_at_random_is_stored_exactly(reader_server):
    rng = random.Random(8)
    with connect(reader_server) as c:
        c.login()
        stream, topic = topic_for(c, f"split-{reader_server[1] is not None}")
        small = [b"a" * 3, bytes(range(256)), b""]
        frame = send_frame(c, stream, topic, small)
        for i in range(len(frame)):  # every byte its own segment (TCP_NODELAY; TLS: its own record)
            c.send(frame[i:i + 1])
        assert c.read().status == 0
        big = [rng.randbytes(rng.randrange(1, 3000)) for _ in range(60)]
        frame = send_frame(c, stream, topic, big)
        pos = 0
        while pos < len(frame):  # chunks of random sizes, some ending mid-header, some mid-body
            n = rng.randrange(1, 9000)
            c.send(frame[pos:pos + n])
            pos += n
            time.sleep(0.001)
        assert c.read().status == 0
        assert stored(c, stream, topic) == small + big


def test_pipelined_sends_whose_frames_share_segments_are_stored_in_order(reader_server):
    rng = random.Random(9)
    with connect(reader_server) as c:
        c.login()
        stream, topic = topic_for(c, f"pipelined-{reader_server[1] is not None}")
        batches = [[rng.randbytes(rng.randrange(0, 2000)) for _ in range(rng.randrange(1, 40))] for _ in range(12)]
        wire = b"".join(send_frame(c, stream, topic, b) for b in batches)
        cuts = sorted(rng.sample(range(1, len(wire)), 30))
        for a, b in zip([0, *cuts], [*cuts, len(wire)]):  # one request's tail and the next's head in one send
            c.send(wire[a:b])
        assert [c.read().status for _ in batches] == [0] * len(batches)
        assert stored(c, stream, topic) == [p for b in batches for p in b]


def test_a_send_over_the_frame_limit_is_refused_from_its_header(reader_server):
    with connect(reader_server) as c:
        c.login()
        stream, topic = topic_for(c, f"oversize-{reader_server[1] is not None}")
        frame = send_frame(c, stream, topic, [b"x" * 1000] * (MAX_FRAME // 1000 + 1))
        assert len(frame) > MAX_FRAME
        c.send(frame[:256])  # the header alone: no body byte is ever sent
        a = c.read()
        assert (a.kind, a.reason) == ("eviction", EvictionReason.INVALID_REQUEST_BODY_SIZE)
        assert c.closed()
    with connect(reader_server) as c:
        c.login()
        assert stored(c, stream, topic) == []


@pytest.mark.parametrize("cut", ["header", "body"])
def test_a_peer_closing_mid_frame_stores_nothing_and_others_are_served(reader_server, cut):
    server, _ = reader_server
    payloads = [b"y" * 500] * 200
    with connect(reader_server) as c:
        c.login()
        stream, topic = topic_for(c, f"closed-{cut}-{reader_server[1] is not None}")
    with connect(reader_server) as c:
        c.login()
        frame = send_frame(c, stream, topic, payloads)
        c.send(frame[:100] if cut == "header" else frame[:len(frame) // 2])
        time.sleep(0.05)
    with connect(reader_server) as other:
        other.login()
        assert stored(other, stream, topic) == []
        other.send(send_frame(other, stream, topic, payloads))  # the same send, whole, from a connection that stays
        assert other.read().status == 0
        assert stored(other, stream, topic) == payloads
    assert "connection failed" not in server.log()
