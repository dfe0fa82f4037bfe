"""One request starts, stops or restarts every VM a selector matches, with an outcome per VM (live server)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from tests.conftest import LiveServer


def wait_for(check: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"{what}: not reached")


def fleet(client: httpx.Client) -> None:
    """Running VMs: web-1, web-2 (Manual), web-3 (AlwaysOn: Stop refused) and db-1 (Manual)."""
    host = {"kind": "Host", "metadata": {"name": "h1"}, "spec": {"uri": "sim://h1"}}
    assert client.post("/v1/hosts", json=host).status_code == 201
    for name, policy in (("web-1", "Manual"), ("web-2", "Manual"), ("web-3", "AlwaysOn"), ("db-1", "Manual")):
        doc = {
            "kind": "VirtualMachine",
            "metadata": {"name": name, "labels": {"app": name.split("-")[0]}},
            "spec": {"run_policy": policy},
        }
        assert client.post("/v1/vms", json=doc).status_code == 201
        if policy == "Manual":
            start = {
                "kind": "VirtualMachineOperation",
                "metadata": {"name": f"{name}-boot"},
                "spec": {"vm": name, "type": "Start"},
            }
            wait_for(
                lambda d=start: client.post("/v1/operations", json=d).status_code == 201, f"{name} started"
            )
    wait_for(
        lambda: all(v["status"]["phase"] == "Running" for v in client.get("/v1/vms").json()["items"]),
        "every VM Running",
    )


def test_stop_every_vm_a_selector_matches(live_server: LiveServer) -> None:
    with live_server.client("admin") as admin:
        fleet(admin)
    with live_server.client("operator") as client:
        response = client.post("/v1/vms/actions/stop", json={"labelSelector": "app=web"})
        assert response.status_code == 200, response.text
        result = response.json()
        outcomes = {o["vm"]: o for o in result["items"]}
        assert sorted(outcomes) == ["web-1", "web-2", "web-3"]
        assert outcomes["web-3"]["operation"] is None and outcomes["web-3"]["reason"] == "NotApplicable"
        assert "AlwaysOn" in outcomes["web-3"]["message"]
        batch = result["metadata"]["batch"]
        assert result["metadata"] == {"batch": batch, "selected": 3, "created": 2, "refused": 1}

        for vm in ("web-1", "web-2"):
            name = outcomes[vm]["operation"]
            assert outcomes[vm]["reason"] == "Created" and name.startswith(f"{vm}-stop-")
            operation = client.get(f"/v1/operations/{name}").json()
            assert operation["spec"] == {**operation["spec"], "vm": vm, "type": "Stop", "force": False}
        listed = client.get("/v1/operations", params={"labelSelector": f"virtplane.io/batch={batch}"}).json()
        assert sorted(o["metadata"]["name"] for o in listed["items"]) == sorted(
            outcomes[vm]["operation"] for vm in ("web-1", "web-2")
        )
        wait_for(
            lambda: (
                [
                    v["metadata"]["name"]
                    for v in client.get("/v1/vms", params={"fieldSelector": "status.phase=Stopped"}).json()[
                        "items"
                    ]
                ]
                == ["web-1", "web-2"]
            ),
            "web-1 and web-2 Stopped",
        )
        assert client.get("/v1/vms/db-1").json()["status"]["phase"] == "Running"

        # a second request while nothing applies: every VM refused, nothing created
        again = client.post(
            "/v1/vms/actions/stop", json={"labelSelector": "app=web", "fieldSelector": "status.phase=Stopped"}
        ).json()
        assert {o["reason"] for o in again["items"]} == {"NotApplicable"}
        assert again["metadata"]["created"] == 0

        started = client.post("/v1/vms/actions/start", json={"fieldSelector": "status.phase=Stopped"}).json()
        assert [(o["vm"], o["reason"]) for o in started["items"]] == [
            ("web-1", "Created"),
            ("web-2", "Created"),
        ]
        restarted = client.post(
            "/v1/vms/actions/restart", json={"labelSelector": "app=db", "force": True}
        ).json()
        assert restarted["items"][0]["reason"] == "Created"
        op = client.get(f"/v1/operations/{restarted['items'][0]['operation']}").json()
        assert op["spec"]["type"] == "Restart" and op["spec"]["force"] is True
        events = client.get("/v1/events", params={"kind": "operations", "limit": 50}).json()["items"]
        assert any(f"batch {batch}" in e["message"] and "test-operator" in e["message"] for e in events)


def test_an_action_needs_a_selector_and_a_well_formed_one(live_server: LiveServer) -> None:
    with live_server.client("operator") as client:
        response = client.post("/v1/vms/actions/stop", json={})
        assert response.status_code == 422 and response.json()["reason"] == "SelectorRequired"
        response = client.post("/v1/vms/actions/stop", json={"labelSelector": "app in (web"})
        body = response.json()
        assert response.status_code == 422 and body["reason"] == "InvalidSelector" and body["position"] == 11
        response = client.post("/v1/vms/actions/start", json={"fieldSelector": "spec.vm=x"})
        assert response.status_code == 422 and response.json()["position"] == 0
        response = client.post("/v1/vms/actions/stop", json={"labelSelector": "app=none"})
        assert response.status_code == 200
        assert response.json()["items"] == [] and response.json()["metadata"]["selected"] == 0
    with live_server.client("viewer") as viewer:
        assert viewer.post("/v1/vms/actions/stop", json={"labelSelector": "app=web"}).status_code == 403
