"""Catch-up reads on a real server: a poll of segment data that is not in the page cache (a
consumer far behind the tail; here the pages are dropped with posix_fadvise(DONTNEED)) is
read in off the event loop and returns the very bytes a poll of cached data returns, on
every partition, while another connection keeps being served."""

from __future__ import annotations

import glob
import os

import apache_iggy as ig
import pytest

from headwater.storage.local import readahead
from test_robustness_wire import Raw, poll_body, run, sdk_client

pytestmark = pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="needs posix_fadvise")


async def _fill(server) -> None:
    c = await sdk_client(server)
    await c.create_stream("catchup")
    await c.create_topic("catchup", "t", 2)
    for p in range(2):
        for b in range(40):
            await c.send_messages("catchup", "t", p, [ig.SendMessage(b"p%d-b%d-m%d-" % (p, b, m) + os.urandom(900))
                                                      for m in range(25)])


def drop_cache(server) -> None:
    for path in glob.glob(os.path.join(server.data_dir, "streams", "**", "*.log"), recursive=True):
        if not readahead.evict(path):
            pytest.skip("this filesystem keeps the pages in memory")


def test_a_poll_from_the_disk_returns_the_bytes_of_a_poll_from_the_cache(fresh_server):
    run(_fill(fresh_server))
    reads = [(p, offset, count) for p in (0, 1) for offset, count in ((0, 1000), (0, 7), (333, 200), (990, 50))]
    with Raw(fresh_server.iggy_address) as r, Raw(fresh_server.iggy_address) as other:
        r.login()
        other.login()
        cached = {}
        for p, offset, count in reads:
            kind, status, body = r.call(100, poll_body("catchup", "t", p, offset, count))
            assert (kind, status) == ("reply", 0)
            cached[(p, offset, count)] = body
        for p, offset, count in reads:
            drop_cache(fresh_server)
            kind, status, body = r.call(100, poll_body("catchup", "t", p, offset, count))
            assert (kind, status) == ("reply", 0)
            assert body == cached[(p, offset, count)], (p, offset, count)
            assert other.call(1)[:2] == ("reply", 0)  # Ping on another connection
