"""SIGKILL in the middle of a start or a stop over many partitions loses nothing and fences nothing.

The engine removes every partition's clean-shutdown marker at start and makes those removals
durable together once all partitions are open; at stop it syncs every log, then writes all
markers, then makes them durable together (``storage.local.bulk``). These tests kill the
server inside those windows, seen from outside: at start once every marker is gone (the
removals done, their sync at most just begun), at stop once every marker is there (written,
their sync at most just begun). After each kill a restart must open every partition
(none fenced), every acknowledged message must read back byte-identical at its offset, and
the partitions must take writes again.
"""

from __future__ import annotations

import glob
import os
import random
import signal
import threading
import time

import apache_iggy as ig

from test_robustness_wire import healthy, run, sdk_client

PARTITIONS = 120
CLEAN_SHUTDOWN = "clean-shutdown"


def _markers(server) -> list[bool]:
    dirs = glob.glob(os.path.join(str(server.data_dir), "streams", "*", "topics", "*", "partitions", "*"))
    return [os.path.exists(os.path.join(d, CLEAN_SHUTDOWN)) for d in dirs]


async def _send_round(server, acked: dict, rng: random.Random, tag: bytes) -> None:
    c = await sdk_client(server)
    for p in range(PARTITIONS):
        payloads = [tag + b"-%d-%d-" % (p, j) + rng.randbytes(rng.randint(0, 300)) for j in range(rng.randint(1, 3))]
        r = await c.send_messages("ss", "t", p, [ig.SendMessage(x) for x in payloads])
        base = r.confirmations[0].base_offset
        for j, x in enumerate(payloads):
            acked[(p, base + j)] = x


async def read_partitions(server, stream: str = "ss", topic: str = "t", partitions: int = PARTITIONS) -> dict:
    """Every stored message of ``partitions`` partitions: {(partition, offset): payload}."""
    c = await sdk_client(server)
    stored = {}
    for p in range(partitions):
        offset = 0
        while True:
            got = await c.poll_messages(stream, topic, consumer=ig.Consumer.Single("audit"),
                                        polling_strategy=ig.PollingStrategy.Offset(offset), count=1000,
                                        auto_commit=False, partition_id=p)
            if not got:
                break
            for m in got:
                stored[(p, m.offset())] = m.payload()
            offset = got[-1].offset() + 1
    return stored


def _check(server, acked: dict) -> None:
    stored = run(read_partitions(server), 120)
    for p in range(PARTITIONS):
        offsets = sorted(o for (pp, o) in stored if pp == p)
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets not contiguous"
    missing = [k for k in acked if k not in stored]
    altered = [k for k in acked if k in stored and stored[k] != acked[k]]
    assert not missing and not altered, f"{len(missing)} acknowledged messages lost, {len(altered)} altered"
    assert "partition fenced" not in server.log(), server.log()[-3000:]


def _kill_when(server, predicate, deadline_s: float = 120) -> bool:
    """Poll the data directory until ``predicate(markers)`` holds, then SIGKILL the server.
    Returns whether the kill landed while it ran (False: it had exited already)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        proc = server.proc
        if proc is not None and proc.poll() is not None:
            return False
        markers = _markers(server)
        if len(markers) == PARTITIONS and predicate(markers) and proc is not None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(0.0005)
    raise AssertionError("the markers never reached the state waited for:\n" + server.log()[-3000:])


def test_sigkill_during_stop_and_during_start_recovers_everything(fresh_server):
    async def setup():
        c = await sdk_client(fresh_server)
        await c.create_stream("ss")
        await c.create_topic("ss", "t", PARTITIONS)
    run(setup())
    rng = random.Random(12)
    acked: dict = {}
    for round_no in range(3):
        run(_send_round(fresh_server, acked, rng, b"r%d" % round_no), 120)
        assert not any(_markers(fresh_server)), "an open partition kept its marker"

        # stop: SIGTERM, then SIGKILL as soon as every marker is written
        fresh_server.proc.send_signal(signal.SIGTERM)
        _kill_when(fresh_server, all)
        fresh_server.proc = None

        # start over the (possibly not yet durable) markers: SIGKILL once every one is removed
        errors: list[BaseException] = []

        def start():
            try:
                fresh_server.start()
            except RuntimeError as e:  # killed before it was ready
                errors.append(e)

        starter = threading.Thread(target=start)
        starter.start()
        while fresh_server.proc is None and starter.is_alive():
            time.sleep(0.0005)
        _kill_when(fresh_server, lambda m: not any(m))
        starter.join()  # it raised (killed before ready) or returned (ready just before the kill)
        if fresh_server.proc is not None:
            fresh_server.proc.wait()
        fresh_server.proc = None

        fresh_server.start()
        _check(fresh_server, acked)
    run(_send_round(fresh_server, acked, rng, b"after"), 120)
    assert fresh_server.stop() == 0
    assert all(_markers(fresh_server)), "a clean stop left a partition without its marker"
    fresh_server.start()
    _check(fresh_server, acked)
    healthy(fresh_server)
