"""The broker's per-partition metrics, read at scrape time (see :mod:`headwater.metrics`).

The hot paths only add to four plain ``int`` slots of each :class:`~.partition.Partition`
(``messages_in``, ``bytes_in``, ``messages_out``, ``bytes_out``: once per appended batch and once
per read, never per message); this module turns them, with each partition's segment count,
size and high watermark, into metric families when ``/metrics`` is scraped. Labels: ``stream``
and ``topic`` names, ``partition`` id (Iggy's 0-based id; the Kafka partition index).

Counters start at 0 when the server starts (and when a partition is created); Prometheus
handles the reset. A deleted partition's series ends.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from .. import metrics

if TYPE_CHECKING:
    from .broker import Broker

_LABELS = ("stream", "topic", "partition")


def _families(broker: "Broker") -> Iterator[Metric]:
    fams = {
        "messages_in": CounterMetricFamily(
            "headwater_partition_messages_in", "Messages appended to the partition", labels=_LABELS),
        "bytes_in": CounterMetricFamily(
            "headwater_partition_bytes_in", "Iggy batch bytes appended to the partition", labels=_LABELS),
        "messages_out": CounterMetricFamily(
            "headwater_partition_messages_out", "Messages read from the partition by consumers", labels=_LABELS),
        "bytes_out": CounterMetricFamily(
            "headwater_partition_bytes_out", "Iggy batch bytes read from the partition by consumers", labels=_LABELS),
    }
    segments = GaugeMetricFamily("headwater_partition_segments", "Segment files of the partition", labels=_LABELS)
    size = GaugeMetricFamily("headwater_partition_size_bytes", "Bytes stored in the partition's segments", labels=_LABELS)
    hw = GaugeMetricFamily(
        "headwater_partition_high_watermark", "The offset the partition's next message gets", labels=_LABELS)
    for stream in list(broker.catalog.streams.values()):
        for topic in list(stream.topics.values()):
            for p in list(topic.partitions.values()):
                labels = (stream.name, topic.name, str(p.id))
                for attr, fam in fams.items():
                    fam.add_metric(labels, getattr(p, attr))
                segments.add_metric(labels, p.segments_count)
                size.add_metric(labels, p.size_bytes)
                hw.add_metric(labels, p.high_watermark)
    yield from fams.values()
    yield from (segments, size, hw)


def register(broker: "Broker") -> int:
    """Expose ``broker``'s partitions in :data:`headwater.metrics.REGISTRY` (held weakly: a broker
    that is gone exposes nothing). Returns the key for :func:`unregister`."""
    ref = weakref.ref(broker)

    def source() -> Iterator[Metric]:
        b = ref()
        if b is not None:
            yield from _families(b)

    return metrics.add_source(source)


def unregister(key: int) -> None:
    metrics.remove_source(key)
