"""codec.kafka.produce against kio (the general path), property-tested.

- every Produce v3-v12 request kio writes is read by ``parse_request`` with the same fields,
  the records as a memoryview over the same bytes;
- on mutated bodies ``parse_request`` either declines (None) or agrees with what the general
  path (``messages.decode``: guard + kio) reads;
- ``encode_response`` writes the bytes kio writes for the same all-success response.
"""

from __future__ import annotations

import datetime
import io

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer

from headwater.codec.kafka import messages
from headwater.codec.kafka.produce import encode_response, parse_request

VERSIONS = st.integers(3, 12)
NAMES = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
RECORDS = st.one_of(st.none(), st.binary(max_size=64))


def _request(version: int, txn, acks: int, timeout_ms: int, topics):
    mod = messages.request_module(0, version)
    td = tuple(
        mod.TopicProduceData(name=name, partition_data=tuple(
            mod.PartitionProduceData(index=i, records=r) for i, r in parts))
        for name, parts in topics
    )
    return messages.request_class(0, version)(
        transactional_id=txn, acks=acks, timeout=datetime.timedelta(milliseconds=timeout_ms), topic_data=td)


def _body(entity) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def _same(fast, general) -> None:
    assert fast.transactional_id == general.transactional_id
    assert fast.acks == general.acks
    assert datetime.timedelta(milliseconds=fast.timeout_ms) == general.timeout
    assert len(fast.topic_data) == len(general.topic_data)
    for ft, gt in zip(fast.topic_data, general.topic_data):
        assert ft.name == gt.name
        assert len(ft.partition_data) == len(gt.partition_data)
        for fp, gp in zip(ft.partition_data, gt.partition_data):
            assert fp.index == gp.index
            if gp.records is None:
                assert fp.records is None
            else:
                assert isinstance(fp.records, memoryview) and bytes(fp.records) == bytes(gp.records)


TOPICS = st.lists(st.tuples(NAMES, st.lists(st.tuples(st.integers(-2**31, 2**31 - 1), RECORDS), max_size=3)),
                  max_size=3)
REQUESTS = st.tuples(VERSIONS, st.one_of(st.none(), NAMES), st.integers(-2**15, 2**15 - 1),
                     st.integers(0, 2**31 - 1), TOPICS)


@given(REQUESTS, st.binary(max_size=4))
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_reads_what_kio_writes(req, prefix):
    version = req[0]
    body = _body(_request(*req))
    frame = prefix + body + b"trailing"  # the header before the body, bytes after it ignored
    fast = parse_request(frame, len(prefix), version)
    assert fast is not None
    _same(fast, messages.decode(messages.request_class(0, version), frame, len(prefix)))


@given(REQUESTS, st.data())
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_bodies_decline_or_agree(req, data):
    version = req[0]
    body = bytearray(_body(_request(*req)))
    for _ in range(data.draw(st.integers(1, 4))):
        how = data.draw(st.sampled_from(("flip", "cut", "insert")))
        if how == "flip" and body:
            i = data.draw(st.integers(0, len(body) - 1))
            body[i] = data.draw(st.integers(0, 255))
        elif how == "cut" and body:
            del body[data.draw(st.integers(0, len(body) - 1)):]
        else:
            i = data.draw(st.integers(0, len(body)))
            body[i:i] = data.draw(st.binary(min_size=1, max_size=3))
    frame = bytes(body)
    fast = parse_request(frame, 0, version)
    try:
        general = messages.decode(messages.request_class(0, version), frame, 0)
    except Exception:
        assert fast is None, "the fast path accepted a body the general path refuses"
        return
    if fast is not None:
        _same(fast, general)


def test_declines_versions_it_does_not_read():
    assert parse_request(b"\x00" * 32, 0, 2) is None
    assert parse_request(b"\x00" * 32, 0, 13) is None


def test_declines_tagged_fields():
    body = bytearray(_body(_request(9, None, -1, 1000, [("t", [(0, b"abc")])])))
    assert parse_request(bytes(body), 0, 9) is not None
    body[-1] = 1  # one top-level tagged field follows
    body += b"\x05\x01\x00"
    assert parse_request(bytes(body), 0, 9) is None


@given(VERSIONS, st.lists(st.tuples(NAMES, st.lists(st.tuples(st.integers(-2**31, 2**31 - 1),
                                                                  st.integers(-1, 2**63 - 1),
                                                                  st.integers(-1, 2**63 - 1)), max_size=3)),
                          max_size=3))
@settings(max_examples=300)
def test_response_bytes_equal_kio(version, topics):
    mod = messages.response_module(0, version)
    responses = tuple(
        messages.build(mod.TopicProduceResponse, name=name, partition_responses=tuple(
            messages.build(mod.PartitionProduceResponse, index=i, error_code=0, base_offset=base, log_append_time=-1,
                           log_start_offset=start, record_errors=(), error_message=None)
            for i, base, start in parts))
        for name, parts in topics
    )
    general = messages.encode(messages.build(messages.response_class(0, version), responses=responses, throttle_time=0))
    assert encode_response(version, topics) == general
