"""The broker over a real local engine: boot recovery logged, damaged partitions fenced,
crash leftovers swept, stale offsets dropped, creates all or nothing."""

from __future__ import annotations

import glob
import logging
import os

import pytest

from headwater.codec.batch import Message, build_batch
from headwater.core import errors
from headwater.core.broker import Broker
from headwater.core.offsets import CONSUMER
from headwater.storage.api import open_engine
from headwater.storage.local.recovery import CLEAN_SHUTDOWN


def new_broker(path) -> Broker:
    return Broker(open_engine(str(path)))


def batch(*payloads: bytes) -> bytearray:
    return bytearray(build_batch([Message(p) for p in payloads]))


def payloads(p) -> list[bytes]:
    from headwater.codec.batch import iter_frames

    stored, _ = p.read(0, 1 << 20)
    return [bytes(f.payload) for b in stored for f in iter_frames(b)]


def partition_dir(path, s: int, t: int, p: int) -> str:
    return os.path.join(str(path), "streams", str(s), "topics", str(t), "partitions", str(p))


def log_file(path, s: int, t: int, p: int) -> str:
    return sorted(glob.glob(os.path.join(partition_dir(path, s, t, p), "*.log")))[0]


@pytest.fixture
def filled(tmp_path):
    """A data dir with stream "s" (0), topic "t" (0) of two partitions, 4 batches each."""
    b = new_broker(tmp_path)
    s = b.create_stream("s")
    t = b.create_topic(s.id, "t", 2, {})
    for pid in (0, 1):
        for i in range(4):
            b.append(t.partitions[pid], batch(b"p%d-%d" % (pid, i)))
    b.close()
    return tmp_path


# --------------------------------------------------------------------------- boot recovery


def test_a_torn_tail_cut_at_boot_is_logged_with_its_partition(filled, caplog):
    path = log_file(filled, 0, 0, 1)
    os.unlink(os.path.join(os.path.dirname(path), CLEAN_SHUTDOWN))  # a crash leaves no marker
    os.truncate(path, os.path.getsize(path) - 10)
    with caplog.at_level(logging.WARNING, logger="headwater.broker"):
        b = new_broker(filled)
    try:
        [rec] = [r for r in caplog.records if "recovery" in r.getMessage()]
        assert rec.levelno == logging.WARNING and "torn tail" in rec.getMessage()
        assert rec.kv["partition"] == 1 and rec.kv["truncated_bytes"] > 0
        assert payloads(b.topic(0, 0).partitions[1]) == [b"p1-0", b"p1-1", b"p1-2"]
    finally:
        b.close()


def test_a_clean_boot_logs_nothing(filled, caplog):
    with caplog.at_level(logging.WARNING, logger="headwater.broker"):
        new_broker(filled).close()
    assert caplog.records == []


def test_a_partition_storage_refuses_is_fenced_and_the_rest_served(filled, caplog):
    path = log_file(filled, 0, 0, 0)
    with open(path[: -len(".log")] + ".index", "ab") as f:
        f.write((10**6).to_bytes(8, "little") + bytes(8) + (10**9).to_bytes(8, "little"))
    with caplog.at_level(logging.ERROR, logger="headwater.broker"):
        b = new_broker(filled)
    try:
        [rec] = caplog.records
        assert "fenced" in rec.getMessage() and "past the end" in rec.kv["error"]
        t = b.topic(0, 0)
        fenced, healthy = t.partitions[0], t.partitions[1]
        assert fenced.fenced and "past the end" in fenced.fenced
        assert healthy.fenced is None and payloads(healthy) == [b"p1-%d" % i for i in range(4)]
        for call in (
            lambda: fenced.read(0, 10),
            lambda: fenced.read(0, 0),
            lambda: b.append(fenced, batch(b"x")),
            lambda: fenced.offset_for_timestamp(0),
            lambda: b.delete_segments(0, 0, 0, 1),
        ):
            with pytest.raises(errors.CorruptData, match="past the end"):
                call()
        # still listed, with empty stats; retention and sync pass over it
        assert sorted(t.partitions) == [0, 1] and fenced.messages_count == 0
        assert b.stats().partitions == 2
        b.apply_retention()
        b.sync()
    finally:
        b.close()
    assert os.path.getsize(path) > 0  # the files are left for an operator


def test_purge_replaces_a_fenced_partition_with_an_empty_one(filled):
    path = log_file(filled, 0, 0, 0)
    with open(path[: -len(".log")] + ".index", "ab") as f:
        f.write((10**6).to_bytes(8, "little") + bytes(8) + (10**9).to_bytes(8, "little"))
    b = new_broker(filled)
    try:
        b.purge_topic(0, 0)
        p = b.topic(0, 0).partitions[0]
        assert p.fenced is None and p.high_watermark == 0
        assert b.append(p, batch(b"again"))[0] == 0
        assert payloads(p) == [b"again"]
    finally:
        b.close()


