"""The HTTP JSON mapping (``codec/iggy/json.py``): round trips of every request shape through
what a client sends (``unload``) and back (``load``), reply rendering, messages and headers,
and garbage raising only our error."""

from __future__ import annotations

import base64
import dataclasses
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.codec import headers as tlv
from headwater.codec.errors import CodecError
from headwater.codec.iggy import json as ij
from headwater.codec.iggy.codes import ConsumerKind, PollingKind
from headwater.codec.iggy.commands import groups as G
from headwater.codec.iggy.commands import messages as M
from headwater.codec.iggy.commands import offsets as O
from headwater.codec.iggy.commands import streams as ST
from headwater.codec.iggy.commands import tokens as T
from headwater.codec.iggy.commands import topics as TP
from headwater.codec.iggy.commands import users as U
from headwater.codec.iggy.primitives import Consumer, PollingStrategy

from headwater.codec.iggy.primitives import GlobalPermissions, Permissions, StreamPermissions, TopicPermissions
from iggy_strategies import names, short_strs, u8, u32, u64, u128

# JSON keys permissions by stream and topic id: unique ids, in id order
_flags = lambda n: st.tuples(*[st.booleans()] * n)
_topics = st.dictionaries(u32, _flags(4), max_size=3).map(
    lambda d: tuple(TopicPermissions(k, *v) for k, v in sorted(d.items())))
_streams = st.dictionaries(u32, st.tuples(_flags(6), _topics), max_size=3).map(
    lambda d: tuple(StreamPermissions(k, *flags, topics=ts) for k, (flags, ts) in sorted(d.items())))
permissions = st.builds(Permissions, st.builds(lambda f: GlobalPermissions(*f), _flags(10)), _streams)

# a name identifier that reads as a number is a number (Iggy's Identifier::from_str too)
name_ids = names.filter(lambda s: not (s.isascii() and s.isdigit()))
identifiers = u32 | name_ids
option_blocks = st.dictionaries(
    st.text("abcdefghij_", min_size=1, max_size=12), st.text(min_size=1, max_size=20).filter(lambda s: len(s.encode()) <= 255), max_size=4
).map(lambda d: tlv.encode_options_block({k: (int(tlv.Kind.STRING), v.encode()) for k, v in d.items()}) if d else b"")

# strategies by encoding: a shape whose fields are all plain is generated from the table itself
BY_ENCODING = {
    ij.U8.name: u8, ij.U32.name: u32, ij.U64.name: u64, ij.U128.name: u128, ij.BOOL.name: st.booleans(),
    ij.STR.name: short_strs, ij.IDENTIFIER.name: identifiers, ij.OPTIONS.name: option_blocks,
    ij.EXPIRY_US.name: u64, ij.TIMESTAMP_US.name: u64, ij.BYTE_SIZE.name: u64,
    ij.USER_STATUS.name: st.sampled_from([1, 2]), ij.COMPRESSION.name: st.sampled_from([1, 2]),
    ij.PERMISSIONS.name: permissions, "optional " + ij.STR.name: st.none() | short_strs,
    "optional " + ij.U32.name: st.none() | u32, "optional " + ij.USER_STATUS.name: st.none() | st.sampled_from([1, 2]),
    "optional " + ij.PERMISSIONS.name: st.none() | permissions,
}
consumers = st.builds(Consumer, st.just(ConsumerKind.CONSUMER), identifiers)
COMPOSITE = {
    # an absent partition_id is Iggy's default partition (0) over HTTP, so None does not travel
    M.PollMessages: st.builds(M.PollMessages, consumers, identifiers, identifiers, u32,
                              st.builds(PollingStrategy, st.sampled_from(PollingKind), u64), u32, st.booleans()),
    O.GetConsumerOffset: st.builds(O.GetConsumerOffset, consumers, identifiers, identifiers, st.none() | u32),
    O.StoreConsumerOffset: st.builds(O.StoreConsumerOffset, consumers, identifiers, identifiers, st.none() | u32, u64),
    O.DeleteConsumerOffset: st.builds(O.DeleteConsumerOffset, consumers, identifiers, identifiers, st.none() | u32),
}


