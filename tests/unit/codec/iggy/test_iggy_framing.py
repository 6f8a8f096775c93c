"""Framing: golden SDK frames, reply/eviction layouts, the result section and the Framer."""

from __future__ import annotations

import random
import struct

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.codec.errors import CodecError, InvalidFormat
from headwater.codec.iggy.codes import Command, EvictionReason, Operation
from headwater.codec.iggy.errors import (
    FrameTooLarge,
    InvalidFrame,
    InvalidOperation,
    eviction_reason_of,
    is_frame_fatal,
)
from headwater.codec.iggy.framing import (
    HEADER_SIZE,
    RESULT_FRAMED_COMMANDS,
    RESULT_FRAMED_OPERATIONS,
    RESULT_OK,
    Framer,
    RequestHeader,
    decode_eviction,
    decode_reply_header,
    decode_request_header,
    encode_eviction,
    encode_reply,
    encode_reply_header,
    encode_request,
    encode_request_header,
    is_result_framed,
    reply_body,
    reply_header_for,
    result_error,
    result_ok,
    split_result,
)
from headwater.codec.iggy.version import decode_login_register_any

# Frames captured from the apache-iggy 0.9.0 SDK (connect, login_user("iggy", "iggy"),
# create_stream("s1")); the client id is the random one that run minted.
PING_BEFORE_LOGIN = bytes.fromhex(
    "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "000100000000000000000000050000000000000000000000000000000000000000000000000000000000000000000000"
    "000000000000000000000000000000000000000000000000000000000000000088401d63df644e31bd1ffb9250e5508a"
    "000000000000000000000000000000000000000000000000010000000000000002000000000000000000000000000000"
    "000000000100000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "00000000000000000000000000000000"
)
LOGIN_REGISTER = bytes.fromhex(
    "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "220100000000000000000000050000000000000000000000000000000000000000000000000000000000000000000000"
    "000000000000000000000000000000000000000000000000000000000000000088401d63df644e31bd1ffb9250e5508a"
    "95803f2a3c20de8f00000000000000000000000000000000000000000000000001000000000000000000000000000000"
    "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "00000000000000000000000000000000002c000008727573742d73646b06302e31312e30046967677904696767790000"
    "0000"
)
CLUSTER_METADATA = bytes.fromhex(
    "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "000100000000000000000000050000000000000000000000000000000000000000000000000000000000000000000000"
    "000000000000000000000000000000000000000000000000000000000000000088401d63df644e31bd1ffb9250e5508a"
    "000000000000000000000000000000000000000000000000010000000000000002000000000000000700000000000000"
    "000000000c00000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "00000000000000000000000000000000"
)
CREATE_STREAM = bytes.fromhex(
    "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "030100000000000000000000050000000000000000000000000000000000000000000000000000000000000000000000"
    "000000000000000000000000000000000000000000000000000000000000000088401d63df644e31bd1ffb9250e5508a"
    "c2be205aa2b4812f00000000000000000000000000000000010000000000000080000000000000000700000000000000"
    "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "00000000000000000000000000000000027331"
)
SDK_CLIENT = int.from_bytes(bytes.fromhex("88401d63df644e31bd1ffb9250e5508a"), "little")

u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, 0xFFFFFFFFFFFFFFFF)
u128 = st.integers(0, (1 << 128) - 1)
client_ops = st.sampled_from(
    [o for o in Operation if o is not Operation.RESERVED and not 64 <= o < 128]
)


# ---------------------------------------------------------------- golden SDK frames


def test_sdk_ping_before_login():
    h = decode_request_header(PING_BEFORE_LOGIN)
    assert h.size == 256 and h.body_length == 0
    assert h.operation is Operation.NON_REPLICATED and h.command_code == Command.PING
    assert h.client == SDK_CLIENT and h.request == 1 and h.session == 0
    assert h.request_checksum == 0 and h.timestamp == 0
    assert h.encode() == PING_BEFORE_LOGIN


def test_sdk_login_register():
    h = decode_request_header(LOGIN_REGISTER)
    assert h.operation is Operation.REGISTER and h.command_code == Command.LOGIN_REGISTER
    assert h.request == 0 and h.session == 0 and h.size == len(LOGIN_REGISTER) == 290
    body = LOGIN_REGISTER[HEADER_SIZE:]
    # request_checksum is xxh3-64 of the body, widened to u128.
    assert h.request_checksum == xxhash.xxh3_64_intdigest(body)
    login = decode_login_register_any(body)
    assert (login.username, login.password, login.context) == ("iggy", "iggy", None)
    assert login.version.protocol_version == 0x2C00
    assert (login.version.sdk_name, login.version.sdk_version) == ("rust-sdk", "0.11.0")
    assert h.encode() == LOGIN_REGISTER[:HEADER_SIZE]


