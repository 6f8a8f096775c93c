#!/usr/bin/env python3
"""Fuzz the Kafka wire protocol of a real ``headwater serve``, with a healthy client alongside.

    .venv/bin/python tools/fuzz_kafka.py [--seconds 60] [--seed N] [--out DIR]
    .venv/bin/python tools/fuzz_kafka.py --replay FILE      # re-send one saved input

Inputs start from a valid request for every (API, version) the server advertises in
ApiVersions: kio entities filled with working values (the fuzz topic, a group, a valid
RecordBatch v2...), or hand-encoded bodies where kio has no schema (Produce v0-2). They are
then broken: bit flips, bytes and big-endian integers set to edge values, truncation,
extension, insertion, deletion, splices with other seeds, the size prefix left stale or
fixed up; plus pure random bytes and random bodies under a valid header. Each goes out on
a reused connection or a fresh one; now and then 2-3 requests are pipelined in one write.
Between inputs a healthy client must Produce a record (acks=-1) and Fetch it back
byte-identical, and a fresh connection must answer ApiVersions and Metadata.

The oracle, checked after every input, predicts what the server must do with each request
from the same framing and kio decoding the broker uses:

- the server process is running and its log has no traceback or error-level line;
- a request whose size prefix is below 8 or above the cap, whose API or version is not
  advertised (ApiVersions excepted), or that does not decode gets no response and its
  connection is closed; nothing unasked arrives;
- every other request gets exactly one response, in order, carrying its correlation id,
  that decodes completely with kio's response class of its (API, version) (header v1 for
  flexible versions except ApiVersions), except Produce with acks=0, which gets none (the
  connection may close after it: Kafka closes it when such a produce fails); an
  ApiVersions of an unknown version gets the v0 answer with UNSUPPORTED_VERSION (35);
  Produce v0-2 gets the documented UNSUPPORTED_VERSION response; after a SaslHandshake or
  SaslAuthenticate response the connection may close (Kafka closes after a refused SASL
  step), so nothing more is read from it;
- a response is due within 10 s (Fetch, JoinGroup and SyncGroup may park: after 0.3 s
  their connection is given up, not counted against the server).

On the first violation (all of them with ``--keep-going``) it prints the seed and the input,
saves the input and the few before it as JSON under ``--out`` (``--replay`` re-sends them) and
exits 1. ``--known TEXT`` passes over failures whose signature contains TEXT;
``--known kio-abort`` withholds inputs that make kio's native reader abort.
``--inject bad-reply`` corrupts one response before it is checked, to show the oracle notices.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import re
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import typing
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (  # noqa: E402
    Closed,
    KafkaConn,
    Server,
    add_fuzz_arguments,
    decode_kafka_response,
    kafka_build,
    log_problems,
    mutate_bytes,
    read_exactly,
    run_fuzzer,
)
from headwater.codec.kafka import messages as kmsg  # noqa: E402
from headwater.codec.kafka.framing import decode_request_header, peek_header  # noqa: E402
from headwater.codec.kafka.record_batch import Record, RecordBatchView, build_record_batch, split_batches  # noqa: E402

MAX_REQUEST = 100 * 1024 * 1024
REPLY_TIMEOUT_S = 10.0
PARK_TIMEOUT_S = 0.3
PARKING_APIS = {1, 11, 14}  # Fetch (max_wait), JoinGroup, SyncGroup
SASL_APIS = {17, 36}  # SaslHandshake, SaslAuthenticate: after a refused step Kafka answers, then closes
FUZZ_TOPIC, SCRATCH_TOPIC, NEW_TOPIC, HEALTH_TOPIC = "fuzz-k", "fz-scratch", "fz-new", "health-k"
KEEP_TOPICS = {FUZZ_TOPIC: 2, SCRATCH_TOPIC: 1, HEALTH_TOPIC: 1}
GROUP = "fz-group"
SERVER_ENV = {"HEADWATER_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
              "HEADWATER_KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS": "100"}  # abandoned members expire fast
_MISSING = object()


# --------------------------------------------------------------------------- seeds


def consumer_protocol_metadata(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, null user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def records(tag: bytes, n: int = 2) -> bytes:
    now = int(time.time() * 1000)
    return build_record_batch([Record(i, i, b"k%d" % i, tag + b"-%d" % i, [(b"h", b"v")] if i else ())
                               for i in range(n)], base_timestamp=now)


class Seeds:
    """A valid request body for (api_key, version), built from kio's classes with working values."""

    def __init__(self, topic_ids: dict[str, uuid.UUID]):
        self.topic_ids = topic_ids
        self.version = 0
        self._hints: dict[type, dict] = {}

    def topic_for(self, api: int) -> str:
        return {19: NEW_TOPIC, 20: NEW_TOPIC, 21: SCRATCH_TOPIC, 33: SCRATCH_TOPIC, 37: SCRATCH_TOPIC,
                44: SCRATCH_TOPIC}.get(api, FUZZ_TOPIC)

    def hint(self, api: int, cls: str, field: str):
        topic = self.topic_for(api)
        group = f"{GROUP}-{api}-{self.version}"  # one group per seed: abandoned members of others do not stall it
        if field == "name":
            if cls in ("AlterableConfig", "CreatableTopicConfig"):
                return "retention.ms"
            if cls == "JoinGroupRequestProtocol":
                return "range"
            return topic
        if field == "topic_id":
            return self.topic_ids.get(FUZZ_TOPIC, uuid.UUID(int=0)) if api == 1 else uuid.UUID(int=0)
        if cls == "CreatableTopic" and field == "assignments":
            return ()
        if cls == "CreatePartitionsTopic" and field == "assignments":
            return None
        return {
            "topic": topic, "topic_names": topic, "resource_name": topic, "resource_type": 2,
            "group_id": group, "groups": group, "groups_names": group, "key": group, "coordinator_keys": group,
            "key_type": 0, "member_id": "", "group_instance_id": None, "generation_id": -1,
            "generation_id_or_member_epoch": -1, "member_epoch": -1, "protocol_type": "consumer",
            "protocol_name": "range", "session_timeout": 200, "rebalance_timeout": 100,
            "metadata": consumer_protocol_metadata([FUZZ_TOPIC]), "assignment": b"", "assignments": (),
            "acks": -1, "records": records(b"fz"), "index": 0, "partition": 0, "partition_index": 0,
            "partition_indexes": 0, "max_wait": 10, "min_bytes": 1, "max_bytes": 1 << 20,
            "partition_max_bytes": 1 << 20, "fetch_offset": 0, "current_leader_epoch": -1,
            "last_fetched_epoch": -1, "log_start_offset": -1, "replica_id": -1, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "timestamp": -1, "offset": 0, "committed_offset": 0,
            "committed_leader_epoch": -1, "committed_metadata": "", "retention_time": -1, "num_partitions": 1,
            "replication_factor": 1, "count": 2, "timeout": 1000, "validate_only": False, "producer_id": -1,
            "producer_epoch": -1, "transaction_timeout": 60_000, "transactional_id": None, "endpoint_type": 1,
            "value": "3600000", "config_operation": 0, "configuration_keys": None, "states_filter": (),
            "types_filter": (), "allow_auto_topic_creation": False, "leader_epoch": -1, "broker_ids": 1,
            "forgotten_topics_data": (), "client_software_name": "hw-fuzz",
            "client_software_version": "1.0", "reason": None, "cluster_id": None, "rack_id": "",
        }.get(field, _MISSING)

    def build(self, cls: type, api: int):
        hints = self._hints.get(cls)
        if hints is None:
            hints = self._hints[cls] = typing.get_type_hints(cls)
        values = {}
        for f in dataclasses.fields(cls):
            tp = hints[f.name]
            args = typing.get_args(tp)
            is_tuple = typing.get_origin(tp) is tuple or any(typing.get_origin(a) is tuple for a in args)
            inner = None
            for a in (tp, *args):
                for b in (a, *typing.get_args(a)):
                    if dataclasses.is_dataclass(b):
                        inner = b
            value = self.hint(api, cls.__name__, f.name)
            if inner is not None and value is not _MISSING and not isinstance(value, tuple) and value is not None:
                value = _MISSING  # a name hint does not fit a field of entities
            if value is not _MISSING:
                if is_tuple and inner is None and value is not None and not isinstance(value, tuple):
                    value = (value,)
                values[f.name] = value
            elif inner is not None and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                entity = self.build(inner, api)
                values[f.name] = (entity,) if is_tuple else entity
        return kmsg.build(cls, **values)

    def body(self, api: int, version: int) -> bytes:
        if api == 0 and version < 3:
            return legacy_produce_body(FUZZ_TOPIC, records(b"legacy"))
        self.version = version
        entity = self.build(kmsg.request_class(api, version), api)
        return kmsg.encode(entity)


