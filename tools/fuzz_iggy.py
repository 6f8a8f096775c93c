#!/usr/bin/env python3
"""Fuzz the Iggy binary protocol of a real ``headwater serve``, with a healthy client alongside.

    .venv/bin/python tools/fuzz_iggy.py [--seconds 60] [--seed N] [--out DIR]
    .venv/bin/python tools/fuzz_iggy.py --replay FILE      # re-send one saved input
    .venv/bin/python tools/fuzz_iggy.py --implementation python   # server on the pure-Python frame walks

Inputs start from a valid frame of every command of protocol 0.11.0 (bodies built with
``headwater.codec.iggy.commands`` and ``codec.batch``), then are broken: bit flips, bytes
and integers set to edge values, truncation, extension, insertion, deletion, splices with
other seeds, a ``size`` field left stale or fixed up; plus pure random bytes and random
bodies under a valid header. Each goes out on a logged-in connection that is reused
(PAT login of a dedicated user), on a fresh anonymous one, or as a broken Register on a
fresh one; now and then 2-3 frames are pipelined in one write. Between inputs a healthy
root client must ping, send a message and poll it back byte-identical, and a fresh
connection must log in.

The oracle, checked after every input:

- the server process is running and its log has no traceback or error-level line;
- every complete frame sent gets exactly one answer, in order, within 10 s: a Reply
  echoing its client, request, operation, timestamp and request checksum, or an Eviction
  (size 256, a known reason, the frame's client id) after which the connection closes;
  a frame with a bad ``size`` or ``command`` byte gets an Eviction; nothing unasked arrives;
- a Reply with a status carries a known Iggy error code and an empty body; a Reply with
  status 0 decodes with the command's reply codec (result section where the operation
  has one, always "success"), and a poll reply's batches verify and add up to its count.

On the first violation (all of them with ``--keep-going``) it prints the seed and the input,
saves the input and the few before it as JSON under ``--out`` (``--replay`` re-sends them) and
exits 1. ``--known TEXT`` passes over failures whose signature contains TEXT.
``--inject bad-reply`` corrupts one reply before it is checked, to show the oracle notices.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import select
import shutil
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (  # noqa: E402
    Closed,
    IggyConn,
    Server,
    add_fuzz_arguments,
    log_problems,
    login_pat_body,
    login_register_body,
    mutate_bytes,
    read_exactly,
    run_fuzzer,
)
from headwater.codec import batch as batch_codec  # noqa: E402
from headwater.codec.errors import CodecError  # noqa: E402
from headwater.codec.headers import encode_headers, encode_options_block  # noqa: E402
from headwater.codec.iggy import framing, version  # noqa: E402
from headwater.codec.iggy.codes import (  # noqa: E402
    Command,
    ConsumerKind,
    EvictionReason,
    IggyErrorCode,
    OptionsScope,
    PartitioningKind,
    PollingKind,
)
from headwater.codec.iggy.commands import COMMANDS  # noqa: E402
from headwater.codec.iggy.commands import groups as wg  # noqa: E402
from headwater.codec.iggy.commands import messages as wm  # noqa: E402
from headwater.codec.iggy.commands import offsets as wo  # noqa: E402
from headwater.codec.iggy.commands import partitions as wp  # noqa: E402
from headwater.codec.iggy.commands import segments as wseg  # noqa: E402
from headwater.codec.iggy.commands import streams as ws  # noqa: E402
from headwater.codec.iggy.commands import system as wsys  # noqa: E402
from headwater.codec.iggy.commands import tokens as wt  # noqa: E402
from headwater.codec.iggy.commands import topics as wtop  # noqa: E402
from headwater.codec.iggy.commands import users as wu  # noqa: E402
from headwater.codec.iggy.primitives import (  # noqa: E402
    Consumer,
    GlobalPermissions,
    Partitioning,
    Permissions,
    PollingStrategy,
    StreamPermissions,
    TopicPermissions,
)

HEADER = framing.HEADER_SIZE
MAX_FRAME = framing.DEFAULT_MAX_FRAME_SIZE
REPLY_TIMEOUT_S = 10.0
ERROR_CODES = frozenset(int(c) for c in IggyErrorCode)
EVICTION_REASONS = frozenset(int(r) for r in EvictionReason)
_U32 = struct.Struct("<I")

FUZZ_USER, FUZZ_PASSWORD = "fuzzer", "fuzzer-pw"
VICTIM_USER, VICTIM_PASSWORD = "fz-victim", "victim-pw"
KEEP_STREAMS = {"fuzz": {"t": 2}, "fz-scratch": {"x": 2}, "health": {"h": 1}}
KEEP_USERS = {"iggy", FUZZ_USER, VICTIM_USER}
ALL_PERMISSIONS = Permissions(GlobalPermissions(*([True] * 10)))


# --------------------------------------------------------------------------- seeds


def _batch(n: int, tag: bytes) -> bytes:
    now = int(time.time() * 1_000_000)
    return batch_codec.build_batch([
        batch_codec.Message(tag + b"-%d" % i, id=i + 1, origin_timestamp=now + i,
                            user_headers=encode_headers({"k": "v", "n": i}) if i % 2 else b"")
        for i in range(n)])


def seeds() -> list[tuple[str, int, bytes]]:
    """(name, command code, body) of a valid request for every command, and then some."""
    S, T = "fuzz", "t"
    single, numeric, group = (Consumer(ConsumerKind.CONSUMER, "fz-c"), Consumer(ConsumerKind.CONSUMER, 7),
                              Consumer(ConsumerKind.CONSUMER_GROUP, "g"))
    perms = Permissions(GlobalPermissions(read_streams=True, poll_messages=True),
                        (StreamPermissions(1, read_stream=True, topics=(TopicPermissions(1, send_messages=True),)),))
    topic_options = encode_options_block([("segment_size", 12, struct.pack("<Q", 1 << 20)),
                                          ("compression_algorithm", 2, b"gzip"),
                                          ("message_expiry", 12, struct.pack("<Q", 3_600_000_000))])
    out = [
        ("ping", 1, b""),
        ("get_stats", 10, b""),
        ("get_snapshot", 11, wsys.encode_get_snapshot(wsys.GetSnapshot(1, (1, 2)))),
        ("get_cluster_metadata", 12, b""),
        ("get_me", 20, b""),
        ("get_client", 21, wsys.encode_get_client(wsys.GetClient(1))),
        ("get_clients", 22, b""),
        ("get_user", 31, wu.encode_get_user(wu.GetUser(VICTIM_USER))),
        ("get_user numeric", 31, wu.encode_get_user(wu.GetUser(0))),
        ("get_users", 32, b""),
        ("create_user", 33, wu.encode_create_user(wu.CreateUser("fz-new", "new-pw-1", 1, perms))),
        ("delete_user", 34, wu.encode_delete_user(wu.DeleteUser("fz-new"))),
        ("update_user", 35, wu.encode_update_user(wu.UpdateUser(VICTIM_USER, VICTIM_USER, 1))),
        ("update_permissions", 36, wu.encode_update_permissions(wu.UpdatePermissions(VICTIM_USER, perms))),
        ("change_password", 37, wu.encode_change_password(wu.ChangePassword(VICTIM_USER, VICTIM_PASSWORD,
                                                                            VICTIM_PASSWORD))),
        ("login_user (legacy)", 38, wu.encode_login_user(wu.LoginUser(FUZZ_USER, FUZZ_PASSWORD))),
        ("logout", 39, b""),
        ("get_personal_access_tokens", 41, b""),
        ("create_personal_access_token", 42, wt.encode_create_personal_access_token(
            wt.CreatePersonalAccessToken("fz-pat", 3_600_000_000))),
        ("delete_personal_access_token", 43, wt.encode_delete_personal_access_token(
            wt.DeletePersonalAccessToken("fz-pat"))),
        ("login_with_pat (legacy)", 44, wt.encode_login_with_personal_access_token(
            wt.LoginWithPersonalAccessToken("x" * 43))),
        ("flush_unsaved_buffer", 102, wm.encode_flush_unsaved_buffer(wm.FlushUnsavedBuffer(S, T, 0, True))),
        ("get_stream", 200, ws.encode_get_stream(ws.GetStream(S))),
        ("get_stream numeric", 200, ws.encode_get_stream(ws.GetStream(1))),
        ("get_streams", 201, b""),
        ("create_stream", 202, ws.encode_create_stream(ws.CreateStream("fz-s"))),
        ("delete_stream", 203, ws.encode_delete_stream(ws.DeleteStream("fz-s"))),
        ("update_stream", 204, ws.encode_update_stream(ws.UpdateStream("fz-scratch", "fz-scratch"))),
        ("purge_stream", 205, ws.encode_purge_stream(ws.PurgeStream("fz-scratch"))),
        ("get_topic", 300, wtop.encode_get_topic(wtop.GetTopic(S, T))),
        ("get_topics", 301, wtop.encode_get_topics(wtop.GetTopics(S))),
        ("create_topic", 302, wtop.encode_create_topic(wtop.CreateTopic(S, 2, "fz-t", topic_options))),
        ("create_topic plain", 302, wtop.encode_create_topic(wtop.CreateTopic("fz-scratch", 1, "fz-t2"))),
        ("delete_topic", 303, wtop.encode_delete_topic(wtop.DeleteTopic(S, "fz-t"))),
        ("update_topic", 304, wtop.encode_update_topic(wtop.UpdateTopic(
            "fz-scratch", "x", "x", encode_options_block([("compression_algorithm", 2, b"none")])))),
        ("purge_topic", 305, wtop.encode_purge_topic(wtop.PurgeTopic("fz-scratch", "x"))),
        ("create_partitions", 402, wp.encode_create_partitions(wp.CreatePartitions("fz-scratch", "x", 2))),
        ("delete_partitions", 403, wp.encode_delete_partitions(wp.DeletePartitions("fz-scratch", "x", 1))),
        ("delete_segments", 503, wseg.encode_delete_segments(wseg.DeleteSegments("fz-scratch", "x", 0, 1))),
        ("get_consumer_group", 600, wg.encode_get_consumer_group(wg.GetConsumerGroup(S, T, "g"))),
        ("get_consumer_groups", 601, wg.encode_get_consumer_groups(wg.GetConsumerGroups(S, T))),
        ("create_consumer_group", 602, wg.encode_create_consumer_group(wg.CreateConsumerGroup(S, T, "fz-g"))),
        ("delete_consumer_group", 603, wg.encode_delete_consumer_group(wg.DeleteConsumerGroup(S, T, "fz-g"))),
        ("join_consumer_group", 604, wg.encode_join_consumer_group(wg.JoinConsumerGroup(S, T, "g"))),
        ("leave_consumer_group", 605, wg.encode_leave_consumer_group(wg.LeaveConsumerGroup(S, T, "g"))),
        ("sync_consumer_group", 606, wg.encode_sync_consumer_group(wg.SyncConsumerGroup(S, T, "g"))),
        ("unknown code 999", 999, b"\x01\x02"),
    ]
    for scope in OptionsScope:
        out.append((f"describe_options {scope.name.lower()}", 13, wsys.encode_describe_options(wsys.DescribeOptions(scope))))
    for kind in PollingKind:
        value = {PollingKind.OFFSET: 1, PollingKind.TIMESTAMP: int(time.time() * 1e6) - 10_000_000}.get(kind, 0)
        for consumer, partition in ((single, 0), (numeric, 1), (group, None)):
            out.append((f"poll {kind.name.lower()} {consumer.kind.name.lower()}", 100, wm.encode_poll_messages(
                wm.PollMessages(consumer, S, T, partition, PollingStrategy(kind, value), 10, kind == PollingKind.NEXT))))
    for partitioning in (Partitioning(PartitioningKind.BALANCED), Partitioning(PartitioningKind.PARTITION_ID, 1),
                         Partitioning(PartitioningKind.MESSAGES_KEY, key=b"fz-key")):
        for n in (1, 3):
            batch = _batch(n, b"fz")
            out.append((f"send {partitioning.kind.name.lower()} x{n}", 101, wm.encode_send_messages(
                wm.SendMessages(S, T, partitioning, n, memoryview(batch)))))
    for consumer, partition in ((single, 0), (group, 1)):
        who = consumer.kind.name.lower()
        out.append((f"get_consumer_offset {who}", 120, wo.encode_get_consumer_offset(
            wo.GetConsumerOffset(consumer, S, T, partition))))
        out.append((f"store_consumer_offset {who}", 121, wo.encode_store_consumer_offset(
            wo.StoreConsumerOffset(consumer, S, T, partition, 0))))
        out.append((f"delete_consumer_offset {who}", 122, wo.encode_delete_consumer_offset(
            wo.DeleteConsumerOffset(consumer, S, T, partition))))
    missing = {int(c) for c in Command} - {code for _, code, _ in out} - {40, 45}
    assert not missing, f"no seed for command codes {sorted(missing)}"
    return out


def register_seeds(token: str) -> list[tuple[str, int, bytes]]:
    return [("login_register_with_pat", 45, login_pat_body(token)),
            ("login_register", 40, login_register_body(FUZZ_USER, FUZZ_PASSWORD))]


# --------------------------------------------------------------------------- mutation

INTERESTING = [0, 1, 2, 3, 4, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFF, 0x10000, 0x7FFFFFFF,
               0x80000000, 0xFFFFFFFE, 0xFFFFFFFF, 1 << 32, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]


def mutate(rng: random.Random, frame: bytes, donors: list[bytes]) -> tuple[bytes, list[str]]:
    """Break a frame (edits past the 256-byte header, or in it); returns the bytes and what was done.
    Most of the time the ``size`` field is fixed up so the frame stays framed."""
    b, ops = mutate_bytes(
        rng, frame, donors, header_lo=0, body_lo=HEADER, endian="<", widths=(1, 2, 4, 4, 8),
        interesting=INTERESTING, extra_ints=lambda n, p: (n - p, n - p + 1, n),
    )
    if len(b) >= framing.SIZE_OFFSET + 4 and rng.random() < 0.85:
        struct.pack_into("<I", b, framing.SIZE_OFFSET, len(b))
        ops.append("size fixed")
    return bytes(b), ops


# --------------------------------------------------------------------------- the oracle


def expected_answers(data: bytes) -> tuple[list[tuple[bytes, str]], str]:
    """What the server must answer for a byte stream: a list of (frame header, "frame" | "bad size" |
    "bad command") and how the stream ends ("open", "incomplete" or "fatal")."""
    out: list[tuple[bytes, str]] = []
    pos = 0
    while True:
        left = len(data) - pos
        if left == 0:
            return out, "open"
        if left < HEADER:
            return out, "incomplete"
        head = data[pos:pos + HEADER]
        size = _U32.unpack_from(head, framing.SIZE_OFFSET)[0]
        if size < HEADER or size > MAX_FRAME:
            out.append((head, "bad size"))
            return out, "fatal"
        if head[framing.COMMAND_OFFSET] != 5:
            out.append((head, "bad command"))
            return out, "fatal"
        if left < size:
            return out, "incomplete"
        out.append((data[pos:pos + size], "frame"))
        pos += size


def client_of(head: bytes) -> int:
    lo, hi = struct.unpack_from("<QQ", head, 128)
    return lo | (hi << 64)


def check_answer(request: bytes, what: str, head: bytes, body: bytes) -> tuple[str, str | None]:
    """("reply" | "eviction", problem or None) for one answer to one request frame."""
    command = head[framing.COMMAND_OFFSET]
    size = _U32.unpack_from(head, framing.SIZE_OFFSET)[0]
    if command == 13:
        if size != HEADER:
            return "eviction", f"eviction with size {size}"
        ev = framing.decode_eviction(head)
        if ev.reason not in EVICTION_REASONS:
            return "eviction", f"eviction with unknown reason {ev.reason}"
        if ev.client != client_of(request):
            return "eviction", f"eviction client {ev.client:#x}, request client {client_of(request):#x}"
        if (ev.reason == EvictionReason.INCOMPATIBLE_PROTOCOL) != bool(ev.server_protocol_version):
            return "eviction", f"eviction reason {ev.reason} with protocol window {ev.server_protocol_version}"
        if what == "bad size" and ev.reason != EvictionReason.INVALID_REQUEST_BODY_SIZE:
            return "eviction", f"bad frame size evicted with reason {ev.reason}, expected 6"
        return "eviction", None
    if command != 8:
        return "garbage", f"answer header command byte {command} (neither Reply 8 nor Eviction 13)"
    if what != "frame":
        return "reply", f"a Reply to a frame with a {what} (an Eviction is due)"
    try:
        req = framing.decode_request_header(request)
    except CodecError as e:
        return "reply", f"a Reply to a frame whose header does not decode ({e})"
    rh = framing.decode_reply_header(head)
    echoes = {"client": (rh.client, req.client), "request": (rh.request, req.request),
              "operation": (rh.operation, int(req.operation)), "timestamp": (rh.timestamp, req.timestamp),
              "request_checksum": (rh.request_checksum, req.request_checksum)}
    wrong = {k: v for k, v in echoes.items() if v[0] != v[1]}
    if wrong:
        return "reply", f"reply does not echo the request: {wrong}"
    if rh.status:
        if rh.status not in ERROR_CODES:
            return "reply", f"status {rh.status} is not an Iggy error code"
        if body:
            return "reply", f"status {rh.status} with a {len(body)}-byte body"
        return "reply", None
    return "reply", check_success(int(req.operation), req.command_code, body)


def check_success(operation: int, code: int, body: bytes) -> str | None:
    try:
        spec = COMMANDS[Command(code)]
    except (ValueError, KeyError):
        return f"status 0 for unknown command code {code}"
    payload: bytes | memoryview = body
    try:
        if framing.is_result_framed(operation):
            result, payload = framing.split_result(body)
            if result:
                return f"result section carries rejection {result} (documented: always success)"
        if spec.reply_decode is None:
            if len(payload):
                return f"{spec.command.name}: {len(payload)}-byte payload where none is due"
            return None
        if not len(payload) and spec.empty_reply:
            return None
        value = spec.reply_decode(payload)
        if spec.command == Command.POLL_MESSAGES:
            prefix, batches = value
            frames = 0
            for b in batch_codec.split_batches(batches):
                frames += batch_codec.verify(b, check_offset_deltas=False).message_count
            if frames != prefix.messages_count:
                return f"poll reply says {prefix.messages_count} messages, its batches hold {frames}"
    except (CodecError, ValueError, struct.error) as e:
        return f"{spec.command.name} reply does not decode: {type(e).__name__}: {e}"
    return None


# --------------------------------------------------------------------------- connections and the run


class Fuzzer:
    def __init__(self, server: Server, rng: random.Random, inject: str | None = None):
        self.server = server
        self.rng = rng  # drives the inputs only, so a seed replays the same sequence
        self.aux = random.Random(rng.random())  # health payloads, client ids of the fixtures
        self.inject = inject
        self.seeds = seeds()
        self.donors: list[bytes] = []
        self.session: IggyConn | None = None
        self.fuzz_token = ""
        self.health_token = ""
        self.control: IggyConn | None = None
        self.health: IggyConn | None = None
        self.health_n = 0
        self.stats: dict[str, int] = {}
        self.statuses: dict[int, int] = {}

    def count(self, name: str) -> None:
        self.stats[name] = self.stats.get(name, 0) + 1

    def client_id(self, rng: random.Random | None = None) -> int:
        return (rng or self.aux).getrandbits(127) | 1

    # ---- fixtures
    def setup(self) -> None:
        self.control = IggyConn(self.server.iggy_address, timeout=30, client=self.client_id())
        self.control.login()
        self.ensure_fixtures()
        self.health_token = self.create_pat(self.control, "health-pat")
        self.repair_fuzz_user()
        self.donors = [body for _, _, body in self.seeds if body]

    def create_pat(self, conn: IggyConn, name: str) -> str:
        conn.ok(43, wt.encode_delete_personal_access_token(wt.DeletePersonalAccessToken(name)), allow=tuple(ERROR_CODES))
        reply = conn.ok(42, wt.encode_create_personal_access_token(wt.CreatePersonalAccessToken(name, 0)))
        return wt.decode_raw_personal_access_token(framing.split_result(reply)[1]).token

    def repair_fuzz_user(self) -> None:
        """(Re)create the fuzzing user with every permission and a fresh token."""
        c = self.control
        c.ok(34, wu.encode_delete_user(wu.DeleteUser(FUZZ_USER)), allow=tuple(ERROR_CODES))
        c.ok(33, wu.encode_create_user(wu.CreateUser(FUZZ_USER, FUZZ_PASSWORD, 1, ALL_PERMISSIONS)))
        with IggyConn(self.server.iggy_address, timeout=30, client=self.client_id()) as u:
            u.login(FUZZ_USER, FUZZ_PASSWORD)
            self.fuzz_token = self.create_pat(u, "fz-main")
        self.count("fuzz user repaired")

    def ensure_fixtures(self) -> None:
        """Put back what inputs may have deleted, and delete what they created (bounded state)."""
        c = self.control
        streams = {s.name: s for s in ws.decode_streams(c.ok(201))}
        for name, s in streams.items():
            if name not in KEEP_STREAMS:
                c.ok(203, ws.encode_delete_stream(ws.DeleteStream(s.id)), allow=tuple(ERROR_CODES))
        for name, topics in KEEP_STREAMS.items():
            if name not in streams:
                c.ok(202, ws.encode_create_stream(ws.CreateStream(name)), allow=(1012,))
            details = ws.decode_stream_details(c.ok(200, ws.encode_get_stream(ws.GetStream(name))))
            have = {t.name: t for t in details.topics}
            for tname, t in have.items():
                if tname not in topics:
                    c.ok(303, wtop.encode_delete_topic(wtop.DeleteTopic(name, t.id)), allow=tuple(ERROR_CODES))
            for tname, partitions in topics.items():
                if tname not in have:
                    c.ok(302, wtop.encode_create_topic(wtop.CreateTopic(name, partitions, tname)), allow=(2013,))
        c.ok(602, wg.encode_create_consumer_group(wg.CreateConsumerGroup("fuzz", "t", "g")), allow=tuple(ERROR_CODES))
        users = {u.username for u in wu.decode_users(c.ok(32))}
        for name in users - KEEP_USERS:
            c.ok(34, wu.encode_delete_user(wu.DeleteUser(name)), allow=tuple(ERROR_CODES))
        if VICTIM_USER not in users:
            c.ok(33, wu.encode_create_user(wu.CreateUser(VICTIM_USER, VICTIM_PASSWORD, 1)), allow=(46,))
        else:  # inputs may have changed its password or status: start it over now and then
            c.ok(35, wu.encode_update_user(wu.UpdateUser(VICTIM_USER, None, 1)), allow=tuple(ERROR_CODES))

    def session_conn(self) -> IggyConn:
        if self.session is None:
            conn = IggyConn(self.server.iggy_address, timeout=REPLY_TIMEOUT_S, client=self.client_id(self.rng))
            try:
                conn.login_pat(self.fuzz_token)
            except (RuntimeError, Closed):
                conn.close()
                self.repair_fuzz_user()
                conn = IggyConn(self.server.iggy_address, timeout=REPLY_TIMEOUT_S, client=self.client_id())
                conn.login_pat(self.fuzz_token)
            self.session = conn
            self.count("session logins")
        return self.session

    def forget_connections(self) -> None:
        """After a failure: start over with fresh connections."""
        if self.session is not None:
            self.session.close()
            self.session = None

    def summary(self) -> list[str]:
        top = sorted(self.statuses.items(), key=lambda kv: -kv[1])[:12]
        return ["reply statuses " + ", ".join(f"{code}:{n}" for code, n in top)]

    # ---- one input
    def make_case(self) -> tuple[dict, IggyConn]:
        rng = self.rng
        r = rng.random()
        mode = "session" if r < 0.65 else ("anonymous" if r < 0.85 else "register")
        conn = self.session_conn() if mode == "session" else IggyConn(
            self.server.iggy_address, timeout=REPLY_TIMEOUT_S, client=self.client_id(self.rng))
        case = {"mode": mode, "client": conn.client, "session": conn.session, "frames": []}
        parts = []
        kind = rng.random()
        if kind < 0.05:
            parts.append(rng.randbytes(rng.choice((rng.randint(1, 300), rng.randint(256, 1200)))))
            case["frames"].append({"seed": "random bytes"})
        elif kind < 0.12:
            code = rng.choice([c for _, c, _ in self.seeds] + [rng.getrandbits(32), rng.randrange(1000)])
            body = rng.randbytes(rng.randint(0, 400))
            parts.append(conn.frame(code, body))
            case["frames"].append({"seed": f"random body for code {code}"})
        else:
            for _ in range(1 if rng.random() < 0.85 else rng.randint(2, 3)):
                if mode == "register" and not parts:
                    name, code, body = rng.choice(register_seeds(self.fuzz_token)) if rng.random() < 0.25 \
                        else register_seeds(self.fuzz_token)[0]
                else:
                    name, code, body = rng.choice(self.seeds)
                frame = conn.frame(code, body)
                ops = []
                if rng.random() < 0.9:
                    frame, ops = mutate(rng, frame, self.donors)
                parts.append(frame)
                case["frames"].append({"seed": name, "mutations": ops})
        data = b"".join(parts)
        case["data"] = data.hex()
        return case, conn

    def run_case(self, case: dict, conn: IggyConn) -> list[str]:
        """Send the input and check every answer; returns the problems found."""
        data = bytes.fromhex(case["data"])
        expected, ending = expected_answers(data)
        problems: list[str] = []
        answers: list[str] = []
        case["answers"] = answers
        try:
            conn.send(data)
        except OSError as e:
            problems.append(f"send failed: {e}")
            return problems
        evicted = False
        for i, (request, what) in enumerate(expected):
            try:
                head = read_exactly(conn.sock, HEADER)
                size = _U32.unpack_from(head, framing.SIZE_OFFSET)[0]
                body = read_exactly(conn.sock, size - HEADER) if head[60] == 8 and size > HEADER else b""
            except socket.timeout:
                problems.append(f"no answer to frame {i} ({what}) within {REPLY_TIMEOUT_S} s")
                break
            except Closed as e:
                problems.append(f"connection closed without an answer to frame {i} ({what}): {e}")
                break
            if self.inject == "bad-reply" and not self.stats.get("injected"):
                head = head[:60] + b"\x07" + head[61:]
                self.count("injected")
            kind, problem = check_answer(request, what, head, body)
            if kind == "reply":
                status = _U32.unpack_from(head, framing.STATUS_OFFSET)[0]
                answers.append(f"reply status {status} ({len(body)} B)")
                self.statuses[status] = self.statuses.get(status, 0) + 1
            else:
                answers.append(f"{kind} {head[255] if kind == 'eviction' else ''}".strip())
            if problem:
                problems.append(f"frame {i}: {problem}")
                break
            self.count(f"answers: {kind}")
            if kind == "eviction":
                evicted = True
                break
            self.track_session(conn, request, head, body)
        if problems:
            return problems
        if evicted or ending == "fatal":
            if not evicted:
                problems.append(f"no eviction for a frame with a {expected[-1][1]}")
            elif not closed_soon(conn.sock):
                problems.append("connection still open after an eviction")
            self.retire(conn)
            return problems
        extra = unsolicited(conn.sock)
        if extra:
            problems.append(f"{len(extra)} unsolicited bytes after the last answer: {extra[:64].hex()}")
        if ending == "incomplete" or conn is not self.session:
            self.retire(conn)
        return problems

    def track_session(self, conn: IggyConn, request: bytes, head: bytes, body: bytes) -> None:
        """Follow what a frame did to its connection's login state (logout, a second register)."""
        if _U32.unpack_from(head, framing.STATUS_OFFSET)[0]:
            return
        operation = request[176]
        if operation == 3 and conn is self.session:  # logged out: not a session any more
            self.session = None
        elif operation == 1:
            conn.session = version.decode_login_reply(framing.split_result(body)[1]).session
            conn.client = client_of(request)

    def retire(self, conn: IggyConn) -> None:
        if conn is self.session:
            self.session = None
        conn.close()

    # ---- the healthy client
    def healthy(self) -> str | None:
        self.health_n += 1
        payload = b"alive-%d-" % self.health_n + self.aux.randbytes(8)
        try:
            if self.health is None:
                self.health = IggyConn(self.server.iggy_address, timeout=REPLY_TIMEOUT_S, client=self.client_id())
                self.health.login_pat(self.health_token)
            h = self.health
            if h.call(1)[:2] != ("reply", 0):
                return "ping failed"
            batch = batch_codec.build_batch([batch_codec.Message(payload, id=self.health_n,
                                                                 origin_timestamp=int(time.time() * 1e6))])
            body = wm.encode_send_messages(wm.SendMessages("health", "h", Partitioning(PartitioningKind.PARTITION_ID, 0),
                                                           1, memoryview(batch)))
            kind, status, reply = h.call(101, body)
            if kind == "reply" and status in (1009, 1010, 2010, 2011, 3007):  # an input deleted it: put it back
                self.ensure_fixtures()
                kind, status, reply = h.call(101, body)
            if (kind, status) != ("reply", 0):
                return f"send: {kind} {status}"
            offset = wm.decode_send_messages_reply(reply)[0].base_offset
            kind, status, reply = h.call(100, wm.encode_poll_messages(wm.PollMessages(
                Consumer(ConsumerKind.CONSUMER, "health"), "health", "h", 0,
                PollingStrategy(PollingKind.OFFSET, offset), 1, False)))
            if (kind, status) != ("reply", 0):
                return f"poll: {kind} {status}"
            _, batches = wm.decode_poll_reply(reply)
            got = [bytes(f.payload) for b in batch_codec.split_batches(batches) for f in batch_codec.iter_frames(b)]
            if got[:1] != [payload]:
                return f"polled {got[:1]!r} at offset {offset}, sent {payload!r}"
            if self.health_n % 5 == 0:
                with IggyConn(self.server.iggy_address, timeout=REPLY_TIMEOUT_S, client=self.client_id()) as fresh:
                    fresh.login_pat(self.health_token)
                    if fresh.call(201)[:2] != ("reply", 0):
                        return "GetStreams on a fresh connection failed"
        except (OSError, Closed, RuntimeError, CodecError, IndexError) as e:
            if self.health is not None:
                self.health.close()
                self.health = None
            return f"{type(e).__name__}: {e}"
        self.count("health checks")
        return None


