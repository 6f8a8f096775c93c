"""Idempotent producers: producer ids, epochs and per-partition sequence windows.

Protocol-neutral (Kafka's KIP-98 idempotence, as its broker's
``ProducerStateManager`` applies it; any front-end may use it). State:

- a producer id counter (ids are handed out once, never reused);
- per producer id its current epoch (bumped by :meth:`ProducerStates.init_producer`
  when the producer presents its current id and epoch);
- per (partition, producer id) the epoch seen there and the last
  :data:`WINDOW` batches written: ``(first_seq, last_seq, base_offset, last_offset)``.

Rules for a batch ``(producer_id, epoch, first_seq, count)`` on a partition
(:meth:`ProducerStates.check`), in order:

1. same epoch and same ``(first_seq, last_seq)`` as a batch in the window:
   a duplicate; the caller answers with that batch's original offsets and
   writes nothing;
2. epoch below the partition's epoch for that id: :class:`ProducerFenced`;
3. a new (higher) epoch must start at sequence 0, unless the partition has
   no state for the id: else :class:`OutOfOrderSequence`;
4. same epoch: ``first_seq`` must follow the last written sequence
   (``last + 1``, wrapping from 2**31-1 to 0): else :class:`OutOfOrderSequence`.
   With no state for the id on that partition any sequence is accepted
   (Kafka does the same after retention removed a producer's batches).

Persistence: every change is written through a metadata store (keys
``next_id``, ``epoch/<id>``, ``seq/<stream>/<topic>/<partition>/<id>``) in one
``put_many`` per :meth:`flush`, so it survives a restart. Entries carry the
topic's ``created_at_us`` (a recreated topic starts clean) and their last
write time; entries older than ``expiration_us`` (default 1 day, Kafka's
``producer.id.expiration.ms``) are dropped at load and on each new producer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import BrokerError

WINDOW = 5
SEQ_MASK = 0x7FFFFFFF
EPOCH_MAX = 0x7FFF
DEFAULT_EXPIRATION_US = 24 * 3600 * 1_000_000

PartitionKey = tuple[int, int, int]  # stream id, topic id, partition id


class ProducerFenced(BrokerError):
    """A batch or request carries an epoch older than the producer's current one."""


class OutOfOrderSequence(BrokerError):
    """A batch's first sequence does not follow the last one written for the producer."""


class UnknownProducer(BrokerError):
    """An epoch bump named a producer id (or epoch) this broker does not know."""


@dataclass
class _Entry:
    created_at_us: int
    epoch: int
    batches: list[list[int]] = field(default_factory=list)  # [first_seq, last_seq, base_offset, last_offset]
    updated_us: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"c": self.created_at_us, "e": self.epoch, "b": self.batches, "u": self.updated_us}


def last_sequence(first_seq: int, count: int) -> int:
    return (first_seq + count - 1) & SEQ_MASK


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == SEQ_MASK)


