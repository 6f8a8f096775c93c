"""LocalMetadataStore: durable puts, torn journal tails, corruption, compaction."""

from __future__ import annotations

import os
import struct

import pytest

from headwater.storage.api import StorageError
from headwater.storage.local.metadata import (
    HEADER_SIZE,
    CorruptMetadata,
    LocalMetadataStore,
)


@pytest.fixture
def store_dir(tmp_path):
    return str(tmp_path / "metadata")


def test_puts_survive_reopen(store_dir):
    store = LocalMetadataStore(store_dir, "catalog")
    assert store.load() == {}
    store.put("stream/0", {"name": "orders", "topics": [1, 2]})
    store.put("stream/1", {"name": "gone"})
    store.put("stream/1", None)  # delete
    store.put("user/0", "root")
    store.put_many({"topic/0/0": {"partitions": 3}, "user/0": None, "x": 1.5})
    store.close()
    again = LocalMetadataStore(store_dir, "catalog")
    assert again.load() == {
        "stream/0": {"name": "orders", "topics": [1, 2]},
        "topic/0/0": {"partitions": 3},
        "x": 1.5,
    }
    assert again.get("x") == 1.5
    assert again.get("nope", 7) == 7
    again.close()


def test_load_returns_a_copy(store_dir):
    store = LocalMetadataStore(store_dir, "c")
    store.put("k", {"a": [1]})
    snapshot = store.load()
    snapshot["k"]["a"].append(2)
    assert store.load() == {"k": {"a": [1]}}
    store.close()


def test_values_json_cannot_encode_are_refused_and_nothing_is_written(store_dir):
    store = LocalMetadataStore(store_dir, "c")
    store.put("a", 1)
    size = os.path.getsize(store.journal_path)
    with pytest.raises(TypeError):
        store.put("b", object())
    with pytest.raises(ValueError):
        store.put("b", float("nan"))
    with pytest.raises(TypeError):
        store.put_many({1: "int key"})
    assert os.path.getsize(store.journal_path) == size
    store.close()
    assert LocalMetadataStore(store_dir, "c").load() == {"a": 1}


def test_torn_last_journal_record_is_ignored_at_every_cut(store_dir):
    store = LocalMetadataStore(store_dir, "c")
    store.put("a", 1)
    store.put_many({"b": [1, 2, 3], "c": "three"})
    good_end = os.path.getsize(store.journal_path)
    store.put_many({"d": "the last record, torn", "a": None})
    full_end = os.path.getsize(store.journal_path)
    store.close()
    with open(store.journal_path, "rb") as f:
        data = f.read()
    for cut in range(good_end, full_end):
        with open(store.journal_path, "wb") as f:
            f.write(data[:cut])
        reopened = LocalMetadataStore(store_dir, "c")
        assert reopened.load() == {"a": 1, "b": [1, 2, 3], "c": "three"}, cut
        assert reopened.torn_bytes == cut - good_end
        reopened.put("e", True)  # appended after the cut, not after the torn bytes
        reopened.close()
        assert LocalMetadataStore(store_dir, "c").load()["e"] is True


def test_a_torn_record_stays_until_the_first_put_so_a_second_crash_sees_it_again(store_dir):
    """The torn bytes are not cut at open: the broker sets aside what the catalog no longer
    names first, and a crash before the next put must leave the same verdict (torn) for the
    next start, not a whole journal whose leftovers would then be deleted."""
    store = LocalMetadataStore(store_dir, "c")
    store.put("a", 1)
    good_end = os.path.getsize(store.journal_path)
    store.put("b", "the last record, torn")
    torn_end = os.path.getsize(store.journal_path) - 3
    store.close()
    os.truncate(store.journal_path, torn_end)
    for _ in range(2):  # open, "crash" (no put), open again: same state, same torn bytes
        reopened = LocalMetadataStore(store_dir, "c")
        assert reopened.load() == {"a": 1}
        assert reopened.torn_bytes == torn_end - good_end
        assert os.path.getsize(store.journal_path) == torn_end
        reopened.close()
    reopened = LocalMetadataStore(store_dir, "c")
    reopened.put("c", 3)  # cuts the torn bytes, then appends
    reopened.close()
    again = LocalMetadataStore(store_dir, "c")
    assert again.torn_bytes == 0
    assert again.load() == {"a": 1, "c": 3}


def test_last_record_with_bad_crc_counts_as_torn(store_dir):
    store = LocalMetadataStore(store_dir, "c")
    store.put("a", 1)
    store.put("b", 2)
    store.close()
    with open(store.journal_path, "r+b") as f:
        f.seek(-2, os.SEEK_END)
        f.write(b"??")
    assert LocalMetadataStore(store_dir, "c").load() == {"a": 1}


def test_corrupt_middle_record_raises(store_dir):
    store = LocalMetadataStore(store_dir, "c")
    store.put("a", "first")
    store.put("b", "second")
    store.close()
    with open(store.journal_path, "r+b") as f:
        f.seek(HEADER_SIZE + 8 + 3)  # inside the first record's payload
        f.write(b"#")
    with pytest.raises(CorruptMetadata) as err:
        LocalMetadataStore(store_dir, "c")
    assert "crc32" in str(err.value)


