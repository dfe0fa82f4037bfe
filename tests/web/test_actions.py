"""Every dashboard action, clicked in a real headless Chromium, against ``virtplane serve --demo``.

One server for the module: the command itself in a subprocess (``tests.web.demo_server``:
three simulated hosts, shared and local storage, an image library, VMs of every run policy),
with guests that boot fast and a migration link given by its ``--sim-link-mib-s``. Each test
acts on VMs of its own, so the tests do not depend on each other's order; the maintenance
test, which moves whatever runs on host-1, comes last. Every check of the page is compared
with what the JSON API says.

Screenshots of the main views go to ``$VIRTPLANE_SCREENSHOTS`` when it is set
(``scripts/screenshots.sh`` sets it to docs/screenshots), else to a temporary directory.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.web.demo_server import DemoServer, completed, operations_of, serve_demo, vm
from tests.web.test_dashboard import show, signed_in, wait_for

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

DEMO_RUNNING = ("web-1", "web-2", "app-1", "db-1")
pytestmark = pytest.mark.browser
try:
    from playwright.sync_api import expect
except ImportError:  # tests.web.test_dashboard already failed or skipped the run for it
    pytest.skip("playwright is not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    with serve_demo(tmp_path_factory.mktemp("demo") / "data", running=DEMO_RUNNING) as server:
        yield server


def console(page: Page, demo: DemoServer, role: str) -> None:
    """Signed in, live, and the role known to the page (the actions are drawn for it)."""
    signed_in(page, demo, role)
    expect(page.locator("#whoami")).to_have_text(f"web-{role} · {role}")


def vm_row(page: Page, name: str) -> Locator:
    return page.locator(f'#vms tr[data-name="{name}"]')


def host_row(page: Page, name: str) -> Locator:
    return page.locator(f'#hosts tr[data-name="{name}"]')


def act(row: Locator, action: str) -> None:
    """Open the row's actions menu and click ``action`` in it."""
    row.locator("button.menu-toggle").click()
    row.locator(f'button[data-action="{action}"]').click()


def dialog(page: Page, name: str) -> Locator:
    return page.locator(f'dialog[data-dialog="{name}"]')


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_each_role_sees_only_the_actions_it_may_take(page: Page, demo: DemoServer, role: str) -> None:
    console(page, demo, role)
    expect(vm_row(page, "web-1").locator("td.phase")).to_have_text("Running")
    vm_buttons = page.locator("#vms button[data-action]")
    host_buttons = page.locator("#hosts button[data-action]")
    if role == "viewer":
        expect(vm_buttons).to_have_count(0)
        expect(page.locator("#create-vm")).to_be_hidden()
        expect(page.locator("#vms th.actions")).to_be_hidden()
    else:
        web = vm_row(page, "web-1").locator("button[data-action]")
        expect(web).to_have_text(
            ["Stop…", "Restart", "Migrate…", "Snapshot…", "Restore…", "Delete…", "Console", "Screen"]
        )
        expect(vm_row(page, "archive-1").locator("button[data-action]")).to_have_text(
            ["Start", "Snapshot…", "Restore…", "Delete…"]
        )
        expect(page.locator("#create-vm")).to_be_visible()
    show(page, "hosts")
    if role == "admin":
        expect(host_row(page, "host-2").locator("button[data-action]")).to_have_text(
            ["Maintenance…", "Disable"]
        )
        expect(page.locator("#hosts th.actions")).to_be_visible()
    else:
        expect(host_buttons).to_have_count(0)
        expect(page.locator("#hosts th.actions")).to_be_hidden()
    assert page.locator("button[data-action]").count() == (
        0 if role == "viewer" else vm_buttons.count() + host_buttons.count()
    )


