"""An Iggy reference peer: the least a server must do to answer the apache-iggy SDK's benchmark runs.

Usage::

    python benchmarks/iggy_reference_peer.py --address 127.0.0.1:8090 [--verify] [--keep 64]

A minimal Iggy binary-protocol 0.11.0 TCP server for ``compare.py``'s ``iggyref`` system, so the
apache-iggy SDK's send and poll rates against Headwater can be split into the client's share and
the server's: one thread per connection, blocking sockets, no storage, no event loop, no session
rules beyond a login. Every layout comes from our codec (``headwater.codec.iggy`` for frames,
requests and replies, ``headwater.codec.batch`` for the message batch and its checksums).

Commands answered (what the SDK issues in ``compare.py``'s runs; anything else gets status 3,
InvalidCommand, and a line on stderr)::

    REGISTER (login 40/45, op 1)    any credentials; reply [u32 0][user_id 0][session][0.11.0]["iggy-reference-peer"]
    LOGOUT (39, op 3)               empty reply
    PING (1)                        empty reply
    GET_CLUSTER_METADATA (12)       one healthy leader node: this peer's address (the SDK asks after login)
    GET_STREAM (200) / GET_TOPIC (300)          details, or an empty payload when there is none
    CREATE_STREAM (202) / CREATE_TOPIC (302)    details (result-framed); name taken: 1012 / 2013
    DELETE_STREAM (203) / DELETE_TOPIC (303)    empty (result-framed); unknown: 1009 / 2010
    SEND_MESSAGES (101, op 160)     offsets assigned per partition; reply [u32 1][stream][topic][partition][base_offset u64]
    POLL_MESSAGES (100)             strategy OFFSET or FIRST; reply [partition u32][current_offset u64][count u32][batch]

SendMessages: with ``--verify`` the batch gets the admission check the server does
(``batch.verify_batch``: every frame walked and its XXH3-64 checksum recomputed, the batch
checksum too; a failure answers its Iggy code, e.g. 4027), is stamped with its partition, base
offset and time (``batch.stamp``) and its request buffer is kept: the last ``--keep`` batches of
each partition stay in memory. Without ``--verify`` nothing is walked or kept: the offsets move
by ``messages_count``.

PollMessages: a reply of ``min(count, stored - offset)`` messages, where ``stored`` is how many
the partition was sent, in one batch of that many frames whose payloads are as long as the
partition's first sent message (``--payload-size`` before any send). The batch is built once per
connection and size (``batch.build_batch``); each poll only stamps its header (``base_offset`` =
the polled offset, so every frame's offset is right, and the batch checksum). The reply is the
layout Headwater sends: the 256-byte reply header, the 16-byte prefix (``current_offset`` = the
partition's newest offset), then the batch, written with one ``sendmsg``. Nothing is re-verified
or read from anywhere: this is the floor of a poll's server cost.

Loopback only by default; SIGTERM or SIGINT ends it (exit 0) after a summary on stderr.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import signal
import socket
import sys
import threading
import time

from headwater.codec import batch as batch_codec
from headwater.codec.errors import CodecError
from headwater.codec.iggy import framing, version
from headwater.codec.iggy.codes import Command, EvictionReason, IggyErrorCode, Operation, PollingKind
from headwater.codec.iggy.commands import messages as wm
from headwater.codec.iggy.commands import streams as ws
from headwater.codec.iggy.commands import system as wsys
from headwater.codec.iggy.commands import topics as wt

HEADER = framing.HEADER_SIZE
SERVER_NAME = "iggy-reference-peer"
DEFAULT_KEEP = 64
"""SendMessages batches kept per partition with ``--verify`` (64 x ~150 KB at 1000 x 100 B)."""
MAX_TEMPLATES = 16
"""Poll batches a connection keeps built (one per payload size and count)."""
_SEND = int(Command.SEND_MESSAGES)
_POLL = int(Command.POLL_MESSAGES)
_REPLICATED_OPS = {int(o) for o in Operation if int(o) >= 128}


class Refused(Exception):
    """A request answered with a nonzero status (an Iggy error code) and an empty body."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = int(code)


class Partition:
    __slots__ = ("id", "created_at", "stored", "lock", "kept", "payload_size")

    def __init__(self, pid: int, keep: int):
        self.id = pid
        self.created_at = _now_us()
        self.stored = 0  # messages sent to it: the next offset
        self.lock = threading.Lock()
        self.kept: collections.deque = collections.deque(maxlen=keep)
        self.payload_size: int | None = None


