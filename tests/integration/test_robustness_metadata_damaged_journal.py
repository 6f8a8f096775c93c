"""A catalog journal damaged beside a snapshot (shorter than its 16-byte header, emptied, or
its header generation lowered) loses the records after the snapshot: the boot must set the
directories those records named aside under lost+found/, as for a torn last record, and never
delete them (found by QA in session 5: they were deleted as "left by an interrupted delete").
Also: a second start before any catalog change sets aside nothing more and deletes nothing, and
``headwater verify`` reports the damage."""

from __future__ import annotations

import asyncio
import struct

import apache_iggy as ig
import pytest

from headwater.storage.local.metadata import LocalMetadataStore

pytestmark = pytest.mark.slow  # a file of long tests: handed out first (tests/conftest.py)


async def _make(server, stream: str) -> None:
    c = ig.IggyClient(server.iggy_address)
    await c.connect()
    await c.login_user("iggy", "iggy")
    await c.create_stream(stream)
    await c.create_topic(stream, "t", 1, options={"enforce_fsync": "true"})
    await c.send_messages(stream, "t", 0, [ig.SendMessage(b"acked-%d" % i) for i in range(100)])


@pytest.mark.parametrize("damage", ["truncate_to_8", "zero_length", "generation_lowered"])
def test_a_damaged_journal_never_deletes_acknowledged_data(fresh_server, damage):
    asyncio.run(_make(fresh_server, "a"))
    fresh_server.stop()
    md = fresh_server.data_dir / "metadata"
    store = LocalMetadataStore(str(md), "catalog")  # what a server compaction leaves: a snapshot
    store.compact()
    store.close()
    fresh_server.start()
    asyncio.run(_make(fresh_server, "b"))  # named only by the journal now
    fresh_server.stop()
    logs_before = sorted(p.relative_to(fresh_server.data_dir) for p in fresh_server.data_dir.rglob("*.log"))
    assert len(logs_before) == 2
    journal = md / "catalog.journal"
    data = bytearray(journal.read_bytes())
    if damage == "truncate_to_8":
        journal.write_bytes(bytes(data[:8]))
    elif damage == "zero_length":
        journal.write_bytes(b"")
    else:
        generation = struct.unpack_from("<Q", data, 8)[0]
        struct.pack_into("<Q", data, 8, generation - 1)
        journal.write_bytes(bytes(data))
    from headwater.storage.local.check import check_data_dir

    findings = check_data_dir(str(fresh_server.data_dir)).findings
    assert any(f.damage and f.path.endswith("catalog.journal") for f in findings), findings
    for _ in range(2):  # the second start (no catalog change in between) must delete nothing either
        fresh_server.start()
        fresh_server.stop()
        surviving = sorted(p.relative_to(fresh_server.data_dir) for p in fresh_server.data_dir.rglob("*.log"))
        # both partitions' data still under the data directory: "a" in place, "b" in lost+found
        assert len(surviving) == 2, f"message data deleted: before {logs_before}, after {surviving}"
        assert sum(1 for p in surviving if p.parts[0] == "lost+found") == 1, surviving
    assert "set aside files the catalog does not name" in fresh_server.log()
