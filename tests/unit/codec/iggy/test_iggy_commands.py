"""Round trips of every request and reply codec, plus golden bytes and the checks each decoder makes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.codec.batch import Message, build_batch
from headwater.codec.errors import CodecError, InvalidFormat, InvalidMessagesCount
from headwater.codec.iggy.codes import COMMAND_TO_OPERATION, Command, Operation
from headwater.codec.iggy.commands import COMMANDS, decode_request, encode_request_body
from headwater.codec.iggy.commands import groups as G
from headwater.codec.iggy.commands import messages as M
from headwater.codec.iggy.commands import offsets as O
from headwater.codec.iggy.commands import streams as ST
from headwater.codec.iggy.commands import system as S
from headwater.codec.iggy.commands import topics as TP
from headwater.codec.iggy.commands import users as U
from headwater.codec.iggy.errors import InvalidCommandCode, InvalidIdentifier
from headwater.codec.iggy.framing import RESULT_FRAMED_OPERATIONS
from headwater.codec.iggy.primitives import Consumer, Partitioning, PollingStrategy
from iggy_strategies import REPLIES, REQUESTS


def test_every_command_has_a_spec_and_a_strategy():
    assert set(COMMANDS) == set(Command)
    assert set(REQUESTS) == set(Command)
    for code, spec in COMMANDS.items():
        assert spec.command is code
        assert spec.operation is COMMAND_TO_OPERATION.get(code, Operation.NON_REPLICATED)
        assert spec.result_framed == (spec.operation in RESULT_FRAMED_OPERATIONS)


@pytest.mark.parametrize("command", list(Command), ids=lambda c: c.name)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_request_round_trip(command, data):
    request = data.draw(REQUESTS[command])
    spec = COMMANDS[command]
    body = spec.encode(request)
    assert spec.decode(body) == request
    assert spec.decode(memoryview(body)) == request
    assert encode_request_body(request) == (command, body)
    if (
        command is not Command.LOGIN_REGISTER_WITH_PAT
    ):  # decode_request uses the 40 shape for Register
        assert decode_request(int(command), body) == request


@pytest.mark.parametrize("name,strategy,encode,decode", REPLIES, ids=[r[0] for r in REPLIES])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_reply_round_trip(name, strategy, encode, decode, data):
    value = data.draw(strategy)
    payload = encode(value)
    assert decode(payload) == value
    assert decode(memoryview(payload)) == value


@pytest.mark.parametrize("name,strategy,encode,decode", REPLIES, ids=[r[0] for r in REPLIES])
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_reply_truncation_raises_codec_error(name, strategy, encode, decode, data):
    payload = encode(data.draw(strategy))
    cut = data.draw(st.integers(0, max(len(payload) - 1, 0)))
    try:
        decode(payload[:cut])
    except CodecError:
        pass


def test_unknown_command_code():
    with pytest.raises(InvalidCommandCode) as err:
        decode_request(999, b"")
    assert err.value.code == 3


# ---------------------------------------------------------------- golden bytes


def test_create_stream_golden_from_sdk():
    # create_stream("s1") as the apache-iggy 0.9.0 SDK sent it: name only, empty options block.
    assert ST.decode_create_stream(bytes.fromhex("027331")) == ST.CreateStream("s1", b"")


def test_create_topic_options_tail_is_kept_raw():
    # The SDK's create_topic("s1", "t1", 2) sends durability options even when none are set.
    options = (
        b"\x02\x1a\x00\x00\x00consumer_offset_durability\x02\x0a\x00\x00\x00replicated"
        b"\x02\x0a\x00\x00\x00durability\x02\x0a\x00\x00\x00replicated"
    )
    body = b"\x02\x02s1" + struct.pack("<I", 2) + b"\x02t1" + options
    assert TP.decode_create_topic(body) == TP.CreateTopic("s1", 2, "t1", options)


def test_poll_messages_golden():
    body = (
        b"\x01\x01\x04\x07\x00\x00\x00"  # consumer kind 1, numeric id 7
        b"\x02\x02s1"  # stream "s1"
        b"\x01\x04\x03\x00\x00\x00"  # topic 3
        b"\x01\x02\x00\x00\x00"  # partition 2
        b"\x01" + struct.pack("<Q", 10) + struct.pack("<I", 100) + b"\x01"
    )
    assert M.decode_poll_messages(body) == M.PollMessages(
        Consumer(1, 7), "s1", 3, 2, PollingStrategy(1, 10), 100, True
    )


def test_store_consumer_offset_golden_and_ack_rules():
    head = b"\x02\x02\x02g2\x01\x04\x00\x00\x00\x00\x02\x02t2\x00\x00\x00\x00\x00" + struct.pack(
        "<Q", 5
    )
    assert O.decode_store_consumer_offset(head + b"\x00") == O.StoreConsumerOffset(
        Consumer(2, "g2"), 0, "t2", None, 5, 0
    )
    with pytest.raises(InvalidFormat):
        O.decode_store_consumer_offset(head)  # the ack byte is mandatory
    with pytest.raises(InvalidFormat):
        O.decode_store_consumer_offset(head + b"\x02")


def test_stream_info_layout():
    payload = ST.encode_streams([ST.StreamInfo(1, 2, 3, "ab", 4, 5, b"xy")])
    assert payload == (
        struct.pack("<IQIQQ", 1, 2, 3, 4, 5) + b"\x02ab" + struct.pack("<I", 2) + b"xy"
    )


def test_topic_details_layout():
    t = TP.TopicDetails(
        7, 8, "t", 9, 2, 10, 11, 12, b"o", b"dd", (TP.PartitionInfo(0, 1, 2, 3, 4, 5),)
    )
    payload = TP.encode_topic_details(t)
    head = struct.pack("<IQIQBQQQ", 7, 8, 1, 9, 2, 10, 11, 12)
    assert len(head) == 49
    assert payload == (
        head
        + b"\x01t"
        + b"\x01\x00\x00\x00o"
        + b"\x02\x00\x00\x00dd"
        + struct.pack("<IQIQQQ", 0, 1, 2, 3, 4, 5)
    )


def test_topics_list_has_a_count_but_streams_list_does_not():
    assert TP.encode_topics([]) == b"\x00\x00\x00\x00"
    assert ST.encode_streams([]) == b""


def test_user_details_permissions_section():
    base = U.UserDetails(1, 2, 1, "u")
    assert U.encode_user_details(base).endswith(b"\x00\x00\x00\x00")
    with pytest.raises(InvalidFormat):
        U.decode_user_details(U.encode_user_details(base)[:-4] + b"\x00\x00\x01\x00")


def test_cluster_metadata_layout():
    meta = S.ClusterMetadata("hw", (S.ClusterNode("n", "1.2.3.4", 8090, 0, 0, 0, 0, 0),))
    assert S.encode_cluster_metadata(meta) == (
        b"\x02\x00\x00\x00hw\x01\x00\x00\x00"
        b"\x01\x00\x00\x00n\x07\x00\x00\x001.2.3.4" + struct.pack("<HHHHBB", 8090, 0, 0, 0, 0, 0)
    )


def test_stats_numeric_head_is_108_bytes():
    payload = S.encode_stats(S.Stats())
    # 108 numeric bytes, 5 empty strings, semver, cache count, threads, 2 disk sizes.
    assert len(payload) == 108 + 5 * 4 + 4 + 4 + 4 + 16


def test_sync_reply_layout():
    assert G.encode_sync_consumer_group_reply(G.SyncConsumerGroupReply(3, (0, 1))) == (
        struct.pack("<QI", 3, 2) + struct.pack("<II", 0, 1)
    )


# ---------------------------------------------------------------- send messages


def _send_body(metadata_length_delta: int = 0, count: int | None = None) -> tuple[bytes, bytes]:
    batch = build_batch([Message(b"hello"), Message(b"world", id=5)])
    meta = (
        b"\x01\x04\x00\x00\x00\x00"
        + b"\x02\x02t1"
        + b"\x02\x04\x01\x00\x00\x00"
        + struct.pack("<I", 2 if count is None else count)
    )
    return struct.pack("<I", len(meta) + metadata_length_delta) + meta + batch, batch


def test_send_messages_returns_the_batch_without_copying():
    body, batch = _send_body()
    buf = bytearray(body)
    decoded = M.decode_send_messages(memoryview(buf))
    assert decoded.stream_id == 0 and decoded.topic_id == "t1"
    assert decoded.partitioning == Partitioning.by_partition(1)
    assert decoded.messages_count == 2
    assert bytes(decoded.batch) == batch
    buf[-1] ^= 0xFF  # the view shares the request buffer
    assert decoded.batch[-1] == buf[-1]


def test_send_messages_metadata_length_must_match():
    for delta in (-1, 1, 1000):
        body, _ = _send_body(metadata_length_delta=delta)
        with pytest.raises(InvalidFormat) as err:
            M.decode_send_messages(body)
        assert err.value.offset == 0


def test_send_messages_count_must_match_the_batch():
    for count in (0, 1, 3):
        body, _ = _send_body(count=count)
        with pytest.raises(InvalidMessagesCount) as err:
            M.decode_send_messages(body)
        assert err.value.code == 4009


def test_send_messages_needs_a_whole_batch_header():
    body, _ = _send_body()
    with pytest.raises(InvalidFormat):
        M.decode_send_messages(body[: len(body) - len(_send_body()[1]) + 100])


def test_poll_prefix_and_reply_split():
    prefix = M.encode_poll_prefix(1, 2, 3)
    assert prefix == struct.pack("<IQI", 1, 2, 3) and len(prefix) == M.POLL_PREFIX_SIZE == 16
    batch = build_batch([Message(b"x")])
    head, rest = M.decode_poll_reply(prefix + batch)
    assert head == M.PollPrefix(1, 2, 3) and bytes(rest) == batch


def test_send_reply_empty_payload_means_no_confirmations():
    assert M.decode_send_messages_reply(b"") == ()
    assert M.encode_send_messages_reply([]) == b"\x00\x00\x00\x00"


# ---------------------------------------------------------------- decoder strictness


def test_empty_commands_reject_bytes():
    for command in (Command.PING, Command.GET_STATS, Command.GET_STREAMS, Command.LOGOUT_USER):
        with pytest.raises(InvalidFormat):
            COMMANDS[command].decode(b"\x00")


def test_trailing_bytes_are_rejected_for_fixed_layouts():
    body = ST.encode_get_stream(ST.GetStream(1))
    with pytest.raises(InvalidFormat) as err:
        ST.decode_get_stream(body + b"\x00")
    assert err.value.offset == len(body)


def test_options_tail_commands_keep_trailing_bytes():
    assert ST.decode_create_stream(b"\x01s\x01\x02\x03") == ST.CreateStream("s", b"\x01\x02\x03")


def test_bad_identifier_is_iggy_6():
    with pytest.raises(InvalidIdentifier) as err:
        ST.decode_get_stream(b"\x03\x01x")
    assert err.value.code == 6


def test_presence_flags_must_be_0_or_1():
    with pytest.raises(InvalidFormat):
        U.decode_update_user(b"\x01\x04\x00\x00\x00\x00\x02")
    with pytest.raises(InvalidFormat):
        U.decode_create_user(b"\x01u\x00\x01\x02")


def test_permissions_length_must_match_the_block():
    from headwater.codec.iggy.primitives import Permissions, encode_permissions

    block = encode_permissions(Permissions())
    good = b"\x01\x04\x00\x00\x00\x00\x01" + struct.pack("<I", len(block)) + block
    assert U.decode_update_permissions(good).permissions == Permissions()
    bad = b"\x01\x04\x00\x00\x00\x00\x01" + struct.pack("<I", len(block) + 1) + block + b"\x00"
    with pytest.raises(InvalidFormat):
        U.decode_update_permissions(bad)


def test_describe_options_scope_range():
    for scope in (0, 4, 255):
        with pytest.raises(InvalidFormat):
            S.decode_describe_options(bytes((scope,)))
