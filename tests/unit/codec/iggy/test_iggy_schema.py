"""The declarations themselves: every command has one, the compiled codec agrees with the
interpreted walker, the walker's field tree covers the body byte for byte, and the field
metadata a JSON mapping needs is there."""

from __future__ import annotations

import base64
import dataclasses
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import iggy_strategies as S
from headwater.codec.errors import CodecError, InvalidFormat
from headwater.codec.iggy.codes import Command
from headwater.codec.iggy.commands import COMMANDS
from headwater.codec.iggy.commands import groups as G
from headwater.codec.iggy.commands import messages as M
from headwater.codec.iggy.commands import streams as ST
from headwater.codec.iggy.commands import system as SY
from headwater.codec.iggy.commands import topics as TP
from headwater.codec.iggy.commands import users as U
from headwater.codec.iggy.errors import InvalidIdentifier
from headwater.codec.iggy.schema import (
    IDENTIFIER,
    NAME,
    RECORDS,
    REQUESTS,
    REST,
    U32,
    Field,
    ListOf,
    Record,
    iter_fields,
    render,
    walk,
)
from headwater.codec.iggy import version as V
from test_iggy_fuzz import mutated

pytestmark = pytest.mark.slow  # a file of long tests: handed out first (tests/conftest.py)

CHECKS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# (name, strategy, declaration) of every reply payload with a declaration
REPLY_SCHEMAS = [
    ("stats", S.stats, SY.STATS),
    ("cluster_metadata", S.cluster_metadata, SY.CLUSTER_METADATA),
    ("option_descriptors", S.option_descriptors, SY.OPTION_DESCRIPTORS),
    ("clients", st.lists(S.client_infos, max_size=4).map(tuple), SY.CLIENTS),
    ("client_details", S.client_details, SY.CLIENT_DETAILS),
    ("users", st.lists(S.user_infos, max_size=4).map(tuple), U.USERS),
    ("user_details", S.user_details, U.USER_DETAILS),
    ("streams", st.lists(S.stream_infos, max_size=4).map(tuple), ST.STREAMS),
    ("stream_details", S.stream_details, ST.STREAM_DETAILS),
    ("topics", st.lists(S.topic_infos, max_size=4).map(tuple), TP.TOPICS),
    ("topic_details", S.topic_details, TP.TOPIC_DETAILS),
    ("consumer_groups", S.group_infos, G.CONSUMER_GROUPS),
    ("consumer_group_details", S.group_details, G.CONSUMER_GROUP_DETAILS),
    ("sync_consumer_group", S.sync_replies, G.SYNC_CONSUMER_GROUP_REPLY),
    ("send_messages_reply", S.confirmations, M.SEND_MESSAGES_REPLY),
    ("login_reply", S.login_replies, V.LOGIN_REPLY),
]


def _pack(t, value) -> bytes:
    return t.pack(value, "x")


def test_every_command_is_declared_once_and_the_table_is_built_from_it():
    assert set(REQUESTS) == set(Command)
    for code, spec in COMMANDS.items():
        record = spec.request_schema
        assert record is REQUESTS[code] and record.command is code
        assert spec.request_type is record.cls
        assert spec.reply_schema is record.reply
        if record.reply is not None:
            assert spec.reply_decode is record.reply.payload_decoder is not None
    # the hand-written codecs are kept exactly where the brief says: send and the login shapes
    hand = {c for c, r in REQUESTS.items() if r.hand_codec is not None}
    assert hand == {Command.SEND_MESSAGES, Command.LOGIN_REGISTER, Command.LOGIN_REGISTER_WITH_PAT}


def test_every_dataclass_field_is_declared_and_every_record_compiles():
    for cls, record in RECORDS.items():
        declared = {f.name for f in record.fields if not f.wire_only}
        assert declared == {f.name for f in dataclasses.fields(cls)}, cls
        assert "def decode(body)" in record.source


def test_a_declaration_that_misses_a_field_is_refused_at_import():
    @dataclasses.dataclass(frozen=True)
    class Two:
        a: int
        b: int

    with pytest.raises(TypeError, match="do not match"):
        Record(Two, [Field("a", U32)])
    with pytest.raises(TypeError, match="must be last"):
        Record(Two, [Field("a", REST), Field("b", U32)])
    with pytest.raises(TypeError, match="not before it"):
        Record(Two, [Field("a", ListOf(U32, "n")), Field("n", U32, count_of="a"), Field("b", U32)])


def test_count_fields_are_wire_only_and_iterated_as_lengths():
    value = ST.StreamDetails(1, 2, "s", topics=(S_topic := TP.TopicInfo(3, 4, 0, "t"),) * 2)
    fields = dict((f.name, v) for f, v in iter_fields(value))
    assert fields["topics_count"] == 2 and fields["topics"] == (S_topic, S_topic)
    assert [f.name for f, _ in iter_fields(value)] == [f.name for f in ST.STREAM_DETAILS.fields]


# ---------------------------------------------------------------- walker: golden


def test_walk_golden_get_topic():
    body = TP.encode_get_topic(TP.GetTopic(1, "ab"))
    nodes = walk(COMMANDS[Command.GET_TOPIC].request_schema, body)
    assert [(n.path, n.type, n.offset, n.size, n.value, n.depth) for n in nodes] == [
        ("<body>", TP.GET_TOPIC, 0, 10, TP.GetTopic(1, "ab"), 0),
        ("stream_id", IDENTIFIER, 0, 6, 1, 1),
        ("topic_id", IDENTIFIER, 6, 4, "ab", 1),
    ]