def legacy_produce_body(topic: str, data: bytes, acks: int = -1) -> bytes:
    """Produce v0-2: acks int16 | timeout int32 | [name string | [partition int32 | records bytes]]."""
    return (struct.pack(">hii", acks, 1000, 1) + struct.pack(">h", len(topic)) + topic.encode()
            + struct.pack(">iii", 1, 0, len(data)) + data)


# --------------------------------------------------------------------------- mutation (big-endian)

INTERESTING = [0, 1, 2, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
               (1 << 63) - 1, 1 << 63, (1 << 64) - 1]


def mutate(rng: random.Random, frame: bytes, donors: list[bytes]) -> tuple[bytes, list[str]]:
    """Break a size-prefixed request (edits past the 14-byte header, or in it after the size);
    returns the bytes and what was done. Most of the time the size prefix is fixed up."""
    b, ops = mutate_bytes(
        rng, frame, donors, header_lo=4, body_lo=14, endian=">", widths=(1, 2, 2, 4, 4, 8),
        interesting=INTERESTING, extra_ints=lambda n, p: (n - p, n - p - 4), header_bias=0.15,
    )
    if len(b) >= 4 and rng.random() < 0.85:
        struct.pack_into(">i", b, 0, len(b) - 4)
        ops.append("size fixed")
    return bytes(b), ops


