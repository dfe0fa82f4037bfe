"""VM operations, snapshots and restore: the requests sent, --wait and its exit codes."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from .conftest import FakeClock, Invoke, vm
from .fake_server import FakeServer, error


@pytest.fixture(autouse=True)
def web_1(server: FakeServer) -> None:
    server.add("vms", vm("web-1"))


def _posted_operation(server: FakeServer) -> dict[str, Any]:
    [request] = server.requests_to("POST", "/v1/operations")
    body: dict[str, Any] = request.body
    return body


@pytest.mark.parametrize("command", ["start", "stop", "restart"])
def test_power_commands_create_an_operation_with_a_generated_name(
    invoke: Invoke, server: FakeServer, command: str
) -> None:
    result = invoke("vm", command, "web-1", "--force")

    assert result.exit_code == 0, result.output
    body = _posted_operation(server)
    name = body["metadata"]["name"]
    assert re.fullmatch(rf"web-1-{command}-[a-z0-9]{{5}}", name)
    assert body["spec"] == {"vm": "web-1", "type": command.capitalize(), "force": True}
    assert result.stdout.strip() == f"operation/{name} created ({command.capitalize()} vm/web-1)"


def test_a_long_vm_name_still_gives_a_valid_operation_name(invoke: Invoke, server: FakeServer) -> None:
    long_name = "a" * 60
    server.add("vms", vm(long_name))

    invoke("vm", "restart", long_name)

    name = _posted_operation(server)["metadata"]["name"]
    assert len(name) <= 63
    assert re.fullmatch(r"a+-restart-[a-z0-9]{5}", name)


def test_migrate_names_its_target_and_evict_does_not(invoke: Invoke, server: FakeServer) -> None:
    invoke("vm", "migrate", "web-1", "--to", "node-2")
    invoke("vm", "evict", "web-1")

    migrate, evict = (r.body["spec"] for r in server.requests_to("POST", "/v1/operations"))
    assert migrate == {"vm": "web-1", "type": "Migrate", "force": False, "migrate": {"target_host": "node-2"}}
    assert evict == {"vm": "web-1", "type": "Evict", "force": False}


def test_wait_follows_the_operation_to_completion(invoke: Invoke, server: FakeServer) -> None:
    server.operation_statuses = [
        {"phase": "Pending"},
        {"phase": "InProgress", "step": "Shutdown", "message": "asking the guest to shut down"},
        {"phase": "InProgress", "step": "Shutdown", "message": "asking the guest to shut down"},
        {"phase": "Completed", "step": "Done", "message": "stopped"},
    ]

    result = invoke("vm", "stop", "web-1", "--wait")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1:] == [
        "Pending",
        "InProgress  step=Shutdown  asking the guest to shut down",
        "Completed  step=Done  stopped",
        f"{lines[0].split()[0]} completed",
    ]


@pytest.mark.parametrize(
    ("final_status", "expected_error"),
    [
        (
            {"phase": "Failed", "reason": "MigrationFailed", "message": "target refused"},
            "Error (MigrationFailed): operation/{name} failed: target refused",
        ),
        (
            {"phase": "Superseded", "message": "superseded by web-1-stop-abcde"},
            "Error (Superseded): operation/{name} superseded: superseded by web-1-stop-abcde",
        ),
    ],
)
def test_wait_exits_1_when_the_operation_does_not_complete(
    invoke: Invoke, server: FakeServer, final_status: dict[str, str], expected_error: str
) -> None:
    server.operation_statuses = [{"phase": "InProgress", "step": "Migrate"}, final_status]

    result = invoke("vm", "migrate", "web-1", "--wait")

    assert result.exit_code == 1
    name = _posted_operation(server)["metadata"]["name"]
    assert result.stderr.strip() == expected_error.format(name=name)


def test_wait_gives_up_after_the_timeout(invoke: Invoke, server: FakeServer, clock: FakeClock) -> None:
    server.operation_statuses = [{"phase": "InProgress", "step": "Boot", "message": "waiting for the guest"}]

    result = invoke("vm", "start", "web-1", "--wait", "--timeout", "5")

    assert result.exit_code == 1
    assert "Error (Timeout): gave up waiting for operation/" in result.stderr
    assert "after 5s; last seen: InProgress  step=Boot  waiting for the guest" in result.stderr
    assert sum(clock.sleeps) == pytest.approx(5.0)


def test_a_refused_operation_shows_the_servers_reason(invoke: Invoke, server: FakeServer) -> None:
    server.overrides[("POST", "/v1/operations")] = error(
        409, "NotApplicable", "web-1 has run policy AlwaysOn: it is always started"
    )

    result = invoke("vm", "start", "web-1", "--wait")

    assert result.exit_code == 1
    assert (
        result.stderr.strip() == "Error (NotApplicable): web-1 has run policy AlwaysOn: it is always started"
    )


def test_snapshot_create_waits_until_ready(invoke: Invoke, server: FakeServer) -> None:
    server.snapshot_statuses = [{"phase": "InProgress"}, {"phase": "Ready"}]

    result = invoke("snapshot", "create", "web-1", "--name", "before-upgrade", "--with-memory", "--wait")

    assert result.exit_code == 0, result.output
    [request] = server.requests_to("POST", "/v1/snapshots")
    assert request.body["metadata"] == {"name": "before-upgrade"}
    assert request.body["spec"] == {"vm": "web-1", "with_memory": True, "required_consistency": False}
    assert result.stdout.splitlines()[-1] == "snapshot/before-upgrade ready"


def test_a_failed_snapshot_exits_1(invoke: Invoke, server: FakeServer) -> None:
    server.snapshot_statuses = [{"phase": "Failed", "message": "disk vol-1 is not snapshottable"}]

    result = invoke("snapshot", "create", "web-1", "--wait")

    assert result.exit_code == 1
    assert "Error (SnapshotFailed): snapshot/web-1-snap-" in result.stderr
    assert "failed: disk vol-1 is not snapshottable" in result.stderr


def test_restore_sends_the_snapshot_and_mode(invoke: Invoke, server: FakeServer) -> None:
    server.operation_statuses = [{"phase": "Completed"}]

    result = invoke("restore", "web-1", "--snapshot", "before-upgrade", "--mode", "bESTeFFORT", "--wait")

    assert result.exit_code == 0, result.output
    assert _posted_operation(server)["spec"] == {
        "vm": "web-1",
        "type": "Restore",
        "force": False,
        "restore": {"snapshot": "before-upgrade", "mode": "BestEffort"},
    }


def test_a_dry_run_restore_prints_its_report(invoke: Invoke, server: FakeServer) -> None:
    report = {"disks": {"web-1-root": "revert to snapshot"}, "spec": {"cpu": "2 -> 4"}}
    server.operation_statuses = [
        {"phase": "InProgress", "step": "Validate"},
        {
            "phase": "Completed",
            "step": "Validate",
            "message": "restore would change 2 items",
            "progress": report,
        },
    ]

    result = invoke("restore", "web-1", "--snapshot", "before-upgrade", "--mode", "DryRun")

    assert result.exit_code == 0, result.output
    report_text = result.stdout.split("Dry-run report:\n", 1)[1]
    assert yaml.safe_load(report_text.replace("restore would change 2 items", "")) == report
    assert "restore would change 2 items" in report_text