class Topic:
    def __init__(self, tid: int, name: str, partitions: int, keep: int):
        self.id, self.name, self.created_at = tid, name, _now_us()
        self.partitions = [Partition(i, keep) for i in range(partitions)]

    def info(self) -> wt.TopicDetails:
        return wt.TopicDetails(self.id, self.created_at, self.name, partitions=tuple(
            wt.PartitionInfo(p.id, p.created_at, 1, max(0, p.stored - 1), 0, p.stored) for p in self.partitions))

    def summary(self) -> wt.TopicInfo:
        return wt.TopicInfo(self.id, self.created_at, len(self.partitions), self.name,
                            messages_count=sum(p.stored for p in self.partitions))


class Stream:
    def __init__(self, sid: int, name: str):
        self.id, self.name, self.created_at = sid, name, _now_us()
        self.topics: dict[str, Topic] = {}
        self.next_topic = itertools.count(1)

    def topic(self, ident: int | str) -> Topic:
        return _find(self.topics, ident, IggyErrorCode.TOPIC_NAME_NOT_FOUND, IggyErrorCode.TOPIC_ID_NOT_FOUND)

    def details(self) -> ws.StreamDetails:
        return ws.StreamDetails(self.id, self.created_at, self.name,
                                topics=tuple(t.summary() for t in self.topics.values()))


def _find(by_name: dict, ident: int | str, name_missing: int, id_missing: int):
    """The stream or topic ``ident`` names (a str: its name; an int: its id), or Refused."""
    if isinstance(ident, str):
        found = by_name.get(ident)
    else:
        found = next((x for x in by_name.values() if x.id == ident), None)
    if found is None:
        raise Refused(name_missing if isinstance(ident, str) else id_missing)
    return found


def _now_us() -> int:
    return time.time_ns() // 1000


class Peer:
    """The shared state: streams, topics and partitions (message counts, kept batches)."""

    def __init__(self, verify: bool, keep: int, payload_size: int):
        self.verify, self.keep, self.payload_size = verify, keep, payload_size
        self.streams: dict[str, Stream] = {}
        self.next_stream = itertools.count(1)
        self.sessions = itertools.count(1)
        self.meta = threading.Lock()
        self.counts: collections.Counter = collections.Counter()
        self.unanswered: collections.Counter = collections.Counter()
        self.cluster = b""  # the GET_CLUSTER_METADATA payload, once the listener is bound

    def listening(self, host: str, port: int) -> None:
        node = wsys.ClusterNode(name=f"{SERVER_NAME}-0", ip=host, tcp_port=port, role=0, status=0)
        self.cluster = wsys.encode_cluster_metadata(wsys.ClusterMetadata(name=SERVER_NAME, nodes=(node,)))

    def stream(self, ident: int | str) -> Stream:
        return _find(self.streams, ident, IggyErrorCode.STREAM_NAME_NOT_FOUND, IggyErrorCode.STREAM_ID_NOT_FOUND)

    def partition(self, stream_id, topic_id, partition_id: int) -> tuple[Stream, Topic, Partition]:
        s = self.stream(stream_id)
        t = s.topic(topic_id)
        if not 0 <= partition_id < len(t.partitions):
            raise Refused(IggyErrorCode.PARTITION_NOT_FOUND)
        return s, t, t.partitions[partition_id]

    # -- metadata (rare: under one lock, decoded with the full codecs) ----------------------

    def metadata(self, code: int, body: memoryview) -> bytes:
        with self.meta:
            if code == Command.GET_STREAM:
                try:
                    return ws.encode_stream_details(self.stream(ws.decode_get_stream(body).stream_id).details())
                except Refused:
                    return b""  # the SDK reads an empty payload as "no such stream"
            if code == Command.GET_TOPIC:
                req = wt.decode_get_topic(body)
                try:
                    return wt.encode_topic_details(self.stream(req.stream_id).topic(req.topic_id).info())
                except Refused:
                    return b""
            if code == Command.CREATE_STREAM:
                req = ws.decode_create_stream(body)
                if req.name in self.streams:
                    raise Refused(IggyErrorCode.STREAM_NAME_ALREADY_EXISTS)
                s = self.streams[req.name] = Stream(next(self.next_stream), req.name)
                return ws.encode_stream_details(s.details())
            if code == Command.DELETE_STREAM:
                s = self.stream(ws.decode_delete_stream(body).stream_id)
                del self.streams[s.name]
                return b""
            if code == Command.CREATE_TOPIC:
                req = wt.decode_create_topic(body)
                s = self.stream(req.stream_id)
                if req.name in s.topics:
                    raise Refused(IggyErrorCode.TOPIC_NAME_ALREADY_EXISTS)
                t = s.topics[req.name] = Topic(next(s.next_topic), req.name, max(1, req.partitions_count), self.keep)
                return wt.encode_topic_details(t.info())
            if code == Command.DELETE_TOPIC:
                req = wt.decode_delete_topic(body)
                s = self.stream(req.stream_id)
                del s.topics[s.topic(req.topic_id).name]
                return b""
        raise Refused(IggyErrorCode.INVALID_COMMAND)

    def summary(self) -> str:
        kept = sum(len(p.kept) for s in self.streams.values() for t in s.topics.values() for p in t.partitions)
        done = ", ".join(f"{name} {n}" for name, n in sorted(self.counts.items()))
        missed = ", ".join(f"code {c} x{n}" for c, n in sorted(self.unanswered.items())) or "none"
        return f"{SERVER_NAME}: answered {done or 'nothing'}; unanswered: {missed}; batches kept at exit {kept}"