# --------------------------------------------------------------------------- the oracle


def legacy_produce_acks(body: bytes | memoryview) -> int:
    """acks of a Produce v0-2 body, or ValueError when the body does not decode (same rules
    as the broker's hand-written reader: every length in range, nothing left over)."""
    mv = memoryview(body)
    pos = 0

    def take(n: int) -> memoryview:
        nonlocal pos
        if n < 0 or pos + n > len(mv):
            raise ValueError("runs past the end")
        out = mv[pos:pos + n]
        pos += n
        return out

    (acks,) = struct.unpack(">h", take(2))
    take(4)
    (topics,) = struct.unpack(">i", take(4))
    if topics < 0 or topics > len(mv):
        raise ValueError("topic count")
    for _ in range(topics):
        (n,) = struct.unpack(">h", take(2))
        bytes(take(n)).decode("utf-8", "replace")
        (parts,) = struct.unpack(">i", take(4))
        if parts < 0 or parts > len(mv):
            raise ValueError("partition count")
        for _ in range(parts):
            take(4)
            (size,) = struct.unpack(">i", take(4))
            if size > 0:
                take(size)
    if pos != len(mv):
        raise ValueError("bytes after the body")
    return acks


def check_legacy_produce_response(data: bytes, version: int) -> None:
    """Produce v0-2 response: [topic: name | [partition int32 | error int16 | base_offset int64
    (| log_append_time int64 v2)]] (| throttle int32 v1+), every error UNSUPPORTED_VERSION."""
    pos = 4

    def take(fmt: str):
        nonlocal pos
        size = struct.calcsize(fmt)
        if pos + size > len(data):
            raise ValueError("response runs past its frame")
        out = struct.unpack_from(fmt, data, pos)
        pos += size
        return out

    (topics,) = take(">i")
    for _ in range(topics):
        (n,) = take(">h")
        pos += max(n, 0)
        (parts,) = take(">i")
        for _ in range(parts):
            _, error, _ = take(">ihq")
            if error != 35:
                raise ValueError(f"Produce v{version} partition error {error}, expected 35")
            if version >= 2:
                take(">q")
    if version >= 1:
        take(">i")
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} bytes after the response")


