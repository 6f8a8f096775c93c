"""The Fetch conversion cache: content-keyed, bounded, never serving another batch's records."""

from __future__ import annotations

from headwater.codec.batch import Message, build_batch, slice_batch, stamp
from headwater.codec.kafka.convert import iggy_to_kafka
from headwater.frontends.kafka.handlers.fetch import ConversionCache


def stored(payloads, base_offset=10) -> bytes:
    b = bytearray(build_batch([Message(p, origin_timestamp=1_700_000_000_000_000 + i) for i, p in enumerate(payloads)]))
    stamp(b, 0, base_offset, 1_700_000_000_000_000)
    return bytes(b)


def test_a_batch_converts_once_and_equals_the_conversion():
    cache = ConversionCache()
    batch = stored([b"a", b"b", b"c"])
    first = cache.convert(batch)
    assert first == iggy_to_kafka(batch, partition_leader_epoch=0)
    assert cache.convert(bytearray(batch)) is first  # same content, any buffer type: no second conversion


def test_slices_and_other_batches_get_their_own_conversion():
    cache = ConversionCache()
    batch = stored([b"x1", b"x2", b"x3"])
    other = stored([b"y1", b"y2", b"y3"])  # same offsets and sizes, other content
    for b in (batch, slice_batch(batch, 0, 2), slice_batch(batch, 1, 3), other):
        assert cache.convert(b) == iggy_to_kafka(b, partition_leader_epoch=0)


def test_the_cache_stays_within_its_bound():
    one = len(iggy_to_kafka(stored([b"z" * 100]), partition_leader_epoch=0))
    cache = ConversionCache(max_bytes=3 * one)
    for offset in range(10):
        cache.convert(stored([b"z" * 100], base_offset=offset))
        assert cache.size <= 3 * one
    assert cache.size == 3 * one
