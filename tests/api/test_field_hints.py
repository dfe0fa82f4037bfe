"""A 422 for a field no model has names it (also in ``fields``) and the field meant, on create,
replace and patch."""

from __future__ import annotations

from tests.conftest import LiveServer

VM = {"kind": "VirtualMachine", "metadata": {"name": "vm9"}, "spec": {"run_policy": "Manual"}}


def test_unknown_fields_get_the_close_match_on_every_write(live_server: LiveServer) -> None:
    with live_server.client("admin") as client:
        created = client.post("/v1/vms", json={**VM, "spec": {"memory": 4096}})
        client.post("/v1/vms", json=VM)
        current = client.get("/v1/vms/vm9").json()
        replaced = client.put("/v1/vms/vm9", json={**current, "spec": {**current["spec"], "memry_mib": 1}})
        patched = client.patch("/v1/vms/vm9", json={"metadata": {"label": {"a": "b"}}})

    assert created.status_code == 422
    assert created.json()["message"] == "spec.memory: unknown field; did you mean memory_mib?"
    assert created.json()["fields"] == ["spec.memory"], "for clients that point at the field"
    assert replaced.json()["message"] == "spec.memry_mib: unknown field; did you mean memory_mib?"
    assert (patched.status_code, patched.json()["reason"]) == (422, "Invalid")
    assert patched.json()["message"] == "metadata.label: unknown field; did you mean labels?"
    assert patched.json()["fields"] == ["metadata.label"]
