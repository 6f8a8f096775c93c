"""Server-assigned consumer groups (Iggy's model).

The server owns the assignment: members are connected clients; each change of
membership or of the topic's partition count starts a new *generation* and
deals the partitions round-robin over the members in join order (member i gets
partitions i, i + n, i + 2n, ... of the sorted partition ids). A member polls
without naming a partition; the group hands it its assigned partitions in
turn. Pure state: no clock, no I/O.

Source: Iggy ``binary-protocol/commands.mdx`` (Consumer groups) and the
``SyncConsumerGroup`` reply (generation u64 + partition ids) in
``core/binary_protocol/src/responses/consumer_groups/``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False)
class AssignedGroup:
    id: int
    name: str
    generation: int = 0
    members: dict[int, list[int]] = field(default_factory=dict)  # member id -> partition ids
    _cursor: dict[int, int] = field(default_factory=dict)  # member id -> next index into its list

    def join(self, member_id: int, partition_ids: list[int]) -> bool:
        """Add a member; returns False when it was already one (no rebalance)."""
        if member_id in self.members:
            return False
        self.members[member_id] = []
        self.rebalance(partition_ids)
        return True

    def leave(self, member_id: int, partition_ids: list[int]) -> bool:
        """Remove a member; returns False when it was not one."""
        if member_id not in self.members:
            return False
        del self.members[member_id]
        self._cursor.pop(member_id, None)
        self.rebalance(partition_ids)
        return True

    def rebalance(self, partition_ids: list[int]) -> None:
        """Deal ``partition_ids`` round-robin over the members in join order; next generation."""
        order = list(self.members)
        n = len(order)
        for m in order:
            self.members[m] = []
        if n:
            for i, pid in enumerate(sorted(partition_ids)):
                self.members[order[i % n]].append(pid)
        self._cursor = {m: 0 for m in order}
        self.generation += 1

    def assignment(self, member_id: int) -> list[int] | None:
        return self.members.get(member_id)

    def next_partition(self, member_id: int) -> int | None:
        """The member's next partition to poll (round-robin over its assignment), or None."""
        parts = self.members.get(member_id)
        if not parts:
            return None
        i = self._cursor.get(member_id, 0) % len(parts)
        self._cursor[member_id] = i + 1
        return parts[i]
