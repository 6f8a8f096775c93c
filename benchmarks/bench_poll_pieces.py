"""Iggy poll in process: the CPU of one PollMessages on the listener's fast path, and of its page-cache read.

Usage::

    .venv/bin/python benchmarks/bench_poll_pieces.py
    PYTHONPATH=/work/wt/before/src .venv/bin/python benchmarks/bench_poll_pieces.py   # another tree's code

No sockets, no server process: a broker on a temporary directory holds ``--batches`` stored batches
of 1000 x 100 B (one partition, all in the page cache); a session logged in through a real
Register frame then serves one PollMessages by offset per batch (count 1000, offsets in order:
a consumer reading front to back), as the listener's protocol callback does (the header check
twice, the body, the reply's buffers; everything but the socket write). Printed: CPU µs per poll
(``process_time``), median and best of ``--rounds``.

Then the read a poll makes of ~156 KiB of segment (one chunk), for chunk sizes 32 KiB..1 MiB on a
temporary file in the page cache: the check-then-read (``readahead.cached``: ``cachestat`` and a
one-byte ``RWF_NOWAIT`` probe, then ``os.pread``) against ``readahead.read_nowait`` (one
``preadv2(RWF_NOWAIT)``), in each implementation the tree has (pure Python into a zeroed
bytearray; compiled into a new bytes object). Numbers only; nothing asserts a speed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time


def _median_best(fn, rounds: int, per_round: int) -> tuple[float, float]:
    fn()
    times = []
    for _ in range(rounds):
        t0 = time.process_time()
        fn()
        times.append((time.process_time() - t0) / per_round * 1e6)
    times.sort()
    return times[len(times) // 2], times[0]


def poll_cost(batches: int, rounds: int) -> tuple[float, float]:
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

    directory = tempfile.mkdtemp(prefix="bench-poll-pieces-")
    loop = asyncio.new_event_loop()
    broker = Broker(open_engine(directory))
    try:
        stream = broker.create_stream("bench")
        topic = broker.create_topic(stream.id, "poll", 1, {})
        broker.users.create("bench", "bench-pw", USER_ACTIVE, None, broker.clock())  # the first user made: root
        raw = batch_codec.build_batch([batch_codec.Message(os.urandom(100)) for _ in range(1000)])
        for _ in range(batches):
            broker.append(topic.partition(0), bytearray(raw))
        frontend = IggyFrontend(broker, TcpConfig())
        session = frontend.session("127.0.0.1:9", "tcp")
        client = 0x1234_5678
        login = encode_login_register(LoginRegister(ClientVersionInfo(PROTOCOL_VERSION, "bench", "1"), "bench",
                                                    "bench-pw"))
        frame = framing.encode_request(Command.LOGIN_REGISTER, login, client=client)
        reply = loop.run_until_complete(session.handle(frame[:framing.HEADER_SIZE], frame[framing.HEADER_SIZE:]))
        assert framing.decode_reply_header(reply).status == 0, "login refused"
        frames = []
        for i in range(batches):
            req = w.PollMessages(Consumer(ConsumerKind.CONSUMER, 1), "bench", "poll", 0,
                                 PollingStrategy(PollingKind.OFFSET, i * 1000), 1000, False)
            whole = framing.encode_request(Command.POLL_MESSAGES, w.encode_poll_messages(req), client=client,
                                           request=i + 1)
            frames.append((whole[:framing.HEADER_SIZE], bytearray(whole[framing.HEADER_SIZE:])))
        ctx, cs = session.ctx, session.cs
        by_body = getattr(frontend, "_poll_body", None)  # (trees before session 10 read the fields first)
        from_disk = 0

        def one_round() -> None:
            nonlocal from_disk
            for head, body in frames:
                frontend._poll_ready(ctx, cs, head)  # (the listener checks in body_size and in serve)
                frontend._poll_ready(ctx, cs, head)
                if by_body is not None:
                    out = by_body(ctx, cs, head, body)
                else:
                    out = frontend._poll(ctx, cs, head, w.poll_messages_fields(body))
                if type(out) is not list:  # pages the kernel dropped meanwhile: read in off the loop
                    from_disk += 1
                    out = loop.run_until_complete(out)
                assert type(out) is list and framing.decode_reply_header(out[0]).status == 0, out

        result = _median_best(one_round, rounds, batches)
        if from_disk:
            print(f"({from_disk} polls found pages out of the page cache and read them in: another process "
                  f"took the memory; the figure below is not comparable)")
        return result
    finally:
        broker.close()
        loop.close()
        shutil.rmtree(directory, ignore_errors=True)


def read_costs(rounds: int) -> None:
    from headwater.storage.local import readahead

    fd, path = tempfile.mkstemp(prefix="bench-poll-pieces-")
    try:
        os.write(fd, os.urandom(48 << 20))
        os.pread(fd, 48 << 20, 0)
        switch = getattr(readahead, "use_implementation", None)
        kinds = ["python", "compiled"] if switch is not None and readahead._built is not None else ["as built"]
        print("| chunk | cachestat + probe + pread µs | " + " | ".join(f"read_nowait ({k}) µs" for k in kinds) + " |")
        print("|---:|---:|" + "---:|" * len(kinds))
        for size in (32 << 10, 156 << 10, 256 << 10, 512 << 10, 1 << 20):
            step = size + 4096
            n = min(200, (40 << 20) // step)

            def checked() -> None:
                for i in range(n):
                    readahead.cached(fd, i * step, size)
                    os.pread(fd, size, i * step)

            row = [_median_best(checked, rounds, n)[0]]
            limit = readahead.NOWAIT_READ_MAX
            readahead.NOWAIT_READ_MAX = 1 << 30  # (every size, for the comparison)
            try:
                for kind in kinds:
                    previous = switch(kind) if switch is not None and kind != "as built" else None

                    def nowait() -> None:
                        for i in range(n):
                            readahead.read_nowait(fd, size, i * step)

                    try:
                        row.append(_median_best(nowait, rounds, n)[0])
                    finally:
                        if previous is not None:
                            switch(previous)
            finally:
                readahead.NOWAIT_READ_MAX = limit
            print(f"| {size >> 10} KiB | " + " | ".join(f"{v:.1f}" for v in row) + " |")
    finally:
        os.close(fd)
        os.unlink(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=100, help="stored batches, one poll each per round (default 100)")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    median, best = poll_cost(args.batches, args.rounds)
    print(f"PollMessages (1000 x 100 B) on the listener's fast path, in process: CPU µs per poll: "
          f"median {median:.1f}, best {best:.1f} (load {os.getloadavg()[0]:.1f})")
    read_costs(args.rounds)


if __name__ == "__main__":
    main()
