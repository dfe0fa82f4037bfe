"""VM operations, snapshots and restore: what is sent, what the server does, --wait and its exit codes."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.conftest import LiveServer, eventually_sync
from virtplane.cli.exit_codes import ExitCode
from virtplane.domain.resources import (
    Disk,
    Metadata,
    OperationType,
    RunPolicy,
    VirtualMachine,
    VirtualMachineOperation,
    VirtualMachineOperationSpec,
    VirtualMachineSnapshot,
)

from .conftest import FastClock, Invoke, RecordingTransport, add_host, add_vm, inject, wait_phase


@pytest.fixture(autouse=True)
def world(server: LiveServer) -> None:
    """node-1 and node-2; web-1 (Manual) is stopped, run-1 (AlwaysOnUnlessStoppedManually) runs on node-1."""
    add_host(server, "node-1")
    add_vm(server, "web-1")
    add_vm(server, "run-1", RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY)
    wait_phase(server, "run-1", "Running")
    add_host(server, "node-2")


def _posted_operation(sent: RecordingTransport) -> dict[str, Any]:
    [request] = sent.to("POST", "/v1/operations")
    body: dict[str, Any] = request.body
    return body


@pytest.mark.parametrize(("command", "vm"), [("start", "web-1"), ("stop", "run-1"), ("restart", "run-1")])
def test_power_commands_create_an_operation_with_a_generated_name(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport, command: str, vm: str
) -> None:
    result = invoke("vm", command, vm, "--force")

    assert result.exit_code == 0, result.output
    body = _posted_operation(sent)
    name = body["metadata"]["name"]
    assert re.fullmatch(rf"{vm}-{command}-[a-z0-9]{{5}}", name)
    assert body["spec"] == {"vm": vm, "type": command.capitalize(), "force": True}
    assert result.stdout.strip() == f"operation/{name} created ({command.capitalize()} vm/{vm})"
    op = server.store.get(VirtualMachineOperation, name)
    assert (op.spec.vm, op.spec.type.value, op.spec.force) == (vm, command.capitalize(), True)


def test_a_long_vm_name_still_gives_a_valid_operation_name(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport
) -> None:
    long_name = "a" * 60
    add_vm(server, long_name, RunPolicy.ALWAYS_ON)
    wait_phase(server, long_name, "Running")

    result = invoke("vm", "restart", long_name)

    assert result.exit_code == 0, result.output
    name = _posted_operation(sent)["metadata"]["name"]
    assert len(name) <= 63
    assert re.fullmatch(r"a+-restart-[a-z0-9]{5}", name)
    assert server.store.find(VirtualMachineOperation, name) is not None, "the server took the name"


def test_migrate_names_its_target_and_evict_does_not(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport
) -> None:
    assert invoke("vm", "migrate", "run-1", "--to", "node-2", "--wait").exit_code == 0
    assert server.store.get(VirtualMachine, "run-1").status.host == "node-2"
    assert invoke("vm", "evict", "run-1", "--wait").exit_code == 0
    assert server.store.get(VirtualMachine, "run-1").status.host == "node-1"

    migrate, evict = (r.body["spec"] for r in sent.to("POST", "/v1/operations"))
    assert migrate == {"vm": "run-1", "type": "Migrate", "force": False, "migrate": {"target_host": "node-2"}}
    assert evict == {"vm": "run-1", "type": "Evict", "force": False}


def test_migrate_force_is_sent_and_an_operators_is_refused(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport
) -> None:
    """Issue 37: --force lets an admin move a VM past a required placement rule. Red with the
    option not passed on (force false in the body), or the 403 for an operator removed."""
    refused = invoke("vm", "migrate", "run-1", "--to", "node-2", "--force", role="operator")
    assert refused.exit_code != 0 and "only an admin may force a migration" in refused.output
    assert invoke("vm", "migrate", "run-1", "--to", "node-2", "--force", "--wait").exit_code == 0
    assert server.store.get(VirtualMachine, "run-1").status.host == "node-2"
    bodies = [r.body["spec"] for r in sent.to("POST", "/v1/operations")]
    assert [b["force"] for b in bodies] == [True, True]


def test_wait_follows_the_operation_to_completion(invoke: Invoke, server: LiveServer) -> None:
    result = invoke("vm", "stop", "run-1", "--wait")

    assert result.exit_code == 0, result.output
    created, *followed, done = result.stdout.splitlines()
    name = created.split()[0].removeprefix("operation/")
    assert done == f"operation/{name} completed"
    assert followed[-1] == "vm/run-1: completed (VM run-1 is stopped)", followed
    assert all(line.startswith("vm/run-1: ") for line in followed), "the VM's row, in words"
    assert len(followed) == len(set(followed)), "one line per change"
    assert server.store.get(VirtualMachine, "run-1").status.phase.value == "Stopped"


def test_wait_exits_1_when_the_operation_fails(invoke: Invoke, server: LiveServer) -> None:
    server.plane.settings.set("migration.max_attempts", 1)
    inject(server, "node-1", "fail-migration", "run-1", count=5)

    result = invoke("vm", "migrate", "run-1", "--to", "node-2", "--wait")

    assert result.exit_code == 1
    name = _name_in(result.stdout)
    assert result.stderr.startswith(f"Error (MigrationFailed): operation/{name} failed: "), result.stderr
    assert server.store.get(VirtualMachine, "run-1").status.host == "node-1", "it keeps running where it was"


def test_wait_exits_1_when_the_operation_is_superseded(
    invoke: Invoke, server: LiveServer, clock: FastClock
) -> None:
    for host in ("node-1", "node-2"):
        inject(server, host, "fail-start", "web-1", count=1000)

    def stop_it_meanwhile(polls: int) -> None:
        if polls == 2:  # the start is retrying its boots by now; a Stop supersedes it
            _create_op(server, "web-1-stop-by-other", "web-1", OperationType.STOP)

    clock.between_polls = stop_it_meanwhile
    result = invoke("vm", "start", "web-1", "--wait")

    assert result.exit_code == 1
    name = _name_in(result.stdout)
    assert result.stderr.startswith(f"Error (Superseded): operation/{name} superseded: "), result.stderr
    assert "web-1-stop-by-other" in result.stderr


def test_wait_gives_up_after_the_timeout(invoke: Invoke, server: LiveServer, clock: FastClock) -> None:
    for host in ("node-1", "node-2"):
        inject(server, host, "fail-start", "web-1", count=1000)

    result = invoke("vm", "start", "web-1", "--wait", "--timeout", "5")

    assert result.exit_code == ExitCode.TIMEOUT
    assert "Error (Timeout): gave up waiting for operation/" in result.stderr
    assert "after 5s; last seen: vm/web-1: in progress" in result.stderr
    assert sum(clock.sleeps) == pytest.approx(5.0)


def test_a_refused_operation_shows_the_servers_reason(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport
) -> None:
    add_vm(server, "always", RunPolicy.ALWAYS_ON)

    result = invoke("vm", "start", "always", "--wait")

    assert result.exit_code == 1
    assert result.stderr.startswith("Error (NotApplicable): "), result.stderr
    assert "AlwaysOn" in result.stderr
    assert not sent.to("GET", f"/v1/operations/{_posted_operation(sent)['metadata']['name']}")


def test_snapshot_create_waits_until_ready(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport
) -> None:
    result = invoke("snapshot", "create", "run-1", "--name", "before-upgrade", "--with-memory", "--wait")

    assert result.exit_code == 0, result.output
    [request] = sent.to("POST", "/v1/snapshots")
    assert request.body["metadata"] == {"name": "before-upgrade"}
    assert request.body["spec"] == {"vm": "run-1", "with_memory": True, "required_consistency": False}
    assert result.stdout.splitlines()[-1] == "snapshot/before-upgrade ready"
    assert server.store.get(VirtualMachineSnapshot, "before-upgrade").status.phase.value == "Ready"


def test_a_failed_snapshot_exits_1(invoke: Invoke, server: LiveServer) -> None:
    add_vm(server, "lost", disks=[Disk(volume="gone", boot_order=1)])

    result = invoke("snapshot", "create", "lost", "--wait")

    assert result.exit_code == 1
    assert "Error (SnapshotFailed): snapshot/lost-snap-" in result.stderr
    assert "failed: disk gone has no volume or pool" in result.stderr


def test_restore_sends_the_snapshot_and_mode(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport
) -> None:
    assert invoke("snapshot", "create", "run-1", "--name", "before-upgrade", "--wait").exit_code == 0

    result = invoke("restore", "run-1", "--snapshot", "before-upgrade", "--mode", "bESTeFFORT", "--wait")

    assert result.exit_code == 0, result.output
    assert _posted_operation(sent)["spec"] == {
        "vm": "run-1",
        "type": "Restore",
        "force": False,
        "restore": {"snapshot": "before-upgrade", "mode": "BestEffort"},
    }
    wait_phase(server, "run-1", "Running")


def test_a_dry_run_restore_prints_its_report(invoke: Invoke, server: LiveServer) -> None:
    assert invoke("snapshot", "create", "run-1", "--name", "before-upgrade", "--wait").exit_code == 0
    server.store.mutate(VirtualMachine, "run-1", lambda v: setattr(v.spec, "cpu", 2))

    result = invoke("restore", "run-1", "--snapshot", "before-upgrade", "--mode", "DryRun")

    assert result.exit_code == 0, result.output
    name = _name_in(result.stdout)
    op = eventually_sync(lambda: server.store.get(VirtualMachineOperation, name).status.progress)
    report_text = result.stdout.split("Dry-run report:\n", 1)[1]
    message = server.store.get(VirtualMachineOperation, name).status.message
    assert yaml.safe_load(report_text.replace(message, "")) == op
    assert "cpu: 2 -> 1" in op["vm/run-1"]
    assert server.store.get(VirtualMachine, "run-1").spec.cpu == 2, "a dry run changes nothing"


def _name_in(stdout: str) -> str:
    return stdout.split()[0].removeprefix("operation/")


def _create_op(server: LiveServer, name: str, vm: str, kind: OperationType) -> None:
    server.store.create(
        VirtualMachineOperation(
            metadata=Metadata(name=name), spec=VirtualMachineOperationSpec(vm=vm, type=kind)
        )
    )
