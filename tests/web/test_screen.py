"""The dashboard's screen in headless Chromium against ``virtplane serve --demo``: a Screen
button (with the VM's thumbnail) on a running VM opens noVNC (shipped with the package), which
draws the simulated guest's screen through the API's VNC WebSocket; a viewer gets no button."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import FULL_RUN
from tests.web.browser import sign_in
from tests.web.demo_server import DemoServer, serve_demo
from virtplane.drivers.sim._display import HEIGHT, WIDTH, screen_rgb

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.browser
try:
    from playwright.sync_api import expect
except ImportError:
    if FULL_RUN:
        raise
    pytest.skip("playwright is not installed", allow_module_level=True)

CANVAS_RGB = """(canvas) => {
  const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let binary = "";
  for (let i = 0; i < pixels.length; i += 4) binary += String.fromCharCode(pixels[i], pixels[i + 1], pixels[i + 2]);
  return [canvas.width, canvas.height, btoa(binary)];
}"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    with serve_demo(Path(tmp_path_factory.mktemp("demo")) / "data") as server:
        yield server


def signed_in_as(page: Page, server: DemoServer, role: str) -> None:
    sign_in(page, server.url, server.tokens[role])
    expect(page.locator("#whoami")).to_have_text(f"web-{role} · {role}")


def test_the_screen_of_a_running_vm_is_drawn_by_novnc_and_its_thumbnail_shown(
    page: Page, demo: DemoServer
) -> None:
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    signed_in_as(page, demo, "operator")
    web = page.locator('#vms tr[data-name="web-1"]')
    expect(web.locator("td.phase")).to_have_text("Running")
    thumbnail = web.locator('button[data-action="screen"] img.screen-thumb')
    web.locator("button.menu-toggle").click()  # the menu shows it: only then is it asked for
    expect(thumbnail).to_have_attribute("src", re.compile(r"^data:image/png;base64,"))
    shots = [url.split("/v1/vms/")[1] for url in asked if url.endswith("/screenshot")]
    assert shots == ["web-1/screenshot"], f"only the thumbnail in sight is loaded: {shots}"
    web.locator('button[data-action="screen"]').click()
    assert page.url.endswith("#/vms/web-1/screen"), page.url  # the VM page's screen tab
    expect(page.locator("#screen-title")).to_have_text("Screen: web-1")
    expect(page.locator("#screen-status")).to_have_text("connected")
    canvas = page.locator("#screen-view canvas")
    expected = screen_rgb("web-1")
    # noVNC draws the update it asked for after connecting: wait for the whole picture
    page.wait_for_function(
        "([canvas, w]) => canvas.width === w && canvas.getContext('2d').getImageData(w - 1, 199, 1, 1).data[3] === 255",
        arg=[canvas.element_handle(), WIDTH],
    )
    width, height, rgb = canvas.evaluate(CANVAS_RGB)
    assert (width, height) == (WIDTH, HEIGHT)
    assert base64.b64decode(rgb) == expected, "the canvas shows the guest's screen, pixel for pixel"
    page.click("#screen-close")
    expect(page.locator("#screen-panel")).to_be_hidden()
    with demo.client() as admin:
        audit = admin.get("/v1/audit", params={"name": "web-1"}).json()["items"]
    assert any(r["verb"] == "vnc-open" and r["token"] == "web-operator" for r in audit), audit


def test_a_viewer_gets_no_screen_button_as_the_api_refuses_it_one(page: Page, demo: DemoServer) -> None:
    signed_in_as(page, demo, "viewer")
    expect(page.locator('#vms tr[data-name="web-1"] td.phase')).to_have_text("Running")
    # (tests/api/test_vnc.py: a viewer's screen and screenshot are refused with 403 Forbidden)
    expect(page.locator('#vms button[data-action="screen"]')).to_have_count(0)
