"""Metadata edge cases through the official SDK, on a real server: names at and past their
limits, duplicates, deletes and purges racing clients that poll and send, 1000 partitions.
Every refusal must be the Iggy error, the server must keep serving, and a restart must
bring back exactly what was acknowledged.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading

import apache_iggy as ig

from hw_server import free_port
from test_robustness_wire import healthy, run, sdk_client


async def _outcome(coro) -> str:
    try:
        await coro
        return "ok"
    except RuntimeError as e:
        return str(e)


def test_name_edge_cases(fresh_server):
    names_ok = ["a" * 255, "é" * 127 + "x", "流-🌊-ström", ".", "..", "dup"]

    async def go():
        c = await sdk_client(fresh_server)
        for name in names_ok:
            assert await _outcome(c.create_stream(name)) == "ok", name
        for name in ["a" * 256, "é" * 128]:  # 256 bytes of UTF-8: refused (client or server side)
            assert await _outcome(c.create_stream(name)) != "ok", name
        for name in ["a/b", "a\\b", " lead", "trail ", "nul\x00"]:
            assert "Invalid stream name" in await _outcome(c.create_stream(name)), name
        assert "already exists" in await _outcome(c.create_stream("dup"))
        assert await _outcome(c.create_stream("DUP")) == "ok"  # names are case-sensitive
        assert (await c.get_stream("流-🌊-ström")).name == "流-🌊-ström"

        assert await _outcome(c.create_topic("dup", "t" * 255, 1)) == "ok"
        assert await _outcome(c.create_topic("dup", "t" * 256, 1)) != "ok"
        assert "Invalid topic name" in await _outcome(c.create_topic("dup", "x/y", 1))
        assert await _outcome(c.create_topic("dup", "twice", 1)) == "ok"
        assert "already exists" in await _outcome(c.create_topic("dup", "twice", 1))
        assert await _outcome(c.delete_topic("dup", "twice")) == "ok"
        assert "was not found" in await _outcome(c.delete_topic("dup", "twice"))  # TopicIdNotFound 2010
        assert "was not found" in await _outcome(c.delete_stream("no-such-stream"))  # 1009
        assert "Too many partitions" in await _outcome(c.create_topic("dup", "big", 1001))
        return sorted(s.name for s in await c.get_streams())

    before = run(go())
    assert fresh_server.stop() == 0
    fresh_server.start()

    async def after():
        c = await sdk_client(fresh_server)
        return sorted(s.name for s in await c.get_streams())
    assert run(after()) == before
    healthy(fresh_server)


def test_a_thousand_partitions_created_and_deleted(fresh_server):
    async def go():
        c = await sdk_client(fresh_server)
        await c.create_stream("wide")
        await c.create_topic("wide", "t", 0)
        await c.create_partitions("wide", "t", 1000)
        assert "Too many partitions" in await _outcome(c.create_partitions("wide", "t", 1))
        await c.send_messages("wide", "t", 999, [ig.SendMessage(b"last")])
        assert (await c.get_topic("wide", "t")).partitions_count == 1000
        await c.delete_partitions("wide", "t", 1000)
        assert "Invalid partitions count" in await _outcome(c.delete_partitions("wide", "t", 1))
        assert "Invalid partitions count" in await _outcome(c.create_partitions("wide", "t", 0))
        assert (await c.get_topic("wide", "t")).partitions_count == 0
        await c.create_partitions("wide", "t", 2)  # ids start again at 0, empty
        got = await c.poll_messages("wide", "t", consumer=ig.Consumer.Single("a"),
                                    polling_strategy=ig.PollingStrategy.First(), count=10,
                                    auto_commit=False, partition_id=1)
        assert got == []
    run(go(), 120)
    left = os.listdir(os.path.join(fresh_server.data_dir, "streams", "0", "topics", "0", "partitions"))
    assert sorted(left) == ["0", "1"]
    healthy(fresh_server)


def test_delete_and_purge_while_clients_poll_and_send(fresh_server):
    """Delete, purge and recreate a stream and topic while two other clients hammer it."""
    stop = threading.Event()
    results: list = []

    def worker(kind: str, stream: str):
        async def go():
            c = await sdk_client(fresh_server)
            done, errors = 0, set()
            while not stop.is_set():
                try:
                    if kind == "poll":
                        await c.poll_messages(stream, "t", consumer=ig.Consumer.Single("w"),
                                              polling_strategy=ig.PollingStrategy.Next(), count=50,
                                              auto_commit=True, partition_id=0)
                    else:
                        await c.send_messages(stream, "t", 0, [ig.SendMessage(b"z" * 40)] * 5)
                    done += 1
                except RuntimeError as e:
                    errors.add(str(e).split(" with ")[0][:40])
                    await asyncio.sleep(0.005)
            return done, errors
        results.append((kind, run(go(), 120)))

    async def admin():
        c = await sdk_client(fresh_server)
        for rnd in range(3):
            name = f"race-{rnd}"
            await c.create_stream(name)
            await c.create_topic(name, "t", 1)
            threads = [threading.Thread(target=worker, args=(k, name)) for k in ("poll", "send")]
            for t in threads:
                t.start()
            await asyncio.sleep(0.4)
            await c.purge_topic(name, "t")
            await asyncio.sleep(0.2)
            await c.purge_stream(name)
            await asyncio.sleep(0.2)
            await c.delete_topic(name, "t")
            await asyncio.sleep(0.2)
            await c.create_topic(name, "t", 1)
            await asyncio.sleep(0.2)
            await c.delete_stream(name)
            await asyncio.sleep(0.2)
            await c.create_stream(name)
            await c.create_topic(name, "t", 1)
            await asyncio.sleep(0.3)
            stop.set()
            for t in threads:
                await asyncio.to_thread(t.join, 60)
            stop.clear()
            got = await c.poll_messages(name, "t", consumer=ig.Consumer.Single("audit"),
                                        polling_strategy=ig.PollingStrategy.First(), count=100_000,
                                        auto_commit=False, partition_id=0)
            assert [m.offset() for m in got] == list(range(len(got)))
            assert all(m.payload() == b"z" * 40 for m in got)

    run(admin(), 120)
    assert len(results) == 6
    for kind, (done, errors) in results:
        assert done > 0, kind
        assert errors <= {"Stream", "Topic", "Partition"}, (kind, errors)  # only "not found" kinds
    assert "Traceback" not in fresh_server.log()
    healthy(fresh_server)


def test_a_corrupt_metadata_journal_refuses_to_start_with_a_clear_error(fresh_server):
    async def go():
        c = await sdk_client(fresh_server)
        await c.create_stream("meta")
        await c.create_topic("meta", "t", 1)
    run(go())
    assert fresh_server.stop() == 0
    journal = os.path.join(fresh_server.data_dir, "metadata", "catalog.journal")
    with open(journal, "r+b") as f:
        f.seek(30)  # inside the first record: not a torn tail, so the store must refuse
        (b,) = f.read(1)
        f.seek(30)
        f.write(bytes([b ^ 0x20]))
    proc = subprocess.run(
        [sys.executable, "-m", "headwater", "serve", "--data-dir", str(fresh_server.data_dir),
         "--tcp-address", f"127.0.0.1:{free_port()}", "--kafka-address", f"127.0.0.1:{free_port()}",
         "--http-address", "127.0.0.1:0", "--quic-address", "127.0.0.1:0", "--websocket-address", "127.0.0.1:0",
         "--with-default-root-credentials"],
        capture_output=True, text=True, timeout=30,
        env={k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "catalog.journal" in out
    assert "Traceback" not in out, out[-2000:]


def test_a_torn_catalog_journal_sets_aside_what_it_no_longer_names(fresh_server):
    """The catalog's last record cut short (a torn write, or damage that looks like one): the next
    start cannot tell whether the topic that record created was acknowledged, so the topic's files
    are moved under lost+found/ -- not deleted -- and the server starts and serves."""
    async def go():
        c = await sdk_client(fresh_server)
        await c.create_stream("keep")
        await c.create_topic("keep", "t", 1)
        await c.create_stream("torn")
        await c.create_topic("torn", "t", 1)
        await c.send_messages("torn", "t", 0, [ig.SendMessage("acknowledged")])
    run(go())
    assert fresh_server.stop() == 0
    data = str(fresh_server.data_dir)
    journal = os.path.join(data, "metadata", "catalog.journal")
    with open(journal, "r+b") as f:
        f.truncate(os.path.getsize(journal) - 1)  # the last record (the "torn" topic) is torn
    fresh_server.start()
    healthy(fresh_server)

    async def topics():
        c = await sdk_client(fresh_server)
        return await c.get_topic("keep", "t"), await c.get_topic("torn", "t")
    kept, torn = run(topics())
    assert kept is not None and torn is None
    aside = os.path.join(data, "lost+found")
    logs = [os.path.join(d, f) for d, _, files in os.walk(aside) for f in files if f.endswith(".log")]
    assert len(logs) == 1, os.listdir(aside) if os.path.isdir(aside) else "no lost+found"
    with open(logs[0], "rb") as f:
        assert b"acknowledged" in f.read()
    assert "set aside files the catalog does not name" in fresh_server.log()
    assert "Traceback" not in fresh_server.log()
    fresh_server.restart()  # lost+found is never read: a second start is clean and keeps it
    healthy(fresh_server)
    assert os.path.exists(logs[0])
