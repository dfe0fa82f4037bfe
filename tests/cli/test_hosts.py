"""Host maintenance, enable/disable, simulator faults, tokens, events."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from tests.conftest import LiveServer, eventually_sync
from virtplane.cli.exit_codes import ExitCode
from virtplane.domain.resources import (
    Disk,
    Host,
    HostMaintenance,
    Metadata,
    PoolKind,
    RunPolicy,
    StoragePool,
    StoragePoolSpec,
    VirtualMachine,
    Volume,
    VolumeSpec,
)
from virtplane.drivers.base import domain_name
from virtplane.drivers.sim import FaultKind

from .conftest import Invoke, RecordingTransport, add_host, add_vm, wait_phase


@pytest.fixture(autouse=True)
def world(server: LiveServer) -> None:
    """web-1 (AlwaysOn, no disks) runs on node-1; node-2 is empty and takes it when node-1 drains."""
    add_host(server, "node-1")
    add_vm(server, "web-1", RunPolicy.ALWAYS_ON)
    wait_phase(server, "web-1", "Running")
    add_host(server, "node-2")


def test_a_dry_run_prints_the_plan_and_moves_nothing(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport
) -> None:
    result = invoke(
        "host", "maintenance", "enable", "node-1", "--strategy", "migration", "--dry-run", "--wait"
    )

    assert result.exit_code == 0, result.output
    [request] = sent.to("POST", "/v1/hosts/node-1/maintenance")
    assert request.body == {"strategy": "Migration", "dry_run": True}
    assert "Maintenance of host/node-1 (dry run): Planned  strategy=Migration" in result.stdout
    assert ["web-1", "Migrate", "node-2"] in [line.split()[:3] for line in result.stdout.splitlines()]
    assert not sent.to("GET", "/v1/hosts/node-1"), "a dry run has nothing to wait for"
    assert server.store.find(HostMaintenance, "node-1") is None
    assert server.store.get(VirtualMachine, "web-1").status.host == "node-1"


def test_a_dry_run_names_a_vm_that_may_not_converge(invoke: Invoke, server: LiveServer) -> None:
    server.plane.settings.set("migration.bandwidth_mib_s", 400)

    def seen_dirtying(vm: VirtualMachine) -> None:
        vm.status.migration_dirty_rate_mib_s = 900.0  # as its last migration measured

    version = server.store.mutate(VirtualMachine, "web-1", seen_dirtying).metadata.resource_version
    eventually_sync(lambda: server.plane.cache.vm("web-1").metadata.resource_version == version)  # type: ignore[union-attr]

    result = invoke("host", "maintenance", "enable", "node-1", "--dry-run")

    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())  # the table wraps long cells
    assert "RISK: may not converge" in text and "900 MiB/s" in text


def test_without_a_strategy_the_setting_decides(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport
) -> None:
    server.plane.settings.set("host.maintenance.local.storage.strategy", "ForceStop")

    result = invoke("host", "maintenance", "enable", "node-1")

    assert result.exit_code == 0, result.output
    assert sent.to("POST", "/v1/hosts/node-1/maintenance")[0].body == {"strategy": None, "dry_run": False}
    assert "strategy=ForceStop" in result.stdout


def test_wait_follows_the_drain_until_the_host_is_in_maintenance(invoke: Invoke, server: LiveServer) -> None:
    server.plane.settings.set("migration.bandwidth_mib_s", 500)  # about a second: the CLI sees it move

    result = invoke("host", "maintenance", "enable", "node-1", "--wait")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Maintenance of host/node-1: "), "the plan first"
    assert "host/node-1: PrepareForMaintenance (draining: 1 VM(s) left)" in lines, (
        "the host's state as a title"
    )
    assert "vm/web-1: migrated to node-2" in lines[-3:]
    assert any(line.startswith("host/node-1: Maintenance (drained: ") for line in lines[-3:]), lines
    assert lines[-1] == "host/node-1 is in Maintenance"
    moving = [line for line in lines if line.startswith("vm/web-1: migrating to node-2, ")]
    assert moving, "the VM's state in words, with how far it has got"
    assert len(set(lines)) == len(lines), "one plain line per change, never the same line again"
    assert "=" not in "".join(lines[lines.index(moving[0]) :]), "no key=value records"
    assert server.store.get(VirtualMachine, "web-1").status.host == "node-2"


def test_wait_on_a_terminal_redraws_one_row_per_vm_with_a_progress_bar(
    invoke: Invoke, server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.plane.settings.set("migration.bandwidth_mib_s", 500)
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # Rich treats the CLI's stdout as a terminal

    result = invoke("host", "maintenance", "enable", "node-1", "--wait")

    assert result.exit_code == 0, result.output
    screen = result.stdout
    redraws = screen.count("\x1b[1A")  # Rich Live moves the cursor up to draw the table again in place
    assert redraws >= 2, screen
    last_frame = screen.rsplit("\x1b[2K", 1)[1]
    rows = [line.split() for line in _without_escapes(last_frame).splitlines()]
    assert rows[0][:2] == ["host/node-1:", "Maintenance"], rows
    assert ["vm/web-1", "migrated", "to", "node-2", "━" * 24, "100%", "-"] in rows, rows
    assert "migrating to node-2" in _without_escapes(screen), "the row while it moved"
    assert "state=" not in screen


def _without_escapes(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r", "")


def test_wait_exits_1_on_error_in_maintenance(invoke: Invoke, server: LiveServer) -> None:
    server.store.create(
        StoragePool(
            metadata=Metadata(name="node-1-local"),
            spec=StoragePoolSpec(kind=PoolKind.LOCAL, host="node-1", capacity_gib=10),
        )
    )
    server.store.create(
        Volume(metadata=Metadata(name="db-root"), spec=VolumeSpec(pool="node-1-local", size_gib=1))
    )
    add_vm(server, "db-1", RunPolicy.ALWAYS_ON, disks=[Disk(volume="db-root", boot_order=1)])
    wait_phase(server, "db-1", "Running")

    result = invoke("host", "maintenance", "enable", "node-1", "--strategy", "Error", "--wait")

    assert result.exit_code == 1
    assert result.stderr.startswith("Error (ErrorInMaintenance): host/node-1: "), result.stderr
    assert "db-1" in result.stderr and "local storage" in result.stderr
    assert server.store.get(VirtualMachine, "db-1").status.phase.value == "Running", "nothing was touched"


def test_show_and_cancel(invoke: Invoke, server: LiveServer) -> None:
    invoke("host", "maintenance", "enable", "node-1")

    shown = invoke("host", "maintenance", "show", "node-1", "-o", "json")
    cancelled = invoke("host", "maintenance", "cancel", "node-1")
    shown_after = invoke("host", "maintenance", "show", "node-1")

    assert json.loads(shown.stdout)["host"] == "node-1"
    assert cancelled.stdout.strip() == "maintenance of host/node-1 cancelled"
    assert shown_after.exit_code == 0, shown_after.output
    assert shown_after.stdout.startswith("Maintenance of host/node-1: Cancel"), "Cancelling or Cancelled"
    eventually_sync(lambda: server.store.get(HostMaintenance, "node-1").status.phase.value == "Cancelled")
    assert "Maintenance of host/node-1: Cancelled" in invoke("host", "maintenance", "show", "node-1").stdout


def test_show_of_a_host_never_in_maintenance_is_not_found(invoke: Invoke) -> None:
    result = invoke("host", "maintenance", "show", "node-2")

    assert result.exit_code == ExitCode.NOT_FOUND
    assert result.stderr.startswith("Error (NotInMaintenance): "), result.stderr


@pytest.mark.parametrize(("command", "enabled"), [("disable", False), ("enable", True)])
def test_enable_and_disable_patch_spec_enabled(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport, command: str, enabled: bool
) -> None:
    result = invoke("host", command, "node-1")

    assert result.exit_code == 0, result.output
    assert sent.to("PATCH", "/v1/hosts/node-1")[0].body == {"spec": {"enabled": enabled}}
    assert server.store.get(Host, "node-1").spec.enabled is enabled
    assert result.stdout.strip() == f"host/node-1 {command}d"
    state = "Enabled" if enabled else "Disabled"
    eventually_sync(lambda: server.store.get(Host, "node-1").status.resource_state.value == state)


def _armed(server: LiveServer, host: str) -> dict[str | None, int]:
    armed: dict[str | None, int] = server.in_loop(server.plane.sim.armed_faults, host)[FaultKind.FAIL_START]
    return armed


def test_sim_fault_on_a_named_host_arms_it_there(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport
) -> None:
    result = invoke("sim", "fault", "node-2", "fail-start", "--vm", "web-1", "--count", "3")

    assert result.exit_code == 0, result.output
    [request] = sent.to("POST", "/v1/hosts/node-2/faults")
    assert request.body == {"kind": "fail-start", "vm": "web-1", "count": 3}
    assert result.stdout.strip() == "fault fail-start x3 injected into host/node-2 on vm/web-1"
    domain = domain_name(server.store.get(VirtualMachine, "web-1").metadata.uid)
    assert _armed(server, "node-2") == {domain: 3}


@pytest.mark.parametrize("named", [None, "node-2"], ids=["no-host", "another-host"])
def test_a_guest_fault_aimed_at_a_vm_finds_the_vms_host(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport, named: str | None
) -> None:
    result = invoke("sim", "fault", *([named] if named else []), "crash", "--vm", "web-1")

    assert result.exit_code == 0, result.output
    assert sent.to("POST", "/v1/vms/web-1/faults")[0].body == {"kind": "crash", "count": 1}
    note = " (web-1 runs there, not on node-2)" if named else ""
    assert result.stdout.strip() == f"fault crash injected into host/node-1 on vm/web-1{note}"
    crashed = eventually_sync(lambda: "Exited" in _reasons(server, "web-1"))
    assert crashed and server.store.get(VirtualMachine, "web-1").status.host == "node-1"
    wait_phase(server, "web-1", "Running")  # AlwaysOn brings it back


def test_a_host_fault_needs_a_host(invoke: Invoke, sent: RecordingTransport) -> None:
    result = invoke("sim", "fault", "host-down")

    assert result.exit_code == 2
    assert "needs a HOST" in result.output
    assert sent.sent == []


def test_token_create_prints_a_token_that_works(invoke: Invoke, server: LiveServer) -> None:
    result = invoke("token", "create", "ci", "--role", "viewer")

    assert result.exit_code == 0, result.output
    token = result.stdout.splitlines()[1]
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}) as client:
        assert client.get("/v1/vms").status_code == 200
        assert client.post("/v1/vms", json={}).status_code == 403, "a viewer"


def test_events_filter_by_kind_and_name(invoke: Invoke, sent: RecordingTransport) -> None:
    result = invoke("events", "--kind", "vm", "--name", "web-1", "--limit", "5", "-o", "json")

    assert result.exit_code == 0, result.output
    assert sent.sent[-1].params == {"kind": "VirtualMachine", "name": "web-1", "limit": "5"}
    items = json.loads(result.stdout)["items"]
    assert 0 < len(items) <= 5
    assert {(e["kind"], e["name"]) for e in items} == {("VirtualMachine", "web-1")}


def _reasons(server: LiveServer, vm: str) -> list[str]:
    return [e.reason for e in server.store.list_events(kind="VirtualMachine", name=vm, limit=500)]
