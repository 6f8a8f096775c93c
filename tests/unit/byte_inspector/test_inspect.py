"""The byte inspector on hand-built inputs from the specs, golden outputs, damage, and properties."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater import inspect as inspector
from headwater.cli.main import main
from headwater.codec import batch as codec_batch
from headwater.codec.iggy import framing
from headwater.codec.iggy.codes import Command, IggyErrorCode
from headwater.codec.iggy.commands import messages as msg_commands
from headwater.codec.iggy.primitives import Partitioning

from inspect_samples import SPEC_PRODUCE_TREE, seed_produce_v12, spec_batch

GOLDEN = Path(__file__).parent / "golden"


def golden(name: str, text: str) -> None:
    """Compare with ``golden/NAME`` (``HEADWATER_UPDATE_GOLDEN=1`` rewrites it after a reviewed change)."""
    import os

    path = GOLDEN / name
    if os.environ.get("HEADWATER_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text()


def spans(node):
    return [(n.offset, n.size) for _, n in inspector.walk(node)]


# -- the seed request of kafka-produce-v12.txt -------------------------------------------------

def test_seed_produce_request_has_exactly_the_spec_tree():
    """Every line of the spec's object tree, at the same offset with the same size, in order."""
    data = seed_produce_v12()
    assert len(data) == 94
    tree = inspector.inspect_bytes(data)
    assert spans(tree) == SPEC_PRODUCE_TREE
    assert tree.find("RequestHeader/request_api_key").value == "0 (produce)"
    crc = tree.find("ProduceRequest/topic_data/TopicProduceData[0]/partition_data/PartitionProduceData[0]"
                    "/records/RecordBatch[0]/crc")
    assert crc.check == "valid"


def test_seed_produce_request_golden_output():
    golden("produce-v12-seed.txt", inspector.render(inspector.inspect_bytes(seed_produce_v12())))


def test_seed_request_as_hex_text_reads_the_same():
    hex_text = seed_produce_v12().hex(" ").encode() + b"\n"
    assert inspector.read_input(hex_text) == seed_produce_v12()


def test_kafka_crc_damage_is_invalid_and_exit_1(tmp_path):
    data = bytearray(seed_produce_v12())
    data[0x57 + 3] = 1  # recordsCount 0 -> 1: the CRC no longer matches (and a record is missing)
    path = tmp_path / "req.bin"
    path.write_bytes(bytes(data))
    result = CliRunner().invoke(main, ["inspect", str(path), "--explain-error"])
    assert result.exit_code == 1
    assert "the layout breaks at byte 91 (0x005b)" in result.output


def kafka_response(api_key: int, version: int, **values) -> bytes:
    from headwater.codec.kafka import framing as kafka_framing, messages

    cls = messages.response_class(api_key, version)
    body = messages.encode(messages.build(cls, **values))
    flexible_header = bool(cls.__flexible__) and api_key != 18
    return kafka_framing.response_prefix(42, len(body), flexible_header) + body


@pytest.mark.parametrize("api_key,version", [(18, 3), (3, 12), (1, 11)])
def test_kafka_responses_tile_exactly(api_key, version):
    """ApiVersions (header v0 even when flexible), Metadata and Fetch responses: the leaves
    cover every byte once, and the correlation id is read from the right place."""
    data = kafka_response(api_key, version)
    tree = inspector.inspect_bytes(data, "kafka-response", api_key=api_key, api_version=version)
    assert tree.size == len(data)
    assert tree.find("ResponseHeader/correlation_id").value == "42"
    leaves = sorted((n.offset, n.size) for _, n in inspector.walk(tree) if not n.children)
    assert sum(size for _, size in leaves) == len(data)
    with pytest.raises(ValueError, match="api-key"):
        inspector.inspect_bytes(data, "kafka-response")


# -- Iggy batches --------------------------------------------------------------------------

def test_spec_batch_golden_output_and_checksums_valid():
    tree = inspector.inspect_bytes(spec_batch())
    checks = [n.check for _, n in inspector.walk(tree) if n.check]
    assert checks == ["valid", "valid", "valid"]
    assert tree.value == "offsets 41..42, 2 messages"
    assert tree.find("frame[1]/user_headers/header[0]").value == "'key': 'value'"
    golden("spec-batch.txt", inspector.render(tree))


def test_a_flipped_payload_byte_fails_only_that_frame_checksum():
    data = bytearray(spec_batch())
    data[0x0130] ^= 0x20  # 'hello' -> 'Hello'
    tree = inspector.inspect_bytes(bytes(data), "batch")
    frame0 = tree.find("frame[0]/checksum")
    assert frame0.check.startswith("INVALID")
    assert tree.find("batch_checksum").check == "valid"  # it covers the stored frame checksums only
    assert tree.find("frame[1]/checksum").check == "valid"


