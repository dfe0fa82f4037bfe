"""The dashboard in a real headless Chromium against the live server (simulated hosts).

Every test signs in through the page's form, as an operator would, and checks what
the page shows against what the JSON API says.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.conftest import FULL_RUN, LiveServer
from tests.web.browser import sign_in
from tests.web.demo_server import DemoServer
from virtplane.domain.resources import EventType

if TYPE_CHECKING:
    from playwright.sync_api import Page, Route

pytestmark = pytest.mark.browser
try:
    from playwright.sync_api import expect
except ImportError:
    if FULL_RUN:  # a full run installs it: missing is a failure, not a skip
        raise
    pytest.skip("playwright is not installed", allow_module_level=True)

SCREENSHOT = "/tmp/virtplane-dashboard.png"
HOSTILE_SCRIPT = "<script>window.__pwned = 1</script>"
HOSTILE_IMG = '<img src="x" onerror="window.__pwned = 2">'
NOTHING = "\N{EN DASH}"  # what the page shows for an empty value


def ended_watch(route: Route) -> bool:
    """Answer a host watch with one bookmark, so that it ends at once and the page keeps the
    state it listed; False (nothing answered) for any other request."""
    query = parse_qs(urlsplit(route.request.url).query)
    if "watch" not in query:
        return False
    revision = int(query["resource_version"][0])
    bookmark = {"type": "BOOKMARK", "object": {"kind": "Host", "metadata": {"resource_version": revision}}}
    route.fulfill(status=200, content_type="application/x-ndjson", body=json.dumps(bookmark) + "\n")
    return True


def wait_for(check: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    """Poll ``check`` until it returns something truthy (the deadline only bounds a hang)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"{what}: not reached (last value: {last!r})")


def host(name: str) -> dict[str, Any]:
    return {
        "kind": "Host",
        "metadata": {"name": name, "labels": {"rack": "r1"}},
        "spec": {"uri": f"sim://{name}", "cluster": "demo", "capacity": {"vcpus": 16, "memory_mib": 32768}},
    }


def vm(name: str, policy: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "kind": "VirtualMachine",
        "metadata": {"name": name, "labels": labels or {"app": name.split("-")[0]}},
        "spec": {"run_policy": policy, "cpu": 2, "memory_mib": 2048},
    }


def create(client: httpx.Client, plural: str, body: dict[str, Any]) -> None:
    response = client.post(f"/v1/{plural}", json=body)
    assert response.status_code == 201, response.text


def vm_status(client: httpx.Client, name: str) -> dict[str, Any]:
    status: dict[str, Any] = client.get(f"/v1/vms/{name}").json()["status"]
    return status


def demo_world(live_server: LiveServer) -> None:
    """Two hosts and three VMs; returns once web-1 and app-1 run and the hosts are Up."""
    with live_server.client("admin") as client:
        create(client, "hosts", host("host-1"))
        create(client, "hosts", host("host-2"))
        create(client, "vms", vm("web-1", "AlwaysOn"))
        create(client, "vms", vm("app-1", "AlwaysOnUnlessStoppedManually"))
        create(client, "vms", vm("archive-1", "AlwaysOff"))
        wait_for(
            lambda: all(vm_status(client, name)["phase"] == "Running" for name in ("web-1", "app-1")),
            "web-1 and app-1 Running in the API",
        )
        wait_for(
            lambda: all(h["status"]["connection"] == "Up" for h in client.get("/v1/hosts").json()["items"]),
            "both hosts Up in the API",
        )


def signed_in(page: Page, live_server: LiveServer | DemoServer, role: str = "admin") -> None:
    sign_in(page, live_server.url, live_server.tokens[role])
    expect(page.locator("#dashboard")).to_be_visible()
    expect(page.locator("#status-text")).to_contain_text("live")


def show(page: Page, view: str) -> None:
    """The view of the navigation's link ``view`` (vms, hosts, storage, ..., events)."""
    page.click(f'#nav a[data-list="{view}"]')
    expect(page.locator(f'section.view[data-view="{view}"]')).to_be_visible()
    assert page.url.endswith(f"#/{view}")