def test_mid_chain_damage_fences_the_partition_instead_of_cutting(tmp_path):
    b = new_broker(tmp_path)
    t = b.create_topic(b.create_stream("s").id, "t", 1, {})
    for i in range(6):
        b.append(t.partitions[0], batch(b"m%d" % i))
    b.close()
    path = log_file(tmp_path, 0, 0, 0)
    os.unlink(path[: -len(".log")] + ".index")  # recovery walks the whole log
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size // 2 + 100)
        f.write(b"\xee\xee")
    b = new_broker(tmp_path)
    try:
        p = b.topic(0, 0).partitions[0]
        assert "not a torn tail" in p.fenced
        with pytest.raises(errors.CorruptData):
            b.append(p, batch(b"reuses an offset?"))
    finally:
        b.close()
    assert os.path.getsize(path) == size


# --------------------------------------------------------------------------- crash leftovers


def test_files_of_a_topic_the_catalog_dropped_are_swept_at_boot(filled, caplog):
    b = new_broker(filled)
    b.commit(b.topic(0, 0).partitions[0], CONSUMER, "c", 3)
    b._meta.put("topic/0/0", None)  # a crash right after DeleteTopic's catalog write
    b.close()
    with caplog.at_level(logging.WARNING, logger="headwater.broker"):
        b = new_broker(filled)
    try:
        assert not os.path.exists(os.path.join(str(filled), "streams", "0", "topics", "0"))
        # stream 0 has no partition left in the catalog, so its whole directory goes
        assert [r.kv["path"] for r in caplog.records if "path" in r.kv] == [os.path.join("streams", "0")]
        t = b.create_topic(0, "fresh", 1, {})  # the same id again: starts empty, no offsets
        assert t.id == 0 and payloads(t.partitions[0]) == []
        assert b.committed(t.partitions[0], CONSUMER, "c") is None
    finally:
        b.close()


def test_foreign_entries_under_streams_are_left_alone(tmp_path):
    new_broker(tmp_path).close()
    odd = [os.path.join(str(tmp_path), "streams", n) for n in ("notes", "007")]
    for d in odd:
        os.makedirs(d)
    with open(os.path.join(str(tmp_path), "streams", "3"), "w") as f:
        f.write("a file, not a stream directory")
    new_broker(tmp_path).close()
    assert all(os.path.isdir(d) for d in odd)
    assert os.path.isfile(os.path.join(str(tmp_path), "streams", "3"))


def test_offsets_past_the_end_of_their_partition_are_dropped_at_boot(filled, caplog):
    b = new_broker(filled)
    t = b.topic(0, 0)
    b.commit(t.partitions[0], CONSUMER, "ok", 4)  # == high watermark: kept
    b.commit(t.partitions[1], CONSUMER, "stale", 99)  # e.g. a purge a crash interrupted
    b.close()
    with caplog.at_level(logging.WARNING, logger="headwater.broker"):
        b = new_broker(filled)
    try:
        t = b.topic(0, 0)
        assert b.committed(t.partitions[0], CONSUMER, "ok") == 4
        assert b.committed(t.partitions[1], CONSUMER, "stale") is None
        [rec] = caplog.records
        assert rec.kv["consumer"] == "stale" and rec.kv["offset"] == 99
    finally:
        b.close()
    b = new_broker(filled)  # the drop was durable
    try:
        assert b.committed(b.topic(0, 0).partitions[1], CONSUMER, "stale") is None
    finally:
        b.close()


def test_deletes_remove_offsets_before_data(filled):
    b = new_broker(filled)
    t = b.topic(0, 0)
    b.commit(t.partitions[1], CONSUMER, "c", 2)
    b.delete_partitions(0, 0, 1)
    assert not os.path.exists(partition_dir(filled, 0, 0, 1))
    b.create_partitions(0, 0, 1)
    assert b.committed(t.partitions[1], CONSUMER, "c") is None and payloads(t.partitions[1]) == []
    b.commit(t.partitions[0], CONSUMER, "c", 2)
    b.purge_topic(0, 0)
    assert b.committed(t.partitions[0], CONSUMER, "c") is None
    b.delete_stream(0)
    assert not os.path.exists(os.path.join(str(filled), "streams", "0"))
    b.close()
    b = new_broker(filled)
    assert b.catalog.streams == {} and list(b.offsets.items()) == []
    b.close()


# --------------------------------------------------------------------------- creates: all or nothing


