"""Transactions (Kafka KIP-98): a coordinator per transactional id and, per partition,
the open transactions, the commit/abort markers and the aborted ranges.

Protocol-neutral: the Kafka front-end drives it (InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn, Produce, Fetch); the Iggy poll path only
asks which stored batches to hide and where the last stable offset is.

Coordinator state machine (one record per transactional id; Kafka's
``TransactionState``), as the table :data:`TRANSITIONS` of (state, event) -> next
state or the error raised. Events: ``add`` (AddPartitionsToTxn, AddOffsetsToTxn),
``commit`` / ``abort`` (EndTxn), ``init`` (InitProducerId: an unfinished transaction
is completed or aborted first, then the epoch is bumped). A commit or abort goes
through PREPARE_* to COMPLETE_* inside one call (markers are written synchronously),
so PREPARE_* is seen from outside only after a crash, when boot completes it
(:meth:`Transactions.recover`; an ONGOING one is aborted and its epoch bumped, as
is one past its timeout, :meth:`Transactions.abort_expired`). A commit or abort
that repeats the outcome of a COMPLETE_* transaction is a retry: answered, nothing done.

Per partition (``PartitionTxns``):

- ``open``: producer id -> [epoch, first_offset, [[base, last], ...]] (its batches);
  the last stable offset (LSO) is the smallest ``first_offset``, else the high watermark;
- ``markers``: marker offset -> [producer_id, epoch, committed, first_offset, batches]:
  the control batch written at that offset (one Iggy batch with one frame, see
  :func:`marker_payload`); for an abort, ``batches`` are the aborted data batches.

Bounded history (the store must not grow for ever on a server that runs for months):

- :meth:`Transactions.prune` forgets what no readable offset needs once a partition's
  log start offset (retention, DeleteRecords, Iggy DeleteSegments) has passed it: a
  marker record at an offset below the log start (every range it holds ends before
  its own offset), and, in the markers kept, aborted batch ranges whose last offset is
  below it. A marker's ``first_offset`` is kept as it was (Fetch's aborted list names
  it). Every reader starts at or after the log start, so what it is told is unchanged
  (:meth:`PartitionTxns.hidden`, :meth:`~PartitionTxns.find`,
  :meth:`~PartitionTxns.visible_end` look only at ranges meeting ``[start, ...)``;
  :meth:`~PartitionTxns.aborted_between` only at markers at or after ``start``).
  Deletions go in atomic ``put_many`` records of at most :data:`PRUNE_CHUNK` keys, each
  applied in memory only once durable; any prefix of them leaves a consistent store
  (each entry removed stands alone), and boot prunes again what a crash left.
- :meth:`Transactions.expire_ids` is Kafka's ``transactional.id.expiration.ms``: a
  coordinator record in Empty, CompleteCommit or CompleteAbort whose last update is at
  least that old is deleted (its producer id and epoch forgotten; InitProducerId with
  the id then starts afresh with a new producer id, epoch 0).

Persistence: one metadata store ("transactions"); keys ``tx/<transactional_id>``
(coordinator records), ``po/<s>/<t>/<p>/<producer_id>`` (open), ``pm/<s>/<t>/<p>/<offset>``
(markers). Every change is one atomic, fdatasync'ed ``put_many``, written *before* the
log append it describes; boot (:meth:`Transactions.trim`) undoes records past the log's
end (a crash between the two writes): a batch range is forgotten, a marker record turns
back into the open transaction it closed, and the coordinator (still in PREPARE_*) writes
it again. So a transaction is never half-visible: its data is hidden from read_committed
Kafka consumers and Iggy consumers until its commit marker is in the log.

Errors: :class:`InvalidTxnState` (Kafka 48), :class:`InvalidProducerIdMapping` (49),
:class:`InvalidTransactionTimeout` (50), :class:`ConcurrentTransactions` (51),
:class:`TransactionalIdNotFound` (105), and ``producers.ProducerFenced`` for an old epoch.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from .errors import BrokerError
from .producers import ProducerFenced

EMPTY = "Empty"
ONGOING = "Ongoing"
PREPARE_COMMIT = "PrepareCommit"
PREPARE_ABORT = "PrepareAbort"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"
STATES = (EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT)

# Control record (Kafka ``ControlRecordType`` / ``EndTransactionMarker``), big-endian:
#   key:   version int16 (0) | type int16 (0 = ABORT, 1 = COMMIT)
#   value: version int16 (0) | coordinator_epoch int32
_CONTROL = struct.Struct(">hhhi")
CONTROL_KEY_SIZE = 4
ABORT, COMMIT = 0, 1

PartitionKey = tuple[int, int, int]

PRUNE_CHUNK = 4096  # keys per durable record when pruning or expiring (each record is atomic)
EXPIRABLE = (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT)  # Kafka's TransactionState.isExpirationAllowed


ADD, COMMIT_EVENT, ABORT_EVENT, INIT = "add", "commit", "abort", "init"
EVENTS = (ADD, COMMIT_EVENT, ABORT_EVENT, INIT)


class InvalidTxnState(BrokerError):
    """The request does not fit the transaction's state (Kafka INVALID_TXN_STATE)."""


