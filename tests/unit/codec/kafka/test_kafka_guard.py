"""The request-body guard: kio-encoded requests of every registered API and version pass
unchanged; mutations of them are either refused by the guard or read by kio; unknown tagged
fields are dropped at any depth; lying counts, null required arrays and bad varints are refused.

The oracle is kio itself (``messages.reader``): whatever the guard lets through, kio must read
without an error, and it must never see an array count it would reserve memory for blindly.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from dataclasses import fields, replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from headwater.codec.kafka import messages
from headwater.codec.kafka.framing import FrameError
from headwater.codec.kafka.guard import MalformedRequest, check, uvarint
from headwater.frontends.kafka import handlers  # noqa: F401  (registers every API)
from headwater.frontends.kafka.registry import APIS

SETTINGS = settings(deadline=None, max_examples=400, suppress_health_check=[HealthCheck.too_slow])

REQUESTS = sorted(
    (key, version)
    for key, api in APIS.items()
    for version in range(api.min_version, api.max_version + 1)
    if messages.has_schema(key, version)
)
FLEXIBLE = [kv for kv in REQUESTS if messages.is_flexible(*kv)]
PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSET_COMMIT, DESCRIBE_GROUPS, DELETE_TOPICS = 0, 1, 2, 3, 8, 15, 20


# --------------------------------------------------------------------------- kio entities from their schema

_INTS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
}


def _primitive_st(kafka_type: str) -> st.SearchStrategy:
    if kafka_type in _INTS:
        lo, hi = _INTS[kafka_type]
        return st.one_of(st.integers(-1, 3), st.integers(lo, hi))
    if kafka_type == "string":
        return st.text(max_size=8)
    if kafka_type in ("bytes", "records"):
        return st.binary(max_size=12)
    if kafka_type == "bool":
        return st.booleans()
    if kafka_type == "uuid":
        return st.uuids()
    if kafka_type == "float64":
        return st.floats(allow_nan=False)
    if kafka_type == "timedelta_i32":
        return st.integers(-(2**31), 2**31 - 1).map(lambda ms: datetime.timedelta(milliseconds=ms))
    if kafka_type == "timedelta_i64":
        return st.integers(-(2**50), 2**50).map(lambda ms: datetime.timedelta(milliseconds=ms))
    raise AssertionError(f"no strategy for {kafka_type}")


def entity_st(cls: type, depth: int = 0) -> st.SearchStrategy:
    """Any instance of kio entity ``cls`` that kio can write."""
    kw = {}
    for f in fields(cls):
        shape = classify_field(f)
        tagged = get_field_tag(f) is not None
        if isinstance(shape, PrimitiveField):
            value = _primitive_st(get_schema_field_type(f))
        elif isinstance(shape, PrimitiveTupleField):
            value = st.lists(_primitive_st(get_schema_field_type(f)), max_size=3).map(tuple)
        elif isinstance(shape, EntityField):
            value = entity_st(shape.type_, depth + 1)
        elif isinstance(shape, EntityTupleField):
            size = 2 if depth < 2 else 0
            value = st.lists(entity_st(shape.type_, depth + 1), max_size=size).map(tuple)
        else:
            raise AssertionError(shape)
        if tagged:
            value = st.one_of(st.just(f.default), value)
        elif is_optional(f):
            value = st.one_of(st.none(), value)
        kw[f.name] = value
    return st.builds(cls, **kw)


_STRATEGIES: dict = {}


def request_st(key: int, version: int) -> st.SearchStrategy:
    if (key, version) not in _STRATEGIES:
        _STRATEGIES[key, version] = entity_st(messages.request_class(key, version))
    return _STRATEGIES[key, version]


@st.composite
def encoded_requests(draw, pairs=REQUESTS):
    key, version = draw(st.sampled_from(pairs))
    entity = draw(request_st(key, version))
    return key, version, entity, messages.encode(entity)


def entity_class(key: int, version: int, name: str) -> type:
    return getattr(messages.request_module(key, version), name)


def read(key: int, version: int, body: bytes):
    """The guard, then kio: what the server does with a request body."""
    return messages.decode(messages.request_class(key, version), body)


# --------------------------------------------------------------------------- properties


def test_every_registered_request_schema_compiles():
    assert len(REQUESTS) > 150
    for key, version in REQUESTS:
        cls = messages.request_class(key, version)
        body = messages.encode(messages.build(cls))
        assert check(cls, body) == (body, 0), (key, version)


@SETTINGS
@given(encoded_requests())
def test_valid_requests_pass_unchanged(req):
    key, version, entity, body = req
    cls = messages.request_class(key, version)
    padded = b"head" + body + b"tail"  # an offset into a frame; trailing bytes are ignored
    got, offset = check(cls, padded, 4)
    assert got is padded and offset == 4
    assert read(key, version, body) == entity


def _mutate(data: bytes, draw) -> bytes:
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["byte", "count", "insert", "delete", "truncate"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "byte" and data:
            data[at] = draw(st.integers(0, 255))
        elif kind == "count":  # a length or count that lies: large, negative, -1, or a long varint
            data[at:at] = draw(st.sampled_from([
                b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xff\xff\xfe",
                b"\xff\xff\xff\xff\x7f", b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80\x01", b"\x00",
                b"\xff\xff", b"\x01\x63\x03abc", b"\x02",
            ]))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 4))]
        else:
            del data[at:]
    return bytes(data)


@SETTINGS
@given(encoded_requests(), st.data())
def test_mutations_are_refused_by_the_guard_or_read_by_kio(req, data):
    key, version, _entity, body = req
    mutated = _mutate(body, data.draw)
    cls = messages.request_class(key, version)
    try:
        guarded, offset = check(cls, mutated)
    except MalformedRequest:
        return
    messages.reader(cls)(guarded, offset)  # must not raise


@SETTINGS
@given(st.binary(max_size=64), st.sampled_from(REQUESTS))
def test_garbage_is_refused_by_the_guard_or_read_by_kio(body, pair):
    cls = messages.request_class(*pair)
    try:
        guarded, offset = check(cls, body)
    except MalformedRequest:
        return
    messages.reader(cls)(guarded, offset)


def _without_tags(entity):
    """``entity`` with every tagged field at its default, so its tagged section is one 0 byte."""
    changes = {f.name: f.default for f in fields(entity) if get_field_tag(f) is not None}
    return replace(entity, **changes)


@SETTINGS
@given(encoded_requests(FLEXIBLE), st.lists(st.tuples(st.integers(10_000, 2**31 - 1), st.binary(max_size=6)),
                                            min_size=1, max_size=3))
def test_unknown_top_level_tagged_fields_are_dropped(req, tags):
    key, version, entity, _ = req
    entity = _without_tags(entity)
    body = messages.encode(entity)
    assert body.endswith(b"\x00")
    section = uvarint(len(tags)) + b"".join(uvarint(t) + uvarint(len(v)) + v for t, v in tags)
    assert read(key, version, body[:-1] + section) == entity


# --------------------------------------------------------------------------- the reported defects


@pytest.mark.parametrize("key,version,body", [
    (METADATA, 12, bytes.fromhex("ffffffff7f")),  # compact array, 2**35-2 topics: kio aborted the process
    (METADATA, 12, bytes.fromhex("ffffffff07")),  # 2**31-2 topics in 5 bytes
    (METADATA, 1, bytes.fromhex("7fffffff")),  # legacy array, 2**31-1 topics
    (PRODUCE, 9, bytes.fromhex("00ffff00001388ffffffff0f")),  # topic_data, 2**32-2 entries
    (PRODUCE, 3, bytes.fromhex("ffff ffff 00001388 00000002 0001 61 7fffffff")),  # partitions, nested
])
def test_a_huge_array_count_is_refused_before_kio(key, version, body):
    with pytest.raises(MalformedRequest) as info:
        read(key, version, body)
    assert isinstance(info.value, FrameError)


def test_an_array_count_must_fit_its_smallest_elements():
    # ListOffsets v1: topics of (name int16-length string, partitions int32 count) are >= 6 bytes each
    cls = messages.request_class(LIST_OFFSETS, 1)
    head = struct.pack(">i", -1)
    one_topic = struct.pack(">h", 1) + b"t" + struct.pack(">i", 0)
    assert read(LIST_OFFSETS, 1, head + struct.pack(">i", 1) + one_topic).topics[0].name == "t"
    with pytest.raises(MalformedRequest):  # 2 topics claimed, 7 bytes: Kafka would try, kio too
        check(cls, head + struct.pack(">i", 2) + one_topic)


@pytest.mark.parametrize("key,version,body", [
    (DESCRIBE_GROUPS, 0, bytes.fromhex("ffffffff")),
    (LIST_OFFSETS, 1, bytes.fromhex("ffffffff" "ffffffff")),
    (DELETE_TOPICS, 1, bytes.fromhex("ffffffff" "00001388")),
    (DELETE_TOPICS, 4, bytes.fromhex("00" "00001388" "00")),  # compact: 0 = null
    (METADATA, 0, bytes.fromhex("ffffffff")),
])
def test_a_null_required_array_is_refused(key, version, body):
    with pytest.raises(MalformedRequest, match="non-nullable"):
        read(key, version, body)


@pytest.mark.parametrize("version,body", [(1, "ffffffff"), (4, "ffffffff" "00"), (12, "00" "00" "00" "00")])
def test_a_null_nullable_array_is_read_as_none(version, body):
    assert read(METADATA, version, bytes.fromhex(body)).topics is None  # Metadata: "all topics"


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_v10_v11_topic_name_is_nullable(version):
    # MetadataRequest.json: name nullableVersions 10+; Kafka answers INVALID_REQUEST for it (handler)
    cls = messages.request_class(METADATA, version)
    topic_cls = entity_class(METADATA, version, "MetadataRequestTopic")
    topic = messages.build(topic_cls, topic_id=uuid.UUID(int=0), name=None)
    entity = messages.build(cls, topics=(topic,))
    assert read(METADATA, version, messages.encode(entity)).topics[0].name is None


def test_null_required_string_and_bad_lengths_are_refused():
    # DeleteTopics v1: topic_names [string], timeout int32
    with pytest.raises(MalformedRequest, match="length -1"):
        read(DELETE_TOPICS, 1, struct.pack(">ih", 1, -1) + struct.pack(">i", 5000))
    with pytest.raises(MalformedRequest, match="length -2"):
        read(DELETE_TOPICS, 1, struct.pack(">ih", 1, -2) + struct.pack(">i", 5000))
    with pytest.raises(MalformedRequest, match="array length -2"):
        read(DELETE_TOPICS, 1, struct.pack(">i", -2) + struct.pack(">i", 5000))
    with pytest.raises(MalformedRequest, match="needs 5 bytes"):
        read(DELETE_TOPICS, 1, struct.pack(">ih", 1, 5) + b"abc")
    with pytest.raises(MalformedRequest, match="UTF-8"):
        read(DELETE_TOPICS, 1, struct.pack(">ih", 1, 2) + b"\xff\xfe" + struct.pack(">i", 5000))


@pytest.mark.parametrize("varint,message", [
    (b"\x80\x80\x80\x80\x80\x01", "longer than 5 bytes"),
    (b"\xff\xff\xff\xff\x0f", "does not fit an int32"),
    (b"\x80\x80", "runs past the end"),
])
def test_bad_varints_are_refused(varint, message):
    with pytest.raises(MalformedRequest, match=message):
        read(METADATA, 12, varint)


def _metadata_v12_body(names, topic_tags=b"\x00", top_tags=b"\x00") -> bytes:
    out = uvarint(len(names) + 1)
    for name in names:
        out += bytes(16) + uvarint(len(name) + 1) + name + topic_tags
    return out + b"\x00\x00" + top_tags  # allow_auto_topic_creation, include_topic_authorized_operations


def test_unknown_tags_are_dropped_at_every_depth():
    plain = read(METADATA, 12, _metadata_v12_body([b"a", b"b"]))
    assert [t.name for t in plain.topics] == ["a", "b"]
    topic_tags = b"\x02\x05\x02hi\x63\x00"  # two unknown tags in each topic: 5 ("hi") and 99 (empty)
    nested = _metadata_v12_body([b"a", b"b"], topic_tags=topic_tags, top_tags=b"\x01\x63\x03abc")
    body, offset = check(messages.request_class(METADATA, 12), nested)
    assert offset == 0 and body == _metadata_v12_body([b"a", b"b"])
    assert read(METADATA, 12, nested) == plain


def _fetch_v15(**kw):
    cls = messages.request_class(FETCH, 15)
    return cls, messages.build(cls, max_wait=datetime.timedelta(milliseconds=500), min_bytes=1,
                               max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                               topics=(), forgotten_topics_data=(), rack_id="", **kw)


def test_an_unknown_tag_inside_a_known_tagged_struct_resizes_it():
    state_cls = entity_class(FETCH, 15, "ReplicaState")
    cls, entity = _fetch_v15(replica_state=state_cls(replica_id=7, replica_epoch=3), cluster_id="c1")
    body = messages.encode(entity)
    state = struct.pack(">iq", 7, 3) + b"\x00"  # replica_id int32, replica_epoch int64, no tags
    assert uvarint(1) + uvarint(len(state)) + state in body
    grown = state[:-1] + b"\x01\x63\x02zz"
    patched = body.replace(uvarint(1) + uvarint(len(state)) + state, uvarint(1) + uvarint(len(grown)) + grown)
    assert patched != body
    guarded, _ = check(cls, patched)
    assert guarded == body
    assert read(FETCH, 15, patched) == entity


def test_a_known_tag_whose_size_lies_is_refused():
    cls, entity = _fetch_v15(cluster_id="c1")
    body = messages.encode(entity)
    good = b"\x01\x00\x03\x03c1"  # one tag: tag 0, size 3, compact string "c1"
    assert body.endswith(good)
    with pytest.raises(MalformedRequest, match="declares 4 bytes"):
        check(cls, body[: -len(good)] + b"\x01\x00\x04\x03c1x")
    with pytest.raises(MalformedRequest, match="runs past the end"):
        check(cls, body[: -len(good)] + b"\x01\x00\x09\x03c1")
    with pytest.raises(MalformedRequest, match="tagged fields"):
        check(cls, body[: -len(good)] + b"\x7f")


def test_bools_other_than_0_and_1_read_as_true():
    # Kafka: readByte() != 0; kio refuses anything but 0 and 1, so the guard rewrites them
    body = _metadata_v12_body([b"a"])
    body = body[:-3] + b"\x02\xff" + body[-1:]
    r = read(METADATA, 12, body)
    assert r.allow_auto_topic_creation is True and r.include_topic_authorized_operations is True


def test_a_retention_time_beyond_timedelta_is_clamped():
    cls = messages.request_class(OFFSET_COMMIT, 2)
    entity = messages.build(cls, group_id="g", generation_id=-1, member_id="",
                            retention_time=datetime.timedelta(milliseconds=-1), topics=())
    body = messages.encode(entity)
    at = body.index(struct.pack(">q", -1))
    for ms in (2**63 - 1, -(2**63)):
        r = read(OFFSET_COMMIT, 2, body[:at] + struct.pack(">q", ms) + body[at + 8:])
        assert abs(r.retention_time) > datetime.timedelta(days=100_000_000)  # 292 000 years


def test_produce_records_are_length_checked_only():
    cls = messages.request_class(PRODUCE, 9)
    entity = messages.build(cls, transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
                            topic_data=())
    topic_cls = entity_class(PRODUCE, 9, "TopicProduceData")
    part_cls = entity_class(PRODUCE, 9, "PartitionProduceData")
    records = bytes(range(256)) * 400  # not a record batch: the codec judges it later
    entity = replace(entity, topic_data=(messages.build(topic_cls, name="t", partition_data=(
        messages.build(part_cls, index=0, records=records),)),))
    body = messages.encode(entity)
    assert check(cls, body) == (body, 0)
    cut = body.index(records) - 1  # the compact length varint ends just before the records
    with pytest.raises(MalformedRequest, match="needs"):
        check(cls, body[: cut + 1] + records[:-1])


def test_a_client_id_that_is_not_utf8_is_read_with_replacements():
    # Kafka reads header strings as new String(bytes, UTF_8): bad bytes become U+FFFD
    from headwater.codec.kafka.framing import decode_request_header

    frame = struct.pack(">hhih", METADATA, 1, 9, 8) + b"\xff\xfeclient" + struct.pack(">i", -1)
    header, pos = decode_request_header(frame, False)
    assert header.client_id == "\ufffd\ufffdclient" and pos == 18
    assert read(METADATA, 1, frame[pos:]).topics is None
