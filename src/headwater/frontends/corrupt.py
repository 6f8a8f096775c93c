"""The operator hears of damaged stored data a read refused: one log line per partition a
minute, however many requests meet the damage (a consumer polling a damaged offset in a
loop, a fenced partition polled by every client).

Every front-end reports a refused read here (:func:`report`): a read that reached a damaged
batch (``core.errors.CorruptBatch``, keyed by its partition) or a refusal of a fenced partition
or a refused segment (any other ``CorruptData``, keyed by its message, which names the
partition's files). The first report of a key logs an ERROR line with the partition, the
offset (for a damaged batch), the protocol and storage's reason; later ones within
``EVERY_S`` seconds are counted and the count goes out with the next line.
"""

from __future__ import annotations

import logging
import time

from ..core import errors

log = logging.getLogger("headwater.corrupt")

EVERY_S = 60.0
_MAX_KEYS = 4096  # keys remembered (a key's line is due again anyway after EVERY_S)


class CorruptionLog:
    """Rate-limited log lines for refused reads of damaged data (see the module doc)."""

    def __init__(self, every_s: float = EVERY_S, clock=time.monotonic):
        self.every_s = every_s
        self._clock = clock
        self._last: dict[object, tuple[float, int]] = {}  # key -> (logged at, refusals since)

    def report(self, exc: errors.CorruptData, protocol: str, **kv) -> bool:
        """Count one refused read; log it when its key's line is due. True when a line was logged."""
        key: object = exc.partition if isinstance(exc, errors.CorruptBatch) else str(exc)
        now = self._clock()
        logged = self._last.get(key)
        if logged is not None and now - logged[0] < self.every_s:
            self._last[key] = (logged[0], logged[1] + 1)
            return False
        if len(self._last) >= _MAX_KEYS:
            self._last = {k: v for k, v in self._last.items() if now - v[0] < self.every_s}
        self._last[key] = (now, 0)
        fields = {"protocol": protocol, **kv}
        if isinstance(exc, errors.CorruptBatch):
            stream_id, topic_id, partition_id = exc.partition
            fields.update(stream_id=stream_id, topic_id=topic_id, partition_id=partition_id, offset=exc.offset)
        if logged is not None and logged[1]:
            fields["refused_since_last_line"] = logged[1]
        fields["error"] = str(exc)
        log.error("damaged data refused" if isinstance(exc, errors.CorruptBatch) else "corrupt data refused",
                  extra={"kv": fields})
        return True


_shared = CorruptionLog()


def report(exc: errors.CorruptData, protocol: str, **kv) -> bool:
    """:meth:`CorruptionLog.report` on the process's one log (shared by every front-end)."""
    return _shared.report(exc, protocol, **kv)
