"""LocalEngine: directory layout, one log per partition, deletion, metadata stores."""

from __future__ import annotations

import os

import pytest

from headwater.storage.api import SegmentPolicy, StorageError, open_engine
from headwater.storage.local.engine import LocalEngine

from storage_batches import stamped_batch


def test_open_engine_picks_the_local_engine_for_paths_and_file_urls(tmp_path):
    for url in (str(tmp_path / "a"), f"file://{tmp_path / 'b'}"):
        engine = open_engine(url)
        assert isinstance(engine, LocalEngine)
        assert os.path.isdir(os.path.join(engine.path, "streams"))
        assert os.path.isdir(os.path.join(engine.path, "metadata"))
        engine.close()


def test_partition_layout_and_single_writer(tmp_path):
    engine = LocalEngine(str(tmp_path))
    log = engine.open_partition(1, 2, 3, SegmentPolicy())
    expected = tmp_path / "streams" / "1" / "topics" / "2" / "partitions" / "3"
    assert sorted(os.listdir(expected)) == ["00000000000000000000.index", "00000000000000000000.log"]
    same = engine.open_partition(1, 2, 3, SegmentPolicy(message_expiry_us=5))
    assert same is log
    assert log.policy.message_expiry_us == 5  # the new policy applies
    with pytest.raises(ValueError):
        engine.open_partition(-1, 0, 0, SegmentPolicy())
    engine.close()


def test_data_survives_engine_restart(tmp_path):
    engine = LocalEngine(str(tmp_path))
    log = engine.open_partition(0, 0, 0, SegmentPolicy())
    batch = stamped_batch(0, 10)
    log.append(batch)
    engine.metadata("catalog").put("stream/0", {"name": "s"})
    engine.close()
    with pytest.raises(StorageError):
        engine.open_partition(0, 0, 0, SegmentPolicy())
    engine = LocalEngine(str(tmp_path))
    log = engine.open_partition(0, 0, 0, SegmentPolicy())
    assert [bytes(v) for v in log.read(0, 10, 1 << 20)] == [batch]
    assert engine.metadata("catalog").load() == {"stream/0": {"name": "s"}}
    engine.close()


def test_delete_partition_topic_and_stream(tmp_path):
    engine = LocalEngine(str(tmp_path))
    logs = {key: engine.open_partition(*key, SegmentPolicy()) for key in [(0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0)]}
    for log in logs.values():
        log.append(stamped_batch(0, 1))
    streams = tmp_path / "streams"

    engine.delete_partition(0, 0, 1)
    assert not (streams / "0" / "topics" / "0" / "partitions" / "1").exists()
    with pytest.raises(StorageError):
        logs[(0, 0, 1)].read(0, 1, 100)  # closed
    engine.delete_partition(0, 0, 1)  # absent: fine

    engine.delete_topic(0, 0)
    assert not (streams / "0" / "topics" / "0").exists()
    assert (streams / "0" / "topics" / "1").exists()

    engine.delete_stream(0)
    assert not (streams / "0").exists()
    assert (streams / "1").exists()
    assert os.listdir(tmp_path / "trash") == []

    fresh = engine.open_partition(0, 0, 0, SegmentPolicy())  # same ids: starts empty
    assert (fresh.log_start_offset, fresh.next_offset) == (0, 0)
    engine.close()


def test_trash_left_by_a_crash_is_emptied_at_start(tmp_path):
    engine = LocalEngine(str(tmp_path))
    engine.close()
    leftover = tmp_path / "trash" / "abc" / "partitions" / "0"
    leftover.mkdir(parents=True)
    (leftover / "00000000000000000000.log").write_bytes(b"x")
    LocalEngine(str(tmp_path)).close()
    assert os.listdir(tmp_path / "trash") == []


def test_metadata_stores_by_name(tmp_path):
    engine = LocalEngine(str(tmp_path))
    catalog = engine.metadata("catalog")
    assert engine.metadata("catalog") is catalog
    offsets = engine.metadata("offsets")
    catalog.put("a", 1)
    offsets.put("a", 2)
    assert sorted(os.listdir(tmp_path / "metadata")) == ["catalog.journal", "offsets.journal"]
    for bad in ("", "../x", "a/b", ".", "..", "x" * 129):
        with pytest.raises(ValueError):
            engine.metadata(bad)
    engine.close()
    engine = LocalEngine(str(tmp_path))
    assert engine.metadata("catalog").load() == {"a": 1}
    assert engine.metadata("offsets").load() == {"a": 2}
    engine.close()


def test_retain_sweeps_every_tree_no_kept_partition_is_on(tmp_path):
    engine = LocalEngine(str(tmp_path))
    logs = {}
    for key in [(0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0), (2, 5, 7)]:
        logs[key] = engine.open_partition(*key, SegmentPolicy())
        logs[key].append(stamped_batch(0, 1))
    os.makedirs(tmp_path / "streams" / "3" / "topics")  # an empty leftover tree
    (tmp_path / "streams" / "0" / "topics" / "0" / "partitions" / "9").write_text("not a directory")
    (tmp_path / "streams" / "notes").mkdir()  # not an id: not ours
    removed = engine.retain([(0, 0, 0), (2, 5, 7)])
    assert sorted(removed) == sorted(
        [os.path.join("streams", "0", "topics", "0", "partitions", "1"), os.path.join("streams", "0", "topics", "1"),
         os.path.join("streams", "1")]
    )  # the empty stream 3 went too, without a word
    left = sorted(os.path.relpath(d, tmp_path / "streams") for d, _, _ in os.walk(tmp_path / "streams"))
    assert left == sorted([".", "0", "0/topics", "0/topics/0", "0/topics/0/partitions", "0/topics/0/partitions/0",
                           "2", "2/topics", "2/topics/5", "2/topics/5/partitions", "2/topics/5/partitions/7", "notes"])
    assert (tmp_path / "streams" / "0" / "topics" / "0" / "partitions" / "9").is_file()
    assert os.listdir(tmp_path / "trash") == []
    with pytest.raises(StorageError):
        logs[(0, 0, 1)].read(0, 1, 100)  # a swept partition's open log is closed
    fresh = engine.open_partition(0, 0, 1, SegmentPolicy())  # same ids: starts empty
    assert fresh.next_offset == 0
    engine.close()


def test_retain_sets_aside_twice_within_one_second_without_clobbering(tmp_path, monkeypatch):
    """Two boots that each find a torn catalog and the same unnamed partition, within the same UTC
    second (a crash loop): the second's tree goes beside the first's in lost+found/, the boot does
    not fail on the rename (it used to raise 'Directory not empty')."""
    import time as time_mod

    frozen = time_mod.gmtime(1_800_000_000)
    monkeypatch.setattr(time_mod, "gmtime", lambda *_: frozen)
    kept = []
    for boot in range(3):
        engine = LocalEngine(str(tmp_path))
        log = engine.open_partition(7, 1, 1, SegmentPolicy())
        log.append(stamped_batch(0, 1 + boot))
        moved = engine.retain([(0, 0, 0)], set_aside=True)
        assert len(moved) == 1 and moved[0].startswith("lost+found" + os.sep), moved
        kept.append(moved[0])
        engine.close()
    assert len(set(kept)) == 3
    for path in kept:
        files = [f for _, _, fs in os.walk(tmp_path / path) for f in fs]
        assert files, f"{path} is empty: a set-aside tree was overwritten"
