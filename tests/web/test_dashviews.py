"""The dashboard's views of backups (#/backups, issue 36) and of placement (#/placement and the VM
page's Placement tab, issue 37), in headless Chromium against ``virtplane serve --demo``: the
objects are made through the API, each view shows the rows the API reports, an operator may ask
for a verification and an admin for a plan, a viewer sees no action at all.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from tests.web.demo_server import DemoServer, serve_demo
from tests.web.test_dashboard import show, wait_for
from tests.web.test_workplace import at

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.browser
try:
    from playwright.sync_api import expect
except ImportError:  # tests.web.test_dashboard already failed or skipped the run for it
    pytest.skip("playwright is not installed", allow_module_level=True)

VERIFY_REQUESTED = "virtplane.io/verify-requested"
RUNNING = ("web-1", "web-2", "app-1")
TARGET = {
    "metadata": {"name": "nightly"},
    "spec": {"cluster": "demo", "path": "/srv/backups", "capacity_gib": 100},
}
POLICY = {
    "metadata": {"name": "web-nightly"},
    "spec": {"target": "nightly", "schedule": "0 2 * * *", "selector": "app=web"},
}
RULE = {"metadata": {"name": "web-apart"}, "spec": {"type": "AntiAffinity", "vm_selector": "app=web"}}


def made(client: Any, plural: str, body: dict[str, Any]) -> None:
    response = client.post(f"/v1/{plural}", json=body)
    assert response.status_code == 201, response.text


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    with serve_demo(tmp_path_factory.mktemp("demo") / "data", running=RUNNING) as server:
        with server.client("admin") as admin, server.client("operator") as operator:
            made(admin, "backuptargets", TARGET)
            made(admin, "backuppolicies", POLICY)
            made(admin, "placementrules", RULE)
            made(
                operator,
                "backups",
                {"metadata": {"name": "web-1-b1"}, "spec": {"vm": "web-1", "target": "nightly"}},
            )
        server.process.wait_for("/v1/backups/web-1-b1", lambda b: b["status"]["phase"] == "Succeeded")
        yield server


def test_the_backups_view_shows_backups_targets_and_policies_and_an_operator_verifies(
    page: Page, demo: DemoServer
) -> None:
    at(page, demo, "operator", "#/vms")
    show(page, "backups")
    with demo.client("viewer") as client:
        backup = client.get("/v1/backups/web-1-b1").json()
        target = client.get("/v1/backuptargets/nightly").json()
    row = page.locator('#backups tr[data-name="web-1-b1"]')
    expect(row.locator("td.vm")).to_have_text("web-1")
    expect(row.locator("td.target")).to_have_text("nightly")
    expect(row.locator("td.mode")).to_have_text(backup["status"]["mode"])
    expect(row.locator("td.phase")).to_have_text("Succeeded")
    expect(row.locator("td.consistency")).to_have_text(backup["status"]["consistency"])
    expect(page.locator('#backuptargets tr[data-name="nightly"] td.used')).to_contain_text(
        f"/ {target['status']['capacity_gib'] or 100} GiB"
    )
    expect(page.locator('#backuptargets tr[data-name="nightly"] td.cluster')).to_have_text("demo")
    policy = page.locator('#backuppolicies tr[data-name="web-nightly"]')
    expect(policy.locator("td.schedule")).to_have_text("0 2 * * *")
    expect(policy.locator("td.selector")).to_have_text("app=web")

    row.locator(".menu-toggle").click()
    row.locator('button[data-action="verify"]').click()
    expect(page.locator("#notice")).to_contain_text("Verification of web-1-b1 asked for")
    with demo.client("viewer") as client:
        wait_for(
            lambda: (
                client.get("/v1/backups/web-1-b1").json()["metadata"]["annotations"].get(VERIFY_REQUESTED)
            ),
            "the verification asked for",
        )
    expect(row.locator("td.verified")).to_have_text(re.compile(r"asked|Ok|Failed"))  # or already its result
    with demo.client("viewer") as client:  # the simulated target's check answers the request
        done = wait_for(
            lambda: (client.get("/v1/backups/web-1-b1").json()["status"].get("verification") or {}).get(
                "result"
            ),
            "the verification's result",
        )
    expect(row.locator("td.verified")).to_have_text("Ok" if done == "Ok" else re.compile("^Failed"))


def test_a_viewer_sees_the_views_without_any_action(page: Page, demo: DemoServer) -> None:
    at(page, demo, "viewer", "#/backups")
    row = page.locator('#backups tr[data-name="web-1-b1"]')
    expect(row.locator("td.phase")).to_have_text("Succeeded")
    expect(row.locator(".menu-toggle")).to_have_count(0)
    expect(page.locator('#backuptargets tr[data-name="nightly"] td.health')).to_have_text("Healthy")
    expect(page.locator('#backuppolicies tr[data-name="web-nightly"] td.target')).to_have_text("nightly")
    show(page, "placement")
    expect(page.locator('#placementrules tr[data-name="web-apart"] td.type')).to_have_text("AntiAffinity")
    expect(
        page.locator('#balance .cluster[data-cluster="demo"] table.balance tbody tr').first
    ).to_be_visible()
    expect(page.locator('#balance button[data-action="plan"]')).to_have_count(0)


def test_the_placement_view_shows_rules_balance_and_an_admins_plan_now(page: Page, demo: DemoServer) -> None:
    at(page, demo, "admin", "#/placement")
    rule = page.locator('#placementrules tr[data-name="web-apart"]')
    expect(rule.locator("td.vms")).to_have_text("app=web")
    expect(rule.locator("td.enforcement")).to_have_text("required")
    with demo.client("viewer") as client:
        shown = client.get("/v1/clusters/demo/rebalance").json()
    cluster = page.locator('#balance .cluster[data-cluster="demo"]')
    hosts = sorted(shown["balance"]["hosts"])
    expect(cluster.locator("table.balance tbody tr")).to_have_count(len(hosts))
    for host in hosts:
        expect(cluster.locator(f'table.balance tr[data-host="{host}"] td.load')).to_contain_text(
            f"{shown['balance']['hosts'][host]:.3f}"
        )
    if shown["last"] is None:  # no look by the leader yet: nothing is said of it (no "null")
        expect(cluster.locator(".cluster-body")).not_to_contain_text("null")
    cluster.locator('button[data-action="plan"]').click()
    expect(cluster.locator(".planned")).to_be_visible()
    expect(cluster.locator(".plan-summary")).to_contain_text(f"{shown['plan']['std_before']:.3f}")


def test_the_vm_page_explains_each_hosts_verdict(page: Page, demo: DemoServer) -> None:
    at(page, demo, "viewer", "#/vms/web-1/placement")
    with demo.client("viewer") as client:
        found = client.get("/v1/vms/web-1/placement").json()
    expect(page.locator('#vm-page .tabs a[aria-selected="true"]')).to_have_text("Placement")
    rows = page.locator("#vm-placement tbody tr")
    expect(rows).to_have_count(len(found["hosts"]))
    for verdict in found["hosts"]:
        row = page.locator(f'#vm-placement tr[data-host="{verdict["host"]}"]')
        expect(row.locator("td.verdict")).to_have_text(verdict["verdict"])
        if verdict["verdict"] == "excluded":
            expect(row.locator("td.why")).to_contain_text(verdict["reasons"][0])
    if found["chosen"]:
        expect(page.locator("#vm-page dd.chosen")).to_have_text(found["chosen"])
    expect(page.locator("#vm-page dd.rules")).to_have_text("web-apart")


def test_the_shortcuts_go_to_backups_and_placement_and_the_help_says_so(page: Page, demo: DemoServer) -> None:
    at(page, demo, "viewer", "#/vms")
    for key, view in (("b", "backups"), ("l", "placement")):
        page.keyboard.press("g")
        page.keyboard.press(key)
        expect(page.locator(f'section.view[data-view="{view}"]')).to_be_visible()
        expect(page.locator('#nav a[aria-current="page"]')).to_have_attribute("data-list", view)
    page.keyboard.press("?")
    expect(page.locator('dialog[data-dialog="help"]')).to_contain_text("g bgo to backups")
    expect(page.locator('dialog[data-dialog="help"]')).to_contain_text("g lgo to placement")