def expected_responses(data: bytes, advertised: dict[int, tuple[int, int]], decoder: "Decoder") -> tuple[list[dict], str]:
    """What the server must do with each request of a byte stream, in order.

    Each item: {"api", "version", "correlation", "answer": "response" | "none" | "close" |
    "api_versions_v0"}; the stream ends "open", "incomplete" or "closed".
    """
    out: list[dict] = []
    pos = 0
    while True:
        left = len(data) - pos
        if left == 0:
            return out, "open"
        if left < 4:
            return out, "incomplete"
        (size,) = struct.unpack_from(">i", data, pos)
        if size < 8 or size > MAX_REQUEST:
            out.append({"answer": "close", "why": f"size {size}"})
            return out, "closed"
        if left - 4 < size:
            return out, "incomplete"
        frame = data[pos + 4:pos + 4 + size]
        pos += 4 + size
        api, version, correlation = peek_header(frame)
        item = {"api": api, "version": version, "correlation": correlation, "answer": "response"}
        out.append(item)
        span = advertised.get(api)
        if span is None or not span[0] <= version <= span[1]:
            if api == 18 and span is not None:
                item["answer"] = "api_versions_v0"
                continue
            item.update(answer="close", why=f"API {api} v{version} not advertised")
            return out, "closed"
        verdict = decoder.call(f"req {api} {version}", frame)
        if verdict == "crash":
            item.update(answer="close", why="kio's reader aborted the process decoding it", crash=True)
            return out, "closed"
        if verdict.startswith("err"):
            item.update(answer="close", why=f"does not decode: {verdict[4:]}")
            return out, "closed"
        if verdict == "ok acks=0":
            item["answer"] = "none"


def decode_request(api: int, version: int, frame: bytes) -> str:
    """The broker's decoding of one request frame: "ok acks=N", "ok" or "err <why>"."""
    schema = kmsg.has_schema(api, version)
    try:
        _, at = decode_request_header(frame, schema and kmsg.is_flexible(api, version))
        if schema:
            request = kmsg.decode(kmsg.request_class(api, version), frame, at)
            if api == 0:
                return f"ok acks={request.acks}"
        elif api == 0:
            return f"ok acks={legacy_produce_acks(frame[at:])}"
    except Exception as e:  # noqa: BLE001 - FrameError, ValueError, struct.error, kio's SerialError family
        return f"err {type(e).__name__}"
    return "ok"


