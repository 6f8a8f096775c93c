"""Iggy's HTTP REST API against a real ``headwater serve``: the official SDK (apache-iggy
0.9.0 over ``iggy+http://``) and raw HTTP for what the Python SDK does not expose (personal
access tokens, consumer offsets, token refresh) and for hostile input."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import re
import socket
import time
from pathlib import Path

import apache_iggy as ig
import jwt
import pytest

from test_iggy_restart import login as tcp_login


def request(port: int, method: str, path: str, body=None, token: str | None = None, headers=None):
    """One request on a fresh connection -> (status, headers, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        h = dict(headers or {})
        if token:
            h["Authorization"] = f"Bearer {token}"
        if body is not None and not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def call(port: int, method: str, path: str, body=None, token=None, expect: int = 200):
    status, _, raw = request(port, method, path, body, token)
    assert status == expect, (method, path, status, raw)
    return json.loads(raw) if raw else None


def wait_http(port: int) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            request(port, "GET", "/ping")
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def login(port: int, username="iggy", password="iggy") -> dict:
    return call(port, "POST", "/users/login", {"username": username, "password": password})


@pytest.fixture(scope="module")
def http_port(server) -> int:
    wait_http(server.http_port)
    return server.http_port


@pytest.fixture(scope="module")
def root(http_port) -> str:
    return login(http_port)["access_token"]["token"]


async def sdk(port: int, user="iggy", password="iggy") -> ig.IggyClient:
    c = ig.IggyClient.from_connection_string(f"iggy+http://{user}:{password}@127.0.0.1:{port}")
    await c.connect()
    await c.login_user(user, password)
    return c


# --------------------------------------------------------------------------- basics


def test_ping_answers_pong(http_port):
    status, headers, body = request(http_port, "GET", "/ping")
    assert (status, body) == (200, b"pong")
    assert headers["content-type"].startswith("text/plain")


def test_serve_logs_the_http_listener(server, http_port):
    assert f"listener=iggy-http address=127.0.0.1:{http_port}" in server.log()


def test_openapi_lists_the_served_routes(http_port):
    doc = call(http_port, "GET", "/openapi.json")
    assert doc["openapi"].startswith("3.")
    assert set(doc["paths"]["/streams/{stream_id}/topics/{topic_id}/messages"]) == {"get", "post"}
    assert "/users/login" in doc["paths"] and "/ping" in doc["paths"]


# --------------------------------------------------------------------------- SDK admin


def test_sdk_admin_over_http(http_port):
    async def go():
        c = await sdk(http_port)
        await c.ping()
        await c.create_stream("h-admin")
        s = await c.get_stream("h-admin")
        assert s.name == "h-admin" and s.topics_count == 0
        assert await c.get_stream("no-such-stream") is None
        await c.create_topic("h-admin", "t", 2)
        t = await c.get_topic("h-admin", "t")
        assert (t.name, t.partitions_count, [p.id for p in t.partitions]) == ("t", 2, [0, 1])
        assert [x.name for x in await c.get_topics("h-admin")] == ["t"]
        await c.create_partitions("h-admin", "t", 2)
        assert (await c.get_topic("h-admin", "t")).partitions_count == 4
        await c.delete_partitions("h-admin", "t", 1)
        assert (await c.get_topic("h-admin", "t")).partitions_count == 3
        await c.update_topic("h-admin", "t", "t2")
        assert await c.get_topic("h-admin", "t") is None
        await c.create_consumer_group("h-admin", "t2", "g1")
        groups = await c.get_consumer_groups("h-admin", "t2")
        assert [g.name for g in groups] == ["g1"]
        g = await c.get_consumer_group("h-admin", "t2", "g1")
        assert g.name == "g1" and g.members_count == 0
        await c.delete_consumer_group("h-admin", "t2", "g1")
        assert await c.get_consumer_group("h-admin", "t2", "g1") is None
        await c.update_stream("h-admin", "h-admin2")
        assert "h-admin2" in [x.name for x in await c.get_streams()]
        await c.purge_topic("h-admin2", "t2")
        await c.purge_stream("h-admin2")
        await c.delete_topic("h-admin2", "t2")
        await c.delete_stream("h-admin2")
        assert await c.get_stream("h-admin2") is None
        stats = await c.get_stats()
        assert stats.streams_count >= 0

    asyncio.run(go())


def test_sdk_users_and_permissions_over_http(http_port):
    async def go():
        c = await sdk(http_port)
        perms = ig.Permissions(ig.GlobalPermissions(read_streams=True), None)
        u = await c.create_user("h-alice", "wonderland", ig.UserStatus.Active, perms)
        assert u.username == "h-alice"
        assert "h-alice" in [x.username for x in await c.get_users()]
        alice = await sdk(http_port, "h-alice", "wonderland")
        await alice.get_streams()  # read_streams
        with pytest.raises(RuntimeError, match="Unauthorized"):
            await alice.create_stream("h-not-allowed")  # 403 -> Unauthorized, as over TCP
        await c.update_permissions("h-alice", ig.Permissions(ig.GlobalPermissions(manage_streams=True), None))
        await alice.create_stream("h-allowed")
        await c.change_password("h-alice", "wonderland", "looking-glass")
        await sdk(http_port, "h-alice", "looking-glass")
        await c.update_user("h-alice", "h-alice2")
        assert (await c.get_user("h-alice2")).username == "h-alice2"
        await c.delete_user("h-alice2")
        assert await c.get_user("h-alice2") is None
        await c.delete_stream("h-allowed")

    asyncio.run(go())


# --------------------------------------------------------------------------- raw routes


def test_personal_access_tokens_over_http(http_port, root):
    raw = call(http_port, "POST", "/personal-access-tokens", {"name": "h-pat", "expiry": 0}, root)
    assert raw["token"]
    listed = call(http_port, "GET", "/personal-access-tokens", token=root)
    assert {"name": "h-pat", "expiry_at": None} in listed
    identity = call(http_port, "POST", "/personal-access-tokens/login", {"token": raw["token"]})
    assert identity["user_id"] == 0
    call(http_port, "GET", "/streams", token=identity["access_token"]["token"])
    bad = call(http_port, "POST", "/personal-access-tokens/login", {"token": "nope"}, expect=401)
    assert bad["code"] == "invalid_personal_access_token"
    call(http_port, "DELETE", "/personal-access-tokens/h-pat", token=root, expect=204)
    call(http_port, "POST", "/personal-access-tokens/login", {"token": raw["token"]}, expect=401)


def test_consumer_offsets_over_http(http_port, root):
    call(http_port, "POST", "/streams", {"name": "h-off"}, root)
    call(http_port, "POST", "/streams/h-off/topics", {"name": "t", "partitions_count": 1, "compression_algorithm": "none",
                                                       "message_expiry": 0, "max_topic_size": 0}, root)
    msgs = [{"id": i + 1, "payload": base64.b64encode(b"m%d" % i).decode()} for i in range(3)]
    sent = call(http_port, "POST", "/streams/h-off/topics/t/messages",
                {"partitioning": {"kind": "partition_id", "value": base64.b64encode((0).to_bytes(4, "little")).decode()},
                 "messages": msgs}, root, expect=201)
    assert sent["confirmations"][0]["base_offset"] == 0
    base = "/streams/h-off/topics/t/consumer-offsets"
    call(http_port, "GET", f"{base}?consumer_id=c1&partition_id=0", token=root, expect=404)
    call(http_port, "PUT", base, {"consumer_id": "c1", "partition_id": 0, "offset": 1}, root, expect=204)
    got = call(http_port, "GET", f"{base}?consumer_id=c1&partition_id=0", token=root)
    assert got == {"partition_id": 0, "current_offset": 2, "stored_offset": 1}
    past = call(http_port, "PUT", base, {"consumer_id": "c1", "partition_id": 0, "offset": 9}, root, expect=400)
    assert past["id"] == 4100
    call(http_port, "DELETE", f"{base}/c1?partition_id=0", token=root, expect=204)
    call(http_port, "GET", f"{base}?consumer_id=c1&partition_id=0", token=root, expect=404)
    # poll with auto-commit then NEXT continues after it
    q = "consumer_id=c2&partition_id=0&kind=first&value=0&count=2&auto_commit=true"
    first = call(http_port, "GET", f"/streams/h-off/topics/t/messages?{q}", token=root)
    assert [m["header"]["offset"] for m in first["messages"]] == [0, 1]
    nxt = call(http_port, "GET", "/streams/h-off/topics/t/messages?consumer_id=c2&partition_id=0&kind=next&count=10&auto_commit=true",
               token=root)
    assert [base64.b64decode(m["payload"]) for m in nxt["messages"]] == [b"m2"]


def test_segments_clients_and_cluster_over_http(http_port, root):
    call(http_port, "POST", "/streams", {"name": "h-seg"}, root)
    call(http_port, "POST", "/streams/h-seg/topics", {"name": "t", "partitions_count": 1, "compression_algorithm": "none",
                                                       "message_expiry": 0, "max_topic_size": 0}, root)
    call(http_port, "DELETE", "/streams/h-seg/topics/t/partitions/0?segments_count=1", token=root, expect=204)
    assert isinstance(call(http_port, "GET", "/clients", token=root), list)
    missing = call(http_port, "GET", "/clients/999999", token=root, expect=404)
    assert missing["code"] == "not_found"
    flush = call(http_port, "GET", "/streams/h-seg/topics/t/messages/flush/0/fsync=true", token=root, expect=400)
    assert flush["code"] == "feature_unavailable"
    meta = call(http_port, "GET", "/cluster/metadata", token=root)
    assert meta["nodes"][0]["role"] == "leader"


# --------------------------------------------------------------------------- cross-transport bytes


def test_tcp_send_http_poll_and_back_byte_identical(server, http_port):
    payloads = [b"", b"\x00\xffbinary\x01", "żółw 🐢".encode(), bytes(range(256)) * 4]

    async def go():
        tcp = await tcp_login(server)
        h = await sdk(http_port)
        await tcp.create_stream("h-x")
        await tcp.create_topic("h-x", "t", 2)
        sent = [ig.SendMessage(p or b"-") for p in payloads]
        await tcp.send_messages("h-x", "t", 0, sent)
        over_http = await h.poll_messages("h-x", "t", consumer=ig.Consumer.Single("x"), polling_strategy=ig.PollingStrategy.First(),
                                          count=100, auto_commit=False, partition_id=0)
        over_tcp = await tcp.poll_messages("h-x", "t", consumer=ig.Consumer.Single("x"), polling_strategy=ig.PollingStrategy.First(),
                                           count=100, auto_commit=False, partition_id=0)
        view = lambda ms: [(m.offset(), m.id(), m.payload(), m.checksum(), m.timestamp(), m.origin_timestamp()) for m in ms]
        assert view(over_http) == view(over_tcp)
        assert [m.payload() for m in over_http] == [p or b"-" for p in payloads]
        # the other way: sent over HTTP, polled over TCP
        await h.send_messages("h-x", "t", 1, [ig.SendMessage(p or b"-") for p in payloads])
        back = await tcp.poll_messages("h-x", "t", consumer=ig.Consumer.Single("x"), polling_strategy=ig.PollingStrategy.First(),
                                       count=100, auto_commit=False, partition_id=1)
        again = await h.poll_messages("h-x", "t", consumer=ig.Consumer.Single("x"), polling_strategy=ig.PollingStrategy.First(),
                                      count=100, auto_commit=False, partition_id=1)
        assert [m.payload() for m in back] == [p or b"-" for p in payloads]
        assert view(back) == view(again)

    asyncio.run(go())


def test_user_headers_and_ids_survive_http(http_port, root):
    call(http_port, "POST", "/streams", {"name": "h-hdr"}, root)
    call(http_port, "POST", "/streams/h-hdr/topics", {"name": "t", "partitions_count": 1, "compression_algorithm": "none",
                                                       "message_expiry": 0, "max_topic_size": 0}, root)
    b64 = lambda b: base64.b64encode(b).decode()
    headers = [{"key": {"kind": "string", "value": b64(b"k")}, "value": {"kind": "uint64", "value": b64((7).to_bytes(8, "little"))}}]
    big_id = (1 << 128) - 1
    call(http_port, "POST", "/streams/h-hdr/topics/t/messages",
         {"partitioning": {"kind": "balanced", "value": ""},
          "messages": [{"id": big_id, "payload": b64(b"x"), "user_headers": headers}]}, root, expect=201)
    got = call(http_port, "GET", "/streams/h-hdr/topics/t/messages?consumer_id=1&partition_id=0&kind=first&count=1", token=root)
    m = got["messages"][0]
    assert (m["header"]["id"], m["payload"], m["user_headers"]) == (big_id, b64(b"x"), headers)


# --------------------------------------------------------------------------- tokens


def test_login_refresh_logout_revokes(http_port):
    first = login(http_port)["access_token"]["token"]
    call(http_port, "GET", "/streams", token=first)
    refreshed = call(http_port, "POST", "/users/refresh-token", {"token": first})["access_token"]["token"]
    assert refreshed != first
    revoked = call(http_port, "GET", "/streams", token=first, expect=401)  # the refreshed token is one-shot
    assert revoked["id"] == 40
    call(http_port, "GET", "/streams", token=refreshed)
    call(http_port, "DELETE", "/users/logout", token=refreshed, expect=204)
    call(http_port, "GET", "/streams", token=refreshed, expect=401)
    call(http_port, "POST", "/users/refresh-token", {"token": refreshed}, expect=401)
    bad = call(http_port, "POST", "/users/login", {"username": "iggy", "password": "wrong"}, expect=400)
    assert bad["code"] == "invalid_credentials"


def test_expired_and_forged_tokens_are_refused(server, http_port):
    secret = (Path(server.data_dir) / "http" / "jwt_secret").read_bytes()
    now = int(time.time())
    claims = {"sub": "0", "jti": "t1", "iat": now - 7200, "nbf": now - 7200, "exp": now - 3600,
              "iss": "iggy.apache.org", "aud": "iggy.apache.org"}
    expired = jwt.encode(claims, secret, algorithm="HS256")
    body = call(http_port, "GET", "/streams", token=expired, expect=401)
    assert (body["id"], body["code"]) == (40, "unauthenticated")
    forged = jwt.encode({**claims, "exp": now + 3600}, b"not-the-secret" * 4, algorithm="HS256")
    call(http_port, "GET", "/streams", token=forged, expect=401)
    call(http_port, "GET", "/streams", token="garbage", expect=401)
    call(http_port, "GET", "/streams", expect=401)
    none_alg = jwt.encode({**claims, "exp": now + 3600}, None, algorithm="none")
    call(http_port, "GET", "/streams", token=none_alg, expect=401)
    valid = jwt.encode({**claims, "exp": now + 3600}, secret, algorithm="HS256")
    call(http_port, "GET", "/streams", token=valid)  # the same claims, in date: accepted


# --------------------------------------------------------------------------- hostile input


def test_bad_json_and_unknown_fields(http_port, root):
    status, _, raw = request(http_port, "POST", "/streams", b"{not json", root, {"Content-Type": "application/json"})
    assert status == 400 and json.loads(raw)["id"] == 4
    body = call(http_port, "POST", "/streams", {"nom": "x"}, root, expect=400)
    assert body["code"] == "invalid_format" and "name" in body["reason"]
    body = call(http_port, "POST", "/streams/h-nope/topics/t/messages", {"messages": "nope"}, root, expect=400)
    assert body["id"] == 4
    assert request(http_port, "GET", "/ping")[2] == b"pong"  # still serving


def _raw_exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` on a fresh connection and read until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(data)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


def test_huge_body_is_refused_with_413(http_port, root):
    # the declared length is over the default max_request_size (2 MB): refused before the body
    # is read (only its first bytes are sent, so the refusal never races a client still sending)
    head = (f"POST /streams HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {root}\r\n"
            "Content-Type: application/json\r\nContent-Length: 3000000\r\n\r\n").encode()
    reply = _raw_exchange(http_port, head + b"{" + b" " * 1000)
    status_line, _, rest = reply.partition(b"\r\n")
    assert status_line.split()[:2] == [b"HTTP/1.1", b"413"], reply[:200]
    headers, _, body = rest.partition(b"\r\n\r\n")
    assert b"connection: close" in headers.lower()
    assert json.loads(body)["id"] == 4
    # a chunked body (no declared length) is counted as it arrives
    chunk = b" " * 1_000_000
    chunked = (f"POST /streams HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {root}\r\n"
               "Transfer-Encoding: chunked\r\n\r\n").encode() + b"{"
    piece = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    try:
        reply = _raw_exchange(http_port, b"".join([chunked.replace(b"{", b"1\r\n{\r\n")] + [piece] * 3))
        assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    except (BrokenPipeError, ConnectionResetError):
        pass  # refused while the rest was still in flight: the connection was closed as it should be
    assert request(http_port, "GET", "/ping")[2] == b"pong"


def test_slow_client_does_not_stall_others(http_port, root):
    slow = socket.create_connection(("127.0.0.1", http_port))
    try:
        slow.sendall(b"POST /streams HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"na")  # and then nothing
        started = time.monotonic()
        for _ in range(5):
            call(http_port, "GET", "/streams", token=root)
        assert slow.fileno() != -1 and time.monotonic() - started < 60
    finally:
        slow.close()


def test_cors_preflight(http_port):
    status, headers, _ = request(http_port, "OPTIONS", "/streams", headers={
        "Origin": "http://example.com", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})
    assert status == 200
    assert headers["access-control-allow-origin"] == "*"
    assert "POST" in headers["access-control-allow-methods"]


# --------------------------------------------------------------------------- TLS


def test_https_with_the_sdk(tmp_path, monkeypatch):
    """``[http] tls_enabled``: the SDK connects with ``HttpConfig(api_url="https://...")`` and
    trusts the test CA through ``SSL_CERT_FILE`` (its reqwest/rustls reads the system store)."""
    import ssl

    from hw_server import ServerProcess, free_port
    from tls_certs import make_certs

    ca, cert, key = make_certs(tmp_path)
    s = ServerProcess(tmp_path / "data", free_port(), free_port()).start(env={
        "HEADWATER_HTTP_TLS_ENABLED": "true", "HEADWATER_HTTP_TLS_CERT_FILE": str(cert),
        "HEADWATER_HTTP_TLS_KEY_FILE": str(key)})
    try:
        ctx = ssl.create_default_context(cafile=str(ca))
        deadline = time.monotonic() + 20
        while True:
            try:
                conn = http.client.HTTPSConnection("127.0.0.1", s.http_port, context=ctx, timeout=10)
                conn.request("GET", "/ping")
                assert conn.getresponse().read() == b"pong"
                conn.close()
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        with pytest.raises(ssl.SSLError):  # not trusted without the CA
            conn = http.client.HTTPSConnection("127.0.0.1", s.http_port, context=ssl.create_default_context(), timeout=10)
            conn.request("GET", "/ping")
        assert "scheme=https" in s.log()
        monkeypatch.setenv("SSL_CERT_FILE", str(ca))

        async def go():
            c = ig.IggyClient(ig.HttpConfig(api_url=f"https://127.0.0.1:{s.http_port}"))
            await c.connect()
            await c.login_user("iggy", "iggy")
            await c.create_stream("over-tls")
            assert [x.name for x in await c.get_streams()] == ["over-tls"]

        asyncio.run(go())
    finally:
        assert s.stop() == 0


def test_unloadable_tls_key_is_a_one_line_start_error(tmp_path):
    import os
    import subprocess
    import sys

    from hw_server import free_port
    from tls_certs import make_certs

    _, cert, _ = make_certs(tmp_path)
    bogus = tmp_path / "bogus.key"
    bogus.write_text("not a key\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
    env.update(HEADWATER_HTTP_TLS_ENABLED="true", HEADWATER_HTTP_TLS_CERT_FILE=str(cert), HEADWATER_HTTP_TLS_KEY_FILE=str(bogus))
    p = subprocess.run(
        [sys.executable, "-m", "headwater", "serve", "--data-dir", str(tmp_path / "data"),
         "--tcp-address", f"127.0.0.1:{free_port()}", "--kafka-address", f"127.0.0.1:{free_port()}",
         "--http-address", "127.0.0.1:0", "--quic-address", "127.0.0.1:0", "--websocket-address", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=60, env=env,
    )
    lines = p.stderr.strip().splitlines()
    assert p.returncode != 0 and len(lines) == 1, p.stderr
    assert lines[0].startswith("headwater: cannot start: HEADWATER_HTTP_TLS_CERT_FILE: cannot load the TLS certificate/key"), lines
    assert not (tmp_path / "data").exists()  # refused with the bind (step 3), before the data directory


def test_stalled_requests_are_closed_and_others_served(tmp_path):
    """``[http] request_timeout_s``: a connection that sends nothing, half its headers or half
    its body is closed after the timeout; requests of other clients are served meanwhile."""
    from hw_server import ServerProcess, free_port

    s = ServerProcess(tmp_path / "data", free_port(), free_port()).start(env={"HEADWATER_HTTP_REQUEST_TIMEOUT_S": "1"})
    try:
        wait_http(s.http_port)
        token = login(s.http_port)["access_token"]["token"]
        stalls = [b"", b"GET /streams HTTP/1.1\r\nHost: x\r\n",
                  b"POST /streams HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode()
                  + b"\r\nContent-Length: 50\r\n\r\n{\"name\""]
        socks = []
        for data in stalls:
            sock = socket.create_connection(("127.0.0.1", s.http_port), timeout=30)
            if data:
                sock.sendall(data)
            socks.append(sock)
        call(s.http_port, "GET", "/streams", token=token)
        for sock in socks:  # each is closed by the server (recv returns EOF) well before the 30 s socket timeout
            assert sock.recv(1024) == b""
            sock.close()
        call(s.http_port, "GET", "/streams", token=token)
        # three closed for the timeout: in one sweep, or in two when a connection's first byte (or
        # its accept) reached the server after a sweep had seen the others (a loaded machine)
        counts = re.findall(r'reason="request timeout" count=(\d+)', s.log())
        assert sum(map(int, counts)) == 3, counts
        assert "Traceback" not in s.log()
    finally:
        assert s.stop() == 0
