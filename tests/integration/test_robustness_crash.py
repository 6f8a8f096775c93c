"""Kill and restart under load: nothing acknowledged is lost, altered or left undecodable.

An official SDK producer sends in a loop and records every acknowledged (partition,
offset, payload); the server is SIGKILLed at a random moment, restarted, and every
acknowledged message must read back byte-identical at its offset, offsets contiguous.
Repeated several times over the same data directory, with 1 MiB preallocated segments
(so kills land around rotations). SIGTERM under load must exit 0 and keep everything.
"""

from __future__ import annotations

import asyncio
import random
import signal
import socket

import apache_iggy as ig

from test_robustness_wire import Raw, healthy, run, sdk_client

MIB = 1024 * 1024
TOPICS = {"plain": 2, "prealloc": 1}  # topic -> partitions


async def _produce(server, acked: dict, rng: random.Random, kill_after: int, kill) -> int:
    """Send from two clients until ``kill_after`` batches are acknowledged, then ``kill()``
    and keep sending until the clients see the connection die. Returns batches acked."""
    clients = [await sdk_client(server) for _ in range(2)]
    count = 0
    killed = asyncio.Event()

    async def loop(c, topic, partitions, tag):
        nonlocal count
        i = 0
        while True:
            p = i % partitions
            payloads = [b"%s-%d-%d-" % (tag, i, j) + rng.randbytes(rng.randint(0, 4000)) for j in range(rng.randint(1, 8))]
            try:
                r = await c.send_messages("crash", topic, p, [ig.SendMessage(x) for x in payloads])
            except RuntimeError:
                return
            base = r.confirmations[0].base_offset
            for j, x in enumerate(payloads):
                assert (topic, p, base + j) not in acked, "an offset was acknowledged twice"
                acked[(topic, p, base + j)] = x
            i += 1
            count += 1
            if count >= kill_after and not killed.is_set():
                killed.set()
                kill()

    await asyncio.wait_for(asyncio.gather(loop(clients[0], "plain", 2, b"a"), loop(clients[1], "prealloc", 1, b"b")), 60)
    return count


async def _read_back(server) -> dict:
    c = await sdk_client(server)
    stored = {}
    for topic, partitions in TOPICS.items():
        for p in range(partitions):
            offset = 0
            while True:
                got = await c.poll_messages("crash", topic, consumer=ig.Consumer.Single("audit"),
                                            polling_strategy=ig.PollingStrategy.Offset(offset), count=2000,
                                            auto_commit=False, partition_id=p)
                if not got:
                    break
                for m in got:
                    stored[(topic, p, m.offset())] = m.payload()
                offset = got[-1].offset() + 1
    return stored


def _check(acked: dict, stored: dict) -> None:
    for topic, partitions in TOPICS.items():
        for p in range(partitions):
            offsets = sorted(o for (t, pp, o) in stored if (t, pp) == (topic, p))
            assert offsets == list(range(len(offsets))), f"{topic}/{p}: offsets not contiguous"
    missing = [k for k in acked if k not in stored]
    altered = [k for k in acked if k in stored and stored[k] != acked[k]]
    assert not missing and not altered, f"{len(missing)} acknowledged messages lost, {len(altered)} altered"


def kill_restart_rounds(server, rng: random.Random, rounds: int = 5) -> None:
    """``rounds`` times: send until a random number of batches is acknowledged, SIGKILL,
    restart, and check every acknowledged message (topics as in TOPICS, stream "crash")."""
    acked: dict = {}
    for _ in range(rounds):
        sent = run(_produce(server, acked, rng, rng.randint(50, 400), server.kill), 90)
        assert sent >= 30
        server.start()
        _check(acked, run(_read_back(server)))
    healthy(server)


def test_repeated_sigkill_during_sends_loses_nothing(fresh_server):
    async def setup():
        c = await sdk_client(fresh_server)
        await c.create_stream("crash")
        await c.create_topic("crash", "plain", 2)
        await c.create_topic("crash", "prealloc", 1, segment_size=MIB, preallocate_segments=True)
    run(setup())
    kill_restart_rounds(fresh_server, random.Random(20240601))


def test_sigterm_under_load_exits_0_and_keeps_everything(fresh_server):
    async def setup():
        c = await sdk_client(fresh_server)
        await c.create_stream("crash")
        await c.create_topic("crash", "plain", 2)
        await c.create_topic("crash", "prealloc", 1, segment_size=MIB, preallocate_segments=True)
    run(setup())
    rng = random.Random(7)
    acked: dict = {}
    codes = []
    run(_produce(fresh_server, acked, rng, 100, lambda: codes.append(fresh_server.stop(signal.SIGTERM))), 90)
    assert codes == [0], fresh_server.log()[-3000:]
    fresh_server.start()
    _check(acked, run(_read_back(fresh_server)))
    healthy(fresh_server)


def test_sigterm_with_idle_and_half_sent_connections_leaves_no_traceback(fresh_server):
    """SIGTERM while clients sit idle or stop mid-frame: exit 0 and a clean log.

    (Python 3.11's StreamReaderProtocol logs "Exception in callback ... CancelledError"
    with a traceback when a connection task ends cancelled; frontends/listener.py must end
    it quietly on shutdown.)
    """
    socks = [socket.create_connection(("127.0.0.1", port))
             for port in (fresh_server.tcp_port, fresh_server.kafka_port) for _ in range(2)]
    socks[1].sendall(Raw(fresh_server.iggy_address).frame(1)[:100])  # half an Iggy header
    mid_body = Raw(fresh_server.iggy_address)
    mid_body.send(mid_body.frame(1, b"x" * 100)[:300])  # an Iggy header and part of its body
    socks[3].sendall(b"\x00\x00\x00\x20\x00")  # half a Kafka request
    with Raw(fresh_server.iggy_address) as logged_in:
        logged_in.login()
        client = run(sdk_client(fresh_server))
        assert fresh_server.stop() == 0
        del client
    for s in socks:
        s.close()
    mid_body.close()
    log = fresh_server.log()
    assert "Traceback" not in log and "Exception in callback" not in log, log[-3000:]
