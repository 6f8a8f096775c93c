"""Core errors -> Kafka error codes, in one table (tested to cover every core error).

Codes are Kafka's ``org.apache.kafka.common.protocol.Errors`` numbering; a
codec error (``codec.kafka.errors``) carries its own ``error_code``.
"""

from __future__ import annotations

from ...codec.kafka.errors import KafkaCodecError
from ...core import errors as e
from ...core import producers
from ...core import transactions as txn
from ...core.groups.classic import Outcome

NONE = 0
UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
MESSAGE_TOO_LARGE = 10
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_NOT_AVAILABLE = 15
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
INVALID_COMMIT_OFFSET_SIZE = 28
TOPIC_AUTHORIZATION_FAILED = 29
CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_TIMESTAMP = 32
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
INVALID_REQUEST = 42
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
KAFKA_STORAGE_ERROR = 56
SASL_AUTHENTICATION_FAILED = 58
UNKNOWN_PRODUCER_ID = 59
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
UNSUPPORTED_COMPRESSION_TYPE = 76
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
GROUP_SUBSCRIBED_TO_TOPIC = 86
INVALID_RECORD = 87
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
OPERATION_NOT_ATTEMPTED = 55
PRODUCER_FENCED = 90
TRANSACTIONAL_ID_NOT_FOUND = 105
UNKNOWN_TOPIC_ID = 100


class CloseConnection(Exception):
    """Raised by a handler: close this connection and send nothing (e.g. a failed acks=0
    Produce, as Kafka's ``KafkaApis.handleProduceRequest`` does); logged at info, no traceback."""


ERROR_CODES: dict[type[e.BrokerError], int] = {
    e.BrokerError: UNKNOWN_SERVER_ERROR,
    e.InvalidArgument: INVALID_REQUEST,
    e.StreamNotFound: UNKNOWN_TOPIC_OR_PARTITION,
    e.TopicNotFound: UNKNOWN_TOPIC_OR_PARTITION,
    e.PartitionNotFound: UNKNOWN_TOPIC_OR_PARTITION,
    e.NoPartitions: UNKNOWN_TOPIC_OR_PARTITION,
    e.StreamNameExists: TOPIC_ALREADY_EXISTS,
    e.TopicNameExists: TOPIC_ALREADY_EXISTS,
    e.InvalidStreamName: INVALID_TOPIC_EXCEPTION,
    e.InvalidTopicName: INVALID_TOPIC_EXCEPTION,
    e.InvalidPartitionsCount: INVALID_PARTITIONS,
    e.TooManyPartitions: INVALID_PARTITIONS,
    e.InvalidSegmentsCount: INVALID_REQUEST,
    e.UnsupportedOptionKey: INVALID_CONFIG,
    e.InvalidOptionValue: INVALID_CONFIG,
    e.InvalidMessagesCount: INVALID_RECORD,
    e.MessageTooLarge: MESSAGE_TOO_LARGE,
    e.OffsetOutOfRange: OFFSET_OUT_OF_RANGE,
    e.ConsumerOffsetNotFound: UNKNOWN_SERVER_ERROR,
    e.CorruptData: KAFKA_STORAGE_ERROR,  # a fenced partition, a segment refused
    e.CorruptBatch: CORRUPT_MESSAGE,  # a read reached a damaged batch (the batches before it are served)
    e.StorageFailure: KAFKA_STORAGE_ERROR,  # a create rolled back on a filesystem error
    e.StorageWriteFailed: KAFKA_STORAGE_ERROR,  # the filesystem refused a write (ENOSPC, EDQUOT, EIO)
    e.MessagesNotSaved: KAFKA_STORAGE_ERROR,
    e.MetadataNotSaved: KAFKA_STORAGE_ERROR,
    e.InvalidBatch: CORRUPT_MESSAGE,
    e.ConsumerGroupNotFound: GROUP_ID_NOT_FOUND,
    e.ConsumerGroupNameExists: INVALID_GROUP_ID,
    e.InvalidConsumerGroupName: INVALID_GROUP_ID,
    e.ConsumerGroupMemberNotFound: UNKNOWN_MEMBER_ID,
    e.ConsumerGroupPartitionNotOwned: UNKNOWN_MEMBER_ID,
    e.Unauthenticated: SASL_AUTHENTICATION_FAILED,
    e.Unauthorized: CLUSTER_AUTHORIZATION_FAILED,
    e.InvalidCredentials: SASL_AUTHENTICATION_FAILED,
    e.InvalidUsername: INVALID_REQUEST,
    e.InvalidPassword: INVALID_REQUEST,
    e.UserAlreadyExists: INVALID_REQUEST,
    e.UserNotFound: INVALID_REQUEST,
    e.UserInactive: SASL_AUTHENTICATION_FAILED,
    e.CannotDeleteUser: INVALID_REQUEST,
    e.CannotChangePermissions: INVALID_REQUEST,
    e.InvalidTokenName: INVALID_REQUEST,
    e.TokenAlreadyExists: INVALID_REQUEST,
    e.TokensLimitReached: INVALID_REQUEST,
    e.InvalidToken: SASL_AUTHENTICATION_FAILED,
    e.TokenExpired: SASL_AUTHENTICATION_FAILED,
    e.TokenNotFound: INVALID_REQUEST,
    e.ClientNotFound: UNKNOWN_SERVER_ERROR,
    e.FeatureUnavailable: UNSUPPORTED_VERSION,
    producers.ProducerFenced: INVALID_PRODUCER_EPOCH,
    producers.OutOfOrderSequence: OUT_OF_ORDER_SEQUENCE_NUMBER,
    producers.UnknownProducer: UNKNOWN_PRODUCER_ID,
    txn.InvalidTxnState: INVALID_TXN_STATE,
    txn.InvalidProducerIdMapping: INVALID_PRODUCER_ID_MAPPING,
    txn.InvalidTransactionTimeout: INVALID_TRANSACTION_TIMEOUT,
    txn.ConcurrentTransactions: CONCURRENT_TRANSACTIONS,
    txn.TransactionalIdNotFound: TRANSACTIONAL_ID_NOT_FOUND,
}


