"""Row 19: the dashboard's VM list of the big fleet (rows 2, 5, 7, 8's 10,000 VMs) in Chromium.

The page is opened signed in (the token put in the tab's session storage before it loads, as
the login form would) at ``#/vms``; the figure is the time from the navigation's start to the
first screen: the list's first page of rows drawn. The list draws after the API's first page of
500 VMs, without waiting for the other 9,500; the time until all of them are counted is
recorded beside it. The system Chromium under Playwright, as the browser tests use
(tests/web/browser.py); without them the row says so and has no figure.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from bench.rows import Row, at_most, summary_ms
from bench.server import BenchServer
from bench.sizes import Sizes

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
LOADS = 5
FIRST_SCREEN = "() => document.querySelectorAll('#vms tbody tr').length >= 100 && performance.now()"
TIMEOUT_MS = 60_000


REQUESTS = """() => Object.fromEntries([...performance.getEntriesByType('resource')
  .filter((e) => /app[.]js|limit=500$|whoami/.test(e.name))
  .map((e) => [e.name.replace(/^.*[/]/, ''), [Math.round(e.startTime), Math.round(e.responseEnd)]]),
  ...performance.getEntriesByType('mark').map((e) => [e.name, Math.round(e.startTime)])])"""


def _measure(url: str, token: str, vms: int) -> tuple[list[float], list[float], list[Any]]:
    from playwright.sync_api import sync_playwright

    first: list[float] = []
    whole: list[float] = []
    requests: list[Any] = []
    all_counted = f"() => document.getElementById('vm-total').textContent === '{vms}' && performance.now()"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for _ in range(LOADS):
                context = browser.new_context(viewport={"width": 1440, "height": 900})
                context.add_init_script(f"sessionStorage.setItem('virtplane.token', {token!r})")
                page = context.new_page()
                page.goto(f"{url}/ui/#/vms")
                first.append(page.wait_for_function(FIRST_SCREEN, timeout=TIMEOUT_MS).json_value() / 1000)
                requests.append(page.evaluate(REQUESTS))
                whole.append(page.wait_for_function(all_counted, timeout=TIMEOUT_MS).json_value() / 1000)
                context.close()
        finally:
            browser.close()
    return first, whole, requests


async def first_screen(server: BenchServer, sizes: Sizes) -> Row:
    title = f"Dashboard: the VM list of {sizes.fleet_vms:,} VMs, first screen in Chromium"
    details: dict[str, Any] = {}
    try:
        import playwright  # noqa: F401
    except ImportError:
        return Row(19, title, None, "ms (median)", "<= 1,000 ms", None, note="playwright is not installed")
    if not os.access(CHROMIUM, os.X_OK):
        return Row(19, title, None, "ms (median)", "<= 1,000 ms", None, note=f"{CHROMIUM} is missing")
    server.wait_quiet()  # after the cold start (row 2) when run alone: the fleet settled, as for row 8
    with server.profile("row19-dashboard"):
        first, whole, requests = await asyncio.to_thread(_measure, server.url, server.token, sizes.fleet_vms)
    stats = summary_ms(first)
    # when the page's script and its first requests started and ended (ms since navigation)
    details = {
        "first_screen": stats,
        "all_counted": summary_ms(whole),
        "requests_of_the_last_load": requests[-1],
    }
    median = stats["median_ms"]
    return Row(19, title, median, "ms (median)", "<= 1,000 ms", at_most(median, 1000), details=details)