def test_start_restart_stop_and_a_forced_stop_after_a_confirmation(page: Page, demo: DemoServer) -> None:
    console(page, demo, "operator")
    batch = vm_row(page, "batch-1")  # Manual: stopped until started
    expect(batch.locator("td.phase")).to_have_text("Stopped")

    act(batch, "start")
    expect(page.locator("#notice")).to_contain_text("Start of batch-1: operation batch-1-start-")
    expect(batch.locator("td.phase")).to_have_text("Running")
    assert vm(demo, "batch-1")["status"]["phase"] == "Running"

    act(batch, "restart")
    wait_for(lambda: completed(demo, "batch-1", "Restart", 1), "the Restart Completed in the API")
    expect(page.locator('#operations tr[data-name^="batch-1-restart-"] td.phase')).to_have_text("Completed")

    act(batch, "stop")
    dialog(page, "stop").locator('[data-act="graceful"]').click()
    expect(dialog(page, "stop")).to_have_count(0)
    expect(batch.locator("td.phase")).to_have_text("Stopped")
    (graceful,) = operations_of(demo, "batch-1", "Stop")
    assert graceful["spec"]["force"] is False

    act(batch, "start")
    expect(batch.locator("td.phase")).to_have_text("Running")
    act(batch, "stop")
    stop = dialog(page, "stop")
    stop.locator('[data-act="force"]').click()
    expect(stop.locator(".warning")).to_contain_text("Power off batch-1 now?")
    assert len(operations_of(demo, "batch-1", "Stop")) == 1, "nothing is sent before the confirmation"
    stop.locator('[data-act="confirm-force"]').click()
    expect(batch.locator("td.phase")).to_have_text("Stopped")
    forced = wait_for(lambda: completed(demo, "batch-1", "Stop", 2), "the forced Stop Completed")
    assert sorted(op["spec"]["force"] for op in forced) == [False, True]


def test_migrate_to_a_host_picked_from_the_placement_verdicts(
    page: Page, demo: DemoServer, screenshots: Path
) -> None:
    console(page, demo, "operator")
    source = vm(demo, "app-1")["status"]["host"]
    with demo.client("viewer") as client:
        verdicts = client.get("/v1/vms/app-1/placement").json()
    act(vm_row(page, "app-1"), "migrate")
    picker = dialog(page, "migrate")
    for verdict in verdicts["hosts"]:
        row = picker.locator(f'tr[data-host="{verdict["host"]}"]')
        expect(row.locator("td.verdict")).to_have_text("Ready" if verdict["ok"] else "Blocked")
        if not verdict["ok"]:
            expect(row.locator("td.reason")).to_have_text(verdict["reason"])
            expect(row.locator("input")).to_be_disabled()
    expect(picker.locator(f'tr[data-host="{source}"] td.reason')).to_have_text("current host of the VM")
    expect(picker).to_contain_text(f"Automatic (now: {verdicts['chosen']})")
    # a host that placement would not pick itself, when there is one: the choice is the operator's
    able = [v["host"] for v in verdicts["hosts"] if v["ok"]]
    target = next((host for host in able if host != verdicts["chosen"]), verdicts["chosen"])
    page.screenshot(path=screenshots / "migrate.png")
    picker.locator(f'tr[data-host="{target}"] input').check()
    picker.locator('[data-act="confirm"]').click()
    expect(picker).to_have_count(0)
    expect(vm_row(page, "app-1").locator("td.host")).to_have_text(target)
    expect(vm_row(page, "app-1").locator("td.phase")).to_have_text("Running")
    (migrate,) = wait_for(lambda: completed(demo, "app-1", "Migrate", 1), "the Migrate Completed")
    assert migrate["spec"]["migrate"] == {"target_host": target}
    assert vm(demo, "app-1")["status"]["host"] == target