class InvalidProducerIdMapping(BrokerError):
    """The producer id is not the one of this transactional id (INVALID_PRODUCER_ID_MAPPING)."""


class InvalidTransactionTimeout(BrokerError):
    """transaction.timeout.ms is not in 1..the broker's maximum (INVALID_TRANSACTION_TIMEOUT)."""


class ConcurrentTransactions(BrokerError):
    """A previous transaction is still being completed (CONCURRENT_TRANSACTIONS)."""


class TransactionalIdNotFound(BrokerError):
    """No transaction with this transactional id (TRANSACTIONAL_ID_NOT_FOUND)."""


_BUSY = (PREPARE_COMMIT, PREPARE_ABORT)
TRANSITIONS: dict[tuple[str, str], "str | type[BrokerError]"] = {
    **{(state, INIT): EMPTY for state in STATES},
    **{(state, ADD): ONGOING for state in (EMPTY, ONGOING, COMPLETE_COMMIT, COMPLETE_ABORT)},
    **{(state, event): ConcurrentTransactions for state in _BUSY for event in (ADD, COMMIT_EVENT, ABORT_EVENT)},
    (ONGOING, COMMIT_EVENT): PREPARE_COMMIT,
    (ONGOING, ABORT_EVENT): PREPARE_ABORT,
    (COMPLETE_COMMIT, COMMIT_EVENT): COMPLETE_COMMIT,  # a retry
    (COMPLETE_ABORT, ABORT_EVENT): COMPLETE_ABORT,  # a retry
    (EMPTY, COMMIT_EVENT): InvalidTxnState,
    (EMPTY, ABORT_EVENT): InvalidTxnState,
    (COMPLETE_ABORT, COMMIT_EVENT): InvalidTxnState,
    (COMPLETE_COMMIT, ABORT_EVENT): InvalidTxnState,
}


def next_state(state: str, event: str) -> str:
    """The state after ``event`` (see :data:`TRANSITIONS`); raises the table's error."""
    found = TRANSITIONS[(state, event)]
    if isinstance(found, str):
        return found
    raise found(f"transaction is {state}: {event} is not allowed")


def marker_payload(committed: bool, coordinator_epoch: int = 0) -> bytes:
    """The payload of a stored marker frame: the Kafka control record key (4 bytes) then
    its value (6 bytes), big-endian (see ``_CONTROL``)."""
    return _CONTROL.pack(0, COMMIT if committed else ABORT, 0, coordinator_epoch)


