"""UpdateTopic's durability keys reach the live partition logs: a topic created without
``enforce_fsync`` (over Kafka, say, whose configs do not map it) gets it later, and its next
append is acknowledged only after a sync; turned off again, appends no longer wait.

Real broker, real local engine in ``tmp_path``, a real event loop (the group commit's futures).
"""

from __future__ import annotations

import asyncio

import pytest

from headwater.codec.batch import Message, build_batch
from headwater.core import errors
from headwater.core.broker import Broker
from headwater.storage.api import open_engine


def batch(*payloads: bytes) -> bytearray:
    return bytearray(build_batch([Message(p) for p in payloads]))


def test_enforce_fsync_turned_on_and_off_by_an_update(tmp_path):
    async def go():
        b = Broker(open_engine(str(tmp_path)))
        b.create_stream("s")
        t = b.create_topic("s", "t", 2, {})
        p = t.partitions[0]
        assert b.append(p, batch(b"before")).durable is None  # default policy: no wait
        b.update_topic("s", "t", "t", {"enforce_fsync": True})
        assert all(q.log.policy.enforce_fsync for q in t.partitions.values())
        done = b.append(p, batch(b"waits"))
        assert done.durable is not None  # acknowledged only once a sync covering it returned
        await done.durable
        b.update_topic("s", "t", "t", {"enforce_fsync": False, "messages_required_to_save": 7})
        assert b.append(p, batch(b"after")).durable is None
        assert p.log.policy.messages_required_to_save == 7
        b.update_topic("s", "t", "t", {"durability": "persisted"})
        assert b.append(t.partitions[1], batch(b"persisted")).durable is not None
        with pytest.raises(errors.UnsupportedOptionKey, match="create-only"):
            b.update_topic("s", "t", "t", {"segment_size": "16 MiB"})
        await asyncio.sleep(0)
        b.close()
        again = Broker(open_engine(str(tmp_path)))  # the updated options were saved
        t2 = again.topic("s", "t")
        assert t2.options.durability == "persisted" and t2.options.messages_required_to_save == 7
        assert t2.partitions[0].log.policy.enforce_fsync
        again.close()

    asyncio.run(go())