def test_hosts_vms_and_operations_show_what_the_api_reports(page: Page, live_server: LiveServer) -> None:
    demo_world(live_server)
    signed_in(page, live_server, "viewer")
    assert page.url == live_server.url + "/ui/"

    web = page.locator('#vms tr[data-name="web-1"]')
    expect(web.locator("td.phase")).to_have_text("Running")
    expect(web.locator("td.policy")).to_have_text("AlwaysOn")
    with live_server.client("admin") as client:
        for name in ("web-1", "app-1", "archive-1"):
            status = vm_status(client, name)
            row = page.locator(f'#vms tr[data-name="{name}"]')
            expect(row.locator("td.phase")).to_have_text(status["phase"])
            expect(row.locator("td.host")).to_have_text(status["host"] or NOTHING)
        expect(web.locator("td.conditions")).to_contain_text("Ready")

        for name in ("host-1", "host-2"):
            row = page.locator(f'#hosts tr[data-name="{name}"]')
            expect(row.locator("td.state")).to_have_text("Enabled")
            expect(row.locator("td.connection")).to_have_text("Up")
            offered = client.get(f"/v1/hosts/{name}").json()["status"]["allocatable"]["vcpus"]
            assert offered == 64, "16 vCPUs at the default cpu_allocation_ratio 4.0"
            expect(row.locator("td.cpu")).to_contain_text(f"/ {offered}")
        allocated = sum(h["status"]["allocated"]["vms"] for h in client.get("/v1/hosts").json()["items"])
        assert allocated == 2
        expect(page.locator('#vm-counts [data-value="Running"] .count-n')).to_have_text("2")
        expect(page.locator("#vm-total")).to_have_text("3")
        expect(page.locator('#host-counts [data-value="Enabled"] .count-n')).to_have_text("2")

        # an operation shows up with its phase; it ends Completed as in the API
        create(
            client,
            "operations",
            {
                "kind": "VirtualMachineOperation",
                "metadata": {"name": "stop-app-1"},
                "spec": {"vm": "app-1", "type": "Stop"},
            },
        )
        wait_for(
            lambda: client.get("/v1/operations/stop-app-1").json()["status"]["phase"] == "Completed",
            "the Stop operation Completed in the API",
        )
        op = page.locator('#operations tr[data-name="stop-app-1"]')
        expect(op.locator("td.phase")).to_have_text("Completed")
        expect(op).to_contain_text("app-1")
        expect(op).to_contain_text("Stop")
        wait_for(lambda: vm_status(client, "app-1")["phase"] == "Stopped", "app-1 Stopped in the API")
        expect(page.locator('#vms tr[data-name="app-1"] td.phase')).to_have_text("Stopped")
        expect(page.locator('#vm-counts [data-value="Running"] .count-n')).to_have_text("1")

    # clicking a phase count filters the VM table to that phase, clicking again shows all
    page.click('#vm-counts [data-value="Running"]')
    expect(page.locator("#vms tbody tr")).to_have_count(1)
    expect(page.locator("#vms tbody tr")).to_have_attribute("data-name", "web-1")
    page.click('#vm-counts [data-value="Running"]')
    expect(page.locator("#vms tbody tr")).to_have_count(3)

    expect(page.locator("#maintenance-panel")).to_be_hidden()
    expect(page.locator("#banner")).to_be_hidden()
    page.screenshot(path=SCREENSHOT, full_page=True)


def test_a_bad_token_gets_the_401_message_and_the_form_again(page: Page, live_server: LiveServer) -> None:
    sign_in(page, live_server.url, "vp_not-a-real-token")
    expect(page.locator("#login-error")).to_be_visible()
    expect(page.locator("#login-error")).to_contain_text("401")
    expect(page.locator("#login-error")).to_contain_text("token")
    expect(page.locator("#dashboard")).to_be_hidden()
    expect(page.locator("#status-text")).to_have_text("unauthorized")
    assert page.evaluate("sessionStorage.getItem('virtplane.token')") is None

    # a good token then works from the same form
    page.fill("#token-input", live_server.tokens["viewer"])
    page.click("#login-submit")
    expect(page.locator("#status-text")).to_contain_text("live")
    expect(page.locator("#login-error")).to_be_hidden()


def test_the_token_is_kept_for_the_tab_and_sign_out_forgets_it(page: Page, live_server: LiveServer) -> None:
    signed_in(page, live_server)
    page.reload()
    expect(page.locator("#dashboard")).to_be_visible()
    expect(page.locator("#login")).to_be_hidden()
    expect(page.locator("#status-text")).to_contain_text("live")
    page.click("#signout")
    expect(page.locator("#login")).to_be_visible()
    expect(page.locator("#login-error")).to_be_hidden()
    assert page.evaluate("sessionStorage.getItem('virtplane.token')") is None


def test_hostile_names_are_shown_as_text_and_never_run(page: Page, live_server: LiveServer) -> None:
    with live_server.client("admin") as client:
        create(client, "vms", vm("evil", "AlwaysOff", labels={"note": HOSTILE_SCRIPT, "img": HOSTILE_IMG}))
    live_server.store.record_event("VirtualMachine", "evil", "Hostile", HOSTILE_IMG + HOSTILE_SCRIPT)
    signed_in(page, live_server)

    labels = page.locator('#vms tr[data-name="evil"] td.labels')
    expect(labels).to_contain_text(f"note={HOSTILE_SCRIPT}")
    expect(labels).to_contain_text(f"img={HOSTILE_IMG}")
    event = page.locator('#events tr[data-reason="Hostile"] td.message')
    expect(event).to_have_text(HOSTILE_IMG + HOSTILE_SCRIPT)

    assert page.locator("main script, main img").count() == 0
    assert page.evaluate("window.__pwned") is None


