"""Hypothesis strategies for the Iggy codec tests: one per request and reply dataclass."""

from __future__ import annotations

from hypothesis import strategies as st

from headwater.codec.batch import Message, build_batch
from headwater.codec.iggy import version as V
from headwater.codec.iggy.codes import AckLevel, Command, ConsumerKind, OptionsScope, PollingKind
from headwater.codec.iggy.commands import groups as G
from headwater.codec.iggy.commands import messages as M
from headwater.codec.iggy.commands import offsets as O
from headwater.codec.iggy.commands import partitions as P
from headwater.codec.iggy.commands import segments as SG
from headwater.codec.iggy.commands import streams as ST
from headwater.codec.iggy.commands import system as S
from headwater.codec.iggy.commands import tokens as T
from headwater.codec.iggy.commands import topics as TP
from headwater.codec.iggy.commands import users as U
from headwater.codec.iggy.primitives import (
    Consumer,
    GlobalPermissions,
    Partitioning,
    Permissions,
    PollingStrategy,
    StreamPermissions,
    TopicPermissions,
)

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, 0xFFFFFFFFFFFFFFFF)
u128 = st.integers(0, (1 << 128) - 1)
f32 = st.floats(width=32, allow_nan=False)


def _fits(limit: int, minimum: int = 0):
    return lambda s: minimum <= len(s.encode("utf-8")) <= limit


names = st.text(min_size=1, max_size=40).filter(_fits(255, 1))
"""1..255 utf-8 bytes."""
short_strs = st.text(max_size=40).filter(_fits(255))
"""0..255 utf-8 bytes (passwords, tokens)."""
long_strs = st.text(max_size=60)
opt_strs = st.none() | st.text(min_size=1, max_size=30)
identifiers = u32 | names
raw = st.binary(max_size=64)
options_blocks = st.binary(max_size=48)
"""Raw options-block tails (the codec does not look inside)."""

consumers = st.builds(Consumer, st.sampled_from(ConsumerKind), identifiers)
partitionings = st.one_of(
    st.just(Partitioning.balanced()),
    st.builds(Partitioning.by_partition, u32),
    st.builds(Partitioning.by_key, st.binary(min_size=1, max_size=255)),
)
polling = st.builds(PollingStrategy, st.sampled_from(PollingKind), u64)
topic_perms = st.builds(
    TopicPermissions, u32, st.booleans(), st.booleans(), st.booleans(), st.booleans()
)
stream_perms = st.builds(
    StreamPermissions,
    u32,
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    topics=st.lists(topic_perms, max_size=3).map(tuple),
)
permissions = st.builds(
    Permissions,
    st.builds(GlobalPermissions, *[st.booleans()] * 10),
    st.lists(stream_perms, max_size=3).map(tuple),
)
version_infos = st.builds(V.ClientVersionInfo, u32, names, names)

_messages = st.builds(
    Message,
    payload=st.binary(max_size=40),
    id=u128,
    origin_timestamp=st.integers(0, 1 << 50),
    user_headers=st.binary(max_size=16),
)


@st.composite
def batches(draw):
    """A valid unstamped batch (memoryview) and its message count."""
    msgs = draw(st.lists(_messages, min_size=1, max_size=4))
    base = msgs[0].origin_timestamp
    msgs = [
        Message(m.payload, m.id, base + (m.origin_timestamp % 1000), m.user_headers) for m in msgs
    ]
    return memoryview(build_batch(msgs)), len(msgs)


@st.composite
def send_messages(draw):
    batch, count = draw(batches())
    return M.SendMessages(draw(identifiers), draw(identifiers), draw(partitionings), count, batch)


