"""DescribeLogDirs (key 35), versions 1-4: the one data directory, its health and sizes.

Request: ``topics`` (null: every topic) of ``{topic, partitions[]}``. Response:
one ``DescribeLogDirsResult`` for the data directory (``log_dir``, the
absolute path). Its ``error_code`` is KAFKA_STORAGE_ERROR (56) while the
directory is offline for writes, i.e. during an episode of refused writes
(``core.storage_health``: from the first write the filesystem refused, e.g.
ENOSPC, to the next one it took); the topics are then left empty, as Kafka
does for an offline directory. Otherwise NONE, with ``partition_size`` (bytes
of stored batches), ``offset_lag`` 0 and ``is_future_key`` false per
partition asked for (unknown topics and partitions are left out, as in
Kafka). v2 is flexible; v3 adds the top-level ``error_code``; v4 adds
``total_bytes`` and ``usable_bytes`` of the volume (``os.statvfs``; -1 when
unknown). v0 is not served (kio has no schema for it; Kafka 4 dropped it).
"""

from __future__ import annotations

from .. import errors
from ....core.acls import Operation
from .. import authz
from ..registry import ApiKey, Context, kafka_api


def _topics(ctx: Context, request):
    names = ctx.frontend.names
    if request.topics is None:
        wanted = [(name, topic, None) for name, topic in names.visible()]
    else:
        wanted = [(t.topic, names.resolve(t.topic), set(t.partitions)) for t in request.topics]
    out = []
    for name, topic, partitions in wanted:
        if topic is None:
            continue
        parts = tuple(
            ctx.build("DescribeLogDirsPartition", partition_index=pid, partition_size=p.size_bytes,
                      offset_lag=0, is_future_key=False)
            for pid, p in sorted(topic.partitions.items())
            if partitions is None or pid in partitions
        )
        if parts:
            out.append(ctx.build("DescribeLogDirsTopic", name=name, partitions=parts))
    return tuple(out)


@kafka_api(ApiKey.DESCRIBE_LOG_DIRS)
def describe_log_dirs(ctx: Context, request):
    if not authz.cluster(ctx, Operation.DESCRIBE):  # Kafka: v3+ a top-level error, before: no results
        return ctx.response(throttle_time=0, error_code=authz.CLUSTER_AUTHORIZATION_FAILED, results=())
    health = ctx.broker.health.snapshot()
    offline = not health.healthy
    result = ctx.build(
        "DescribeLogDirsResult",
        error_code=errors.KAFKA_STORAGE_ERROR if offline else errors.NONE,
        log_dir=health.location,
        topics=() if offline else _topics(ctx, request),
        total_bytes=health.total_bytes,
        usable_bytes=health.usable_bytes,
    )
    return ctx.response(throttle_time=0, error_code=errors.NONE, results=(result,))
