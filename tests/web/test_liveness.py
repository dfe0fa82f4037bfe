"""The hosts table's liveness column tells the truth (issue 39): an Up host whose heartbeat was
last recorded 5 minutes ago (it is recorded every 5 minutes) shows that it answers, not "5m
ago"; a silent host shows for how long it has been silent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from tests.conftest import LiveServer
from tests.web.test_dashboard import create, ended_watch, host, signed_in, wait_for

if TYPE_CHECKING:
    from playwright.sync_api import Page, Route

pytestmark = pytest.mark.browser
from playwright.sync_api import expect  # noqa: E402  (test_dashboard skips the module without it)


def _iso(ago: timedelta) -> str:
    return (datetime.now(UTC) - ago).isoformat()


def test_an_up_host_answers_and_a_silent_one_says_for_how_long(page: Page, live_server: LiveServer) -> None:
    with live_server.client("admin") as client:
        for name in ("host-1", "host-2"):
            create(client, "hosts", host(name))
        wait_for(
            lambda: all(h["status"]["connection"] == "Up" for h in client.get("/v1/hosts").json()["items"]),
            "both hosts Up",
        )

    def aged(route: Route) -> None:
        """The real hosts, as they would be 5 minutes on: host-1 still answering, host-2 silent 2 min."""
        if ended_watch(route):
            return
        response = route.fetch()
        body = response.json()
        for item in body["items"]:
            status = item["status"]
            status["last_heartbeat"] = _iso(timedelta(minutes=5, seconds=10))
            status["answering_since"] = _iso(timedelta(minutes=20))
            if item["metadata"]["name"] == "host-2":
                status.update(connection="Disconnected", answering_since=None)
                status["silent_since"] = _iso(timedelta(minutes=2, seconds=5))
        route.fulfill(response=response, json=body)

    page.route(f"{live_server.url}/v1/hosts?*", aged)
    signed_in(page, live_server, "viewer")
    up = page.locator('#hosts tr[data-name="host-1"] td.heartbeat')
    expect(up).to_have_text("answering")
    expect(page.locator('#hosts tr[data-name="host-2"] td.heartbeat')).to_have_text("silent for 2m")