class ProducerStates:
    def __init__(self, store, clock: Callable[[], int], *, expiration_us: int = DEFAULT_EXPIRATION_US):
        self._store = store
        self._clock = clock
        self.expiration_us = expiration_us
        self.next_id = 0
        self.epochs: dict[int, list[int]] = {}  # producer id -> [epoch, updated_us]
        self.entries: dict[tuple[PartitionKey, int], _Entry] = {}
        self._dirty: dict[str, Any] = {}
        self._load(store.load())

    # ------------------------------------------------------------------ persistence
    def _load(self, records: dict[str, Any]) -> None:
        now = self._clock()
        self.next_id = int(records.get("next_id", 0))
        for k, v in records.items():
            parts = k.split("/")
            if parts[0] == "epoch" and len(parts) == 2:
                self.epochs[int(parts[1])] = [int(v["e"]), int(v.get("u", now))]
            elif parts[0] == "seq" and len(parts) == 5:
                s, t, p, pid = (int(x) for x in parts[1:])
                self.entries[((s, t, p), pid)] = _Entry(int(v["c"]), int(v["e"]), [list(b) for b in v["b"]], int(v.get("u", now)))
        self._expire(now)
        self.flush()

    @staticmethod
    def _seq_key(key: PartitionKey, pid: int) -> str:
        return f"seq/{key[0]}/{key[1]}/{key[2]}/{pid}"

    def _mark(self, key: PartitionKey, pid: int) -> None:
        e = self.entries.get((key, pid))
        self._dirty[self._seq_key(key, pid)] = None if e is None else e.to_dict()

    def flush(self) -> None:
        """Write every change since the last flush (one atomic, durable put_many)."""
        if self._dirty:
            items, self._dirty = self._dirty, {}
            try:
                self._store.put_many(items)
            except BaseException:
                self._dirty = {**items, **self._dirty}  # not written: the next flush tries again
                raise

    def _expire(self, now: int) -> None:
        limit = now - self.expiration_us
        for (key, pid), e in list(self.entries.items()):
            if e.updated_us < limit:
                del self.entries[(key, pid)]
                self._mark(key, pid)
        live = {pid for _, pid in self.entries}
        for pid, (_epoch, updated) in list(self.epochs.items()):
            if updated < limit and pid not in live:
                del self.epochs[pid]
                self._dirty[f"epoch/{pid}"] = None

    # ------------------------------------------------------------------ producer ids
    def init_producer(self, producer_id: int = -1, epoch: int = -1) -> tuple[int, int]:
        """A new producer id with epoch 0; or, given the current ``(producer_id,
        epoch)``, the same id with the epoch bumped (a new id when the epoch would
        pass 32767). Raises UnknownProducer for an id this broker never issued,
        ProducerFenced for an epoch that is not the current one. Flushes."""
        now = self._clock()
        self._expire(now)
        if producer_id >= 0:
            current = self.epochs.get(producer_id)
            if current is None:
                if producer_id >= self.next_id:
                    raise UnknownProducer(f"producer id {producer_id} was never issued")
                raise UnknownProducer(f"producer id {producer_id} has expired")
            if epoch != current[0]:
                raise ProducerFenced(f"producer {producer_id} has epoch {current[0]}, not {epoch}")
            if current[0] < EPOCH_MAX - 1:
                self.epochs[producer_id] = [current[0] + 1, now]
                self._dirty[f"epoch/{producer_id}"] = {"e": current[0] + 1, "u": now}
                self.flush()
                return producer_id, current[0] + 1
        pid = self.next_id
        self.next_id += 1
        self.epochs[pid] = [0, now]
        self._dirty["next_id"] = self.next_id
        self._dirty[f"epoch/{pid}"] = {"e": 0, "u": now}
        self.flush()
        return pid, 0

    # ------------------------------------------------------------------ sequences
    def check(self, key: PartitionKey, created_at_us: int, producer_id: int, epoch: int, first_seq: int, count: int) -> tuple[int, int] | None:
        """Validate a batch before it is written (see the module rules).

        Returns ``(base_offset, last_offset)`` of the original batch for a
        duplicate, None for a batch to write. Raises ProducerFenced,
        OutOfOrderSequence.
        """
        e = self.entries.get((key, producer_id))
        if e is not None and e.created_at_us != created_at_us:
            del self.entries[(key, producer_id)]
            self._mark(key, producer_id)
            e = None
        if e is None:
            known = self.epochs.get(producer_id)
            if known is not None and epoch < known[0]:
                raise ProducerFenced(f"producer {producer_id} epoch {epoch} is older than {known[0]}")
            return None
        last_seq = last_sequence(first_seq, count)
        if epoch == e.epoch:
            for b in e.batches:
                if b[0] == first_seq and b[1] == last_seq:
                    return b[2], b[3]
        if epoch < e.epoch:
            raise ProducerFenced(f"producer {producer_id} epoch {epoch} is older than {e.epoch} on this partition")
        if epoch > e.epoch:
            if first_seq != 0:
                raise OutOfOrderSequence(f"producer {producer_id} new epoch {epoch} starts at sequence {first_seq}, not 0")
            return None
        if e.batches and not in_sequence(e.batches[-1][1], first_seq):
            raise OutOfOrderSequence(
                f"producer {producer_id} sequence {first_seq} does not follow {e.batches[-1][1]}"
            )
        return None

    def record(self, key: PartitionKey, created_at_us: int, producer_id: int, epoch: int, first_seq: int, count: int, base_offset: int) -> None:
        """Remember a written batch (call after a successful append; :meth:`flush` persists)."""
        now = self._clock()
        e = self.entries.get((key, producer_id))
        if e is None or e.epoch != epoch or e.created_at_us != created_at_us:
            e = _Entry(created_at_us, epoch)
            self.entries[(key, producer_id)] = e
        e.batches.append([first_seq, last_sequence(first_seq, count), base_offset, base_offset + count - 1])
        del e.batches[:-WINDOW]
        e.updated_us = now
        known = self.epochs.get(producer_id)
        if known is None or known[0] < epoch:
            self.epochs[producer_id] = [epoch, now]
            self._dirty[f"epoch/{producer_id}"] = {"e": epoch, "u": now}
        self._mark(key, producer_id)

    def truncate(self, key: PartitionKey, end_offset: int) -> None:
        """Forget batches at or past ``end_offset`` (the log no longer holds them)."""
        for (k, pid), e in list(self.entries.items()):
            if k != key:
                continue
            kept = [b for b in e.batches if b[3] < end_offset]
            if kept != e.batches:
                if kept:
                    e.batches = kept
                else:
                    del self.entries[(k, pid)]
                self._mark(k, pid)

    def forget_partition(self, key: PartitionKey) -> None:
        for k, pid in [x for x in self.entries if x[0] == key]:
            del self.entries[(k, pid)]
            self._mark(k, pid)