def _routes():
    """Each request type with fields -> (its route's path parameters, whether it has a body):
    where a value travels is the route's (frontends/http/routes.py; logins are in app.py)."""
    from headwater.codec.iggy.commands import COMMANDS
    from headwater.frontends.http.routes import APIS

    out = {U.LoginUser: ((), True), T.LoginWithPersonalAccessToken: ((), True)}
    for api in APIS:
        cls = COMMANDS[api.command].request_type
        if dataclasses.fields(cls) and cls is not M.SendMessages:
            out[cls] = (tuple(re.findall(r"{(\w+)}", api.path)), api.method in ("POST", "PUT"))
    return out


ROUTES = _routes()
REQUESTS = list(ROUTES)


def strategy(cls):
    if cls in COMPOSITE:
        return COMPOSITE[cls]
    shape = ij.SHAPES[cls]
    return st.builds(cls, **{f.attr: BY_ENCODING[f.enc.name] for f in shape.fields if f.attr})


def test_every_command_with_a_route_has_a_request_shape():
    from headwater.codec.iggy.commands import COMMANDS
    from headwater.frontends.http.routes import APIS

    for api in APIS:
        cls = COMMANDS[api.command].request_type
        assert cls in ij.SHAPES or not dataclasses.fields(cls) or cls is M.SendMessages, api


@pytest.mark.parametrize("cls", REQUESTS, ids=lambda c: c.__name__)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_request_round_trip(cls, data):
    value = data.draw(strategy(cls))
    body, path, query = ij.unload(value, *ROUTES[cls])
    body = json.loads(json.dumps(body)) if ROUTES[cls][1] else None  # what travels is JSON text
    assert ij.load(cls, body=body, path=path, query=query) == value


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(u128, st.binary(max_size=64),
                          st.lists(st.tuples(st.binary(min_size=1, max_size=8).map(lambda b: bytes(65 + x % 26 for x in b)), st.sampled_from([tlv.Kind.RAW, tlv.Kind.STRING]),
                                             st.binary(min_size=1, max_size=8).map(lambda b: bytes(65 + x % 26 for x in b))), max_size=3)), min_size=1, max_size=5),
       st.one_of(st.just(ij.Partitioning.balanced()), st.builds(ij.Partitioning.by_partition, u32),
                 st.builds(ij.Partitioning.by_key, st.binary(min_size=1, max_size=255))))
def test_send_messages_round_trip(raw, partitioning):
    msgs = [ij.JsonMessage(i, p, tlv.encode_user_headers([tlv.UserHeader(k, kind, v, int(tlv.Kind.RAW)) for k, kind, v in hs]) if hs else b"")
            for i, p, hs in raw]
    body = json.loads(json.dumps(ij.dump_send_messages(partitioning, msgs)))
    assert ij.load_send_messages(body) == (partitioning, msgs)


def test_reply_shapes_render_iggy_serde_forms():
    topic = TP.TopicDetails(id=1, created_at=1_700_000_000_000_000, name="t", message_expiry=0, compression_algorithm=2,
                            max_topic_size=(1 << 64) - 1, size_bytes=10, messages_count=3,
                            options=tlv.encode_options_block({"segment_size": (int(tlv.Kind.UINT64), (1 << 20).to_bytes(8, "little"))}),
                            partitions=(TP.PartitionInfo(0, 5, 1, 2, 10, 3),))
    assert ij.dump(topic) == {
        "id": 1, "created_at": 1_700_000_000_000_000, "name": "t", "size": 10, "message_expiry": 0,
        "compression_algorithm": "gzip", "max_topic_size": (1 << 64) - 1, "messages_count": 3, "partitions_count": 1,
        "partitions": [{"id": 0, "created_at": 5, "segments_count": 1, "current_offset": 2, "size": 10, "messages_count": 3}],
        "options": {"segment_size": {"value": "1048576", "explicit": True}},
    }
    group = G.ConsumerGroupDetails(id=2, partitions_count=3, name="g", members=(G.ConsumerGroupMember(7, (0, 2)),))
    assert ij.dump(group) == {"id": 2, "name": "g", "partitions_count": 3, "members_count": 1,
                              "members": [{"id": 7, "partitions_count": 2, "partitions": [0, 2]}]}
    assert ij.dump(T.PersonalAccessTokenInfo("p", 0)) == {"name": "p", "expiry_at": None}
    user = U.UserInfo(id=1, created_at=2, status=2, username="u")
    assert ij.dump(user) == {"id": 1, "created_at": 2, "status": "inactive", "username": "u", "options": {}}
    assert ij.dump(ST.StreamInfo(id=0, created_at=1, topics_count=0, name="s"))["size"] == 0


