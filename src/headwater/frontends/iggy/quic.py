"""Iggy's binary protocol over QUIC (``iggy+quic://``; Iggy's port 8080, UDP), on aioquic.

As the Rust SDK (``core/sdk/src/quic/quic_client.rs``, apache/iggy) frames it:
TLS 1.3 with no ALPN; one QUIC connection per client (its session, like a TCP
connection); each request opens a new client-initiated bidirectional stream,
writes the whole frame (256-byte header + body) and finishes the stream; the
reply is written on the same stream, which the server then finishes (the SDK
reads to the end of the stream). Requests are served one at a time per
connection, in the order their streams finished, by the same
:class:`~headwater.frontends.iggy.server.IggySession` as TCP.

Refusals: a stream whose declared ``size`` (or bytes received) is over the
frame limit (``[tcp] max_frame_size``, 64 KiB before login), whose header is
refused, or whose data is not exactly ``size`` bytes at its end gets the
Eviction frame on that stream, then the connection is closed (after
``_EVICT_LINGER_S``, so the frame can leave). Undecodable datagrams are dropped
by aioquic. Limits: ``[tcp] max_connections`` (a handshake past it gets a
CONNECTION_CLOSE with CONNECTION_REFUSED, 0x2), ``[quic] max_idle_timeout_s``
(QUIC's own idle timeout). Replies are queued whole (no send-stall timeout).

The certificate: ``[quic] cert_file``/``key_file``, else the data directory's
self-signed pair (``frontends/tls.py``). The SDK does not validate it by
default (``validate_certificate=false``, its QUIC default); with
``?validate_certificate=true`` it checks the platform's trust store.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time

from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.asyncio.server import QuicServer
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted, StreamDataReceived, StreamReset

from ... import metrics
from ...codec.iggy import framing
from ...config import format_address
from .server import IggyFrontend, IggySession

log = logging.getLogger("headwater.iggy.quic")

_HEADER = framing.HEADER_SIZE
_SIZE = struct.Struct("<I")
_EVICT_LINGER_S = 1.0  # time for an Eviction frame to leave before the connection closes
_ACK_WAIT_S = 2.0  # shutdown: how long the replies sent may wait for the peer's acknowledgement
_CONNECTION_REFUSED = 0x2  # QUIC transport error code (RFC 9000, 20.1)
_NO_ERROR = 0x0


def bind_udp(host: str, port: int) -> socket.socket:
    """Bind (non-blocking) a UDP socket on the first address ``host`` resolves to.
    Raises socket.gaierror or OSError (EADDRINUSE...)."""
    family, type_, proto, _, address = socket.getaddrinfo(host or None, port, type=socket.SOCK_DGRAM,
                                                          flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, type_, proto)
    try:
        if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class _IggyQuicProtocol(QuicConnectionProtocol):
    """One QUIC connection: buffers each stream until it finishes, then queues it."""

    def __init__(self, *args, listener: "QuicListener", **kwargs):
        super().__init__(*args, **kwargs)
        self._listener = listener
        self._partial: dict[int, bytearray] = {}
        self._held = 0  # request bytes buffered (partial streams and queued requests)
        self._request_queue: asyncio.Queue[tuple[int, bytes]] = asyncio.Queue()
        self._iggy_session: IggySession | None = None
        self._worker: asyncio.Task | None = None
        self._terminated = False
        self.busy = False
        self.peer = ""

    # ------------------------------------------------------------ events (no await)
    def quic_event_received(self, event) -> None:
        if isinstance(event, HandshakeCompleted):
            self._on_handshake()
        elif isinstance(event, StreamDataReceived):
            self._on_stream_data(event.stream_id, event.data, event.end_stream)
        elif isinstance(event, StreamReset):
            dropped = self._partial.pop(event.stream_id, None)
            if dropped is not None:
                self._held -= len(dropped)
        elif isinstance(event, ConnectionTerminated):
            self._on_terminated()

    def _on_handshake(self) -> None:
        listener = self._listener
        paths = self._quic._network_paths  # the peer's (validated) address
        peer = paths[0].addr if paths else None
        self.peer = format_address(peer[0], peer[1]) if isinstance(peer, tuple) else str(peer)
        if listener.closing or (listener.max_connections and len(listener.connections) >= listener.max_connections):
            self._quic.close(error_code=_CONNECTION_REFUSED, reason_phrase="connection limit reached")
            self.transmit()
            listener.refuse(self.peer)
            return
        listener.connections.add(self)
        self._iggy_session = listener.frontend.session(self.peer, "quic")
        self._worker = asyncio.get_running_loop().create_task(self._serve())

    def _on_stream_data(self, stream_id: int, data: bytes, end: bool) -> None:
        session = self._iggy_session
        if session is None or session.closed:
            return
        if stream_id & 0x2:  # a unidirectional stream: no way to answer on it
            log.info("quic unidirectional stream refused", extra={"kv": {"peer": self.peer}})
            self.shutdown()
            return
        buf = self._partial.get(stream_id)
        if buf is None:
            buf = self._partial[stream_id] = bytearray()
        buf += data
        self._held += len(data)
        limit = session.max_frame_size()
        declared = _SIZE.unpack_from(buf, framing.SIZE_OFFSET)[0] if len(buf) >= _HEADER else 0
        # one request at a time is what the SDK sends: the connection may hold one frame's bytes
        if self._held > limit or declared > limit:
            head = bytes(buf[:_HEADER]) if len(buf) >= _HEADER else bytes(buf) + bytes(_HEADER - len(buf))
            del self._partial[stream_id]
            self._held -= len(buf)
            self._evict(stream_id, session.check_head(head) or session.evict_frame_size(head))
            return
        if end:
            del self._partial[stream_id]
            self._request_queue.put_nowait((stream_id, bytes(buf)))

    def _on_terminated(self) -> None:
        """The connection is gone: an idle worker stops now; a busy one finishes its request
        (a handler is never cancelled half-way), then stops. The session closes with it."""
        self._listener.connections.discard(self)
        self._terminated = True
        worker, self._worker = self._worker, None
        if worker is not None and not self.busy:
            worker.cancel()

    # ------------------------------------------------------------ requests, one at a time
    async def _serve(self) -> None:
        session = self._iggy_session
        assert session is not None
        try:
            while not self._terminated:
                stream_id, frame = await self._request_queue.get()
                self._held -= len(frame)
                self.busy = True
                head = frame[:_HEADER]
                if len(head) < _HEADER:  # a stream finished before its header was whole
                    head = head + bytes(_HEADER - len(head))
                refusal = session.check_head(head)
                if refusal is None and _SIZE.unpack_from(head, framing.SIZE_OFFSET)[0] != len(frame):
                    refusal = session.evict_frame_size(head)  # the stream ended off the declared size
                if refusal is not None:
                    self._evict(stream_id, refusal)
                    return
                reply = await session.handle(head, frame[_HEADER:])
                if session.closed:
                    self._evict(stream_id, reply if isinstance(reply, bytes) else b"".join(reply))
                    return
                try:
                    self._send_reply(stream_id, reply)
                except Exception as e:  # the client reset or stopped the stream: its reply has nowhere to go
                    log.debug("quic reply dropped", extra={"kv": {"peer": self.peer, "error": str(e)}})
                self.busy = False
                if self._listener.closing:  # (the listener's stop closes it once the reply is acknowledged)
                    return
        except Exception:
            log.exception("quic connection failed", extra={"kv": {"peer": self.peer}})
            self.shutdown()
        finally:
            self.busy = False
            self._iggy_session = None
            session.close()

    def _send_reply(self, stream_id: int, reply) -> None:
        quic = self._quic
        if isinstance(reply, list):
            for part in reply[:-1]:
                quic.send_stream_data(stream_id, bytes(part), end_stream=False)
            quic.send_stream_data(stream_id, bytes(reply[-1]) if reply else b"", end_stream=True)
        else:
            quic.send_stream_data(stream_id, reply, end_stream=True)
        self.transmit()

    def _evict(self, stream_id: int, frame: bytes) -> None:
        """Send ``frame`` (an Eviction) on the stream, then close the connection."""
        log.info("quic connection evicted", extra={"kv": {"peer": self.peer}})
        try:
            self._send_reply(stream_id, frame)
        except Exception:  # the stream may be gone (reset, or a server-side id): close anyway
            pass
        asyncio.get_running_loop().call_later(_EVICT_LINGER_S, self.shutdown)

    def unacknowledged(self) -> bool:
        """Whether stream data this side sent (a reply, its FIN) is not acknowledged by the peer yet.

        aioquic has no public call for this: it reads ``QuicConnection._streams`` (private;
        read guardedly: when it is missing or not a dict, nothing counts as unacknowledged) and
        each stream's ``sender`` (``is_finished``: every byte and the FIN acknowledged;
        ``highest_offset``, ``buffer_is_empty``: something was written), aioquic 1.x."""
        streams = getattr(self._quic, "_streams", None)
        if not isinstance(streams, dict):
            return False
        for stream in streams.values():
            sender = getattr(stream, "sender", None)
            if sender is None or getattr(sender, "is_finished", True):
                continue
            if getattr(sender, "highest_offset", 0) or not getattr(sender, "buffer_is_empty", True):
                return True
        return False

    def shutdown(self) -> None:
        """Close the connection (NO_ERROR) and send the CONNECTION_CLOSE now."""
        try:
            self._quic.close(error_code=_NO_ERROR)
            self.transmit()
        except Exception:
            pass


class QuicListener:
    """The QUIC endpoint: one UDP socket, a protocol per connection, connection counts."""

    def __init__(self, name: str, host: str, port: int, frontend: IggyFrontend, *, sock: socket.socket,
                 cert_file: str, key_file: str, max_connections: int = 0, idle_timeout_s: float = 60.0):
        self.name = name
        self.transport = "quic"
        self.host = host
        self.port = port
        self.frontend = frontend
        self.max_connections = max_connections
        self.connections: set[_IggyQuicProtocol] = set()
        self.refused = 0  # refused since the last log line
        self._refused_logged_at = -1e9
        self.closing = False
        self._sock = sock
        self._config = QuicConfiguration(is_client=False, idle_timeout=idle_timeout_s or 86400.0 * 365)
        self._config.load_cert_chain(cert_file, key_file)
        self._transport: asyncio.DatagramTransport | None = None
        self._server: QuicServer | None = None
        metrics.count_connections("iggy", "quic", lambda: self.connection_count)

    @property
    def bound_port(self) -> int:
        return self._sock.getsockname()[1]

    def refuse(self, peer: str) -> None:
        """Count a connection refused at the limit; log at most every 10 s (as TCP listeners do)."""
        self.refused += 1
        now = time.monotonic()
        if now - self._refused_logged_at >= 10.0:
            log.warning("connections refused: limit reached", extra={"kv": {
                "listener": self.name, "max_connections": self.max_connections, "open": len(self.connections),
                "refused": self.refused, "peer": peer}})
            self.refused = 0
            self._refused_logged_at = now

    @property
    def connection_count(self) -> int:
        """Connections open now (handshake done)."""
        return len(self.connections)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()

        def create_protocol(*args, **kwargs):
            return _IggyQuicProtocol(*args, listener=self, **kwargs)

        self._transport, self._server = await loop.create_datagram_endpoint(
            lambda: QuicServer(configuration=self._config, create_protocol=create_protocol), sock=self._sock
        )
        log.info("listening", extra={"kv": {"listener": self.name, "transport": self.transport,
                                            "address": format_address(self.host, self.bound_port) + "/udp"}})

    async def stop(self, deadline_s: float = 5.0) -> None:
        """Stop accepting; busy connections finish their request (bounded by ``deadline_s``);
        every connection closes (NO_ERROR) once the stream data it sent is acknowledged (at
        most ``_ACK_WAIT_S`` more); then the socket closes."""
        self.closing = True
        for proto in list(self.connections):
            if not proto.busy and not proto.unacknowledged():
                proto.shutdown()  # idle, everything it sent acknowledged: close now
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline_s
        while any(p.busy for p in self.connections) and loop.time() < end:
            await asyncio.sleep(0.05)
        # the replies written must reach the peer before CONNECTION_CLOSE: aioquic retransmits
        # lost stream data only while the connection is open (bounded: a peer that went silent)
        end = min(end, loop.time() + _ACK_WAIT_S)
        while any(p.unacknowledged() for p in self.connections) and loop.time() < end:
            await asyncio.sleep(0.02)
        for proto in list(self.connections):
            proto.shutdown()
            proto._on_terminated()
        if self._server is not None:
            self._server.close()
        elif self._sock is not None:
            self._sock.close()
