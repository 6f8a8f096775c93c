"""``encode_fetch_response`` writes the same bytes as kio's generic encoder for every Fetch version
the broker answers (4-17), and kio reads them back to the same response.

The oracle is kio (``messages.encode`` of the equivalent entity, built with ``messages.build``
as the Fetch handler did before); hypothesis draws topics (by name and by id), partitions with
every field at its limits, null and present aborted-transaction lists, null, empty and
multi-batch records.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from headwater.codec.kafka import messages
from headwater.codec.kafka.fetch_response import Partition, Topic, encode_fetch_response

FETCH = 1
ERROR = st.sampled_from([int(e.value) for e in ErrorCode])  # kio knows only Kafka's codes
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)

partitions = st.builds(
    Partition,
    partition_index=I32,
    error_code=ERROR,
    high_watermark=I64,
    last_stable_offset=I64,
    log_start_offset=I64,
    aborted=st.none() | st.lists(st.tuples(I64, I64), max_size=4),
    preferred_read_replica=I32,
    records=st.none() | st.lists(st.binary(max_size=300), max_size=5),
)
topics = st.builds(
    Topic,
    name=st.text(max_size=40),
    topic_id=st.none() | st.builds(uuid.UUID, bytes=st.binary(min_size=16, max_size=16)),
    partitions=st.lists(partitions, max_size=4),
)


def kio_encoding(version: int, throttle: int, error_code: int, session_id: int, tops: list[Topic]) -> bytes:
    res = messages.response_module(FETCH, version)
    cls = messages.response_class(FETCH, version)

    def partition(p: Partition):
        return messages.build(
            res.PartitionData, partition_index=p.partition_index, error_code=p.error_code,
            high_watermark=p.high_watermark, last_stable_offset=p.last_stable_offset,
            log_start_offset=p.log_start_offset,
            aborted_transactions=None if p.aborted is None else tuple(
                messages.build(res.AbortedTransaction, producer_id=pid, first_offset=first) for pid, first in p.aborted),
            preferred_read_replica=p.preferred_read_replica,
            records=None if p.records is None else b"".join(p.records),
        )

    entity = messages.build(
        cls, throttle_time=throttle, error_code=error_code, session_id=session_id, node_endpoints=(),
        responses=tuple(
            messages.build(res.FetchableTopicResponse, topic=t.name, topic_id=t.topic_id,
                           partitions=tuple(partition(p) for p in t.partitions))
            for t in tops
        ),
    )
    return messages.encode(entity)


@settings(max_examples=60, deadline=None)
@given(version=st.integers(4, 17), throttle=st.integers(0, 2**31 - 1), error_code=ERROR, session_id=I32,
       tops=st.lists(topics, max_size=3))
def test_same_bytes_as_kio(version, throttle, error_code, session_id, tops):
    ours = encode_fetch_response(version, throttle, error_code, session_id, tops)
    assert isinstance(ours, bytes)
    assert ours == kio_encoding(version, throttle, error_code, session_id, tops)
    back = messages.decode(messages.response_class(FETCH, version), ours)
    assert len(back.responses) == len(tops)


@pytest.mark.parametrize("version", [4, 12, 13, 17])
def test_records_are_the_batches_concatenated(version):
    batches = [b"a" * 70, b"", b"b" * 200]  # 271 bytes: a two-byte compact length from v12
    t = Topic("t", uuid.UUID(int=7), [Partition(0, 0, 10, 10, 0, None, -1, batches)])
    body = encode_fetch_response(version, 0, 0, 0, [t])
    assert body.endswith(b"".join(batches) + (b"\x00\x00\x00" if version >= 12 else b""))
    back = messages.decode(messages.response_class(FETCH, version), body)
    assert back.responses[0].partitions[0].records == b"".join(batches)


@pytest.mark.parametrize("version", [3, 18])
def test_versions_outside_the_range_are_refused(version):
    with pytest.raises(ValueError, match=f"v{version}"):
        encode_fetch_response(version, 0, 0, 0, [])