def test_the_event_log_follows_new_events(page: Page, live_server: LiveServer) -> None:
    with live_server.client("admin") as client:
        create(client, "hosts", host("host-1"))
    signed_in(page, live_server)
    expect(page.locator('#events tr[data-reason="Created"] td.object')).to_have_text(["Host/host-1"])

    with live_server.client("operator") as client:
        create(client, "vms", vm("late-1", "AlwaysOff"))
    newest = page.locator("#events tbody tr").first
    expect(newest.locator("td.object")).to_have_text("VirtualMachine/late-1")
    expect(newest.locator("td.reason")).to_have_text("Created")
    expect(newest.locator("td.message")).to_contain_text("test-operator")

    # a later event arrives too, and earlier ones are not shown twice
    live_server.store.record_event("VirtualMachine", "late-1", "Poked", "second event", EventType.WARNING)
    expect(page.locator("#events tbody tr").first.locator("td.reason")).to_have_text("Poked")
    expect(page.locator("#events tbody tr").first.locator("td.type")).to_have_text("Warning")
    expect(page.locator('#events tr[data-reason="Created"] td.object')).to_have_text(
        ["VirtualMachine/late-1", "Host/host-1"]
    )


def test_an_unreachable_server_is_reported_and_the_page_recovers(page: Page, live_server: LiveServer) -> None:
    signed_in(page, live_server)
    page.route("**/v1/**", lambda route: route.abort("connectionrefused"))
    live_server.plane.api_context.streams.end_all()  # the open watches end, as when the server goes
    expect(page.locator("#banner")).to_be_visible()
    expect(page.locator("#banner")).to_contain_text("Cannot reach the virtplane API")
    expect(page.locator("#status-text")).to_have_text("server unreachable")
    expect(page.locator("#dashboard")).to_be_visible()  # the last data stays on screen

    page.unroute("**/v1/**")
    expect(page.locator("#banner")).to_be_hidden()
    expect(page.locator("#status-text")).to_contain_text("live")


def test_host_maintenance_progress_is_shown_while_there_is_one(page: Page, live_server: LiveServer) -> None:
    """The maintenance and host answers are shaped by the test; the server's own 404 hides the panel."""
    with live_server.client("admin") as client:
        create(client, "hosts", host("host-1"))
        wait_for(lambda: client.get("/v1/hosts/host-1").json()["status"]["connection"] == "Up", "host Up")
    maintenance = {  # the shape GET /v1/hosts/{name}/maintenance answers with
        "host": "host-1",
        "phase": "Draining",
        "host_state": "PrepareForMaintenance",
        "strategy": "Migration",
        "dry_run": False,
        "plan": {
            "feasible": True,
            "items": [
                {
                    "vm": "web-1",
                    "action": "Migrate",
                    "target": "host-2",
                    "reason": "shared disks",
                    "risk": "may not converge: it dirtied 900 MiB/s",
                },
                {"vm": "db-1", "action": "Stop", "target": None, "reason": "local disks"},
            ],
        },
        "progress": {
            "web-1": {
                "state": "Migrating",
                "target": "host-2",
                "attempts": 1,
                "progress_pct": 40.0,
                "iteration": 3,
                "dirty_rate_mib_s": 912.4,
                "remaining_mib": 311.6,
                "post_copy": False,
            },
            "db-1": {"state": "Stopped", "progress_pct": 100.0, "message": HOSTILE_SCRIPT},
        },
        "message": "draining host-1",
    }

    def hosts_in_maintenance(route: Route) -> None:
        if ended_watch(route):
            return
        response = route.fetch()
        body = response.json()
        for item in body["items"]:
            item["status"]["resource_state"] = "PrepareForMaintenance"
        route.fulfill(response=response, json=body)

    hosts = f"{live_server.url}/v1/hosts?*"
    page.route(hosts, hosts_in_maintenance)
    page.route(
        f"{live_server.url}/v1/hosts/host-1/maintenance", lambda route: route.fulfill(json=maintenance)
    )
    signed_in(page, live_server)
    show(page, "hosts")

    block = page.locator('#maintenance .maintenance[data-host="host-1"]')
    expect(page.locator("#maintenance-panel")).to_be_visible()
    expect(block.locator("h3")).to_contain_text("Draining")
    expect(block.locator("h3")).to_contain_text("strategy Migration")
    expect(block).to_contain_text("draining host-1")
    web = block.locator('tr[data-vm="web-1"]')
    expect(web.locator("td.state")).to_have_text("Migrating")
    expect(web).to_contain_text("40%")
    expect(web.locator("td.message")).to_contain_text("pass 3, dirtying 912 MiB/s, 312 MiB left")
    expect(web.locator("td.message")).to_contain_text("risk: may not converge")
    expect(web).to_contain_text("host-2")
    expect(block.locator('tr[data-vm="db-1"] td.message')).to_have_text(HOSTILE_SCRIPT)
    expect(page.locator('#hosts tr[data-name="host-1"] td.state')).to_have_text("PrepareForMaintenance")

    # the real server has no maintenance for the host (404): once the host changes, the page
    # follows the real one again and the panel goes away
    page.unroute(f"{live_server.url}/v1/hosts/host-1/maintenance")
    page.unroute(hosts)
    with live_server.client("admin") as client:
        assert (
            client.patch("/v1/hosts/host-1", json={"metadata": {"labels": {"rack": "r2"}}}).status_code == 200
        )
    expect(page.locator("#maintenance-panel")).to_be_hidden()
    expect(page.locator('#hosts tr[data-name="host-1"] td.state')).to_have_text("Enabled")