def test_sdk_cluster_metadata_after_login():
    h = decode_request_header(CLUSTER_METADATA)
    assert (
        h.operation is Operation.NON_REPLICATED
        and h.command_code == Command.GET_CLUSTER_METADATA == 12
    )
    assert h.session == 7 and h.request == 1  # session from our login reply; request not advanced
    assert CLUSTER_METADATA[196:200] == b"\x0c\x00\x00\x00"


def test_sdk_create_stream():
    h = decode_request_header(CREATE_STREAM)
    assert h.operation is Operation.CREATE_STREAM and h.command_code == Command.CREATE_STREAM
    assert CREATE_STREAM[196:200] == b"\x00\x00\x00\x00"  # replicated ops carry no code
    assert h.request == 1 and h.session == 7
    assert h.request_checksum == xxhash.xxh3_64_intdigest(CREATE_STREAM[HEADER_SIZE:])


def test_request_header_offsets():
    raw = encode_request_header(
        size=300,
        client=0x0102030405060708090A0B0C0D0E0F10,
        request=0x1112131415161718,
        operation=Operation.NON_REPLICATED,
        session=0x2122232425262728,
        command_code=606,
        request_checksum=(1 << 127) | 5,
        timestamp=0x3132333435363738,
        user_id=0x41424344,
    )
    assert len(raw) == 256
    assert raw[48:52] == struct.pack("<I", 300)
    assert raw[60] == 5
    assert raw[128:144] == (0x0102030405060708090A0B0C0D0E0F10).to_bytes(16, "little")
    assert raw[144:160] == ((1 << 127) | 5).to_bytes(16, "little")
    assert raw[160:168] == struct.pack("<Q", 0x3132333435363738)
    assert raw[168:176] == struct.pack("<Q", 0x1112131415161718)
    assert raw[176] == 2 and raw[177:184] == bytes(7)
    assert raw[184:192] == struct.pack("<Q", 0x2122232425262728)
    assert raw[192:196] == struct.pack("<I", 0x41424344)
    assert raw[196:200] == struct.pack("<I", 606)
    assert raw[200:] == bytes(56)


@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(256, 0xFFFFFFFF),
    client=u128,
    request=u64,
    operation=client_ops,
    session=u64,
    code=u32,
    checksum=u128,
    timestamp=u64,
    user_id=u32,
    cluster=u128,
    view=u32,
    release=u32,
    replica=st.integers(0, 255),
)
def test_request_header_round_trip(
    size,
    client,
    request,
    operation,
    session,
    code,
    checksum,
    timestamp,
    user_id,
    cluster,
    view,
    release,
    replica,
):
    raw = encode_request_header(
        size=size,
        client=client,
        request=request,
        operation=operation,
        session=session,
        command_code=code,
        request_checksum=checksum,
        timestamp=timestamp,
        user_id=user_id,
        cluster=cluster,
        view=view,
        release=release,
        replica=replica,
    )
    h = decode_request_header(raw)
    assert (h.size, h.client, h.request, h.operation, h.session) == (
        size,
        client,
        request,
        operation,
        session,
    )
    assert (h.request_checksum, h.timestamp, h.user_id) == (checksum, timestamp, user_id)
    assert (h.cluster, h.view, h.release, h.replica) == (cluster, view, release, replica)
    if operation is Operation.NON_REPLICATED:
        assert h.command_code == code
    elif operation is Operation.REGISTER:
        assert h.command_code == Command.LOGIN_REGISTER
    else:
        assert Operation(h.operation) is operation
    assert h.encode() == raw


@pytest.mark.parametrize("operation", [0, 4, 64, 68, 100, 127, 150, 159, 163, 255])
def test_non_client_operations_are_refused(operation):
    raw = bytearray(encode_request_header(size=256, client=9, request=1, operation=2, session=1))
    raw[176] = operation
    with pytest.raises(InvalidOperation) as err:
        decode_request_header(raw)
    assert err.value.client == 9 and err.value.operation == operation
    assert eviction_reason_of(err.value) == EvictionReason.INVALID_REQUEST_OPERATION
    assert not is_frame_fatal(err.value)


