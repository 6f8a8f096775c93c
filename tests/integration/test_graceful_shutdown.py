"""Connections the server ends are closed gracefully, on a real ``headwater serve``.

Whatever ends a connection (SIGTERM, a refused frame), the client reads every byte the server
wrote before it (the last reply, the Eviction) and then a clean end of stream: ``recv``
returns ``b""``, never ECONNRESET. Closing a socket whose input was not read makes the kernel
send an RST instead of a FIN, and the peer's kernel then drops what it had received and not yet
handed over (``frontends/listener.py``, ``close_gracefully``). The clients here are raw sockets
that send more than the server will read (a refused frame's body, a request after the one in
flight), the case a plain ``close`` resets. WebSocket clients are told 1001 (going away).
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from headwater.codec.iggy import framing
from kafka_wire import KafkaWire
from test_kafka_wire import FETCH, create_topic, fetch_request
from test_robustness_wire import Raw, healthy, raw_header

API_VERSIONS = 18
HEADER = framing.HEADER_SIZE
MORE = 1 << 20  # bytes sent after what the server refuses: more than it reads ahead or buffers


def read_to_end(sock: socket.socket) -> tuple[bytes, str]:
    """Everything the server sends until its end of stream: (bytes, "eof" or "reset")."""
    sock.settimeout(30)
    out = bytearray()
    while True:
        try:
            chunk = sock.recv(1 << 16)
        except ConnectionResetError:
            return bytes(out), "reset"
        if not chunk:
            return bytes(out), "eof"
        out += chunk


def api_versions_frame(w: KafkaWire, correlation: int) -> bytes:
    frame, _ = w.frame(API_VERSIONS, 0, b"", correlation=correlation)
    return frame


def kafka_frames(data: bytes) -> list[tuple[int, bytes]]:
    """[(correlation id, body)] of size-prefixed responses; the bytes must hold whole frames only."""
    out, pos = [], 0
    while pos < len(data):
        assert pos + 4 <= len(data), f"a response cut after {len(data) - pos} bytes"
        (size,) = struct.unpack_from(">i", data, pos)
        assert pos + 4 + size <= len(data), f"a response of {size} bytes cut after {len(data) - pos - 4}"
        (correlation,) = struct.unpack_from(">i", data, pos + 4)
        out.append((correlation, data[pos + 8:pos + 4 + size]))
        pos += 4 + size
    return out


def test_connected_clients_see_a_clean_end_at_sigterm(fresh_server):
    """Served clients, idle at SIGTERM: Iggy (TCP) and Kafka end with a clean end of stream;
    a WebSocket client gets Close 1001 (going away); the server exits 0."""
    iggy = Raw(fresh_server.iggy_address)
    iggy.login()
    assert iggy.call(1)[:2] == ("reply", 0)  # Ping
    kafka = KafkaWire(fresh_server.kafka_address)
    kafka.send_raw(api_versions_frame(kafka, 7))
    assert struct.unpack_from(">i", kafka.read_frame())[0] == 7  # its answer (correlation id 7)
    try:
        with ws_connect(f"ws://127.0.0.1:{fresh_server.websocket_port}/", open_timeout=20) as ws:
            assert fresh_server.stop() == 0
            assert read_to_end(iggy.sock) == (b"", "eof")
            assert read_to_end(kafka.sock)[1] == "eof"
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=30)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001  # going away
    finally:
        iggy.close()
        kafka.close()


def test_a_reply_written_at_sigterm_arrives_whole_before_a_clean_end(fresh_server):
    """A Kafka long poll in flight with the next request already sent behind it: at SIGTERM
    the poll is answered, the request behind it is not read, and the client still reads the
    poll's answer whole and then a clean end (a close with that request unread would reset)."""
    w = KafkaWire(fresh_server.kafka_address)
    try:
        assert create_topic(w, "graceful").error_code == 0
        fetch, correlation = w.frame(FETCH, 4, fetch_request(4, "graceful", 0, max_wait_ms=60_000))
        # more than the server stages while the poll is parked (1 MiB), so some stays in the kernel;
        # sent from a thread: the server reads none of it until it ends the connection
        sent: list = []
        sender = threading.Thread(target=_send_all, args=(w.sock, fetch + api_versions_frame(w, 99) + b"\0" * MORE * 2,
                                                          sent))
        sender.start()
        time.sleep(0.5)  # (the poll is usually parked by now; either way the checks below hold)
        assert fresh_server.stop() == 0
        data, end = read_to_end(w.sock)
        sender.join()
        assert end == "eof" and sent == ["all"], (end, sent)
        frames = kafka_frames(data)  # whole responses only
        assert [c for c, _ in frames] in ([correlation], []), frames
    finally:
        w.close()


def _send_all(sock: socket.socket, data: bytes, outcome: list) -> None:
    try:
        sock.sendall(data)
        outcome.append("all")
    except OSError as e:  # ECONNRESET, EPIPE: the server reset the connection
        outcome.append(repr(e))


def test_an_iggy_frame_refused_gets_its_eviction_whole_then_a_clean_end(fresh_server):
    """A frame over the size limit before login: the Eviction frame, then the end of stream,
    although the client keeps the refused body coming (the server reads and drops it)."""
    with Raw(fresh_server.iggy_address) as r:
        r.send(raw_header(HEADER + 10_000_000, code=1) + b"\xab" * MORE)
        data, end = read_to_end(r.sock)
    assert end == "eof"
    assert len(data) == HEADER and data[60] == 13, data[:64]  # one whole Eviction frame
    framing.decode_eviction(data)
    healthy(fresh_server)


def test_a_kafka_frame_refused_after_a_reply_gets_the_reply_whole_then_a_clean_end(fresh_server):
    """Kafka: a request answered, then a frame whose size is refused (the connection closes
    without an answer, as Kafka does) with more bytes behind it: the first answer arrives
    whole, then the end of stream."""
    w = KafkaWire(fresh_server.kafka_address)
    try:
        w.send_raw(api_versions_frame(w, 41) + struct.pack(">i", 0x7FFF_FFFF) + b"\xcd" * MORE)
        data, end = read_to_end(w.sock)
    finally:
        w.close()
    assert end == "eof"
    frames = kafka_frames(data)
    assert [c for c, _ in frames] == [41]
    (error_code,) = struct.unpack_from(">h", frames[0][1], 0)
    assert error_code == 0
    healthy(fresh_server)
