"""Catch-up reads: storage reads that must not wait for the disk on the event loop.

A read of bytes in the page cache is a copy and runs on the event loop; a read of bytes that are
not (a consumer far behind the tail, a timestamp lookup in an old segment) would stop every
other client while the disk answers. Storage's readers therefore take ``nowait``: instead of
waiting they raise :class:`~headwater.storage.api.NotCached`, having started a worker thread
reading the missing chunk (``storage.local.readahead``; the workers read files by name and never
touch the log's objects). This module is what the front-ends use around such reads:

- :func:`soon` runs ``fn(*args, nowait=True, **kwargs)`` once. Its result when every byte was
  cached (no coroutine, no await: the cached path stays synchronous), else the coroutine
  :func:`read_in`, which the caller awaits (or returns, for a dispatcher that awaits a handler's
  awaitable result);
- :func:`read_in` awaits the worker's read, asks ``check()`` (the partition may have been
  deleted meanwhile: it raises), and runs the read again from the start against the state of
  that moment, where it finds the worker's chunk held (no second disk read). After
  :data:`READ_MISS_TRIES` misses in a row (pages evicted as fast as they come in) it reads
  waiting, so a read always ends.

Each wait counts one ``headwater_catchup_reads_total`` and the bytes the worker read in
``headwater_catchup_read_bytes_total``, labelled with the caller's ``protocol`` (``iggy``,
``kafka`` or ``console``; a label only, this module knows no protocol).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from .. import metrics
from ..storage.api import NotCached

__all__ = ["READ_MISS_TRIES", "NotCached", "read_in", "soon", "wait"]

READ_MISS_TRIES = 4
"""Reads that may find their bytes missing from the page cache, one after another, before one waits."""


def soon(protocol: str, fn: Callable[..., Any], *args: Any, check: Callable[[], None] | None = None,
         **kwargs: Any) -> Any:
    """``fn(*args, nowait=True, **kwargs)``'s result when it needed no disk read, else a
    coroutine (:func:`read_in`, from that first miss) returning what ``fn`` returns once the
    bytes are read in. ``fn`` is a storage read taking ``nowait`` (``Partition.read``,
    ``Partition.offset_for_timestamp``, ``Broker.read_visible``); raises what ``fn`` raises."""
    try:
        return fn(*args, nowait=True, **kwargs)
    except NotCached as miss:
        return read_in(protocol, fn, *args, miss=miss, check=check, **kwargs)


async def read_in(protocol: str, fn: Callable[..., Any], *args: Any, miss: NotCached | None = None,
                  check: Callable[[], None] | None = None, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` without waiting for the disk on the event loop: each miss
    (NotCached) is awaited (the worker's read), then ``check()`` runs (it raises when what is
    read went away meanwhile, e.g. PartitionNotFound) and the read runs again. ``miss``: a miss
    already met (by :func:`soon`), awaited first. After :data:`READ_MISS_TRIES` misses in a row
    the read waits on the loop. Raises what ``fn`` and ``check`` raise."""
    for _ in range(READ_MISS_TRIES):
        if miss is not None:
            await wait(protocol, miss)
            if check is not None:
                check()
        try:
            return fn(*args, nowait=True, **kwargs)
        except NotCached as again:
            miss = again
    await wait(protocol, miss)
    if check is not None:
        check()
    return fn(*args, **kwargs)


async def wait(protocol: str, miss: NotCached) -> None:
    """Wait for the worker read behind ``miss`` and count it (reads, bytes) for ``protocol``.
    A worker that found the file gone has read nothing: the read that follows decides."""
    data = await asyncio.wrap_future(miss.future)
    metrics.count_catchup_read(protocol, len(data) if isinstance(data, (bytes, bytearray, memoryview)) else 0)
