"""``?dryRun=true`` on create, replace and patch: admission and validation run, the answer is
what would be stored, and nothing is written (no object, no new revision, no event)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import LiveServer

NETWORK = {
    "kind": "Network",
    "metadata": {"name": "lan"},
    "spec": {"kind": "bridge", "bridge": "br0", "cluster": "default", "subnet": "10.7.0.0/24"},
}
VM = {
    "kind": "VirtualMachine",
    "metadata": {"name": "web"},
    "spec": {"run_policy": "Manual", "cpu": 1, "nics": [{"network": "lan"}]},
}
DRY = {"dryRun": "true"}


def _revision(client: httpx.Client) -> Any:
    return client.get("/v1/vms").json()["metadata"]["resource_version"]


def _event_count(client: httpx.Client) -> int:
    return len(client.get("/v1/events", params={"limit": 1000}).json()["items"])


def test_a_dry_run_create_answers_what_would_be_stored_and_writes_nothing(live_server: LiveServer) -> None:
    with live_server.client("admin") as client:
        assert client.post("/v1/networks", json=NETWORK).status_code == 201
        revision, events = _revision(client), _event_count(client)

        answer = client.post("/v1/vms", json=VM, params=DRY)

        assert answer.status_code == 201, answer.text
        [nic] = answer.json()["spec"]["nics"]
        assert nic["mac"] and nic["ip"].startswith("10.7.0."), "admission filled them in"
        assert client.get("/v1/vms/web").status_code == 404
        assert (_revision(client), _event_count(client)) == (revision, events)


def test_dry_run_updates_answer_the_change_and_leave_the_stored_object_alone(
    live_server: LiveServer,
) -> None:
    with live_server.client("admin") as client:
        client.post("/v1/networks", json=NETWORK)
        stored = client.post("/v1/vms", json=VM).json()
        stored = client.get("/v1/vms/web").json()

        changed = {**stored, "spec": {**stored["spec"], "cpu": 3}}
        replaced = client.put("/v1/vms/web", json=changed, params=DRY)
        patched = client.patch("/v1/vms/web", json={"spec": {"cpu": 4}}, params=DRY)

        assert replaced.status_code == 200, replaced.text
        assert replaced.json()["spec"]["cpu"] == 3
        assert replaced.json()["spec"]["nics"] == stored["spec"]["nics"], "the NIC keeps its MAC and IP"
        assert patched.status_code == 200, patched.text
        assert patched.json()["spec"]["cpu"] == 4
        after = client.get("/v1/vms/web").json()
        assert after["spec"]["cpu"] == 1
        assert after["metadata"]["resource_version"] == stored["metadata"]["resource_version"]


def test_a_dry_run_is_refused_as_the_real_write_would_be(live_server: LiveServer) -> None:
    with live_server.client("admin") as client:
        missing_network = client.post("/v1/vms", json=VM, params=DRY)
        client.post("/v1/networks", json=NETWORK)
        client.post("/v1/vms", json=VM)
        exists = client.post("/v1/vms", json=VM, params=DRY)
        stale = client.get("/v1/vms/web").json()
        stale["metadata"]["resource_version"] -= 1
        conflict = client.put("/v1/vms/web", json=stale, params=DRY)
    with live_server.client("viewer") as client:
        denied = client.patch("/v1/vms/web", json={"spec": {"cpu": 2}}, params=DRY)

    assert (missing_network.status_code, missing_network.json()["reason"]) == (422, "NetworkNotFound")
    assert (exists.status_code, exists.json()["reason"]) == (409, "AlreadyExists")
    assert (conflict.status_code, conflict.json()["reason"]) == (409, "Conflict")
    assert denied.status_code == 403
