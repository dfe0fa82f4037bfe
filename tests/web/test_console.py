"""The dashboard's console in headless Chromium against ``virtplane serve --demo``: a Console
button on a running VM opens a terminal (xterm.js, shipped with the package) that types a
line into the simulated guest and shows its answer; a viewer, whom the API refuses a
console, gets no button."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import FULL_RUN
from tests.web.browser import sign_in
from tests.web.demo_server import DemoServer, serve_demo

if TYPE_CHECKING:
    from playwright.sync_api import Page

SCREENSHOT = "/tmp/virtplane-console.png"
pytestmark = pytest.mark.browser
try:
    from playwright.sync_api import expect
except ImportError:
    if FULL_RUN:
        raise
    pytest.skip("playwright is not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    with serve_demo(Path(tmp_path_factory.mktemp("demo")) / "data") as server:
        yield server


def signed_in_as(page: Page, server: DemoServer, role: str) -> None:
    sign_in(page, server.url, server.tokens[role])
    expect(page.locator("#whoami")).to_have_text(f"web-{role} · {role}")  # the actions are drawn for it


def test_the_console_of_a_running_vm_types_a_line_and_shows_the_answer(page: Page, demo: DemoServer) -> None:
    signed_in_as(page, demo, "operator")
    web = page.locator('#vms tr[data-name="web-1"]')
    expect(web.locator("td.phase")).to_have_text("Running")
    web.locator("button.menu-toggle").click()
    web.locator('button[data-action="console"]').click()
    assert page.url.endswith("#/vms/web-1/console"), page.url  # the VM page's console tab
    expect(page.locator("#console-title")).to_have_text("Console: web-1")
    expect(page.locator("#console-status")).to_have_text("attached")
    rows = page.locator("#console-terminal .xterm-rows")
    expect(rows).to_contain_text("root@web-1:~#")
    page.locator("#console-terminal").click()
    page.keyboard.type("hostname")
    page.keyboard.press("Enter")
    expect(rows).to_contain_text("hostname")
    expect(rows.locator("div", has_text=re.compile(r"^\s*web-1\s*$"))).to_have_count(1)  # the answer line
    page.screenshot(path=SCREENSHOT)
    page.click("#console-detach")
    expect(page.locator("#console-panel")).to_be_hidden()
    with demo.client() as admin:
        reasons = [e["reason"] for e in admin.get("/v1/events", params={"name": "web-1"}).json()["items"]]
    assert "ConsoleAttached" in reasons


def test_a_viewer_gets_no_console_button_as_the_api_refuses_it_one(page: Page, demo: DemoServer) -> None:
    signed_in_as(page, demo, "viewer")
    web = page.locator('#vms tr[data-name="web-1"]')
    expect(web.locator("td.phase")).to_have_text("Running")
    # (tests/api/test_console.py: a viewer's console is refused with 403 Forbidden)
    expect(page.locator('#vms button[data-action="console"]')).to_have_count(0)
