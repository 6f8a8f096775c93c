"""A server at its RLIMIT_NOFILE: a group-commit ``dup`` refused with EMFILE fences nothing.

A running server's soft open-files limit is lowered (``prlimit``) to a few fds above
what it holds, then ``enforce_fsync`` sends of 64 KB to 12 partitions of 1 MiB segments make
every partition roll over and over: each roll's dups, directory fd and new segment files need
more fds than are free, so dups and opens are refused with EMFILE. Sends refused meanwhile are
not acknowledged (the client sees the error); what is acknowledged was fdatasynced. Once the
limit is raised again, every partition must take writes (none fenced, as a failed sync would
leave it until a restart), and after a restart every acknowledged message must read back.
"""

from __future__ import annotations

import asyncio
import os
import random
import resource
import urllib.request

import apache_iggy as ig

from test_robustness_startstop_crash import read_partitions
from test_robustness_wire import healthy, run, sdk_client

PARTITIONS = 12
MIB = 1024 * 1024
HEADROOM = 1
CLIENTS = 3


def _limit_leaving(pid: int, free: int) -> int:
    """The RLIMIT_NOFILE under which process ``pid`` has exactly ``free`` fd numbers left
    (the kernel gives the lowest free number, refused at or above the limit)."""
    used = {int(n) for n in os.listdir(f"/proc/{pid}/fd")}
    n = 0
    while free:
        if n not in used:
            free -= 1
        n += 1
    return n


def test_out_of_file_descriptors_fences_no_partition_and_loses_nothing(fresh_server):
    pid = fresh_server.proc.pid
    limits = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    acked: dict[tuple[int, int], bytes] = {}
    refused: list[str] = []
    rng = random.Random(24)

    async def send(c, p: int, tag: bytes) -> None:
        payload = tag + b"-%d-" % p + rng.randbytes(64 * 1024)
        try:
            r = await c.send_messages("fd", "t", p, [ig.SendMessage(payload)])
        except RuntimeError as e:  # refused (no fd for the roll's new segment): not acknowledged
            refused.append(str(e))
            return
        acked[(p, r.confirmations[0].base_offset)] = payload

    async def go():
        clients = [await sdk_client(fresh_server) for _ in range(CLIENTS)]  # connected before: no fd to accept
        c = clients[0]
        await c.create_stream("fd")
        await c.create_topic("fd", "t", PARTITIONS, segment_size=MIB, options={"enforce_fsync": "true"})
        await asyncio.gather(*(send(c, p, b"warm") for p in range(PARTITIONS)))
        limit = _limit_leaving(pid, HEADROOM)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, limits[1]))  # the soft one: it bites
        try:
            for i in range(40):  # ~2.5 MiB per partition: rolls, and rounds of several partitions at once
                await asyncio.gather(*(send(clients[p % CLIENTS], p, b"tight%d" % i) for p in range(PARTITIONS)))
        finally:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, limits)
        refused_while_tight = len(refused)
        for p in range(PARTITIONS):  # no partition fenced: each takes a write again
            await send(c, p, b"after")
        assert len(refused) == refused_while_tight, refused[refused_while_tight:]

    run(go(), 180)
    with urllib.request.urlopen(f"http://127.0.0.1:{fresh_server.http_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    no_fd = [line for line in text.splitlines()
             if line.startswith('headwater_fsync_duration_seconds_count{kind="inline_no_fd"}')]
    assert no_fd and float(no_fd[0].split()[-1]) > 0, "the limit never bit: no round's dup was refused"
    assert "sync failed" not in fresh_server.log(), fresh_server.log()[-3000:]
    assert fresh_server.stop() == 0
    fresh_server.start()

    stored = run(read_partitions(fresh_server, "fd", "t", PARTITIONS), 120)
    missing = [k for k in acked if stored.get(k) != acked[k]]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages lost or altered"
    healthy(fresh_server)