def test_header_must_be_a_request_of_at_least_256_bytes():
    raw = bytearray(encode_request_header(size=256, client=1, request=0, operation=2, session=0))
    with pytest.raises(InvalidFrame):
        decode_request_header(raw[:255])
    raw[60] = 8
    with pytest.raises(InvalidFrame):
        decode_request_header(raw)
    raw[60] = 5
    raw[48:52] = struct.pack("<I", 255)
    with pytest.raises(InvalidFrame):
        decode_request_header(raw)


def test_encode_request_picks_the_operation():
    frame = encode_request(Command.CREATE_TOPIC, b"abc", client=5, request=3, session=2)
    h = decode_request_header(frame)
    assert h.operation is Operation.CREATE_TOPIC and h.size == 259 and frame[256:] == b"abc"
    assert frame[196:200] == bytes(4)
    h = decode_request_header(encode_request(Command.GET_STREAMS))
    assert h.operation is Operation.NON_REPLICATED and h.command_code == Command.GET_STREAMS
    assert decode_request_header(encode_request(12345)).command_code == 12345


# ---------------------------------------------------------------- reply and eviction


def _request(**kw) -> RequestHeader:
    base = dict(
        size=256,
        client=SDK_CLIENT,
        request=42,
        operation=Operation.CREATE_STREAM,
        session=7,
        command_code=202,
        request_checksum=0xDEADBEEF,
        timestamp=99,
    )
    base.update(kw)
    return RequestHeader(**base)


def test_reply_echoes_the_request():
    req = _request()
    frame = encode_reply(req, b"\x00\x00\x00\x00payload", op=7, commit=3)
    assert len(frame) == 256 + 11
    assert frame[48:52] == struct.pack("<I", 267)
    assert frame[60] == 8
    assert frame[128:144] == (0xDEADBEEF).to_bytes(16, "little")  # request_checksum
    assert frame[144:160] == bytes(16)  # context
    assert frame[160:176] == SDK_CLIENT.to_bytes(16, "little")
    assert frame[176:184] == struct.pack("<Q", 7)  # op
    assert frame[184:192] == struct.pack("<Q", 3)  # commit
    assert frame[192:200] == struct.pack("<Q", 99)  # timestamp
    assert frame[200:208] == struct.pack("<Q", 42)  # request
    assert frame[208] == Operation.CREATE_STREAM
    assert frame[216:220] == bytes(4)  # status
    assert frame[220:256] == bytes(36)
    assert frame[256:] == b"\x00\x00\x00\x00payload"
    h = decode_reply_header(frame)
    assert (h.client, h.request, h.operation, h.status, h.size) == (SDK_CLIENT, 42, 128, 0, 267)


def test_reply_status_means_empty_body():
    frame = encode_reply(_request(), status=1009)
    assert len(frame) == 256 and frame[216:220] == struct.pack("<I", 1009)
    with pytest.raises(ValueError):
        encode_reply(_request(), b"x", status=1009)


def test_reply_header_for_buffer_lists():
    req = _request(operation=Operation.NON_REPLICATED, command_code=100)
    header = reply_header_for(req, 16 + 300)
    assert len(header) == 256 and decode_reply_header(header).size == 256 + 316


@settings(max_examples=100, deadline=None)
@given(
    client=u128,
    request=u64,
    op=st.integers(0, 255),
    status=u32,
    checksum=u128,
    ts=u64,
    length=st.integers(0, 1 << 20),
)
def test_reply_header_round_trip(client, request, op, status, checksum, ts, length):
    if status:
        length = 0
    raw = encode_reply_header(
        body_length=length,
        client=client,
        request=request,
        operation=op,
        status=status,
        request_checksum=checksum,
        timestamp=ts,
    )
    h = decode_reply_header(raw)
    assert (
        h.size,
        h.client,
        h.request,
        h.operation,
        h.status,
        h.request_checksum,
        h.timestamp,
    ) == (
        256 + length,
        client,
        request,
        op,
        status,
        checksum,
        ts,
    )


