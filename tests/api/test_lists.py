"""Lists in Kubernetes' conventions over the live server: limit/continue, selectors, bad input, events' pages."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import LiveServer
from virtplane.domain.resources import Metadata, VirtualMachine, VirtualMachineSpec


def vm(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "kind": "VirtualMachine",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"run_policy": "AlwaysOff"},
    }


def names(page: dict[str, Any]) -> list[str]:
    return [item["metadata"]["name"] for item in page["items"]]


def error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = response.json()
    assert body["reason"] and body["message"]
    return body


def test_a_list_comes_a_page_at_a_time_with_a_continue_token(live_server: LiveServer) -> None:
    with live_server.client("operator") as client:
        for i in range(7):
            assert client.post("/v1/vms", json=vm(f"vm-{i}")).status_code == 201
        first = client.get("/v1/vms", params={"limit": 3}).json()
        assert names(first) == ["vm-0", "vm-1", "vm-2"]
        revision = first["metadata"]["resource_version"]
        assert revision >= max(item["metadata"]["resource_version"] for item in first["items"])
        token = first["metadata"]["continue"]
        assert isinstance(token, str) and token

        # a write between pages: the new VM after the cursor shows up, none is repeated or skipped
        assert client.post("/v1/vms", json=vm("vm-25")).status_code == 201
        second = client.get("/v1/vms", params={"limit": 3, "continue": token}).json()
        assert names(second) == ["vm-25", "vm-3", "vm-4"]
        assert second["metadata"]["resource_version"] == revision  # the list's revision is the first page's
        third = client.get("/v1/vms", params={"limit": 3, "continue": second["metadata"]["continue"]}).json()
        assert names(third) == ["vm-5", "vm-6"]
        assert third["metadata"]["continue"] is None

        everything = client.get("/v1/vms").json()
        assert len(everything["items"]) == 8 and everything["metadata"]["continue"] is None


def test_without_a_limit_a_page_holds_500(live_server: LiveServer) -> None:
    for i in range(501):
        live_server.store.create(
            VirtualMachine(metadata=Metadata(name=f"vm-{i:04d}"), spec=VirtualMachineSpec())
        )
    with live_server.client("viewer") as client:
        page = client.get("/v1/vms").json()
        assert len(page["items"]) == 500
        rest = client.get("/v1/vms", params={"continue": page["metadata"]["continue"]}).json()
        assert names(rest) == ["vm-0500"]
        error(client.get("/v1/vms", params={"limit": 5001}), 422)
        error(client.get("/v1/vms", params={"limit": 0}), 422)


def test_selectors_filter_on_the_server(live_server: LiveServer) -> None:
    with live_server.client("operator") as client:
        client.post("/v1/vms", json=vm("web-1", {"app": "web", "tier": "front"}))
        client.post("/v1/vms", json=vm("web-2", {"app": "web"}))
        client.post("/v1/vms", json=vm("db-1", {"app": "db"}))
        client.post("/v1/vms", json=vm("bare-1"))

        def listed(**params: Any) -> list[str]:
            response = client.get("/v1/vms", params=params)
            assert response.status_code == 200, response.text
            return names(response.json())

        assert listed(labelSelector="app=web") == ["web-1", "web-2"]
        assert listed(labelSelector="app!=web") == ["bare-1", "db-1"]
        assert listed(labelSelector="app in (db, web),!tier") == ["db-1", "web-2"]
        assert listed(fieldSelector="metadata.name=db-1") == ["db-1"]
        assert listed(fieldSelector="spec.run_policy=AlwaysOff", labelSelector="tier") == ["web-1"]
        # AlwaysOff VMs settle Stopped, with no host
        assert listed(fieldSelector="status.host=", limit=1) == ["bare-1"]

        page = client.get("/v1/vms", params={"labelSelector": "app=web", "limit": 1}).json()
        rest = client.get(
            "/v1/vms", params={"labelSelector": "app=web", "continue": page["metadata"]["continue"]}
        ).json()
        assert names(page) + names(rest) == ["web-1", "web-2"]

        client.post(
            "/v1/operations",
            json={
                "kind": "VirtualMachineOperation",
                "metadata": {"name": "op-1"},
                "spec": {"vm": "db-1", "type": "Restart"},
            },
        )  # refused or not: the list below must not fail
        assert client.get("/v1/operations", params={"fieldSelector": "spec.vm=web-1"}).json()["items"] == []


def test_a_malformed_selector_is_a_422_that_says_where(live_server: LiveServer) -> None:
    with live_server.client("viewer") as client:
        body = error(client.get("/v1/vms", params={"labelSelector": "app in (web"}), 422)
        assert body["reason"] == "InvalidSelector"
        assert body["parameter"] == "labelSelector" and body["position"] == 11
        assert "at position 11" in body["message"] and "app in (web" in body["message"]

        body = error(client.get("/v1/vms", params={"fieldSelector": "status.phase=Running,spec.vm=x"}), 422)
        assert body["reason"] == "InvalidSelector"
        assert body["parameter"] == "fieldSelector" and body["position"] == 21
        assert "cannot select by field 'spec.vm'" in body["message"]

        body = error(client.get("/v1/hosts", params={"fieldSelector": "status.phase in (x)"}), 422)
        assert body["position"] == 0  # a host has no status.phase


def test_a_malformed_continue_token_is_a_422_and_an_expired_one_a_410(live_server: LiveServer) -> None:
    with live_server.client("operator") as client:
        for i in range(3):
            client.post("/v1/vms", json=vm(f"vm-{i}"))
        token = client.get("/v1/vms", params={"limit": 1}).json()["metadata"]["continue"]

        body = error(client.get("/v1/vms", params={"continue": token[:5] + "!" + token[6:]}), 422)
        assert body["reason"] == "InvalidContinue" and body["position"] == 5
        body = error(client.get("/v1/vms", params={"continue": "bm90LWEtdG9rZW4"}), 422)  # "not-a-token"
        assert body["reason"] == "InvalidContinue"
        body = error(client.get("/v1/hosts", params={"continue": token}), 422)
        assert "continues a list of VirtualMachine" in body["message"]

        client.post("/v1/vms", json=vm("vm-3"))
        client.post("/v1/vms", json=vm("vm-4"))  # two changes: whatever the controllers wrote meanwhile,
        live_server.store.compact_changes(keep_last=1)  # the changes after the token's revision are gone
        body = error(client.get("/v1/vms", params={"continue": token}), 410)
        assert body["reason"] == "Expired" and "list again" in body["message"]
        fresh = client.get("/v1/vms", params={"limit": 1}).json()
        assert client.get("/v1/vms", params={"continue": fresh["metadata"]["continue"]}).status_code == 200


def test_events_come_newest_page_first_and_older_pages_follow(live_server: LiveServer) -> None:
    for i in range(5):
        live_server.store.record_event("VirtualMachine", "vm-1", f"Step{i}")
    with live_server.client("viewer") as client:
        first = client.get("/v1/events", params={"limit": 2}).json()
        assert [e["reason"] for e in first["items"]] == ["Step3", "Step4"]  # oldest first within the page
        newest = first["metadata"]["resource_version"]
        assert newest == first["items"][-1]["id"]
        second = client.get(
            "/v1/events", params={"limit": 2, "continue": first["metadata"]["continue"]}
        ).json()
        assert [e["reason"] for e in second["items"]] == ["Step1", "Step2"]
        assert second["metadata"]["resource_version"] == newest
        third = client.get(
            "/v1/events", params={"limit": 2, "continue": second["metadata"]["continue"]}
        ).json()
        assert [e["reason"] for e in third["items"]] == ["Step0"]
        assert third["metadata"]["continue"] is None

        after = client.get("/v1/events", params={"after_id": third["items"][0]["id"], "limit": 10}).json()
        assert [e["reason"] for e in after["items"]] == ["Step1", "Step2", "Step3", "Step4"]
        token = client.get("/v1/vms", params={"limit": 1}).json()["metadata"]["continue"]
        if token:  # a token of another list is refused
            assert (
                error(client.get("/v1/events", params={"continue": token}), 422)["reason"]
                == "InvalidContinue"
            )
        bad = client.get("/v1/events", params={"continue": "eyJrIjoiRXZlbnQiLCJhIjoieCIsInIiOjF9"})
        assert error(bad, 422)["reason"] == "InvalidContinue"  # {"k":"Event","a":"x","r":1}