def test_a_real_host_maintenance_shows_its_phase_and_progress(page: Page, live_server: LiveServer) -> None:
    demo_world(live_server)
    signed_in(page, live_server)
    show(page, "hosts")
    with live_server.client("admin") as client:
        drained = vm_status(client, "web-1")["host"]  # a host with a running VM to move
        asked = client.post(f"/v1/hosts/{drained}/maintenance", json={"strategy": "Migration"})
        assert asked.status_code == 200, asked.text

        def completed() -> dict[str, Any] | None:
            shown: dict[str, Any] = client.get(f"/v1/hosts/{drained}/maintenance").json()
            return shown if shown["phase"] == "Completed" else None

        done = wait_for(completed, f"the maintenance of {drained} Completed in the API")
        assert client.get(f"/v1/hosts/{drained}").json()["status"]["resource_state"] == "Maintenance"
        assert "web-1" in done["progress"]
        web_moved_to = vm_status(client, "web-1")["host"]
        assert web_moved_to not in (None, drained)

    block = page.locator(f'#maintenance .maintenance[data-host="{drained}"]')
    expect(block.locator("h3")).to_contain_text("Completed")
    expect(block.locator("h3")).to_contain_text("strategy Migration")
    expect(page.locator(f'#hosts tr[data-name="{drained}"] td.state')).to_have_text("Maintenance")
    for vm_name, progress in done["progress"].items():
        expect(block.locator(f'tr[data-vm="{vm_name}"] td.state')).to_have_text(progress["state"])
    expect(page.locator('#vms tr[data-name="web-1"] td.host')).to_have_text(web_moved_to)
    page.screenshot(path="/tmp/virtplane-maintenance.png", full_page=True)


def test_the_page_follows_watches_and_never_polls(page: Page, live_server: LiveServer) -> None:
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    signed_in(page, live_server, "viewer")
    with live_server.client("operator") as client:
        create(client, "vms", vm("late-1", "AlwaysOff"))
        expect(page.locator('#vms tr[data-name="late-1"] td.phase')).to_have_text("Stopped")
        create(client, "vms", vm("late-2", "AlwaysOff"))
        expect(page.locator('#vms tr[data-name="late-2"] td.phase')).to_have_text("Stopped")
    vm_requests = [url for url in requests if "/v1/vms?" in url]
    assert [url for url in vm_requests if "watch=1" not in url] == [f"{live_server.url}/v1/vms?limit=500"]
    assert len([url for url in vm_requests if "watch=1" in url]) == 1, vm_requests


def test_the_event_log_loads_older_pages_on_request(page: Page, live_server: LiveServer) -> None:
    for i in range(120):
        live_server.store.record_event("VirtualMachine", f"vm-{i}", f"Step{i}")
    signed_in(page, live_server, "viewer")
    show(page, "events")
    rows = page.locator("#events tbody tr")
    expect(rows).to_have_count(50)
    expect(rows.first.locator("td.reason")).to_have_text("Step119")  # newest first
    expect(rows.last.locator("td.reason")).to_have_text("Step70")
    older = page.locator("#events-older")
    older.click()
    expect(rows).to_have_count(100)
    expect(rows.last.locator("td.reason")).to_have_text("Step20")
    older.click()
    expect(rows).to_have_count(120)
    expect(rows.last.locator("td.reason")).to_have_text("Step0")
    expect(older).to_be_hidden()

    live_server.store.record_event("VirtualMachine", "vm-0", "Newest")
    expect(rows.first.locator("td.reason")).to_have_text("Newest")
    expect(rows).to_have_count(121)
