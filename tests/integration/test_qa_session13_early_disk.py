"""QA, session 13: an early roll (storage/local/prealloc.py) meets a full disk, on ext4 on a loop
device (``test_qa_session11.mounted``; skipped without root), on a real server.

A partition's first segment (64 MiB, 8 MiB window) asks for its spare at its first top-up and
rolls onto it once ready: a short segment, then the spare, a whole segment reserved. A ballast
then leaves 2 MiB free; the writes go on until the server refuses one for space (the whole
reserved segment is the partition's own, so it must store a whole segment into it), then the server is
SIGKILLed, the ballast removed, and the restarted server has every acknowledged message, in
order, takes new writes, and leaves no spare and no reserved block after a clean stop;
``headwater verify`` is clean."""

from __future__ import annotations

import asyncio
import os
import subprocess

import apache_iggy as ig

from hw_server import ServerProcess, free_port
from test_qa_session11 import MIB, SLACK, mounted, offline_checks, spare_files
from test_qa_session11_disk import _df
from test_qa_session13_early_roll import OPTIONS, PER_SEND, logs, payload, poll_all
from test_robustness_wire import run, sdk_client

import pytest

pytestmark = pytest.mark.slow


async def _send(c, sent: int) -> int:
    await c.send_messages("s", "t", 0, [ig.SendMessage(payload(i)) for i in range(sent, sent + PER_SEND)])
    return sent + PER_SEND


def test_a_full_disk_after_an_early_roll_keeps_every_ack_and_leaks_nothing(tmp_path):
    with mounted("ext4", tmp_path / "mnt", 1400) as mnt:
        server = ServerProcess(mnt / "data", free_port(), free_port(),
                               extra_env={"HEADWATER_SYSTEM_PREALLOCATE_WINDOW_BYTES": str(8 * MIB),
                                          "HEADWATER_SYSTEM_WRITE_BEHIND_CACHE_BYTES": "0"}).start()
        sent = 0
        try:
            async def fill() -> tuple[int, Exception | None]:
                nonlocal sent
                c = await sdk_client(server)
                await c.create_stream("s")
                await c.create_topic("s", "t", 1, options=OPTIONS)
                for _ in range(400):  # until the early roll (~12-16 MiB), bounded
                    sent = await _send(c, sent)
                    if len(logs(server)) == 2:
                        break
                assert len(logs(server)) == 2, logs(server)
                assert os.stat(logs(server)[1]).st_blocks * 512 >= 64 * MIB  # the spare: all reserved
                subprocess.run(["fallocate", "-l", str(_df(mnt) - 2 * MIB), str(mnt / "ballast")], check=True)
                error = None
                for _ in range(400):  # ~80 MiB at most: past the spare's 64 MiB
                    try:
                        sent = await _send(c, sent)
                    except RuntimeError as exc:
                        error = exc
                        break
                return sent, error

            sent, error = run(fill(), 240)
            # the spare's blocks were the partition's: it filled the whole segment with the disk
            # full, then the next segment took the 2 MiB left, then the refusal (4006)
            sizes = [os.path.getsize(p) for p in logs(server)]
            assert error is not None and len(sizes) == 3 and sizes[1] >= 64 * MIB, (sizes, error)
            server.kill()
            os.unlink(mnt / "ballast")
            server.start()
            messages = run(poll_all(server, "s"), 120)
            assert len(messages) >= sent
            assert [m.offset() for m in messages] == list(range(len(messages)))
            assert [m.payload() for m in messages[:sent]] == [payload(i) for i in range(sent)]

            async def more() -> None:
                c = await sdk_client(server)
                n = len(messages)
                for _ in range(10):
                    n = await _send(c, n)

            run(more(), 60)
            assert server.stop() == 0, server.log()
            assert spare_files(server.data_dir) == []
            for path in logs(server):
                st = os.stat(path)
                assert st.st_blocks * 512 <= -(-st.st_size // 4096) * 4096 + SLACK, path
            offline_checks(server)
        finally:
            if server.proc is not None:
                server.stop()
