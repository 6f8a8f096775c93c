"""The web console in a real browser: Playwright driving Debian's Chromium against a real
``headwater serve``. Logs in, creates a topic, sends a message, finds it in the message
browser (key, header, payload, frame tree), and reads a consumer group's lag; the group and
its committed offset come from the official Iggy SDK, so the lag is real.

Screenshots of the main pages go to ``$HEADWATER_CONSOLE_SCREENSHOTS`` when set (the README's
images in docs/console/ are made that way), else to the test's temporary directory.
Skipped only when no Chromium executable is installed (``.ci/run`` installs Debian's).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import apache_iggy as ig
import pytest

from headwater.codec.iggy.codes import ConsumerKind
from headwater.codec.iggy.commands import encode_request_body
from headwater.codec.iggy.commands import groups as wg
from headwater.codec.iggy.commands import offsets as wo
from headwater.codec.iggy.primitives import Consumer
from test_metrics_endpoint import logged_in, server  # noqa: F401  (server: the fixture, HTTP listener up)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium executable (Debian: apt-get install chromium)")




def log_in(page, password: str) -> None:
    page.fill("input[name=username]", "iggy")
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")


async def _iggy(server, fn):
    return await fn(await logged_in(server.iggy_address))


def iggy(server, fn):
    """Run ``fn(client)`` on a logged-in SDK client, in a thread of its own (Playwright's sync
    API keeps an event loop running in this one)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _iggy(server, fn)).result(timeout=30)


def test_console_login_topic_send_browse_and_lag(server, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    shots = Path(os.environ.get("HEADWATER_CONSOLE_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    base = f"http://127.0.0.1:{server.http_port}/console"
    iggy(server, lambda c: c.create_stream("shop"))

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            page.set_default_timeout(10_000)

            # login (a wrong password first: refused, still on the login page)
            page.goto(f"{base}/")
            expect(page.locator("h1")).to_have_text("Log in")
            page.screenshot(path=str(shots / "login.png"))
            log_in(page, "wrong")
            expect(page.locator(".error")).to_contain_text("Invalid username or password")
            log_in(page, "iggy")
            expect(page.locator("h1")).to_have_text("Streams")

            # create a topic in the stream the SDK made
            page.click("text=shop")
            page.fill("#create-topic input[name=name]", "orders")
            page.fill("#create-topic input[name=partitions]", "2")
            page.click("#create-topic button")
            expect(page.locator("h1")).to_contain_text("Topic orders")

            # send a message with a Kafka key and a header to partition 0
            page.fill("#send input[name=partition]", "0")
            page.fill("#send input[name=key]", "customer-7")
            page.fill("#send textarea[name=headers]", "source=console")
            page.fill("#send textarea[name=payload]", '{"order": 1001, "total": 42.5}')
            page.click("#send button")

            # ... and find it in the message browser
            expect(page.locator("h1")).to_contain_text("Messages of orders / 0")
            row = page.locator("tr.message[data-offset='0']")
            expect(row.locator("td.key")).to_have_text("customer-7")
            expect(row).to_contain_text("source")
            expect(row.locator("pre.payload")).to_contain_text('"total": 42.5')

            # more messages and a consumer group with a committed offset, over the Iggy protocol
            async def group(c):
                await c.send_messages("shop", "orders", 0, [ig.SendMessage(b'{"order": %d}' % i) for i in range(2, 6)])
                await c.create_consumer_group("shop", "orders", "billing")
                for request in (
                    wg.JoinConsumerGroup("shop", "orders", "billing"),  # one member: it owns both partitions
                    wo.StoreConsumerOffset(Consumer(ConsumerKind.CONSUMER_GROUP, "billing"), "shop", "orders", 0, 1),
                ):  # offsets 0 and 1 consumed
                    code, body = encode_request_body(request)
                    await c.send_binary_request(int(code), body)

            iggy(server, group)

            page.goto(f"{base}/streams/shop/topics/orders/partitions/0?offset=0&format=json")
            expect(page.locator("tr.message")).to_have_count(5)
            page.locator("tr.message[data-offset='0'] details.tree summary").click()
            expect(page.locator("tr.message[data-offset='0'] details.tree")).to_contain_text("checksum")
            expect(page.locator("tr.message[data-offset='0'] details.tree")).to_contain_text("(valid)")
            page.screenshot(path=str(shots / "messages.png"), full_page=True)

            # the group's lag: high watermark 5, committed next offset 2
            page.click("header nav >> text=Consumer groups")
            billing = page.locator("section.group[data-group='billing']")
            lag_row = billing.locator("table.lag tr", has_text="orders")
            expect(lag_row.locator("td.lag-value")).to_have_text("3")
            page.screenshot(path=str(shots / "groups.png"), full_page=True)

            page.goto(f"{base}/streams/shop/topics/orders")
            expect(page.locator("section.group[data-group='billing'] td.lag-value")).to_have_text("3")
            page.screenshot(path=str(shots / "topic.png"), full_page=True)

            page.click("header nav >> text=Users")
            expect(page.locator("table")).to_contain_text("iggy")
            page.screenshot(path=str(shots / "users.png"), full_page=True)

            # the throughput chart draws from the polled counters
            page.click("header nav >> text=Streams")
            page.wait_for_function("document.querySelector('#throughput polyline.in').getAttribute('points')")
            iggy(server, lambda c: c.send_messages("shop", "orders", 1, [ig.SendMessage(b"burst")] * 300))
            page.wait_for_function("/now: [1-9]/.test(document.getElementById('throughput-now').textContent)")
            page.screenshot(path=str(shots / "streams.png"), full_page=True)

            # logging out ends the session
            page.click("form.logout button")
            expect(page.locator("h1")).to_have_text("Log in")
            page.goto(f"{base}/groups")
            expect(page.locator("h1")).to_have_text("Log in")
        finally:
            browser.close()
