"""The broker: the one facade front-ends call. It knows batches, not protocols.

State lives in memory (catalog, users, groups, committed offsets) and is
persisted through the engine's metadata stores on every change (``catalog``
for streams/topics/groups/users/tokens, ``offsets`` for committed offsets);
messages live in the engine's partition logs. All methods are synchronous and
run on the event loop's thread; identifiers are ``int`` (0-based id) or
``str`` (name). Timestamps are microseconds since the Unix epoch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable

import xxhash

from ..codec import batch as batch_codec
from ..codec.errors import CodecError
from ..codec.record_key import compaction_key
from .. import metrics
from ..storage.api import CorruptSegment, NotCached, StorageEngine, StorageError, StorageWriteError
from . import catchup, errors
from .catalog import Catalog, Stream, Topic, next_id, validate_name
from .groups.assigned import AssignedGroup
from .offsets import CONSUMER, GROUP, Committed, OffsetStore
from . import metrics_source
from .partition import Appended, Partition, RefusingLog
from .acls import AclStore, Authorizer
from .permissions import Permissions
from .storage_health import GuardedStore, StorageHealth
from .producers import ProducerFenced, ProducerStates, UnknownProducer
from .transactions import Transactions, marker_payload
from .users import USER_ACTIVE, User, Users
from . import topic_options as topt

Ident = int | str
MAX_PARTITIONS = 1000

log = logging.getLogger("headwater.broker")

PROGRESS_SECONDS = 1.0
"""Boot: seconds between "opening partitions" progress lines while a large data directory opens."""


def now_us() -> int:
    return time.time_ns() // 1000


@dataclass(eq=False)
class Client:
    """A connected client (one connection), as GET_CLIENT(S) and groups see it."""

    id: int
    address: str
    transport: str
    user_id: int | None = None
    groups: set[tuple[int, int, int]] = field(default_factory=set)  # (stream, topic, group)


@dataclass
class Stats:
    streams: int
    topics: int
    partitions: int
    segments: int
    messages: int
    size_bytes: int
    clients: int
    consumer_groups: int
    started_at_us: int


class Broker:
    def __init__(
        self,
        engine: StorageEngine,
        *,
        validate_checksum: bool = True,
        clock: Callable[[], int] = now_us,
        transaction_max_timeout_ms: int = 900_000,
        transactional_id_expiration_ms: int = 604_800_000,
    ):
        self.engine = engine
        self.transaction_max_timeout_ms = transaction_max_timeout_ms
        self.transactional_id_expiration_ms = transactional_id_expiration_ms
        self.clock = clock
        self.validate_checksum = validate_checksum
        self.catalog = Catalog()
        self.health = StorageHealth(
            getattr(engine, "path", "?"), getattr(engine, "disk_usage", lambda: None), clock
        )
        self._meta = GuardedStore(engine.metadata("catalog"), self.health)
        self._offsets_meta = GuardedStore(engine.metadata("offsets"), self.health)
        self.users = Users(self._meta.put)
        self.offsets = OffsetStore(self._offsets_meta.put, self._offsets_meta.put_many)
        self.clients: dict[int, Client] = {}
        self._next_client_id = 1
        self._compacted_last = (-1, -1, -1)  # the log cleaner's round-robin position
        self._commit_us: dict[tuple[int, int, int, str, str], int] = {}  # last commit of an offset, this run
        self.started_at_us = clock()
        self._load()
        self._metrics_key = metrics_source.register(self)

    # ------------------------------------------------------------------ loading
    def _load(self) -> None:
        """Boot: load the catalog, sweep files it does not name, open its partitions
        (fencing those storage refuses), then drop committed offsets nothing can own."""
        records = self._meta.load()
        self.users.load(records)
        streams = sorted((v for k, v in records.items() if k.startswith("stream/")), key=lambda v: v["id"])
        for v in streams:
            self.catalog.streams[v["id"]] = Stream(v["id"], v["name"], v["created_at_us"])
        topics = sorted(
            (v for k, v in records.items() if k.startswith("topic/")), key=lambda v: (v["stream_id"], v["id"])
        )
        to_open: list[tuple[Topic, dict[str, int]]] = []
        for v in topics:
            stream = self.catalog.streams.get(v["stream_id"])
            if stream is None:
                continue
            options = topt.TopicOptions.from_dict(v["options"])
            topic = Topic(stream.id, v["id"], v["name"], v["created_at_us"], options)
            stream.topics[topic.id] = topic
            to_open.append((topic, v["partitions"]))
        self.catalog.changed()  # name lookups cached before the load (none, today) are dropped
        named = [(t.stream_id, t.id, int(pid)) for t, parts in to_open for pid in parts]
        if not records:  # a started server always has its root user: this catalog is new
            found = self.engine.retain([], dry_run=True)
            if found:
                raise StorageError(
                    f"the catalog is empty but the data directory holds message data ({', '.join(found[:3])}"
                    f"{', ...' if len(found) > 3 else ''}): the metadata store was lost? Restore the "
                    "data directory's metadata/ or remove its streams/; refusing to start"
                )
        if self._meta.torn_bytes or self._meta.damage:
            # the catalog lost its last record (a torn write, never acknowledged, or damage to the
            # file) or its journal is damaged: what it no longer names may hold acknowledged
            # messages: keep it for an operator
            why = self._meta.damage or "its journal ended in a torn record"
            for path in self.engine.retain(named, set_aside=True):
                log.error(
                    "set aside files the catalog does not name: " + why,
                    extra={"kv": {"path": path, "torn_bytes": self._meta.torn_bytes}},
                )
        else:
            for path in self.engine.retain(named):
                log.warning(
                    "removed files no catalog entry names (left by a delete a crash interrupted)",
                    extra={"kv": {"path": path}},
                )
        self._open_all(to_open)
        for k, v in records.items():
            if k.startswith("group/"):
                _, s, t, g = k.split("/")
                topic = self.catalog.streams.get(int(s), None)
                topic = topic.topics.get(int(t)) if topic else None
                if topic is not None:
                    topic.groups[int(g)] = AssignedGroup(int(g), v["name"])
        self.offsets.load(self._offsets_meta.load())
        self._drop_stale_offsets()

    def _open_all(self, to_open: list[tuple[Topic, dict[str, int]]]) -> None:
        """Boot: open every partition the catalog names (together: the engine syncs what the
        opens changed once at the end, see ``StorageEngine.opening_many``), logging progress
        at most every :data:`PROGRESS_SECONDS` while it takes that long, and a summary then."""
        total = sum(len(parts) for _, parts in to_open)
        t0 = last = time.monotonic()
        done = 0
        order = [(t.stream_id, t.id, pid) for t, parts in to_open for pid in sorted(int(p) for p in parts)]
        with self.engine.opening_many(order):
            for topic, parts in to_open:
                pids = sorted(int(p) for p in parts)
                for pid in pids:
                    self._open_partition(topic, pid, parts[str(pid)], len(pids), fence=True)
                    done += 1
                    now = time.monotonic()
                    if now - last >= PROGRESS_SECONDS:
                        last = now
                        log.info("opening partitions", extra={"kv": {"opened": done, "total": total,
                                                                     "seconds": round(now - t0, 1)}})
        took = time.monotonic() - t0
        if took >= PROGRESS_SECONDS:
            log.info("partitions opened", extra={"kv": {"opened": done, "seconds": round(took, 1)}})

    def _drop_stale_offsets(self) -> None:
        """Boot: drop committed offsets of partitions the catalog does not have, and
        offsets past their partition's end (not checked for fenced partitions).

        Deletes and purges remove offsets before the data, so these come only
        from a crash (or from a log that lost unsynced data): left in place, a
        later partition with the same ids would inherit them and its consumers
        would skip messages.
        """
        doomed = []
        for key, c in self.offsets.items():
            s, t, pid = key[:3]
            stream = self.catalog.streams.get(s)
            topic = stream.topics.get(t) if stream else None
            p = topic.partitions.get(pid) if topic else None
            if p is None:
                reason = "its partition does not exist"
            elif p.fenced is None and c.offset > p.high_watermark:
                reason = f"it is past the partition's end ({p.high_watermark})"
            else:
                continue
            log.warning(
                "dropped a stale committed offset",
                extra={"kv": {"stream": s, "topic": t, "partition": pid, "consumer_kind": key[3],
                              "consumer": key[4], "offset": c.offset, "reason": reason}},
            )
            doomed.append(key)
        self.offsets.delete_keys(doomed)

    def _open_partition(
        self, topic: Topic, pid: int, created_at_us: int, partitions_count: int, *, fence: bool = False
    ) -> Partition:
        """Open one partition's log and register it in ``topic``.

        Logs at warning what recovery changed on disk. With ``fence`` (boot), a
        partition storage refuses (CorruptSegment) is registered as fenced (a
        RefusingLog: its reads and writes fail) and logged at error; without, the
        error propagates.
        """
        policy = topic.options.to_segment_policy(partitions_count, self.validate_checksum)
        where = {"stream": topic.stream_id, "topic": topic.id, "partition": pid}
        try:
            # at boot (fence) the catalog names the partition: its directory must exist
            plog = self.engine.open_partition(topic.stream_id, topic.id, pid, policy, create=not fence)
        except CorruptSegment as e:
            if not fence:
                raise
            log.error(
                "partition fenced: storage refused to open it; its reads and writes fail until it is repaired",
                extra={"kv": {**where, "error": str(e)}},
            )
            plog = RefusingLog(str(e))
        else:
            outcome = plog.recovery_outcome
            if outcome:
                log.warning(
                    "recovery changed partition files: " + "; ".join(outcome.notes),
                    extra={"kv": {**where, "truncated_bytes": outcome.truncated_bytes,
                                  "rebuilt_indexes": outcome.rebuilt_indexes,
                                  "repaired_indexes": outcome.repaired_indexes,
                                  "removed_files": len(outcome.removed_files)}},
                )
        p = Partition(topic.stream_id, topic.id, pid, created_at_us, plog)
        floor = self._cluster_state.get(f"start/{topic.stream_id}/{topic.id}/{pid}")
        if floor and floor["c"] == topic.created_at_us:
            p.start_floor = floor["o"]  # the logical log start DeleteRecords set
        topic.partitions[pid] = p
        return p

    def _save_topic(self, topic: Topic) -> None:
        self._meta.put(f"topic/{topic.stream_id}/{topic.id}", topic.to_dict())

    def close(self) -> None:
        """Close every partition log and metadata store, then the engine. The engine
        closes the logs it opened itself, all together (their final syncs and
        clean-shutdown markers at once, not one partition after another)."""
        metrics_source.unregister(self._metrics_key)
        try:
            self.engine.close()
        finally:
            for s in self.catalog.streams.values():  # what the engine did not open (fenced partitions)
                for t in s.topics.values():
                    for p in t.partitions.values():
                        p.log.close()
            self._meta.close()
            self._offsets_meta.close()

    def sync(self) -> None:
        for s in self.catalog.streams.values():
            for t in s.topics.values():
                for p in t.partitions.values():
                    p.log.sync()

    # ------------------------------------------------------------------ root user
    def ensure_root(self, username: str, password: str) -> bool:
        """Create the root user (id 0) unless any user exists; returns True when created."""
        if self.users.users:
            return False
        self.users.create(username, password, USER_ACTIVE, None, self.clock(), user_id=0)
        return True

    # ------------------------------------------------------------------ clients
    def connect_client(self, address: str, transport: str) -> Client:
        c = Client(self._next_client_id, address, transport)
        self._next_client_id += 1
        self.clients[c.id] = c
        return c

    def disconnect_client(self, client_id: int) -> None:
        c = self.clients.pop(client_id, None)
        if c is None:
            return
        for s, t, g in list(c.groups):
            try:
                topic = self.catalog.topic(s, t)
                group = topic.group(g)
            except errors.BrokerError:
                continue
            group.leave(client_id, list(topic.partitions))

    def client(self, client_id: int) -> Client:
        c = self.clients.get(client_id)
        if c is None:
            raise errors.ClientNotFound(f"client {client_id} not found")
        return c

    # ------------------------------------------------------------------ streams
    def stream(self, ident: Ident) -> Stream:
        return self.catalog.stream(ident)

    def create_stream(self, name: str) -> Stream:
        validate_name(name, "stream", errors.InvalidStreamName)
        if any(s.name == name for s in self.catalog.streams.values()):
            raise errors.StreamNameExists(f"stream {name!r} already exists")
        s = Stream(next_id(self.catalog.streams), name, self.clock())
        self._meta.put(f"stream/{s.id}", s.to_dict())  # durable first: a failed write leaves no stream
        self.catalog.streams[s.id] = s
        self.catalog.changed()
        return s

    def update_stream(self, ident: Ident, name: str) -> Stream:
        s = self.stream(ident)
        validate_name(name, "stream", errors.InvalidStreamName)
        if name != s.name and any(o.name == name for o in self.catalog.streams.values()):
            raise errors.StreamNameExists(f"stream {name!r} already exists")
        self._meta.put(f"stream/{s.id}", {**s.to_dict(), "name": name})
        s.name = name
        self.catalog.changed()
        return s

    def delete_stream(self, ident: Ident) -> Stream:
        """Offsets go first, then the catalog entries (one atomic record), then the
        files: a crash at any point leaves nothing a later stream could inherit
        (files no catalog entry names are swept at boot)."""
        s = self.stream(ident)
        self.offsets.delete_where(s.id)
        records: dict[str, None] = {}
        for t in s.topics.values():
            records.update(self._topic_records(t))
        records[f"stream/{s.id}"] = None
        self._meta.put_many(records)
        for t in s.topics.values():
            self._forget_topic(t)
        del self.catalog.streams[s.id]
        self.catalog.changed()
        self._delete_files(self.engine.delete_stream, s.id)
        return s

    def purge_stream(self, ident: Ident) -> None:
        s = self.stream(ident)
        for t in s.topics.values():
            self._purge_topic(t)

    # ------------------------------------------------------------------ topics
    def topic(self, stream: Ident, topic: Ident) -> Topic:
        return self.catalog.topic(stream, topic)

    def create_topic(self, stream: Ident, name: str, partitions_count: int, options: dict[str, Any]) -> Topic:
        s = self.stream(stream)
        validate_name(name, "topic", errors.InvalidTopicName)
        if any(t.name == name for t in s.topics.values()):
            raise errors.TopicNameExists(f"topic {name!r} already exists in stream {s.name!r}")
        if not 0 <= partitions_count <= MAX_PARTITIONS:
            raise errors.TooManyPartitions(f"partitions_count {partitions_count} is not in 0..{MAX_PARTITIONS}")
        opts = self._parse_options(lambda: topt.TopicOptions.parse_create(options, partitions_count))
        now = self.clock()
        t = Topic(s.id, next_id(s.topics), name, now, opts)
        self._add_partitions(t, list(range(partitions_count)), now)
        s.topics[t.id] = t
        self.catalog.changed()
        return t

    def _add_partitions(self, t: Topic, pids: list[int], now: int) -> None:
        """Open new partitions ``pids`` of ``t`` and save the topic: all or nothing.

        A new partition adopts no files (a leftover directory with its ids is
        deleted first). On a filesystem error the partitions opened so far are
        closed and deleted, ``t`` is as before, and StorageFailure is raised. A
        crash part-way leaves directories the catalog does not name, which the
        boot sweep removes.
        """
        total = len(t.partitions) + len(pids)
        step = "saving the topic"
        try:
            for pid in pids:
                step = f"partition {pid}"
                self.engine.delete_partition(t.stream_id, t.id, pid)
                self._open_partition(t, pid, now, total)
            step = "saving the topic"
            self._apply_policy(t)
            self._save_topic(t)
        except (OSError, StorageError, errors.StorageWriteFailed) as e:
            if isinstance(e, StorageWriteError):  # a refused metadata write was recorded by its store
                self.health.write_failed("create partitions", str(e), e.no_space)
            self._discard_partitions(t, pids)
            self._apply_policy(t)
            log.error(
                "creating partitions failed on the filesystem; rolled back",
                extra={"kv": {"stream": t.stream_id, "topic": t.id, "step": step, "error": str(e)}},
            )
            raise errors.StorageFailure(
                f"cannot create {step} of topic {t.name!r}: {e} (nothing was created)"
                if step.startswith("partition")
                else f"cannot create partitions of topic {t.name!r}: {step} failed: {e} (nothing was created)"
            ) from e

    def _discard_partitions(self, t: Topic, pids: list[int]) -> None:
        """Roll back new partitions: close them and delete their files (best effort:
        what is left is not in the catalog, so the boot sweep removes it)."""
        for pid in pids:
            p = t.partitions.pop(pid, None)
            try:
                if p is not None:
                    p.log.close()
                self.engine.delete_partition(t.stream_id, t.id, pid)
            except (OSError, StorageError) as e:
                log.error(
                    "rollback could not delete a partition's files; the next boot removes them",
                    extra={"kv": {"stream": t.stream_id, "topic": t.id, "partition": pid, "error": str(e)}},
                )

    @staticmethod
    def _parse_options(fn):
        try:
            return fn()
        except topt.UnsupportedOptionKey as e:
            raise errors.UnsupportedOptionKey(str(e)) from e
        except topt.InvalidOptionValue as e:
            raise errors.InvalidOptionValue(str(e)) from e

    def update_topic(self, stream: Ident, topic: Ident, name: str, options: dict[str, Any]) -> Topic:
        s = self.stream(stream)
        t = s.topic(topic)
        validate_name(name, "topic", errors.InvalidTopicName)
        if name != t.name and any(o.name == name for o in s.topics.values()):
            raise errors.TopicNameExists(f"topic {name!r} already exists in stream {s.name!r}")
        old = (t.options, t.name)
        if options:
            t.options = self._parse_options(lambda: t.options.apply_update(options))
        t.name = name
        self.catalog.changed()
        try:
            self._save_topic(t)
        except errors.MetadataNotSaved:
            t.options, t.name = old  # not saved: nothing changes
            self.catalog.changed()
            raise
        if options:
            self._apply_policy(t)
        return t

    def _apply_policy(self, t: Topic) -> None:
        n = len(t.partitions)
        policy = t.options.to_segment_policy(max(n, 1), self.validate_checksum)
        for p in t.partitions.values():
            p.log.set_policy(policy)

    def delete_topic(self, stream: Ident, topic: Ident) -> Topic:
        s = self.stream(stream)
        t = s.topic(topic)
        self._drop_topic(s, t)
        return t

    def _drop_topic(self, s: Stream, t: Topic) -> None:
        """Offsets go first, then the catalog entries (one atomic record), then the
        files (a crash before that leaves files the boot sweep removes)."""
        self.offsets.delete_where(s.id, t.id)
        self._meta.put_many(self._topic_records(t))
        self._forget_topic(t)
        del s.topics[t.id]
        self.catalog.changed()
        self._delete_files(self.engine.delete_topic, s.id, t.id)

    def _delete_files(self, delete, *ids: int) -> None:
        """Delete files after the catalog dropped them: the delete is done by then, so a
        filesystem error is logged (the boot sweep removes what is left), not raised."""
        try:
            delete(*ids)
        except (OSError, StorageError) as e:
            log.error(
                "deleting files failed; the next boot removes them",
                extra={"kv": {"ids": "/".join(map(str, ids)), "error": str(e)}},
            )

    @staticmethod
    def _topic_records(t: Topic) -> dict[str, None]:
        """The catalog deletes that drop ``t`` and its consumer groups."""
        records: dict[str, None] = {f"group/{t.stream_id}/{t.id}/{g.id}": None for g in t.groups.values()}
        records[f"topic/{t.stream_id}/{t.id}"] = None
        return records

    def _forget_topic(self, t: Topic) -> None:
        """In memory: detach group members and close the partition logs of a dropped topic."""
        for g in t.groups.values():
            self._forget_group_members(t, g)
        for p in t.partitions.values():
            p.log.close()
            p.wake_listeners()
        self._forget_transactions(t)

    def _forget_transactions(self, t: Topic) -> None:
        if "transactions" in self.__dict__:
            for p in t.partitions.values():
                self.transactions.forget_partition((p.stream_id, p.topic_id, p.id))

    def purge_topic(self, stream: Ident, topic: Ident) -> None:
        self._purge_topic(self.topic(stream, topic))

    def _purge_topic(self, t: Topic) -> None:
        """Offsets go first (a crash mid-purge must not leave offsets past the new
        end), then each partition restarts empty at offset 0. A fenced partition
        is replaced by an empty one: purge is how its damaged files are dropped."""
        self.offsets.delete_where(t.stream_id, t.id)
        self._forget_transactions(t)
        for p in t.partitions.values():
            if p.fenced is None:
                try:
                    p.log.purge()
                except StorageError as e:  # emptied, but its new segment is made by the next append
                    no_space = getattr(e, "no_space", False)
                    self.health.write_failed("purge", str(e), no_space)
                    raise errors.MessagesNotSaved(f"purge could not start a new segment: {e}", no_space) from e
            else:
                self.engine.delete_partition(p.stream_id, p.topic_id, p.id)
                policy = t.options.to_segment_policy(max(len(t.partitions), 1), self.validate_checksum)
                p.log = self.engine.open_partition(p.stream_id, p.topic_id, p.id, policy)
                log.warning(
                    "purge replaced a fenced partition with an empty one",
                    extra={"kv": {"stream": p.stream_id, "topic": p.topic_id, "partition": p.id}},
                )
            p.reset()
            self._cluster_put(f"start/{p.stream_id}/{p.topic_id}/{p.id}", None)

    # ------------------------------------------------------------------ partitions, segments
    def create_partitions(self, stream: Ident, topic: Ident, count: int) -> list[int]:
        t = self.topic(stream, topic)
        if not 1 <= count <= MAX_PARTITIONS:
            raise errors.InvalidPartitionsCount(f"partitions_count {count} is not in 1..{MAX_PARTITIONS}")
        if len(t.partitions) + count > MAX_PARTITIONS:
            raise errors.TooManyPartitions(f"a topic has at most {MAX_PARTITIONS} partitions")
        start = next_id(t.partitions)
        new = list(range(start, start + count))
        self._add_partitions(t, new, self.clock())
        self._rebalance_groups(t)
        return new

    def delete_partitions(self, stream: Ident, topic: Ident, count: int) -> list[int]:
        t = self.topic(stream, topic)
        if not 1 <= count <= MAX_PARTITIONS or count > len(t.partitions):
            raise errors.InvalidPartitionsCount(
                f"cannot delete {count} of the {len(t.partitions)} partitions"
            )
        doomed = sorted(t.partitions)[-count:]
        # offsets first, then the catalog, then the files (see delete_stream)
        gone = set(doomed)
        self.offsets.delete_keys(
            [k for k, _ in self.offsets.items() if k[0] == t.stream_id and k[1] == t.id and k[2] in gone]
        )
        record = t.to_dict()
        record["partitions"] = {k: v for k, v in record["partitions"].items() if int(k) not in gone}
        self._meta.put(f"topic/{t.stream_id}/{t.id}", record)
        for pid in doomed:
            p = t.partitions.pop(pid)
            p.log.close()
            p.wake_listeners()
        self._apply_policy(t)
        for pid in doomed:
            self._delete_files(self.engine.delete_partition, t.stream_id, t.id, pid)
        self._rebalance_groups(t)
        return doomed

    def delete_segments(self, stream: Ident, topic: Ident, partition_id: int, count: int) -> int:
        t = self.topic(stream, topic)
        p = t.partition(partition_id)
        if count < 1:
            raise errors.InvalidSegmentsCount(f"segments_count {count} must be at least 1")
        deleted = p.log.delete_oldest_segments(count)
        if deleted:
            self.prune_transactions(p)
        return deleted

    def apply_retention(self) -> int:
        """Delete expired or oversized sealed segments everywhere (see the topic options);
        the transaction history they described is pruned. Returns the segments deleted."""
        now = self.clock()
        deleted = 0
        for s in self.catalog.streams.values():
            for t in s.topics.values():
                for p in t.partitions.values():
                    n = p.log.apply_retention(now)
                    if n:
                        deleted += n
                        self.prune_transactions(p)
        return deleted

    @staticmethod
    def check_compaction_keys(batch: bytearray | memoryview) -> None:
        """For a send to a compacted topic: every message needs a compaction key
        (:mod:`headwater.codec.record_key`: a ``kafka.key`` header or a nonzero
        message id). Raises InvalidBatch (Iggy 4, InvalidFormat) naming the first
        frame without one; the batch is not appended."""
        for index, frame in enumerate(batch_codec.iter_frames(batch)):
            if compaction_key(frame.user_headers, frame.id, frame.payload)[0] is None:
                raise errors.InvalidBatch(
                    f"message {index} has neither a kafka.key header nor a nonzero id: "
                    "a compacted topic keeps the newest message per key", 4
                )

    async def compact_once(self, max_dirty_bytes: int) -> int:
        """One run of the log cleaner: roll compacted topics' active segments whose
        ``segment_roll`` is due, then at most one compaction pass (the next partition
        due after the last one compacted, round robin); its reads and writes run in a
        worker thread, the swap back on the event loop. Only offsets below the
        partition's last stable offset are cleaned, and markers and aborted batches
        (:meth:`PartitionTxns.hidden`) are pinned: kept, never shadowing a committed
        message. Returns the messages removed."""
        now = self.clock()
        due = []
        for s in self.catalog.streams.values():
            for t in s.topics.values():
                if not t.options.compact and t.options.segment_roll_us is None:
                    continue
                for p in t.partitions.values():
                    if type(p.log) is RefusingLog:
                        continue
                    try:
                        p.log.roll_if_due(now)
                    except StorageError as e:
                        log.warning("segment roll failed", extra={"kv": {"partition": f"{t.stream_id}/{t.id}/{p.id}", "error": str(e)}})
                    if t.options.compact:
                        due.append(((t.stream_id, t.id, p.id), p))
        due.sort(key=lambda kp: (kp[0] <= self._compacted_last, kp[0]))
        for key, p in due:
            pt = self.transactions.peek(key)
            if pt is None:
                job = p.log.plan_compaction(now, max_dirty_bytes)
            else:  # Kafka's cleaner: never past the LSO; aborted data and markers shadow nothing
                pinned = [(first, last) for first, last, _ in pt.hidden()]
                job = p.log.plan_compaction(now, max_dirty_bytes, pt.last_stable_offset(p.high_watermark), pinned)
            if job is None:
                continue
            self._compacted_last = key
            done = None
            try:
                done = await asyncio.get_running_loop().run_in_executor(None, p.log.run_compaction, job)
            except (StorageError, OSError, InterruptedError) as e:
                log.warning("compaction pass abandoned", extra={"kv": {"partition": "/".join(map(str, key)), "error": str(e)}})
            finally:
                removed = p.log.finish_compaction(done)
            if removed:
                log.info("compacted", extra={"kv": {"partition": "/".join(map(str, key)), "removed": removed}})
            return removed
        return 0

    # ------------------------------------------------------------------ messages
    def route(self, topic: Topic, kind: str, value: int | bytes | None) -> Partition:
        """Pick the partition for a send: ``balanced`` (round-robin), ``partition`` (an id),
        or ``key`` (xxh3_64 of the key bytes modulo the partition count)."""
        if not topic.partitions:
            raise errors.NoPartitions(f"topic {topic.name!r} has no partitions")
        ids = sorted(topic.partitions)
        if kind == "partition":
            return topic.partition(int(value))  # type: ignore[arg-type]
        if kind == "key":
            return topic.partitions[ids[xxhash.xxh3_64_intdigest(value) % len(ids)]]  # type: ignore[arg-type]
        pid = ids[topic.balanced_counter % len(ids)]
        topic.balanced_counter += 1
        return topic.partitions[pid]

    def append(self, partition: Partition, batch: bytearray | memoryview, *, verified: bool = False) -> Appended:
        """Verify (unless already ``verified``), stamp and append one batch.

        Returns (base_offset, message_count, durable, duplicate=False): await
        ``durable`` (when not None) before acknowledging (see :class:`Appended`).
        Raises InvalidBatch carrying the Iggy batch error code, MessagesNotSaved
        when the filesystem refused the write (nothing of it is kept; see
        :mod:`.storage_health` for the logging) or a failed sync fenced the
        partition (storage's SyncFailed).
        """
        try:
            written = partition.append(batch, self.clock(), verified=verified)
        except CodecError as e:
            raise errors.InvalidBatch(str(e), e.code) from e
        except StorageWriteError as e:
            raise self._append_failed(str(e), e.no_space) from e
        except StorageError as e:  # e.g. a segment file in the way of a roll
            raise self._append_failed(str(e), False) from e
        except OSError as e:  # a sync after the write (the batch itself was written whole)
            where = f"partition {partition.stream_id}/{partition.topic_id}/{partition.id}"
            raise self._append_failed(f"{where}: sync after the append failed: {e}", False) from e
        health = self.health
        if health.error is not None:  # (write_succeeded: ends a failing episode, else nothing)
            health.write_succeeded()
        if written.durable is not None:
            written = written._replace(durable=asyncio.ensure_future(self._durable(partition, written.durable)))
        return written

    async def _durable(self, partition: Partition, pending) -> None:
        """Await storage's sync of an append, turning its failure (SyncFailed: the log
        is fenced) into MessagesNotSaved, logged as a storage episode."""
        try:
            await pending
        except StorageError as e:
            where = f"partition {partition.stream_id}/{partition.topic_id}/{partition.id}"
            raise self._append_failed(f"{where}: {e}", getattr(e, "no_space", False)) from e

    def _append_failed(self, error: str, no_space: bool) -> errors.MessagesNotSaved:
        self.health.write_failed("append", error, no_space)
        return errors.MessagesNotSaved(f"messages not saved: {error}", no_space)

    # ------------------------------------------------------------------ consumer offsets
    def committed(self, p: Partition, kind: str, name: str) -> int | None:
        c = self.offsets.get(p.stream_id, p.topic_id, p.id, kind, name)
        return None if c is None else c.offset

    def commit(self, p: Partition, kind: str, name: str, next_offset: int, metadata: str = "") -> None:
        self.offsets.put(p.stream_id, p.topic_id, p.id, kind, name, next_offset, metadata)
        self._commit_us[(p.stream_id, p.topic_id, p.id, kind, name)] = self.clock()

    def commit_many(self, kind: str, name: str, commits: list[tuple]) -> None:
        """Commit several partitions at once, atomically and with one durable write:
        ``(partition, next_offset or None to delete, metadata[, leader_epoch])``."""
        from .offsets import Committed

        changes = [
            ((c[0].stream_id, c[0].topic_id, c[0].id, kind, name),
             None if c[1] is None else Committed(c[1], c[2], c[3] if len(c) > 3 else -1))
            for c in commits
        ]
        self.offsets.put_many(changes)
        now = self.clock()
        for k, c in changes:
            if c is not None:
                self._commit_us[k] = now

    def expire_group_offsets(self, retention_ms: int, in_use: Callable[[str], bool]) -> list[tuple]:
        """Kafka's ``offsets.retention.minutes`` (KIP-211) for consumer-group offsets: delete
        (durably, 4096 per record) each group offset whose last commit is at least
        ``retention_ms`` old, unless ``in_use(group)`` (the Kafka group has members, or
        became Empty less than ``retention_ms`` ago), an Iggy consumer group of that name
        exists on the topic (Iggy never expires offsets), or an unfinished transaction holds
        an offset of the group for the partition. A commit's time is known for this run
        only: the server's start counts as the last commit of offsets loaded from disk, so
        a restart postpones expiry, never hastens it. Iggy single consumers' offsets never
        expire. Returns the keys deleted ``(stream, topic, partition, kind, name)``."""
        now = self.clock()
        limit = retention_ms * 1000
        tx = self.__dict__.get("transactions")
        pending: dict[str, set] = {}
        doomed = []
        for k, _c in self.offsets.items():
            s, t, p, kind, name = k
            if kind != GROUP or now - self._commit_us.get(k, self.started_at_us) < limit or in_use(name):
                continue
            topic = self.catalog.streams.get(s)
            topic = None if topic is None else topic.topics.get(t)
            if topic is not None and any(g.name == name for g in topic.groups.values()):
                continue
            if tx is not None:
                if name not in pending:
                    pending[name] = tx.pending_offsets(name)
                if (s, t, p) in pending[name]:
                    continue
            doomed.append(k)
        for i in range(0, len(doomed), 4096):
            self.offsets.delete_keys(doomed[i:i + 4096])
        live = dict(self.offsets.items())
        self._commit_us = {k: v for k, v in self._commit_us.items() if k in live}  # deleted offsets too
        return doomed

    def delete_committed(self, p: Partition, kind: str, name: str) -> bool:
        return self.offsets.delete(p.stream_id, p.topic_id, p.id, kind, name)

    # ------------------------------------------------------------------ consumer groups (server-assigned)
    def create_group(self, stream: Ident, topic: Ident, name: str) -> AssignedGroup:
        t = self.topic(stream, topic)
        validate_name(name, "consumer group", errors.InvalidConsumerGroupName)
        if any(g.name == name for g in t.groups.values()):
            raise errors.ConsumerGroupNameExists(f"consumer group {name!r} already exists")
        g = AssignedGroup(next_id(t.groups), name)
        self._meta.put(f"group/{t.stream_id}/{t.id}/{g.id}", {"name": name})
        t.groups[g.id] = g
        return g

    def delete_group(self, stream: Ident, topic: Ident, group: Ident) -> AssignedGroup:
        t = self.topic(stream, topic)
        g = t.group(group)
        self.offsets.delete_where(t.stream_id, t.id, kind=GROUP, name=g.name)
        self._meta.put(f"group/{t.stream_id}/{t.id}/{g.id}", None)
        self._forget_group_members(t, g)
        del t.groups[g.id]
        return g

    def _forget_group_members(self, t: Topic, g: AssignedGroup) -> None:
        for member in g.members:
            c = self.clients.get(member)
            if c:
                c.groups.discard((t.stream_id, t.id, g.id))

    def join_group(self, client_id: int, stream: Ident, topic: Ident, group: Ident) -> AssignedGroup:
        t = self.topic(stream, topic)
        g = t.group(group)
        g.join(client_id, list(t.partitions))
        c = self.clients.get(client_id)
        if c:
            c.groups.add((t.stream_id, t.id, g.id))
        return g

    def leave_group(self, client_id: int, stream: Ident, topic: Ident, group: Ident) -> AssignedGroup:
        t = self.topic(stream, topic)
        g = t.group(group)
        if not g.leave(client_id, list(t.partitions)):
            raise errors.ConsumerGroupMemberNotFound(f"client {client_id} is not a member of {g.name!r}")
        c = self.clients.get(client_id)
        if c:
            c.groups.discard((t.stream_id, t.id, g.id))
        return g

    def _rebalance_groups(self, t: Topic) -> None:
        for g in t.groups.values():
            if g.members:
                g.rebalance(list(t.partitions))

    # ------------------------------------------------------------------ stats
    def stats(self) -> Stats:
        streams = self.catalog.streams.values()
        topics = [t for s in streams for t in s.topics.values()]
        parts = [p for t in topics for p in t.partitions.values()]
        return Stats(
            streams=len(self.catalog.streams),
            topics=len(topics),
            partitions=len(parts),
            segments=sum(p.segments_count for p in parts),
            messages=sum(p.messages_count for p in parts),
            size_bytes=sum(p.size_bytes for p in parts),
            clients=len(self.clients),
            consumer_groups=sum(len(t.groups) for t in topics),
            started_at_us=self.started_at_us,
        )

    # ------------------------------------------------------------------ users (thin pass-through)
    def create_user(
        self, username: str, password: str, status: int, permissions: Permissions | None, password_hash: str | None = None
    ) -> User:
        return self.users.create(username, password, status, permissions, self.clock(), password_hash=password_hash)

    # --- Kafka-facing additions ---
    # Added for the Kafka front-end (issue 4), protocol-neutral all the same:
    # idempotent-producer state, a logical log start offset per partition
    # (DeleteRecords), a stable cluster id, and per-topic settings that have no
    # Iggy topic option (e.g. the largest accepted batch). All of it lives in two
    # extra metadata stores, "producers" and "cluster", opened on first use.

    @cached_property
    def producers(self) -> ProducerStates:
        """The idempotent-producer state (core.producers), checked against the
        catalog on load: entries of deleted or recreated topics are dropped, and
        batches past a partition's end (lost in a crash) forgotten."""
        states = ProducerStates(GuardedStore(self.engine.metadata("producers"), self.health), self.clock)
        for (key, pid), entry in list(states.entries.items()):
            s, t, pid_ = key
            try:
                topic = self.catalog.topic(s, t)
                p = topic.partition(pid_)
            except errors.BrokerError:
                states.forget_partition(key)
                continue
            if topic.created_at_us != entry.created_at_us:
                states.forget_partition(key)
                continue
            if p.fenced is not None:
                continue  # storage refused it: its end is unknown, keep the state for after a repair
            states.truncate(key, p.high_watermark)
        states.flush()
        return states

    @cached_property
    def _cluster_meta(self):
        return GuardedStore(self.engine.metadata("cluster"), self.health)

    @cached_property
    def _cluster_state(self) -> dict[str, Any]:
        return self._cluster_meta.load()

    def _cluster_put(self, key: str, value: Any) -> None:
        self._cluster_meta.put(key, value)
        if value is None:
            self._cluster_state.pop(key, None)
        else:
            self._cluster_state[key] = value

    @cached_property
    def acls(self) -> AclStore:
        """The ACL bindings (core.acls), kept in the "cluster" store under ``acls``."""
        return AclStore(self._cluster_put, self._cluster_state.get("acls") or ())

    @cached_property
    def authorizer(self) -> Authorizer:
        return Authorizer(self.acls)

    @cached_property
    def cluster_id(self) -> str:
        """A random 22-character id made on first use and kept in the "cluster" store."""
        value = self._cluster_state.get("cluster_id")
        if not value:
            import base64
            import os as _os

            value = base64.urlsafe_b64encode(_os.urandom(16)).decode().rstrip("=")
            self._cluster_put("cluster_id", value)
        return value

    def log_start(self, p: Partition) -> int:
        """The first offset readers may see (``Partition.log_start_offset``, which
        honours the logical start DeleteRecords set)."""
        return p.log_start_offset

    def delete_records(self, topic: Topic, p: Partition, offset: int) -> int:
        """Move the partition's logical log start to ``offset`` (-1: the high
        watermark) and delete the sealed segments wholly below it. Returns the
        new low watermark. Raises OffsetOutOfRange past the high watermark."""
        hw = p.high_watermark
        if offset == -1:
            offset = hw
        if offset < 0 or offset > hw:
            raise errors.OffsetOutOfRange(f"offset {offset} is outside [0, {hw}]")
        if offset > self.log_start(p):
            self._cluster_put(f"start/{p.stream_id}/{p.topic_id}/{p.id}", {"c": topic.created_at_us, "o": offset})
            p.start_floor = offset
        whole = 0
        for seg in p.log.segments():
            if seg.sealed and seg.end_offset <= offset:
                whole += 1
            else:
                break
        if whole:
            p.log.delete_oldest_segments(whole)
        self.prune_transactions(p)
        return self.log_start(p)

    def topic_settings(self, topic: Topic) -> dict[str, Any]:
        """Per-topic settings with no Iggy topic option (a front-end's own, e.g. a batch size cap)."""
        rec = self._cluster_state.get(f"settings/{topic.stream_id}/{topic.id}")
        if not rec or rec.get("c") != topic.created_at_us:
            return {}
        return dict(rec["v"])

    def update_topic_settings(self, topic: Topic, values: dict[str, Any]) -> None:
        """Merge ``values`` into :meth:`topic_settings` (a None value removes the key); durable."""
        current = self.topic_settings(topic)
        for k, v in values.items():
            if v is None:
                current.pop(k, None)
            else:
                current[k] = v
        self._cluster_put(f"settings/{topic.stream_id}/{topic.id}", {"c": topic.created_at_us, "v": current})

    def append_idempotent(
        self,
        topic: Topic,
        p: Partition,
        batch: bytearray,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        *,
        verified: bool = False,
    ) -> Appended:
        """:meth:`append` for a batch from an idempotent producer (see core.producers).

        Returns an :class:`Appended`: a duplicate is not written and reports the
        original batch's offsets; its ``durable`` waits for a sync still pending
        on the partition (the original may not be on disk yet). Raises ProducerFenced,
        OutOfOrderSequence, InvalidBatch, CorruptData. The producer state is
        durable before the batch is written.
        """
        key = (p.stream_id, p.topic_id, p.id)
        count = batch_codec.read_header(batch).message_count
        states = self.producers
        dup = states.check(key, topic.created_at_us, producer_id, producer_epoch, base_sequence, count)
        if dup is not None:
            try:
                pending = p.log.pending_sync()
            except StorageError as e:  # SyncFailed: the log is fenced
                raise self._append_failed(str(e), getattr(e, "no_space", False)) from e
            return Appended(dup[0], dup[1] - dup[0] + 1, None if pending is None else asyncio.ensure_future(self._durable(p, pending)), True)
        if p.fenced is not None:
            raise errors.CorruptData(p.fenced)
        # The sequence record is made durable BEFORE the batch is written: after a crash
        # between the two, boot trims records past the log's end (nothing lost), while
        # the reverse order would forget a written batch and append its retry twice.
        base = p.high_watermark
        states.record(key, topic.created_at_us, producer_id, producer_epoch, base_sequence, count, base)
        try:
            states.flush()
        except errors.StorageWriteFailed:
            states.truncate(key, base)  # not durable: forget the record (the next flush writes that)
            raise
        try:
            done = self.append(p, batch, verified=verified)
        except Exception:
            states.truncate(key, base)  # the batch was not written: forget its record again
            try:
                states.flush()
            except errors.StorageWriteFailed:
                pass  # kept dirty for the next flush; a durable record past the log's end is trimmed at boot
            raise
        assert done.base_offset == base
        return done

    # --- Consumer-group offset additions (issue 5) ---
    # Committed offsets looked up by consumer (kind, name) across every topic,
    # for a Kafka group's "all topics" OffsetFetch, ListGroups, DescribeGroups
    # and DeleteGroups. The values are the ones Iggy consumer groups of the
    # same name read and write (core.offsets).

    def committed_entry(self, p: Partition, kind: str, name: str) -> Committed | None:
        """:meth:`committed` with its metadata string."""
        return self.offsets.get(p.stream_id, p.topic_id, p.id, kind, name)

    def committed_of(self, kind: str, name: str) -> list[tuple[Topic, Partition, Committed]]:
        """Every committed offset of one consumer, ordered by (stream, topic, partition) id."""
        out = []
        for (s, t, pid, k, n), c in sorted(self.offsets.items(), key=lambda kv: kv[0]):
            if k != kind or n != name:
                continue
            try:
                topic = self.catalog.topic(s, t)
                p = topic.partition(pid)
            except errors.BrokerError:
                continue
            out.append((topic, p, c))
        return out

    def committed_names(self, kind: str) -> set[str]:
        """The names of every consumer of ``kind`` holding at least one committed offset."""
        return {k[4] for k, _ in self.offsets.items() if k[3] == kind}

    def delete_committed_of(self, kind: str, name: str) -> int:
        """Delete every committed offset of one consumer (one durable write per stream)."""
        streams = sorted({k[0] for k, _ in self.offsets.items() if k[3] == kind and k[4] == name})
        return sum(self.offsets.delete_where(s, kind=kind, name=name) for s in streams)

    # --- Transactions (issue 12) ---
    # The coordinator and per-partition transaction state live in core.transactions;
    # here they meet the logs: markers are appended as one-frame Iggy batches,
    # transactional batches are recorded before they are written, and reads hide
    # what is not committed (see docs/kafka-mapping.md, "Transactions").

    @cached_property
    def transactions(self) -> Transactions:
        """The transaction state, checked against the logs and recovered on first use:
        records past a log's end undone, PREPARE_* transactions completed, ONGOING ones
        (a crash mid-transaction) aborted with their producer fenced."""
        tx = Transactions(GuardedStore(self.engine.metadata("transactions"), self.health), self.clock,
                          max_timeout_ms=self.transaction_max_timeout_ms)
        for key in list(tx.partitions):
            p = self._partition_of(key)
            if p is None:
                tx.forget_partition(key)
            elif p.fenced is None:
                tx.trim(key, p.high_watermark)
                self._prune_history(tx, p)  # what a crash kept from being pruned
        self.__dict__["transactions"] = tx  # the marker writer below uses it
        recovered = tx.recover(self.write_marker, self.commit_txn_offsets, self.bump_producer)
        for key, pid, epoch in tx.orphans():
            self.write_marker(key, pid, epoch, False)
        if recovered:
            log.warning("transactions completed or aborted at boot", extra={"kv": {"transactional_ids": recovered}})
        return tx

    def _partition_of(self, key: tuple[int, int, int]) -> Partition | None:
        try:
            return self.catalog.topic(key[0], key[1]).partition(key[2])
        except errors.BrokerError:
            return None

    def bump_producer(self, producer_id: int, epoch: int) -> tuple[int, int]:
        """The producer's epoch bumped (a new id when it would overflow or is unknown)."""
        try:
            return self.producers.init_producer(producer_id, epoch)
        except (UnknownProducer, ProducerFenced):
            return self.producers.init_producer()

    def write_marker(self, key: tuple[int, int, int], producer_id: int, epoch: int, committed: bool) -> Appended | None:
        """Append a commit/abort marker for the producer's open transaction on a partition
        (recorded durably first; None when the partition is gone or fenced)."""
        p = self._partition_of(key)
        if p is None or p.fenced is not None:
            return None
        tx = self.transactions
        offset = p.high_watermark
        tx.close_partition(key, producer_id, epoch, committed, offset)
        marker = bytearray(batch_codec.build_batch([batch_codec.Message(marker_payload(committed), 0, self.clock())]))
        try:
            return self.append(p, marker)
        except Exception:
            tx.reopen_partition(key, offset)
            raise

    def commit_txn_offsets(self, group: str, offsets: list[list]) -> None:
        """Commit a transaction's offsets ``[[s, t, p, offset, metadata, leader_epoch]]`` for a group
        (a negative offset deletes the stored one, as OffsetCommit's does)."""
        commits = []
        for s, t, pid, off, meta, epoch in offsets:
            p = self._partition_of((s, t, pid))
            if p is not None:
                commits.append((p, None if off < 0 else off, meta, epoch))
        if commits:
            self.commit_many(GROUP, group, commits)

    def prune_transactions(self, p: Partition) -> int:
        """Forget the partition's transaction history below its log start offset, now
        durable (``Transactions.prune``); a no-op before the transaction state is loaded
        (its load prunes) and for a fenced partition. A failed write is logged and left
        for the next log start move or boot. Returns the records pruned."""
        if "transactions" not in self.__dict__ or p.fenced is not None:
            return 0
        return self._prune_history(self.transactions, p)

    @staticmethod
    def _prune_history(tx: Transactions, p: Partition) -> int:
        try:
            return tx.prune((p.stream_id, p.topic_id, p.id), p.log_start_offset)
        except errors.MetadataNotSaved as e:
            log.warning("transaction history not pruned", extra={"kv": {
                "partition": f"{p.stream_id}/{p.topic_id}/{p.id}", "error": str(e)}})
            return 0

    def expire_transactional_ids(self) -> list[str]:
        """Forget transactional ids idle for ``transactional_id_expiration_ms`` (Kafka's
        ``transactional.id.expiration.ms``; ``Transactions.expire_ids``)."""
        expired = self.transactions.expire_ids(self.transactional_id_expiration_ms)
        if expired:
            log.info("transactional ids expired", extra={"kv": {"transactional_ids": expired}})
        return expired

    def abort_expired_transactions(self) -> list[str]:
        """Abort ONGOING transactions past their timeout (their producers are fenced)."""
        return self.transactions.abort_expired(self.write_marker, self.commit_txn_offsets, self.bump_producer)

    def append_transactional(
        self, topic: Topic, p: Partition, batch: bytearray, producer_id: int, producer_epoch: int,
        base_sequence: int, *, verified: bool = False,
    ) -> Appended:
        """:meth:`append_idempotent` for a batch of a transaction: the partition must be in
        the producer's ongoing transaction (else InvalidTxnState; an old epoch ProducerFenced);
        the batch is recorded as part of it (durably) before it is written."""
        key = (p.stream_id, p.topic_id, p.id)
        tx = self.transactions
        tx.check_produce(key, producer_id, producer_epoch)
        count = batch_codec.read_header(batch).message_count
        base = p.high_watermark
        tx.record_batch(key, producer_id, producer_epoch, base, base + count - 1)
        try:
            done = self.append_idempotent(topic, p, batch, producer_id, producer_epoch, base_sequence, verified=verified)
        except Exception:
            tx.unrecord_batch(key, producer_id, base)
            raise
        if done.duplicate:
            tx.unrecord_batch(key, producer_id, base)
        return done

    def read_visible_soon(self, p: Partition, start_offset: int, count: int, max_bytes: int = 1 << 62,
                          *, resume: bool = True, protocol: str = metrics.IGGY):
        """:meth:`read_visible` without waiting for the disk: its ``(batches, messages,
        next_offset)`` tuple when every byte is in the page cache, else a coroutine that reads
        them in off the event loop and returns that tuple (:func:`.catchup.soon`; ``protocol``
        labels its metrics). For callers that serve from a protocol callback and must not
        await when nothing has to be waited for. Raises what :meth:`read_visible` raises, and
        PartitionNotFound when the partition was deleted during the read."""
        try:  # (catchup.soon's steps, spelled out: the cached path is every poll's)
            return self.read_visible(p, start_offset, count, max_bytes, resume=resume, nowait=True)
        except NotCached as miss:
            return catchup.read_in(protocol, self.read_visible, p, start_offset, count, max_bytes, resume=resume,
                                   miss=miss, check=lambda: self.require_present(p))

    async def read_visible_waiting(self, p: Partition, start_offset: int, count: int, max_bytes: int = 1 << 62,
                                   *, resume: bool = True, protocol: str = metrics.IGGY):
        """:meth:`read_visible` that never waits for the disk on the event loop: bytes that are
        not in the page cache are read in on storage's worker thread while other clients are
        served (storage's NotCached), then the read runs again from the start, against the
        state of that moment (:func:`.catchup.read_in`). Raises what :meth:`read_visible`
        raises, and PartitionNotFound when the partition was deleted meanwhile."""
        return await catchup.read_in(protocol, self.read_visible, p, start_offset, count, max_bytes, resume=resume,
                                     check=lambda: self.require_present(p))

    def require_present(self, p: Partition) -> None:
        """Raise PartitionNotFound unless ``p`` is still its topic's partition (not deleted, nor
        deleted and created again): for reads that waited."""
        topic = self.catalog.topic(p.stream_id, p.topic_id)
        if topic.partitions.get(p.id) is not p:
            raise errors.PartitionNotFound(f"partition {p.id} was deleted during the read")

    def last_stable_offset(self, p: Partition) -> int:
        """The first offset of the oldest open transaction on ``p``, else its high watermark."""
        return self.transactions.last_stable_offset((p.stream_id, p.topic_id, p.id), p.high_watermark)

    def read_visible(self, p: Partition, start_offset: int, count: int, max_bytes: int = 1 << 62, *,
                     resume: bool = True, nowait: bool = False):
        """:meth:`Partition.read` for consumers that must not see transaction internals
        (Iggy polls): stops at the last stable offset and skips markers and aborted
        batches (whole stored batches). Returns ``(batches, messages, next_offset)``,
        ``next_offset`` being where the next read should start (when ``resume`` is false it
        may be None instead: a reader that will not commit need not have it worked out).
        Raises CorruptData when the partition is fenced (also when it holds an open
        transaction). ``nowait``: see :meth:`Partition.read` (NotCached)."""
        p.require_readable()
        pt = self.transactions.peek((p.stream_id, p.topic_id, p.id))
        if pt is None:  # (Partition.read and next_offset_after start at the log start themselves)
            batches, n = p.read(start_offset, count, max_bytes, nowait=nowait)
            # (the offset after the last frame: gaps compaction left included)
            return batches, n, p.next_offset_after(batches, start_offset) if resume else None
        pos = max(start_offset, p.log_start_offset)
        lso = pt.last_stable_offset(p.high_watermark)
        out: list = []
        n = size = 0
        while n < count and pos < lso and size < max_bytes:
            got, _ = p.read(pos, min(pt.visible_end(pos, count - n), lso) - pos, max(max_bytes - size, 1),
                            nowait=nowait)
            if not got:
                break
            for b in got:
                first, pos = batch_codec.offset_range(b)
                hidden = pt.find(first)
                if hidden is not None:
                    pos = max(pos, hidden[1] + 1)
                    continue
                out.append(b)
                n += batch_codec.read_header(b).message_count  # offsets may have gaps (compaction)
                size += len(b)
                if size >= max_bytes:
                    break
        return out, n, pos
