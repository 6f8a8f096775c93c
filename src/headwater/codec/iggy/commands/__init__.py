"""Request and reply payload codecs of every Iggy 0.11.0 command, and one table of them all.

One module per family (``system``, ``users``, ``tokens``, ``streams``,
``topics``, ``partitions``, ``segments``, ``messages``, ``offsets``,
``groups``; the login-register bodies are in :mod:`..version`). Every command
has ``decode_<command>(body) -> dataclass`` and ``encode_<command>(dataclass)
-> bytes``; every reply payload has ``encode_<reply>`` and ``decode_<reply>``.
Reply encoders return the PAYLOAD: the result section of result-framed
operations is added by :func:`..framing.reply_body`.

:data:`COMMANDS` maps each :class:`~..codes.Command` to a :class:`CommandSpec`;
:func:`decode_request` dispatches on a code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..codes import COMMAND_TO_OPERATION, Command, Operation
from ..errors import InvalidCommandCode
from ..framing import RESULT_FRAMED_OPERATIONS
from .. import version
from . import (
    groups,
    messages,
    offsets,
    partitions,
    segments,
    streams,
    system,
    tokens,
    topics,
    users,
)

__all__ = ["CommandSpec", "COMMANDS", "decode_request", "encode_request_body"]


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """What the codec knows about one command.

    ``reply_decode`` is ``None`` when a successful reply has an empty payload.
    ``empty_reply`` says what an empty payload means for commands that also
    have a typed one (``"not found"``, ``"none"``), else ``""``.
    """

    command: Command
    operation: Operation
    request_type: type
    decode: Callable[[Any], Any]
    encode: Callable[[Any], bytes]
    reply_decode: Callable[[Any], Any] | None
    result_framed: bool
    empty_reply: str = ""


def _spec(
    command: Command,
    request_type: type,
    decode: Callable[[Any], Any],
    encode: Callable[[Any], bytes],
    reply_decode: Callable[[Any], Any] | None = None,
    empty_reply: str = "",
) -> CommandSpec:
    operation = COMMAND_TO_OPERATION.get(command, Operation.NON_REPLICATED)
    return CommandSpec(
        command,
        operation,
        request_type,
        decode,
        encode,
        reply_decode,
        operation in RESULT_FRAMED_OPERATIONS,
        empty_reply,
    )


def _raw(payload: Any) -> bytes:
    return bytes(payload)


C = Command
_SPECS = [
    # system
    _spec(C.PING, system.Ping, system.decode_ping, system.encode_ping),
    _spec(
        C.GET_STATS,
        system.GetStats,
        system.decode_get_stats,
        system.encode_get_stats,
        system.decode_stats,
    ),
    _spec(
        C.GET_SNAPSHOT,
        system.GetSnapshot,
        system.decode_get_snapshot,
        system.encode_get_snapshot,
        _raw,
    ),
    _spec(
        C.GET_CLUSTER_METADATA,
        system.GetClusterMetadata,
        system.decode_get_cluster_metadata,
        system.encode_get_cluster_metadata,
        system.decode_cluster_metadata,
    ),
    _spec(
        C.DESCRIBE_OPTIONS,
        system.DescribeOptions,
        system.decode_describe_options,
        system.encode_describe_options,
        system.decode_option_descriptors,
    ),
    _spec(
        C.GET_ME,
        system.GetMe,
        system.decode_get_me,
        system.encode_get_me,
        system.decode_client_details,
    ),
    _spec(
        C.GET_CLIENT,
        system.GetClient,
        system.decode_get_client,
        system.encode_get_client,
        system.decode_client_details,
        "not found",
    ),
    _spec(
        C.GET_CLIENTS,
        system.GetClients,
        system.decode_get_clients,
        system.encode_get_clients,
        system.decode_clients,
    ),
    # users
    _spec(
        C.GET_USER,
        users.GetUser,
        users.decode_get_user,
        users.encode_get_user,
        users.decode_user_details,
        "not found",
    ),
    _spec(
        C.GET_USERS,
        users.GetUsers,
        users.decode_get_users,
        users.encode_get_users,
        users.decode_users,
    ),
    _spec(
        C.CREATE_USER,
        users.CreateUser,
        users.decode_create_user,
        users.encode_create_user,
        users.decode_user_details,
    ),
    _spec(C.DELETE_USER, users.DeleteUser, users.decode_delete_user, users.encode_delete_user),
    _spec(C.UPDATE_USER, users.UpdateUser, users.decode_update_user, users.encode_update_user),
    _spec(
        C.UPDATE_PERMISSIONS,
        users.UpdatePermissions,
        users.decode_update_permissions,
        users.encode_update_permissions,
    ),
    _spec(
        C.CHANGE_PASSWORD,
        users.ChangePassword,
        users.decode_change_password,
        users.encode_change_password,
    ),
    _spec(C.LOGIN_USER, users.LoginUser, users.decode_login_user, users.encode_login_user),
    _spec(C.LOGOUT_USER, users.LogoutUser, users.decode_logout_user, users.encode_logout_user),
    _spec(
        C.LOGIN_REGISTER,
        version.LoginRegister,
        version.decode_login_register,
        version.encode_login_register,
        version.decode_login_reply,
    ),
    _spec(
        C.LOGIN_REGISTER_WITH_PAT,
        version.LoginRegisterWithPat,
        version.decode_login_register_with_pat,
        version.encode_login_register_with_pat,
        version.decode_login_reply,
    ),
    # personal access tokens
    _spec(
        C.GET_PERSONAL_ACCESS_TOKENS,
        tokens.GetPersonalAccessTokens,
        tokens.decode_get_personal_access_tokens,
        tokens.encode_get_personal_access_tokens,
        tokens.decode_personal_access_tokens,
    ),
    _spec(
        C.CREATE_PERSONAL_ACCESS_TOKEN,
        tokens.CreatePersonalAccessToken,
        tokens.decode_create_personal_access_token,
        tokens.encode_create_personal_access_token,
        tokens.decode_raw_personal_access_token,
    ),
    _spec(
        C.DELETE_PERSONAL_ACCESS_TOKEN,
        tokens.DeletePersonalAccessToken,
        tokens.decode_delete_personal_access_token,
        tokens.encode_delete_personal_access_token,
    ),
    _spec(
        C.LOGIN_WITH_PERSONAL_ACCESS_TOKEN,
        tokens.LoginWithPersonalAccessToken,
        tokens.decode_login_with_personal_access_token,
        tokens.encode_login_with_personal_access_token,
    ),
    # messages
    _spec(
        C.POLL_MESSAGES,
        messages.PollMessages,
        messages.decode_poll_messages,
        messages.encode_poll_messages,
        messages.decode_poll_reply,
    ),
    _spec(
        C.SEND_MESSAGES,
        messages.SendMessages,
        messages.decode_send_messages,
        messages.encode_send_messages,
        messages.decode_send_messages_reply,
        "no confirmations",
    ),
    _spec(
        C.FLUSH_UNSAVED_BUFFER,
        messages.FlushUnsavedBuffer,
        messages.decode_flush_unsaved_buffer,
        messages.encode_flush_unsaved_buffer,
    ),
    # consumer offsets
    _spec(
        C.GET_CONSUMER_OFFSET,
        offsets.GetConsumerOffset,
        offsets.decode_get_consumer_offset,
        offsets.encode_get_consumer_offset,
        offsets.decode_consumer_offset,
        "no stored offset",
    ),
    _spec(
        C.STORE_CONSUMER_OFFSET,
        offsets.StoreConsumerOffset,
        offsets.decode_store_consumer_offset,
        offsets.encode_store_consumer_offset,
    ),
    _spec(
        C.DELETE_CONSUMER_OFFSET,
        offsets.DeleteConsumerOffset,
        offsets.decode_delete_consumer_offset,
        offsets.encode_delete_consumer_offset,
    ),
    # streams
    _spec(
        C.GET_STREAM,
        streams.GetStream,
        streams.decode_get_stream,
        streams.encode_get_stream,
        streams.decode_stream_details,
        "not found",
    ),
    _spec(
        C.GET_STREAMS,
        streams.GetStreams,
        streams.decode_get_streams,
        streams.encode_get_streams,
        streams.decode_streams,
    ),
    _spec(
        C.CREATE_STREAM,
        streams.CreateStream,
        streams.decode_create_stream,
        streams.encode_create_stream,
        streams.decode_stream_details,
    ),
    _spec(
        C.DELETE_STREAM,
        streams.DeleteStream,
        streams.decode_delete_stream,
        streams.encode_delete_stream,
    ),
    _spec(
        C.UPDATE_STREAM,
        streams.UpdateStream,
        streams.decode_update_stream,
        streams.encode_update_stream,
    ),
    _spec(
        C.PURGE_STREAM,
        streams.PurgeStream,
        streams.decode_purge_stream,
        streams.encode_purge_stream,
    ),
    # topics
    _spec(
        C.GET_TOPIC,
        topics.GetTopic,
        topics.decode_get_topic,
        topics.encode_get_topic,
        topics.decode_topic_details,
        "not found",
    ),
    _spec(
        C.GET_TOPICS,
        topics.GetTopics,
        topics.decode_get_topics,
        topics.encode_get_topics,
        topics.decode_topics,
    ),
    _spec(
        C.CREATE_TOPIC,
        topics.CreateTopic,
        topics.decode_create_topic,
        topics.encode_create_topic,
        topics.decode_topic_details,
    ),
    _spec(
        C.DELETE_TOPIC, topics.DeleteTopic, topics.decode_delete_topic, topics.encode_delete_topic
    ),
    _spec(
        C.UPDATE_TOPIC, topics.UpdateTopic, topics.decode_update_topic, topics.encode_update_topic
    ),
    _spec(C.PURGE_TOPIC, topics.PurgeTopic, topics.decode_purge_topic, topics.encode_purge_topic),
    # partitions, segments
    _spec(
        C.CREATE_PARTITIONS,
        partitions.CreatePartitions,
        partitions.decode_create_partitions,
        partitions.encode_create_partitions,
    ),
    _spec(
        C.DELETE_PARTITIONS,
        partitions.DeletePartitions,
        partitions.decode_delete_partitions,
        partitions.encode_delete_partitions,
    ),
    _spec(
        C.DELETE_SEGMENTS,
        segments.DeleteSegments,
        segments.decode_delete_segments,
        segments.encode_delete_segments,
    ),
    # consumer groups
    _spec(
        C.GET_CONSUMER_GROUP,
        groups.GetConsumerGroup,
        groups.decode_get_consumer_group,
        groups.encode_get_consumer_group,
        groups.decode_consumer_group_details,
        "not found",
    ),
    _spec(
        C.GET_CONSUMER_GROUPS,
        groups.GetConsumerGroups,
        groups.decode_get_consumer_groups,
        groups.encode_get_consumer_groups,
        groups.decode_consumer_groups,
    ),
    _spec(
        C.CREATE_CONSUMER_GROUP,
        groups.CreateConsumerGroup,
        groups.decode_create_consumer_group,
        groups.encode_create_consumer_group,
        groups.decode_consumer_group_details,
    ),
    _spec(
        C.DELETE_CONSUMER_GROUP,
        groups.DeleteConsumerGroup,
        groups.decode_delete_consumer_group,
        groups.encode_delete_consumer_group,
    ),
    _spec(
        C.JOIN_CONSUMER_GROUP,
        groups.JoinConsumerGroup,
        groups.decode_join_consumer_group,
        groups.encode_join_consumer_group,
    ),
    _spec(
        C.LEAVE_CONSUMER_GROUP,
        groups.LeaveConsumerGroup,
        groups.decode_leave_consumer_group,
        groups.encode_leave_consumer_group,
    ),
    _spec(
        C.SYNC_CONSUMER_GROUP,
        groups.SyncConsumerGroup,
        groups.decode_sync_consumer_group,
        groups.encode_sync_consumer_group,
        groups.decode_sync_consumer_group_reply,
        "not a member",
    ),
]
del C

COMMANDS: dict[Command, CommandSpec] = {s.command: s for s in _SPECS}
"""Every command of ``commands.mdx``, by code."""

_BY_TYPE: dict[type, CommandSpec] = {s.request_type: s for s in _SPECS}


def decode_request(command_code: int, body: bytes | bytearray | memoryview) -> Any:
    """Decode a request body by its command code.

    Raises :class:`~..errors.InvalidCommandCode` (Iggy 3) for an unknown
    code; the decoder's :class:`~headwater.codec.errors.CodecError` otherwise.
    Register bodies (40) are decoded as the password shape only: use
    :func:`..version.decode_login_register_any` for ``operation = 1``.
    """
    try:
        spec = COMMANDS[Command(command_code)]
    except ValueError:
        raise InvalidCommandCode(f"unknown command code {command_code}") from None
    return spec.decode(body)


def encode_request_body(request: Any) -> tuple[Command, bytes]:
    """The command code and body bytes of a request dataclass (for tests and clients)."""
    spec = _BY_TYPE.get(type(request))
    if spec is None:
        raise ValueError(f"not a request dataclass: {type(request).__name__}")
    return spec.command, spec.encode(request)
