"""ACLs with real clients: managed through confluent-kafka's AdminClient and kafka-python's admin,
refusals as each client sees them (produce, consume, group, describe), authorized-operation bit
sets, Iggy permissions granting Kafka operations, Kafka ACLs applied to the Iggy protocol,
the anonymous principal, and ACLs surviving a restart.

Users: ``bob`` (made over Iggy, no Iggy permissions: only ACLs give him anything) and ``carol``
(Iggy permission to send to one topic of the Kafka stream, nothing else).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time

import apache_iggy as ig
import pytest

from hw_server import ServerProcess, free_port

PW = "pass-word"
KCAT = shutil.which("kcat")


def conf(server, user: str, password: str = PW, **extra) -> dict:
    return {"bootstrap.servers": server.kafka_address, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
            "sasl.username": user, "sasl.password": password, **extra}


def py_conf(server, user: str) -> dict:
    return dict(bootstrap_servers=server.kafka_address, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                sasl_plain_username=user, sasl_plain_password=PW)


async def iggy(server, user: str = "iggy", password: str = "iggy") -> ig.IggyClient:
    c = ig.IggyClient(server.iggy_address)
    await c.connect()
    await c.login_user(user, password)
    return c


def root_admin(server):
    from confluent_kafka.admin import AdminClient

    return AdminClient(conf(server, "iggy", "iggy"))


def acl(resource_type, name, principal, operation, permission, pattern=None):
    from confluent_kafka.admin import AclBinding, ResourcePatternType

    return AclBinding(resource_type, name, pattern or ResourcePatternType.LITERAL, principal, "*", operation, permission)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from confluent_kafka.admin import AclOperation as Op, AclPermissionType as Perm, NewTopic, ResourceType as Rt

    s = ServerProcess(tmp_path_factory.mktemp("acls") / "data", free_port(), free_port()).start(
        env={"HEADWATER_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0"}
    )

    async def users():
        c = await iggy(s)
        await c.create_user("bob", PW, ig.UserStatus.Active, None)
        admin = root_admin(s)
        for f in admin.create_topics([NewTopic(t, 1) for t in ("granted", "secret", "carols", "open")]).values():
            f.result(20)
        stream = await c.get_stream("kafka")
        carols = next(t for t in await c.get_topics("kafka") if t.name == "carols")
        perms = ig.Permissions(streams={stream.id: ig.StreamPermissions(topics={carols.id: ig.TopicPermissions(send_messages=True)})})
        await c.create_user("carol", PW, ig.UserStatus.Active, perms)

    grants = [
        acl(Rt.TOPIC, "granted", "User:bob", Op.WRITE, Perm.ALLOW),
        acl(Rt.TOPIC, "granted", "User:bob", Op.READ, Perm.ALLOW),
        acl(Rt.GROUP, "bob-", "User:bob", Op.READ, Perm.ALLOW, pattern=_prefixed()),
        acl(Rt.TOPIC, "secret", "User:iggy", Op.ALL, Perm.ALLOW),  # names "secret": anonymous loses it
    ]
    try:
        asyncio.run(users())
        admin = root_admin(s)
        for f in admin.create_acls(grants).values():
            assert f.result(20) is None
        del admin
    except BaseException:
        s.kill()  # no server left behind by a failed setup
        raise
    yield s
    assert s.stop() == 0


def produce_outcomes(server, user: str, records: list[tuple[str, bytes]]) -> list[int]:
    """Each record's delivery error code (0: delivered) for ``user`` with confluent-kafka, sorted."""
    from confluent_kafka import Producer

    reports = []
    p = Producer(conf(server, user))
    for topic, value in records:
        p.produce(topic, value, on_delivery=lambda err, msg: reports.append(err))
    p.flush(20)
    return sorted(e.code() if e else 0 for e in reports)


def _prefixed():
    from confluent_kafka.admin import ResourcePatternType

    return ResourcePatternType.PREFIXED