REQUESTS: dict[Command, st.SearchStrategy] = {
    Command.PING: st.just(S.Ping()),
    Command.GET_STATS: st.just(S.GetStats()),
    Command.GET_SNAPSHOT: st.builds(S.GetSnapshot, u8, st.lists(u8, max_size=8).map(tuple)),
    Command.GET_CLUSTER_METADATA: st.just(S.GetClusterMetadata()),
    Command.DESCRIBE_OPTIONS: st.builds(S.DescribeOptions, st.sampled_from(OptionsScope)),
    Command.GET_ME: st.just(S.GetMe()),
    Command.GET_CLIENT: st.builds(S.GetClient, u32),
    Command.GET_CLIENTS: st.just(S.GetClients()),
    Command.GET_USER: st.builds(U.GetUser, identifiers),
    Command.GET_USERS: st.just(U.GetUsers()),
    Command.CREATE_USER: st.builds(
        U.CreateUser, names, short_strs, u8, st.none() | permissions, options_blocks
    ),
    Command.DELETE_USER: st.builds(U.DeleteUser, identifiers),
    Command.UPDATE_USER: st.builds(
        U.UpdateUser, identifiers, st.none() | names, st.none() | u8, options_blocks
    ),
    Command.UPDATE_PERMISSIONS: st.builds(
        U.UpdatePermissions, identifiers, st.none() | permissions
    ),
    Command.CHANGE_PASSWORD: st.builds(U.ChangePassword, identifiers, short_strs, short_strs),
    Command.LOGIN_USER: st.builds(U.LoginUser, names, short_strs, opt_strs, opt_strs),
    Command.LOGOUT_USER: st.just(U.LogoutUser()),
    Command.LOGIN_REGISTER: st.builds(V.LoginRegister, version_infos, names, short_strs, opt_strs),
    Command.LOGIN_REGISTER_WITH_PAT: st.builds(
        V.LoginRegisterWithPat, version_infos, short_strs, opt_strs
    ),
    Command.GET_PERSONAL_ACCESS_TOKENS: st.just(T.GetPersonalAccessTokens()),
    Command.CREATE_PERSONAL_ACCESS_TOKEN: st.builds(T.CreatePersonalAccessToken, names, u64),
    Command.DELETE_PERSONAL_ACCESS_TOKEN: st.builds(T.DeletePersonalAccessToken, names),
    Command.LOGIN_WITH_PERSONAL_ACCESS_TOKEN: st.builds(T.LoginWithPersonalAccessToken, names),
    Command.POLL_MESSAGES: st.builds(
        M.PollMessages,
        consumers,
        identifiers,
        identifiers,
        st.none() | u32,
        polling,
        u32,
        st.booleans(),
    ),
    Command.SEND_MESSAGES: send_messages(),
    Command.FLUSH_UNSAVED_BUFFER: st.builds(
        M.FlushUnsavedBuffer, identifiers, identifiers, u32, st.booleans()
    ),
    Command.GET_CONSUMER_OFFSET: st.builds(
        O.GetConsumerOffset, consumers, identifiers, identifiers, st.none() | u32
    ),
    Command.STORE_CONSUMER_OFFSET: st.builds(
        O.StoreConsumerOffset,
        consumers,
        identifiers,
        identifiers,
        st.none() | u32,
        u64,
        st.sampled_from(AckLevel),
    ),
    Command.DELETE_CONSUMER_OFFSET: st.builds(
        O.DeleteConsumerOffset,
        consumers,
        identifiers,
        identifiers,
        st.none() | u32,
        st.sampled_from(AckLevel),
    ),
    Command.GET_STREAM: st.builds(ST.GetStream, identifiers),
    Command.GET_STREAMS: st.just(ST.GetStreams()),
    Command.CREATE_STREAM: st.builds(ST.CreateStream, names, options_blocks),
    Command.DELETE_STREAM: st.builds(ST.DeleteStream, identifiers),
    Command.UPDATE_STREAM: st.builds(ST.UpdateStream, identifiers, names, options_blocks),
    Command.PURGE_STREAM: st.builds(ST.PurgeStream, identifiers),
    Command.GET_TOPIC: st.builds(TP.GetTopic, identifiers, identifiers),
    Command.GET_TOPICS: st.builds(TP.GetTopics, identifiers),
    Command.CREATE_TOPIC: st.builds(TP.CreateTopic, identifiers, u32, names, options_blocks),
    Command.DELETE_TOPIC: st.builds(TP.DeleteTopic, identifiers, identifiers),
    Command.UPDATE_TOPIC: st.builds(
        TP.UpdateTopic, identifiers, identifiers, names, options_blocks
    ),
    Command.PURGE_TOPIC: st.builds(TP.PurgeTopic, identifiers, identifiers),
    Command.CREATE_PARTITIONS: st.builds(P.CreatePartitions, identifiers, identifiers, u32),
    Command.DELETE_PARTITIONS: st.builds(P.DeletePartitions, identifiers, identifiers, u32),
    Command.DELETE_SEGMENTS: st.builds(SG.DeleteSegments, identifiers, identifiers, u32, u32),
    Command.GET_CONSUMER_GROUP: st.builds(
        G.GetConsumerGroup, identifiers, identifiers, identifiers
    ),
    Command.GET_CONSUMER_GROUPS: st.builds(G.GetConsumerGroups, identifiers, identifiers),
    Command.CREATE_CONSUMER_GROUP: st.builds(
        G.CreateConsumerGroup, identifiers, identifiers, names
    ),
    Command.DELETE_CONSUMER_GROUP: st.builds(
        G.DeleteConsumerGroup, identifiers, identifiers, identifiers
    ),
    Command.JOIN_CONSUMER_GROUP: st.builds(
        G.JoinConsumerGroup, identifiers, identifiers, identifiers
    ),
    Command.LEAVE_CONSUMER_GROUP: st.builds(
        G.LeaveConsumerGroup, identifiers, identifiers, identifiers
    ),
    Command.SYNC_CONSUMER_GROUP: st.builds(
        G.SyncConsumerGroup, identifiers, identifiers, identifiers
    ),
}