def closed_soon(sock: socket.socket, wait_s: float = 3.0) -> bool:
    sock.settimeout(wait_s)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
    except OSError:
        return True


def unsolicited(sock: socket.socket) -> bytes:
    """Bytes already waiting on the socket (none are due)."""
    ready, _, _ = select.select([sock], [], [], 0)
    if not ready:
        return b""
    try:
        return sock.recv(4096, socket.MSG_DONTWAIT)
    except (BlockingIOError, OSError):
        return b""


# --------------------------------------------------------------------------- main


IMPLEMENTATION_ENV = {"compiled": {}, "python": {"HEADWATER_NO_EXTENSIONS": "1"}}
"""The server environment for each ``--implementation`` of the batch codec's frame walks."""


def start_server(base: Path, implementation: str) -> Server:
    """A server whose frame walks are ``implementation``; raises RuntimeError when its startup
    log reports another one (e.g. "compiled" asked for but the extension is not built)."""
    server = Server(base / "data", log_path=base / "server.log", env=IMPLEMENTATION_ENV[implementation])
    server.start()
    reported = re.search(r"hot_loops=\"?(\w+)", server.log_text())
    if reported is None or not reported.group(1).startswith(implementation):
        server.stop()
        found = reported.group(1) if reported else "nothing"
        raise RuntimeError(f"asked for the {implementation} frame walks, the server reports {found}")
    return server


