"""Core errors -> Iggy error codes, in one table (tested to cover every core error).

Codes from apache/iggy ``core/common/src/error/iggy_error.rs`` (a variant's
value is its wire code).
"""

from __future__ import annotations

from ...core import errors as e

ERROR_CODES: dict[type[e.BrokerError], int] = {
    e.BrokerError: 1,  # Error
    e.InvalidArgument: 3,  # InvalidCommand
    e.StreamNotFound: 1009,  # StreamIdNotFound
    e.TopicNotFound: 2010,  # TopicIdNotFound
    e.PartitionNotFound: 3007,
    e.NoPartitions: 3008,
    e.StreamNameExists: 1012,
    e.TopicNameExists: 2013,
    e.InvalidStreamName: 1013,
    e.InvalidTopicName: 2014,
    e.InvalidPartitionsCount: 2019,
    e.TooManyPartitions: 2015,
    e.InvalidSegmentsCount: 4030,
    e.StorageFailure: 3000,  # CannotCreatePartition (raised by creates rolled back on a filesystem error)
    # a write the filesystem refused (ENOSPC, EDQUOT, EIO); Iggy has no "no space" code (docs/gaps.md)
    e.StorageWriteFailed: 4006,  # CannotSaveMessagesToSegment
    e.MessagesNotSaved: 4006,  # CannotSaveMessagesToSegment
    e.MetadataNotSaved: 10006,  # CannotWriteToFile
    e.UnsupportedOptionKey: 4041,
    e.InvalidOptionValue: 4042,
    e.InvalidMessagesCount: 4009,
    e.MessageTooLarge: 4022,  # TooBigMessagePayload
    e.OffsetOutOfRange: 4100,  # InvalidOffset
    e.ConsumerOffsetNotFound: 3021,
    e.CorruptData: 4011,  # CannotReadMessage (a fenced partition, a segment refused)
    e.CorruptBatch: 4027,  # InvalidMessageChecksum: a read reached a damaged batch
    e.InvalidBatch: 4,  # overridden by the error's own .code
    e.ConsumerGroupNotFound: 5000,
    e.ConsumerGroupNameExists: 5004,
    e.InvalidConsumerGroupName: 5005,
    e.ConsumerGroupMemberNotFound: 5006,
    e.ConsumerGroupPartitionNotOwned: 5009,
    e.Unauthenticated: 40,
    e.Unauthorized: 41,
    e.InvalidCredentials: 42,
    e.InvalidUsername: 43,
    e.InvalidPassword: 44,
    e.UserAlreadyExists: 46,
    e.UserNotFound: 20,  # ResourceNotFound
    e.UserInactive: 47,
    e.CannotDeleteUser: 48,
    e.CannotChangePermissions: 49,
    e.InvalidTokenName: 50,
    e.TokenAlreadyExists: 51,
    e.TokensLimitReached: 52,
    e.InvalidToken: 53,
    e.TokenExpired: 54,
    e.TokenNotFound: 20,
    e.ClientNotFound: 100,
    e.FeatureUnavailable: 5,
}


def code_for(exc: e.BrokerError) -> int:
    """The Iggy code for a core error (a batch error carries its own)."""
    code = getattr(exc, "code", None)
    if isinstance(exc, e.InvalidBatch) and code:
        return code
    for cls in type(exc).__mro__:
        if cls in ERROR_CODES:
            return ERROR_CODES[cls]
    return 1
