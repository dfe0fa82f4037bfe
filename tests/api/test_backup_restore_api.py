"""A restore from a backup through the API (issue 36): an operator's Restore operation naming
``restore.backup``; a clear 4xx with the reason for a backup that does not exist, is another
VM's, is not good, reads through a broken chain, lacks the disk named, or a VM that is busy."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import LiveServer, wait_json
from virtplane.domain.resources import (
    BackupDisk,
    BackupPhase,
    CapturedVM,
    Metadata,
    VirtualMachineBackup,
    VirtualMachineBackupSpec,
    VirtualMachineBackupStatus,
    VirtualMachineSpec,
)


def seed(server: LiveServer, admin: httpx.Client) -> None:
    target = {"metadata": {"name": "t"}, "spec": {"path": "/srv/backups", "capacity_gib": 10}}
    assert admin.post("/v1/backuptargets", json=target).status_code == 201
    for name in ("web", "db"):
        vm = {"metadata": {"name": name}, "spec": {"run_policy": "Manual"}}
        assert admin.post("/v1/vms", json=vm).status_code == 201
    # as the backup controller leaves them (a finished backup is not looked at again)
    for name, vm_name, phase, base in (
        ("full", "web", BackupPhase.SUCCEEDED, None),
        ("inc", "web", BackupPhase.SUCCEEDED, "full"),
        ("failed", "web", BackupPhase.FAILED, None),
        ("on-failed", "web", BackupPhase.SUCCEEDED, "failed"),
        ("db-full", "db", BackupPhase.SUCCEEDED, None),
    ):
        server.store.create(
            VirtualMachineBackup(
                metadata=Metadata(name=name),
                spec=VirtualMachineBackupSpec(vm=vm_name, target="t"),
                status=VirtualMachineBackupStatus(
                    phase=phase,
                    base=base,
                    captured=CapturedVM(spec=VirtualMachineSpec()),
                    disks=[BackupDisk(volume=f"{vm_name}-root", backup_volume=f"{name}.qcow2")],
                ),
            )
        )


def restore(name: str, **source: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"vm": "web", "type": "Restore", "restore": source}}


def test_a_restore_from_a_bad_backup_is_refused_with_the_reason(live_server: LiveServer) -> None:
    with live_server.client("admin") as admin, live_server.client("operator") as operator:
        seed(live_server, admin)
        for body, status, reason, words in (
            (restore("r", backup="nope"), 422, "BackupNotFound", "backup nope does not exist"),
            (restore("r", backup="db-full"), 422, "BackupOfAnotherVM", "backup db-full is of VM db"),
            (restore("r", backup="failed"), 409, "BackupNotReady", "backup failed is Failed"),
            (restore("r", backup="on-failed"), 409, "BackupChainBroken", "builds on failed, which is Failed"),
            (restore("r", backup="inc", disks=["web-data"]), 422, "DiskNotInBackup", "no disk web-data"),
            (restore("r", backup="inc", snapshot="s"), 422, "Invalid", "name one source"),
            (
                restore("r", snapshot="s", disks=["web-root"]),
                422,
                "Invalid",
                "only for a restore from a backup",
            ),
        ):
            response = operator.post("/v1/operations", json=body)
            assert (response.status_code, response.json()["reason"]) == (status, reason), response.text
            assert words in response.json()["message"], response.text


def test_an_operator_restores_from_any_point_of_a_chain_a_viewer_may_not(live_server: LiveServer) -> None:
    with (
        live_server.client("admin") as admin,
        live_server.client("operator") as operator,
        live_server.client("viewer") as viewer,
    ):
        seed(live_server, admin)
        dry = restore("dry", backup="inc", mode="DryRun")
        assert viewer.post("/v1/operations", json=dry).status_code == 403
        assert operator.post("/v1/operations", json=dry).status_code == 201, "an incremental point"
        done = wait_json(operator, "/v1/operations/dry", lambda op: op["status"]["phase"] == "Completed")
        assert done["status"]["progress"]["stopped_first"] == "VM web is stopped: nothing to stop"
        assert done["status"]["progress"]["volume/web-root"] == "missing: skipped", "no such volume here"
        # no host: a start waits for one, and the VM is busy meanwhile
        start = {"metadata": {"name": "start"}, "spec": {"vm": "web", "type": "Start"}}
        assert operator.post("/v1/operations", json=start).status_code == 201
        busy = operator.post("/v1/operations", json=restore("again", backup="full"))
        assert (busy.status_code, busy.json()["reason"]) == (409, "OperationInProgress"), busy.text


def test_a_backup_being_copied_into_a_volume_is_not_deleted_meanwhile(live_server: LiveServer) -> None:
    with live_server.client("admin") as admin, live_server.client("operator") as operator:
        seed(live_server, admin)
        pool = {
            "metadata": {"name": "shared"},
            "spec": {"kind": "shared", "cluster": "default", "capacity_gib": 10},
        }
        assert admin.post("/v1/storagepools", json=pool).status_code == 201
        # no host sees the pool: the copy waits, Pending
        copy = {"metadata": {"name": "web-copy"}, "spec": {"pool": "shared", "size_gib": 1, "source": {"backup": "inc", "volume": "web-root"}}}  # fmt: skip
        assert operator.post("/v1/volumes", json=copy).status_code == 201
        refused = operator.delete("/v1/backups/inc")
        assert (refused.status_code, refused.json()["reason"]) == (409, "BackupInUse"), refused.text
        assert "being read by volume web-copy" in refused.json()["message"]
        wrong = {**copy, "metadata": {"name": "web-copy-2"}, "spec": {**copy["spec"], "source": {"backup": "inc", "volume": "db-root"}}}  # fmt: skip
        missing = operator.post("/v1/volumes", json=wrong)
        assert (missing.status_code, missing.json()["reason"]) == (422, "DiskNotInBackup"), missing.text