@pytest.mark.parametrize("offset,reason", [
    (100, "batch reserved bytes are not zero"),
    (0x0128, "frame reserved bytes are not zero"),
])
def test_explain_error_points_at_the_first_offending_byte(offset, reason):
    data = bytearray(spec_batch())
    data[offset] = 7
    with pytest.raises(inspector.LayoutError) as info:
        inspector.inspect_bytes(bytes(data), "batch")
    assert info.value.offset == offset and info.value.reason == reason
    text = inspector.explain(bytes(data), info.value)
    row = offset // 16 * 16
    lines = text.splitlines()
    caret = lines[[i for i, line in enumerate(lines) if line.startswith(f"{row:08x}")][0] + 1]
    assert caret.index("^") == 10 + 3 * (offset - row)
    assert info.value.tree is not None  # the partial tree is kept


def test_a_frame_longer_than_its_batch_is_named():
    data = bytearray(spec_batch())
    struct.pack_into("<I", data, 0x0124, 10_000)  # frame 0 payload_length
    with pytest.raises(inspector.LayoutError) as info:
        inspector.inspect_bytes(bytes(data), "batch")
    assert info.value.offset == 0x0120 and "only 127 are left" in info.value.reason


def test_segment_with_preallocated_tail_and_its_index():
    one = spec_batch(base_offset=0)
    two = spec_batch(base_offset=2)
    tree = inspector.inspect_bytes(one + two + bytes(4096), filename="00000000000000000000.log")
    assert tree.value == "2 batches"
    assert tree.children[-1].name == "preallocated" and tree.children[-1].size == 4096
    index = struct.pack("<QQQ", 0, 1, 0) + struct.pack("<QQQ", 2, 5, len(one))
    tree = inspector.inspect_bytes(index, filename="00000000000000000000.index")
    assert tree.find("entry[1]/position").value == str(len(one))
    with pytest.raises(inspector.LayoutError, match="whole 24-byte entries"):
        inspector.inspect_bytes(index + b"\x01", "index")


# -- Iggy frames ---------------------------------------------------------------------------

def send_messages_request(batch: bytes) -> bytes:
    body = msg_commands.encode_send_messages(
        msg_commands.SendMessages(1, "orders", Partitioning.by_partition(2), 2, memoryview(batch)))
    return framing.encode_request(Command.SEND_MESSAGES, body, client=7, request=3, session=11)


def test_send_messages_request_frame_shows_header_metadata_and_batch():
    frame = send_messages_request(spec_batch(partition_id=0, base_offset=0, base_timestamp=0))
    tree = inspector.inspect_bytes(frame)
    req = tree.find("request[0]")
    assert req.value == "101 (SEND_MESSAGES)"
    assert req.find("header/request").value == "3"
    assert req.find("SendMessages/stream_id").value == "1"
    assert req.find("SendMessages/topic_id").value == "orders"
    assert req.find("SendMessages/batch").value == "offsets 0..1, 2 messages"
    assert sum(c.size for c in req.children) == len(frame)


def test_error_reply_and_a_metadata_command_body():
    request = framing.encode_request(Command.GET_STREAM, b"\x01\x04\x05\x00\x00\x00", client=7, request=9)
    header = framing.decode_request_header(request)
    reply = framing.encode_reply(header, b"", status=int(IggyErrorCode.STREAM_ID_NOT_FOUND))
    tree = inspector.inspect_bytes(request + reply)
    assert tree.value == "2 frames"
    assert tree.find("request[0]/GetStream").value == "GetStream"
    assert "stream_id" in [c.name for c in tree.find("request[0]/GetStream").children]
    assert tree.find("reply[1]/header/status").value == "1009 (STREAM_ID_NOT_FOUND)"
    assert tree.find("reply[1]").value == "1009 (STREAM_ID_NOT_FOUND)"


# -- properties ----------------------------------------------------------------------------

messages = st.lists(
    st.builds(
        codec_batch.Message,
        payload=st.binary(min_size=0, max_size=64),
        id=st.integers(0, 2**128 - 1),
        origin_timestamp=st.integers(2**40, 2**40 + 2**32 - 1),
        user_headers=st.sampled_from([b"", b"\x02\x01\x00\x00\x00k\x01\x02\x00\x00\x00vv"]),
    ),
    min_size=1, max_size=5,
)


