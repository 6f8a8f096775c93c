"""On-disk damage and crash leftovers, on a real server: fail closed, never serve or invent data.

The server is stopped, files under ``<data>/streams/...`` (or the metadata stores) are
damaged the way a disk or a crash would leave them, the server is restarted and polled.
Standards (README; Iggy ``server/storage-engine.mdx`` "Boot-time segment recovery" and
"Read integrity"): a batch damaged at rest fails the poll closed; an incomplete tail may
be cut and a missing index rebuilt; intact records after damage are not cut away;
unrecoverable partition data is fenced, not replaced by an empty healthy partition;
other partitions keep being served. Nothing acknowledged is lost or silently altered.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import struct

import apache_iggy as ig
import pytest

from headwater.codec import batch as batch_codec
from headwater.codec.iggy.commands import messages as wm
from test_robustness_wire import Raw, healthy, poll_body, polled, run, sdk_client

pytestmark = pytest.mark.slow  # a file of long tests: handed out first (tests/conftest.py)

PAYLOAD = b"x" * 80


def payload(p: int, b: int, m: int) -> bytes:
    return b"p%d-b%d-m%d-" % (p, b, m) + PAYLOAD


async def _fill(server, partitions: int, batches: int) -> dict:
    c = await sdk_client(server)
    await c.create_stream("disk")  # stream 0, topic 0 on a fresh server
    await c.create_topic("disk", "t", partitions)
    acked = {}
    for p in range(partitions):
        for b in range(batches):
            r = await c.send_messages("disk", "t", p, [ig.SendMessage(payload(p, b, m)) for m in range(3)])
            base = r.confirmations[0].base_offset
            for m in range(3):
                acked[(p, base + m)] = payload(p, b, m)
    return acked


def fill(server, partitions: int = 2, batches: int = 50) -> dict:
    return run(_fill(server, partitions, batches))


def partition_dir(server, p: int) -> str:
    return os.path.join(server.data_dir, "streams", "0", "topics", "0", "partitions", str(p))


def first_log(server, p: int) -> str:
    return sorted(glob.glob(os.path.join(partition_dir(server, p), "*.log")))[0]


def batch_positions(log_path: str) -> list[tuple[int, int]]:
    """(position, batch_length) of each stored batch."""
    data = open(log_path, "rb").read()
    out, pos = [], 0
    while pos + 40 <= len(data):
        (length,) = struct.unpack_from("<Q", data, pos + 32)
        if length == 0:
            break
        out.append((pos, length))
        pos += length
    return out


def index_positions(log_path: str) -> list[int]:
    raw = open(log_path[: -len(".log")] + ".index", "rb").read()
    return [struct.unpack_from("<QQQ", raw, i)[2] for i in range(0, len(raw) - len(raw) % 24, 24)]


def flip(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        (byte,) = f.read(1)
        f.seek(position)
        f.write(bytes([byte ^ 0xFF]))


def stored(server, p: int) -> tuple[int, dict]:
    with Raw(server.iggy_address) as r:
        r.login()
        status, msgs = polled(r, "disk", "t", p)
    return status, dict(msgs)


def only(acked: dict, p: int) -> dict:
    return {o: v for (pp, o), v in acked.items() if pp == p}


# --------------------------------------------------------------------------- what holds


def test_a_flipped_byte_in_an_old_batch_fails_the_poll_closed(fresh_server):
    acked = fill(fresh_server)
    assert fresh_server.stop() == 0
    log = first_log(fresh_server, 0)
    pos, _ = batch_positions(log)[5]
    flip(log, pos + 256 + 48 + 3)  # a payload byte of the batch holding offsets 15..17
    fresh_server.start()

    # a poll of everything serves the batches before the damage (offsets 0..14), unaltered, and
    # stops there; a poll that begins in the damaged batch is refused, not served altered
    # (4027 InvalidMessageChecksum; test_robustness_disk_prefix.py has the Kafka side)
    status, got = stored(fresh_server, 0)
    assert status == 0 and got == {o: v for o, v in only(acked, 0).items() if o < 15}
    with Raw(fresh_server.iggy_address) as r:
        r.login()
        for start in (15, 16, 17):
            assert r.call(100, poll_body("disk", "t", 0, start, 3))[:2] == ("reply", 4027), start
    with Raw(fresh_server.iggy_address) as r:  # reads that do not touch the damage are exact
        r.login()
        for start in (0, 18, 100):
            kind, st, body = r.call(100, poll_body("disk", "t", 0, start, 3))
            if st == 0:
                _, batches = wm.decode_poll_reply(body)
                got = dict(_frames(batches))
                assert got and all(acked[(0, o)] == v for o, v in got.items())
    assert stored(fresh_server, 1) == (0, only(acked, 1))  # the other partition is untouched
    healthy(fresh_server)


def _frames(batches) -> list[tuple[int, bytes]]:
    out = []
    for b in batch_codec.split_batches(batches):
        h = batch_codec.read_header(b)
        out += [(h.base_offset + f.offset_delta, bytes(f.payload)) for f in batch_codec.iter_frames(b)]
    return out


def test_a_torn_tail_is_cut_and_a_missing_index_rebuilt(fresh_server):
    acked = fill(fresh_server)
    fresh_server.kill()  # a crash: a clean stop would vouch for every byte (no tail is cut then)
    log = first_log(fresh_server, 0)
    last_pos, _ = batch_positions(log)[-1]
    os.truncate(log, last_pos + 100)  # the last batch is cut mid-header
    os.unlink(log[: -len(".log")] + ".index")
    fresh_server.start()

    whole = {o: v for o, v in only(acked, 0).items() if o < 147}
    assert stored(fresh_server, 0) == (0, whole)  # every whole batch, byte-identical, contiguous
    assert index_positions(log)  # rebuilt
    assert stored(fresh_server, 1) == (0, only(acked, 1))

    async def next_offset():
        c = await sdk_client(fresh_server)
        r = await c.send_messages("disk", "t", 0, [ig.SendMessage(b"after")])
        return r.confirmations[0].base_offset
    assert run(next_offset()) == 147
    healthy(fresh_server)


# --------------------------------------------------------------------------- what does not


def test_damage_followed_by_intact_batches_is_refused_not_cut_away(fresh_server):
    acked = fill(fresh_server, partitions=1, batches=50)

    async def more(n):
        c = await sdk_client(fresh_server)
        for b in range(n):
            r = await c.send_messages("disk", "t", 0, [ig.SendMessage(payload(0, 1000 + b, m)) for m in range(3)])
            for m in range(3):
                acked[(0, r.confirmations[0].base_offset + m)] = payload(0, 1000 + b, m)

    log = first_log(fresh_server, 0)
    # the active segment's index entries reach the file in groups, all of them at close:
    # read the index with the server stopped
    assert fresh_server.stop() == 0
    for _ in range(20):  # make sure whole batches follow the newest sparse-index entry
        newest = index_positions(log)[-1]
        after = [p for p, _ in batch_positions(log) if p > newest]
        if len(after) >= 2:
            break
        fresh_server.start()
        run(more(1))
        assert fresh_server.stop() == 0
    assert len(after) >= 2
    flip(log, newest + 256 + 48 + 3)  # one byte of the batch the newest index entry names
    fresh_server.start()

    status, got = stored(fresh_server, 0)
    if status == 0:  # served: then it must be everything acknowledged, unaltered
        missing = sorted(set(only(acked, 0)) - set(got))
        assert not missing, f"{len(missing)} acknowledged messages silently dropped: offsets {missing[:3]}..{missing[-3:]}"
        assert all(got[o] == v for o, v in only(acked, 0).items())

    async def send_one():
        c = await sdk_client(fresh_server)
        try:
            r = await c.send_messages("disk", "t", 0, [ig.SendMessage(b"new")])
        except RuntimeError:
            return None
        return r.confirmations[0].base_offset
    offset = run(send_one())
    assert offset is None or offset >= len(only(acked, 0)), f"acknowledged offset {offset} handed out again"


def test_a_damaged_length_of_the_last_batch_fences_the_partition_and_cuts_nothing(fresh_server):
    """Bit rot in the batch_length of a whole, acknowledged last batch is not a torn tail."""
    acked = fill(fresh_server)
    assert fresh_server.stop() == 0
    log = first_log(fresh_server, 0)
    last_pos, _ = batch_positions(log)[-1]
    with open(log, "r+b") as f:
        f.seek(last_pos + 32)
        f.write(struct.pack("<Q", 10**9))  # now points far past the end of the file
    before = open(log, "rb").read()
    mark = len(fresh_server.log())
    fresh_server.start()

    status, got = stored(fresh_server, 0)
    assert status != 0 and not got  # refused, not served short of the acknowledged last batch
    assert open(log, "rb").read() == before  # nothing cut
    boot_log = fresh_server.log()[mark:]
    assert log in boot_log and f"byte {last_pos + 32}" in boot_log, boot_log
    assert stored(fresh_server, 1) == (0, only(acked, 1))
    healthy(fresh_server)


def test_recovery_that_cuts_a_torn_tail_says_so_in_the_log(fresh_server):
    fill(fresh_server, partitions=1, batches=10)
    fresh_server.kill()  # a crash, as above
    log = first_log(fresh_server, 0)
    last_pos, _ = batch_positions(log)[-1]
    os.truncate(log, last_pos + 300)
    mark = len(fresh_server.log())
    fresh_server.start()
    assert stored(fresh_server, 0)[0] == 0
    boot_log = fresh_server.log()[mark:]
    assert re.search(r"(?i)truncat|torn|recover|cut ", boot_log), boot_log


def test_an_index_entry_past_the_end_fences_only_its_partition(fresh_server):
    acked = fill(fresh_server)
    assert fresh_server.stop() == 0
    log = first_log(fresh_server, 0)
    with open(log[: -len(".log")] + ".index", "ab") as f:
        f.write(struct.pack("<QQQ", 10**6, 0, 10**9))
    try:
        fresh_server.start()
    except RuntimeError as e:
        pytest.fail(f"the server did not start: {str(e)[-600:]}")
    status, got = stored(fresh_server, 0)
    assert status != 0 and not got  # refused with an error reply, not served, not emptied
    assert stored(fresh_server, 1) == (0, only(acked, 1))
    healthy(fresh_server)


def _store(server):
    from headwater.storage.local.metadata import LocalMetadataStore
    return lambda name: LocalMetadataStore(os.path.join(server.data_dir, "metadata"), name)


def test_a_deleted_topics_files_left_by_a_crash_do_not_reappear_in_a_new_topic(fresh_server):
    async def before():
        c = await sdk_client(fresh_server)
        await c.create_stream("disk")
        await c.create_topic("disk", "keep", 1)
        await c.create_topic("disk", "gone", 1)  # topic id 1
        await c.send_messages("disk", "gone", 0, [ig.SendMessage(b"OLD-%d" % i) for i in range(5)])
    run(before())
    assert fresh_server.stop() == 0
    catalog = _store(fresh_server)("catalog")
    assert "topic/0/1" in catalog.load()
    catalog.put("topic/0/1", None)  # the catalog write of DeleteTopic is durable, the rmtree never ran
    catalog.close()
    fresh_server.start()

    async def after():
        c = await sdk_client(fresh_server)
        assert [t.name for t in await c.get_topics("disk")] == ["keep"]
        await c.create_topic("disk", "fresh", 1)
        got = await c.poll_messages("disk", "fresh", consumer=ig.Consumer.Single("a"),
                                    polling_strategy=ig.PollingStrategy.First(), count=100,
                                    auto_commit=False, partition_id=0)
        return [m.payload() for m in got]
    assert run(after()) == []


def test_consumer_offsets_of_a_deleted_topic_left_by_a_crash_are_not_inherited(fresh_server):
    async def before():
        c = await sdk_client(fresh_server)
        await c.create_stream("disk")
        await c.create_topic("disk", "gone", 1)
        await c.send_messages("disk", "gone", 0, [ig.SendMessage(b"OLD-%d" % i) for i in range(5)])
        got = await c.poll_messages("disk", "gone", consumer=ig.Consumer.Single("reader"),
                                    polling_strategy=ig.PollingStrategy.Next(), count=5,
                                    auto_commit=True, partition_id=0)
        assert len(got) == 5
    run(before())
    assert fresh_server.stop() == 0
    catalog = _store(fresh_server)("catalog")
    catalog.put("topic/0/0", None)
    catalog.close()
    shutil.rmtree(os.path.join(fresh_server.data_dir, "streams", "0", "topics", "0"))
    fresh_server.start()

    async def after():
        c = await sdk_client(fresh_server)
        await c.create_topic("disk", "fresh", 1)  # gets topic id 0 again
        await c.send_messages("disk", "fresh", 0, [ig.SendMessage(b"NEW-%d" % i) for i in range(8)])
        got = await c.poll_messages("disk", "fresh", consumer=ig.Consumer.Single("reader"),
                                    polling_strategy=ig.PollingStrategy.Next(), count=100,
                                    auto_commit=True, partition_id=0)
        return [m.payload() for m in got]
    assert run(after()) == [b"NEW-%d" % i for i in range(8)]


@pytest.mark.parametrize("what", ["topic", "partitions"])
def test_a_create_that_fails_on_the_filesystem_leaves_nothing_behind(fresh_server, what):
    """A regular file where a partition directory must go makes the create fail (as a full
    disk, a lost permission or EMFILE under ``ulimit -n 1024`` would, for 500+ partitions)."""
    async def go():
        c = await sdk_client(fresh_server)
        await c.create_stream("disk")
        await c.create_topic("disk", "ok", 1)  # topic 0
        topic_id, name, blocked = (1, "new", 3) if what == "topic" else (0, "ok", 2)
        parts = os.path.join(fresh_server.data_dir, "streams", "0", "topics", str(topic_id), "partitions")
        os.makedirs(parts, exist_ok=True)
        with open(os.path.join(parts, str(blocked)), "w") as f:
            f.write("in the way")
        if what == "topic":
            assert await _outcome(c.create_topic("disk", "new", 5)) != "ok"
            assert await c.get_topic("disk", "new") is None, "a failed CreateTopic left the topic behind"
        else:
            assert await _outcome(c.create_partitions("disk", "ok", 3)) != "ok"
            assert (await c.get_topic("disk", "ok")).partitions_count == 1, "a failed CreatePartitions left partitions"
        os.unlink(os.path.join(parts, str(blocked)))
        if what == "topic":  # once the obstruction is gone, the retry must work
            await c.create_topic("disk", "new", 5)
        else:
            await c.create_partitions("disk", "ok", 3)
        r = await c.send_messages("disk", name, 1, [ig.SendMessage(b"kept")])
        return r.confirmations[0].base_offset

    assert run(go()) == 0
    assert fresh_server.stop() == 0
    fresh_server.start()

    async def after():
        c = await sdk_client(fresh_server)
        name = "new" if what == "topic" else "ok"
        got = await c.poll_messages("disk", name, consumer=ig.Consumer.Single("a"),
                                    polling_strategy=ig.PollingStrategy.First(), count=10,
                                    auto_commit=False, partition_id=1)
        return [m.payload() for m in got]
    assert run(after()) == [b"kept"]


async def _outcome(coro) -> str:
    try:
        await coro
        return "ok"
    except RuntimeError as e:
        return str(e)


def test_a_partition_fenced_at_boot_fails_every_read_closed_not_empty(fresh_server):
    """Storage refuses partition 0 at boot (garbage over its first batch header, whole
    batches after it). A fenced partition reports high watermark 0, so every read path must
    refuse it before its end-of-log shortcut: Iggy poll (any strategy, also on a partition
    with Kafka transaction state) CannotReadMessage 4011, Kafka Fetch and ListOffsets
    KAFKA_STORAGE_ERROR 56, never an empty answer a consumer would reset its offsets on."""
    from kafka_wire import KafkaWire
    from test_kafka_transactions import admin_create, txn_producer
    from test_iggy_http import login, request, wait_http
    from test_kafka_wire import FETCH, LIST_OFFSETS, fetch_request, req

    admin_create(fresh_server, "fenced", partitions=2)
    producer = txn_producer(fresh_server, "fence-tx")
    for _ in range(3):  # transactional batches: the partitions get transaction state
        producer.begin_transaction()
        for i in range(4):
            for p in (0, 1):
                producer.produce("fenced", b"v%d" % i, partition=p)
        producer.commit_transaction(15)
    del producer  # no client left retrying the stopped server
    assert fresh_server.stop() == 0
    (log,) = glob.glob(os.path.join(fresh_server.data_dir, "streams", "*", "topics", "*", "partitions", "0",
                                    "*.log"))
    with open(log, "r+b") as f:
        f.write(b"\xde\xad\xbe\xef" * 16)
    os.unlink(log[: -len(".log")] + ".index")
    fresh_server.start()

    async def sdk_polls():
        c = await sdk_client(fresh_server)
        outcomes = []
        for strategy in (ig.PollingStrategy.First(), ig.PollingStrategy.Offset(5), ig.PollingStrategy.Last(),
                         ig.PollingStrategy.Next()):
            try:
                got = await c.poll_messages("kafka", "fenced", consumer=ig.Consumer.Single(1), partition_id=0,
                                            polling_strategy=strategy, count=5, auto_commit=False)
                outcomes.append(f"{len(got)} messages")
            except RuntimeError as e:
                outcomes.append(f"error {e}")
        healthy_part = await c.poll_messages("kafka", "fenced", consumer=ig.Consumer.Single(1), partition_id=1,
                                             polling_strategy=ig.PollingStrategy.First(), count=100,
                                             auto_commit=False)
        return outcomes, len(healthy_part)
    outcomes, served = run(sdk_polls())
    assert all(o.startswith("error") for o in outcomes), outcomes
    assert served > 0  # the other partition is served
    with Raw(fresh_server.iggy_address) as r:
        r.login()
        for start in (0, 5, 10**6):
            kind, status, _ = r.call(100, poll_body("kafka", "fenced", 0, start, 3))
            assert (kind, status) == ("reply", 4011), (start, kind, status)

    wait_http(fresh_server.http_port)  # HTTP polls go through the Iggy handlers: an error status, not 200 empty
    token = login(fresh_server.http_port)["access_token"]["token"]
    for kind in ("first", "offset", "last"):
        status, _, body = request(fresh_server.http_port, "GET", "/streams/kafka/topics/fenced/messages?consumer_id=1"
                                  f"&partition_id=0&kind={kind}&value=0&count=5", token=token)
        assert status >= 400 and b"fenced" in body, (kind, status, body)

    w = KafkaWire(fresh_server.kafka_address)
    try:
        for version in (4, 11, 12):
            for offset in (0, 5):
                resp = w.call(FETCH, version, fetch_request(version, "fenced", offset))
                (part,) = resp.responses[0].partitions
                assert part.error_code == 56, (version, offset, part)  # KAFKA_STORAGE_ERROR
                assert part.high_watermark == -1 and not part.records
            ok = w.call(FETCH, version, fetch_request(version, "fenced", 0, partition=1)).responses[0].partitions[0]
            assert ok.error_code == 0 and ok.records
        for timestamp in (-1, -2):  # latest, earliest
            resp = w.call(LIST_OFFSETS, 1, req(LIST_OFFSETS, 1, replica_id=-1, topics=(
                req(LIST_OFFSETS, 1, "ListOffsetsTopic", name="fenced", partitions=(
                    req(LIST_OFFSETS, 1, "ListOffsetsPartition", partition_index=0, timestamp=timestamp),)),)))
            assert resp.topics[0].partitions[0].error_code == 56, resp
    finally:
        w.close()
    healthy(fresh_server)
