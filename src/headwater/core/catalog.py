"""The catalog: streams > topics > partitions, with 0-based ids and unique names.

Plain records; the broker owns the changes and their persistence. A name is
1-255 bytes of UTF-8, unique among its siblings. Ids are 0-based; a new id is
one past the highest in use (an id is reused only after the highest one is deleted).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import errors
from .groups.assigned import AssignedGroup
from .partition import Partition


def validate_name(name: str, what: str, exc: type[errors.BrokerError]) -> None:
    raw = name.encode()
    if not 1 <= len(raw) <= 255:
        raise exc(f"{what} name must be 1-255 bytes of UTF-8, got {len(raw)}")
    if any(ch in name for ch in "\x00/\\") or name.strip() != name or not name.isprintable():
        raise exc(f"{what} name {name!r} has a forbidden character")


def next_id(existing) -> int:
    return max(existing, default=-1) + 1


@dataclass(eq=False)
class Topic:
    stream_id: int
    id: int
    name: str
    created_at_us: int
    options: object  # core.topic_options.TopicOptions
    partitions: dict[int, Partition] = field(default_factory=dict)
    groups: dict[int, AssignedGroup] = field(default_factory=dict)
    balanced_counter: int = 0

    @property
    def size_bytes(self) -> int:
        return sum(p.size_bytes for p in self.partitions.values())

    @property
    def messages_count(self) -> int:
        return sum(p.messages_count for p in self.partitions.values())

    def partition(self, partition_id: int) -> Partition:
        p = self.partitions.get(partition_id)
        if p is None:
            raise errors.PartitionNotFound(
                f"partition {partition_id} not found in topic {self.id} of stream {self.stream_id}"
            )
        return p

    def group(self, ident: int | str) -> AssignedGroup:
        if isinstance(ident, int):
            g = self.groups.get(ident)
        else:
            g = next((g for g in self.groups.values() if g.name == ident), None)
        if g is None:
            raise errors.ConsumerGroupNotFound(f"consumer group {ident!r} not found in topic {self.name!r}")
        return g

    def find_group(self, ident: int | str) -> AssignedGroup | None:
        try:
            return self.group(ident)
        except errors.ConsumerGroupNotFound:
            return None

    def to_dict(self) -> dict:
        return {
            "stream_id": self.stream_id,
            "id": self.id,
            "name": self.name,
            "created_at_us": self.created_at_us,
            "options": self.options.to_dict(),
            "partitions": {str(p.id): p.created_at_us for p in self.partitions.values()},
        }


@dataclass(eq=False)
class Stream:
    id: int
    name: str
    created_at_us: int
    topics: dict[int, Topic] = field(default_factory=dict)

    @property
    def size_bytes(self) -> int:
        return sum(t.size_bytes for t in self.topics.values())

    @property
    def messages_count(self) -> int:
        return sum(t.messages_count for t in self.topics.values())

    def topic(self, ident: int | str) -> Topic:
        if isinstance(ident, int):
            t = self.topics.get(ident)
        else:
            t = next((t for t in self.topics.values() if t.name == ident), None)
        if t is None:
            raise errors.TopicNotFound(f"topic {ident!r} not found in stream {self.name!r}")
        return t

    def to_dict(self) -> dict:
        return {"id": self.id, "name": self.name, "created_at_us": self.created_at_us}


@dataclass
class Catalog:
    streams: dict[int, Stream] = field(default_factory=dict)
    generation: int = 0
    """Bumped by :meth:`changed` whenever a stream or topic is added, removed or renamed: caches
    keyed by names (the Kafka front-end's :class:`~headwater.frontends.kafka.names.Names`, and
    :meth:`topic`'s own) are valid while it stays the same."""
    _found: dict = field(default_factory=dict, repr=False)
    """``(stream ident, topic ident) -> Topic`` for :meth:`topic`, idents as the caller gave them
    (id or name): a request's lookup is one dict get, not a scan of the siblings' names. Emptied
    by :meth:`changed`; only topics found are kept."""

    def changed(self) -> None:
        """A stream or topic was added, removed or renamed (the broker calls this after each,
        and after loading the catalog at boot)."""
        self.generation += 1
        self._found.clear()

    def stream(self, ident: int | str) -> Stream:
        if isinstance(ident, int):
            s = self.streams.get(ident)
        else:
            s = next((s for s in self.streams.values() if s.name == ident), None)
        if s is None:
            raise errors.StreamNotFound(f"stream {ident!r} not found")
        return s

    def topic(self, stream: int | str, topic: int | str) -> Topic:
        """The topic ``topic`` (id or name) of stream ``stream`` (id or name).

        Raises StreamNotFound / TopicNotFound. Every send and poll looks its topic up here."""
        key = (stream, topic)
        t = self._found.get(key)
        if t is None:
            t = self._found[key] = self.stream(stream).topic(topic)
            if len(self._found) > 4096:  # idents from clients: bounded whatever they send
                self._found.clear()
                self._found[key] = t
        return t