def run(args) -> int:
    base = Path(tempfile.mkdtemp(prefix="hw-fuzz-iggy-"))
    print(f"fuzz_iggy: seed={args.seed} seconds={args.seconds} implementation={args.implementation} "
          f"server log={base / 'server.log'}", flush=True)
    server = start_server(base, args.implementation)
    return run_fuzzer("fuzz_iggy", Fuzzer(server, random.Random(args.seed), args.inject), server, args, base=base)


def replay(path: str, implementation: str = "compiled") -> int:
    """Send a saved input to a fresh server set up as for fuzzing (the inputs saved before it
    first, in order) and show what came back for it."""
    saved = json.loads(Path(path).read_text())
    base = Path(tempfile.mkdtemp(prefix="hw-fuzz-replay-"))
    server = start_server(base, implementation)
    try:
        fz = Fuzzer(server, random.Random(0))
        fz.setup()
        problems: list[str] = []
        for case in sorted(saved.get("previous", []), key=lambda c: c["case"]) + [saved["case"]]:
            conn = IggyConn(server.iggy_address, timeout=REPLY_TIMEOUT_S, client=case["client"])
            data = bytearray(bytes.fromhex(case["data"]))
            if case["mode"] == "session":
                conn.login_pat(fz.fuzz_token)
                fz.session = conn
                restamp(data, case["session"], conn.session)
            case = dict(case, data=bytes(data).hex())
            problems = fz.run_case(case, conn)
            fz.forget_connections()
            print(f"input {case['case']}: answers {case.get('answers')}; problems: {'; '.join(problems) or 'none'}")
        time.sleep(0.2)
        print("server alive:", server.alive())
        bad = log_problems(server.log_text())
        print("server log problems:" + ("\n" + "\n".join(bad) if bad else " none"))
        failed = bool(problems or bad or not server.alive())
        if not failed:
            shutil.rmtree(base, ignore_errors=True)
        return int(failed)
    finally:
        if server.alive():
            server.stop()
        if base.exists():
            print(f"server log: {server.log_path}")


def restamp(data: bytearray, old_session: int, new_session: int) -> None:
    """Put this run's session epoch where a recorded frame carried the recorded run's."""
    pos = 0
    while pos + HEADER <= len(data):
        if struct.unpack_from("<Q", data, pos + 184)[0] == old_session:
            struct.pack_into("<Q", data, pos + 184, new_session)
        size = _U32.unpack_from(data, pos + framing.SIZE_OFFSET)[0]
        if size < HEADER:
            break
        pos += size


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_fuzz_arguments(ap)
    ap.add_argument("--implementation", choices=sorted(IMPLEMENTATION_ENV), default="compiled",
                    help="the server's batch frame walks: compiled (the default, needs the extension built) "
                         "or python (HEADWATER_NO_EXTENSIONS=1)")
    args = ap.parse_args(argv)
    # the oracle checks poll replies with the pure-Python reference walks, whatever the server runs
    batch_codec.use_implementation("python")
    if args.replay:
        return replay(args.replay, args.implementation)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(2**32)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
