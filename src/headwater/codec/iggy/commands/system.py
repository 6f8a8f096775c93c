"""System commands: ping, stats, snapshot, cluster metadata, options catalog, clients.

Sources: ``commands.mdx`` "System"; crate ``requests/system/*.rs``,
``responses/system/*.rs``, ``responses/clients/*.rs``. Little-endian.

==========================  ======  =================================  ==============================
command                     code    request body                       reply payload (not framed)
==========================  ======  =================================  ==============================
PING                        1       empty                              empty
GET_STATS                   10      empty                              :class:`Stats`
GET_SNAPSHOT                11      [compression u8][n u8][type u8]*n  raw zip archive bytes
GET_CLUSTER_METADATA        12      empty                              :class:`ClusterMetadata`
DESCRIBE_OPTIONS            13      [scope u8] (1 topic, 2 stream,     [count u32][OptionDescriptor]*
                                    3 user)
GET_ME                      20      empty                              :class:`ClientDetails`
GET_CLIENT                  21      [client_id u32]                    :class:`ClientDetails` (empty
                                                                       body = not found)
GET_CLIENTS                 22      empty                              [ClientInfo]* (no count)
==========================  ======  =================================  ==============================
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ...errors import InvalidFormat
from ..codes import OptionsScope
from ..primitives import Reader, encode_bytes_u32, encode_name, encode_str_u32
from ._common import U32, Buffer, expect_empty, read_count

__all__ = [
    "Ping",
    "GetStats",
    "GetSnapshot",
    "GetClusterMetadata",
    "DescribeOptions",
    "GetMe",
    "GetClient",
    "GetClients",
    "decode_ping",
    "encode_ping",
    "decode_get_stats",
    "encode_get_stats",
    "decode_get_snapshot",
    "encode_get_snapshot",
    "decode_get_cluster_metadata",
    "encode_get_cluster_metadata",
    "decode_describe_options",
    "encode_describe_options",
    "decode_get_me",
    "encode_get_me",
    "decode_get_client",
    "encode_get_client",
    "decode_get_clients",
    "encode_get_clients",
    "CacheMetric",
    "Stats",
    "encode_stats",
    "decode_stats",
    "ClusterNode",
    "ClusterMetadata",
    "encode_cluster_metadata",
    "decode_cluster_metadata",
    "OptionDescriptor",
    "encode_option_descriptors",
    "decode_option_descriptors",
    "NO_USER_ID",
    "ClientGroupRef",
    "ClientInfo",
    "ClientDetails",
    "encode_client_info",
    "encode_clients",
    "decode_clients",
    "encode_client_details",
    "decode_client_details",
]

# ---------------------------------------------------------------- requests


@dataclass(frozen=True, slots=True)
class Ping:
    """Code 1, empty. The only command a server accepts before login."""


@dataclass(frozen=True, slots=True)
class GetStats:
    """Code 10, empty."""


@dataclass(frozen=True, slots=True)
class GetSnapshot:
    """Code 11. ``compression``: 1 stored .. 6 xz; ``snapshot_types``: 1..6 or 100 (all). Not range-checked."""

    compression: int
    snapshot_types: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class GetClusterMetadata:
    """Code 12, empty. The SDK sends it right after login (twice, observed) and needs a valid reply."""


@dataclass(frozen=True, slots=True)
class DescribeOptions:
    """Code 13: ``[scope u8]``."""

    scope: OptionsScope


@dataclass(frozen=True, slots=True)
class GetMe:
    """Code 20, empty."""


@dataclass(frozen=True, slots=True)
class GetClient:
    """Code 21: ``[client_id u32]`` (the server's u32 connection id, not the u128 header client)."""

    client_id: int


@dataclass(frozen=True, slots=True)
class GetClients:
    """Code 22, empty."""


def decode_ping(body: Buffer) -> Ping:
    """Raises :class:`InvalidFormat` unless the body is empty."""
    expect_empty(body, "ping")
    return Ping()


def encode_ping(value: Ping) -> bytes:
    return b""


def decode_get_stats(body: Buffer) -> GetStats:
    expect_empty(body, "get_stats")
    return GetStats()


def encode_get_stats(value: GetStats) -> bytes:
    return b""


def decode_get_snapshot(body: Buffer) -> GetSnapshot:
    """``[compression u8][types_count u8][type u8] x types_count``; raises :class:`InvalidFormat`."""
    r = Reader(body)
    compression = r.u8("compression")
    count = r.u8("types_count")
    types = tuple(r.view(count, "snapshot_types"))
    r.expect_end("get_snapshot")
    return GetSnapshot(compression, types)


def encode_get_snapshot(value: GetSnapshot) -> bytes:
    if len(value.snapshot_types) > 255:
        raise ValueError("at most 255 snapshot types")
    return bytes((value.compression, len(value.snapshot_types), *value.snapshot_types))


def decode_get_cluster_metadata(body: Buffer) -> GetClusterMetadata:
    expect_empty(body, "get_cluster_metadata")
    return GetClusterMetadata()


def encode_get_cluster_metadata(value: GetClusterMetadata) -> bytes:
    return b""


def decode_describe_options(body: Buffer) -> DescribeOptions:
    """``[scope u8]``; raises :class:`InvalidFormat` on a scope outside 1..3."""
    r = Reader(body)
    scope = r.u8("scope")
    r.expect_end("describe_options")
    if not 1 <= scope <= 3:
        raise InvalidFormat(f"describe_options: unknown scope {scope}", offset=0)
    return DescribeOptions(OptionsScope(scope))


def encode_describe_options(value: DescribeOptions) -> bytes:
    return bytes((int(value.scope),))


def decode_get_me(body: Buffer) -> GetMe:
    expect_empty(body, "get_me")
    return GetMe()


def encode_get_me(value: GetMe) -> bytes:
    return b""


def decode_get_client(body: Buffer) -> GetClient:
    """``[client_id u32]``."""
    r = Reader(body)
    client_id = r.u32("client_id")
    r.expect_end("get_client")
    return GetClient(client_id)


def encode_get_client(value: GetClient) -> bytes:
    return U32.pack(value.client_id)


def decode_get_clients(body: Buffer) -> GetClients:
    expect_empty(body, "get_clients")
    return GetClients()


def encode_get_clients(value: GetClients) -> bytes:
    return b""


# ---------------------------------------------------------------- stats reply


@dataclass(frozen=True, slots=True)
class CacheMetric:
    """``[stream_id u32][topic_id u32][partition_id u32][hits u64][misses u64][hit_ratio f32]`` (32 bytes)."""

    stream_id: int
    topic_id: int
    partition_id: int
    hits: int
    misses: int
    hit_ratio: float


@dataclass(frozen=True, slots=True)
class Stats:
    """GET_STATS reply (crate ``responses/system/get_stats.rs``)::

    [process_id u32][cpu_usage f32][total_cpu_usage f32]
    [memory_usage u64][total_memory u64][available_memory u64]   bytes
    [run_time u64 µs][start_time u64 µs since epoch]
    [read_bytes u64][written_bytes u64][messages_size_bytes u64]
    [streams_count u32][topics_count u32][partitions_count u32][segments_count u32]
    [messages_count u64][clients_count u32][consumer_groups_count u32]      (108 bytes so far)
    [hostname][os_name][os_version][kernel_version][iggy_server_version]   each [len u32][utf8]
    [iggy_server_semver u32, 0 = absent]
    [cache_metrics_count u32][CacheMetric]*
    [threads_count u32][free_disk_space u64][total_disk_space u64]
    """

    process_id: int = 0
    cpu_usage: float = 0.0
    total_cpu_usage: float = 0.0
    memory_usage: int = 0
    total_memory: int = 0
    available_memory: int = 0
    run_time: int = 0
    start_time: int = 0
    read_bytes: int = 0
    written_bytes: int = 0
    messages_size_bytes: int = 0
    streams_count: int = 0
    topics_count: int = 0
    partitions_count: int = 0
    segments_count: int = 0
    messages_count: int = 0
    clients_count: int = 0
    consumer_groups_count: int = 0
    hostname: str = ""
    os_name: str = ""
    os_version: str = ""
    kernel_version: str = ""
    iggy_server_version: str = ""
    iggy_server_semver: int = 0
    cache_metrics: tuple[CacheMetric, ...] = ()
    threads_count: int = 0
    free_disk_space: int = 0
    total_disk_space: int = 0


_STATS_HEAD = struct.Struct("<IffQQQQQQQQIIIIQII")
_CACHE_METRIC = struct.Struct("<IIIQQf")
_STATS_TAIL = struct.Struct("<IQQ")


def encode_stats(value: Stats) -> bytes:
    """Encode a GET_STATS reply payload (layout in :class:`Stats`)."""
    out = bytearray(
        _STATS_HEAD.pack(
            value.process_id,
            value.cpu_usage,
            value.total_cpu_usage,
            value.memory_usage,
            value.total_memory,
            value.available_memory,
            value.run_time,
            value.start_time,
            value.read_bytes,
            value.written_bytes,
            value.messages_size_bytes,
            value.streams_count,
            value.topics_count,
            value.partitions_count,
            value.segments_count,
            value.messages_count,
            value.clients_count,
            value.consumer_groups_count,
        )
    )
    for text, what in (
        (value.hostname, "hostname"),
        (value.os_name, "os_name"),
        (value.os_version, "os_version"),
        (value.kernel_version, "kernel_version"),
        (value.iggy_server_version, "iggy_server_version"),
    ):
        out += encode_str_u32(text, what)
    out += U32.pack(value.iggy_server_semver)
    out += U32.pack(len(value.cache_metrics))
    for m in value.cache_metrics:
        out += _CACHE_METRIC.pack(
            m.stream_id, m.topic_id, m.partition_id, m.hits, m.misses, m.hit_ratio
        )
    out += _STATS_TAIL.pack(value.threads_count, value.free_disk_space, value.total_disk_space)
    return bytes(out)


def decode_stats(payload: Buffer) -> Stats:
    """Decode a GET_STATS reply payload; raises :class:`InvalidFormat`."""
    r = Reader(payload)
    head = _STATS_HEAD.unpack(r.view(_STATS_HEAD.size, "stats"))
    strings = [
        r.str_u32(w)
        for w in ("hostname", "os_name", "os_version", "kernel_version", "iggy_server_version")
    ]
    semver = r.u32("iggy_server_semver")
    count = read_count(r, _CACHE_METRIC.size, "cache_metrics_count")
    metrics = tuple(
        CacheMetric(*_CACHE_METRIC.unpack(r.view(_CACHE_METRIC.size, "cache metric")))
        for _ in range(count)
    )
    threads, free, total = _STATS_TAIL.unpack(r.view(_STATS_TAIL.size, "stats tail"))
    r.expect_end("stats")
    return Stats(*head, *strings, semver, metrics, threads, free, total)


# ---------------------------------------------------------------- cluster metadata reply


@dataclass(frozen=True, slots=True)
class ClusterNode:
    """``[name_len u32][name][ip_len u32][ip][tcp u16][quic u16][http u16][websocket u16][role u8][status u8]``.

    ``role``: 0 leader, 1 follower. ``status``: 0 healthy .. 5 unknown. The
    SDK rejects other values.
    """

    name: str
    ip: str
    tcp_port: int = 0
    quic_port: int = 0
    http_port: int = 0
    websocket_port: int = 0
    role: int = 0
    status: int = 0


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """GET_CLUSTER_METADATA reply: ``[name_len u32][name][nodes_count u32][ClusterNode]*``."""

    name: str
    nodes: tuple[ClusterNode, ...] = ()


_NODE_TAIL = struct.Struct("<HHHHBB")


def encode_cluster_metadata(value: ClusterMetadata) -> bytes:
    """Encode the GET_CLUSTER_METADATA payload (crate ``responses/system/get_cluster_metadata.rs``)."""
    out = bytearray(encode_str_u32(value.name, "cluster name"))
    out += U32.pack(len(value.nodes))
    for n in value.nodes:
        out += encode_str_u32(n.name, "node name")
        out += encode_str_u32(n.ip, "node ip")
        out += _NODE_TAIL.pack(
            n.tcp_port, n.quic_port, n.http_port, n.websocket_port, n.role, n.status
        )
    return bytes(out)


def decode_cluster_metadata(payload: Buffer) -> ClusterMetadata:
    """Decode the GET_CLUSTER_METADATA payload; raises :class:`InvalidFormat`."""
    r = Reader(payload)
    name = r.str_u32("cluster name")
    count = read_count(r, 8 + _NODE_TAIL.size, "nodes_count")
    nodes = []
    for _ in range(count):
        node_name = r.str_u32("node name")
        ip = r.str_u32("node ip")
        nodes.append(
            ClusterNode(node_name, ip, *_NODE_TAIL.unpack(r.view(_NODE_TAIL.size, "node ports")))
        )
    r.expect_end("cluster metadata")
    return ClusterMetadata(name, tuple(nodes))


# ---------------------------------------------------------------- describe options reply


@dataclass(frozen=True, slots=True)
class OptionDescriptor:
    """``[key_len u8][key][kind u8][default_len u32][default][description_len u32][description]``.

    ``kind`` is a header-kind code (``encodings.mdx`` "Header kinds");
    ``default_value`` is the default in that kind's encoding, empty if none.
    """

    key: str
    kind: int
    default_value: bytes = b""
    description: str = ""


def encode_option_descriptors(
    values: list[OptionDescriptor] | tuple[OptionDescriptor, ...],
) -> bytes:
    """DESCRIBE_OPTIONS reply payload: ``[count u32][OptionDescriptor]*``."""
    out = bytearray(U32.pack(len(values)))
    for d in values:
        out += encode_name(d.key, "option key")
        out.append(d.kind)
        out += encode_bytes_u32(d.default_value)
        out += encode_str_u32(d.description, "description")
    return bytes(out)


def decode_option_descriptors(payload: Buffer) -> tuple[OptionDescriptor, ...]:
    """Decode a DESCRIBE_OPTIONS reply payload; raises :class:`InvalidFormat`."""
    r = Reader(payload)
    count = read_count(r, 11, "options count")
    out = []
    for _ in range(count):
        key = r.name("option key")
        kind = r.u8("option kind")
        default = r.bytes_u32("option default")
        out.append(OptionDescriptor(key, kind, default, r.str_u32("option description")))
    r.expect_end("describe options")
    return tuple(out)


# ---------------------------------------------------------------- clients replies

NO_USER_ID = 0xFFFFFFFF
"""``ClientInfo.user_id`` of a connection that is not logged in (the SDK maps it to ``None``)."""


@dataclass(frozen=True, slots=True)
class ClientGroupRef:
    """``[stream_id u32][topic_id u32][group_id u32]``: a group the client is a member of."""

    stream_id: int
    topic_id: int
    group_id: int


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """``[client_id u32][user_id u32][transport u8][address_len u32][address][consumer_groups_count u32]``.

    ``user_id`` is :data:`NO_USER_ID` before login; ``transport`` 1 tcp,
    2 quic, 3 http, 4 websocket.
    """

    client_id: int
    user_id: int
    transport: int
    address: str
    consumer_groups_count: int = 0


@dataclass(frozen=True, slots=True)
class ClientDetails:
    """GET_ME / GET_CLIENT reply: a :class:`ClientInfo` whose count is ``len(consumer_groups)``,
    followed by the :class:`ClientGroupRef` entries."""

    client_id: int
    user_id: int
    transport: int
    address: str
    consumer_groups: tuple[ClientGroupRef, ...] = ()


_CLIENT_HEAD = struct.Struct("<IIB")
_GROUP_REF = struct.Struct("<III")


def encode_client_info(value: ClientInfo) -> bytes:
    return (
        _CLIENT_HEAD.pack(value.client_id, value.user_id, value.transport)
        + encode_str_u32(value.address, "address")
        + U32.pack(value.consumer_groups_count)
    )


def _read_client_info(r: Reader) -> ClientInfo:
    client_id, user_id, transport = _CLIENT_HEAD.unpack(r.view(_CLIENT_HEAD.size, "client"))
    address = r.str_u32("address")
    return ClientInfo(client_id, user_id, transport, address, r.u32("consumer_groups_count"))


def encode_clients(values: list[ClientInfo] | tuple[ClientInfo, ...]) -> bytes:
    """GET_CLIENTS reply payload: the records back to back, no count."""
    return b"".join(encode_client_info(v) for v in values)


def decode_clients(payload: Buffer) -> tuple[ClientInfo, ...]:
    """Decode a GET_CLIENTS reply payload (read to the end); raises :class:`InvalidFormat`."""
    r = Reader(payload)
    out = []
    while not r.at_end:
        out.append(_read_client_info(r))
    return tuple(out)


def encode_client_details(value: ClientDetails) -> bytes:
    """GET_ME / GET_CLIENT reply payload."""
    head = encode_client_info(
        ClientInfo(
            value.client_id,
            value.user_id,
            value.transport,
            value.address,
            len(value.consumer_groups),
        )
    )
    return head + b"".join(
        _GROUP_REF.pack(g.stream_id, g.topic_id, g.group_id) for g in value.consumer_groups
    )


def decode_client_details(payload: Buffer) -> ClientDetails:
    """Decode a GET_ME / GET_CLIENT reply payload; raises :class:`InvalidFormat`."""
    r = Reader(payload)
    info = _read_client_info(r)
    if info.consumer_groups_count * _GROUP_REF.size > r.remaining:
        raise InvalidFormat("client details: consumer groups truncated", offset=r.pos)
    groups = tuple(
        ClientGroupRef(*_GROUP_REF.unpack(r.view(_GROUP_REF.size, "consumer group")))
        for _ in range(info.consumer_groups_count)
    )
    r.expect_end("client details")
    return ClientDetails(info.client_id, info.user_id, info.transport, info.address, groups)