def test_a_failed_migration_shows_on_the_vm_until_one_arrives(page: Page, demo: DemoServer) -> None:
    console(page, demo, "operator")
    with demo.client("admin") as admin:
        hit = admin.post("/v1/vms/web-1/faults", json={"kind": "fail-migration"})
        assert hit.status_code == 200, hit.text
    row = vm_row(page, "web-1")
    chip = row.locator("td.conditions .chip", has_text="Migration")
    expect(chip).to_have_count(0)

    act(row, "migrate")
    dialog(page, "migrate").locator('[data-act="confirm"]').click()  # Automatic
    expect(chip).to_have_text("✗ Migration (MigrationFailed)")
    expect(chip).to_have_class(re.compile(r"\btone-warn\b"))
    expect(chip).to_have_attribute(
        "title", re.compile(r"^MigrationFailed: attempt 1 to host-\d .*injected fault")
    )
    wait_for(
        lambda: [op for op in operations_of(demo, "web-1", "Migrate") if op["status"]["phase"] == "Failed"],
        "the Migrate Failed in the API",
    )

    act(row, "migrate")
    dialog(page, "migrate").locator('[data-act="confirm"]').click()
    (done,) = wait_for(lambda: completed(demo, "web-1", "Migrate", 1), "the second Migrate Completed")
    expect(chip).to_have_count(0)
    shown = page.locator(f'#operations tr[data-name="{done["metadata"]["name"]}"] td.progress')
    expect(shown).to_contain_text("100%")
    expect(shown).to_contain_text("state=Migrated")


def test_snapshot_with_and_without_memory_then_restore_after_a_dry_run(
    page: Page, demo: DemoServer, screenshots: Path
) -> None:
    console(page, demo, "operator")
    web = vm_row(page, "web-2")
    for name, memory in (("web-2-mem", True), ("web-2-before", False)):
        act(web, "snapshot")
        form = dialog(page, "snapshot")
        form.locator('input[name="name"]').fill(name)
        form.locator('input[name="with_memory"]').set_checked(memory)
        form.locator('[data-act="confirm"]').click()
        expect(form).to_have_count(0)
    with demo.client("operator") as client:
        for name, memory in (("web-2-mem", True), ("web-2-before", False)):
            snapshot = wait_for(
                lambda name=name: (
                    (s := client.get(f"/v1/snapshots/{name}").json())["status"]["phase"] == "Ready" and s
                ),
                f"snapshot {name} Ready",
            )
            assert snapshot["spec"] == {"vm": "web-2", "with_memory": memory, "required_consistency": False}
        # a change the restore will undo
        changed = client.patch("/v1/vms/web-2", json={"metadata": {"labels": {"app": "web", "tier": "edge"}}})
        assert changed.status_code == 200, changed.text

    act(web, "restore")
    restore = dialog(page, "restore")
    restore.locator('select[name="snapshot"]').select_option("web-2-before")
    expect(restore.locator('input[value="DryRun"]')).to_be_checked()
    restore.locator('[data-act="run"]').click()
    change = restore.locator('.report tr[data-key="vm/web-2"] td.change')
    expect(change).to_contain_text("labels: {'app': 'web', 'tier': 'edge'} -> {'app': 'web'}")
    expect(restore.locator('.report tr[data-key="volume/web-2-root"] td.change')).to_have_text(
        "revert to snapshot web-2-before"
    )
    (dry,) = operations_of(demo, "web-2", "Restore")
    assert dry["spec"]["restore"] == {
        "snapshot": "web-2-before",
        "backup": None,
        "disks": [],
        "mode": "DryRun",
    }
    assert vm(demo, "web-2")["metadata"]["labels"]["tier"] == "edge", "a dry run changes nothing"
    page.screenshot(path=screenshots / "restore-dry-run.png")

    expect(restore.locator('input[value="Strict"]')).to_be_checked()
    expect(restore.locator('[data-act="run"]')).to_have_text("Restore now (Strict)")
    restore.locator('[data-act="run"]').click()
    expect(restore).to_have_count(0)
    wait_for(lambda: completed(demo, "web-2", "Restore", 2), "the Strict restore Completed")
    expect(web.locator("td.labels")).to_have_text("app=web")
    expect(web.locator("td.phase")).to_have_text("Running")  # it ran before: it runs again
    assert vm(demo, "web-2")["metadata"]["labels"] == {"app": "web"}


