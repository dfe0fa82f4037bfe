"""GET /v1/whoami (who the page signs in as) and GET /v1/vms/{name}/placement (the migrate
target picker's verdicts), over a live server on simulated hosts."""

from __future__ import annotations

from typing import Any

from tests.conftest import LiveServer, wait_json


def _host(name: str, enabled: bool = True) -> dict[str, Any]:
    return {
        "kind": "Host",
        "metadata": {"name": name},
        "spec": {"uri": f"sim://{name}", "capacity": {"vcpus": 8, "memory_mib": 8192}, "enabled": enabled},
    }


def _vm(name: str, group: str) -> dict[str, Any]:
    return {
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "run_policy": "AlwaysOn",
            "cpu": 2,
            "memory_mib": 1024,
            "placement": {"anti_affinity_group": group},
        },
    }


def test_whoami_tells_each_token_its_name_and_role(live_server: LiveServer) -> None:
    for role in ("viewer", "operator", "admin"):
        with live_server.client(role) as client:
            answer = client.get("/v1/whoami")
            assert answer.status_code == 200
            assert answer.json() == {"name": f"test-{role}", "role": role}
    with live_server.client(None) as anonymous:
        refused = anonymous.get("/v1/whoami")
        assert refused.status_code == 401 and refused.json()["reason"] == "Unauthorized"
        stranger = anonymous.get("/v1/whoami", headers={"Authorization": "Bearer vp_nope"})
        assert stranger.status_code == 401 and stranger.json()["message"] == "the token is not valid"


def test_placement_gives_each_host_its_verdict_and_reason(live_server: LiveServer) -> None:
    with live_server.client("admin") as admin:
        for host in (_host("h1"), _host("h2"), _host("h3", enabled=False)):
            assert admin.post("/v1/hosts", json=host).status_code == 201
        wait_json(admin, "/v1/hosts", lambda b: all(h["status"]["connection"] == "Up" for h in b["items"]))
        for name in ("web-1", "web-2"):
            assert admin.post("/v1/vms", json=_vm(name, "web")).status_code == 201
        for name in ("web-1", "web-2"):
            wait_json(admin, f"/v1/vms/{name}", lambda b: b["status"]["phase"] == "Running")
        here = admin.get("/v1/vms/web-1").json()["status"]["host"]
        there = ({"h1", "h2"} - {here}).pop()  # anti-affinity spread the two over h1 and h2

    with live_server.client("viewer") as viewer:
        answer = viewer.get("/v1/vms/web-1/placement")
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["vm"] == "web-1" and body["host"] == here and body["phase"] == "Running"
        assert body["chosen"] is None and body["blocked"] == "" and body["copy_storage"] is False
        assert {v["host"]: (v["ok"], v["reason"]) for v in body["hosts"]} == {
            here: (False, "current host of the VM"),
            there: (False, "anti-affinity group web already there"),
            "h3": (False, "disabled"),
        }

    with live_server.client("admin") as admin:
        assert admin.patch("/v1/hosts/h3", json={"spec": {"enabled": True}}).status_code == 200
        body = wait_json(admin, "/v1/vms/web-1/placement", lambda b: b["chosen"] == "h3")
        h3 = next(v for v in body["hosts"] if v["host"] == "h3")
        assert (h3["ok"], h3["reason"], h3["verdict"], h3["rank"], h3["reasons"]) == (
            True,
            "",
            "chosen",
            1,
            [],
        )
        assert body["mode"] == "migration"

        missing = admin.get("/v1/vms/nope/placement")
        assert missing.status_code == 404 and missing.json()["reason"] == "NotFound"
        assert "nope" in missing.json()["message"]
    with live_server.client(None) as anonymous:
        assert anonymous.get("/v1/vms/web-1/placement").status_code == 401
