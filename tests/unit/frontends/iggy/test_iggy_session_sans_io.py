"""IggySession without sockets: whole frames in, replies out (what TCP, QUIC and WebSocket
all drive), on a real broker in ``tmp_path``."""

from __future__ import annotations

import asyncio
import struct

from headwater.codec.iggy import framing
from headwater.codec.iggy.codes import Command, EvictionReason
from headwater.config import TcpConfig
from headwater.core.broker import Broker
from headwater.frontends.iggy.server import IggyFrontend
from headwater.storage.api import open_engine


def _frontend(tmp_path) -> IggyFrontend:
    return IggyFrontend(Broker(open_engine(str(tmp_path))), TcpConfig())


def _split(frame: bytes) -> tuple[bytes, bytes]:
    return frame[:framing.HEADER_SIZE], frame[framing.HEADER_SIZE:]


def test_frames_in_replies_out_and_the_client_is_gone_on_close(tmp_path):
    frontend = _frontend(tmp_path)

    async def go():
        session = frontend.session("127.0.0.1:1", "quic")
        assert frontend.broker.clients[session.ctx.client.id].transport == "quic"
        head, body = _split(framing.encode_request(Command.PING))
        assert session.check_head(head) is None
        assert framing.decode_reply_header(await session.handle(head, body)).status == 0  # ping before login
        head, body = _split(framing.encode_request(Command.GET_STREAMS))
        assert framing.decode_reply_header(await session.handle(head, body)).status == 40  # Unauthenticated
        assert not session.closed
        session.close()
        assert session.ctx.client.id not in frontend.broker.clients

    asyncio.run(go())


def test_a_refused_header_is_an_eviction_and_closes_only_that_session(tmp_path):
    frontend = _frontend(tmp_path)
    bad = bytearray(framing.encode_request(Command.PING))
    struct.pack_into("<I", bad, framing.SIZE_OFFSET, 10)
    refused, other = frontend.session("a", "websocket"), frontend.session("b", "tcp")
    eviction = refused.check_head(bytes(bad[:framing.HEADER_SIZE]))
    assert framing.decode_eviction(eviction).reason == EvictionReason.INVALID_REQUEST_BODY_SIZE
    assert refused.closed and not other.closed
    over = bytearray(framing.encode_request(Command.PING))
    struct.pack_into("<I", over, framing.SIZE_OFFSET, 64 * 1024 + 1)  # over the pre-login limit
    assert framing.decode_eviction(other.check_head(bytes(over[:framing.HEADER_SIZE]))).reason == \
        EvictionReason.INVALID_REQUEST_BODY_SIZE
    assert other.max_frame_size() == 64 * 1024
