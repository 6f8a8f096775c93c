"""Code tables: operations <-> command codes, error codes."""

from __future__ import annotations

from headwater.codec.iggy.codes import (
    CLIENT_OPERATIONS,
    COMMAND_TO_OPERATION,
    LEGACY_LOGIN_COMMANDS,
    NON_REPLICATED_COMMANDS,
    OPERATION_TO_COMMAND,
    Command,
    EvictionReason,
    IggyErrorCode,
    Operation,
    is_client_operation,
    operation_for_command,
)


def test_operation_table_is_a_bijection_on_replicated_ops():
    replicated = [o for o in Operation if o >= 128]
    assert set(OPERATION_TO_COMMAND) == set(replicated) | {Operation.LOGOUT}
    assert len(set(OPERATION_TO_COMMAND.values())) == len(OPERATION_TO_COMMAND)
    for op, code in OPERATION_TO_COMMAND.items():
        assert COMMAND_TO_OPERATION[code] is op
    assert COMMAND_TO_OPERATION[Command.LOGIN_REGISTER] is Operation.REGISTER
    assert COMMAND_TO_OPERATION[Command.LOGIN_REGISTER_WITH_PAT] is Operation.REGISTER


def test_docs_catalog_spot_checks():
    assert OPERATION_TO_COMMAND[Operation.CREATE_STREAM] == 202
    assert OPERATION_TO_COMMAND[Operation.DELETE_SEGMENTS] == 503
    assert OPERATION_TO_COMMAND[Operation.JOIN_CONSUMER_GROUP] == 604
    assert OPERATION_TO_COMMAND[Operation.SEND_MESSAGES] == 101
    assert OPERATION_TO_COMMAND[Operation.DELETE_CONSUMER_OFFSET] == 122
    assert OPERATION_TO_COMMAND[Operation.LOGOUT] == 39


def test_non_replicated_commands():
    assert NON_REPLICATED_COMMANDS.isdisjoint(COMMAND_TO_OPERATION)
    assert NON_REPLICATED_COMMANDS | set(COMMAND_TO_OPERATION) == set(Command)
    assert {
        Command.PING,
        Command.POLL_MESSAGES,
        Command.SYNC_CONSUMER_GROUP,
        Command.GET_CLUSTER_METADATA,
    } <= NON_REPLICATED_COMMANDS
    assert LEGACY_LOGIN_COMMANDS <= NON_REPLICATED_COMMANDS
    assert operation_for_command(Command.GET_STATS) is Operation.NON_REPLICATED
    assert operation_for_command(999) is Operation.NON_REPLICATED
    assert operation_for_command(Command.LOGOUT_USER) is Operation.LOGOUT


def test_client_operations():
    assert is_client_operation(1) and is_client_operation(2) and is_client_operation(3)
    assert is_client_operation(128) and is_client_operation(149) and is_client_operation(162)
    for value in (0, 4, 64, 68, 127, 150, 163, 255):
        assert not is_client_operation(value)
    assert len(CLIENT_OPERATIONS) == 3 + 22 + 3


def test_error_codes():
    assert len({int(c) for c in IggyErrorCode}) == len(IggyErrorCode.__members__)
    checks = {
        "ERROR": 1,
        "INVALID_COMMAND": 3,
        "INVALID_FORMAT": 4,
        "FEATURE_UNAVAILABLE": 5,
        "INVALID_IDENTIFIER": 6,
        "UNAUTHENTICATED": 40,
        "UNAUTHORIZED": 41,
        "INVALID_CREDENTIALS": 42,
        "TRANSIENT_NOT_COMMITTED": 57,
        "REQUEST_ALREADY_APPLIED": 59,
        "CLIENT_NOT_FOUND": 100,
        "STREAM_ID_NOT_FOUND": 1009,
        "STREAM_NAME_ALREADY_EXISTS": 1012,
        "INVALID_TOPIC_SIZE": 1019,
        "TOO_MANY_STREAMS": 1020,
        "TOPIC_ID_NOT_FOUND": 2010,
        "TOPIC_NAME_ALREADY_EXISTS": 2013,
        "TOO_MANY_TOPICS": 2021,
        "PARTITION_NOT_FOUND": 3007,
        "CONSUMER_OFFSET_NOT_FOUND": 3021,
        "INVALID_MESSAGES_COUNT": 4009,
        "COMMAND_LENGTH_ERROR": 4029,
        "INVALID_BATCH_CHECKSUM": 4039,
        "UNSUPPORTED_OPTION_KEY": 4041,
        "INVALID_OFFSET": 4100,
        "INVALID_RESERVED_FIELD": 4101,
        "CONSUMER_GROUP_ID_NOT_FOUND": 5000,
        "CONSUMER_GROUP_MEMBER_NOT_FOUND": 5006,
        "CONSUMER_GROUP_PARTITION_NOT_OWNED": 5009,
        "INVALID_SESSION": 14001,
        "INCOMPATIBLE_PROTOCOL_VERSION": 14003,
    }
    for name, value in checks.items():
        assert IggyErrorCode[name] == value


def test_eviction_reasons():
    assert [int(r) for r in EvictionReason] == list(range(1, 16))
