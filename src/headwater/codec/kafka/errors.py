"""Errors of the Kafka record codec; each class carries the Kafka error code a peer should hear.

Codes are Kafka's ``org.apache.kafka.common.protocol.Errors`` numbering (the
``error_code`` of a Produce partition response). Every error records *where*
it failed when that is known: ``offset`` is the byte offset inside the buffer
being decoded (for records inside a compressed batch: inside the decompressed
records section), ``field`` the name of the field, ``record_index`` the 0-based
index of the record inside its batch.

``record_errors`` holds ``(batch_index, message)`` pairs, the shape of the
Produce v8+ ``RecordErrors`` array, for errors that reject single records.

Class tree (Kafka code in brackets)::

    KafkaCodecError [-1]
      CorruptRecord [2]               CRC mismatch, magic outside 0..2, truncated or
                                      undecompressable batch
      MessageTooLarge [10]            a record cannot fit an Iggy frame (user headers over 100 000 B),
                                      decompressed records over the cap
      InvalidTimestamp [32]           out of the configured bounds, or LogAppendTime set by a producer
      UnsupportedCompressionType [76] compression id 5..7
      InvalidRecord [87]              magic 0/1 (legacy message set), a batch running past the
                                      Produce records field, structurally wrong inside a
                                      CRC-valid batch, control batch from a client, inconsistent
                                      counts, missing key on a compacted topic

Sources: Kafka ``DefaultRecordBatch.java`` and ``DefaultRecord.java`` (what
raises ``CorruptRecordException`` and what ``InvalidRecordException``),
``ByteBufferLogInputStream.java`` (``nextBatchSize``), ``ProduceRequest.java``
(``validateRecords``) and ``LogValidator.java`` (``validateBatch``, ``validateRecord``).
"""

from __future__ import annotations


class KafkaCodecError(Exception):
    """Base of every Kafka record codec error. ``error_code`` is the Kafka error code (int16)."""

    error_code: int = -1  # UNKNOWN_SERVER_ERROR

    def __init__(
        self,
        message: str,
        *,
        offset: int | None = None,
        field: str | None = None,
        record_index: int | None = None,
        record_errors: tuple[tuple[int, str], ...] = (),
    ):
        where = []
        if record_index is not None:
            where.append(f"record {record_index}")
        if field is not None:
            where.append(field)
        if offset is not None:
            where.append(f"byte {offset}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.message = message
        self.offset = offset
        self.field = field
        self.record_index = record_index
        if not record_errors and record_index is not None:
            record_errors = ((record_index, message),)
        self.record_errors = record_errors


class CorruptRecord(KafkaCodecError):
    """The batch bytes cannot be trusted: CRC-32C mismatch, magic outside 0..2,
    a batchLength below 14, a magic 2 batch shorter than its 61-byte header, or
    a compressed section that does not decompress (Kafka CORRUPT_MESSAGE, 2)."""

    error_code = 2


class MessageTooLarge(KafkaCodecError):
    """A record's key and headers need more Iggy user-header bytes than a frame
    may carry (100 000), or a decompressed section exceeds the configured cap
    (Kafka MESSAGE_TOO_LARGE, 10)."""

    error_code = 10


class InvalidTimestamp(KafkaCodecError):
    """A record timestamp is outside the configured bounds around the broker
    clock, or the producer set the LogAppendTime attribute (Kafka INVALID_TIMESTAMP, 32)."""

    error_code = 32


class UnsupportedCompressionType(KafkaCodecError):
    """The attributes name a compression id other than 0..4 (Kafka UNSUPPORTED_COMPRESSION_TYPE, 76)."""

    error_code = 76


class InvalidRecord(KafkaCodecError):
    """A batch the broker's rules refuse: magic 0 or 1 from Produce v3+, a
    batch running past the Produce records field (no batch at all for Kafka),
    or a CRC-valid batch with bad varints, lengths, record count, offset range,
    a control batch from a client, a producer id without a sequence, a missing
    key on a compacted topic (Kafka INVALID_RECORD, 87)."""

    error_code = 87
