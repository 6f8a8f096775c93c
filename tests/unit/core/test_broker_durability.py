"""Broker.append's durability result over a real local engine: what a front-end awaits
before acknowledging a batch of an ``enforce_fsync`` topic (and what it does not)."""

from __future__ import annotations

import asyncio

from headwater.codec.batch import Message, build_batch
from headwater.core.broker import Broker
from headwater.storage.api import open_engine


def batch(*payloads: bytes) -> bytearray:
    return bytearray(build_batch([Message(p) for p in payloads]))


def test_enforce_fsync_appends_return_what_to_await_and_a_retry_waits_for_the_original(tmp_path):
    b = Broker(open_engine(str(tmp_path)))
    s = b.create_stream("s")
    durable_topic = b.create_topic(s.id, "durable", 1, {"enforce_fsync": True})
    plain_topic = b.create_topic(s.id, "plain", 1, {})
    p = durable_topic.partitions[0]
    producer_id, epoch = b.producers.init_producer()

    async def go():
        done = b.append(p, batch(b"a"))
        assert done.base_offset == 0 and done.message_count == 1
        assert done.durable is not None and not done.durable.done()

        first = b.append_idempotent(durable_topic, p, batch(b"x", b"y"), producer_id, epoch, 0)
        retry = b.append_idempotent(durable_topic, p, batch(b"x", b"y"), producer_id, epoch, 0)
        assert not first.duplicate and retry.duplicate and retry.base_offset == first.base_offset == 1
        assert retry.durable is not None  # the original is not synced yet: the retry's answer waits too
        await asyncio.gather(done.durable, first.durable, retry.durable)

        again = b.append_idempotent(durable_topic, p, batch(b"x", b"y"), producer_id, epoch, 0)
        assert again.duplicate and again.durable is None  # nothing pending any more
        assert b.append(plain_topic.partitions[0], batch(b"p")).durable is None  # no enforce_fsync

    asyncio.run(go())
    flusher = b.engine.flusher
    assert flusher.acknowledged == 3 and flusher.failed == 0
    assert p.high_watermark == 3
    b.close()