def test_delete_a_vm_after_a_confirmation(page: Page, demo: DemoServer) -> None:
    with demo.client("operator") as client:
        body = {
            "kind": "VirtualMachine",
            "metadata": {"name": "doomed-1"},
            "spec": {"run_policy": "AlwaysOff"},
        }
        assert client.post("/v1/vms", json=body).status_code == 201
    console(page, demo, "operator")
    act(vm_row(page, "doomed-1"), "delete")
    confirm = dialog(page, "delete")
    expect(confirm.locator(".warning")).to_contain_text("Delete doomed-1?")
    confirm.locator('[data-act="confirm"]').click()
    expect(vm_row(page, "doomed-1")).to_have_count(0)
    with demo.client("viewer") as client:
        wait_for(lambda: client.get("/v1/vms/doomed-1").status_code == 404, "doomed-1 gone from the API")


def test_create_a_vm_with_a_new_root_disk_from_an_image(page: Page, demo: DemoServer) -> None:
    console(page, demo, "operator")
    page.locator("#create-vm").click()
    form = dialog(page, "create-vm")
    form.locator('input[name="name"]').fill("made-1")
    form.locator('select[name="run_policy"]').select_option("Manual")
    form.locator('input[name="cpu"]').fill("2")
    form.locator('input[name="memory"]').fill("1536Mi")
    expect(form.locator('input[name="new_disk"]')).to_be_checked()
    # the cluster's shared pool, not host-1-local (first by name), which would pin the VM to host-1
    expect(form.locator('select[name="pool"]')).to_have_value("shared")
    form.locator('input[name="size"]').fill("5Gi")
    form.locator('select[name="image"]').select_option("debian-12")
    form.locator('input[name="network:lan"]').check()
    form.locator('textarea[name="ssh_keys"]').fill(
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0ZXN0a2V5 me@laptop"
    )
    form.locator('input[name="labels"]').fill("app=made")
    form.locator('[data-act="confirm"]').click()
    expect(form).to_have_count(0)
    made = vm_row(page, "made-1")
    expect(made.locator("td.policy")).to_have_text("Manual")
    expect(made.locator("td.phase")).to_have_text("Stopped")

    found = vm(demo, "made-1")
    spec = found["spec"]
    assert (spec["run_policy"], spec["cpu"], spec["memory_mib"]) == ("Manual", 2, 1536)
    assert spec["disks"] == [{"volume": "made-1-root", "boot_order": 1}]
    assert [n["network"] for n in spec["nics"]] == ["lan"] and spec["cloud_init"]["ssh_authorized_keys"]
    assert found["metadata"]["labels"]["app"] == "made"
    with demo.client("viewer") as client:
        volume = client.get("/v1/volumes/made-1-root").json()
    assert volume["spec"] == {
        "pool": "shared",
        "size_gib": 5,
        "source": {"image": "debian-12", "snapshot": None, "volume": None, "backup": None, "linked": False},
    }
    act(made, "start")  # it boots from its new disk
    expect(made.locator("td.phase")).to_have_text("Running")


def test_three_vms_from_a_template_made_in_the_dialog(page: Page, demo: DemoServer) -> None:
    with demo.client("operator") as client:
        client.patch(
            "/v1/vms/batch-1", json={"spec": {"template": True, "run_policy": "AlwaysOff"}}
        ).raise_for_status()
    console(page, demo, "operator")
    page.locator("#create-vm").click()
    form = dialog(page, "create-vm")
    form.locator('input[name="name"]').fill("copy")
    form.locator('input[name="count"]').fill("3")
    form.locator('select[name="template"]').select_option("batch-1")
    expect(form.locator('[data-part="root-disk"]')).to_be_hidden()  # the template's disks are copied
    form.locator('[data-act="confirm"]').click()
    expect(form).to_have_count(0)
    for name in ("copy-1", "copy-2", "copy-3"):
        expect(vm_row(page, name)).to_have_count(1)
        found = vm(demo, name)
        assert found["metadata"]["labels"]["virtplane.io/cloned-from"] == "batch-1"
        assert [d["volume"] for d in found["spec"]["disks"]] == [f"{name}-root"]

    # a snapshot is offered as a template too
    with demo.client("operator") as client:
        snap = {
            "kind": "VirtualMachineSnapshot",
            "metadata": {"name": "batch-snap"},
            "spec": {"vm": "batch-1"},
        }
        client.post("/v1/snapshots", json=snap).raise_for_status()
        wait_for(
            lambda: client.get("/v1/snapshots/batch-snap").json()["status"]["phase"] == "Ready",
            "snapshot Ready",
        )
    page.locator("#create-vm").click()
    form = dialog(page, "create-vm")
    form.locator('input[name="name"]').fill("from-snap")
    form.locator('select[name="template"]').select_option("snapshot:batch-snap")
    form.locator('[data-act="confirm"]').click()
    expect(form).to_have_count(0)
    expect(vm_row(page, "from-snap")).to_have_count(1)
    with demo.client("viewer") as client:
        volume = client.get("/v1/volumes/from-snap-root").json()
    assert volume["spec"]["source"] == {
        "image": None,
        "snapshot": "batch-snap",
        "volume": "batch-1-root",
        "backup": None,
        "linked": False,
    }