def txn_code(exc: BaseException, fenced: bool) -> int:
    """:func:`code_for` for a transaction API: an old epoch is PRODUCER_FENCED from the
    version that knows it (``fenced``, KIP-588), INVALID_PRODUCER_EPOCH before."""
    if isinstance(exc, producers.ProducerFenced) and fenced:
        return PRODUCER_FENCED
    return code_for(exc)


# Classic-group outcomes (core.groups.classic.Outcome) -> Kafka codes, tested to cover every member.
GROUP_CODES: dict[Outcome, int] = {
    Outcome.OK: NONE,
    Outcome.MEMBER_ID_REQUIRED: MEMBER_ID_REQUIRED,
    Outcome.UNKNOWN_MEMBER: UNKNOWN_MEMBER_ID,
    Outcome.ILLEGAL_GENERATION: ILLEGAL_GENERATION,
    Outcome.REBALANCE_IN_PROGRESS: REBALANCE_IN_PROGRESS,
    Outcome.INCONSISTENT_PROTOCOL: INCONSISTENT_GROUP_PROTOCOL,
    Outcome.FENCED_INSTANCE: FENCED_INSTANCE_ID,
    Outcome.INVALID_SESSION_TIMEOUT: INVALID_SESSION_TIMEOUT,
    Outcome.INVALID_GROUP_ID: INVALID_GROUP_ID,
    Outcome.GROUP_FULL: GROUP_MAX_SIZE_REACHED,
    Outcome.GROUP_NOT_FOUND: GROUP_ID_NOT_FOUND,
    Outcome.NON_EMPTY_GROUP: NON_EMPTY_GROUP,
    Outcome.COORDINATOR_UNAVAILABLE: COORDINATOR_NOT_AVAILABLE,
}


def group_code(outcome: Outcome) -> int:
    """The Kafka code for a classic-group outcome."""
    return GROUP_CODES[outcome]


def code_for(exc: BaseException) -> int:
    """The Kafka code for a core or Kafka codec error (-1 for anything else)."""
    if isinstance(exc, KafkaCodecError):
        return exc.error_code
    for cls in type(exc).__mro__:
        code = ERROR_CODES.get(cls)
        if code is not None:
            return code
    return UNKNOWN_SERVER_ERROR
