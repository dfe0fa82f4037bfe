"""A 422 for a field no model has names it (also in ``fields``) and the field meant, on create,
replace and patch."""

from __future__ import annotations

from tests.conftest import LiveServer

VM = {"kind": "VirtualMachine", "metadata": {"name": "vm9"}, "spec": {"run_policy": "Manual"}}


def test_unknown_fields_get_the_close_match_on_every_write(live_server: LiveServer) -> None:
    with live_server.client("admin") as client:
        created = client.post("/v1/vms", json={**VM, "spec": {"memory_gb": 4}})
        client.post("/v1/vms", json=VM)
        current = client.get("/v1/vms/vm9").json()
        replaced = client.put("/v1/vms/vm9", json={**current, "spec": {**current["spec"], "memry_mib": 1}})
        patched = client.patch("/v1/vms/vm9", json={"metadata": {"label": {"a": "b"}}})

    assert created.status_code == 422
    assert created.json()["message"] == "spec.memory_gb: unknown field; did you mean memory_mib?"
    assert created.json()["fields"] == ["spec.memory_gb"], "for clients that point at the field"
    assert replaced.json()["message"] == "spec.memry_mib: unknown field; did you mean memory_mib?"
    assert (patched.status_code, patched.json()["reason"]) == (422, "Invalid")
    assert patched.json()["message"] == "metadata.label: unknown field; did you mean labels?"
    assert patched.json()["fields"] == ["metadata.label"]


def test_a_bad_migration_policy_is_a_422_that_names_the_field(live_server: LiveServer) -> None:
    with live_server.client("admin") as client:
        negative = client.post("/v1/vms", json={**VM, "spec": {"migration": {"post_copy_after_s": -1}}})
        misspelt = client.post("/v1/vms", json={**VM, "spec": {"migration": {"auto_converg": True}}})
        good = client.post("/v1/vms", json={**VM, "spec": {"migration": {"auto_converge": True}}})

    assert negative.status_code == 422 and negative.json()["fields"] == ["spec.migration.post_copy_after_s"]
    assert misspelt.status_code == 422
    assert (
        misspelt.json()["message"]
        == "spec.migration.auto_converg: unknown field; did you mean auto_converge?"
    )
    assert good.status_code == 201 and good.json()["spec"]["migration"] == {
        "auto_converge": True,
        "post_copy_after_s": None,
        "max_downtime_ms": None,
        "bandwidth_mib_s": None,
    }
