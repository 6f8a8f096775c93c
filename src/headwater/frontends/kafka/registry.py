"""The Kafka API registry: api_key -> (versions, handler), filled by ``@kafka_api``.

ApiVersions is built from this dict, so what is advertised is what is
registered. A handler takes ``(ctx, request)``: ``request`` is the kio
request entity for ``ctx.version`` (or the raw body bytes for a version kio
has no schema for, e.g. Produce v0-2) and returns the kio response entity,
``None`` for "send no response" (Produce with acks=0), or an awaitable of
either. Its docstring says what each version adds.
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
    handler: Handler


APIS: dict[int, Api] = {}


def kafka_api(key: ApiKey, versions: tuple[int, int]) -> Callable[[Handler], Handler]:
    """Register ``fn`` for ``key`` over ``versions`` (inclusive), advertised in ApiVersions."""

    def register(fn: Handler) -> Handler:
        if int(key) in APIS:
            raise RuntimeError(f"Kafka API {key!r} registered twice")
        APIS[int(key)] = Api(int(key), versions[0], versions[1], fn)
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
