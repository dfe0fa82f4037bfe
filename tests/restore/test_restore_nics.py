"""Restore puts back the snapshot's NICs (issue 14): their MACs and addresses, claimed again.

An address another VM took in the meantime fails a Strict restore with the reason,
before the VM is touched; BestEffort drops that NIC and says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer, wait_json

FIRST = {"network": "lan", "ip": "10.8.0.5", "mac": "52:54:00:00:08:05"}


def vm_doc(name: str, *nics: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"run_policy": "Manual", "nics": list(nics)}}


def finished(client: httpx.Client, plural: str, name: str) -> dict[str, Any]:
    done = ("Ready", "Completed", "Failed")
    body: dict[str, Any] = wait_json(client, f"/v1/{plural}/{name}", lambda o: o["status"]["phase"] in done)
    return body


@pytest.fixture
def admin(live_server: LiveServer) -> Iterator[httpx.Client]:
    """VM a snapshotted with FIRST, then moved to another address and MAC."""
    with live_server.client("admin") as client:
        network = {"kind": "bridge", "bridge": "br0", "cluster": "default", "subnet": "10.8.0.0/24"}
        for plural, doc in (
            ("hosts", {"metadata": {"name": "h1"}, "spec": {"uri": "sim://h1"}}),
            ("networks", {"metadata": {"name": "lan"}, "spec": network}),
            ("vms", vm_doc("a", FIRST)),
            ("snapshots", {"metadata": {"name": "s"}, "spec": {"vm": "a"}}),
        ):
            assert client.post(f"/v1/{plural}", json=doc).status_code == 201
        assert finished(client, "snapshots", "s")["status"]["phase"] == "Ready"
        moved = client.put("/v1/vms/a", json=vm_doc("a", {"network": "lan", "ip": "10.8.0.6"}))
        assert moved.status_code == 200, moved.text
        yield client


def restore(client: httpx.Client, name: str, mode: str) -> dict[str, Any]:
    spec = {"vm": "a", "type": "Restore", "restore": {"snapshot": "s", "mode": mode}}
    assert client.post("/v1/operations", json={"metadata": {"name": name}, "spec": spec}).status_code == 201
    return finished(client, "operations", name)


def test_restore_brings_back_the_snapshots_mac_and_address(admin: httpx.Client) -> None:
    assert restore(admin, "r1", "Strict")["status"]["phase"] == "Completed"
    assert admin.get("/v1/vms/a").json()["spec"]["nics"] == [FIRST]
    # held again: nobody else can take them, and the address a had meanwhile is free
    taken = admin.post("/v1/vms", json=vm_doc("b", {"network": "lan", "ip": FIRST["ip"]}))
    assert (taken.status_code, taken.json()["reason"]) == (409, "AddressInUse")
    assert admin.post("/v1/vms", json=vm_doc("c", {"network": "lan", "ip": "10.8.0.6"})).status_code == 201


def test_an_address_taken_meanwhile_fails_strict_and_is_dropped_by_best_effort(admin: httpx.Client) -> None:
    assert admin.post("/v1/vms", json=vm_doc("b", {"network": "lan", "ip": FIRST["ip"]})).status_code == 201
    before = admin.get("/v1/vms/a").json()["spec"]["nics"]
    strict = restore(admin, "r1", "Strict")
    assert (strict["status"]["phase"], strict["status"]["reason"]) == ("Failed", "AddressInUse")
    assert "10.8.0.5 on network lan is in use by VirtualMachine b" in strict["status"]["message"]
    assert admin.get("/v1/vms/a").json()["spec"]["nics"] == before  # untouched
    best = restore(admin, "r2", "BestEffort")
    assert best["status"]["phase"] == "Completed", best["status"]
    assert "dropped NIC(s) 0" in best["status"]["message"]
    assert admin.get("/v1/vms/a").json()["spec"]["nics"] == []
    assert admin.get("/v1/vms/b").json()["spec"]["nics"][0]["ip"] == FIRST["ip"]
