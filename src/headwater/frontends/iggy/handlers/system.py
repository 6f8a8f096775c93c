"""System commands: ping (1), stats (10), snapshot (11), cluster metadata (12),
describe options (13), me (20), client (21), clients (22)."""

from __future__ import annotations

import os
import platform
import resource
import shutil
import socket
import threading

from .... import __version__
from ....codec.iggy.codes import Command, OptionsScope
from ....codec.iggy.commands import system as w
from ....config import parse_address
from ....core import errors
from ....core import topic_options as topt
from ....core.broker import Client
from ..registry import Context, iggy_command
from ._common import require

# the ``transport`` byte of a client's details (Iggy's TransportProtocol): TLS on TCP is still tcp
TRANSPORTS = {"tcp": 1, "quic": 2, "http": 3, "websocket": 4}


@iggy_command(Command.PING)
def ping(ctx: Context, req: w.Ping) -> bytes:
    return b""


def _memory() -> tuple[int, int, int]:
    """(process RSS, total, available) in bytes, from /proc when present."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    total = available = 0
    try:
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        with open("/proc/meminfo") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
        total, available = info.get("MemTotal", 0), info.get("MemAvailable", 0)
    except (OSError, ValueError, IndexError):
        pass
    return rss, total, available


@iggy_command(Command.GET_STATS)
def get_stats(ctx: Context, req: w.GetStats) -> bytes:
    require(ctx.checker.read_servers(), "read servers")
    s = ctx.broker.stats()
    now = ctx.broker.clock()
    rss, total, available = _memory()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    run_time = max(now - s.started_at_us, 1)
    cpu = 100.0 * (usage.ru_utime + usage.ru_stime) * 1_000_000 / run_time
    try:
        disk = shutil.disk_usage(ctx.frontend.data_dir)
        free_disk, total_disk = disk.free, disk.total
    except OSError:
        free_disk = total_disk = 0
    major, minor, patch = (int(x) for x in __version__.split(".")[:3])
    uname = platform.uname()
    return w.encode_stats(
        w.Stats(
            process_id=os.getpid(),
            cpu_usage=cpu,
            total_cpu_usage=cpu,
            memory_usage=rss,
            total_memory=total,
            available_memory=available,
            run_time=run_time,
            start_time=s.started_at_us,
            read_bytes=0,
            written_bytes=0,
            messages_size_bytes=s.size_bytes,
            streams_count=s.streams,
            topics_count=s.topics,
            partitions_count=s.partitions,
            segments_count=s.segments,
            messages_count=s.messages,
            clients_count=s.clients,
            consumer_groups_count=s.consumer_groups,
            hostname=socket.gethostname(),
            os_name=uname.system,
            os_version=uname.release,
            kernel_version=uname.version[:255],
            iggy_server_version=f"headwater {__version__}",
            iggy_server_semver=(major << 20) | (minor << 10) | patch,
            cache_metrics=(),
            threads_count=threading.active_count(),
            free_disk_space=free_disk,
            total_disk_space=total_disk,
        )
    )


@iggy_command(Command.GET_SNAPSHOT)
def get_snapshot(ctx: Context, req: w.GetSnapshot) -> bytes:
    raise errors.FeatureUnavailable("snapshots are not implemented")


@iggy_command(Command.GET_CLUSTER_METADATA)
def get_cluster_metadata(ctx: Context, req: w.GetClusterMetadata) -> bytes:
    host, port = parse_address(ctx.frontend.config.address)
    ports = ctx.frontend.node_ports  # the bound port of each transport serving (0: not served)
    node = w.ClusterNode(
        name="headwater-0", ip=host, tcp_port=ports.get("tcp", port), quic_port=ports.get("quic", 0),
        http_port=ports.get("http", 0), websocket_port=ports.get("websocket", 0), role=0, status=0,
    )
    return w.encode_cluster_metadata(w.ClusterMetadata(name="headwater", nodes=(node,)))


@iggy_command(Command.DESCRIBE_OPTIONS)
def describe_options(ctx: Context, req: w.DescribeOptions) -> bytes:
    if req.scope != OptionsScope.TOPIC:
        return w.encode_option_descriptors([])
    return w.encode_option_descriptors(
        [w.OptionDescriptor(o.key, o.kind, o.default_bytes, o.description) for o in topt.describe()]
    )


def _client_details(ctx: Context, c: Client) -> w.ClientDetails:
    return w.ClientDetails(
        client_id=c.id,
        user_id=w.NO_USER_ID if c.user_id is None else c.user_id,
        transport=TRANSPORTS.get(c.transport, 1),
        address=c.address,
        consumer_groups=tuple(w.ClientGroupRef(s, t, g) for s, t, g in sorted(c.groups)),
    )


@iggy_command(Command.GET_ME)
def get_me(ctx: Context, req: w.GetMe) -> bytes:
    return w.encode_client_details(_client_details(ctx, ctx.client))


@iggy_command(Command.GET_CLIENT)
def get_client(ctx: Context, req: w.GetClient) -> bytes:
    require(ctx.checker.read_servers(), "read servers")
    c = ctx.broker.clients.get(req.client_id)
    return b"" if c is None else w.encode_client_details(_client_details(ctx, c))


@iggy_command(Command.GET_CLIENTS)
def get_clients(ctx: Context, req: w.GetClients) -> bytes:
    require(ctx.checker.read_servers(), "read servers")
    return w.encode_clients(
        [
            w.ClientInfo(
                c.id, w.NO_USER_ID if c.user_id is None else c.user_id, TRANSPORTS.get(c.transport, 1), c.address, len(c.groups)
            )
            for c in sorted(ctx.broker.clients.values(), key=lambda c: c.id)
        ]
    )