@dataclass
class Txn:
    """A coordinator record (Kafka's ``TransactionMetadata``). Times in µs."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: str = EMPTY
    partitions: list[list[int]] = field(default_factory=list)  # [[stream, topic, partition], ...]
    groups: list[str] = field(default_factory=list)
    offsets: dict[str, list[list]] = field(default_factory=dict)  # group -> [[s, t, p, offset, metadata, epoch]]
    started_us: int = -1
    updated_us: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.producer_id, "e": self.producer_epoch, "to": self.timeout_ms, "s": self.state,
            "p": self.partitions, "g": self.groups, "o": self.offsets, "st": self.started_us, "u": self.updated_us,
        }

    @classmethod
    def from_dict(cls, tid: str, v: dict[str, Any]) -> "Txn":
        return cls(tid, int(v["pid"]), int(v["e"]), int(v["to"]), v["s"], [list(x) for x in v["p"]], list(v["g"]),
                   {g: [list(x) for x in o] for g, o in v["o"].items()}, int(v["st"]), int(v["u"]))


class PartitionTxns:
    """One partition's open transactions and markers (see the module docstring)."""

    def __init__(self) -> None:
        self.open: dict[int, list] = {}  # pid -> [epoch, first_offset, [[base, last], ...]]
        self.markers: dict[int, list] = {}  # offset -> [pid, epoch, committed, first_offset, batches]
        self._hidden: list[tuple[int, int, int]] | None = None  # sorted (first, last, marker offset)
        self.pruned_to = 0  # the log start offset of the last complete prune (memory only)

    def last_stable_offset(self, high_watermark: int) -> int:
        if not self.open:
            return high_watermark
        return min(high_watermark, min(v[1] for v in self.open.values()))

    def hidden(self) -> list[tuple[int, int, int]]:
        """Sorted ``(first, last, marker)`` ranges of stored batches Iggy never shows:
        markers (``marker`` = their own offset) and aborted data batches (``marker`` = the
        offset of the abort marker that closed them)."""
        if self._hidden is None:
            out = []
            for off, (_pid, _e, committed, _first, batches) in self.markers.items():
                out.append((off, off, off))
                if not committed:
                    out.extend((b[0], b[1], off) for b in batches)
            out.sort()
            self._hidden = out
        return self._hidden

    def changed(self) -> None:
        self._hidden = None

    def find(self, offset: int) -> tuple[int, int, int] | None:
        """The hidden range containing ``offset``, or None."""
        h = self.hidden()
        if not h:
            return None
        i = bisect.bisect_right(h, (offset, 1 << 62, 1 << 62)) - 1
        if i >= 0 and h[i][0] <= offset <= h[i][1]:
            return h[i]
        return None

    def visible_end(self, start: int, count: int) -> int:
        """The offset just past the first ``count`` offsets at or after ``start`` that no
        hidden range covers (so one read of ``[start, end)`` yields ``count`` visible
        offsets, unless the log ends first)."""
        h = self.hidden()
        i = bisect.bisect_left(h, (start, -1, -1))
        if i > 0 and h[i - 1][1] >= start:
            i -= 1
        cur, remaining = start, count
        while remaining > 0:
            if i < len(h) and h[i][0] <= cur:
                cur = max(cur, h[i][1] + 1)
                i += 1
                continue
            gap = (h[i][0] if i < len(h) else cur + remaining) - cur
            take = min(remaining, gap)
            cur += take
            remaining -= take
        return cur

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """``(producer_id, first_offset)`` of aborted transactions whose range
        ``[first_offset, marker]`` meets ``[start, end)`` (Kafka's FetchResponse
        aborted_transactions), ordered by first offset."""
        out = [
            (v[0], v[3]) for off, v in self.markers.items()
            if not v[2] and off >= start and v[3] < end
        ]
        out.sort(key=lambda x: x[1])
        return out


def _pkey(key: PartitionKey) -> str:
    return f"{key[0]}/{key[1]}/{key[2]}"