def test_eviction_layout():
    frame = encode_eviction(SDK_CLIENT, EvictionReason.INCOMPATIBLE_PROTOCOL, 0x2C00, 0x2C00)
    assert len(frame) == 256
    assert frame[48:52] == struct.pack("<I", 256)
    assert frame[60] == 13
    assert frame[128:144] == SDK_CLIENT.to_bytes(16, "little")
    assert frame[144:148] == struct.pack("<I", 0x2C00) and frame[148:152] == struct.pack(
        "<I", 0x2C00
    )
    assert frame[255] == 14
    assert frame[152:255] == bytes(103)
    assert decode_eviction(frame).reason == 14
    plain = encode_eviction(5, EvictionReason.MALFORMED_LOGIN)
    assert plain[144:152] == bytes(8) and plain[255] == 15


def test_eviction_window_rules():
    with pytest.raises(ValueError):
        encode_eviction(1, EvictionReason.NO_SESSION, 0x2C00, 0x2C00)
    with pytest.raises(ValueError):
        encode_eviction(1, EvictionReason.INCOMPATIBLE_PROTOCOL, 0x2C00, 0)
    with pytest.raises(ValueError):
        encode_eviction(1, EvictionReason.INCOMPATIBLE_PROTOCOL, 0x2800, 0x2C00)
    with pytest.raises(ValueError):
        encode_eviction(1, 0)


# ---------------------------------------------------------------- result section


def test_result_framing_table():
    assert Operation.DELETE_SEGMENTS not in RESULT_FRAMED_OPERATIONS
    assert Operation.SEND_MESSAGES not in RESULT_FRAMED_OPERATIONS
    assert Operation.LOGOUT not in RESULT_FRAMED_OPERATIONS
    assert Operation.NON_REPLICATED not in RESULT_FRAMED_OPERATIONS
    assert Operation.REGISTER in RESULT_FRAMED_OPERATIONS
    for op in (Operation.STORE_CONSUMER_OFFSET, Operation.DELETE_CONSUMER_OFFSET):
        assert is_result_framed(op)
    metadata = [o for o in Operation if 128 <= o <= 149 and o is not Operation.DELETE_SEGMENTS]
    assert all(is_result_framed(o) for o in metadata)
    assert (
        Command.LOGIN_REGISTER in RESULT_FRAMED_COMMANDS
        and Command.CREATE_STREAM in RESULT_FRAMED_COMMANDS
    )
    assert (
        Command.DELETE_SEGMENTS not in RESULT_FRAMED_COMMANDS
        and Command.GET_STREAM not in RESULT_FRAMED_COMMANDS
    )


def test_result_helpers():
    assert result_ok() == RESULT_OK == b"\x00\x00\x00\x00"
    assert result_ok(b"xy") == b"\x00\x00\x00\x00xy"
    assert result_error(1009) == struct.pack("<III", 1, 0, 1009)
    assert reply_body(Operation.CREATE_STREAM, b"p") == b"\x00\x00\x00\x00p"
    assert reply_body(Operation.SEND_MESSAGES, b"p") == b"p"
    assert reply_body(Operation.NON_REPLICATED) == b""
    with pytest.raises(ValueError):
        result_error(0)


@given(payload=st.binary(max_size=64), code=st.integers(1, 0xFFFFFFFF))
def test_result_split_round_trip(payload, code):
    assert split_result(result_ok(payload))[0] == 0
    assert bytes(split_result(result_ok(payload))[1]) == payload
    c, rest = split_result(result_error(code))
    assert c == code and len(rest) == 0


def test_result_split_never_reads_a_short_body_as_success():
    for body in (b"", b"\x01\x00\x00\x00", b"\x01\x00\x00\x00\x00\x00\x00\x00"):
        with pytest.raises(InvalidFormat):
            split_result(body)


# ---------------------------------------------------------------- framer


def _frames(n: int, seed: int = 0) -> list[bytes]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        body = rnd.randbytes(rnd.choice([0, 1, 5, 300, 4000]))
        out.append(
            encode_request(
                Command.SEND_MESSAGES if i % 2 else Command.GET_STREAM,
                body,
                client=i + 1,
                request=i,
            )
        )
    return out


def _drain(framer: Framer) -> list[tuple[RequestHeader, bytes]]:
    out = []
    while (f := framer.next_frame()) is not None:
        out.append((f[0], bytes(f[1])))
    return out


def test_framer_byte_by_byte():
    frames = _frames(4) + [PING_BEFORE_LOGIN, LOGIN_REGISTER, CREATE_STREAM]
    stream = b"".join(frames)
    framer = Framer()
    got = []
    for i in range(len(stream)):
        framer.feed(stream[i : i + 1])
        got += _drain(framer)
    assert [h.encode() + body for h, body in got] == [
        decode_request_header(f).encode() + f[256:] for f in frames
    ]
    assert framer.buffered == 0


