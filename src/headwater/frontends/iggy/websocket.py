"""Iggy's binary protocol over WebSocket (``iggy+ws://``, ``iggy+wss://``; Iggy's port 8092).

As the Rust SDK (``core/sdk/src/websocket/``, apache/iggy) frames it: an HTTP/1.1
upgrade on any path (the SDK asks for ``/``), no subprotocol; each request is
one binary message holding the whole frame (256-byte header + body), and the
reply comes back as one binary message. Both ends treat the messages as one
byte stream, so a frame split over messages, or several in one, is served too.

The connection is an ordinary :class:`~headwater.frontends.listener.Listener`
connection (limits, timeouts, TLS for ``wss://``, shutdown); the WebSocket
framing is the ``websockets`` library's sans-I/O ``ServerProtocol``; every frame
goes to the same :class:`~headwater.frontends.iggy.server.IggySession` as TCP.

Refusals: a failed upgrade gets the library's HTTP 4xx and the connection
closes; a text message closes with 1003 (unsupported data); a message over
the frame limit (``[tcp] max_frame_size``, 64 KiB before login) closes with
1009; an Iggy frame refused by its header gets its Eviction frame in a binary
message, then close code 1008 (policy violation). The upgrade must be whole
within ``[tcp] frame_receive_timeout_s``. Server shutdown: after the request in hand,
close code 1001 (going away).
"""

from __future__ import annotations

import asyncio
import logging
import struct

from websockets.frames import CloseCode, Opcode
from websockets.protocol import State as WsState
from websockets.server import ServerProtocol

from ...codec.iggy import framing
from ..listener import Connection
from .server import IggyFrontend

log = logging.getLogger("headwater.iggy.websocket")

_HEADER = framing.HEADER_SIZE
_SIZE = struct.Struct("<I")
_READ = 64 * 1024


def make_websocket_serve(frontend: IggyFrontend):
    """The Listener ``serve`` coroutine for Iggy-over-WebSocket connections."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: Connection) -> None:
        ws = ServerProtocol(max_size=framing.HEADER_SIZE + 64 * 1024)
        if not await _handshake(ws, reader, writer, conn):
            return
        session = frontend.session(conn.peer, "websocket")

        def evict_stale() -> None:
            ws.send_binary(session.evict_stale())
            ws.send_close(CloseCode.POLICY_VIOLATION, "stale client")
            writer.writelines(ws.data_to_send())

        conn.on_idle = evict_stale
        pending = bytearray()  # bytes of the next Iggy frame(s), across messages
        between_frames = True  # nothing of a WebSocket or Iggy frame has arrived yet: IDLE, else RECEIVING
        try:
            while not conn.closing.is_set():
                if between_frames:
                    conn.waiting()
                else:
                    conn.receiving()
                ws.max_message_size = session.max_frame_size()
                try:
                    data = await reader.read(_READ)
                except asyncio.CancelledError:
                    if conn.closing.is_set():  # shutdown while idle: Close 1001 (going away)
                        _going_away(ws, writer)
                    raise
                conn.receiving()
                if not data:
                    ws.receive_eof()
                    return
                ws.receive_data(data)
                events = ws.events_received()
                for event in events:
                    if event.opcode is Opcode.BINARY or event.opcode is Opcode.CONT:
                        pending += event.data
                    elif event.opcode is Opcode.TEXT:
                        ws.fail(CloseCode.UNSUPPORTED_DATA, "Iggy frames travel in binary messages")
                    # ping (answered by the protocol), pong and close need nothing from us
                out = ws.data_to_send()  # pongs, close replies, failures
                if out:
                    await conn.reply(writer, out)
                if ws.state is not WsState.OPEN:
                    await conn.drain(writer)
                    return
                while len(pending) >= _HEADER:
                    head = bytes(pending[:_HEADER])
                    refusal = session.check_head(head)
                    if refusal is not None:
                        ws.send_binary(refusal)
                        ws.send_close(CloseCode.POLICY_VIOLATION, "frame refused")
                        await conn.reply(writer, ws.data_to_send())
                        await conn.drain(writer)
                        return
                    size = _SIZE.unpack_from(head, framing.SIZE_OFFSET)[0]
                    if len(pending) < size:
                        break
                    body = bytes(pending[_HEADER:size])
                    del pending[:size]
                    conn.handling()
                    reply = await session.handle(head, body)
                    ws.send_binary(b"".join(reply) if isinstance(reply, list) else reply)
                    if session.closed:  # evicted
                        ws.send_close(CloseCode.POLICY_VIOLATION, "evicted")
                        await conn.reply(writer, ws.data_to_send())
                        await conn.drain(writer)
                        return
                    await conn.reply(writer, ws.data_to_send())
                # a WebSocket frame half read (the parser's buffer, or no event from these bytes) or an
                # Iggy frame half in keeps the frame-receive deadline running
                between_frames = bool(events) and not pending and not ws.reader.buffer
            _going_away(ws, writer)  # shutdown after the request in hand
        finally:
            session.close()

    return serve


def _going_away(ws: ServerProtocol, writer: asyncio.StreamWriter) -> None:
    """The server shuts down: queue a Close frame with 1001 (going away, RFC 6455 7.4.1). The
    listener then closes the TCP connection gracefully (``close_gracefully``: the Close frame
    leaves, the client's Close reply is read and dropped until its end of stream)."""
    if ws.state is WsState.OPEN and not writer.transport.is_closing():
        ws.send_close(CloseCode.GOING_AWAY, "server shutting down")
        writer.writelines(ws.data_to_send())


async def _handshake(ws: ServerProtocol, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     conn: Connection) -> bool:
    """Read the HTTP upgrade and answer it; True when the connection is now a WebSocket."""
    conn.receiving()  # the upgrade must be whole within the frame-receive timeout
    while True:
        data = await reader.read(_READ)
        if not data:
            return False
        ws.receive_data(data)
        events = ws.events_received()
        if events:
            break
        if ws.handshake_exc is not None or ws.state is not WsState.CONNECTING:  # unparseable: answered
            writer.writelines(ws.data_to_send())
            return False
    response = ws.accept(events[0])
    ws.send_response(response)
    await conn.reply(writer, ws.data_to_send())
    if response.status_code != 101:
        log.info("websocket upgrade refused", extra={"kv": {"peer": conn.peer, "status": response.status_code}})
        await conn.drain(writer)
        return False
    return True
