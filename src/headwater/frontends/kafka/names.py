"""Kafka topic names <-> Iggy (stream, topic), and Kafka topic ids.

The rule (also in ``docs/kafka-mapping.md``, "Topic names"):

1. A Kafka name ``N`` is first looked up as a topic named ``N`` in the Kafka
   stream (config ``kafka.stream``, default ``"kafka"``). Topics created
   through Kafka (CreateTopics, Metadata auto-creation) live there.
2. Otherwise, when ``N`` contains a dot, it is split at its *first* dot into
   ``S.T``: the Iggy topic ``T`` of the stream named ``S`` (never the Kafka
   stream itself, whose topics have only their bare names).
3. Nothing else resolves.

An Iggy topic ``T`` of stream ``S`` is therefore visible to Kafka as
``S.T`` when ``S`` has no dot, both names use only Kafka's characters
``[a-zA-Z0-9._-]`` and ``S.T`` is at most 249 characters. Through Kafka a
topic whose name would shadow a visible ``S.T`` cannot be created
(TOPIC_ALREADY_EXISTS); an Iggy topic created later under a name the Kafka
stream already holds stays hidden behind it (rule 1 wins).

Topic ids (Metadata v10+, Fetch v13+) are derived, not stored: the first 16
bytes of BLAKE2b over ``"<stream id>/<topic id>/<created_at_us>"``, so they
survive restarts and a deleted-and-recreated topic gets a new one.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import Iterator

from ...core import errors
from ...core.broker import Broker
from ...core.catalog import Stream, Topic

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def is_valid_name(name: str | None) -> bool:
    """Kafka's topic name rule: 1..249 of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``."""
    return (
        bool(name)
        and len(name) <= MAX_NAME_LENGTH  # type: ignore[arg-type]
        and name not in (".", "..")
        and _LEGAL.fullmatch(name) is not None  # type: ignore[arg-type]
    )


def topic_id(topic: Topic) -> uuid.UUID:
    digest = hashlib.blake2b(f"{topic.stream_id}/{topic.id}/{topic.created_at_us}".encode(), digest_size=16).digest()
    value = uuid.UUID(bytes=digest)
    return value if value.int else uuid.UUID(int=1)


class Names:
    """Name resolution over the broker's catalog for one Kafka stream name."""

    def __init__(self, broker: Broker, kafka_stream: str):
        self.broker = broker
        self.kafka_stream = kafka_stream
        self._found: dict[str, Topic] = {}  # names resolve() found, valid for one catalog generation
        self._generation = -1

    def stream(self) -> Stream | None:
        try:
            return self.broker.stream(self.kafka_stream)
        except errors.StreamNotFound:
            return None

    def resolve(self, name: str | None) -> Topic | None:
        """The topic a Kafka name denotes, or None.

        A dict lookup on the hot path (every Produce and Fetch names its topics): the topics
        found are kept until the catalog's ``generation`` moves (a stream or topic added,
        removed or renamed, through either protocol), then looked up afresh by the rules
        above. Names that resolve to nothing are not kept (a client can ask for any)."""
        if not name:
            return None
        catalog = self.broker.catalog
        if catalog.generation != self._generation:
            self._found.clear()
            self._generation = catalog.generation
        t = self._found.get(name)
        if t is None:
            t = self._lookup(name)
            if t is not None:
                self._found[name] = t
        return t

    def _lookup(self, name: str) -> Topic | None:
        own = self.stream()
        if own is not None:
            for t in own.topics.values():
                if t.name == name:
                    return t
        return self._iggy_topic(name)

    def _iggy_topic(self, name: str) -> Topic | None:
        s_name, dot, t_name = name.partition(".")
        if not dot or not s_name or not t_name or s_name == self.kafka_stream:
            return None
        if not is_valid_name(name):
            return None
        for s in self.broker.catalog.streams.values():
            if s.name == s_name:
                for t in s.topics.values():
                    if t.name == t_name:
                        return t
                return None
        return None

    def shadows(self, name: str) -> bool:
        """Whether a Kafka-stream topic called ``name`` would hide an Iggy topic ``S.T``."""
        return self._iggy_topic(name) is not None

    def name_of(self, topic: Topic) -> str | None:
        """The Kafka name of ``topic``, or None when Kafka cannot see it."""
        own = self.stream()
        if own is not None and topic.stream_id == own.id:
            return topic.name if is_valid_name(topic.name) else None
        s = self.broker.catalog.streams.get(topic.stream_id)
        if s is None or "." in s.name:
            return None
        name = f"{s.name}.{topic.name}"
        if not is_valid_name(name):
            return None
        return name if self.resolve(name) is topic else None

    def visible(self) -> Iterator[tuple[str, Topic]]:
        """Every topic Kafka can see, with its Kafka name: the Kafka stream's first."""
        own = self.stream()
        if own is not None:
            for t in sorted(own.topics.values(), key=lambda t: t.id):
                if is_valid_name(t.name):
                    yield t.name, t
        for s in sorted(self.broker.catalog.streams.values(), key=lambda s: s.id):
            if own is not None and s.id == own.id:
                continue
            for t in sorted(s.topics.values(), key=lambda t: t.id):
                name = self.name_of(t)
                if name is not None:
                    yield name, t

    def by_id(self, value: uuid.UUID) -> tuple[str, Topic] | None:
        for name, t in self.visible():
            if topic_id(t) == value:
                return name, t
        return None

    def create(self, name: str, partitions: int, options: dict) -> Topic:
        """Create a Kafka topic in the Kafka stream (created on demand).

        Raises InvalidTopicName, TopicNameExists (also when it would shadow an
        Iggy topic), TooManyPartitions, the options errors.
        """
        if not is_valid_name(name):
            raise errors.InvalidTopicName(f"{name!r} is not a valid Kafka topic name")
        if self.resolve(name) is not None:
            raise errors.TopicNameExists(f"topic {name!r} already exists")
        if partitions < 1:
            raise errors.InvalidPartitionsCount(f"a Kafka topic needs at least one partition, got {partitions}")
        own = self.stream()
        if own is None:
            own = self.broker.create_stream(self.kafka_stream)
        return self.broker.create_topic(own.id, name, partitions, options)
