"""Iggy's transports side by side on one ``headwater serve``, and hostile input on the new ones.

Two servers: a plain one (TCP, QUIC with its self-signed certificate, WebSocket) and a TLS
one (TLS on the Iggy TCP, WebSocket and Kafka listeners, certificates from a test CA, plus
QUIC). A message sent over each transport is polled over every other one, byte-identical
(payload, id, headers, checksum, offset, timestamp). Kafka over SSL is produced by
confluent-kafka, kafka-python, aiokafka and kcat and read back by each. Hostile input: bytes
that are no HTTP upgrade, a text message, a message over the pre-login limit, a refused Iggy
header, an upgrade sent too slowly (WebSocket); TLS handshake garbage, plaintext on a TLS
port, a handshake never finished (TLS on Iggy TCP and Kafka); junk datagrams, a stream over
the frame limit, a stream shorter than its header says (QUIC). Each gets Iggy's Eviction, a
WebSocket close code, or just that connection closed, and an SDK client on every transport
is served afterwards.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import ssl
import struct
import subprocess
import time
import uuid

import apache_iggy as ig
import pytest

from headwater.codec.iggy import framing
from headwater.codec.iggy.codes import Command, EvictionReason
from iggy_transports import Via, start_server

pytestmark = pytest.mark.slow  # a file of long tests: handed out first (tests/conftest.py)

FRAME_RECEIVE_TIMEOUT_S = 2


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    s, _ = start_server(tmp_path_factory.mktemp("transports-plain"),
                        env={"HEADWATER_TCP_FRAME_RECEIVE_TIMEOUT_S": str(FRAME_RECEIVE_TIMEOUT_S)})
    yield s
    assert s.stop() == 0, s.log()[-4000:]


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    s, certs = start_server(tmp_path_factory.mktemp("transports-tls"), tls=True,
                            env={"HEADWATER_TCP_FRAME_RECEIVE_TIMEOUT_S": str(FRAME_RECEIVE_TIMEOUT_S),
                                 "HEADWATER_KAFKA_FRAME_RECEIVE_TIMEOUT_S": str(FRAME_RECEIVE_TIMEOUT_S)})
    yield s, certs
    assert s.stop() == 0, s.log()[-4000:]


def plain_vias(server) -> list[Via]:
    return [Via(t, server) for t in ("tcp", "quic", "websocket")]


def tls_vias(server, certs) -> list[Via]:
    return [Via("tls-tcp", server, certs), Via("wss", server, certs), Via("quic", server)]


async def connected(via: Via) -> ig.IggyClient:
    c = via.client()
    await asyncio.wait_for(c.connect(), 20)
    await c.login_user("iggy", "iggy")
    return c


async def all_served(vias: list[Via]) -> None:
    """An SDK client on each transport logs in and reads."""
    for via in vias:
        c = await connected(via)
        await c.ping()
        await c.get_streams()


def fields(m) -> tuple:
    return (m.payload(), m.id(), m.checksum(), m.offset(), m.timestamp(), m.origin_timestamp(),
            repr(m.user_headers()))


async def cross_check(vias: list[Via]) -> None:
    clients = {v.transport: await connected(v) for v in vias}
    stream = f"cross-{uuid.uuid4().hex[:8]}"
    first = next(iter(clients.values()))
    await first.create_stream(stream)
    await first.create_topic(stream, "t", 1)
    sent = {}
    for name, c in clients.items():
        payload = bytes(range(256)) + name.encode() + os.urandom(64)
        headers = {"via": name, "n": ig.HeaderValue.UnsignedInt32(len(name)), "raw": ig.HeaderValue.Raw(b"\x00\xff")}
        await c.send_messages(stream, "t", 0, [ig.SendMessage(payload, user_headers=headers, id=uuid.uuid4().int)])
        sent[name] = payload
    polled = {}
    for name, c in clients.items():
        got = await c.poll_messages(stream, "t", consumer=ig.Consumer.Single(f"r-{name}"),
                                    polling_strategy=ig.PollingStrategy.First(), count=100,
                                    auto_commit=False, partition_id=0)
        polled[name] = [fields(m) for m in got]
    reference = next(iter(polled.values()))
    assert [f[0] for f in reference] == list(sent.values())
    for name, messages in polled.items():
        assert messages == reference, name  # every field, byte for byte, whichever transport polled


def test_a_message_sent_over_each_transport_is_polled_byte_identical_over_every_other(plain, tls):
    run(cross_check(plain_vias(plain)))
    run(cross_check(tls_vias(*tls)))


def test_get_me_names_each_transport_and_cluster_metadata_each_port(plain):
    from headwater.codec.iggy.commands import encode_request_body
    from headwater.codec.iggy.commands import system as wsys

    async def go():
        for via in plain_vias(plain):
            c = await connected(via)
            code, body = encode_request_body(wsys.GetMe())
            me = wsys.decode_client_details(await c.send_binary_request(int(code), body))
            assert me.transport == via.transport_code and me.address.startswith("127.0.0.1:"), via.transport
            code, body = encode_request_body(wsys.GetClusterMetadata())
            node = wsys.decode_cluster_metadata(await c.send_binary_request(int(code), body)).nodes[0]
            assert (node.tcp_port, node.quic_port, node.websocket_port) == (
                plain.tcp_port, plain.quic_port, plain.websocket_port)

    run(go())


def test_quic_self_signed_certificate_is_made_once_into_the_data_dir(plain):
    cert = plain.data_dir / "certs" / "server_cert.pem"
    key = plain.data_dir / "certs" / "server_key.pem"
    assert cert.read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")
    assert oct(key.stat().st_mode & 0o777) == "0o600"


# --------------------------------------------------------------------------- Kafka over SSL


def test_kafka_over_ssl_with_every_client(tls):
    server, certs = tls
    bootstrap = f"localhost:{server.kafka_port}"
    topic = f"ssl-{uuid.uuid4().hex[:8]}"
    ca = str(certs.ca)

    from confluent_kafka import Consumer, Producer

    p = Producer({"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": ca})
    p.produce(topic, b"confluent")
    assert p.flush(30) == 0

    from kafka import KafkaConsumer, KafkaProducer

    kp = KafkaProducer(bootstrap_servers=bootstrap, security_protocol="SSL", ssl_cafile=ca)
    kp.send(topic, b"kafka-python").get(30)
    kp.close()

    import aiokafka
    from aiokafka.helpers import create_ssl_context

    async def aio_send():
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, security_protocol="SSL",
                                             ssl_context=create_ssl_context(cafile=ca))
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"aiokafka")
        finally:
            await producer.stop()

    run(aio_send())
    want = [b"confluent", b"kafka-python", b"aiokafka"]
    kcat = shutil.which("kcat")  # installed by .ci/run; without it only its part is left out
    if kcat:
        ssl_args = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={ca}"]
        subprocess.run([kcat, "-b", bootstrap, *ssl_args, "-P", "-t", topic], input=b"kcat\n", check=True, timeout=60)
        want.append(b"kcat")
        out = subprocess.run([kcat, "-b", bootstrap, *ssl_args, "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
                             capture_output=True, check=True, timeout=60).stdout
        assert out.splitlines() == want

    c = Consumer({"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": ca,
                  "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got, deadline = [], time.monotonic() + 60
    while len(got) < len(want) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    assert got == want

    kc = KafkaConsumer(topic, bootstrap_servers=bootstrap, security_protocol="SSL", ssl_cafile=ca,
                       auto_offset_reset="earliest", consumer_timeout_ms=30000)
    values = []
    for m in kc:  # bounded by consumer_timeout_ms
        values.append(m.value)
        if len(values) == len(want):
            break
    kc.close()
    assert values == want

    async def aio_read():
        consumer = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, security_protocol="SSL",
                                             ssl_context=create_ssl_context(cafile=ca), auto_offset_reset="earliest")
        await consumer.start()
        try:
            values = []
            while len(values) < len(want):
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                values += [r.value for records in batch.values() for r in records]
            return values
        finally:
            await consumer.stop()

    assert run(aio_read()) == want


# --------------------------------------------------------------------------- hostile input


def closed_within(sock: socket.socket, timeout: float) -> bytes:
    """Read until the peer closes (bounded); returns what it sent. Fails if it never closes."""
    sock.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return data
            data += chunk
    except ConnectionResetError:
        return data
    except socket.timeout:
        pytest.fail(f"the server did not close the connection within {timeout} s (got {data[:64]!r})")


def test_websocket_refuses_garbage_text_oversize_and_bad_frames_and_keeps_serving(plain):
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    uri = f"ws://127.0.0.1:{plain.websocket_port}/"

    with socket.create_connection(("127.0.0.1", plain.websocket_port)) as s:  # no HTTP at all
        s.sendall(os.urandom(512) + b"\r\n\r\n")
        closed_within(s, 10)
    with socket.create_connection(("127.0.0.1", plain.websocket_port)) as s:  # HTTP, no upgrade
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert closed_within(s, 10).startswith(b"HTTP/1.1 4")

    async def close_code(message) -> int:
        async with connect(uri, max_size=None) as ws:
            await ws.send(message)
            with pytest.raises(ConnectionClosed) as info:
                while True:
                    await asyncio.wait_for(ws.recv(), 10)
            return info.value.rcvd.code

    async def go():
        assert await close_code("a text message") == 1003  # unsupported data
        big = framing.encode_request(Command.PING, b"\0" * (70 * 1024))
        assert await close_code(big) == 1009  # before login over 64 KiB: message too big

        async with connect(uri) as ws:  # a header whose size is below 256: Iggy's Eviction, then 1008
            bad = bytearray(framing.encode_request(Command.PING))
            struct.pack_into("<I", bad, framing.SIZE_OFFSET, 10)
            await ws.send(bytes(bad))
            eviction = framing.decode_eviction(await asyncio.wait_for(ws.recv(), 10))
            assert eviction.reason == EvictionReason.INVALID_REQUEST_BODY_SIZE
            with pytest.raises(ConnectionClosed) as info:
                await asyncio.wait_for(ws.recv(), 10)
            assert info.value.rcvd.code == 1008

        async with connect(uri) as ws:  # a ping split over two messages is still one frame
            ping = framing.encode_request(Command.PING)
            await ws.send(ping[:100])
            await ws.send(ping[100:])
            reply = framing.decode_reply_header(await asyncio.wait_for(ws.recv(), 10))
            assert reply.status == 0

    run(go())

    with socket.create_connection(("127.0.0.1", plain.websocket_port)) as s:  # an upgrade dripped too slowly
        s.sendall(b"GET / HTTP/1.1\r\n")
        start = time.monotonic()
        closed_within(s, FRAME_RECEIVE_TIMEOUT_S + 20)
        assert time.monotonic() - start >= FRAME_RECEIVE_TIMEOUT_S * 0.5
    with socket.create_connection(("127.0.0.1", plain.websocket_port)) as s:  # then a frame's first byte only
        s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        s.settimeout(10)
        response = b""
        while b"\r\n\r\n" not in response:
            response += s.recv(4096)
        assert response.startswith(b"HTTP/1.1 101")
        s.sendall(b"\x82")
        start = time.monotonic()
        closed_within(s, FRAME_RECEIVE_TIMEOUT_S + 20)
        assert time.monotonic() - start >= FRAME_RECEIVE_TIMEOUT_S * 0.5
    run(all_served(plain_vias(plain)))


@pytest.mark.parametrize("listener", ["iggy", "websocket", "kafka"])
def test_tls_listeners_close_handshake_garbage_plaintext_and_stalled_handshakes(tls, listener):
    server, certs = tls
    port = {"iggy": server.tcp_port, "websocket": server.websocket_port, "kafka": server.kafka_port}[listener]
    with socket.create_connection(("127.0.0.1", port)) as s:  # a TLS record header, then junk
        s.sendall(b"\x16\x03\x01\x00\x40" + os.urandom(64))
        closed_within(s, 10)
    with socket.create_connection(("127.0.0.1", port)) as s:  # plaintext where TLS is expected
        s.sendall(framing.encode_request(Command.PING) if listener == "iggy" else b"GET / HTTP/1.1\r\n\r\n")
        closed_within(s, 10)
    with socket.create_connection(("127.0.0.1", port)) as s:  # a handshake that never finishes
        s.sendall(b"\x16\x03\x01")
        closed_within(s, FRAME_RECEIVE_TIMEOUT_S + 30)
    ctx = ssl.create_default_context(cafile=str(certs.ca))  # and a good client is served
    with socket.create_connection(("127.0.0.1", port)) as raw, ctx.wrap_socket(raw, server_hostname="localhost") as s:
        assert s.version() in ("TLSv1.2", "TLSv1.3")
    run(all_served(tls_vias(server, certs)))


# aioquic's client StreamWriter sends FIN again when it is collected after write_eof (client side only)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_quic_ignores_junk_datagrams_and_evicts_bad_streams(plain):
    from aioquic.asyncio.client import connect
    from aioquic.quic.configuration import QuicConfiguration

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for size in (1, 20, 1200, 1500):
            for _ in range(50):
                s.sendto(os.urandom(size), ("127.0.0.1", plain.quic_port))
        s.sendto(b"\xc0\x00\x00\x00\x01" + os.urandom(1195), ("127.0.0.1", plain.quic_port))  # a fake Initial

    config = QuicConfiguration(is_client=True, verify_mode=ssl.CERT_NONE)

    async def exchange(frame: bytes) -> bytes:
        async with connect("127.0.0.1", plain.quic_port, configuration=config) as conn:
            reader, writer = await conn.create_stream()
            writer.write(frame)
            writer.write_eof()
            return await asyncio.wait_for(reader.read(), 10)

    async def go():
        ping = framing.encode_request(Command.PING)
        assert framing.decode_reply_header(await exchange(ping)).status == 0
        big = bytearray(ping)  # declares 1 MiB before login: refused from its header
        struct.pack_into("<I", big, framing.SIZE_OFFSET, 1 << 20)
        assert framing.decode_eviction(await exchange(bytes(big))).reason == EvictionReason.INVALID_REQUEST_BODY_SIZE
        short = bytearray(framing.encode_request(Command.PING, b"\0" * 10))  # ends 10 bytes early
        assert framing.decode_eviction(await exchange(bytes(short[:-10]))).reason == \
            EvictionReason.INVALID_REQUEST_BODY_SIZE
        assert framing.decode_eviction(await exchange(b"\x01\x02\x03")).reason == \
            EvictionReason.INVALID_REQUEST_BODY_SIZE

        # three unfinished 30 KiB streams before login: over the 64 KiB one connection may hold
        async with connect("127.0.0.1", plain.quic_port, configuration=config) as conn:
            streams = [await conn.create_stream() for _ in range(3)]
            for _, writer in streams:
                writer.write(framing.encode_request(Command.PING, b"\0" * (60 * 1024))[:30 * 1024])
            # the third pushes the connection over: its stream gets the Eviction, then the connection closes
            eviction = framing.decode_eviction(await asyncio.wait_for(streams[2][0].read(), 10))
            assert eviction.reason == EvictionReason.INVALID_REQUEST_BODY_SIZE
            await asyncio.wait_for(conn.wait_closed(), 10)

    run(go())
    run(all_served(plain_vias(plain)))