# ---------------------------------------------------------------- replies

topic_infos = st.builds(
    TP.TopicInfo, u32, u64, u32, names, u64, u8, u64, u64, u64, options_blocks, options_blocks
)
partition_infos = st.builds(TP.PartitionInfo, u32, u64, u32, u64, u64, u64)
topic_details = st.builds(
    TP.TopicDetails,
    u32,
    u64,
    names,
    u64,
    u8,
    u64,
    u64,
    u64,
    options_blocks,
    options_blocks,
    st.lists(partition_infos, max_size=4).map(tuple),
)
stream_infos = st.builds(ST.StreamInfo, u32, u64, u32, names, u64, u64, options_blocks)
stream_details = st.builds(
    ST.StreamDetails,
    u32,
    u64,
    names,
    u64,
    u64,
    options_blocks,
    st.lists(topic_infos, max_size=3).map(tuple),
)
user_infos = st.builds(U.UserInfo, u32, u64, u8, names, options_blocks)
user_details = st.builds(
    U.UserDetails, u32, u64, u8, names, options_blocks, st.none() | permissions
)
client_infos = st.builds(S.ClientInfo, u32, u32, u8, long_strs, u32)
client_details = st.builds(
    S.ClientDetails,
    u32,
    u32,
    u8,
    long_strs,
    st.lists(st.builds(S.ClientGroupRef, u32, u32, u32), max_size=4).map(tuple),
)
stats = st.builds(
    S.Stats,
    *([u32, f32, f32] + [u64] * 8 + [u32] * 4 + [u64, u32, u32] + [long_strs] * 5 + [u32]),
    st.lists(st.builds(S.CacheMetric, u32, u32, u32, u64, u64, f32), max_size=3).map(tuple),
    u32,
    u64,
    u64,
)
cluster_metadata = st.builds(
    S.ClusterMetadata,
    long_strs,
    st.lists(
        st.builds(S.ClusterNode, long_strs, long_strs, u16, u16, u16, u16, u8, u8), max_size=3
    ).map(tuple),
)
option_descriptors = st.lists(
    st.builds(S.OptionDescriptor, names, u8, raw, long_strs), max_size=4
).map(tuple)
pat_infos = st.lists(st.builds(T.PersonalAccessTokenInfo, names, u64), max_size=4).map(tuple)
group_infos = st.lists(st.builds(G.ConsumerGroupInfo, u32, u32, u32, names), max_size=4).map(tuple)
group_details = st.builds(
    G.ConsumerGroupDetails,
    u32,
    u32,
    names,
    st.lists(
        st.builds(G.ConsumerGroupMember, u32, st.lists(u32, max_size=5).map(tuple)), max_size=4
    ).map(tuple),
)
sync_replies = st.builds(G.SyncConsumerGroupReply, u64, st.lists(u32, max_size=6).map(tuple))
confirmations = st.lists(st.builds(M.SendConfirmation, u32, u32, u32, u64), max_size=4).map(tuple)
login_replies = st.builds(V.LoginReply, u32, u64, u32, names)
consumer_offsets = st.builds(O.ConsumerOffsetInfo, u32, u64, u64)

