"""kafka-python group members for tests: a subscribed ``KafkaConsumer`` that knows its topics'
partitions before it first joins its group (imported by tests as ``kafka_python_group``).

Why not a bare ``KafkaConsumer(topic, group_id=...)``: kafka-python (3.0.12) sends its first
JoinGroup without waiting for the subscribed topics' metadata. A server that completes the
first join at once (group initial rebalance delay 0, as several test servers are configured)
makes the member leader before that metadata is in: it assigns from an empty cache ("No
partition metadata for topic ...", every member assigned nothing) and rejoins when the
metadata arrives. kafka-python can lose that second join. Its ``need_rejoin()`` asks for it
only while the leader's assignment snapshot differs from the metadata snapshot, without
recording the need (``rejoin_needed`` stays False), and the leader's ``_perform_assignment``
takes the new snapshot in the middle of the join, before the SyncGroup is answered. A
``poll()`` whose timeout ends in that gap returns early with the join still running, and no
later ``poll()`` comes back for its result: the consumer stays without an assignment and
without heartbeats, the server expires the member after its session timeout, and its
LeaveGroup at ``close()`` is answered UNKNOWN_MEMBER_ID. Under CPU load a short poll timeout
falls in that gap now and then. Java's consumer had the same gap (KAFKA-9815: a metadata
change now sets ``rejoinNeeded``). With the partitions known first, the first assignment is
whole and the snapshots already agree, so that second join never happens.
"""

from __future__ import annotations

from typing import Iterable


def subscriber(topics: str | Iterable[str], **config):
    """A ``KafkaConsumer`` subscribed to ``topics`` (``config`` as for ``KafkaConsumer``,
    with a ``group_id``) that has each topic's partitions in its metadata before its first
    ``poll()``; fails when a topic has none."""
    from kafka import KafkaConsumer

    names = [topics] if isinstance(topics, str) else list(topics)
    c = KafkaConsumer(*names, **config)
    try:
        for name in names:
            assert c.partitions_for_topic(name), f"kafka-python sees no partitions of topic {name!r}"
    except BaseException:
        c.close()
        raise
    return c
