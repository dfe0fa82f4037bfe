"""The dashboard as an operator's workplace, in headless Chromium against ``virtplane serve --demo``:
hash routes with back and forward, the VM list (search, sort, filters, a bulk action, the menu
kept inside a 1024 px and a 390 px window), the VM page's tabs (the YAML applied, or its refusal
shown), the host page, the storage, image, network and snapshot views, per role, dark mode and
the keyboard shortcuts. One demo server for the module; each check is compared with the API.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.web.demo_server import DemoServer, operations_of, serve_demo, vm
from tests.web.test_dashboard import show, signed_in, wait_for

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.browser
try:
    from playwright.sync_api import expect
except ImportError:  # tests.web.test_dashboard already failed or skipped the run for it
    pytest.skip("playwright is not installed", allow_module_level=True)

RUNNING = ("web-1", "web-2", "app-1")
NET_VM = "net-1"  # a VM with a NIC on the demo's bridge network "lan": it gets an address


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    with serve_demo(tmp_path_factory.mktemp("demo") / "data", running=RUNNING) as server:
        with server.client("operator") as client:
            made = client.post(
                "/v1/vms",
                json={
                    "kind": "VirtualMachine",
                    "metadata": {"name": NET_VM, "labels": {"app": "net"}},
                    "spec": {"run_policy": "AlwaysOff", "nics": [{"network": "lan"}]},
                },
            )
            assert made.status_code == 201, made.text
        yield server


def at(page: Page, demo: DemoServer, role: str, route: str) -> None:
    """Signed in as ``role``, then the page loaded afresh at ``route`` (a deep link)."""
    signed_in(page, demo, role)
    expect(page.locator("#whoami")).to_have_text(f"web-{role} · {role}")
    page.goto(f"{demo.url}/ui/{route}")
    expect(page.locator("#status-text")).to_contain_text("live")


def test_deep_links_load_and_back_and_forward_follow_the_views(page: Page, demo: DemoServer) -> None:
    at(page, demo, "viewer", "#/vms/web-1/disks")
    expect(page.locator("#vm-page h1")).to_have_text("web-1")
    expect(page.locator('#vm-page .tabs a[aria-selected="true"]')).to_have_text("Disks")
    expect(page.locator('#vm-tab tr[data-volume="web-1-root"] td.pool')).to_have_text("shared")
    show(page, "hosts")
    show(page, "storage")
    page.go_back()
    expect(page.locator('section.view[data-view="hosts"]')).to_be_visible()
    page.go_back()
    expect(page.locator('section.view[data-view="vm"]')).to_be_visible()
    page.go_forward()
    expect(page.locator('section.view[data-view="hosts"]')).to_be_visible()
    expect(page.locator('#nav a[aria-current="page"]')).to_have_text("Hosts")


def test_the_vm_list_searches_sorts_filters_and_shows_one_line_per_vm(page: Page, demo: DemoServer) -> None:
    at(page, demo, "viewer", "#/vms")
    rows = page.locator("#vms tbody tr")
    with demo.client("viewer") as client:
        names = sorted(v["metadata"]["name"] for v in client.get("/v1/vms").json()["items"])
    expect(rows).to_have_count(len(names))
    page.fill('[data-list="vms"] .list-search', "web")
    expect(rows).to_have_count(2)
    page.fill('[data-list="vms"] .list-search', "")
    page.click('#vms th[data-key="name"]')  # sorted by name already: this reverses it
    expect(page.locator("#vms tbody tr td.name")).to_have_text(list(reversed(names)))
    page.select_option('[data-list="vms"] select[data-filter="phase"]', "Stopped")
    stopped = [n for n in names if vm(demo, n)["status"]["phase"] == "Stopped"]
    expect(page.locator("#vms tbody tr td.name")).to_have_text(sorted(stopped, reverse=True))
    page.select_option('[data-list="vms"] select[data-filter="phase"]', "")
    page.select_option('[data-list="vms"] select[data-filter="label"]', "app=web")
    expect(page.locator("#vms tbody tr td.name")).to_have_text(["web-2", "web-1"])
    heights = page.locator("#vms tbody tr").evaluate_all(
        "rows => rows.map(r => r.getBoundingClientRect().height)"
    )
    assert max(heights) < 48, f"one line per VM: {heights}"
    address = vm(demo, NET_VM)["status"]["nics"][0]["ip"]
    assert address, "the bridge network gave the NIC an address"
    page.select_option('[data-list="vms"] select[data-filter="label"]', "")
    expect(page.locator(f'#vms tr[data-name="{NET_VM}"] td.address')).to_have_text(address)
    time = page.locator('#vms tr[data-name="web-1"] td.age time')
    expect(time).to_have_text(re.compile(r"^\d+[smhd] ago$"))
    expect(time).to_have_attribute("title", re.compile(r"\d{2}:\d{2}:\d{2}"))


def test_a_bulk_restart_of_the_selected_vms(page: Page, demo: DemoServer) -> None:
    at(page, demo, "operator", "#/vms")
    for name in ("web-1", "web-2"):
        page.locator(f'#vms tr[data-name="{name}"] td.select input').check()
    expect(page.locator("#vm-bulk-count")).to_have_text("2 selected")
    page.click('#vm-bulk button[data-bulk="restart"]')
    expect(page.locator("#notice")).to_contain_text("Restart of 2 VMs: 2 operations created.")
    for name in ("web-1", "web-2"):
        wait_for(lambda name=name: operations_of(demo, name, "Restart"), f"a Restart of {name} in the API")
    expect(page.locator("#vm-bulk")).to_be_hidden()


@pytest.mark.parametrize("width", [1024, 390])
def test_the_actions_menu_opens_inside_a_narrow_window(
    page: Page, demo: DemoServer, screenshots: Path, width: int
) -> None:
    page.set_viewport_size({"width": width, "height": 800})
    at(page, demo, "operator", "#/vms")
    row = page.locator('#vms tr[data-name="web-1"]')
    toggle = row.locator("button.menu-toggle")
    box = toggle.bounding_box()
    assert box is not None and box["x"] + box["width"] <= width, (
        f"the Actions button is cut at {width} px: {box}"
    )
    toggle.click()
    menu = row.locator(".menu")
    expect(menu).to_be_visible()
    shown = menu.bounding_box()
    assert shown is not None and shown["x"] >= 0 and shown["x"] + shown["width"] <= width, shown
    page.screenshot(path=screenshots / f"vm-list-{width}.png")
    expect(menu.locator("button").first).to_be_focused()
    page.keyboard.press("ArrowDown")
    expect(menu.locator("button").nth(1)).to_be_focused()
    page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowUp")  # round to the last
    expect(menu.locator("button").last).to_be_focused()
    page.keyboard.press("Escape")
    expect(menu).to_be_hidden()


def test_the_vm_page_tabs_and_the_yaml_applied_or_refused(
    page: Page, demo: DemoServer, screenshots: Path
) -> None:
    at(page, demo, "operator", f"#/vms/{NET_VM}")
    expect(page.locator("#vm-usage")).to_contain_text("CPU (of its vCPUs)")  # usage-charts.js mounted
    page.screenshot(path=screenshots / "vm-page.png")
    expect(page.locator('#vm-page .action-buttons button[data-action="start"]')).to_be_visible()
    page.click('#vm-page .tabs a[data-tab="nics"]')
    nic = vm(demo, NET_VM)["status"]["nics"][0]
    expect(page.locator(f'#vm-tab tr[data-mac="{nic["mac"]}"] td.ip')).to_contain_text(nic["ip"])
    page.click('#vm-page .tabs a[data-tab="events"]')
    expect(page.locator("#vm-tab .vm-events tbody tr").first).to_be_visible()
    expect(page.locator('#vm-tab .vm-events tr[data-reason="Created"]')).to_have_count(1)

    page.click('#vm-page .tabs a[data-tab="yaml"]')
    editor = page.locator("#yaml-editor")
    expect(editor).to_have_value(re.compile(r"name: net-1"))
    editor.fill(editor.input_value().replace("app: net", "app: net\n    tier: edge"))
    page.click('[data-act="apply"]')
    expect(page.locator("#notice")).to_contain_text(f"VM {NET_VM} configured")
    page.screenshot(path=screenshots / "vm-yaml.png")
    assert vm(demo, NET_VM)["metadata"]["labels"] == {"app": "net", "tier": "edge"}
    editor.fill(re.sub(r"cpu: \d+", "cpu: 0", editor.input_value()))
    page.click('[data-act="apply"]')
    expect(page.locator("#yaml-error")).to_be_visible()
    expect(page.locator("#yaml-error")).to_contain_text("HTTP 422")
    assert vm(demo, NET_VM)["spec"]["cpu"] == 1, "the refused change was not written"

    # someone else changes the labels meanwhile: applying over them is refused, not a lost update
    page.click('#vm-page .tabs a[data-tab="summary"]')
    page.click('#vm-page .tabs a[data-tab="yaml"]')
    expect(editor).to_have_value(re.compile(r"tier: edge"))
    editor.fill(editor.input_value().replace("tier: edge", "tier: core"))
    with demo.client("operator") as client:
        patched = client.patch(f"/v1/vms/{NET_VM}", json={"metadata": {"labels": {"owner": "ops"}}})
        assert patched.status_code == 200, patched.text
    page.click('[data-act="apply"]')
    expect(page.locator("#yaml-error")).to_contain_text("Conflict")
    assert vm(demo, NET_VM)["metadata"]["labels"]["tier"] == "edge"


def test_snapshots_are_a_tree_on_the_vm_page_and_restore_from_it(page: Page, demo: DemoServer) -> None:
    with demo.client("operator") as client:
        for name in ("app-1-first", "app-1-second"):
            made = client.post(
                "/v1/snapshots",
                json={"kind": "VirtualMachineSnapshot", "metadata": {"name": name}, "spec": {"vm": "app-1"}},
            )
            assert made.status_code == 201, made.text
            wait_for(
                lambda name=name: client.get(f"/v1/snapshots/{name}").json()["status"]["phase"] == "Ready",
                f"{name} Ready",
            )
    at(page, demo, "operator", "#/vms/app-1/snapshots")
    second = page.locator('#snapshot-tree li[data-snapshot="app-1-first"] li[data-snapshot="app-1-second"]')
    expect(second).to_have_count(1)
    second.locator('button[data-restore="app-1-second"]').first.click()
    restore = page.locator('dialog[data-dialog="restore"]')
    expect(restore.locator('select[name="snapshot"]')).to_have_value("app-1-second")
    restore.locator('[data-act="cancel"]').click()
    show(page, "snapshots")
    expect(page.locator('#snapshots tr[data-name="app-1-second"] td.phase')).to_have_text("Ready")


def test_the_host_page_shows_allocation_vms_and_history(
    page: Page, demo: DemoServer, screenshots: Path
) -> None:
    with demo.client("admin") as admin:  # an event of the host's own (the demo's are seeded quietly)
        patched = admin.patch("/v1/hosts/host-1", json={"metadata": {"labels": {"rack": "r1", "row": "a"}}})
        assert patched.status_code == 200, patched.text
    with demo.client("viewer") as client:
        host = client.get("/v1/hosts/host-1").json()
        on_host = sorted(
            v["metadata"]["name"]
            for v in client.get("/v1/vms", params={"fieldSelector": "status.host=host-1"}).json()["items"]
        )
    at(page, demo, "admin", "#/hosts")
    page.click('#hosts tr[data-name="host-1"] td.name a')
    assert page.url.endswith("#/hosts/host-1")
    allocated = host["status"]["allocated"]
    expect(page.locator("#host-allocation dd.cpu")).to_contain_text(
        f"{allocated['vcpus']} / {host['status']['allocatable']['vcpus']}"
    )
    expect(page.locator("#host-usage")).to_contain_text("CPU (of its CPUs)")  # usage-charts.js mounted
    expect(page.locator("#host-vms tbody tr td.name")).to_have_text(on_host)
    expect(page.locator('#host-events tr[data-reason="Updated"] td.message')).to_contain_text("web-admin")
    expect(page.locator('#host-page .action-buttons button[data-action="maintenance"]')).to_be_visible()
    page.screenshot(path=screenshots / "host-page.png", full_page=True)


def test_the_storage_image_and_network_views_show_what_the_api_lists(
    page: Page, demo: DemoServer, screenshots: Path
) -> None:
    at(page, demo, "viewer", "#/storage")
    with demo.client("viewer") as client:
        pools = [p["metadata"]["name"] for p in client.get("/v1/storagepools").json()["items"]]
        volumes = client.get("/v1/volumes").json()["items"]
        images = client.get("/v1/images").json()["items"]
    expect(page.locator("#pools tbody tr")).to_have_count(len(pools))
    expect(page.locator("#volumes tbody tr")).to_have_count(len(volumes))
    expect(page.locator('#volumes tr[data-name="web-1-root"] td.vm')).to_have_text("web-1")
    page.screenshot(path=screenshots / "storage.png", full_page=True)
    show(page, "images")
    expect(page.locator('#images tr[data-name="debian-12"] td.phase')).to_have_text("Ready")
    expect(page.locator("#images tbody tr")).to_have_count(len(images))
    show(page, "networks")
    address = vm(demo, NET_VM)["status"]["nics"][0]["ip"]
    expect(page.locator('#networks tr[data-name="lan"] td.subnet')).to_have_text("10.42.0.0/24")
    expect(page.locator("#allocations tbody tr", has_text=address).locator("td.vm")).to_have_text(NET_VM)
    page.screenshot(path=screenshots / "networks.png", full_page=True)


def test_a_shown_view_follows_its_kinds_without_a_reload(page: Page, demo: DemoServer) -> None:
    """A volume made and deleted through the API while #/storage is open comes and goes on its
    own: the view watches what it lists (red with the watch left out: the row never shows)."""
    at(page, demo, "viewer", "#/storage")
    expect(page.locator('#volumes tr[data-name="web-1-root"]')).to_be_visible()
    with demo.client("operator") as client:
        pool = client.get("/v1/volumes/web-1-root").json()["spec"]["pool"]
        made = client.post(
            "/v1/volumes", json={"metadata": {"name": "watched-vol"}, "spec": {"pool": pool, "size_gib": 1}}
        )
        assert made.status_code == 201, made.text
        expect(page.locator('#volumes tr[data-name="watched-vol"]')).to_be_visible()
        assert client.delete("/v1/volumes/watched-vol").status_code in (200, 202)
    expect(page.locator('#volumes tr[data-name="watched-vol"]')).to_have_count(0)


def test_a_viewer_gets_no_mutating_control_and_the_api_refuses_one(page: Page, demo: DemoServer) -> None:
    at(page, demo, "viewer", f"#/vms/{NET_VM}/yaml")
    expect(page.locator("#yaml-editor")).to_have_attribute("readonly", "")
    expect(page.locator('[data-act="apply"]')).to_be_hidden()
    assert page.locator("#vm-page button[data-action]").count() == 0
    show(page, "vms")
    expect(page.locator("#vms tbody tr").first).to_be_visible()
    assert page.locator("#vms button.menu-toggle").count() == 0
    expect(page.locator("#vms td.select").first).to_be_hidden()
    with demo.client("viewer") as client:
        body = client.get(f"/v1/vms/{NET_VM}").json()
        assert client.put(f"/v1/vms/{NET_VM}", json=body).status_code == 403
        assert (
            client.post("/v1/vms/actions/start", json={"fieldSelector": "metadata.name=web-1"}).status_code
            == 403
        )


def test_dark_mode_and_keyboard_shortcuts(page: Page, demo: DemoServer, screenshots: Path) -> None:
    page.emulate_media(color_scheme="dark")
    at(page, demo, "operator", "#/vms")
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background != "rgb(244, 246, 249)", "the dark palette is applied"
    page.screenshot(path=screenshots / "dark.png")
    page.click("#theme")
    assert page.evaluate("document.documentElement.dataset.theme") == "light"
    page.keyboard.press("g")
    page.keyboard.press("h")
    expect(page.locator('section.view[data-view="hosts"]')).to_be_visible()
    page.keyboard.press("/")
    expect(page.locator('[data-list="hosts"] .list-search')).to_be_focused()
    page.keyboard.press("Escape")
    page.locator("body").click()
    page.keyboard.press("?")
    expect(page.locator('dialog[data-dialog="help"]')).to_contain_text("go to vms")


def test_an_image_upload_is_hashed_in_the_browser_and_streamed_with_progress(
    page: Page, demo: DemoServer, tmp_path: Path
) -> None:
    content = os.urandom(9 * 1024 * 1024 + 123)  # three of the page's 4 MiB chunks, the last one short
    upload = tmp_path / "tiny-disk.img"
    upload.write_bytes(content)
    at(page, demo, "admin", "#/images")
    expect(page.locator("#upload-pool")).to_have_value("images")
    page.set_input_files("#upload-file", str(upload))
    expect(page.locator("#upload-name")).to_have_value("tiny-disk")
    page.select_option('#upload-form select[name="format"]', "qcow2")  # not what the bytes are
    page.click('[data-act="upload"]')
    expect(page.locator("#upload-error")).to_contain_text("WrongFormat")
    expect(page.locator("#upload-error")).to_contain_text("HTTP 422")

    page.select_option('#upload-form select[name="format"]', "raw")
    page.click('[data-act="upload"]')
    expect(page.locator("#notice")).to_contain_text("Image tiny-disk uploaded into images.")
    expect(page.locator("#upload-progress")).to_have_js_property("value", 1)
    with demo.client("viewer") as client:
        image = client.get("/v1/images/tiny-disk").json()
    assert image["spec"]["upload"]["sha256"] == hashlib.sha256(content).hexdigest()
    expect(page.locator('#images tr[data-name="tiny-disk"]')).to_have_count(1)


def test_only_an_admin_gets_the_upload_form(page: Page, demo: DemoServer) -> None:
    at(page, demo, "operator", "#/images")
    expect(page.locator('#images tr[data-name="debian-12"]')).to_have_count(1)
    expect(page.locator("#upload-form")).to_be_hidden()


def test_an_operation_page_shows_its_progress_and_task_log_live(
    page: Page, demo: DemoServer, screenshots: Path
) -> None:
    at(page, demo, "viewer", "#/operations")
    with demo.client("operator") as client:
        made = client.post(
            "/v1/operations",
            json={
                "kind": "VirtualMachineOperation",
                "metadata": {"name": "restart-app-1-live"},
                "spec": {"vm": "app-1", "type": "Restart"},
            },
        )
        assert made.status_code == 201, made.text
    page.click('#operations tr[data-name="restart-app-1-live"] td.name a')
    assert page.url.endswith("#/operations/restart-app-1-live")
    expect(page.locator("#op-summary dd.phase")).to_have_text("Completed")
    with demo.client("viewer") as client:
        events = client.get(
            "/v1/events", params={"kind": "VirtualMachineOperation", "name": "restart-app-1-live"}
        ).json()["items"]
    reasons = [e["reason"] for e in reversed(events)]  # newest first, as the log shows them
    expect(page.locator("#op-log tbody tr td.reason")).to_have_text(reasons)
    page.screenshot(path=screenshots / "operation.png")


def test_the_vm_page_events_follow_new_events(page: Page, demo: DemoServer) -> None:
    at(page, demo, "operator", f"#/vms/{NET_VM}/events")
    expect(page.locator("#vm-tab .vm-events tbody tr").first).to_be_visible()
    with demo.client("operator") as client:
        patched = client.patch(
            f"/v1/vms/{NET_VM}", json={"metadata": {"labels": {"app": "net", "seen": "now"}}}
        )
        assert patched.status_code == 200, patched.text
    newest = page.locator("#vm-tab .vm-events tbody tr").first
    expect(newest.locator("td.reason")).to_have_text("Updated")
    expect(newest.locator("td.message")).to_contain_text("web-operator")


def test_the_event_log_searches_and_filters_by_kind(page: Page, demo: DemoServer) -> None:
    at(page, demo, "viewer", "#/events")
    shown = page.locator("#events tbody tr:visible td.object")
    expect(shown.first).to_be_visible()
    page.select_option("#events-kind", "Host")
    expect(shown.first).to_contain_text("Host/")
    objects = shown.all_text_contents()
    assert objects and all(o.startswith("Host/") for o in objects), objects
    page.select_option("#events-kind", "")
    page.fill("#events-search", NET_VM)
    expect(shown.first).to_contain_text(NET_VM)
    assert all(NET_VM in row for row in page.locator("#events tbody tr:visible").all_text_contents())


@pytest.mark.parametrize("width", [1024, 390])
def test_no_view_is_wider_than_the_window(page: Page, demo: DemoServer, width: int) -> None:
    """Only a table scrolls sideways, inside its panel (its actions column stays in sight)."""
    page.set_viewport_size({"width": width, "height": 800})
    at(page, demo, "admin", "#/vms")
    routes = [
        "#/vms",
        "#/vms/web-1",
        "#/vms/web-1/nics",
        "#/hosts",
        "#/hosts/host-1",
        "#/storage",
        "#/images",
    ]
    routes += ["#/networks", "#/snapshots", "#/operations", "#/events"]
    for route in routes:
        page.evaluate(f"window.location.hash = {route!r}")
        expect(page.locator("section.view:not([hidden])")).to_have_count(1)
        expect(page.locator("#status-text")).to_contain_text("live")
        wide = page.evaluate("document.documentElement.scrollWidth")
        assert wide <= width, f"{route} is {wide} px wide in a {width} px window"


def test_the_backups_tab_backs_up_now_and_restores_after_its_dry_run(page: Page, demo: DemoServer) -> None:
    with demo.client("admin") as admin:
        target = {
            "kind": "BackupTarget",
            "metadata": {"name": "nightly"},
            "spec": {"cluster": "demo", "path": "/srv/backups", "capacity_gib": 100},
        }
        assert admin.post("/v1/backuptargets", json=target).status_code == 201, "an admin's"
    at(page, demo, "operator", "#/vms/web-2/backups")
    expect(page.locator("#vm-tab .empty")).to_have_text("No backups yet.")
    page.click('#vm-tab [data-act="backup"]')
    backup = page.locator('dialog[data-dialog="backup"]')
    expect(backup.locator('select[name="target"]')).to_have_value("nightly")
    backup.locator('[data-act="confirm"]').click()
    expect(page.locator("#notice")).to_contain_text("Backup web-2-backup-")
    with demo.client("viewer") as client:

        def succeeded() -> str | None:
            items = client.get("/v1/backups", params={"fieldSelector": "spec.vm=web-2"}).json()["items"]
            done = [b["metadata"]["name"] for b in items if b["status"]["phase"] == "Succeeded"]
            return done[0] if done else None

        wait_for(succeeded, "the backup Succeeded", timeout=90)  # 20 GiB at the simulator's 1 GiB/s
        name = succeeded()
    page.click('#vm-page .tabs a[data-tab="summary"]')
    page.click('#vm-page .tabs a[data-tab="backups"]')
    row = page.locator(f'#vm-tab table.backups tr[data-name="{name}"]')
    expect(row.locator("td.mode")).to_have_text("Full")
    expect(row.locator("td.consistent")).to_have_text("crash-consistent")
    row.locator(f'button[data-restore="{name}"]').click()
    restore = page.locator('dialog[data-dialog="restore"]')
    expect(restore.locator('select[name="backup"]')).to_have_value(str(name))
    restore.locator('[data-act="run"]').click()  # a dry run first: it says what would happen
    expect(restore.locator(".dry-run")).to_contain_text("Running (kept as before the restore)")
    expect(restore.locator(".dry-run")).to_contain_text("VM web-2 is stopped first, then started again")
    expect(restore.locator('[data-act="run"]')).to_have_text("Restore now (Strict)")
    restore.locator('[data-act="run"]').click()
    expect(page.locator("#notice")).to_contain_text(f"Restore of web-2 from backup {name} (Strict)")
    restores = operations_of(demo, "web-2", "Restore")
    assert sorted(op["spec"]["restore"]["mode"] for op in restores) == ["DryRun", "Strict"]
    assert {op["spec"]["restore"]["backup"] for op in restores} == {name}
    wait_for(
        lambda: (
            vm(demo, "web-2")["status"]["phase"] == "Running"
            and all(op["status"]["phase"] == "Completed" for op in operations_of(demo, "web-2", "Restore"))
        ),
        "the restore done and web-2 Running again",
    )
