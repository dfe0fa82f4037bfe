"""The dashboard's OpenID Connect login in Chromium: the button, the provider's page, and back
to the dashboard signed in, with the session out of the address bar."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.conftest import LiveServer
from tests.identity.oidc_provider import Provider, running_provider
from tests.identity.test_oidc_login import _serving
from tests.web.browser import checked_page, chromium
from virtplane.store.store import Store

if TYPE_CHECKING:
    from playwright.sync_api import Page


@pytest.fixture
def page() -> Iterator[Page]:
    with chromium() as browser, checked_page(browser) as opened:
        yield opened


@pytest.fixture
def provider() -> Iterator[Provider]:
    with running_provider() as running:
        yield running


def test_sign_in_with_openid_connect_from_the_dashboard(
    page: Page, provider: Provider, store: Store, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    with _serving(store, provider.issuer, tmp_path / "oidc-secret") as live:
        live_server: LiveServer = live
        page.goto(live_server.url + "/ui/")
        expect(page.locator("#login")).to_be_visible()
        page.click("#oidc-login")
        page.fill("input[name=sub]", "sub-alice")
        page.click("button[type=submit]:has-text('Authorize')")
        expect(page.locator("#dashboard")).to_be_visible()
        assert "session=" not in page.url, page.url
        token = page.evaluate("sessionStorage.getItem('virtplane.token')")
        whoami = httpx.get(f"{live_server.url}/v1/whoami", headers={"Authorization": f"Bearer {token}"})
        assert whoami.json()["role"] == "operator" and whoami.json()["name"].startswith("alice-oidc-")

        with page.expect_response(lambda answer: answer.url.endswith("/v1/logout")) as logged_out:
            page.click("#signout")
        assert logged_out.value.status == 200
        expect(page.locator("#login")).to_be_visible()
        after = httpx.get(f"{live_server.url}/v1/vms", headers={"Authorization": f"Bearer {token}"})
        assert after.status_code == 401 and after.json()["reason"] == "TokenRevoked", (
            "signing out ends the session"
        )


def test_the_button_is_hidden_when_the_server_has_no_oidc(page: Page, live_server: LiveServer) -> None:
    from playwright.sync_api import expect

    with page.expect_response(lambda answer: answer.url.endswith("/auth/oidc")) as asked:
        page.goto(live_server.url + "/ui/")
    assert asked.value.json() == {"enabled": False}
    expect(page.locator("#login")).to_be_visible()
    expect(page.locator("#oidc-login")).to_be_hidden()
