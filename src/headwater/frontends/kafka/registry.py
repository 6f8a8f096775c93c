"""The Kafka API registry: api_key -> (versions, handler module) in :data:`APIS`, and the
handlers, filled by ``@kafka_api`` when their module is imported.

:data:`APIS` is the one list of what this broker serves: ApiVersions is built from it and a
request is checked against it before its handler module is loaded, so a server need not
import every handler (and its kio schemas and codecs) before it listens: an API's module is
imported on its first request (``handlers.handler``, ~0.3-5 ms once), and a module's
``@kafka_api`` registers only an API that :data:`APIS` lists under that module.

A handler takes ``(ctx, request)``: ``request`` is the kio request entity for
``ctx.version`` (or the raw body bytes for a version kio has no schema for, e.g.
Produce v0-2) and returns the kio response entity, ``None`` for "send no response"
(Produce with acks=0), or an awaitable of either. Its module's docstring says what
each version adds.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Union

from ...config import KafkaConfig
from ...core.broker import Broker
from ...codec.kafka import messages


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


Handler = Callable[["Context", Any], Union[Any, Awaitable[Any]]]


@dataclass(frozen=True)
class Api:
    key: int
    min_version: int
    max_version: int
    module: str  # the module of ``handlers`` whose ``@kafka_api`` registers its handler


APIS: dict[int, Api] = {int(key): Api(int(key), low, high, module) for key, low, high, module in (
    (ApiKey.PRODUCE, 0, 12, "produce"),
    (ApiKey.FETCH, 4, 17, "fetch"),
    (ApiKey.LIST_OFFSETS, 1, 10, "list_offsets"),
    (ApiKey.METADATA, 0, 13, "metadata"),
    (ApiKey.OFFSET_COMMIT, 2, 9, "offset_commit"),
    (ApiKey.OFFSET_FETCH, 1, 9, "offset_fetch"),
    (ApiKey.FIND_COORDINATOR, 0, 6, "find_coordinator"),
    (ApiKey.JOIN_GROUP, 0, 9, "join_group"),
    (ApiKey.HEARTBEAT, 0, 4, "heartbeat"),
    (ApiKey.LEAVE_GROUP, 0, 5, "leave_group"),
    (ApiKey.SYNC_GROUP, 0, 5, "sync_group"),
    (ApiKey.DESCRIBE_GROUPS, 0, 6, "describe_groups"),
    (ApiKey.LIST_GROUPS, 0, 5, "list_groups"),
    (ApiKey.SASL_HANDSHAKE, 0, 1, "sasl_handshake"),
    (ApiKey.API_VERSIONS, 0, 4, "api_versions"),
    (ApiKey.CREATE_TOPICS, 2, 7, "create_topics"),
    (ApiKey.DELETE_TOPICS, 1, 6, "delete_topics"),
    (ApiKey.DELETE_RECORDS, 0, 2, "delete_records"),
    (ApiKey.INIT_PRODUCER_ID, 0, 5, "init_producer_id"),
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 4, "offset_for_leader_epoch"),
    (ApiKey.ADD_PARTITIONS_TO_TXN, 0, 3, "add_partitions_to_txn"),
    (ApiKey.ADD_OFFSETS_TO_TXN, 0, 3, "add_offsets_to_txn"),
    (ApiKey.END_TXN, 0, 3, "end_txn"),
    (ApiKey.TXN_OFFSET_COMMIT, 0, 3, "txn_offset_commit"),
    (ApiKey.DESCRIBE_ACLS, 1, 3, "acls"),
    (ApiKey.CREATE_ACLS, 1, 3, "acls"),
    (ApiKey.DELETE_ACLS, 1, 3, "acls"),
    (ApiKey.DESCRIBE_CONFIGS, 1, 4, "describe_configs"),
    (ApiKey.ALTER_CONFIGS, 0, 2, "alter_configs"),
    (ApiKey.DESCRIBE_LOG_DIRS, 1, 4, "describe_log_dirs"),
    (ApiKey.SASL_AUTHENTICATE, 0, 2, "sasl_authenticate"),
    (ApiKey.CREATE_PARTITIONS, 0, 3, "create_partitions"),
    (ApiKey.DELETE_GROUPS, 0, 2, "delete_groups"),
    (ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1, "incremental_alter_configs"),
    (ApiKey.OFFSET_DELETE, 0, 0, "offset_delete"),
    (ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0, "describe_user_scram_credentials"),
    (ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0, "alter_user_scram_credentials"),
    (ApiKey.DESCRIBE_CLUSTER, 0, 2, "describe_cluster"),
    (ApiKey.DESCRIBE_TRANSACTIONS, 0, 0, "describe_transactions"),
    (ApiKey.LIST_TRANSACTIONS, 0, 1, "list_transactions"),
)}
"""Every API served, by key: its versions (inclusive; what ApiVersions advertises) and handler module."""

HANDLERS: dict[int, Handler] = {}
"""The handlers registered so far, by API key (``handlers.handler`` imports the rest on use)."""


def kafka_api(key: ApiKey) -> Callable[[Handler], Handler]:
    """Register ``fn`` as the handler of ``key`` (an API of :data:`APIS`, served at its versions)."""

    def register(fn: Handler) -> Handler:
        api = APIS.get(int(key))
        if api is None or fn.__module__.rpartition(".")[2] != api.module:
            raise RuntimeError(f"Kafka API {key!r} is not listed in registry.APIS for module {fn.__module__}")
        if int(key) in HANDLERS:
            raise RuntimeError(f"Kafka API {key!r} registered twice")
        HANDLERS[int(key)] = fn
        return fn

    return register


@dataclass
class Context:
    """What a handler sees: the broker, the Kafka front-end, and the request's header fields."""

    broker: Broker
    frontend: Any  # server.KafkaFrontend (config, names, shared state)
    peer: str = ""
    api_key: int = 0
    version: int = 0
    correlation_id: int = 0
    client_id: str | None = None
    closing: Any = None  # asyncio.Event set at shutdown (long polls return early)
    peer_gone: Callable[[], Awaitable[Any]] | None = None  # fails when the peer closes (parked group requests)
    session: Any = None  # session.Session: the connection's principal and SASL state (None: anonymous)
    include_operations: bool = False  # the request asked for authorized-operations bit sets (Metadata v8+)

    @property
    def config(self) -> KafkaConfig:
        return self.frontend.config

    @property
    def res(self):
        """The kio response module of this request's (api_key, version)."""
        return messages.response_module(self.api_key, self.version)

    @property
    def response_class(self) -> type:
        return messages.response_class(self.api_key, self.version)

    def build(self, class_name: str, **values):
        """An entity of the response module's nested class ``class_name`` (see messages.build)."""
        return messages.build(getattr(self.res, class_name), **values)

    def response(self, **values):
        return messages.build(self.response_class, **values)
