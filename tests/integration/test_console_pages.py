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
from test_catchup_reads import drop_cache
from test_metrics_endpoint import logged_in, scrape, server  # noqa: F401  (server: the fixture, HTTP listener up)


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


def _console_catchup_reads(server) -> float:
    return sum(s.value for s in scrape(server).get("headwater_catchup_reads", [])
               if s.name == "headwater_catchup_reads_total" and s.labels.get("protocol") == "console")


def test_the_message_browser_reads_pages_not_in_the_cache_off_the_event_loop(server):
    """The message browser's reads (by offset and by timestamp) of segment data the page cache
    does not hold go through the catch-up workers, as a poll's do (counted under protocol
    ``console``), and show what a read of cached data shows."""
    stream = "console-catchup"

    async def fill(c):
        await _stream_with_topic(c, stream)
        for b in range(30):
            await c.send_messages(stream, "t", 0, [ig.SendMessage(b"b%03d-m%02d-" % (b, m) + b"x" * 1500)
                                                   for m in range(20)])

    sdk(server, fill)
    b = Browser(server.http_port)
    assert b.login("iggy", "iggy") == 200
    page = f"/streams/{stream}/topics/t/partitions/0"
    first = {"offset=0": "b000-m00-", "offset=317": "b015-m17-", "timestamp=1970-01-01T00:00:01Z": "b000-m00-"}
    cached = {q: b.get(f"{page}?{q}") for q in first}
    for q, (status, _, body) in cached.items():
        assert status == 200 and first[q] in body, (q, body[:500])
    before = _console_catchup_reads(server)
    for q, want in cached.items():
        drop_cache(server)
        status, _, body = b.get(f"{page}?{q}")
        assert (status, body) == (200, want[2]), q
    # (one per read that waited: a read may find a chunk an earlier one had the workers read)
    assert _console_catchup_reads(server) > before
