"""Sizes with units through the API: stored in the field's own unit, a bad unit a 422 that says why,
and the OpenAPI document describing both shapes."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import LiveServer

POOL = {"kind": "StoragePool", "metadata": {"name": "p9"}, "spec": {"kind": "shared", "cluster": "c1"}}


@pytest.mark.parametrize(
    ("plural", "spec", "field", "stored_or_reason"),
    [
        ("vms", {"memory_mib": "4Gi"}, "memory_mib", 4096),
        ("vms", {"memory": "512Mi"}, "memory_mib", 512),
        ("vms", {"memory_mib": 1024}, "memory_mib", 1024),
        ("vms", {"memory_mib": "2048"}, "memory_mib", 2048),
        ("volumes", {"pool": "p9", "size_gib": "20G"}, "size_gib", 20),
        ("volumes", {"pool": "p9", "size": "1Ti"}, "size_gib", 1024),
        ("storagepools", {**POOL["spec"], "capacity_gib": "2Ti"}, "capacity_gib", 2048),
        ("vms", {"memory_mib": "4Xi"}, "spec.memory_mib", "unknown unit 'Xi'"),
        ("vms", {"memory": "4GB"}, "spec.memory_mib", "'4GB' is not a whole number of MiB"),
        ("vms", {"memory_mib": "8Mi"}, "spec.memory_mib", "greater than or equal to 16"),
        ("vms", {"memory": "1Gi", "memory_mib": 1024}, "spec", "memory and memory_mib are the same size"),
        ("volumes", {"pool": "p9", "size_gib": "1.5Gi"}, "spec.size_gib", "not a whole number of GiB"),
        ("volumes", {"pool": "p9", "size_gib": "lots"}, "spec.size_gib", "'lots' is not a size"),
    ],
)
def test_sizes_with_units_on_create(
    live_server: LiveServer, plural: str, spec: dict[str, Any], field: str, stored_or_reason: int | str
) -> None:
    kind = {"vms": "VirtualMachine", "volumes": "Volume", "storagepools": "StoragePool"}[plural]
    name = "p8" if plural == "storagepools" else "x9"
    with live_server.client("admin") as client:
        assert (
            client.post(
                "/v1/storagepools", json={**POOL, "spec": {**POOL["spec"], "capacity_gib": 100}}
            ).status_code
            == 201
        )
        answer = client.post(f"/v1/{plural}", json={"kind": kind, "metadata": {"name": name}, "spec": spec})

    if isinstance(stored_or_reason, int):
        assert answer.status_code == 201, answer.text
        assert answer.json()["spec"][field] == stored_or_reason
        assert "memory" not in answer.json()["spec"] and "size" not in answer.json()["spec"]
    else:
        assert answer.status_code == 422, answer.text
        assert answer.json()["fields"] == [field]
        assert stored_or_reason in answer.json()["message"]


def test_a_patch_takes_a_unit_too(live_server: LiveServer) -> None:
    vm = {"kind": "VirtualMachine", "metadata": {"name": "vm9"}, "spec": {"run_policy": "Manual"}}
    with live_server.client("admin") as client:
        client.post("/v1/vms", json=vm)
        patched = client.patch("/v1/vms/vm9", json={"spec": {"memory_mib": "2Gi"}})
        refused = client.patch("/v1/vms/vm9", json={"spec": {"memory_mib": "2 parsecs"}})

    assert patched.status_code == 200 and patched.json()["spec"]["memory_mib"] == 2048
    assert refused.status_code == 422 and "unknown unit 'parsecs'" in refused.json()["message"]


def test_openapi_describes_a_size_as_a_number_or_a_size_with_a_unit(live_server: LiveServer) -> None:
    with live_server.client(None) as client:
        schemas = client.get("/openapi.json").json()["components"]["schemas"]
    memory = schemas["VirtualMachineSpec"]["properties"]["memory_mib"]
    number, text = memory["anyOf"]
    assert (number["type"], number["minimum"], number["maximum"]) == ("integer", 16, 4 * 1024 * 1024)
    assert text["type"] == "string" and "4Gi" in text["description"]
    assert "MiB" in memory["description"]
