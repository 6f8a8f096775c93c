"""Protocol-neutral broker errors.

The core raises these; each front-end maps every class to its protocol's
error code in one table (``frontends/iggy/errors.py``,
``frontends/kafka/errors.py``), tested to cover every class here.
"""

from __future__ import annotations


class BrokerError(Exception):
    """Base of every error the broker reports to a client."""


class InvalidArgument(BrokerError):
    """A request argument is out of range or malformed (generic)."""


# --- resources -----------------------------------------------------------------------------


class StreamNotFound(BrokerError):
    pass


class TopicNotFound(BrokerError):
    pass


class PartitionNotFound(BrokerError):
    pass


class NoPartitions(BrokerError):
    """The topic has no partitions to route a message to."""


class StreamNameExists(BrokerError):
    pass


class TopicNameExists(BrokerError):
    pass


class InvalidStreamName(BrokerError):
    pass


class InvalidTopicName(BrokerError):
    pass


class InvalidPartitionsCount(BrokerError):
    pass


class TooManyPartitions(BrokerError):
    pass


class InvalidSegmentsCount(BrokerError):
    pass


class StorageFailure(BrokerError):
    """The filesystem failed a change to partitions (full disk, lost permission, too many
    open files, something in the way); the change was rolled back."""


class StorageWriteFailed(BrokerError):
    """The filesystem refused a write: disk full (ENOSPC), quota (EDQUOT), an I/O error
    (EIO)... Nothing of the write was kept; the same request may succeed once the
    filesystem takes writes again (no restart needed). ``no_space`` tells the full
    disk apart from other failures."""

    def __init__(self, message: str, no_space: bool = False):
        super().__init__(message)
        self.no_space = no_space


class MessagesNotSaved(StorageWriteFailed):
    """An append to a partition log failed on the filesystem (see StorageWriteFailed)."""


class MetadataNotSaved(StorageWriteFailed):
    """A metadata write (catalog, consumer offsets, users, producer state) failed on the
    filesystem (see StorageWriteFailed); the change was not applied."""


class UnsupportedOptionKey(BrokerError):
    """An options block named a key outside the scope's catalog."""


class InvalidOptionValue(BrokerError):
    """An option value failed to parse or is out of bounds."""


# --- messages and offsets ---------------------------------------------------------------------


class InvalidMessagesCount(BrokerError):
    pass


class MessageTooLarge(BrokerError):
    pass


class OffsetOutOfRange(BrokerError):
    """An offset lies outside [log_start_offset, high_watermark]."""


class ConsumerOffsetNotFound(BrokerError):
    pass


class CorruptData(BrokerError):
    """Stored data failed verification; the read is refused (fail closed)."""


class CorruptBatch(CorruptData):
    """A read reached a damaged batch of a served partition (not a fenced one): the batches
    before it are served, a read at or past ``offset`` up to it fails. ``partition``:
    (stream id, topic id, partition id); ``offset``: the first offset the damaged batch holds
    (at least: storage reports the lowest it may begin at). Iggy 4027 InvalidMessageChecksum,
    Kafka CORRUPT_MESSAGE (2)."""

    def __init__(self, message: str, partition: tuple[int, int, int], offset: int):
        super().__init__(message)
        self.partition = partition
        self.offset = offset


class InvalidBatch(BrokerError):
    """A produced batch failed admission validation. ``code`` is the Iggy batch error code."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


# --- consumer groups ---------------------------------------------------------------------------


class ConsumerGroupNotFound(BrokerError):
    pass


class ConsumerGroupNameExists(BrokerError):
    pass


class InvalidConsumerGroupName(BrokerError):
    pass


class ConsumerGroupMemberNotFound(BrokerError):
    pass


class ConsumerGroupPartitionNotOwned(BrokerError):
    pass


# --- users, sessions, permissions --------------------------------------------------------------


class Unauthenticated(BrokerError):
    pass


class Unauthorized(BrokerError):
    pass


class InvalidCredentials(BrokerError):
    pass


class InvalidUsername(BrokerError):
    pass


class InvalidPassword(BrokerError):
    pass


class UserAlreadyExists(BrokerError):
    pass


class UserNotFound(BrokerError):
    pass


class UserInactive(BrokerError):
    pass


class CannotDeleteUser(BrokerError):
    pass


class CannotChangePermissions(BrokerError):
    pass


class InvalidTokenName(BrokerError):
    pass


class TokenAlreadyExists(BrokerError):
    pass


class TokensLimitReached(BrokerError):
    pass


class InvalidToken(BrokerError):
    pass


class TokenExpired(BrokerError):
    pass


class TokenNotFound(BrokerError):
    pass


class ClientNotFound(BrokerError):
    pass


class FeatureUnavailable(BrokerError):
    pass
