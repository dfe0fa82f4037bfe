"""The dashboard's console in headless Chromium against ``virtplane serve --demo``: a Console
button on a running VM opens a terminal (xterm.js, shipped with the package) that types a
line into the simulated guest and shows its answer; a viewer is told why it is refused."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import FULL_RUN
from tests.crash.server import ServerProcess

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
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(Path(tmp_path_factory.mktemp("demo")) / "data", demo=True, boot_s=0.05)
    server.start()
    try:
        server.wait_for("/v1/vms/web-1", lambda vm: vm["status"]["phase"] == "Running")
        yield server
    finally:
        server.stop()


def sign_in(page: Page, server: ServerProcess, token: str) -> None:
    page.goto(server.url + "/")
    page.fill("#token-input", token)
    page.click("#login-submit")
    expect(page.locator("#dashboard")).to_be_visible()


def test_the_console_of_a_running_vm_types_a_line_and_shows_the_answer(
    page: Page, demo: ServerProcess
) -> None:
    sign_in(page, demo, demo.token)
    web = page.locator('#vms tr[data-name="web-1"]')
    expect(web.locator("td.phase")).to_have_text("Running")
    web.locator("button.console-open").click()
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


def test_a_viewer_sees_why_the_console_is_refused(page: Page, demo: ServerProcess) -> None:
    with demo.client() as admin:
        created = admin.post("/v1/tokens", json={"name": "console-viewer", "role": "viewer"})
    if created.status_code == 404:
        pytest.skip("this server makes no tokens over the API")
    assert created.status_code in (200, 201), created.text
    sign_in(page, demo, created.json()["token"])
    page.locator('#vms tr[data-name="web-1"] button.console-open').click()
    expect(page.locator("#console-status")).to_contain_text("refused (403): Forbidden")