_METADATA_CODES = {int(c) for c in (Command.GET_STREAM, Command.GET_TOPIC, Command.CREATE_STREAM,
                                    Command.DELETE_STREAM, Command.CREATE_TOPIC, Command.DELETE_TOPIC)}


class Connection:
    """One client connection, served by its own thread until it closes."""

    def __init__(self, peer: Peer, sock: socket.socket):
        self.peer, self.sock = peer, sock
        self.session = 0  # the fence epoch handed out at login; 0 before
        self.templates: dict[tuple[int, int], tuple[bytearray, bytes]] = {}
        self.head = bytearray(HEADER)
        self.head_view = memoryview(self.head)

    def run(self) -> None:
        try:
            with self.sock:
                while self.serve_one():
                    pass
        except (ConnectionError, OSError):
            pass

    def _recv_exactly(self, view: memoryview) -> bool:
        got, size = 0, len(view)
        while got < size:
            n = self.sock.recv_into(view[got:], size - got, socket.MSG_WAITALL)
            if not n:
                return False
            got += n
        return True

    def _send(self, buffers: list) -> None:
        total = sum(len(b) for b in buffers)
        sent = self.sock.sendmsg(buffers)
        if sent < total:  # rare on a blocking socket (a signal): send the rest the plain way
            self.sock.sendall(b"".join(bytes(b) for b in buffers)[sent:])

    def serve_one(self) -> bool:
        if not self._recv_exactly(self.head_view):
            return False
        head = bytes(self.head)
        try:
            header = framing.decode_request_header(head)
        except CodecError:
            return False  # not an Iggy 0.11.0 request: close, as the server does
        if header.size > framing.DEFAULT_MAX_FRAME_SIZE:
            return False  # over the server's default frame cap (64 MiB): close before allocating
        body = bytearray(header.body_length)
        if body and not self._recv_exactly(memoryview(body)):
            return False
        code, op = header.command_code, int(header.operation)
        body_view = memoryview(body)
        try:
            if op == Operation.REGISTER:
                return self.login(head, header, body_view)
            if code == Command.PING:
                reply = [framing.encode_reply_to_head(head, op=self.session)]
            elif not self.session:
                raise Refused(IggyErrorCode.UNAUTHENTICATED)
            elif code == _SEND and op == Operation.SEND_MESSAGES:
                reply = [self.send_messages(head, body_view)]
            elif code == _POLL:
                reply = self.poll_messages(head, body_view)
            elif code == Command.GET_CLUSTER_METADATA:
                reply = [framing.encode_reply_to_head(head, self.peer.cluster, op=self.session)]
            elif op == Operation.LOGOUT:
                self.session = 0
                reply = [framing.encode_reply_to_head(head)]
            elif code in _METADATA_CODES and (op in _REPLICATED_OPS or op == Operation.NON_REPLICATED):
                payload = self.peer.metadata(code, body_view)
                reply = [framing.encode_reply_to_head(head, framing.reply_body(op, payload), op=self.session)]
            else:
                self.peer.unanswered[code] += 1
                if self.peer.unanswered[code] == 1:
                    print(f"{SERVER_NAME}: unanswered command code {code} (operation {op})", file=sys.stderr, flush=True)
                raise Refused(IggyErrorCode.INVALID_COMMAND)
        except Refused as e:
            reply = [framing.encode_reply_to_head(head, b"", e.code, op=self.session)]
        except CodecError as e:
            reply = [framing.encode_reply_to_head(head, b"", e.code, op=self.session)]
        self.peer.counts[_name(code)] += 1
        self._send(reply)
        return True

    def login(self, head: bytes, header: framing.RequestHeader, body: memoryview) -> bool:
        try:
            req = version.decode_login_register_any(body)
        except CodecError:
            self._send([framing.encode_eviction(header.client, EvictionReason.MALFORMED_LOGIN)])
            return False
        if not version.is_protocol_compatible(req.version.protocol_version):
            self._send([framing.encode_eviction(header.client, EvictionReason.INCOMPATIBLE_PROTOCOL,
                                                version.PROTOCOL_VERSION, version.PROTOCOL_VERSION_MIN)])
            return False
        self.session = next(self.peer.sessions)
        reply = version.encode_login_reply_body(version.LoginReply(0, self.session, server_version=SERVER_NAME))
        self.peer.counts["login"] += 1
        self._send([framing.encode_reply_to_head(head, reply, op=self.session)])
        return True

    def send_messages(self, head: bytes, body: memoryview) -> bytes:
        fields = wm.send_messages_fields(body)
        if fields is None:
            wm.decode_send_messages(body)  # raises the precise CodecError
            raise Refused(IggyErrorCode.INVALID_FORMAT)
        stream_id, topic_id, route, value, view = fields
        pid = value if route == "partition" else 0  # (balanced and keyed: partition 0 of the topic)
        s, t, p = self.peer.partition(stream_id, topic_id, pid)
        if self.peer.verify:
            header, sums = batch_codec.verify_batch(view)  # every frame checksum, then the batch's
            count = header.message_count
        else:
            count = batch_codec.read_header(view).message_count
        with p.lock:
            base = p.stored
            p.stored = base + count
            if p.payload_size is None:
                p.payload_size = len(next(batch_codec.iter_frames(view)).payload)
        if self.peer.verify:
            batch_codec.stamp(view, pid, base, _now_us(), sums)
            p.kept.append(body)  # the request buffer itself: the batch is a view into it
        return framing.encode_reply_to_head(
            head, framing.reply_body(Operation.SEND_MESSAGES, wm.encode_send_confirmation(s.id, t.id, pid, base)),
            op=self.session)

    def poll_messages(self, head: bytes, body: memoryview) -> list:
        fields = wm.poll_messages_fields(body)
        if fields is None:
            wm.decode_poll_messages(body)  # raises the precise CodecError
            raise Refused(IggyErrorCode.INVALID_FORMAT)
        _consumer, stream_id, topic_id, partition_id, kind, value, count, _auto_commit = fields
        pid = partition_id or 0
        _, _, p = self.peer.partition(stream_id, topic_id, pid)
        if kind == PollingKind.FIRST:
            value = 0
        elif kind != PollingKind.OFFSET:
            raise Refused(IggyErrorCode.FEATURE_UNAVAILABLE)
        stored = p.stored
        n = max(0, min(count, stored - value))
        prefix = wm.encode_poll_prefix(pid, max(0, stored - 1), n)
        if not n:
            return [framing.reply_header_to_head(head, len(prefix), op=self.session), prefix]
        buf, sums = self.template(p.payload_size or self.peer.payload_size, n)
        batch_codec.stamp(buf, pid, value, _now_us(), sums)
        return [framing.reply_header_to_head(head, len(prefix) + len(buf), op=self.session), prefix, buf]

    def template(self, size: int, n: int) -> tuple[bytearray, bytes]:
        """This connection's batch of ``n`` frames of ``size``-byte payloads and its frame
        checksums, built on first use (one buffer per connection: sent before it is stamped again)."""
        key = (size, n)
        found = self.templates.get(key)
        if found is None:
            if len(self.templates) >= MAX_TEMPLATES:
                self.templates.clear()
            payload = bytes(i % 251 for i in range(size))
            buf = bytearray(batch_codec.build_batch([batch_codec.Message(payload)] * n))
            found = self.templates[key] = (buf, batch_codec.frame_checksums(buf))
        return found