REPLIES = [
    # (name, strategy, encode, decode)
    ("stats", stats, S.encode_stats, S.decode_stats),
    ("cluster_metadata", cluster_metadata, S.encode_cluster_metadata, S.decode_cluster_metadata),
    (
        "option_descriptors",
        option_descriptors,
        S.encode_option_descriptors,
        S.decode_option_descriptors,
    ),
    ("clients", st.lists(client_infos, max_size=4).map(tuple), S.encode_clients, S.decode_clients),
    ("client_details", client_details, S.encode_client_details, S.decode_client_details),
    ("users", st.lists(user_infos, max_size=4).map(tuple), U.encode_users, U.decode_users),
    ("user_details", user_details, U.encode_user_details, U.decode_user_details),
    (
        "personal_access_tokens",
        pat_infos,
        T.encode_personal_access_tokens,
        T.decode_personal_access_tokens,
    ),
    (
        "raw_personal_access_token",
        st.builds(T.RawPersonalAccessToken, names),
        T.encode_raw_personal_access_token,
        T.decode_raw_personal_access_token,
    ),
    (
        "streams",
        st.lists(stream_infos, max_size=4).map(tuple),
        ST.encode_streams,
        ST.decode_streams,
    ),
    ("stream_details", stream_details, ST.encode_stream_details, ST.decode_stream_details),
    ("topics", st.lists(topic_infos, max_size=4).map(tuple), TP.encode_topics, TP.decode_topics),
    ("topic_details", topic_details, TP.encode_topic_details, TP.decode_topic_details),
    ("consumer_groups", group_infos, G.encode_consumer_groups, G.decode_consumer_groups),
    (
        "consumer_group_details",
        group_details,
        G.encode_consumer_group_details,
        G.decode_consumer_group_details,
    ),
    (
        "sync_consumer_group",
        sync_replies,
        G.encode_sync_consumer_group_reply,
        G.decode_sync_consumer_group_reply,
    ),
    ("consumer_offset", consumer_offsets, O.encode_consumer_offset, O.decode_consumer_offset),
    (
        "send_messages_reply",
        confirmations,
        M.encode_send_messages_reply,
        M.decode_send_messages_reply,
    ),
    ("login_reply", login_replies, V.encode_login_reply, V.decode_login_reply),
]


def fast_read_against_decode(fast_read, decode, body):
    """For the fast-path readers (``send_messages_fields``, ``poll_messages_fields``): ``(fast,
    full)`` of ``body`` when ``decode`` accepts it, after checking the fast read did not decline;
    ``(None, None)`` when ``decode`` refuses it, after checking the fast read declined too."""
    from headwater.codec.errors import CodecError

    fast = fast_read(body)
    try:
        full = decode(body)
    except CodecError:
        assert fast is None  # whatever the full decoder refuses, the fast read declines
        return None, None
    assert fast is not None  # the fast read declines only what the full decoder refuses
    return fast, full


@st.composite
def mutated(draw, bodies: st.SearchStrategy, within: int | None = None, pad: int = 0) -> bytes:
    """A body drawn from ``bodies`` with up to 3 bytes changed (among its first ``within``
    bytes; anywhere when None), then maybe cut short or padded with up to ``pad`` zero bytes."""
    body = bytearray(draw(bodies))
    reach = len(body) if within is None else min(len(body), within)
    for _ in range(draw(st.integers(0, 3)) if reach else 0):
        body[draw(st.integers(0, reach - 1))] = draw(st.integers(0, 255))
    cut = draw(st.one_of(st.none(), st.integers(0, len(body) + pad)))
    if cut is None:
        return bytes(body)
    return bytes(body[:cut]) + bytes(max(0, cut - len(body)))