def test_api_errors_are_shown_with_the_reason_and_message_the_api_sent(page: Page, demo: DemoServer) -> None:
    console(page, demo, "operator")
    # a refusal of an action: AlwaysOff is never started
    act(vm_row(page, "archive-1"), "start")
    with demo.client("operator") as client:
        body = {
            "kind": "VirtualMachineOperation",
            "metadata": {"name": "archive-1-start-by-hand"},
            "spec": {"vm": "archive-1", "type": "Start"},
        }
        sent = client.post("/v1/operations", json=body)
    assert sent.status_code == 409, sent.text
    notice = page.locator('#notice[data-kind="error"]')
    expect(notice.locator(".reason")).to_have_text(sent.json()["reason"])
    expect(notice.locator(".message")).to_have_text(sent.json()["message"])
    expect(notice.locator(".status-code")).to_have_text("HTTP 409")

    # a refusal inside a dialog: the name is taken; the dialog stays open with the answer
    page.locator("#create-vm").click()
    form = dialog(page, "create-vm")
    form.locator('input[name="name"]').fill("web-1")
    form.locator('input[name="new_disk"]').uncheck()
    form.locator('[data-act="confirm"]').click()
    with demo.client("operator") as client:
        taken = client.post(
            "/v1/vms", json={"kind": "VirtualMachine", "metadata": {"name": "web-1"}, "spec": {}}
        )
    assert taken.status_code == 409, taken.text
    error = form.locator(".dialog-error")
    expect(error.locator(".reason")).to_have_text(taken.json()["reason"])
    expect(error.locator(".message")).to_have_text(taken.json()["message"])
    expect(form.locator('[data-act="confirm"]')).to_be_enabled()  # fix the name and try again


def test_disable_and_enable_a_host(page: Page, demo: DemoServer) -> None:
    console(page, demo, "admin")
    show(page, "hosts")
    row = host_row(page, "host-3")
    act(row, "disable")
    expect(row.locator("td.state")).to_have_text("Disabled")
    expect(row.locator("button[data-action]")).to_have_text(["Enable"])
    with demo.client("viewer") as client:
        host = client.get("/v1/hosts/host-3").json()
        assert (host["spec"]["enabled"], host["status"]["resource_state"]) == (False, "Disabled")
    act(row, "enable")
    expect(row.locator("td.state")).to_have_text("Enabled")
    with demo.client("viewer") as client:
        assert client.get("/v1/hosts/host-3").json()["spec"]["enabled"] is True