def _name(code: int) -> str:
    try:
        return Command(code).name.lower()
    except ValueError:
        return f"code {code}"


def serve(peer: Peer, listener: socket.socket) -> None:
    while True:
        sock, _ = listener.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=Connection(peer, sock).run, daemon=True).start()


def _stop(*_) -> None:
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--address", default="127.0.0.1:8090", help="host:port to listen on (default 127.0.0.1:8090)")
    ap.add_argument("--verify", action="store_true",
                    help="check every SendMessages batch as the server does (frame and batch checksums) and keep it")
    ap.add_argument("--keep", type=int, default=DEFAULT_KEEP, help=f"batches kept per partition with --verify (default {DEFAULT_KEEP})")
    ap.add_argument("--payload-size", type=int, default=100, help="payload bytes of polled messages before any send (default 100)")
    args = ap.parse_args(argv)
    host, port = args.address.rsplit(":", 1)
    peer = Peer(args.verify, max(1, args.keep), args.payload_size)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    listener = socket.create_server((host, int(port)), backlog=64)
    peer.listening(host, listener.getsockname()[1])
    print(f"{SERVER_NAME}: listening on {host}:{listener.getsockname()[1]}, verify {args.verify}, "
          f"batch walks {batch_codec.implementation()}", file=sys.stderr, flush=True)
    try:
        serve(peer, listener)
    except SystemExit:
        pass
    finally:
        listener.close()
        print(peer.summary(), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
