"""The SendMessages fast-path codecs against the full decoders/encoders they stand in for
(hypothesis differential): ``send_messages_fields`` vs ``decode_send_messages`` on valid and
mutated bodies, ``encode_reply_to_head`` vs ``encode_reply(decode_request_header(...))``,
``encode_send_confirmation`` vs ``encode_send_messages_reply``."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from iggy_strategies import fast_read_against_decode, mutated

from headwater.codec import batch as batch_codec
from headwater.codec.iggy import framing
from headwater.codec.iggy.codes import Command, PartitioningKind
from headwater.codec.iggy.commands import messages as w
from headwater.codec.iggy.primitives import Partitioning

U32 = st.integers(0, 0xFFFF_FFFF)
BATCH = batch_codec.build_batch([batch_codec.Message(b"payload-%d" % i) for i in range(4)])

identifiers = st.one_of(U32, st.text(st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=8))
partitionings = st.one_of(
    st.just(Partitioning.balanced()),
    U32.map(Partitioning.by_partition),
    st.binary(min_size=1, max_size=16).map(Partitioning.by_key),
)


bodies = mutated(st.builds(lambda *a: w.encode_send_messages(w.SendMessages(*a, 4, memoryview(BATCH))),
                           identifiers, identifiers, partitionings), within=40 + 256)  # metadata, batch header


@settings(max_examples=400)
@given(bodies)
def test_fast_read_agrees_with_the_full_decoder(body):
    fast, full = fast_read_against_decode(w.send_messages_fields, w.decode_send_messages, body)
    if full is None:
        return
    stream_id, topic_id, route, value, batch = fast
    assert (stream_id, topic_id) == (full.stream_id, full.topic_id)
    p = full.partitioning
    expected = {PartitioningKind.BALANCED: ("balanced", None), PartitioningKind.PARTITION_ID: ("partition", p.partition_id),
                PartitioningKind.MESSAGES_KEY: ("key", None if p.key is None else bytes(p.key))}[p.kind]
    assert (route, value) == expected
    assert bytes(batch) == bytes(full.batch)


def test_fast_read_views_the_body_without_a_copy():
    body = bytearray(w.encode_send_messages(w.SendMessages(3, 4, Partitioning.by_partition(1), 4, memoryview(BATCH))))
    stream_id, topic_id, route, value, batch = w.send_messages_fields(body)
    assert (stream_id, topic_id, route, value) == (3, 4, "partition", 1) and batch.obj is body and bytes(batch) == BATCH


@settings(max_examples=300)
@given(st.binary(min_size=256, max_size=256), U32, st.integers(0, 2**64 - 1),
       st.one_of(st.just(b""), st.binary(min_size=1, max_size=40)), st.sampled_from([0, 40, 1007, 4009]))
def test_reply_to_head_matches_the_decoded_reply(noise, request, op, body, status):
    head = bytearray(noise)  # every field random, then made a header decode_request_header accepts
    struct.pack_into("<I", head, framing.SIZE_OFFSET, 256 + 100)
    head[framing.COMMAND_OFFSET] = 5
    head[176] = 160  # SendMessages
    struct.pack_into("<Q", head, 168, request)
    if status:
        body = b""
    expected = framing.encode_reply(framing.decode_request_header(bytes(head)), body, status, op=op)
    assert framing.encode_reply_to_head(bytes(head), body, status, op=op) == expected


@given(U32, U32, U32, st.integers(0, 2**64 - 1))
def test_one_confirmation_is_the_reply_codec_bytes(stream_id, topic_id, partition_id, base_offset):
    expected = w.encode_send_messages_reply([w.SendConfirmation(stream_id, topic_id, partition_id, base_offset)])
    assert w.encode_send_confirmation(stream_id, topic_id, partition_id, base_offset) == expected


def test_a_named_keyed_send_is_read_fast():
    body = w.encode_send_messages(w.SendMessages("bench", 2, Partitioning.by_key(b"k"), 4, memoryview(BATCH)))
    frame = framing.encode_request(Command.SEND_MESSAGES, body)
    assert w.send_messages_fields(frame[framing.HEADER_SIZE:])[:4] == ("bench", 2, "key", b"k")


@settings(max_examples=300)
@given(st.binary(min_size=256, max_size=256), U32, st.integers(0, 2**64 - 1), U32, U32, U32, st.integers(0, 2**64 - 1))
def test_send_reply_in_one_pack_is_the_decoded_reply(noise, request, op, stream_id, topic_id, partition_id, base_offset):
    """``encode_send_reply_to_head`` (the fast path's whole reply in one pack) gives the bytes of the
    full path's reply: ``encode_reply`` of the decoded header with the confirmation as the body
    (SendMessages replies are not result-framed)."""
    head = bytearray(noise)
    struct.pack_into("<I", head, framing.SIZE_OFFSET, 256 + 100)
    head[framing.COMMAND_OFFSET] = 5
    head[176] = 160  # SendMessages
    struct.pack_into("<Q", head, 168, request)
    confirmation = w.encode_send_confirmation(stream_id, topic_id, partition_id, base_offset)
    body = framing.reply_body(framing.decode_request_header(bytes(head)).operation, confirmation)
    expected = framing.encode_reply(framing.decode_request_header(bytes(head)), body, 0, op=op)
    assert w.encode_send_reply_to_head(bytes(head), op, stream_id, topic_id, partition_id, base_offset) == expected


def test_send_reply_in_one_pack_refuses_what_the_confirmation_refuses():
    head = bytes(256)
    for bad in ((2**32, 0, 0, 0), (0, -1, 0, 0), (0, 0, 0, 2**64)):
        try:
            w.encode_send_confirmation(*bad)
        except struct.error:
            pass
        else:
            raise AssertionError(bad)
        try:
            w.encode_send_reply_to_head(head, 0, *bad)
        except struct.error:
            continue
        raise AssertionError(bad)


def test_reply_packer_needs_a_little_endian_body():
    import pytest

    with pytest.raises(ValueError):
        framing.reply_packer(struct.Struct("IIQ"))