def test_compaction_folds_the_journal_into_a_snapshot(store_dir):
    store = LocalMetadataStore(store_dir, "offsets", compact_bytes=512)
    expected = {}
    for i in range(200):
        key = f"group/{i % 7}"
        store.put(key, {"offset": i})
        expected[key] = {"offset": i}
    store.put("group/3", None)
    del expected["group/3"]
    assert os.path.exists(store.snapshot_path)
    assert os.path.getsize(store.journal_path) < 1024
    store.close()
    assert sorted(os.listdir(store_dir)) == ["offsets.journal", "offsets.snapshot"]
    assert LocalMetadataStore(store_dir, "offsets").load() == expected


def test_crash_between_snapshot_and_new_journal_replays_correctly(store_dir):
    store = LocalMetadataStore(store_dir, "c", compact_bytes=1 << 30)
    store.put("a", 1)
    store.put("b", 2)
    store.close()
    with open(store.journal_path, "rb") as f:
        old_journal = f.read()
    store = LocalMetadataStore(store_dir, "c", compact_bytes=1 << 30)
    store.compact()
    store.close()
    # the snapshot was renamed in, the crash came before the new journal: the old
    # journal (older generation) is still there and must not be replayed on top
    with open(store.journal_path, "wb") as f:
        f.write(old_journal)
    with open(store.journal_path + ".tmp", "wb") as f:
        f.write(b"half a new journal")
    reopened = LocalMetadataStore(store_dir, "c")
    assert reopened.load() == {"a": 1, "b": 2}
    reopened.put("a", None)
    reopened.close()
    assert LocalMetadataStore(store_dir, "c").load() == {"b": 2}
    assert not os.path.exists(store.journal_path + ".tmp")


def test_damaged_snapshot_raises(store_dir):
    store = LocalMetadataStore(store_dir, "c")
    store.put("a", 1)
    store.compact()
    store.close()
    with open(store.snapshot_path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        f.write(b"!")
    with pytest.raises(CorruptMetadata):
        LocalMetadataStore(store_dir, "c")


def test_closed_store_refuses_puts(store_dir):
    store = LocalMetadataStore(store_dir, "c")
    store.close()
    with pytest.raises(StorageError):
        store.put("a", 1)


def test_a_compaction_that_crashed_before_its_new_journal_loads_clean(store_dir):
    """Snapshot of generation N+1 beside the journal of generation N it was folded from (the
    crash between the two renames): the journal's records are all in the snapshot, no damage."""
    store = LocalMetadataStore(store_dir, "c")
    store.put("a", 1)
    store.put_many({"b": 2, "a": None})
    with open(store.journal_path, "rb") as f:
        old_journal = f.read()
    store.compact()
    store.close()
    with open(store.journal_path, "wb") as f:
        f.write(old_journal)
    reopened = LocalMetadataStore(store_dir, "c")
    assert reopened.load() == {"b": 2}
    assert reopened.damage is None and reopened.torn_bytes == 0
    reopened.close()


@pytest.mark.parametrize("how", ["missing", "empty", "headless", "older_generation_with_more"])
def test_a_damaged_journal_beside_a_snapshot_is_reported_and_left_until_the_first_put(store_dir, how):
    store = LocalMetadataStore(store_dir, "c")
    store.put("a", 1)
    store.compact()
    store.put("b", 2)  # only in the journal
    store.close()
    path = store.journal_path
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if how == "missing":
        os.unlink(path)
    elif how == "empty":
        open(path, "wb").close()
    elif how == "headless":
        with open(path, "wb") as f:
            f.write(data[:8])
    else:
        struct.pack_into("<Q", data, 8, struct.unpack_from("<Q", data, 8)[0] - 1)
        with open(path, "wb") as f:
            f.write(data)
    before = open(path, "rb").read() if os.path.exists(path) else None
    for _ in range(2):  # open, "crash" (no put), open again: the same verdict
        reopened = LocalMetadataStore(store_dir, "c")
        assert reopened.load() == {"a": 1}  # what the snapshot holds
        assert reopened.damage is not None and path in reopened.damage
        reopened.close()
        assert (open(path, "rb").read() if os.path.exists(path) else None) == before
    reopened = LocalMetadataStore(store_dir, "c")
    reopened.put("c", 3)  # a new journal of the snapshot's generation
    reopened.close()
    again = LocalMetadataStore(store_dir, "c")
    assert again.damage is None and again.load() == {"a": 1, "c": 3}
    again.close()


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 1 MiB tmpfs of the test's own (root only), unmounted afterwards."""
    import shutil
    import subprocess

    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"mount is not permitted here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(directory, name="hog"):
    """Write ``directory/name`` until the filesystem refuses (ENOSPC)."""
    fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


def test_a_put_refused_for_space_calls_on_full_and_is_tried_once_more(small_tmpfs):
    from headwater.storage.api import StorageWriteError
    from headwater.storage.local.metadata import LocalMetadataStore

    calls = []

    def give_back():  # as the engine gives back its preallocated blocks
        calls.append(1)
        os.unlink(small_tmpfs / "hog")

    store = LocalMetadataStore(str(small_tmpfs / "metadata"), "catalog", on_full=give_back)
    store.put("a", 1)
    _fill(small_tmpfs)
    store.put("b", "x" * 8192)  # refused, room given back, written
    assert calls == [1]
    store.close()
    assert LocalMetadataStore(str(small_tmpfs / "metadata"), "catalog").load() == {"a": 1, "b": "x" * 8192}

    _fill(small_tmpfs)
    plain = LocalMetadataStore(str(small_tmpfs / "metadata"), "catalog")  # no on_full: the refusal is the answer
    with pytest.raises(StorageWriteError) as refused:
        plain.put("c", "y" * 8192)
    assert refused.value.no_space and plain.get("c") is None
    plain.close()
