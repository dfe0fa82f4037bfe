"""POST/GET/DELETE /v1/hosts/{name}/maintenance over a live server: roles, plans, 4xx reasons."""

from __future__ import annotations

import time

from tests.conftest import LiveServer

PATH = "/v1/hosts/h1/maintenance"


def _host(name: str, enabled: bool = True) -> dict[str, object]:
    return {
        "kind": "Host",
        "metadata": {"name": name},
        "spec": {"uri": f"sim://{name}", "capacity": {"vcpus": 8, "memory_mib": 8192}, "enabled": enabled},
    }


def _wait_state(live_server: LiveServer, name: str, state: str) -> None:
    deadline = time.monotonic() + 10
    with live_server.client("viewer") as client:
        while client.get(f"/v1/hosts/{name}").json()["status"]["resource_state"] != state:
            assert time.monotonic() < deadline, f"host {name} never reached {state}"
            time.sleep(0.02)


def test_roles_plan_and_cancel(live_server: LiveServer) -> None:
    with live_server.client("admin") as admin:
        assert admin.post("/v1/hosts", json=_host("h1")).status_code == 201
        assert admin.post("/v1/hosts", json=_host("h2")).status_code == 201
    with live_server.client("viewer") as viewer:
        missing = viewer.get(PATH)
        assert missing.status_code == 404 and missing.json()["reason"] == "NotInMaintenance"
        assert viewer.post(PATH, json={"dry_run": True}).status_code == 403
    with live_server.client("operator") as operator:
        refused = operator.post(PATH, json={"strategy": None, "dry_run": False})
        assert refused.status_code == 403 and refused.json()["reason"] == "Forbidden"
    with live_server.client("admin") as admin:
        bad = admin.post(PATH, json={"strategy": "Teleport", "dry_run": False})
        assert bad.status_code == 422 and bad.json()["reason"] == "Invalid"
        unknown = admin.post("/v1/hosts/nope/maintenance", json={})
        assert unknown.status_code == 404 and unknown.json()["reason"] == "NotFound"
        dry = admin.post(PATH, json={"strategy": "Migration", "dry_run": True})
        assert dry.status_code == 200
        assert dry.json()["phase"] == "Planned" and dry.json()["plan"] == {"feasible": True, "items": []}
        assert admin.get(PATH).status_code == 404, "a dry run stores nothing"
        started = admin.post(PATH, json={"strategy": "ForceStop", "dry_run": False})
        assert started.status_code == 200 and started.json()["strategy"] == "ForceStop"
    _wait_state(live_server, "h1", "Maintenance")
    with live_server.client("admin") as admin:
        again = admin.post(PATH, json={"strategy": "Migration", "dry_run": False})
        assert again.status_code == 409 and again.json()["reason"] == "MaintenanceInProgress"
        assert admin.post(PATH, json={"strategy": None, "dry_run": False}).status_code == 200
    with live_server.client("viewer") as viewer:
        shown = viewer.get(PATH).json()
        assert shown["phase"] == "Completed" and shown["host_state"] == "Maintenance"
    with live_server.client("operator") as operator:
        assert operator.delete(PATH).status_code == 403
    with live_server.client("admin") as admin:
        bad = admin.delete(PATH, params={"return_vms": "maybe"})
        assert bad.status_code == 422 and bad.json()["reason"] == "Invalid"
        assert "return_vms" in bad.json()["message"]
        cancelled = admin.delete(PATH, params={"return_vms": "true"})
        assert cancelled.status_code == 200 and cancelled.json()["cancel"] is True
        assert cancelled.json()["return_vms"] is True
    _wait_state(live_server, "h1", "Enabled")


def test_a_disabled_host_is_refused(live_server: LiveServer) -> None:
    with live_server.client("admin") as admin:
        assert admin.post("/v1/hosts", json=_host("h1", enabled=False)).status_code == 201
    _wait_state(live_server, "h1", "Disabled")
    with live_server.client("admin") as admin:
        refused = admin.post(PATH, json={"strategy": None, "dry_run": False})
        assert refused.status_code == 409 and refused.json()["reason"] == "HostDisabled"
        gone = admin.delete(PATH)
        assert gone.status_code == 404 and gone.json()["reason"] == "NotInMaintenance"
