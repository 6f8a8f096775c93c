"""Iggy poll, one poll at a time: where one PollMessages round trip goes.

Usage::

    python benchmarks/bench_iggy_poll.py --server-python /work/main/.venv/bin/python \\
        --server-python .venv/bin/python --passes 3           # real servers, interleaved
    python benchmarks/bench_iggy_poll.py --inproc             # this interpreter's code, no sockets

Served mode: starts one ``headwater serve`` per ``--server-python`` (each that venv's code, on
127.0.0.1), fills a one-partition topic of each with ``--messages`` messages of ``--size`` B in
batches of 1000 (our raw generator), then, pass after pass and server after server, polls them
all back from offset 0 by offset (``auto_commit`` false, ``--count`` per poll, one poll at a
time) with two clients: the apache-iggy SDK (``poll_messages``, as ``compare_clients.iggy_poll``)
and our raw serial poller (a blocking socket, each reply read into one preallocated buffer).
Per pass and client it prints the wall time, the server's CPU time (``/proc/<pid>/stat``, user +
system, so the kernel's send of the reply counts) and this process's CPU time (every thread:
the SDK's tokio workers too), all per poll in µs, and msg/s.

In-process mode (``--inproc``): one ``IggySession.handle`` of a PollMessages frame on a real
broker in a temporary directory (logged in through a real Register frame), ``--polls`` polls per
pass; prints the process CPU time per poll in µs. Run it with each venv's interpreter to
compare code: ``/work/main/.venv/bin/python benchmarks/bench_iggy_poll.py --inproc``.

Numbers only; nothing here asserts a speed (docs/benchmarks.md keeps the results).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tools"))

BATCH = 1000
_SIZE = struct.Struct("<I")
_POLL_PREFIX = struct.Struct("<IQI")


# --------------------------------------------------------------------------- in process


def inproc(args) -> None:
    from headwater.codec import batch as batch_codec
    from headwater.codec.iggy import framing
    from headwater.codec.iggy.codes import Command, ConsumerKind, PollingKind
    from headwater.codec.iggy.commands import messages as w
    from headwater.codec.iggy.primitives import Consumer, PollingStrategy
    from headwater.codec.iggy.version import PROTOCOL_VERSION, ClientVersionInfo, LoginRegister, encode_login_register
    from headwater.config import TcpConfig
    from headwater.core.broker import Broker
    from headwater.core.users import USER_ACTIVE
    from headwater.frontends.iggy.server import IggyFrontend
    from headwater.storage.api import open_engine

    batches = max(1, args.messages // BATCH)
    d = tempfile.mkdtemp()
    broker = Broker(open_engine(d))
    try:
        frontend = IggyFrontend(broker, TcpConfig())
        stream = broker.create_stream("bench")
        topic = broker.create_topic(stream.id, "poll", 1, {})
        broker.users.create("iggy", "iggy", USER_ACTIVE, None, broker.clock())
        raw = batch_codec.build_batch([batch_codec.Message(os.urandom(args.size)) for _ in range(BATCH)])
        p = topic.partition(0)
        for _ in range(batches):
            broker.append(p, bytearray(raw))
        session = frontend.session("127.0.0.1:1", "tcp")
        client = 77

        async def go() -> list[float]:
            body = encode_login_register(LoginRegister(ClientVersionInfo(PROTOCOL_VERSION, "bench", "1"), "iggy", "iggy"))
            frame = framing.encode_request(Command.LOGIN_REGISTER, body, client=client)
            assert framing.decode_reply_header(await session.handle(frame[:256], frame[256:])).status == 0
            frames = []
            for i in range(batches):
                req = w.PollMessages(Consumer(ConsumerKind.CONSUMER, 1), stream.id, topic.id, 0,
                                     PollingStrategy(PollingKind.OFFSET, (i * BATCH) % (batches * BATCH)),
                                     args.count, False)
                frame = framing.encode_request(Command.POLL_MESSAGES, w.encode_poll_messages(req), client=client,
                                               request=i + 1)
                frames.append((frame[:256], frame[256:]))
            out = []
            for _ in range(args.passes):
                c0 = time.process_time()
                for i in range(args.polls):
                    head, body = frames[i % batches]
                    reply = await session.handle(head, body)
                out.append((time.process_time() - c0) / args.polls * 1e6)
            assert sum(len(b) for b in reply) > 272, "the last poll returned nothing"
            return out

        res = asyncio.run(go())
        print(f"in process, {sys.executable}: µs of CPU per poll of {args.count}:",
              " ".join(f"{x:.1f}" for x in res))
    finally:
        broker.close()
        shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------- served


def fill(address: str, size: int, messages: int) -> None:
    from _harness import IggyConn

    from headwater.codec import batch as batch_codec
    from headwater.codec.iggy.codes import Command
    from headwater.codec.iggy.commands import messages as wm
    from headwater.codec.iggy.primitives import Partitioning

    batch = batch_codec.build_batch([batch_codec.Message(os.urandom(size)) for _ in range(BATCH)])
    body = wm.encode_send_messages(wm.SendMessages("bench", "poll", Partitioning.by_partition(0), BATCH,
                                                   memoryview(batch)))
    with IggyConn(address, timeout=60) as conn:
        conn.login()
        sent = acked = 0
        while sent < messages:
            conn.send(conn.frame(int(Command.SEND_MESSAGES), body))
            sent += BATCH
            if sent - acked >= 8 * BATCH:
                assert conn.read()[:2] == ("reply", 0)
                acked += BATCH
        while acked < sent:
            assert conn.read()[:2] == ("reply", 0)
            acked += BATCH


async def sdk_client(address: str, create: bool = False):
    from apache_iggy import IggyClient

    c = IggyClient(address)
    await c.connect()
    await c.login_user("iggy", "iggy")
    if create:
        await c.create_stream("bench")
        await c.create_topic("bench", "poll", 1)
    return c


async def sdk_pass(c, messages: int, count: int) -> int:
    from apache_iggy import Consumer, PollingStrategy

    got = polls = 0
    while got < messages:
        msgs = await c.poll_messages("bench", "poll", consumer=Consumer.Single(1),
                                     polling_strategy=PollingStrategy.Offset(got), count=count,
                                     auto_commit=False, partition_id=0)
        if not msgs:
            raise RuntimeError(f"empty poll at offset {got}")
        got += len(msgs)
        polls += 1
    return polls


class RawPoller:
    """Our serial poller: one PollMessages by offset at a time, each reply read into one buffer."""

    def __init__(self, address: str, size: int, count: int):
        from _harness import IggyConn

        from headwater.codec.iggy import framing
        from headwater.codec.iggy.codes import Command, ConsumerKind, PollingKind
        from headwater.codec.iggy.commands import messages as wm
        from headwater.codec.iggy.primitives import Consumer, PollingStrategy

        self.conn = IggyConn(address, timeout=60)
        self.conn.login()
        self.count, self.framing = count, framing
        self.code = int(Command.POLL_MESSAGES)
        self.request = lambda offset: wm.encode_poll_messages(wm.PollMessages(
            Consumer(ConsumerKind.CONSUMER, 1), "bench", "poll", 0, PollingStrategy(PollingKind.OFFSET, offset),
            count, False))
        self.buf = bytearray(framing.HEADER_SIZE + 16 + (size + 128) * count + (1 << 20))
        self.view = memoryview(self.buf)

    def one(self, offset: int) -> int:
        framing, buf, sock = self.framing, self.buf, self.conn.sock
        self.conn.send(self.conn.frame(self.code, self.request(offset)))
        got, want = 0, framing.HEADER_SIZE
        while got < want:
            n = sock.recv_into(self.view[got:want])
            if not n:
                raise RuntimeError("connection closed mid-reply")
            got += n
            if got >= framing.HEADER_SIZE:
                want = _SIZE.unpack_from(buf, framing.SIZE_OFFSET)[0]
        status = _SIZE.unpack_from(buf, framing.STATUS_OFFSET)[0]
        if status:
            raise RuntimeError(f"PollMessages answered status {status}")
        return _POLL_PREFIX.unpack_from(buf, framing.HEADER_SIZE)[2]

    def run(self, messages: int) -> int:
        got = polls = 0
        while got < messages:
            n = self.one(got)
            if not n:
                raise RuntimeError(f"empty poll at offset {got}")
            got += n
            polls += 1
        return polls


def served(args) -> None:
    from compare_servers import Headwater

    base = Path(tempfile.mkdtemp(prefix="bench-iggy-poll-"))
    servers = []
    try:
        for i, python in enumerate(args.server_python):
            server = Headwater(base / str(i), os.path.abspath(python)).start()
            servers.append(server)
            loop = asyncio.new_event_loop()
            sdk = loop.run_until_complete(sdk_client(server.iggy, create=True))
            fill(server.iggy, args.size, args.messages)
            server.clients = (loop, sdk, RawPoller(server.iggy, args.size, args.count))
        print(f"| pass | server | client | polls | wall µs/poll | server CPU µs/poll | client CPU µs/poll | msg/s | load |")
        print("|---|---|---|---:|---:|---:|---:|---:|---|")
        for n in range(args.passes):
            for i, server in enumerate(servers):
                loop, sdk, raw = server.clients
                for kind in args.clients:
                    s0, c0, t0 = server.cpu(), time.process_time(), time.perf_counter()
                    if kind == "sdk":
                        polls = loop.run_until_complete(sdk_pass(sdk, args.messages, args.count))
                    else:
                        polls = raw.run(args.messages)
                    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                    scpu = server.cpu() - s0
                    print(f"| {n + 1} | {args.server_python[i]} | {kind} | {polls} | {wall / polls * 1e6:.0f} | "
                          f"{scpu / polls * 1e6:.0f} | {cpu / polls * 1e6:.0f} | {args.messages / wall:,.0f} | "
                          f"{os.getloadavg()[0]:.1f} |", flush=True)
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server-python", action="append", default=[],
                    help="interpreter of a venv whose headwater to serve (repeat to compare; default this one)")
    ap.add_argument("--inproc", action="store_true", help="one IggySession.handle per poll, no sockets")
    ap.add_argument("--messages", type=int, default=1_000_000, help="messages per pass (default 1M)")
    ap.add_argument("--size", type=int, default=100, help="payload bytes (default 100)")
    ap.add_argument("--count", type=int, default=BATCH, help="messages per poll (default 1000)")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--polls", type=int, default=200, help="--inproc: polls per pass (default 200)")
    ap.add_argument("--clients", default="sdk,raw", help="served: sdk, raw or both (default sdk,raw)")
    args = ap.parse_args()
    args.clients = [c for c in args.clients.split(",") if c]
    if args.inproc:
        args.messages = min(args.messages, 200 * BATCH)
        inproc(args)
    else:
        args.server_python = args.server_python or [sys.executable]
        served(args)


if __name__ == "__main__":
    main()
