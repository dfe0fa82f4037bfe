"""The backup kinds through the API (issue 36): who may write them, and the clear 4xx a bad
backup gets (a VM or target that does not exist, a spec changed, a base deleted under the
backups that build on it, a target deleted under its backups)."""

from __future__ import annotations

import httpx

from tests.conftest import LiveServer
from virtplane.domain.resources import VirtualMachineBackup
from virtplane.store.errors import Conflict

TARGET = {
    "kind": "BackupTarget",
    "metadata": {"name": "nightly"},
    "spec": {"cluster": "c1", "path": "/srv/backups", "capacity_gib": "2Ti"},
}


def backup(name: str, vm: str = "web", target: str = "nightly") -> dict[str, object]:
    return {"kind": "VirtualMachineBackup", "metadata": {"name": name}, "spec": {"vm": vm, "target": target}}


def seed(admin: httpx.Client) -> None:
    assert admin.post("/v1/backuptargets", json=TARGET).status_code == 201
    vm = {"metadata": {"name": "web"}, "spec": {"run_policy": "Manual"}}
    assert admin.post("/v1/vms", json=vm).status_code == 201


def test_an_admin_defines_targets_an_operator_takes_backups_a_viewer_reads(live_server: LiveServer) -> None:
    with (
        live_server.client("admin") as admin,
        live_server.client("operator") as operator,
        live_server.client("viewer") as viewer,
    ):
        seed(admin)
        target = admin.get("/v1/backuptargets/nightly").json()
        assert target["spec"]["capacity_gib"] == 2048
        other = {**TARGET, "metadata": {"name": "other"}}
        assert operator.post("/v1/backuptargets", json=other).status_code == 403
        assert operator.post("/v1/backups", json=backup("b1")).status_code == 201
        assert viewer.post("/v1/backups", json=backup("b2")).status_code == 403
        assert [b["metadata"]["name"] for b in viewer.get("/v1/backups").json()["items"]] == ["b1"]


def test_a_backup_of_what_does_not_exist_is_refused_with_the_reason(live_server: LiveServer) -> None:
    with live_server.client("operator") as operator, live_server.client("admin") as admin:
        seed(admin)
        for body, reason, words in (
            (backup("b1", vm="nope"), "VMNotFound", "VM nope does not exist"),
            (backup("b1", target="nope"), "TargetNotFound", "backup target nope does not exist"),
        ):
            response = operator.post("/v1/backups", json=body)
            assert (response.status_code, response.json()["reason"]) == (422, reason), response.text
            assert words in response.json()["message"]
        assert operator.post("/v1/backups", json=backup("b1")).status_code == 201
        changed = operator.get("/v1/backups/b1").json()
        changed["spec"]["full"] = True
        response = operator.put("/v1/backups/b1", json=changed)
        assert (response.status_code, response.json()["reason"]) == (422, "Immutable")
        bad_path = {**TARGET, "metadata": {"name": "rel"}, "spec": {**TARGET["spec"], "path": "rel/dir"}}  # type: ignore[dict-item]
        assert admin.post("/v1/backuptargets", json=bad_path).status_code == 422
        moved = admin.get("/v1/backuptargets/nightly").json()
        moved["spec"]["path"] = "/srv/elsewhere"
        response = admin.put("/v1/backuptargets/nightly", json=moved)
        assert (response.status_code, response.json()["reason"]) == (422, "Immutable")


def test_a_base_is_kept_while_a_backup_builds_on_it_and_a_target_while_it_holds_backups(
    live_server: LiveServer,
) -> None:
    with live_server.client("operator") as operator, live_server.client("admin") as admin:
        seed(admin)
        for name in ("full-1", "inc-1"):
            assert operator.post("/v1/backups", json=backup(name)).status_code == 201
        # the controllers fail both (the VM has no disks) and clean up: write the base between
        # their writes, read afresh each time one of theirs came first
        for _ in range(50):
            incremental = live_server.store.get(VirtualMachineBackup, "inc-1")
            incremental.status.base = "full-1"
            try:
                live_server.store.update_status(incremental)
                break
            except Conflict:
                continue
        assert live_server.store.get(VirtualMachineBackup, "inc-1").status.base == "full-1"
        response = operator.delete("/v1/backups/full-1")
        assert (response.status_code, response.json()["reason"]) == (409, "BackupInUse")
        assert "base of inc-1" in response.json()["message"]
        response = admin.delete("/v1/backuptargets/nightly")
        assert (response.status_code, response.json()["reason"]) == (409, "TargetInUse")
        assert operator.delete("/v1/backups/inc-1").status_code in (200, 202)
