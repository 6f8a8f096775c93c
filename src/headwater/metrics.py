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
headwater_catchup_reads_total           counter   protocol                       once per read that
headwater_catchup_read_bytes_total      counter                                  waited for a worker
                                                                                 thread to read bytes
                                                                                 not in the page cache
headwater_partition_messages_in_total   counter   stream, topic, partition       read at scrape time
headwater_partition_bytes_in_total      counter   (names; partition id)          from plain ``int``
headwater_partition_messages_out_total  counter                                  counters the partition
headwater_partition_bytes_out_total     counter                                  bumps once per batch
headwater_partition_segments            gauge                                    (core.metrics_source)
headwater_partition_size_bytes          gauge
headwater_partition_high_watermark      gauge
process_*, python_*                     (prometheus_client's process, platform and GC collectors)
======================================= ========= ============================== =====================

A catch-up read (``core.catchup``) is a poll, fetch or timestamp lookup that found bytes missing
from the page cache and waited for storage's worker thread to read them in: the read counts one,
and its bytes are what that worker read (a chunk of a segment file, so at least the bytes asked
for); a read that misses again after the wait counts again.

``request`` is ``produce`` or ``fetch``; ``protocol`` ``iggy`` or ``kafka``; ``transport``
``tcp`` (other transports use their own name: ``http``, ``quic``, ``websocket``). A fetch's
duration includes its long-poll wait (as Kafka's FetchConsumer TotalTimeMs does). Bytes are
Iggy batch bytes (256-byte batch header included), as stored; "out" counts what partitions
handed to readers (Iggy polls, Kafka fetches before conversion).
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from typing import Callable, Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

REGISTRY = CollectorRegistry(auto_describe=False)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)  # python_gc_*: the cyclic collector's runs per generation (gc.get_stats)

# Request latency: 100 µs .. 30 s (a Kafka fetch long poll can wait up to its max_wait_ms).
_REQUEST_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0, 10.0, 30.0)
# fdatasync: 50 µs (page cache on tmpfs) .. 5 s (a stalled disk).
_FSYNC_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                  1.0, 5.0)



class _Timings:
    """A histogram family recorded with one bisect and two additions per observation (prometheus_
    client's ``Histogram.observe`` takes a lock and costs about 4 µs; this about 0.3 µs), turned
    into a histogram family at scrape time. Observe on the event loop's thread only."""

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...], buckets: tuple[float, ...]):
        self.name = name
        self.documentation = documentation
        self.labelnames = labelnames
        self.bounds = tuple(sorted(buckets))
        self._children: dict[tuple[str, ...], _Timing] = {}

    def labels(self, *values: str) -> "_Timing":
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = _Timing(self.bounds)
        return child

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        edges = [floatToGoString(b) for b in self.bounds] + ["+Inf"]
        for values, child in list(self._children.items()):
            running, buckets = 0, []
            for edge, count in zip(edges, child.counts):
                running += count
                buckets.append((edge, running))
            family.add_metric(list(values), buckets, child.sum)
        yield family


class _Timing:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: over every bound (+Inf)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds


REQUEST_SECONDS = _Timings(
    "headwater_request_duration_seconds",
    "Time from a whole request frame to its reply (produce and fetch requests), seconds",
    ("protocol", "transport", "request"),
    _REQUEST_BUCKETS,
)
REGISTRY.register(REQUEST_SECONDS)  # type: ignore[arg-type]  (a collector needs only collect())
CONNECTIONS = Gauge(
    "headwater_connections", "Open client connections", ("protocol", "transport"), registry=REGISTRY
)
FSYNC_SECONDS = _Timings(
    "headwater_fsync_duration_seconds",
    "Time spent in fdatasync of partition files, per group-commit round or inline sync, seconds",
    ("kind",),
    _FSYNC_BUCKETS,
)
REGISTRY.register(FSYNC_SECONDS)  # type: ignore[arg-type]

CATCHUP_READS = Counter(
    "headwater_catchup_reads", "Reads that waited for a worker thread to read bytes not in the page cache",
    ("protocol",), registry=REGISTRY,
)
CATCHUP_READ_BYTES = Counter(
    "headwater_catchup_read_bytes", "Bytes worker threads read in for reads that waited for them",
    ("protocol",), registry=REGISTRY,
)

PRODUCE = "produce"
FETCH = "fetch"
IGGY = "iggy"
KAFKA = "kafka"
CONSOLE = "console"
"""The ``protocol`` label of the web console's catch-up reads (its message browser)."""


def count_catchup_read(protocol: str, nbytes: int) -> None:
    """Record one catch-up read of ``protocol`` (``iggy``, ``kafka`` or ``console``) whose worker read
    ``nbytes`` bytes (on the event loop's thread, once per read that waited)."""
    CATCHUP_READS.labels(protocol).inc()
    if nbytes > 0:
        CATCHUP_READ_BYTES.labels(protocol).inc(nbytes)


def request_histogram(protocol: str, transport: str, request: str) -> _Timing:
    """The histogram child for one (protocol, transport, request); fetch it once and keep it,
    then ``observe(seconds)`` per request (on the event loop's thread)."""
    return REQUEST_SECONDS.labels(protocol, transport, request)


def connections_gauge(protocol: str, transport: str):
    """The connections gauge child for one listener: ``inc()`` on accept, ``dec()`` on close."""
    return CONNECTIONS.labels(protocol, transport)


def count_connections(protocol: str, transport: str, count: Callable[[], int]) -> None:
    """The connections gauge child for a listener that keeps its own table (uvicorn's for HTTP,
    aioquic's for QUIC): ``count()`` is read at scrape time (the last listener registered for a
    label wins; a server runs one per label)."""
    CONNECTIONS.labels(protocol, transport).set_function(count)


def observe_fsync(kind: str, seconds: float) -> None:
    """Record one sync (``kind``: ``group_commit`` for a flusher round, ``inline_no_fd`` for a
    round done inline because its ``os.dup`` found no fd free, ``inline`` otherwise)."""
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