@settings(max_examples=60, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.floats(allow_nan=False),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3), max_leaves=12),
       st.sampled_from(REQUESTS))
def test_garbage_raises_only_codec_errors(value, cls):
    body = value if isinstance(value, dict) else {"name": value, "messages": value, "partitions_count": value}
    try:
        params, has_body = ROUTES[cls]
        ij.load(cls, body=body if has_body else None, path={k: str(value)[:20] for k in params},
                query={"consumer_id": str(value)[:20], "count": str(value)[:20], "partitions_count": str(value)[:20]})
    except CodecError:
        pass
    try:
        ij.load_send_messages(value)
    except CodecError:
        pass


def test_identifier_and_expiry_forms():
    assert ij.IDENTIFIER.load("7", "x") == 7 and ij.IDENTIFIER.load("orders", "x") == "orders"
    with pytest.raises(ij.InvalidJson):
        ij.IDENTIFIER.load(-1, "x")
    assert ij.BYTE_SIZE.load("1 KB", "x") == 1000 and ij.BYTE_SIZE.load("2KiB", "x") == 2048
    with pytest.raises(ij.InvalidJson) as e:
        ij.load(ST.CreateStream, body={})
    assert e.value.field == "name" and e.value.code == 4


def test_poll_reply_renders_every_frame():
    from headwater.codec.batch import Message, build_batch

    batch = bytearray(build_batch([Message(b"a", 1, 100), Message(b"bc", 2, 150, tlv.encode_headers({"k": "v"}))]))
    batch[8:16] = (42).to_bytes(8, "little")  # base_offset
    out = ij.dump_polled_messages(M.PollPrefix(3, 43, 2), bytes(batch))
    assert (out["partition_id"], out["current_offset"], out["count"]) == (3, 43, 2)
    assert [m["header"]["offset"] for m in out["messages"]] == [42, 43]
    assert [m["header"]["origin_timestamp"] for m in out["messages"]] == [100, 150]
    assert base64.b64decode(out["messages"][1]["payload"]) == b"bc"
    assert out["messages"][1]["user_headers"][0]["key"] == {"kind": "string", "value": base64.b64encode(b"k").decode()}



def test_shapes_are_derived_from_the_declarations():
    """Every declared record has a shape whose JSON keys are its fields' ``json_key`` in wire
    order (a polling strategy flattened into kind and value), without ``json="skip"`` fields."""
    from headwater.codec.iggy import schema

    batches = {cls for cls, r in schema.RECORDS.items() if any(f.type is schema.BATCH for f in r.fields)}
    assert set(ij.SHAPES) == set(schema.RECORDS) - batches and M.SendMessages in batches
    for cls, shape in ij.SHAPES.items():
        expected = []
        for f in schema.RECORDS[cls].fields:
            if f.json != ij.SKIP and f.computed is None:
                expected += ["kind", "value"] if f.type is schema.POLLING_STRATEGY else [f.json_key]
        assert [f.key for f in shape.fields] == expected, cls
    assert "ack" not in ij.unload(O.StoreConsumerOffset(Consumer(ConsumerKind.CONSUMER, 1), 1, 2, None, 3))[0]


def test_a_declaration_says_the_json_name_encoding_and_default(monkeypatch):
    from headwater.codec.iggy import schema

    @dataclasses.dataclass(frozen=True)
    class Probe:
        size_bytes: int
        status: int
        secret: int = 5

    monkeypatch.setattr(schema, "RECORDS", dict(schema.RECORDS))  # keep the probe out of the registry
    record = schema.Record(Probe, [schema.Field("size_bytes", schema.U64, json_name="size"),
                                   schema.Field("status", schema.U8, json="user status", json_default=2),
                                   schema.Field("secret", schema.U8, json="skip")])
    monkeypatch.setitem(ij.SHAPES, Probe, ij.shape_of(record))
    assert ij.dump(Probe(7, 1, 9)) == {"size": 7, "status": "active"}
    assert ij.load(Probe, body={"size": 7, "secret": 1}) == Probe(7, 2, 5)
    assert ij.load(Probe, body={"size": "7", "status": "inactive"}) == Probe(7, 2)
    with pytest.raises(ij.InvalidJson) as e:
        ij.load(Probe, body={"status": "active"})
    assert e.value.field == "size"