@pytest.mark.parametrize("return_vms", [True, False], ids=["return-vms", "leave-them"])
def test_maintenance_preview_then_drain_then_cancel(
    page: Page, demo: DemoServer, screenshots: Path, return_vms: bool
) -> None:
    console(page, demo, "admin")
    with demo.client("admin") as client:
        on_host = sorted(
            v["metadata"]["name"]
            for v in client.get(
                "/v1/vms", params={"fieldSelector": "status.host=host-1,status.phase=Running"}
            ).json()["items"]
        )
        assert "db-1" in on_host, "db-1's disk is in host-1's local pool"
        planned = client.post(
            "/v1/hosts/host-1/maintenance", json={"strategy": "Migration", "dry_run": True}
        ).json()
    show(page, "hosts")
    act(host_row(page, "host-1"), "maintenance")
    plan = dialog(page, "maintenance")

    # the default strategy (Error) leaves db-1 blocked; Migration moves it with its disk
    expect(plan.locator('tr[data-vm="db-1"] td.plan')).to_contain_text("blocked because")
    expect(plan.locator(".plan-summary")).to_have_text("Blocked: db-1 cannot be handled with this strategy.")
    expect(plan.locator("div.plan")).to_have_attribute("data-feasible", "false")
    plan.locator('input[name="strategy"][value="Migration"]').check()
    expect(plan.locator("div.plan")).to_have_attribute("data-feasible", "true")
    for item in planned["plan"]["items"]:
        words = "migrate with storage" if item["action"] == "MigrateWithStorage" else "migrate"
        expect(plan.locator(f'tr[data-vm="{item["vm"]}"] td.plan')).to_have_text(
            f"{words} to {item['target']}"
        )
    assert sorted(i["vm"] for i in planned["plan"]["items"]) == on_host
    if return_vms:
        page.screenshot(path=screenshots / "maintenance-plan.png")
    with demo.client("viewer") as client:
        assert client.get("/v1/hosts/host-1").json()["status"]["resource_state"] == "Enabled", (
            "a preview starts nothing"
        )

    plan.locator('[data-act="confirm"]').click()
    expect(plan).to_have_count(0)
    block = page.locator('#maintenance .maintenance[data-host="host-1"]')
    expect(block.locator("h3")).to_contain_text("Completed")
    expect(host_row(page, "host-1").locator("td.state")).to_have_text("Maintenance")
    for name in on_host:
        expect(block.locator(f'tr[data-vm="{name}"] td.state')).to_have_text("Migrated")
        expect(block.locator(f'tr[data-vm="{name}"] td.progress')).to_have_text("100%")
    with demo.client("viewer") as client:
        shown = client.get("/v1/hosts/host-1/maintenance").json()
    assert shown["strategy"] == "Migration"
    went_to = {name: shown["progress"][name]["target"] for name in on_host}
    if return_vms:
        page.screenshot(path=screenshots / "maintenance-progress.png", full_page=True)

    act(host_row(page, "host-1"), "cancel-maintenance")
    cancel = dialog(page, "cancel-maintenance")
    cancel.locator('input[name="return_vms"]').set_checked(return_vms)
    cancel.locator('[data-act="confirm"]').click()
    expect(host_row(page, "host-1").locator("td.state")).to_have_text("Enabled")
    expect(block.locator("h3")).to_contain_text("Cancelled")
    for name, target in went_to.items():
        expect(block.locator(f'tr[data-vm="{name}"] td.state')).to_have_text(
            "Returned" if return_vms else "Migrated"
        )
        expect(vm_row(page, name).locator("td.host")).to_have_text("host-1" if return_vms else target)
    with demo.client("viewer") as client:
        assert client.get("/v1/hosts/host-1/maintenance").json()["return_vms"] is return_vms
        for name, target in went_to.items():
            assert client.get(f"/v1/vms/{name}").json()["status"]["host"] == (
                "host-1" if return_vms else target
            )


def test_the_main_view(page: Page, demo: DemoServer, screenshots: Path) -> None:
    console(page, demo, "admin")
    expect(vm_row(page, "web-1").locator("td.phase")).to_have_text("Running")
    page.screenshot(path=screenshots / "dashboard.png", full_page=True)
    show(page, "hosts")
    expect(host_row(page, "host-1").locator("td.connection")).to_have_text("Up")
    page.screenshot(path=screenshots / "hosts.png", full_page=True)
    show(page, "operations")
    expect(page.locator("#ops-panel tbody tr").first).to_be_visible()
    page.screenshot(path=screenshots / "operations.png", full_page=True)