@settings(max_examples=100, deadline=None)
@given(cuts=st.lists(st.integers(0, 1 << 16), max_size=20), seed=st.integers(0, 1000))
def test_framer_random_chunks(cuts, seed):
    frames = _frames(5, seed)
    stream = b"".join(frames)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    framer = Framer()
    got = []
    for a, b in zip(points, points[1:]):
        framer.feed(memoryview(stream)[a:b])
        got += _drain(framer)
    assert [body for _, body in got] == [f[256:] for f in frames]
    assert [h.client for h, _ in got] == [i + 1 for i in range(5)]


def test_framer_bodies_stay_valid_while_feeding():
    frames = _frames(3, 7)
    framer = Framer()
    framer.feed(b"".join(frames)[:-1])
    first = framer.next_frame()
    second = framer.next_frame()
    assert framer.next_frame() is None
    framer.feed(b"".join(frames)[-1:])  # resizing the buffer must not touch handed-out views
    third = framer.next_frame()
    assert bytes(first[1]) == frames[0][256:] and bytes(second[1]) == frames[1][256:]
    assert bytes(third[1]) == frames[2][256:]


def test_framer_size_cap_is_enforced_before_the_body():
    framer = Framer(max_frame_size=1024)
    head = bytearray(encode_request_header(size=1025, client=1, request=0, operation=2, session=0))
    framer.feed(head[:51])  # size not complete yet
    with pytest.raises(FrameTooLarge) as err:
        framer.feed(head[51:52])
    assert err.value.code == 4029 and err.value.offset == 48 and is_frame_fatal(err.value)
    assert eviction_reason_of(err.value) == EvictionReason.INVALID_REQUEST_BODY_SIZE
    with pytest.raises(FrameTooLarge):  # poisoned
        framer.next_frame()
    with pytest.raises(FrameTooLarge):
        framer.feed(b"more")


def test_framer_accepts_a_frame_at_the_cap():
    frame = encode_request(Command.GET_STREAM, bytes(1024 - 256))
    framer = Framer(max_frame_size=1024)
    framer.feed(frame)
    assert framer.next_frame()[0].size == 1024


def test_framer_rejects_small_size_and_non_requests():
    framer = Framer()
    with pytest.raises(InvalidFrame):
        framer.feed(struct.pack("<48xI", 255))
    framer = Framer()
    head = bytearray(encode_request_header(size=256, client=1, request=0, operation=2, session=0))
    head[60] = 8
    framer.feed(head[:60])
    with pytest.raises(InvalidFrame) as err:
        framer.feed(head[60:61])
    assert err.value.offset == 60


def test_framer_skips_a_frame_with_a_bad_operation():
    bad = bytearray(encode_request(Command.PING, client=3))
    bad[176] = 64
    good = encode_request(Command.PING, client=4)
    framer = Framer()
    framer.feed(bytes(bad) + good)
    with pytest.raises(InvalidOperation) as err:
        framer.next_frame()
    assert err.value.client == 3
    h, body = framer.next_frame()
    assert h.client == 4 and len(body) == 0


def test_framer_rejects_a_tiny_cap():
    with pytest.raises(ValueError):
        Framer(max_frame_size=255)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=2048), cap=st.integers(256, 4096))
def test_framer_garbage_raises_only_codec_errors(data, cap):
    framer = Framer(max_frame_size=cap)
    try:
        framer.feed(data)
        while framer.next_frame() is not None:
            pass
    except CodecError:
        pass


def test_request_fields_rules():
    from headwater.codec.iggy.framing import request_fields_problem

    assert request_fields_problem(decode_request_header(LOGIN_REGISTER)) is None
    assert request_fields_problem(decode_request_header(PING_BEFORE_LOGIN)) is None
    assert request_fields_problem(decode_request_header(CREATE_STREAM)) is None
    assert (
        request_fields_problem(RequestHeader.decode(encode_request(Command.PING, client=0)))
        is not None
    )
    bad_register = encode_request(Command.LOGIN_REGISTER, client=1, request=1)
    assert request_fields_problem(RequestHeader.decode(bad_register)) is not None
    no_session = encode_request(Command.CREATE_STREAM, client=1, request=1, session=0)
    assert request_fields_problem(RequestHeader.decode(no_session)) is not None
