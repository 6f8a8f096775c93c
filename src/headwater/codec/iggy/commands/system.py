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

from dataclasses import dataclass

from ..codes import Command, OptionsScope
from ..schema import BYTES32, F32, NAME, REST, STR32, TO_END, U8, U16, U32, U64, Enum, Field, ListOf
from ..schema import Record, details, payload_codec, request

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


CACHE_METRIC = Record(
    CacheMetric,
    [
        Field("stream_id", U32),
        Field("topic_id", U32),
        Field("partition_id", U32),
        Field("hits", U64),
        Field("misses", U64),
        Field("hit_ratio", F32),
    ],
    label="cache metric",
)
STATS = Record(
    Stats,
    [
        Field("process_id", U32),
        Field("cpu_usage", F32),
        Field("total_cpu_usage", F32),
        Field("memory_usage", U64, doc="bytes"),
        Field("total_memory", U64, doc="bytes"),
        Field("available_memory", U64, doc="bytes"),
        Field("run_time", U64, doc="µs"),
        Field("start_time", U64, doc="µs since the epoch"),
        Field("read_bytes", U64),
        Field("written_bytes", U64),
        Field("messages_size_bytes", U64),
        Field("streams_count", U32),
        Field("topics_count", U32),
        Field("partitions_count", U32),
        Field("segments_count", U32),
        Field("messages_count", U64),
        Field("clients_count", U32),
        Field("consumer_groups_count", U32),
        Field("hostname", STR32),
        Field("os_name", STR32),
        Field("os_version", STR32),
        Field("kernel_version", STR32),
        Field("iggy_server_version", STR32),
        Field("iggy_server_semver", U32, json="zero is null", doc="0 = absent"),
        Field("cache_metrics", ListOf(CACHE_METRIC, U32), json="cache metrics"),
        Field("threads_count", U32),
        Field("free_disk_space", U64, doc="bytes"),
        Field("total_disk_space", U64, doc="bytes"),
    ],
)
decode_stats, encode_stats = STATS.codec()

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


CLUSTER_NODE = Record(
    ClusterNode,
    [
        Field("name", STR32),
        Field("ip", STR32),
        Field("tcp_port", U16),
        Field("quic_port", U16),
        Field("http_port", U16),
        Field("websocket_port", U16),
        Field("role", U8, doc="0 leader, 1 follower"),
        Field("status", U8, doc="0 healthy .. 5 unknown"),
    ],
    label="node",
)
CLUSTER_METADATA = Record(
    ClusterMetadata,
    [Field("name", STR32), Field("nodes", ListOf(CLUSTER_NODE, U32), json="cluster nodes")],
    what="cluster metadata",
)
decode_cluster_metadata, encode_cluster_metadata = CLUSTER_METADATA.codec()

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


OPTION_DESCRIPTOR = Record(
    OptionDescriptor,
    [
        Field("key", NAME),
        Field("kind", U8, doc="header kind code"),
        Field("default_value", BYTES32),
        Field("description", STR32),
    ],
    label="option",
)
OPTION_DESCRIPTORS = ListOf(OPTION_DESCRIPTOR, U32)
"""DESCRIBE_OPTIONS reply payload: ``[count u32][OptionDescriptor]*``."""
decode_option_descriptors, encode_option_descriptors = payload_codec(
    OPTION_DESCRIPTORS, "describe options"
)

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


CLIENT_GROUP_REF = Record(
    ClientGroupRef,
    [Field("stream_id", U32), Field("topic_id", U32), Field("group_id", U32)],
    label="consumer group",
)
CLIENT_INFO = Record(
    ClientInfo,
    [
        Field("client_id", U32),
        Field("user_id", U32, json="no user is null", doc="NO_USER_ID before login"),
        Field("transport", U8, json="transport", doc="1 tcp, 2 quic, 3 http, 4 websocket"),
        Field("address", STR32),
        Field("consumer_groups_count", U32),
    ],
    label="client",
)
CLIENT_DETAILS = details(CLIENT_INFO, ClientDetails, "consumer_groups", CLIENT_GROUP_REF)
CLIENTS = ListOf(CLIENT_INFO, TO_END)
"""GET_CLIENTS reply payload: the records back to back, no count."""

encode_client_info = CLIENT_INFO.codec()[1]
decode_clients, encode_clients = payload_codec(CLIENTS, "clients")
decode_client_details, encode_client_details = CLIENT_DETAILS.codec()

# ---------------------------------------------------------------- requests

PING = request(Command.PING, Ping)
GET_STATS = request(Command.GET_STATS, GetStats, reply=STATS)
GET_SNAPSHOT = request(
    Command.GET_SNAPSHOT,
    GetSnapshot,
    [Field("compression", U8), Field("snapshot_types", ListOf(U8, U8))],
    reply=REST,
)
GET_CLUSTER_METADATA = request(
    Command.GET_CLUSTER_METADATA, GetClusterMetadata, reply=CLUSTER_METADATA
)
DESCRIBE_OPTIONS = request(
    Command.DESCRIBE_OPTIONS,
    DescribeOptions,
    [Field("scope", Enum(U8, OptionsScope))],
    reply=OPTION_DESCRIPTORS,
)
GET_ME = request(Command.GET_ME, GetMe, reply=CLIENT_DETAILS)
GET_CLIENT = request(
    Command.GET_CLIENT,
    GetClient,
    [Field("client_id", U32)],
    reply=CLIENT_DETAILS,
    empty_reply="not found",
)
GET_CLIENTS = request(Command.GET_CLIENTS, GetClients, reply=CLIENTS)

payload_codec(REST, "snapshot")  # GET_SNAPSHOT's reply: the raw archive bytes
decode_ping, encode_ping = PING.codec()
decode_get_stats, encode_get_stats = GET_STATS.codec()
decode_get_snapshot, encode_get_snapshot = GET_SNAPSHOT.codec()
decode_get_cluster_metadata, encode_get_cluster_metadata = GET_CLUSTER_METADATA.codec()
decode_describe_options, encode_describe_options = DESCRIBE_OPTIONS.codec()
decode_get_me, encode_get_me = GET_ME.codec()
decode_get_client, encode_get_client = GET_CLIENT.codec()
decode_get_clients, encode_get_clients = GET_CLIENTS.codec()