# --------------------------------------------------------------------------- managing ACLs


def test_confluent_admin_create_describe_delete(server):
    from confluent_kafka.admin import (
        AclBindingFilter, AclOperation as Op, AclPermissionType as Perm, ResourcePatternType as Pt, ResourceType as Rt,
    )

    admin = root_admin(server)
    binding = acl(Rt.TOPIC, "x-", "User:dave", Op.DESCRIBE, Perm.DENY, pattern=Pt.PREFIXED)
    assert admin.create_acls([binding])[binding].result(20) is None
    everything = AclBindingFilter(Rt.ANY, None, Pt.ANY, None, None, Op.ANY, Perm.ANY)
    found = admin.describe_acls(everything).result(20)
    assert binding in found and len(found) == 5
    match = AclBindingFilter(Rt.TOPIC, "x-ray", Pt.MATCH, None, None, Op.ANY, Perm.ANY)
    assert admin.describe_acls(match).result(20) == [binding]
    deleted = admin.delete_acls([AclBindingFilter(Rt.TOPIC, None, Pt.ANY, "User:dave", None, Op.ANY, Perm.ANY)])
    assert list(deleted.values())[0].result(20) == [binding]
    assert binding not in admin.describe_acls(everything).result(20)
    bad = acl(Rt.GROUP, "g", "User:dave", Op.WRITE, Perm.ALLOW)  # WRITE does not apply to groups
    with pytest.raises(Exception, match="INVALID_REQUEST|Invalid|invalid"):
        admin.create_acls([bad])[bad].result(20)
    # bob may not manage ACLs (librdkafka reports a refused DescribeAcls as an empty list; creating fails)
    from confluent_kafka.admin import AdminClient

    bobs = AdminClient(conf(server, "bob"))
    mine = acl(Rt.TOPIC, "granted", "User:bob", Op.ALL, Perm.ALLOW)
    with pytest.raises(Exception, match="CLUSTER_AUTHORIZATION_FAILED|[Aa]uthoriz"):
        bobs.create_acls([mine])[mine].result(20)


def test_kafka_python_admin_create_describe_delete(server):
    from kafka.errors import ClusterAuthorizationFailedError
    from kafka.admin import (
        ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, KafkaAdminClient, ResourcePattern,
        ResourcePatternFilter, ResourceType,
    )

    admin = KafkaAdminClient(**py_conf(server, "iggy") | {"sasl_plain_password": "iggy"})
    try:
        pattern = ResourcePattern(ResourceType.GROUP, "erin-group", ACLResourcePatternType.LITERAL)
        entry = ACL("User:erin", "*", ACLOperation.READ, ACLPermissionType.ALLOW, pattern)
        result = admin.create_acls([entry])
        assert result["failed"] == [] and len(result["succeeded"]) == 1
        flt = ACLFilter("User:erin", None, ACLOperation.ANY, ACLPermissionType.ANY,
                        ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))
        acls, error = admin.describe_acls(flt)
        assert error.errno == 0
        assert [(a.principal, a.operation, a.resource_pattern.resource_name) for a in acls] == [
            ("User:erin", ACLOperation.READ, "erin-group")
        ]
        [(_, deleted, error)] = admin.delete_acls([flt])
        assert error.errno == 0 and len(deleted) == 1
        assert admin.describe_acls(flt)[0] == []
    finally:
        admin.close()
    bobs = KafkaAdminClient(**py_conf(server, "bob"))
    try:
        try:
            code = bobs.describe_acls(flt)[1].errno
        except ClusterAuthorizationFailedError:
            code = ClusterAuthorizationFailedError.errno
        assert code == ClusterAuthorizationFailedError.errno  # bob may not read ACLs
    finally:
        bobs.close()


# --------------------------------------------------------------------------- denials, client by client


