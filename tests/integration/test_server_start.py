"""What the cheaper server start (session 14) must not change, against real servers.

- ApiVersions lists every Kafka API at the same versions as before the handler modules were
  loaded on first use (the list below is what the eagerly loaded handlers advertised).
- On a fresh server, the first request of every Kafka API (its handler module imported then)
  is answered, and answered as the server answers any request: a decodable response with
  the request's correlation id, nothing logged as failed.
- The web console (built on its first request) answers concurrent first requests as it
  answers later ones.
- ``headwater`` does not import hypothesis (kio would register its strategies, and hypothesis
  would leave a ``.hypothesis/`` directory in the working directory).
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from kio.static.constants import EntityType

from headwater.codec.kafka import messages
from kafka_wire import Closed, KafkaWire, main_class, message_classes

# (api_key, min_version, max_version) advertised by the server of main 296c494 (every handler imported)
ADVERTISED = [
    (0, 0, 12), (1, 4, 17), (2, 1, 10), (3, 0, 13), (8, 2, 9), (9, 1, 9), (10, 0, 6), (11, 0, 9),
    (12, 0, 4), (13, 0, 5), (14, 0, 5), (15, 0, 6), (16, 0, 5), (17, 0, 1), (18, 0, 4), (19, 2, 7),
    (20, 1, 6), (21, 0, 2), (22, 0, 5), (23, 2, 4), (24, 0, 3), (25, 0, 3), (26, 0, 3), (28, 0, 3),
    (29, 1, 3), (30, 1, 3), (31, 1, 3), (32, 1, 4), (33, 0, 2), (35, 1, 4), (36, 0, 2), (37, 0, 3),
    (42, 0, 2), (44, 0, 1), (47, 0, 0), (50, 0, 0), (51, 0, 0), (60, 0, 2), (65, 0, 0), (66, 0, 1),
]
API_VERSIONS = 18


def _api_versions(wire: KafkaWire, version: int) -> list[tuple[int, int, int]]:
    mod, _ = message_classes(API_VERSIONS, version)
    fields = {"client_software_name": "t", "client_software_version": "1"} if version >= 3 else {}
    r = wire.call(API_VERSIONS, version, main_class(mod, EntityType.request)(**fields))
    assert r.error_code == 0
    return [(k.api_key, k.min_version, k.max_version) for k in r.api_keys]


def test_api_versions_lists_every_api_at_the_same_versions(fresh_server):
    wire = KafkaWire(fresh_server.kafka_address)
    try:
        # first thing the server is asked (no handler loaded yet but ApiVersions'), then again
        assert _api_versions(wire, 3) == ADVERTISED
        assert _api_versions(wire, 0) == ADVERTISED
    finally:
        wire.close()


def _first_request(api_key: int, version: int):
    """A request of (api_key, version) with every field at its zero value (messages.build), except
    what would make the server send nothing (Produce acks=0)."""
    values = {"acks": -1} if api_key == 0 else {}
    return messages.build(messages.request_class(api_key, version), **values)


def test_first_request_of_every_api_is_answered(fresh_server):
    answered = []
    for api_key, _, version in ADVERTISED:
        wire = KafkaWire(fresh_server.kafka_address)
        try:
            correlation, response = None, None
            frame, sent = wire.frame(api_key, version, _first_request(api_key, version))
            wire.send_raw(frame)
            try:
                correlation, response = wire.read_response(api_key, version)
            except Closed as e:
                raise AssertionError(f"API {api_key} v{version}: closed without an answer ({e})\n"
                                     f"{fresh_server.log()[-3000:]}") from None
            assert correlation == sent, (api_key, version)
            assert type(response) is messages.response_class(api_key, version)
            answered.append(api_key)
        finally:
            wire.close()
    assert answered == [key for key, _, _ in ADVERTISED]
    assert "handler failed" not in fresh_server.log()


def _get(url: str) -> tuple[int, str, bytes]:
    """(status, final URL, body) of a GET that does not follow redirects past the console."""
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.url, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.url, e.read()


def test_console_first_requests_are_answered_as_later_ones(fresh_server):
    base = f"http://127.0.0.1:{fresh_server.http_port}/console"
    paths = ["/login", "/", "/static/console.css", "/nowhere", "/login", "/"]
    with ThreadPoolExecutor(len(paths)) as pool:  # all at once, while the console is being made
        first = list(pool.map(_get, [base + p for p in paths]))
    later = [_get(base + p) for p in paths]
    assert first == later
    status, url, body = later[0]
    assert status == 200 and url.endswith("/console/login") and b"<form" in body
    assert later[1][1].endswith("/console/login")  # not logged in: sent to the login page
    assert later[3][0] == 404


def test_headwater_does_not_import_hypothesis(tmp_path):
    # a refused start imports the whole server first (kio among it), as QA session 13's did
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
    probe = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('hypothesis imported:', sys.modules.get('hypothesis') is not None))\n"
        "sys.argv = ['headwater', 'serve', '--data-dir', sys.argv[1], '--tcp-address', 'nonsense']\n"
        "from headwater.__main__ import run\n"
        "run()\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "data")], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "cannot start: --tcp-address" in done.stderr
    assert "hypothesis imported: False" in done.stdout
    assert not (cwd / ".hypothesis").exists()
    assert not (tmp_path / "data").exists()


def test_the_cyclic_collector_is_on_again_once_the_command_runs(tmp_path):
    # run() turns it off when "serve" is an argument, for serve's imports; serve turns it on
    # after them, and another command (here "serve" is a stream's name) at once
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
    for argv, code in ((["serve", "--data-dir", str(tmp_path / "data"), "--tcp-address", "nonsense"], 2),
                       (["--server", "127.0.0.1:1", "stream", "get", "serve"], 3)):
        probe = (
            "import atexit, gc, sys\n"
            "atexit.register(lambda: print('collector on:', gc.isenabled()))\n"
            f"sys.argv = ['headwater', *{argv!r}]\n"
            "from headwater.__main__ import run\n"
            "run()\n"
        )
        done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == code, (argv, done.stderr)
        assert "collector on: True" in done.stdout, (argv, done.stdout, done.stderr)
