"""SASL on the Kafka listener with real clients: PLAIN and SCRAM-SHA-256/512 through confluent-kafka,
kafka-python, aiokafka and kcat, against a server with ``[kafka] authentication_required = true``.

The user is made over the Iggy protocol (apache-iggy SDK) and logs in over Kafka with the same
password (PLAIN); its SCRAM credentials are added with confluent-kafka's AdminClient
(AlterUserScramCredentials). Also: wrong passwords as each client reports them, the
raw-token framing of SaslHandshake v0, refusal before authentication, and KIP-368
re-authentication with a short ``connections_max_reauth_ms``.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import shutil
import subprocess
import time

import apache_iggy as ig
import pytest

from hw_server import ServerProcess, free_port
from kafka_wire import Closed, KafkaWire, message_classes, main_class
from kio.static.constants import EntityType

pytestmark = pytest.mark.slow  # a file of long tests: handed out first (tests/conftest.py)

PASSWORD = "alice-secret"
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
KCAT = shutil.which("kcat")
AUTH_ENV = {
    "HEADWATER_KAFKA_AUTHENTICATION_REQUIRED": "true",
    "HEADWATER_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
}


def start(tmp_path_factory, **env) -> ServerProcess:
    base = tmp_path_factory.mktemp("sasl")
    return ServerProcess(base / "data", free_port(), free_port()).start(env={**AUTH_ENV, **env})


def confluent_conf(server, mechanism: str, user: str = "alice", password: str = PASSWORD, **extra) -> dict:
    return {
        "bootstrap.servers": server.kafka_address,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        **extra,
    }


async def iggy_create_user(server, name: str, password: str, permissions) -> None:
    c = ig.IggyClient(server.iggy_address)
    await c.connect()
    await c.login_user("iggy", "iggy")
    await c.create_user(name, password, ig.UserStatus.Active, permissions)


def add_scram(server, user: str, password: str) -> None:
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient(confluent_conf(server, "PLAIN", "iggy", "iggy"))
    upserts = [
        UserScramCredentialUpsertion(user, ScramCredentialInfo(m, 4096), password.encode())
        for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
    ]
    for f in admin.alter_user_scram_credentials(upserts).values():
        f.result(timeout=20)
    described = admin.describe_user_scram_credentials([user])[user].result(timeout=20)
    infos = sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos)
    assert infos == [(ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 4096)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = start(tmp_path_factory)
    try:
        # alice: an Iggy user with rights to produce, consume and create topics (global Iggy permissions)
        perms = ig.Permissions(ig.GlobalPermissions(manage_topics=True, read_topics=True, poll_messages=True, send_messages=True))
        asyncio.run(iggy_create_user(s, "alice", PASSWORD, perms))
        add_scram(s, "alice", PASSWORD)
    except BaseException:
        s.kill()  # no server left behind by a failed setup
        raise
    yield s
    assert s.stop() == 0


# --------------------------------------------------------------------------- every client, every mechanism


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka(server, mechanism):
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = f"cf-{mechanism.lower()}"
    p = Producer(confluent_conf(server, mechanism))
    p.produce(topic, b"hello " + mechanism.encode())
    assert p.flush(20) == 0
    c = Consumer(confluent_conf(server, mechanism, **{"group.id": f"g-{topic}", "auto.offset.reset": "earliest"}))
    if mechanism == "PLAIN":
        c.subscribe([topic])  # a group member once (JoinGroup, SyncGroup, Heartbeat); assigned otherwise
    else:
        c.assign([TopicPartition(topic, 0, 0)])
    got = None
    deadline = time.monotonic() + 30
    while got is None and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got = m.value()
    c.commit(asynchronous=False)
    committed = c.committed([TopicPartition(topic, 0)], timeout=10)
    c.close()
    assert got == b"hello " + mechanism.encode()
    assert committed[0].offset == 1


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python(server, mechanism):
    import kafka

    conf = dict(bootstrap_servers=server.kafka_address, security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                sasl_plain_username="alice", sasl_plain_password=PASSWORD)
    topic = f"kp-{mechanism.lower()}"
    p = kafka.KafkaProducer(**conf)
    p.send(topic, b"v1").get(20)
    p.close()
    c = kafka.KafkaConsumer(**conf)
    tp = kafka.TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning()
    values = []
    deadline = time.monotonic() + 20
    while not values and time.monotonic() < deadline:
        values = [m.value for m in c.poll(timeout_ms=500).get(tp, [])]
    c.close()
    assert values == [b"v1"]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka(server, mechanism):
    import aiokafka

    conf = dict(bootstrap_servers=server.kafka_address, security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                sasl_plain_username="alice", sasl_plain_password=PASSWORD)
    topic = f"aio-{mechanism.lower()}"

    async def go():
        p = aiokafka.AIOKafkaProducer(**conf)
        await p.start()
        try:
            await p.send_and_wait(topic, b"a1")
        finally:
            await p.stop()
        c = aiokafka.AIOKafkaConsumer(**conf, auto_offset_reset="earliest")
        await c.start()
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            return (await asyncio.wait_for(c.getone(), 20)).value
        finally:
            await c.stop()

    assert asyncio.run(go()) == b"a1"


def kcat(server, mechanism: str, *args: str, password: str = PASSWORD, stdin: bytes | None = None):
    return subprocess.run(
        [KCAT, "-b", server.kafka_address, "-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={mechanism}",
         "-X", "sasl.username=alice", "-X", f"sasl.password={password}", *args],
        input=stdin, capture_output=True, timeout=60,
    )


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (.ci/run installs it as root)")
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kcat(server, mechanism):
    topic = f"kcat-{mechanism.lower()}"
    r = kcat(server, mechanism, "-P", "-t", topic, stdin=b"k1\n")
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    r = kcat(server, mechanism, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%s\n")
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert r.stdout == b"k1\n"


# --------------------------------------------------------------------------- refusals


def test_wrong_password_seen_by_each_client(server, caplog):
    import aiokafka
    import kafka
    from confluent_kafka.admin import AdminClient

    errors = []
    admin = AdminClient(confluent_conf(server, "SCRAM-SHA-256", password="wrong", error_cb=errors.append))
    with pytest.raises(Exception):
        admin.list_topics(timeout=2)
    deadline = time.monotonic() + 60  # the refusal ends the wait (it may come after list_topics gave up)
    while not any("Authentication failed" in e.str() for e in errors):
        assert time.monotonic() < deadline, errors
        admin.poll(0.5)  # serves error_cb
    del admin

    caplog.set_level(logging.WARNING)
    # kafka-python gives up bootstrapping after bootstrap_timeout_ms whether or not the server's
    # refusal has arrived (under load the password check may take longer): the refusal, not the
    # deadline, ends this wait; the overall bound only stops a server that never refuses
    deadline = time.monotonic() + 60
    while "SaslAuthenticationFailedError" not in caplog.text:
        assert time.monotonic() < deadline, caplog.text
        with pytest.raises(kafka.errors.KafkaTimeoutError):
            kafka.KafkaProducer(bootstrap_servers=server.kafka_address, security_protocol="SASL_PLAINTEXT",
                                sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password="wrong",
                                bootstrap_timeout_ms=1500)

    async def aio():
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=server.kafka_address, security_protocol="SASL_PLAINTEXT",
                                      sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
                                      sasl_plain_password="wrong")
        try:
            with pytest.raises(aiokafka.errors.KafkaConnectionError):
                await p.start()
        finally:
            await p.stop()

    caplog.clear()
    asyncio.run(aio())
    assert "SaslAuthenticationFailed" in caplog.text

    if KCAT is not None:
        r = kcat(server, "PLAIN", "-L", "-m", "3", password="wrong")
        assert r.returncode != 0 and b"Authentication failed" in r.stderr


def wire_request(api_key: int, version: int, **fields):
    req, _ = message_classes(api_key, version)
    return main_class(req, EntityType.request)(**fields)


def test_requests_before_authentication_close_the_connection(server):
    w = KafkaWire(server.kafka_address)
    versions = w.call(18, 0, wire_request(18, 0))  # ApiVersions is always answered
    assert {k.api_key for k in versions.api_keys} >= {17, 36, 29, 30, 31, 50, 51}
    w.send_raw(w.frame(3, 1, wire_request(3, 1, topics=None))[0])
    assert w.closed_by_server()
    w.close()

    w = KafkaWire(server.kafka_address)
    r = w.call(17, 1, wire_request(17, 1, mechanism="GSSAPI"))
    assert int(r.error_code) == 33 and tuple(r.mechanisms) == tuple(MECHANISMS)  # UNSUPPORTED_SASL_MECHANISM
    assert w.closed_by_server()
    w.close()

    w = KafkaWire(server.kafka_address)
    r = w.call(36, 1, wire_request(36, 1, auth_bytes=b"\0alice\0" + PASSWORD.encode()))
    assert int(r.error_code) == 34  # ILLEGAL_SASL_STATE: no handshake yet
    assert w.closed_by_server()
    w.close()

    # an unauthenticated frame over Kafka's sasl.server.max.receive.size (512 KiB) is refused from its
    # size alone: only the 4-byte size is sent, and the server closes without waiting for the rest
    w = KafkaWire(server.kafka_address)
    w.send_raw((512 * 1024 + 1).to_bytes(4, "big"))
    assert w.closed_by_server()
    w.close()


def test_handshake_v0_raw_tokens(server):
    w = KafkaWire(server.kafka_address)
    r = w.call(17, 0, wire_request(17, 0, mechanism="PLAIN"))
    assert int(r.error_code) == 0
    token = b"\0alice\0" + PASSWORD.encode()
    w.send_raw(len(token).to_bytes(4, "big") + token)
    assert w.read_frame() == b""  # PLAIN's empty server token, size-prefixed, no header
    meta = w.call(3, 1, wire_request(3, 1, topics=None))  # authenticated now
    assert meta.brokers
    w.close()

    w = KafkaWire(server.kafka_address)
    w.call(17, 0, wire_request(17, 0, mechanism="PLAIN"))
    token = b"\0alice\0wrong"
    w.send_raw(len(token).to_bytes(4, "big") + token)
    assert w.closed_by_server()  # v0 has no way to say why
    w.close()


# --------------------------------------------------------------------------- KIP-368 re-authentication


def authenticate(w: KafkaWire, version: int = 1) -> int:
    assert int(w.call(17, 1, wire_request(17, 1, mechanism="PLAIN")).error_code) == 0
    r = w.call(36, version, wire_request(36, version, auth_bytes=b"\0alice\0" + PASSWORD.encode()))
    assert int(r.error_code) == 0, r.error_message
    return int(r.session_lifetime / datetime.timedelta(milliseconds=1)) if version >= 1 else 0


def test_reauthentication(tmp_path_factory):
    s = start(tmp_path_factory, HEADWATER_KAFKA_CONNECTIONS_MAX_REAUTH_MS="1000")
    try:
        perms = ig.Permissions(ig.GlobalPermissions(manage_topics=True, poll_messages=True, send_messages=True))
        asyncio.run(iggy_create_user(s, "alice", PASSWORD, perms))

        # a session that is not renewed ends with the connection at the next request after its lifetime
        w = KafkaWire(s.kafka_address)
        assert authenticate(w) == 1000
        assert w.call(3, 1, wire_request(3, 1, topics=None)).brokers
        time.sleep(1.1)
        w.send_raw(w.frame(3, 1, wire_request(3, 1, topics=None))[0])
        with pytest.raises((Closed, ConnectionError, OSError)):
            w.read_frame()
        w.close()

        # a renewed one goes on: hand-shake and authenticate again on the same connection
        w = KafkaWire(s.kafka_address)
        authenticate(w)
        time.sleep(0.7)
        authenticate(w)
        time.sleep(0.7)  # 1.4 s after the first authentication, 0.7 s after the second
        assert w.call(3, 1, wire_request(3, 1, topics=None)).brokers
        w.close()

        # librdkafka re-authenticates by itself before the lifetime ends: a producer outlives several
        from confluent_kafka import Producer

        expired_before = s.log().count("session expired")
        assert expired_before == 1  # the first connection above
        errors = []
        p = Producer(confluent_conf(s, "PLAIN", error_cb=errors.append))
        for i in range(4):
            p.produce("reauth", b"%d" % i)
            assert p.flush(20) == 0
            time.sleep(0.8)
        p.poll(0)
        assert errors == []
        assert s.log().count("session expired") == expired_before  # it never let its session lapse
    finally:
        assert s.stop() == 0


# --------------------------------------------------------------------------- SASL over TLS (SASL_SSL)


def test_sasl_ssl_with_confluent_kafka_python_and_aiokafka(tmp_path_factory):
    """The same SASL exchange over the TLS Kafka listener (``[kafka] tls_enabled``):
    PLAIN and SCRAM-SHA-512 with confluent-kafka, PLAIN with kafka-python, SCRAM-SHA-256
    with aiokafka; a wrong password over TLS is refused as over plain TCP."""
    from tls_certs import make_certs

    base = tmp_path_factory.mktemp("sasl-ssl")
    certs = make_certs(base / "certs")
    s = ServerProcess(base / "data", free_port(), free_port())
    s.start(env={**AUTH_ENV, "HEADWATER_KAFKA_TLS_ENABLED": "true",
                 "HEADWATER_KAFKA_TLS_CERT_FILE": str(certs.cert), "HEADWATER_KAFKA_TLS_KEY_FILE": str(certs.key),
                 "HEADWATER_KAFKA_ADVERTISED_ADDRESS": f"localhost:{s.kafka_port}"})
    try:
        bootstrap = f"localhost:{s.kafka_port}"
        ca = str(certs.ca)
        topic = "sasl-ssl"

        from confluent_kafka import Consumer, KafkaException, Producer

        def conf(mechanism: str, user: str = "iggy", password: str = "iggy") -> dict:
            return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": ca,
                    "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password}

        p = Producer(conf("PLAIN"))
        p.produce(topic, b"confluent-plain")
        assert p.flush(30) == 0
        from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

        admin = AdminClient(conf("PLAIN"))
        upsert = UserScramCredentialUpsertion("iggy", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"iggy")
        for f in admin.alter_user_scram_credentials([upsert]).values():
            f.result(timeout=20)
        upsert = UserScramCredentialUpsertion("iggy", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"iggy")
        for f in admin.alter_user_scram_credentials([upsert]).values():
            f.result(timeout=20)
        p = Producer(conf("SCRAM-SHA-512"))
        p.produce(topic, b"confluent-scram")
        assert p.flush(30) == 0

        from kafka import KafkaProducer

        kp = KafkaProducer(bootstrap_servers=bootstrap, security_protocol="SASL_SSL", ssl_cafile=ca,
                           sasl_mechanism="PLAIN", sasl_plain_username="iggy", sasl_plain_password="iggy")
        kp.send(topic, b"kafka-python").get(30)
        kp.close()

        import aiokafka
        from aiokafka.helpers import create_ssl_context

        async def aio_send():
            producer = aiokafka.AIOKafkaProducer(
                bootstrap_servers=bootstrap, security_protocol="SASL_SSL", ssl_context=create_ssl_context(cafile=ca),
                sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="iggy", sasl_plain_password="iggy")
            await producer.start()
            try:
                await producer.send_and_wait(topic, b"aiokafka")
            finally:
                await producer.stop()

        asyncio.run(aio_send())

        c = Consumer({**conf("SCRAM-SHA-512"), "group.id": "sasl-ssl", "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        got, deadline = [], time.monotonic() + 60
        while len(got) < 4 and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value())
        c.close()
        assert got == [b"confluent-plain", b"confluent-scram", b"kafka-python", b"aiokafka"]

        bad = Producer({**conf("PLAIN", password="wrong"), "message.timeout.ms": 5000})
        errors = []
        bad.produce(topic, b"never", on_delivery=lambda err, _m: errors.append(err))
        bad.flush(20)
        assert errors and errors[0] is not None
        with pytest.raises(KafkaException):
            Producer(conf("PLAIN", password="wrong")).list_topics(timeout=5)
    finally:
        assert s.stop() == 0, s.log()[-3000:]