def test_walk_golden_topic_details_tree_and_render():
    t = TP.TopicDetails(7, 8, "t", 9, 2, 10, 11, 12, b"o", b"dd", (TP.PartitionInfo(0, 1, 2, 3, 4, 5),))
    nodes = walk(TP.TOPIC_DETAILS, TP.encode_topic_details(t))
    by_path = {n.path: n for n in nodes}
    assert by_path["<body>"].value == t and by_path["<body>"].size == 102
    assert (by_path["name"].offset, by_path["name"].size, by_path["name"].type) == (49, 2, NAME)
    assert (by_path["partitions_count"].value, by_path["partitions"].offset) == (1, 62)
    assert by_path["partitions[0].current_offset"].offset == 62 + 16
    assert by_path["partitions[0].current_offset"].depth == 3
    text = render(nodes)
    assert "    49      2    name  Name  't'" in text.splitlines()


def test_walk_shows_a_count_prefix_and_trailing_bytes():
    payload = TP.encode_topics([]) + b"\x01"
    nodes = walk(TP.TOPICS, payload)
    assert [(n.path, n.offset, n.size, n.value) for n in nodes] == [
        ("<body>", 0, 4, ()),
        ("count", 0, 4, 0),
        ("<trailing>", 4, 1, b"\x01"),
    ]
    with pytest.raises(InvalidFormat):
        TP.decode_topics(payload)


def test_walk_raises_what_the_decoder_raises():
    with pytest.raises(InvalidIdentifier):
        walk(ST.GET_STREAM, b"\x03\x01x")
    with pytest.raises(InvalidFormat) as err:
        walk(TP.TOPICS, struct.pack("<I", 1000))
    assert err.value.offset == 0


# ---------------------------------------------------------------- walker against the compiled codec


def _check_tree(nodes, body: bytes) -> None:
    """Top-level fields tile the body, and each re-encodes to its own bytes."""
    top = [n for n in nodes if n.depth == 1]
    pos = 0
    for n in top:
        assert n.offset == pos, n.path
        if not isinstance(n.type, Record):
            assert _pack(n.type, n.value) == body[n.offset : n.offset + n.size], n.path
        pos += n.size
    assert pos == len(body) == nodes[0].size


@pytest.mark.parametrize("command", list(Command), ids=lambda c: c.name)
@CHECKS
@given(data=st.data())
def test_walk_of_every_request_matches_decode(command, data):
    spec = COMMANDS[command]
    request = data.draw(S.REQUESTS[command])
    body = spec.encode(request)
    nodes = walk(spec.request_schema, body)
    assert nodes[0].value == request == spec.decode(body)
    if spec.request_schema.fields:
        _check_tree(nodes, body)


@pytest.mark.parametrize("name,strategy,schema", REPLY_SCHEMAS, ids=[r[0] for r in REPLY_SCHEMAS])
@CHECKS
@given(data=st.data())
def test_walk_of_every_reply_matches_decode(name, strategy, schema, data):
    value = data.draw(strategy)
    payload = _pack(schema, value)
    nodes = walk(schema, payload)
    assert nodes[0].value == value == schema.payload_decoder(payload)
    if isinstance(schema, Record):
        _check_tree(nodes, payload)


@pytest.mark.parametrize(
    "command",
    [c for c in Command if REQUESTS[c].hand_codec is None],
    ids=lambda c: c.name,
)
@CHECKS
@given(data=st.data())
def test_compiled_decoder_and_walker_agree_on_garbage(command, data):
    """Differential: the compiled codec and the interpreted walker read the same declaration."""
    spec = COMMANDS[command]
    body = data.draw(st.binary(max_size=80) | mutated(S.REQUESTS[command], spec.encode))
    try:
        expected = spec.decode(body)
    except CodecError as exc:
        expected = exc
    try:
        nodes = walk(spec.request_schema, body)
    except CodecError as exc:
        assert isinstance(expected, CodecError), (body, exc)
        assert type(exc) is type(expected) and exc.offset == expected.offset
        return
    if nodes[-1].path == "<trailing>":  # the walker lists them; the decoder refuses them
        assert isinstance(expected, InvalidFormat) and expected.offset == nodes[-1].offset
    else:
        assert nodes[0].value == expected


# ---------------------------------------------------------------- what a JSON mapping derives


def _to_json(value, encoding):
    """A minimal mapping driven only by the declarations (the shape json.py can follow)."""
    if type(value) in RECORDS:
        return {f.json_key: _to_json(v, f.json_encoding) for f, v in iter_fields(value)}
    if isinstance(value, tuple):
        return [_to_json(v, "object") for v in value]
    if encoding in ("base64", "options", "batch"):
        return base64.b64encode(bytes(value)).decode()
    return value


def test_declarations_carry_what_a_json_mapping_needs():
    details = ST.StreamDetails(1, 2, "s", 3, 4, b"\x01", (TP.TopicInfo(5, 6, 1, "t"),))
    doc = _to_json(details, "object")
    assert doc["name"] == "s" and doc["topics_count"] == 1 and doc["options"] == "AQ=="
    assert doc["topics"][0]["name"] == "t" and doc["topics"][0]["compression_algorithm"] == 1
    kinds = {f.name: f.json_encoding for f in TP.CREATE_TOPIC.fields}
    assert kinds == {
        "stream_id": "identifier",
        "partitions_count": "int",
        "name": "string",
        "options": "options",
    }
    renamed = Field("size_bytes", U32, json_name="size")
    assert (renamed.json_key, renamed.json_encoding) == ("size", "int")