@pytest.mark.parametrize("what", ["topic", "partitions"])
def test_a_create_failing_on_the_filesystem_is_rolled_back(tmp_path, what):
    b = new_broker(tmp_path)
    try:
        s = b.create_stream("s")
        t0 = b.create_topic(s.id, "ok", 1, {})
        topic_id, blocked = (1, 3) if what == "topic" else (0, 2)
        parts = os.path.dirname(partition_dir(tmp_path, 0, topic_id, 0))
        os.makedirs(parts, exist_ok=True)
        obstruction = os.path.join(parts, str(blocked))
        with open(obstruction, "w") as f:
            f.write("in the way")
        with pytest.raises(errors.StorageFailure, match=f"cannot create partition {blocked}"):
            if what == "topic":
                b.create_topic(s.id, "new", 5, {})
            else:
                b.create_partitions(s.id, "ok", 3)
        if what == "topic":
            with pytest.raises(errors.TopicNotFound):
                b.topic(s.id, "new")
            assert sorted(os.listdir(parts)) == [str(blocked)]  # nothing left but the obstruction
        else:
            assert sorted(t0.partitions) == [0]
            assert sorted(os.listdir(parts)) == ["0", str(blocked)]
        assert b._meta.load()[f"topic/0/{t0.id}"]["partitions"].keys() == {"0"}
        os.unlink(obstruction)
        if what == "topic":
            t = b.create_topic(s.id, "new", 5, {})
        else:
            b.create_partitions(s.id, "ok", 3)
            t = t0
        assert b.append(t.partitions[1], batch(b"kept"))[0] == 0
    finally:
        b.close()
    b = new_broker(tmp_path)
    try:
        t = b.topic(0, "new" if what == "topic" else "ok")
        assert len(t.partitions) == (5 if what == "topic" else 4)
        assert payloads(t.partitions[1]) == [b"kept"]
    finally:
        b.close()


def test_a_new_partition_adopts_no_leftover_directory(tmp_path):
    b = new_broker(tmp_path)
    try:
        s = b.create_stream("s")
        t = b.create_topic(s.id, "t", 1, {})
        b.append(t.partitions[0], batch(b"old"))
        stray = partition_dir(tmp_path, 0, 0, 1)
        os.makedirs(stray)
        os.link(log_file(tmp_path, 0, 0, 0), os.path.join(stray, "00000000000000000000.log"))
        b.create_partitions(s.id, "t", 1)
        assert payloads(t.partitions[1]) == []
    finally:
        b.close()


def test_message_data_without_any_catalog_refuses_to_start_rather_than_be_swept(filled):
    import shutil

    from headwater.storage.api import StorageError

    shutil.rmtree(os.path.join(str(filled), "metadata"))  # the metadata store is lost
    with pytest.raises(StorageError, match="catalog is empty"):
        new_broker(filled)
    assert os.path.getsize(log_file(filled, 0, 0, 0)) > 0


def test_a_create_whose_catalog_write_fails_is_rolled_back(tmp_path):
    b = new_broker(tmp_path)
    s = b.create_stream("s")
    t = b.create_topic(s.id, "t", 1, {})
    b._meta.close()  # the catalog write will fail
    with pytest.raises(errors.StorageFailure, match="saving the topic failed"):
        b.create_topic(s.id, "new", 3, {})
    with pytest.raises(errors.StorageFailure, match="saving the topic failed"):
        b.create_partitions(s.id, "t", 2)
    assert [x.name for x in b.stream(s.id).topics.values()] == ["t"] and sorted(t.partitions) == [0]
    assert sorted(os.listdir(os.path.join(str(tmp_path), "streams", "0", "topics"))) == ["0", "1"]
    assert os.listdir(os.path.join(str(tmp_path), "streams", "0", "topics", "1", "partitions")) == []
    assert sorted(os.listdir(os.path.dirname(partition_dir(tmp_path, 0, 0, 0)))) == ["0"]
    b.close()


def test_a_partition_whose_directory_vanished_is_fenced_not_recreated_empty(filled, caplog):
    import shutil

    shutil.rmtree(partition_dir(filled, 0, 0, 0))
    with caplog.at_level(logging.ERROR, logger="headwater.broker"):
        b = new_broker(filled)
    try:
        t = b.topic(0, 0)
        lost, healthy = t.partitions[0], t.partitions[1]
        assert lost.fenced and "missing" in lost.fenced
        with pytest.raises(errors.CorruptData, match="missing"):
            lost.read(0, 10)
        with pytest.raises(errors.CorruptData):
            b.append(lost, batch(b"would land at offset 0 again"))
        assert payloads(healthy) == [b"p1-%d" % i for i in range(4)]
        assert not os.path.exists(partition_dir(filled, 0, 0, 0))  # nothing made up in its place
        assert any("fenced" in r.getMessage() for r in caplog.records)
    finally:
        b.close()


def test_commit_many_is_one_atomic_write_and_survives_a_reopen(filled):
    b = new_broker(filled)
    try:
        t = b.topic(0, 0)
        p0, p1 = t.partitions[0], t.partitions[1]
        b.commit(p1, "group", "g", 1)
        b.commit_many("group", "g", [(p0, 3, "meta-0"), (p1, None, "")])
        assert b.committed(p0, "group", "g") == 3 and b.committed(p1, "group", "g") is None
    finally:
        b.close()
    b = new_broker(filled)
    try:
        t = b.topic(0, 0)
        assert b.offsets.get(0, 0, 0, "group", "g").metadata == "meta-0"
        assert b.committed(t.partitions[1], "group", "g") is None
    finally:
        b.close()