def test_confluent_denials(server):
    from confluent_kafka import Consumer, KafkaError
    from confluent_kafka.admin import AdminClient

    assert produce_outcomes(server, "bob", [("secret", b"no"), ("granted", b"yes")]) == [
        0, KafkaError.TOPIC_AUTHORIZATION_FAILED
    ]

    topics = AdminClient(conf(server, "bob")).list_topics(timeout=20).topics
    assert "granted" in topics and "secret" not in topics  # Metadata hides what bob may not describe

    def first_error(group: str, topic: str):
        c = Consumer(conf(server, "bob", **{"group.id": group, "auto.offset.reset": "earliest"}))
        c.subscribe([topic])
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None:
                    return m.error().code() if m.error() else m.value()
        finally:
            c.close()

    assert first_error("bob-ok", "granted") == b"yes"
    assert first_error("other-group", "granted") == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_kafka_python_denials(server):
    import kafka
    from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError

    p = kafka.KafkaProducer(**py_conf(server, "bob"), max_block_ms=5000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            p.send("secret", b"no").get(20)
        p.send("granted", b"kp").get(20)
    finally:
        p.close()
    c = kafka.KafkaConsumer(**py_conf(server, "bob"), group_id="not-bobs", auto_offset_reset="earliest")
    try:
        c.subscribe(["granted"])
        with pytest.raises(GroupAuthorizationFailedError):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                c.poll(timeout_ms=500)
    finally:
        c.close()


def test_aiokafka_denials(server, caplog):
    import aiokafka
    from aiokafka.errors import TopicAuthorizationFailedError

    async def go():
        p = aiokafka.AIOKafkaProducer(**py_conf(server, "bob"), request_timeout_ms=10000)
        await p.start()
        try:
            with pytest.raises(TopicAuthorizationFailedError):
                await p.send_and_wait("secret", b"no")
            await p.send_and_wait("granted", b"aio")
        finally:
            await p.stop()
        c = aiokafka.AIOKafkaConsumer(**py_conf(server, "bob"), auto_offset_reset="earliest")
        await c.start()
        try:
            topics = await c.topics()
            assert "granted" in topics and "secret" not in topics  # Metadata hides it
            c.assign([aiokafka.TopicPartition("secret", 0)])
            assert await c.getmany(timeout_ms=1000) == {}  # aiokafka logs the refusal and returns nothing
        finally:
            await c.stop()

    asyncio.run(go())
    assert "Topic secret is not authorized" in caplog.text


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (.ci/run installs it as root)")
def test_kcat_denials(server):
    base = [KCAT, "-b", server.kafka_address, "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=PLAIN",
            "-X", "sasl.username=bob", "-X", f"sasl.password={PW}"]
    r = subprocess.run([*base, "-P", "-t", "secret"], input=b"no\n", capture_output=True, timeout=60)
    assert b"authorization failed" in r.stderr.lower(), r.stderr
    r = subprocess.run([*base, "-C", "-t", "secret", "-o", "beginning", "-e"], capture_output=True, timeout=60)
    assert r.returncode != 0 and b"authorization failed" in r.stderr.lower(), r.stderr


# --------------------------------------------------------------------------- authorized operations


def test_include_authorized_operations(server):
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation as Op, AdminClient

    bob = AdminClient(conf(server, "bob"))
    [desc] = bob.describe_topics(TopicCollection(["granted"]), include_authorized_operations=True).values()
    assert set(desc.result(20).authorized_operations) == {Op.READ, Op.WRITE, Op.DESCRIBE}
    cluster = bob.describe_cluster(include_authorized_operations=True).result(20)
    assert not cluster.authorized_operations  # bob has nothing on the cluster (librdkafka shows the empty set as None)
    root = root_admin(server)
    cluster = root.describe_cluster(include_authorized_operations=True).result(20)
    assert {Op.CREATE, Op.ALTER, Op.DESCRIBE, Op.IDEMPOTENT_WRITE, Op.CLUSTER_ACTION} <= set(cluster.authorized_operations)
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(conf(server, "bob", **{"group.id": "bob-ops"}))  # a group known by its committed offset
    c.commit(offsets=[TopicPartition("granted", 0, 0)], asynchronous=False)
    c.close()
    [group] = bob.describe_consumer_groups(["bob-ops"], include_authorized_operations=True).values()
    assert set(group.result(20).authorized_operations) == {Op.READ, Op.DESCRIBE}


# --------------------------------------------------------------------------- one user, both protocols


def test_iggy_permissions_grant_kafka_operations(server):
    from confluent_kafka import KafkaError

    outcomes = produce_outcomes(server, "carol", [("carols", b"mine"), ("granted", b"not mine")])
    assert outcomes == [0, KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_kafka_acls_apply_over_iggy(server):
    from confluent_kafka.admin import AclOperation as Op, AclPermissionType as Perm, ResourceType as Rt

    async def go():
        bob = await iggy(server, "bob", PW)
        await bob.send_messages("kafka", "granted", 0, [ig.SendMessage(b"from iggy")])  # the ALLOW WRITE ACL
        polled = await bob.poll_messages("kafka", "granted", consumer=ig.Consumer.Single(1), count=100,
                                         polling_strategy=ig.PollingStrategy.First(), auto_commit=False, partition_id=0)
        assert b"from iggy" in [m.payload() for m in polled]  # the ALLOW READ ACL
        with pytest.raises(Exception, match="[Uu]nauthorized|[Pp]ermission"):
            await bob.send_messages("kafka", "open", 0, [ig.SendMessage(b"x")])  # nothing grants it
        carol = await iggy(server, "carol", PW)
        await carol.send_messages("kafka", "carols", 0, [ig.SendMessage(b"ok")])  # Iggy's own grant
        return carol

    carol = asyncio.run(go())
    deny = acl(Rt.TOPIC, "carols", "User:carol", Op.WRITE, Perm.DENY)
    admin = root_admin(server)
    admin.create_acls([deny])[deny].result(20)

    async def denied():
        carol = await iggy(server, "carol", PW)
        with pytest.raises(Exception, match="[Uu]nauthorized|[Pp]ermission"):
            await carol.send_messages("kafka", "carols", 0, [ig.SendMessage(b"no")])  # the DENY beats Iggy's grant

    try:
        asyncio.run(denied())
    finally:
        from confluent_kafka.admin import AclBindingFilter, ResourcePatternType as Pt

        admin.delete_acls([AclBindingFilter(Rt.TOPIC, "carols", Pt.LITERAL, "User:carol", None, Op.ANY, Perm.ANY)])
    del carol


def test_anonymous_principal(server):
    """No SASL on a listener that does not require it: full rights where no ACL names the resource."""
    import kafka
    from kafka.errors import TopicAuthorizationFailedError

    p = kafka.KafkaProducer(bootstrap_servers=server.kafka_address, max_block_ms=5000)
    try:
        p.send("open", b"anyone").get(20)
        with pytest.raises(TopicAuthorizationFailedError):
            p.send("secret", b"no").get(20)
    finally:
        p.close()


def test_acls_survive_restart(server):
    from confluent_kafka.admin import AclBindingFilter, AclOperation as Op, AclPermissionType as Perm
    from confluent_kafka.admin import ResourcePatternType as Pt, ResourceType as Rt

    everything = AclBindingFilter(Rt.ANY, None, Pt.ANY, None, None, Op.ANY, Perm.ANY)
    admin = root_admin(server)
    before = sorted(map(str, admin.describe_acls(everything).result(20)))
    del admin  # its connections would hold the shutdown up to its deadline
    server.restart()
    admin = root_admin(server)
    after = sorted(map(str, admin.describe_acls(everything).result(20)))
    assert after == before and len(after) >= 4
