"""Host maintenance, enable/disable, simulator faults, tokens, events."""

from __future__ import annotations

import json

import httpx
import pytest

from .conftest import Invoke, host
from .fake_server import FakeServer


@pytest.fixture(autouse=True)
def node_1(server: FakeServer) -> None:
    server.add("hosts", host("node-1"))


def test_a_dry_run_prints_the_plan_and_moves_nothing(invoke: Invoke, server: FakeServer) -> None:
    result = invoke(
        "host", "maintenance", "enable", "node-1", "--strategy", "migration", "--dry-run", "--wait"
    )

    assert result.exit_code == 0, result.output
    [request] = server.requests_to("POST", "/v1/hosts/node-1/maintenance")
    assert request.body == {"strategy": "Migration", "dry_run": True}
    assert "Maintenance of host/node-1 (dry run): Planned  strategy=Migration" in result.stdout
    assert ["web-1", "Migrate", "node-2", "shared", "storage", "-"] in [
        line.split() for line in result.stdout.splitlines()
    ]
    assert not server.requests_to("GET", "/v1/hosts/node-1"), "a dry run has nothing to wait for"


def test_without_a_strategy_the_setting_decides(invoke: Invoke, server: FakeServer) -> None:
    invoke("host", "maintenance", "enable", "node-1")

    assert server.requests_to("POST", "/v1/hosts/node-1/maintenance")[0].body == {
        "strategy": None,
        "dry_run": False,
    }


def test_wait_succeeds_when_the_host_reaches_maintenance(invoke: Invoke, server: FakeServer) -> None:
    server.host_states = ["PrepareForMaintenance", "PrepareForMaintenance", "Maintenance"]

    result = invoke("host", "maintenance", "enable", "node-1", "--wait")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-3:] == [
        "PrepareForMaintenance",
        "Maintenance",
        "host/node-1 is in Maintenance",
    ]


def test_wait_shows_per_vm_progress(invoke: Invoke, server: FakeServer) -> None:
    server.host_states = ["PrepareForMaintenance", "Maintenance"]
    server.overrides[("GET", "/v1/hosts/node-1/maintenance")] = httpx.Response(
        200,
        json={
            "host": "node-1",
            "phase": "InProgress",
            "plan": {"items": []},
            "progress": {"web-1": {"phase": "Migrating", "target": "node-2", "percent": 40}},
            "message": "1 migration running",
        },
    )

    result = invoke("host", "maintenance", "enable", "node-1", "--wait")

    assert result.exit_code == 0, result.output
    assert (
        "PrepareForMaintenance  web-1: phase=Migrating, target=node-2, percent=40  1 migration running"
        in result.stdout.splitlines()
    )


def test_wait_exits_1_on_error_in_maintenance(invoke: Invoke, server: FakeServer) -> None:
    server.host_states = ["PrepareForMaintenance", "ErrorInMaintenance"]
    server.resources["hosts"]["node-1"]["status"]["message"] = (
        "db-1 has local disks and the strategy is Error"
    )

    result = invoke("host", "maintenance", "enable", "node-1", "--wait")

    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "Error (ErrorInMaintenance): host/node-1: db-1 has local disks and the strategy is Error"
    )


def test_show_and_cancel(invoke: Invoke, server: FakeServer) -> None:
    invoke("host", "maintenance", "enable", "node-1")

    shown = invoke("host", "maintenance", "show", "node-1", "-o", "json")
    cancelled = invoke("host", "maintenance", "cancel", "node-1")
    shown_after = invoke("host", "maintenance", "show", "node-1")

    assert json.loads(shown.stdout)["host"] == "node-1"
    assert cancelled.stdout.strip() == "maintenance of host/node-1 cancelled"
    assert shown_after.exit_code == 1
    assert "Error (NotFound): host node-1 is not in maintenance" in shown_after.stderr


@pytest.mark.parametrize(("command", "enabled"), [("disable", False), ("enable", True)])
def test_enable_and_disable_patch_spec_enabled(
    invoke: Invoke, server: FakeServer, command: str, enabled: bool
) -> None:
    result = invoke("host", command, "node-1")

    assert result.exit_code == 0, result.output
    assert server.requests_to("PATCH", "/v1/hosts/node-1")[0].body == {"spec": {"enabled": enabled}}
    assert server.resources["hosts"]["node-1"]["spec"]["enabled"] is enabled
    assert result.stdout.strip() == f"host/node-1 {command}d"


def test_sim_fault_posts_the_fault(invoke: Invoke, server: FakeServer) -> None:
    result = invoke("sim", "fault", "node-1", "fail-start", "--vm", "web-1", "--count", "3")

    assert result.exit_code == 0, result.output
    [request] = server.requests_to("POST", "/v1/hosts/node-1/faults")
    assert request.body == {"kind": "fail-start", "vm": "web-1", "count": 3}
    assert result.stdout.strip() == "fault fail-start x3 injected into host/node-1 on vm/web-1"


def test_token_create_prints_the_token(invoke: Invoke, server: FakeServer) -> None:
    result = invoke("token", "create", "ci", "--role", "operator")

    assert result.exit_code == 0, result.output
    assert server.requests_to("POST", "/v1/tokens")[0].body == {"name": "ci", "role": "operator"}
    assert "tok-123" in result.stdout.splitlines()


def test_events_filter_by_kind_and_name(invoke: Invoke, server: FakeServer) -> None:
    result = invoke("events", "--kind", "vm", "--name", "web-1", "--limit", "5", "-o", "json")

    assert result.exit_code == 0, result.output
    assert server.requests[-1].params == {"kind": "VirtualMachine", "name": "web-1", "limit": "5"}
    assert json.loads(result.stdout) == {"items": []}
