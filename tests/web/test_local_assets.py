"""Every asset of the dashboard and of the API reference (/docs) is served by virtplane itself
under a content policy (no CDN: the pages work offline, and nothing else can run in them);
and the dashboard works over the server's own TLS."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import LiveServer
from tests.crash.server import ServerProcess
from tests.pki import TestCa
from tests.web.browser import checked_page, sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Browser

PAGES = {"/ui/": "/ui/", "/docs": "/"}
"""Each page, and what its relative references are relative to."""


@pytest.mark.parametrize("path", list(PAGES))
def test_each_page_references_only_its_own_files_under_a_policy(live_server: LiveServer, path: str) -> None:
    with httpx.Client(base_url=live_server.url) as client:
        page = client.get(path)
        assert page.status_code == 200, page.text
        policy = page.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src 'self'" in policy, policy
        assert "://" not in page.text, "no URL of another site (a CDN) in the page"
        assert "<script>" not in page.text, "no inline script (the policy would not run it)"
        # what the page loads (scripts, styles, icons), not where its links lead (a sign-in)
        referenced = re.findall(r'<(?:script|link|img)\b[^>]*?\b(?:src|href)="([^"]+)"', page.text)
        assert referenced, page.text
        for reference in referenced:
            local = reference if reference.startswith("/") else PAGES[path] + reference
            assert client.get(local).status_code == 200, reference
        if path == "/docs":
            assert set(referenced) >= {
                "/ui/static/vendor/swagger-ui-bundle.js",
                "/ui/static/vendor/swagger-ui.css",
                "/ui/static/docs.js",
            }
        assert client.get("/redoc").status_code == 404, "ReDoc, from a CDN, is gone"


@pytest.mark.browser
def test_swagger_ui_runs_under_the_policy_and_asks_nothing_of_other_sites(
    browser: Browser, live_server: LiveServer
) -> None:
    from playwright.sync_api import expect

    origin = urlsplit(live_server.url).netloc
    with checked_page(browser) as page:
        requested: list[str] = []
        refused: list[str] = []
        page.on("request", lambda request: requested.append(request.url))
        page.on(
            "console",
            lambda message: (
                refused.append(message.text) if "Content Security Policy" in message.text else None
            ),
        )
        page.goto(live_server.url + "/docs")
        expect(page.locator(".swagger-ui .info .title")).to_contain_text("virtplane")
        expect(page.locator(".opblock-summary-path", has_text="/v1/vms").first).to_be_visible()
    assert requested and all(urlsplit(url).netloc == origin for url in requested), requested
    assert refused == [], "the page ran into its own policy"


@pytest.mark.browser
def test_the_dashboard_works_over_the_servers_own_tls(browser: Browser, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    ca = TestCa(tmp_path / "pki")
    issued = ca.issue("server")
    server = ServerProcess(
        tmp_path / "data",
        demo=True,
        ca_file=ca.pem,
        extra_args=["--tls-cert", str(issued.cert), "--tls-key", str(issued.key)],
    )
    server.start()
    try:
        # Chromium has its own trust store; the certificate is checked by the CLI tests
        context = browser.new_context(ignore_https_errors=True)
        page = context.new_page()
        try:
            sign_in(page, server.url, server.token)
            expect(page.locator('#vms tr[data-name="web-1"]')).to_be_visible()
            assert page.url.startswith("https://")
        finally:
            context.close()
    finally:
        server.stop()
