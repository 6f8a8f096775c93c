"""The web console's pages over plain HTTP against a real ``headwater serve`` (the browser test
covers the happy path in Chromium): sessions, permissions, and a Kafka consumer group's live
members, assignment and lag."""

from __future__ import annotations

import asyncio
import http.cookiejar
import time
import urllib.error
import urllib.parse
import urllib.request

import apache_iggy as ig

from kafka_python_group import subscriber
from test_metrics_endpoint import logged_in, server  # noqa: F401  (server: the fixture, HTTP listener up)


class Browser:
    """urllib with a cookie jar: follows redirects, keeps the session cookie."""

    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}/console"
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def get(self, path: str) -> tuple[int, str, str]:
        return self._open(urllib.request.Request(self.base + path))

    def post(self, path: str, **form) -> tuple[int, str, str]:
        data = urllib.parse.urlencode(form).encode()
        return self._open(urllib.request.Request(self.base + path, data=data, method="POST"))

    def _open(self, request) -> tuple[int, str, str]:
        try:
            with self.opener.open(request, timeout=20) as r:
                return r.status, r.url, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.url, e.read().decode()

    def login(self, username: str, password: str) -> int:
        return self.post("/login", username=username, password=password)[0]


def sdk(server, fn):
    async def go():
        return await fn(await logged_in(server.iggy_address))

    return asyncio.run(go())


def test_pages_need_a_session_and_logout_ends_it(server):
    b = Browser(server.http_port)
    status, url, body = b.get("/groups")
    assert status == 200 and url.endswith("/console/login") and "Log in" in body
    assert b.get("/api/throughput")[0] == 401
    assert b.login("iggy", "not-the-password") == 401
    assert b.get("/users")[1].endswith("/console/login")
    assert b.login("iggy", "iggy") == 200
    status, url, body = b.get("/users")
    assert status == 200 and url.endswith("/console/users") and "iggy" in body
    assert b.post("/logout")[1].endswith("/console/login")
    assert b.get("/users")[1].endswith("/console/login")


def test_a_user_without_permissions_sees_and_changes_nothing(server):
    async def setup(c):
        await c.create_stream("private")
        await c.create_topic("private", "t", 1)
        await c.create_user("nobody", "secret-pass", ig.UserStatus.Active)  # no permissions

    sdk(server, setup)
    root = Browser(server.http_port)
    assert root.login("iggy", "iggy") == 200
    b = Browser(server.http_port)
    assert b.login("nobody", "secret-pass") == 200
    status, _, body = b.get("/")
    assert status == 200 and "private" not in body
    assert b.get("/users")[0] == 403
    assert b.get("/streams/private/topics/t")[0] == 403
    assert b.get("/streams/private/topics/t/partitions/0")[0] == 403
    assert b.post("/streams/private/topics/t/messages", payload="x", partition="0")[0] == 403
    assert b.post("/streams/private/topics", name="mine", partitions="1")[0] == 403
    # nothing was written: the root user sees an empty partition
    status, _, body = root.get("/streams/private/topics/t/partitions/0?offset=0")
    assert status == 200 and "No messages here." in body
    assert root.get("/streams/private/topics/nope")[0] == 404


def test_kafka_group_members_assignment_and_lag(server):
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=server.kafka_address)
    for i in range(7):
        producer.send("console-kafka", value=b"k-%d" % i, partition=0)
    producer.flush()
    producer.close()
    consumer = subscriber(
        "console-kafka", bootstrap_servers=server.kafka_address, group_id="console-readers", client_id="reader-1",
        enable_auto_commit=False, auto_offset_reset="earliest",
    )
    try:
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 4 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500, max_records=4 - seen).values():
                seen += len(records)
        assert seen == 4
        consumer.commit()  # next offset 4 of 7: lag 3
        b = Browser(server.http_port)
        assert b.login("iggy", "iggy") == 200
        status, _, body = b.get("/groups")
        assert status == 200
        section = body[body.index('data-group="console-readers"'):]
        section = section[: section.index("</section>")]
        assert "Stable" in section and "kafka (consumer" in section
        assert "reader-1" in section and "console-kafka: [0]" in section
        assert '<td class="lag-value">3</td>' in section
    finally:
        consumer.close()


def test_sending_an_oversized_key_or_headers_is_a_400_error_page_and_the_server_keeps_serving(server):
    """A key plus headers past an Iggy frame's 100 000 B of user headers is refused by the Kafka
    conversion (MessageTooLarge): the console answers its error page with 400, not a bare 500."""
    sdk(server, lambda c: _stream_with_topic(c, "big-keys"))
    b = Browser(server.http_port)
    assert b.login("iggy", "iggy") == 200
    path = "/streams/big-keys/topics/t/messages"
    for form, expected in (({"payload": "x", "key": "k" * 100_000}, 400),
                           ({"payload": "x", "key": "k", "headers": "h=" + "v" * 100_000}, 400),
                           ({"payload": "x", "partition": "\u00b2"}, 400),
                           ({"payload": "x", "partition": "99999999999999999999"}, 404)):
        status, _, body = b.post(path, **form)
        assert status == expected and '<p class="error">' in body, (status, body[-400:])
    status, url, body = b.post(path, payload="still-served", key="k")
    assert status == 200 and "/partitions/0?offset=0" in url and "still-served" in body


async def _stream_with_topic(c, stream: str) -> None:
    await c.create_stream(stream)
    await c.create_topic(stream, "t", 1)
