"""Committed consumer offsets: one store for Iggy consumers, Iggy groups and Kafka groups.

A committed value is the *next offset to consume* (Kafka's meaning). Iggy's
"stored offset" is the last offset consumed, so the Iggy front-end stores
``stored + 1`` and reports ``next - 1``. Keys are
``(stream_id, topic_id, partition_id, kind, name)`` where kind is
``"consumer"`` (an Iggy single consumer) or ``"group"`` (a consumer group,
Iggy or Kafka, by group name), so a Kafka group and an Iggy consumer group of
the same name on the same topic share their offsets.

Persisted through a metadata store under ``o/<s>/<t>/<p>/<kind>/<name>``,
values ``{"offset": int, "metadata": str}`` plus ``"epoch": int`` when a Kafka
commit gave a leader epoch (``committed_leader_epoch``; absent = -1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

CONSUMER = "consumer"
GROUP = "group"


@dataclass(frozen=True, slots=True)
class Committed:
    offset: int  # next offset to consume
    metadata: str = ""
    leader_epoch: int = -1  # Kafka committed_leader_epoch (-1: none given)


def _key(stream_id: int, topic_id: int, partition_id: int, kind: str, name: str) -> str:
    return f"o/{stream_id}/{topic_id}/{partition_id}/{kind}/{name}"


def _value(c: Committed) -> dict[str, Any]:
    value: dict[str, Any] = {"offset": c.offset, "metadata": c.metadata}
    if c.leader_epoch >= 0:
        value["epoch"] = c.leader_epoch
    return value


class OffsetStore:
    def __init__(self, persist: Callable[[str, Any], None], persist_many: Callable[[dict], None]):
        self._persist = persist
        self._persist_many = persist_many
        self._data: dict[tuple[int, int, int, str, str], Committed] = {}

    def load(self, records: dict[str, Any]) -> None:
        for key, value in records.items():
            if not key.startswith("o/"):
                continue
            _, s, t, p, kind, name = key.split("/", 5)
            self._data[(int(s), int(t), int(p), kind, name)] = Committed(
                value["offset"], value.get("metadata", ""), int(value.get("epoch", -1))
            )

    def get(self, stream_id: int, topic_id: int, partition_id: int, kind: str, name: str) -> Committed | None:
        return self._data.get((stream_id, topic_id, partition_id, kind, name))

    def put(self, stream_id: int, topic_id: int, partition_id: int, kind: str, name: str,
            offset: int, metadata: str = "") -> None:
        k = (stream_id, topic_id, partition_id, kind, name)
        c = Committed(offset, metadata)
        if self._data.get(k) == c:
            return
        self._persist(_key(*k), {"offset": offset, "metadata": metadata})  # durable first, then memory
        self._data[k] = c

    def put_many(self, changes: list[tuple[tuple[int, int, int, str, str], Committed | None]]) -> None:
        """Apply several commits (``None`` deletes) atomically: one durable write for all."""
        record: dict[str, Any] = {}
        applied: dict[tuple[int, int, int, str, str], Committed | None] = {}
        for k, c in changes:
            if c is None:
                if k in self._data or applied.get(k) is not None:
                    record[_key(*k)] = None
                    applied[k] = None
            elif applied.get(k, self._data.get(k)) != c:
                record[_key(*k)] = _value(c)
                applied[k] = c
        if record:
            self._persist_many(record)  # durable first: a failed write changes nothing
        for k, c in applied.items():
            if c is None:
                self._data.pop(k, None)
            else:
                self._data[k] = c

    def delete(self, stream_id: int, topic_id: int, partition_id: int, kind: str, name: str) -> bool:
        k = (stream_id, topic_id, partition_id, kind, name)
        if k not in self._data:
            return False
        self._persist(_key(*k), None)
        del self._data[k]
        return True

    def items(self) -> Iterator[tuple[tuple[int, int, int, str, str], Committed]]:
        return iter(list(self._data.items()))

    def delete_keys(self, keys) -> int:
        """Delete the given ``(stream, topic, partition, kind, name)`` keys in one durable write."""
        doomed = [k for k in keys if k in self._data]
        if doomed:
            self._persist_many({_key(*k): None for k in doomed})
        for k in doomed:
            del self._data[k]
        return len(doomed)

    def delete_where(self, stream_id: int, topic_id: int | None = None, partition_id: int | None = None,
                     kind: str | None = None, name: str | None = None) -> int:
        """Delete every offset under the given stream / topic / partition / consumer."""
        doomed = [
            k for k in self._data
            if k[0] == stream_id
            and (topic_id is None or k[1] == topic_id)
            and (partition_id is None or k[2] == partition_id)
            and (kind is None or k[3] == kind)
            and (name is None or k[4] == name)
        ]
        if doomed:
            self._persist_many({_key(*k): None for k in doomed})
        for k in doomed:
            del self._data[k]
        return len(doomed)
