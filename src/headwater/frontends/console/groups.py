"""Consumer groups of both protocols as the console lists them, with lag per partition.

Iggy consumer groups (server-assigned, :class:`headwater.core.groups.assigned.AssignedGroup`:
members are client ids holding partition ids) and Kafka groups (the classic protocol's
:class:`~headwater.core.groups.classic.GroupCoordinator`: members with their leader-chosen
assignment bytes) share their committed offsets by name (``core.offsets`` kind ``GROUP``), so a
group is one row per name: its members from whichever protocol has them, and its lag from the
shared offsets. Lag = high watermark - committed next offset (never below 0).

A Kafka member's assignment is the consumer protocol's ``ConsumerProtocolAssignment``
(big-endian: version i16, topics array i32 count of [topic string (i16 length, UTF-8),
partitions array i32 count of i32], user_data bytes i32 length), as
``org.apache.kafka.clients.consumer.internals.ConsumerProtocol`` writes it for protocol type
``consumer``; anything else is shown as hex.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ...core.broker import Broker
from ...core.catalog import Topic
from ...core.groups.classic import GroupCoordinator
from ...core.offsets import GROUP
from ...core.partition import Partition

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass
class Lag:
    topic: Topic
    partition: Partition
    committed: int
    high_watermark: int

    @property
    def lag(self) -> int:
        return max(0, self.high_watermark - self.committed)


@dataclass
class Member:
    id: str
    client: str
    assignment: str


@dataclass
class GroupRow:
    name: str
    protocols: list[str]
    state: str
    members: list[Member] = field(default_factory=list)
    lags: list[Lag] = field(default_factory=list)


def lags(broker: Broker, kind: str, name: str) -> list[Lag]:
    """Every committed offset of one consumer (``kind`` GROUP or CONSUMER) with its lag."""
    return [Lag(t, p, c.offset, p.high_watermark) for t, p, c in broker.committed_of(kind, name)]


def consumer_assignment(data: bytes) -> str:
    """``topic: [partitions]; ...`` of a ConsumerProtocolAssignment, or its hex."""
    try:
        pos = 2  # version
        (count,) = _I32.unpack_from(data, pos)
        pos += 4
        out = []
        for _ in range(count):
            (n,) = _I16.unpack_from(data, pos)
            topic = data[pos + 2 : pos + 2 + n].decode()
            pos += 2 + n
            (pc,) = _I32.unpack_from(data, pos)
            parts = struct.unpack_from(f">{pc}i", data, pos + 4)
            pos += 4 + 4 * pc
            out.append(f"{topic}: {list(parts)}")
        return "; ".join(out) or "(none)"
    except (struct.error, UnicodeDecodeError, ValueError):
        return data.hex(" ") or "(none)"


def group_rows(broker: Broker, coordinator: GroupCoordinator | None) -> list[GroupRow]:
    """One row per group name known to either protocol or holding committed offsets."""
    rows: dict[str, GroupRow] = {}

    def row(name: str) -> GroupRow:
        if name not in rows:
            rows[name] = GroupRow(name, [], "Empty")
        return rows[name]

    for s in broker.catalog.streams.values():
        for t in s.topics.values():
            for g in t.groups.values():
                r = row(g.name)
                r.protocols.append(f"iggy ({s.name}/{t.name}, generation {g.generation})")
                if g.members:
                    r.state = "Stable"
                for member_id, parts in g.members.items():
                    client = broker.clients.get(member_id)
                    r.members.append(Member(str(member_id), client.address if client else "?",
                                            f"{s.name}/{t.name}: {sorted(parts)}"))
    if coordinator is not None:
        for name in coordinator.names():
            d = coordinator.describe(name)
            if d is None:
                continue
            r = row(name)
            r.protocols.append(f"kafka ({d.protocol_type or 'no protocol'}, generation {d.generation_id})")
            r.state = d.state.value
            for m in d.members:
                assignment = consumer_assignment(m.assignment) if d.protocol_type == "consumer" else m.assignment.hex(" ")
                r.members.append(Member(m.member_id, f"{m.client_id} {m.client_host}", assignment))
    for name in broker.committed_names(GROUP):
        row(name)
    for r in rows.values():
        r.lags = lags(broker, GROUP, r.name)
    return sorted(rows.values(), key=lambda r: r.name)