class Transactions:
    """The coordinator records and every partition's transaction state, over one metadata store.

    ``clock`` gives µs. Writing markers is delegated to ``write_marker(key, pid, epoch,
    committed) -> offset or None`` (the broker appends the control batch; None when the
    partition is gone) and ``commit_offsets(group, [(s, t, p, offset, metadata, epoch)])``.
    """

    def __init__(self, store, clock: Callable[[], int], *, max_timeout_ms: int = 900_000):
        self._store = store
        self._clock = clock
        self.max_timeout_ms = max_timeout_ms
        self.txns: dict[str, Txn] = {}
        self.by_producer: dict[int, str] = {}
        self.partitions: dict[PartitionKey, PartitionTxns] = {}
        for k, v in store.load().items():
            parts = k.split("/")
            if parts[0] == "tx":
                t = Txn.from_dict(k[3:], v)
                self.txns[t.transactional_id] = t
                self.by_producer[t.producer_id] = t.transactional_id
            elif parts[0] == "po" and len(parts) == 5:
                key = (int(parts[1]), int(parts[2]), int(parts[3]))
                self.partition(key).open[int(parts[4])] = [int(v[0]), int(v[1]), [list(b) for b in v[2]]]
            elif parts[0] == "pm" and len(parts) == 5:
                key = (int(parts[1]), int(parts[2]), int(parts[3]))
                self.partition(key).markers[int(parts[4])] = [int(v[0]), int(v[1]), bool(v[2]), int(v[3]),
                                                              [list(b) for b in v[4]]]

    # ------------------------------------------------------------------ partitions
    def partition(self, key: PartitionKey) -> PartitionTxns:
        pt = self.partitions.get(key)
        if pt is None:
            pt = self.partitions[key] = PartitionTxns()
        return pt

    def peek(self, key: PartitionKey) -> PartitionTxns | None:
        """The partition's state when it has any (None: nothing transactional ever there)."""
        pt = self.partitions.get(key)
        return pt if pt is not None and (pt.open or pt.markers) else None

    def last_stable_offset(self, key: PartitionKey, high_watermark: int) -> int:
        pt = self.partitions.get(key)
        return high_watermark if pt is None else pt.last_stable_offset(high_watermark)

    def trim(self, key: PartitionKey, end_offset: int) -> None:
        """Undo records at or past ``end_offset`` (not in the log after a crash; see module)."""
        pt = self.partitions.get(key)
        if pt is None:
            return
        changes: dict[str, Any] = {}
        touched: set[int] = set()
        for off in sorted((o for o in pt.markers if o >= end_offset), reverse=True):
            pid, epoch, _committed, first, batches = pt.markers.pop(off)
            changes[f"pm/{_pkey(key)}/{off}"] = None
            pt.open[pid] = [epoch, first, batches]
            touched.add(pid)
        for pid, (epoch, first, batches) in list(pt.open.items()):
            kept = [b for b in batches if b[1] < end_offset]
            if kept != batches or first >= end_offset:
                touched.add(pid)
                if kept:
                    pt.open[pid] = [epoch, min(first, kept[0][0]), kept]
                else:
                    del pt.open[pid]
        for pid in touched:
            changes[f"po/{_pkey(key)}/{pid}"] = pt.open.get(pid)
        pt.changed()
        if changes:
            self._store.put_many(changes)

    def forget_partition(self, key: PartitionKey) -> None:
        pt = self.partitions.pop(key, None)
        if pt is None:
            return
        changes = {f"po/{_pkey(key)}/{pid}": None for pid in pt.open}
        changes.update({f"pm/{_pkey(key)}/{off}": None for off in pt.markers})
        if changes:
            self._store.put_many(changes)

    def prune(self, key: PartitionKey, log_start: int) -> int:
        """Forget the partition's history below ``log_start`` (its log start offset, which
        must be durable: no reader will see an offset below it again). Deletes the marker
        records at offsets below it and drops, from the abort markers kept, the batch
        ranges whose last offset is below it (see the module docstring). Returns the
        records deleted or rewritten. Raises what the store raises (MetadataNotSaved):
        what was written stays pruned, the rest is pruned by a later call."""
        pt = self.partitions.get(key)
        if pt is None or log_start <= pt.pruned_to:
            return 0
        changes: dict[str, Any] = {}
        for off, (pid, epoch, committed, first, batches) in pt.markers.items():
            if off < log_start:
                changes[f"pm/{_pkey(key)}/{off}"] = None
            elif batches and batches[0][1] < log_start:  # batches are kept in offset order
                changes[f"pm/{_pkey(key)}/{off}"] = [pid, epoch, committed, first,
                                                     [b for b in batches if b[1] >= log_start]]

        def applied(k: str, v: Any) -> None:
            off = int(k.rsplit("/", 1)[1])
            if v is None:
                del pt.markers[off]
            else:
                pt.markers[off] = v
            pt.changed()

        self._put_chunked(changes, applied)
        pt.pruned_to = log_start
        return len(changes)

    def _put_chunked(self, changes: dict[str, Any], applied: Callable[[str, Any], None]) -> None:
        """Write ``changes`` in atomic records of at most :data:`PRUNE_CHUNK` keys, calling
        ``applied(key, value)`` for each key once its record is durable."""
        items = list(changes.items())
        for i in range(0, len(items), PRUNE_CHUNK):
            part = dict(items[i:i + PRUNE_CHUNK])
            self._store.put_many(part)
            for k, v in part.items():
                applied(k, v)

    def check_produce(self, key: PartitionKey, producer_id: int, epoch: int) -> None:
        """A transactional batch may be written: its producer's transaction is ONGOING with
        this partition added (KIP-890 verification) and this epoch. Raises ProducerFenced,
        InvalidTxnState."""
        tid = self.by_producer.get(producer_id)
        t = None if tid is None else self.txns.get(tid)
        if t is None:
            raise InvalidTxnState(f"producer {producer_id} has no transaction")
        if epoch < t.producer_epoch:
            raise ProducerFenced(f"producer {producer_id} epoch {epoch} is older than {t.producer_epoch}")
        if epoch > t.producer_epoch or t.state != ONGOING or list(key) not in t.partitions:
            raise InvalidTxnState(f"partition {_pkey(key)} is not in an ongoing transaction of producer {producer_id}")

    def record_batch(self, key: PartitionKey, producer_id: int, epoch: int, base: int, last: int) -> None:
        """Record (durably) a transactional batch about to be written at ``[base, last]``."""
        pt = self.partition(key)
        entry = pt.open.get(producer_id)
        if entry is None or entry[0] != epoch:
            entry = [epoch, base, []]
        entry = [entry[0], entry[1], entry[2] + [[base, last]]]
        self._store.put_many({f"po/{_pkey(key)}/{producer_id}": entry})
        pt.open[producer_id] = entry

    def unrecord_batch(self, key: PartitionKey, producer_id: int, base: int) -> None:
        """Forget a batch recorded but not written (its append failed)."""
        pt = self.partition(key)
        entry = pt.open.get(producer_id)
        if entry is None:
            return
        kept = [b for b in entry[2] if b[0] < base]
        new = [entry[0], entry[1], kept] if kept else None
        self._store.put_many({f"po/{_pkey(key)}/{producer_id}": new})
        if new is None:
            del pt.open[producer_id]
        else:
            pt.open[producer_id] = new

    def close_partition(self, key: PartitionKey, producer_id: int, epoch: int, committed: bool, offset: int) -> None:
        """Record (durably) the marker about to be written at ``offset``, closing the
        producer's open transaction on the partition."""
        pt = self.partition(key)
        entry = pt.open.get(producer_id) or [epoch, offset, []]
        marker = [producer_id, epoch, committed, entry[1], entry[2] if not committed else []]
        self._store.put_many({f"po/{_pkey(key)}/{producer_id}": None, f"pm/{_pkey(key)}/{offset}": marker})
        pt.open.pop(producer_id, None)
        pt.markers[offset] = marker
        pt.changed()

    def reopen_partition(self, key: PartitionKey, offset: int) -> None:
        """Undo :meth:`close_partition` when the marker could not be appended."""
        self.trim(key, offset)

    # ------------------------------------------------------------------ coordinator
    def _save(self, t: Txn) -> None:
        t.updated_us = self._clock()
        self._store.put_many({f"tx/{t.transactional_id}": t.to_dict()})

    def _owner(self, tid: str, producer_id: int, epoch: int) -> Txn:
        """The record of ``tid`` if the producer and epoch are its current ones; raises
        InvalidProducerIdMapping, ProducerFenced."""
        t = self.txns.get(tid)
        if t is None or t.producer_id != producer_id:
            raise InvalidProducerIdMapping(f"transactional id {tid!r} does not map to producer {producer_id}")
        if epoch != t.producer_epoch:
            raise ProducerFenced(f"producer {producer_id} epoch {epoch} is not the current {t.producer_epoch}")
        return t

    def _txn(self, tid: str, producer_id: int, epoch: int, event: str) -> tuple[Txn, str]:
        """The record and the state ``event`` leads to (raises as :meth:`_owner`, :func:`next_state`)."""
        t = self._owner(tid, producer_id, epoch)
        return t, next_state(t.state, event)

    def init(self, tid: str, timeout_ms: int, bump: Callable[[int, int], tuple[int, int]], new_id: Callable[[], tuple[int, int]],
             write_marker, commit_offsets, producer_id: int = -1, epoch: int = -1) -> tuple[int, int]:
        """InitProducerId with a transactional id: the (producer_id, epoch) to use.

        A new id gets epoch 0; a known one its epoch bumped through ``bump(pid, epoch)``
        (a new id when the epoch would overflow), after aborting an ongoing transaction.
        With ``producer_id`` given (KIP-360), it and ``epoch`` must be the current ones.
        Raises InvalidTransactionTimeout,
        ProducerFenced, InvalidProducerIdMapping."""
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            raise InvalidTransactionTimeout(f"transaction timeout {timeout_ms} ms is not in 1..{self.max_timeout_ms}")
        t = self.txns.get(tid)
        if t is None:
            pid, e = new_id()
            t = Txn(tid, pid, e, timeout_ms)
            self.txns[tid] = t
            self.by_producer[pid] = tid
            self._save(t)
            return pid, e
        if producer_id >= 0 and (producer_id != t.producer_id or epoch != t.producer_epoch):
            if producer_id != t.producer_id:
                raise InvalidProducerIdMapping(f"transactional id {tid!r} does not map to producer {producer_id}")
            raise ProducerFenced(f"producer {producer_id} epoch {epoch} is not the current {t.producer_epoch}")
        if t.state in (ONGOING, PREPARE_ABORT, PREPARE_COMMIT):
            self._complete(t, t.state == PREPARE_COMMIT, write_marker, commit_offsets)
        old = t.producer_id
        pid, e = bump(t.producer_id, t.producer_epoch)
        self.by_producer.pop(old, None)
        t.producer_id, t.producer_epoch, t.timeout_ms, t.state = pid, e, timeout_ms, EMPTY
        self.by_producer[pid] = tid
        self._save(t)
        return pid, e

    def add_partitions(self, tid: str, producer_id: int, epoch: int, keys: Iterable[PartitionKey]) -> None:
        t, _ = self._txn(tid, producer_id, epoch, ADD)
        self._begin(t)
        for key in keys:
            if list(key) not in t.partitions:
                t.partitions.append(list(key))
        self._save(t)

    def add_offsets(self, tid: str, producer_id: int, epoch: int, group: str) -> None:
        t, _ = self._txn(tid, producer_id, epoch, ADD)
        self._begin(t)
        if group not in t.groups:
            t.groups.append(group)
        self._save(t)

    def txn_offset_commit(self, tid: str, producer_id: int, epoch: int, group: str, offsets: list[list]) -> None:
        """Keep ``[[s, t, p, offset, metadata, leader_epoch], ...]`` for ``group``, applied at commit."""
        t = self._owner(tid, producer_id, epoch)
        if t.state != ONGOING or group not in t.groups:
            raise InvalidTxnState(f"group {group!r} was not added to the transaction of {tid!r}")
        pending = {tuple(o[:3]): o for o in t.offsets.get(group, [])}
        for o in offsets:
            pending[tuple(o[:3])] = list(o)
        t.offsets[group] = list(pending.values())
        self._save(t)

    def pending_offsets(self, group: str) -> set[PartitionKey]:
        """Partitions for which an unfinished transaction holds offsets of ``group``."""
        out: set[PartitionKey] = set()
        for t in self.txns.values():
            if t.state in (ONGOING, PREPARE_COMMIT, PREPARE_ABORT):
                out.update((o[0], o[1], o[2]) for o in t.offsets.get(group, ()))
        return out

    def _begin(self, t: Txn) -> None:
        if t.state != ONGOING:
            t.state = ONGOING
            t.partitions, t.groups, t.offsets = [], [], {}
            t.started_us = self._clock()

    def end(self, tid: str, producer_id: int, epoch: int, committed: bool, write_marker, commit_offsets) -> None:
        """EndTxn: write the markers and (for a commit) the offsets. Raises as :meth:`_txn`, and
        InvalidTxnState for an end that does not fit the state (a retried end is accepted)."""
        t, state = self._txn(tid, producer_id, epoch, COMMIT_EVENT if committed else ABORT_EVENT)
        if state == t.state:  # a retry of a completed end
            return
        t.state = state
        self._save(t)
        self._complete(t, committed, write_marker, commit_offsets)

    def _complete(self, t: Txn, committed: bool, write_marker, commit_offsets) -> None:
        if t.state == ONGOING:
            t.state = PREPARE_ABORT
            self._save(t)
        for key in t.partitions:
            k = (key[0], key[1], key[2])
            pt = self.partitions.get(k)
            if pt is not None and t.producer_id in pt.open:
                write_marker(k, t.producer_id, pt.open[t.producer_id][0], committed)
        if committed:
            for group, offsets in t.offsets.items():
                commit_offsets(group, offsets)
        t.state = COMPLETE_COMMIT if committed else COMPLETE_ABORT
        t.offsets = {}
        self._save(t)

    def recover(self, write_marker, commit_offsets, bump) -> list[str]:
        """At boot: complete PREPARE_* transactions, abort ONGOING ones (epoch bumped: the
        producer is fenced). Returns the transactional ids touched."""
        done = []
        for t in list(self.txns.values()):
            if t.state in (ONGOING, PREPARE_ABORT, PREPARE_COMMIT):
                was = t.state
                self._complete(t, was == PREPARE_COMMIT, write_marker, commit_offsets)
                if was == ONGOING:
                    self._fence(t, bump)
                done.append(t.transactional_id)
        return done

    def _fence(self, t: Txn, bump) -> None:
        old = t.producer_id
        pid, e = bump(t.producer_id, t.producer_epoch)
        self.by_producer.pop(old, None)
        t.producer_id, t.producer_epoch = pid, e
        self.by_producer[pid] = t.transactional_id
        self._save(t)

    def abort_expired(self, write_marker, commit_offsets, bump) -> list[str]:
        """Abort (and fence, bumping the epoch) ONGOING transactions older than their timeout."""
        now = self._clock()
        out = []
        for t in list(self.txns.values()):
            if t.state == ONGOING and now - t.started_us > t.timeout_ms * 1000:
                self._complete(t, False, write_marker, commit_offsets)
                self._fence(t, bump)
                out.append(t.transactional_id)
        return out

    def expire_ids(self, expiration_ms: int) -> list[str]:
        """Kafka's ``transactional.id.expiration.ms``: delete (durably) the coordinator
        records in Empty, CompleteCommit or CompleteAbort not updated for at least
        ``expiration_ms`` (ms; ``updated_us`` is µs). Their producer ids and epochs are
        forgotten: a request naming the id gets INVALID_PRODUCER_ID_MAPPING (or
        TRANSACTIONAL_ID_NOT_FOUND from DescribeTransactions), InitProducerId starts it
        afresh. Returns the ids expired. Raises MetadataNotSaved (those not yet written
        are kept)."""
        limit = self._clock() - expiration_ms * 1000
        doomed = {f"tx/{tid}": None for tid, t in self.txns.items() if t.state in EXPIRABLE and t.updated_us <= limit}
        out: list[str] = []

        def applied(k: str, _v: Any) -> None:
            t = self.txns.pop(k[3:])
            if self.by_producer.get(t.producer_id) == t.transactional_id:
                del self.by_producer[t.producer_id]
            out.append(t.transactional_id)

        self._put_chunked(doomed, applied)
        return out

    def orphans(self) -> list[tuple[PartitionKey, int, int]]:
        """Open partition entries whose producer has no ongoing transaction that names
        the partition (left by a crash): ``(key, producer_id, epoch)`` to abort."""
        out = []
        for key, pt in self.partitions.items():
            for pid, (epoch, _f, _b) in pt.open.items():
                tid = self.by_producer.get(pid)
                t = None if tid is None else self.txns.get(tid)
                if t is None or t.state != ONGOING or list(key) not in t.partitions:
                    out.append((key, pid, epoch))
        return out
