"""The PollMessages fast-path codecs against the full decoders/encoders they stand in for
(hypothesis differential): ``poll_messages_fields`` vs ``decode_poll_messages`` on valid,
mutated and cut bodies; ``reply_header_to_head`` vs ``reply_header_for(decode_request_header(...))``."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from iggy_strategies import REQUESTS, fast_read_against_decode, mutated

from headwater.codec.iggy import framing
from headwater.codec.iggy.codes import Command, ConsumerKind, PollingKind
from headwater.codec.iggy.commands import messages as w
from headwater.codec.iggy.primitives import Consumer, PollingStrategy

U64 = st.integers(0, 2**64 - 1)
requests = REQUESTS[Command.POLL_MESSAGES]


bodies = mutated(requests.map(w.encode_poll_messages), pad=2)  # kinds, lengths, flags, utf-8, the tail


def _fields(req: w.PollMessages) -> tuple:
    return (req.consumer, req.stream_id, req.topic_id, req.partition_id, int(req.strategy.kind), req.strategy.value,
            req.count, req.auto_commit)


@settings(max_examples=500)
@given(bodies)
def test_fast_read_agrees_with_the_full_decoder(body):
    fast, full = fast_read_against_decode(w.poll_messages_fields, w.decode_poll_messages, body)
    if full is not None:
        assert fast == _fields(full) and type(fast[0].kind) is ConsumerKind
    for view in (memoryview(body), bytearray(body)):  # every buffer type a transport hands in: the same answer
        assert w.poll_messages_fields(view) == fast


@given(requests)
def test_every_encodable_request_is_read_fast(req):
    assert w.poll_messages_fields(w.encode_poll_messages(req)) == _fields(req)


def test_a_non_byte_view_is_declined():
    body = w.encode_poll_messages(w.PollMessages(Consumer(ConsumerKind.CONSUMER, 1), 1, 2, 0,
                                                 PollingStrategy(PollingKind.OFFSET, 5), 10, False))
    assert w.poll_messages_fields(memoryview(body + b"\x00" * (-len(body) % 4)).cast("I")) is None


@settings(max_examples=300)
@given(st.binary(min_size=256, max_size=256), U64, U64, st.integers(0, 1 << 24), st.sampled_from([0, 40, 1007, 4011]))
def test_reply_header_to_head_matches_the_decoded_reply(noise, request, op, length, status):
    head = bytearray(noise)  # every field random, then made a header decode_request_header accepts
    struct.pack_into("<I", head, framing.SIZE_OFFSET, 256 + 40)
    head[framing.COMMAND_OFFSET] = 5
    head[176] = 2  # NonReplicated
    struct.pack_into("<I", head, framing.CODE_OFFSET, int(Command.POLL_MESSAGES))
    struct.pack_into("<Q", head, 168, request)
    if status:
        length = 0  # (a refusal has an empty body)
    expected = framing.reply_header_for(framing.decode_request_header(bytes(head)), length, status=status, op=op)
    assert framing.reply_header_to_head(bytes(head), length, status, op=op) == expected