@settings(max_examples=60, deadline=None)
@given(messages)
def test_every_batch_our_codec_builds_inspects_whole_and_valid(msgs):
    data = codec_batch.build_batch(msgs)
    tree = inspector.inspect_bytes(data, "batch")
    assert tree.size == len(data)
    assert all(n.check == "valid" for _, n in inspector.walk(tree) if n.check)
    assert len([c for c in tree.children if c.name.startswith("frame[")]) == len(msgs)
    # leaves tile the input exactly: no byte shown twice or skipped
    leaves = sorted((n.offset, n.size) for _, n in inspector.walk(tree) if not n.children)
    pos = 0
    for off, size in leaves:
        assert off == pos
        pos += size
    assert pos == len(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600), st.sampled_from(inspector.KINDS[1:-1]))
def test_garbage_gives_a_tree_or_a_layout_error_never_a_crash(data, kind):
    try:
        tree = inspector.inspect_bytes(data, kind)
    except inspector.LayoutError as e:
        assert 0 <= e.offset <= len(data)
    else:
        inspector.render(tree)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 93), st.integers(1, 255))
def test_any_damaged_seed_request_byte_gives_a_tree_or_a_layout_error(pos, flip):
    data = bytearray(seed_produce_v12())
    data[pos] ^= flip
    try:
        inspector.inspect_bytes(bytes(data), "kafka-request")
    except inspector.LayoutError as e:
        assert 0 <= e.offset <= len(data)


def test_cli_json_output_and_unknown_bytes(tmp_path):
    path = tmp_path / "batch.bin"
    path.write_bytes(spec_batch())
    result = CliRunner().invoke(main, ["inspect", str(path), "--output", "json"])
    assert result.exit_code == 0, result.output
    import json

    doc = json.loads(result.output)
    assert doc["name"] == "batch" and doc["size"] == len(spec_batch())
    path.write_bytes(b"nothing recognisable here")
    result = CliRunner().invoke(main, ["inspect", str(path)])
    assert result.exit_code == 2 and "--as" in result.output


@pytest.mark.parametrize("args", [["-o", "json", "inspect", "{}"], ["--output", "json", "inspect", "{}"],
                                  ["inspect", "{}", "-o", "json"], ["-o", "table", "inspect", "{}", "-o", "json"]])
def test_cli_honours_the_global_output_option_before_or_after_the_command(tmp_path, args):
    import json

    path = tmp_path / "batch.bin"
    path.write_bytes(spec_batch())
    result = CliRunner().invoke(main, [a.format(path) for a in args])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["name"] == "batch"


def test_cli_text_is_the_default_and_counts_are_pluralized(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(bytes(24))
    for args in (["inspect", str(path)], ["-o", "table", "inspect", str(path)],
                 ["inspect", str(path), "-o", "text"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        assert "1 entry" in result.output and "1 entries" not in result.output
    path.write_bytes(bytes(48))
    assert "2 entries" in CliRunner().invoke(main, ["inspect", str(path)]).output


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_kafka_record_batches_plain_and_compressed_show_every_record(codec):
    """A fetch-style record set: one batch (compressed with each codec) and a partial one."""
    from headwater.codec.kafka import record_batch as rb

    records = [rb.Record(i, i, b"key-%d" % i, b"value-%d" % i, [("h", b"v")]) for i in range(3)]
    batch = rb.build_record_batch(records, base_timestamp=1_700_000_000_000, compression=codec)
    from headwater.inspect.tree import Cursor, Node
    from headwater.inspect import kafka as kafka_inspect

    root = Node("records")
    data = batch + batch[:30]
    c = Cursor(data, root, order=">", type_names=kafka_inspect.KAFKA_TYPE_NAMES)
    assert kafka_inspect.record_set(c, len(data)) == "1 RecordBatch"
    first = root.children[0]
    assert first.find("crc").check == "valid"
    holder = first if codec == 0 else first.find("records")
    shown = [n for n in holder.children if n.name.startswith("Record[")]
    assert [n.find("key").value for n in shown] == ["'key-0'", "'key-1'", "'key-2'"]
    assert shown[2].find("Header[0]/headerValue").value == "'v'"
    assert root.children[-1].name == "partial" and root.children[-1].size == 30


def test_a_metadata_command_is_walked_field_by_field_through_its_declaration():
    """CreateTopic: every field of the body at its own offset, and the fields tile the body."""
    from headwater.codec.iggy.commands import encode_request_body
    from headwater.codec.iggy.commands.topics import CreateTopic

    code, body = encode_request_body(CreateTopic("orders", 3, "events"))
    frame = framing.encode_request(code, body, client=1, request=1)
    tree = inspector.inspect_bytes(frame)
    create = tree.find("request[0]/CreateTopic")
    names = [c.name for c in create.children]
    assert names[:3] == ["stream_id", "partitions_count", "name"]
    assert create.find("partitions_count").value == "3"
    assert create.find("partitions_count").offset == 256 + 2 + len("orders")
    assert create.find("name").value == "'events'"
    total = sum(c.size for c in create.children)
    assert total == len(body) and create.offset == 256