class Decoder:
    """kio decoding in a child process, because kio's native reader aborts the whole process
    (``memory allocation of N bytes failed``) on some lengths: the fuzzer must outlive that."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.crashes = 0

    def _start(self) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, __file__, "--decoder-worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def call(self, what: str, payload: bytes) -> str:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        message = what.encode() + b"\0" + payload
        try:
            self.proc.stdin.write(struct.pack(">I", len(message)) + message)
            self.proc.stdin.flush()
            head = self.proc.stdout.read(4)
            if len(head) < 4:
                raise BrokenPipeError("decoder worker gone")
            (n,) = struct.unpack(">I", head)
            return self.proc.stdout.read(n).decode()
        except (BrokenPipeError, OSError, struct.error):
            self.proc.wait()
            self.proc = None
            self.crashes += 1
            return "crash"

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(5)


def decoder_worker() -> int:
    """The child side of :class:`Decoder`: length-prefixed questions on stdin, answers on stdout."""
    src, dst = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = src.read(4)
        if len(head) < 4:
            return 0
        message = src.read(struct.unpack(">I", head)[0])
        what, _, payload = message.partition(b"\0")
        kind, *args = what.decode().split()
        if kind == "req":
            answer = decode_request(int(args[0]), int(args[1]), payload)
        else:
            item = {"api": int(args[0]), "version": int(args[1]), "correlation": int(args[2]), "answer": args[3]}
            answer = "ok" if (problem := response_problem(item, payload)) is None else "err " + problem
        data = answer.encode()
        dst.write(struct.pack(">I", len(data)) + data)
        dst.flush()


def check_response(item: dict, data: bytes, decoder: Decoder) -> str | None:
    """The problem with one response frame (without its size prefix), or None (decoded in the worker)."""
    verdict = decoder.call(f"res {item['api']} {item['version']} {item['correlation']} {item['answer']}", data)
    if verdict == "crash":
        return f"decoding the response to API {item['api']} v{item['version']} aborted kio's reader"
    return None if verdict == "ok" else verdict[4:]


def response_problem(item: dict, data: bytes) -> str | None:
    """The problem with one response frame (without its size prefix), or None."""
    if len(data) < 4:
        return f"response of {len(data)} bytes"
    (correlation,) = struct.unpack_from(">i", data, 0)
    if correlation != item["correlation"]:
        return f"correlation id {correlation}, expected {item['correlation']}"
    api, version = item["api"], item["version"]
    try:
        if item["answer"] == "api_versions_v0":
            _, entity = decode_kafka_response(data, 18, 0)
            if int(entity.error_code.value) != 35:
                return f"ApiVersions v{version} answered with error {entity.error_code}, expected 35"
            return None
        if api == 0 and version < 3:
            check_legacy_produce_response(data, version)
            return None
        decode_kafka_response(data, api, version)
    except Exception as e:  # noqa: BLE001 - kio's SerialError family, ValueError, struct.error
        return f"response to API {api} v{version} does not decode: {type(e).__name__}: {e}"
    return None


# --------------------------------------------------------------------------- the run


class Fuzzer:
    def __init__(self, server: Server, rng: random.Random, inject: str | None = None,
                 exclude: list[tuple[int, int, int]] = ()):
        self.server = server
        self.rng = rng  # drives the inputs only, so a seed replays the same sequence
        self.aux = random.Random(rng.random())  # health payloads
        self.inject = inject
        self.exclude = list(exclude)
        self.withhold_kio_aborts = False
        self.advertised: dict[int, tuple[int, int]] = {}
        self.seeds: list[tuple[str, int, int, bytes]] = []
        self.donors: list[bytes] = []
        self.reused: KafkaConn | None = None
        self.control: KafkaConn | None = None
        self.health: KafkaConn | None = None
        self.health_n = 0
        self.stats: dict[str, int] = {}
        self.correlation = 0
        self.decoder = Decoder()

    def count(self, name: str) -> None:
        self.stats[name] = self.stats.get(name, 0) + 1

    def conn(self) -> KafkaConn:
        return KafkaConn(self.server.kafka_address, timeout=REPLY_TIMEOUT_S, client_id="hw-fuzz")

    # ---- fixtures
    def setup(self) -> None:
        self.control = self.conn()
        res = self.control.call(18, 3, kafka_build(kmsg.request_class(18, 3), client_software_name="hw-fuzz",
                                                   client_software_version="1.0"))
        self.advertised = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in res.api_keys}
        self.ensure_fixtures()
        topic_ids = self.topic_ids()
        builder = Seeds(topic_ids)
        for api, (lo, hi) in sorted(self.advertised.items()):
            for version in range(lo, hi + 1):
                if self.excluded(api, version):
                    continue
                try:
                    body = builder.body(api, version)
                except Exception as e:  # noqa: BLE001 - a seed kio cannot encode is reported, not fatal
                    print(f"fuzz_kafka: no seed for API {api} v{version}: {type(e).__name__}: {e}")
                    continue
                self.seeds.append((f"api {api} v{version}", api, version, body))
        self.donors = [body for *_, body in self.seeds if body]
        if not self.seeds:
            raise RuntimeError("no seeds")
        # every seed, unbroken, must be answered correctly: the oracle's own sanity check
        for name, api, version, body in self.seeds:
            with self.conn() as c:
                frame, _ = c.frame(api, version, body)
                sanity = {"seed": name}
                problems = self.exchange(c, frame, sanity)
                if problems:
                    raise RuntimeError(f"the unbroken seed {name} already fails: {problems}")
                if "parked" in sanity:
                    print(f"fuzz_kafka: the unbroken seed {name} parks")

    def excluded(self, api: int, version: int) -> bool:
        return any(a == api and lo <= version <= hi for a, lo, hi in self.exclude)

    def metadata(self):
        return self.control.call(3, 12, kafka_build(kmsg.request_class(3, 12), topics=None,
                                                    allow_auto_topic_creation=False))

    def topic_ids(self) -> dict[str, uuid.UUID]:
        return {t.name: t.topic_id for t in self.metadata().topics}

    def ensure_fixtures(self) -> None:
        """Put back the topics inputs may have deleted, delete the ones they created."""
        have = {t.name: len(t.partitions) for t in self.metadata().topics}
        extra = [n for n in have if n not in KEEP_TOPICS]
        mod = kmsg.request_module(20, 6)
        if extra:
            self.control.call(20, 6, kafka_build(mod.DeleteTopicsRequest, timeout=5000, topics=tuple(
                kafka_build(mod.DeleteTopicState, name=n, topic_id=uuid.UUID(int=0)) for n in extra)))
        missing = [n for n in KEEP_TOPICS if n not in have]
        if missing:
            mod = kmsg.request_module(19, 7)
            self.control.call(19, 7, kafka_build(mod.CreateTopicsRequest, timeout=5000, topics=tuple(
                kafka_build(mod.CreatableTopic, name=n, num_partitions=KEEP_TOPICS[n], replication_factor=1)
                for n in missing)))

    # ---- one input
    def make_case(self) -> tuple[dict, KafkaConn]:
        rng = self.rng
        reuse = rng.random() < 0.7
        if reuse:
            if self.reused is None:
                self.reused = self.conn()
            conn = self.reused
        else:
            conn = self.conn()
        case = {"mode": "reused" if reuse else "fresh", "frames": []}
        parts = []
        kind = rng.random()
        if kind < 0.05:
            parts.append(rng.randbytes(rng.randint(1, 400)))
            case["frames"].append({"seed": "random bytes"})
        elif kind < 0.12:
            api = rng.choice(list(self.advertised) + [rng.randrange(100), rng.randrange(-32768, 32768)])
            lo, hi = self.advertised.get(api, (0, 5))
            version = rng.randint(lo - 1, hi + 1)
            if self.excluded(api, version):
                version = hi + 1
            frame, _ = conn.frame(api, version, rng.randbytes(rng.randint(0, 300)))
            parts.append(frame)
            case["frames"].append({"seed": f"random body for API {api} v{version}"})
        else:
            for _ in range(1 if rng.random() < 0.85 else rng.randint(2, 3)):
                name, api, version, body = rng.choice(self.seeds)
                frame, _ = conn.frame(api, version, body)
                ops = []
                if rng.random() < 0.9:
                    frame, ops = mutate(rng, frame, self.donors)
                parts.append(frame)
                case["frames"].append({"seed": name, "mutations": ops})
        case["data"] = b"".join(parts).hex()
        return case, conn

    def exchange(self, conn: KafkaConn, data: bytes, case: dict) -> list[str]:
        """Send ``data`` and check what comes back against the prediction; returns the problems."""
        expected, ending = expected_responses(data, self.advertised, self.decoder)
        case["expected"] = [f"{e.get('api')}/{e.get('version')}:{e['answer']}" for e in expected]
        if self.withhold_kio_aborts and any(e.get("crash") for e in expected):
            self.count("inputs withheld: kio's reader aborts on them (known: kio-abort)")
            if conn is self.reused:
                self.reused = None
            conn.close()
            return []
        problems: list[str] = []
        try:
            conn.send(data)
        except OSError as e:
            return [f"send failed: {e}"]
        usable = True
        silent = False  # an acks=0 Produce went before: if it failed, the broker closes the connection
        for i, item in enumerate(expected):
            if item["answer"] == "none":
                silent, usable = True, False  # never reuse such a connection: it may be closing
                continue
            if item["answer"] == "close":
                usable = False
                if not closed_soon(conn.sock):
                    problems.append(f"request {i} ({item['why']}) did not close the connection")
                break
            parks = item["api"] in PARKING_APIS
            conn.sock.settimeout(PARK_TIMEOUT_S if parks else REPLY_TIMEOUT_S)
            try:
                size = struct.unpack(">i", read_exactly(conn.sock, 4))[0]
                conn.sock.settimeout(REPLY_TIMEOUT_S)
                frame = read_exactly(conn.sock, size) if size > 0 else b""
            except socket.timeout:
                if not parks:
                    problems.append(f"no response to request {i} (API {item['api']} v{item['version']}) "
                                    f"within {REPLY_TIMEOUT_S} s")
                else:
                    self.count("parked requests given up")
                    case.setdefault("parked", []).append(f"{item['api']}/{item['version']}")
                usable = False
                break
            except Closed as e:
                if silent:
                    self.count("closed after an acks=0 Produce")
                else:
                    problems.append(f"connection closed without a response to request {i} "
                                    f"(API {item['api']} v{item['version']}): {e}")
                usable = False
                break
            if self.inject == "bad-reply" and not self.stats.get("injected"):
                frame = frame[:4] + b"\xff" * min(8, len(frame) - 4) + frame[12:]
                self.count("injected")
            problem = check_response(item, frame, self.decoder)
            if problem:
                problems.append(f"request {i}: {problem}")
                usable = False
                break
            self.count("responses")
            if item["api"] in SASL_APIS:  # the server may now close the connection, as Kafka does after a
                usable = False            # failed SASL step: nothing more is expected on it
                break
        if usable and not problems:
            extra = unsolicited(conn.sock)
            if extra:
                problems.append(f"{len(extra)} unsolicited bytes after the last response: {extra[:64].hex()}")
            if ending == "incomplete":
                usable = False
        if not usable or problems:
            if conn is self.reused:
                self.reused = None
            conn.close()
        return problems

    def forget_connections(self) -> None:
        """After a failure: start over with fresh connections."""
        if self.reused is not None:
            self.reused.close()
            self.reused = None

    def summary(self) -> list[str]:
        self.decoder.close()
        out = [f"{len(self.seeds)} seeds over {len(self.advertised)} APIs"]
        if self.decoder.crashes:
            out.append(f"kio's reader aborted the decoder worker {self.decoder.crashes} times")
        return out

    def run_case(self, case: dict, conn: KafkaConn) -> list[str]:
        problems = self.exchange(conn, bytes.fromhex(case["data"]), case)
        if conn is not self.reused:
            conn.close()
        return problems

    # ---- the healthy client
    def healthy(self) -> str | None:
        self.health_n += 1
        value = b"alive-%d-" % self.health_n + self.aux.randbytes(8)
        try:
            if self.health is None:
                self.health = self.conn()
            h = self.health
            pmod = kmsg.request_module(0, 9)
            produce = kafka_build(pmod.ProduceRequest, acks=-1, timeout=5000, transactional_id=None, topic_data=(
                kafka_build(pmod.TopicProduceData, name=HEALTH_TOPIC, partition_data=(
                    kafka_build(pmod.PartitionProduceData, index=0, records=build_record_batch(
                        [Record(0, 0, b"health", value)], base_timestamp=int(time.time() * 1000))),)),))
            res = h.call(0, 9, produce)
            part = res.responses[0].partition_responses[0]
            if int(part.error_code.value) == 3:  # an input deleted the topic: put it back
                self.ensure_fixtures()
                res = h.call(0, 9, produce)
                part = res.responses[0].partition_responses[0]
            if int(part.error_code.value) != 0:
                return f"produce: error {part.error_code}"
            offset = int(part.base_offset)
            fmod = kmsg.request_module(1, 12)
            fetch = kafka_build(fmod.FetchRequest, replica_id=-1, max_wait=0, min_bytes=0, max_bytes=1 << 20,
                                isolation_level=0, session_id=0, session_epoch=-1, rack_id="", cluster_id=None,
                                topics=(kafka_build(fmod.FetchTopic, topic=HEALTH_TOPIC, partitions=(
                                    kafka_build(fmod.FetchPartition, partition=0, fetch_offset=offset,
                                                current_leader_epoch=-1, last_fetched_epoch=-1,
                                                log_start_offset=-1, partition_max_bytes=1 << 20),)),),
                                forgotten_topics_data=())
            res = h.call(1, 12, fetch)
            p = res.responses[0].partitions[0]
            if int(p.error_code.value) != 0:
                return f"fetch: error {p.error_code}"
            got = None
            for b in split_batches(p.records or b"", allow_partial=True):
                view = RecordBatchView(b)
                for r in view.records():
                    if view.offset_of(r) == offset:
                        got = r.value
            if got != value:
                return f"fetched {got!r} at offset {offset}, produced {value!r}"
            if self.health_n % 5 == 0:
                with self.conn() as fresh:
                    fresh.call(18, 3, kafka_build(kmsg.request_class(18, 3), client_software_name="hw-fuzz",
                                                  client_software_version="1.0"))
                    fresh.call(3, 12, kafka_build(kmsg.request_class(3, 12), topics=None,
                                                  allow_auto_topic_creation=False))
        except Exception as e:  # noqa: BLE001 - anything going wrong here is the finding
            if self.health is not None:
                self.health.close()
                self.health = None
            return f"{type(e).__name__}: {e}"
        self.count("health checks")
        return None


def closed_soon(sock: socket.socket, wait_s: float = 3.0) -> bool:
    sock.settimeout(wait_s)
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
    except OSError:
        return True


def unsolicited(sock: socket.socket) -> bytes:
    ready, _, _ = select.select([sock], [], [], 0)
    if not ready:
        return b""
    try:
        return sock.recv(4096, socket.MSG_DONTWAIT)
    except (BlockingIOError, OSError):
        return b""


# --------------------------------------------------------------------------- main


def server_env(implementation: str) -> dict:
    """The server's environment: ``python`` forces the pure-Python hot loops
    (``HEADWATER_NO_EXTENSIONS=1``), ``compiled`` leaves the compiled ones in."""
    return {**SERVER_ENV, **({"HEADWATER_NO_EXTENSIONS": "1"} if implementation == "python" else {})}


def run(args) -> int:
    base = Path(tempfile.mkdtemp(prefix="hw-fuzz-kafka-"))
    server = Server(base / "data", log_path=base / "server.log", env=server_env(args.implementation))
    print(f"fuzz_kafka: seed={args.seed} seconds={args.seconds} server log={server.log_path}", flush=True)
    server.start()
    loops = re.search(r'hot_loops=(?:"([^"]*)"|(\S+))', server.log_text())
    print(f"fuzz_kafka: server hot loops: {(loops.group(1) or loops.group(2)) if loops else 'unknown'}", flush=True)
    fz = Fuzzer(server, random.Random(args.seed), args.inject, args.exclude)
    fz.withhold_kio_aborts = "kio-abort" in args.known
    return run_fuzzer("fuzz_kafka", fz, server, args, base=base)


def replay(path: str, implementation: str = "compiled") -> int:
    """Send a saved input to a fresh server set up as for fuzzing (the inputs saved before it
    first, in order) and show what came back for it."""
    saved = json.loads(Path(path).read_text())
    base = Path(tempfile.mkdtemp(prefix="hw-fuzz-replay-"))
    server = Server(base / "data", log_path=base / "server.log", env=server_env(implementation))
    server.start()
    fz = Fuzzer(server, random.Random(0))
    try:
        fz.setup()
        problems: list[str] = []
        for case in sorted(saved.get("previous", []), key=lambda c: c["case"]) + [saved["case"]]:
            case = dict(case)
            problems = fz.exchange(fz.conn(), bytes.fromhex(case["data"]), case)
            print(f"input {case['case']}: expected {case.get('expected')}; problems: {'; '.join(problems) or 'none'}")
        time.sleep(0.2)
        print("server alive:", server.alive())
        bad = log_problems(server.log_text())
        print("server log problems:" + ("\n" + "\n".join(bad) if bad else " none"))
        failed = bool(problems or bad or not server.alive())
        if not failed:
            shutil.rmtree(base, ignore_errors=True)
        return int(failed)
    finally:
        fz.decoder.close()
        if server.alive():
            server.stop()
        if base.exists():
            print(f"server log: {server.log_path}")


def parse_exclude(text: str) -> tuple[int, int, int]:
    api, _, versions = text.partition(":")
    lo, _, hi = versions.partition("-")
    return int(api), int(lo or 0), int(hi or lo or 32767)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_fuzz_arguments(ap)
    ap.add_argument("--exclude", action="append", default=[], type=parse_exclude, metavar="API[:LO-HI]",
                    help="leave out the seeds of an API (all or some versions), e.g. 0:0-2; repeatable")
    ap.add_argument("--implementation", choices=["compiled", "python"], default="compiled",
                    help="hot loops of the server: compiled when built (default), or python "
                         "(HEADWATER_NO_EXTENSIONS=1)")
    if argv is None and sys.argv[1:] == ["--decoder-worker"]:
        return decoder_worker()
    args = ap.parse_args(argv)
    if args.replay:
        return replay(args.replay, args.implementation)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(2**32)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
