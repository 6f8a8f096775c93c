"""Prometheus metrics: the process's one registry, the metrics recorded as things happen, and
the text exposition served at ``/metrics``.

This module sits below every other layer (import-linter's "layers point down"): storage, core
and the front-ends import it; it imports nothing of Headwater. Recording is kept off the
per-message paths (see STYLE.md, Hot paths):

======================================= ========= ============================== =====================
metric                                  type      labels                         recorded
======================================= ========= ============================== =====================
headwater_request_duration_seconds      histogram protocol, transport, request   once per produce/fetch
                                                                                 request, at the front-
                                                                                 end's dispatch
headwater_connections                   gauge     protocol, transport            on accept and close
headwater_fsync_duration_seconds        histogram kind (``group_commit``,        once per sync round /
                                                  ``inline``)                    inline sync
headwater_partition_messages_in_total   counter   stream, topic, partition       read at scrape time
headwater_partition_bytes_in_total      counter   (names; partition id)          from plain ``int``
headwater_partition_messages_out_total  counter                                  counters the partition
headwater_partition_bytes_out_total     counter                                  bumps once per batch
headwater_partition_segments            gauge                                    (core.metrics_source)
headwater_partition_size_bytes          gauge
headwater_partition_high_watermark      gauge
process_*, python_*                     (prometheus_client's process and platform collectors)
======================================= ========= ============================== =====================

``request`` is ``produce`` or ``fetch``; ``protocol`` ``iggy`` or ``kafka``; ``transport``
``tcp`` (other transports use their own name: ``http``, ``quic``, ``websocket``). A fetch's
duration includes its long-poll wait (as Kafka's FetchConsumer TotalTimeMs does). Bytes are
Iggy batch bytes (256-byte batch header included), as stored; "out" counts what partitions
handed to readers (Iggy polls, Kafka fetches before conversion).
"""

from __future__ import annotations

import threading
from typing import Callable, Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

REGISTRY = CollectorRegistry(auto_describe=False)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

# Request latency: 100 µs .. 30 s (a Kafka fetch long poll can wait up to its max_wait_ms).
_REQUEST_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0, 10.0, 30.0)
# fdatasync: 50 µs (page cache on tmpfs) .. 5 s (a stalled disk).
_FSYNC_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                  1.0, 5.0)

REQUEST_SECONDS = Histogram(
    "headwater_request_duration_seconds",
    "Time from a whole request frame to its reply (produce and fetch requests), seconds",
    ("protocol", "transport", "request"),
    buckets=_REQUEST_BUCKETS,
    registry=REGISTRY,
)
CONNECTIONS = Gauge(
    "headwater_connections", "Open client connections", ("protocol", "transport"), registry=REGISTRY
)
FSYNC_SECONDS = Histogram(
    "headwater_fsync_duration_seconds",
    "Time spent in fdatasync of partition files, per group-commit round or inline sync, seconds",
    ("kind",),
    buckets=_FSYNC_BUCKETS,
    registry=REGISTRY,
)

PRODUCE = "produce"
FETCH = "fetch"


def request_histogram(protocol: str, transport: str, request: str):
    """The histogram child for one (protocol, transport, request); fetch it once and keep it
    (``labels()`` is a dict lookup under a lock), then ``observe(seconds)`` per request."""
    return REQUEST_SECONDS.labels(protocol, transport, request)


def connections_gauge(protocol: str, transport: str):
    """The connections gauge child for one listener: ``inc()`` on accept, ``dec()`` on close."""
    return CONNECTIONS.labels(protocol, transport)


def observe_fsync(kind: str, seconds: float) -> None:
    """Record one sync (``kind``: ``group_commit`` for a flusher round, ``inline`` otherwise)."""
    FSYNC_SECONDS.labels(kind).observe(seconds)


class _Sources:
    """Collectors added at run time (one per broker), read at scrape time; a source is a callable
    returning metric families. Thread-safe: a scrape may run on another thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sources: dict[int, Callable[[], Iterable[Metric]]] = {}

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            sources = list(self._sources.values())
        for source in sources:
            yield from source()

    def add(self, source: Callable[[], Iterable[Metric]]) -> int:
        with self._lock:
            key = id(source)
            self._sources[key] = source
            return key

    def remove(self, key: int) -> None:
        with self._lock:
            self._sources.pop(key, None)


_SOURCES = _Sources()
REGISTRY.register(_SOURCES)  # type: ignore[arg-type]  (a collector needs only collect())


def add_source(source: Callable[[], Iterable[Metric]]) -> int:
    """Add a scrape-time source of metric families; returns a key for :func:`remove_source`."""
    return _SOURCES.add(source)


def remove_source(key: int) -> None:
    _SOURCES.remove(key)


def exposition() -> tuple[bytes, str]:
    """The registry in the Prometheus text exposition format: (body, Content-Type header value,
    prometheus_client's ``CONTENT_TYPE_LATEST``). Call it on the event loop's thread (it reads
    broker state)."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
