"""The live usage graphs (``usage-charts.js``'s ``mountUsage``) in headless Chromium, mounted into
the signed-in dashboard's page against the live server, after two collection rounds: four
uPlot charts from the usage API, a VM's and a host's; once their element leaves the page they
stop asking."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.cli.test_top import Clock
from tests.conftest import FULL_RUN, LiveServer, seed_console_world
from tests.web.browser import sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.browser
try:
    from playwright.sync_api import expect
except ImportError:
    if FULL_RUN:
        raise
    pytest.skip("playwright is not installed", allow_module_level=True)

MOUNT = """async ([kind, name]) => {
  const { mountUsage } = await import("/ui/static/usage-charts.js");
  const element = document.createElement("div");
  element.id = "usage-under-test";
  element.style.width = "900px";
  document.body.append(element);
  window.usageUnderTest = mountUsage(element, kind, name);
}"""


@pytest.mark.parametrize(
    ("kind", "name", "title"),
    [("vm", "web-1", "CPU (of its vCPUs)"), ("host", "host-1", "CPU (of its CPUs)")],
)
def test_the_graphs_draw_from_the_usage_api_and_stop_off_the_page(
    page: Page, live_server: LiveServer, kind: str, name: str, title: str
) -> None:
    with live_server.client() as admin:
        seed_console_world(admin)
    Clock(live_server).rounds(3)
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url) if "/usage" in request.url else None)
    sign_in(page, live_server.url, live_server.tokens["viewer"])
    page.evaluate(MOUNT, [kind, name])
    charts = page.locator("#usage-under-test .uplot")
    expect(charts).to_have_count(4)
    expect(charts.first.locator(".u-title")).to_have_text(title)
    expect(page.locator("#usage-under-test canvas")).to_have_count(4)
    assert any(f"/{kind}s/{name}/usage?since=1h" in url for url in asked), asked

    page.evaluate("document.getElementById('usage-under-test').remove()")
    page.wait_for_function("() => !document.getElementById('usage-under-test')")
    before = len(asked)
    page.evaluate("window.usageUnderTest.refresh()")  # stopped: it asks nothing any more
    page.evaluate("new Promise((done) => setTimeout(done, 0))")  # let a request, if any, start
    assert len(asked) == before
