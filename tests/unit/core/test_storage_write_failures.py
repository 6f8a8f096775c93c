"""The broker when the filesystem refuses writes: neutral errors, no half state, one log line
per episode, writes resuming by themselves.

Real broker, real local engine in ``tmp_path``; the refusals are the kernel's own: the
descriptor a log or journal writes through is swapped (``dup2``) for a read-only one on the
same file, as when a device turns read-only, so the write fails (EBADF) and so does the cut
back (the harder case: storage must fence or remember the dirty tail). The disk-full run on a
real tmpfs is ``tests/integration/test_disk_full.py``.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager

import pytest

from headwater.codec.batch import Message, build_batch, iter_frames
from headwater.core import errors
from headwater.core.broker import Broker
from headwater.core.offsets import CONSUMER
from headwater.storage.api import open_engine

FAILING, RECOVERED = "storage writes failing", "storage writes succeed again"


@contextmanager
def read_only(fd: int, path: str):
    """Inside: ``fd`` refers to ``path`` opened read-only (writes and ftruncate fail)."""
    saved = os.dup(fd)
    ro = os.open(path, os.O_RDONLY)
    os.dup2(ro, fd)
    try:
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)
        os.close(ro)


def batch(*payloads: bytes) -> bytearray:
    return bytearray(build_batch([Message(p) for p in payloads]))


def payloads(p) -> list[bytes]:
    stored, _ = p.read(0, 1 << 20)
    return [bytes(f.payload) for b in stored for f in iter_frames(b)]


def storage_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "headwater.storage"]


def test_refused_appends_log_once_per_episode_and_writes_resume(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    b = Broker(open_engine(str(tmp_path)))
    b.create_stream("s")
    t = b.create_topic("s", "t", 1, {})
    p = t.partitions[0]
    b.append(p, batch(b"kept"))
    active = p.log._segments[-1]
    with read_only(active._fd, active.log_path):
        for _ in range(3):
            with pytest.raises(errors.MessagesNotSaved) as info:
                b.append(p, batch(b"x" * 1000))
            assert not info.value.no_space  # EBADF is not a full disk
        assert p.high_watermark == 1 and payloads(p) == [b"kept"]
        assert not b.health.snapshot().healthy and b.health.snapshot().refused_writes == 3
    b.append(p, batch(b"after"))
    assert payloads(p) == [b"kept", b"after"]
    assert b.health.snapshot().healthy
    records = storage_records(caplog)
    assert [(r.levelname, r.getMessage().split(":")[0]) for r in records] == [
        ("ERROR", FAILING), ("WARNING", RECOVERED)]
    assert all(r.exc_info is None for r in records)
    b.close()


def test_a_refused_metadata_write_leaves_no_half_state(tmp_path):
    b = Broker(open_engine(str(tmp_path)))
    s = b.create_stream("s")
    t = b.create_topic("s", "t", 1, {})
    p = t.partitions[0]
    b.append(p, batch(*[b"m%d" % i for i in range(10)]))
    b.commit(p, CONSUMER, "c", 5)
    catalog, offsets = b._meta.store, b._offsets_meta.store
    with read_only(catalog._fd, catalog.journal_path):
        with pytest.raises(errors.MetadataNotSaved):
            b.create_stream("refused")
        with pytest.raises(errors.MetadataNotSaved):
            b.update_stream("s", "renamed")
        with pytest.raises(errors.MetadataNotSaved):
            b.update_topic("s", "t", "renamed", {})
        with pytest.raises(errors.MetadataNotSaved):
            b.create_group("s", "t", "g")
    with read_only(offsets._fd, offsets.journal_path):
        with pytest.raises(errors.MetadataNotSaved):
            b.commit(p, CONSUMER, "c2", 7)
        with pytest.raises(errors.MetadataNotSaved):
            b.commit_many(CONSUMER, "c", [(p, 9, "meta")])
    assert [x.name for x in b.catalog.streams.values()] == ["s"] and s.name == "s" and t.name == "t"
    assert t.groups == {}
    assert b.committed(p, CONSUMER, "c") == 5 and b.committed(p, CONSUMER, "c2") is None
    b.create_stream("after")  # writable again: the cut the failed put owed is made first
    b.commit(p, CONSUMER, "c2", 7)
    b.close()
    again = Broker(open_engine(str(tmp_path)))  # and the same on disk
    assert [x.name for x in again.catalog.streams.values()] == ["s", "after"]
    t2 = again.topic("s", "t")
    assert t2.name == "t" and t2.groups == {}
    assert again.committed(t2.partitions[0], CONSUMER, "c") == 5
    assert again.committed(t2.partitions[0], CONSUMER, "c2") == 7
    again.create_stream("refused")  # writable again
    again.close()
