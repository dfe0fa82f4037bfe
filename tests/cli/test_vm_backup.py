"""``virtplane vm backup``: what is sent, the progress it follows, and its exit codes; the
backups are listed and described as any kind."""

from __future__ import annotations

import re

import pytest

from tests.conftest import LiveServer, eventually_sync
from virtplane.domain.resources import (
    BackupPhase,
    BackupTarget,
    BackupTargetSpec,
    Disk,
    Metadata,
    PoolKind,
    RunPolicy,
    StoragePool,
    StoragePoolSpec,
    VirtualMachineBackup,
    Volume,
    VolumePhase,
    VolumeSpec,
)

from .conftest import Invoke, RecordingTransport, add_host, add_vm, wait_phase


@pytest.fixture(autouse=True)
def world(server: LiveServer) -> None:
    """node-1 runs run-1 (one disk on a shared pool); backup target nightly is in its cluster."""
    add_host(server, "node-1")
    server.store.create(
        StoragePool(
            metadata=Metadata(name="shared"),
            spec=StoragePoolSpec(kind=PoolKind.SHARED, cluster="default", capacity_gib=10),
        )
    )
    server.store.create(
        Volume(metadata=Metadata(name="run-1-root"), spec=VolumeSpec(pool="shared", size_gib=1))
    )
    eventually_sync(lambda: server.store.get(Volume, "run-1-root").status.phase is VolumePhase.READY)
    add_vm(
        server,
        "run-1",
        RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY,
        disks=[Disk(volume="run-1-root", boot_order=1)],
    )
    wait_phase(server, "run-1", "Running")
    server.store.create(
        BackupTarget(metadata=Metadata(name="nightly"), spec=BackupTargetSpec(path="/srv/b", capacity_gib=10))
    )


def test_vm_backup_waits_until_it_succeeds(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport
) -> None:
    result = invoke("vm", "backup", "run-1", "--target", "nightly", "--full", "--wait")

    assert result.exit_code == 0, result.output
    [request] = sent.to("POST", "/v1/backups")
    name = request.body["metadata"]["name"]
    assert re.fullmatch(r"run-1-backup-[a-z0-9]{5}", name)
    assert request.body["spec"] == {"vm": "run-1", "target": "nightly", "full": True}
    assert result.stdout.splitlines()[-1].startswith(f"backup/{name} succeeded: Full")
    assert server.store.get(VirtualMachineBackup, name).status.mode_reason == "full: asked for (spec.full)"

    listed = invoke("get", "backups")
    assert listed.exit_code == 0 and name in listed.stdout and "Succeeded" in listed.stdout
    described = invoke("describe", "backup", name)
    assert described.exit_code == 0 and "full: asked for (spec.full)" in described.stdout


def test_a_backup_into_a_missing_target_is_refused_with_its_reason(invoke: Invoke) -> None:
    result = invoke("vm", "backup", "run-1", "--target", "nowhere")

    assert result.exit_code == 1
    assert result.stderr.startswith("Error (TargetNotFound): "), result.stderr
    assert "backup target nowhere does not exist" in result.stderr


def test_a_failed_backup_exits_1_with_its_reason(invoke: Invoke, server: LiveServer) -> None:
    add_vm(server, "lost", disks=[Disk(volume="gone", boot_order=1)])

    result = invoke("vm", "backup", "lost", "--target", "nightly", "--name", "lost-1", "--wait")

    assert result.exit_code == 1
    assert result.stderr.startswith("Error (BackupFailed): backup/lost-1 failed: disk gone has no volume")
    assert server.store.get(VirtualMachineBackup, "lost-1").status.phase is BackupPhase.FAILED


def test_vm_restore_from_a_backup_dry_run_first_then_one_disk(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport
) -> None:
    assert invoke("vm", "backup", "run-1", "--target", "nightly", "--name", "b1", "--wait").exit_code == 0

    dry = invoke("vm", "restore", "run-1", "--backup", "b1", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "Dry-run report:" in dry.stdout and "VM run-1 is stopped first, then started again" in dry.stdout
    result = invoke("vm", "restore", "run-1", "--backup", "b1", "--disk", "run-1-root", "--wait")
    assert result.exit_code == 0, result.output
    assert sent.to("POST", "/v1/operations")[-1].body["spec"]["restore"] == {
        "backup": "b1",
        "disks": ["run-1-root"],
        "mode": "Strict",
    }
    assert result.stdout.splitlines()[-1].endswith("completed")
    wait_phase(server, "run-1", "Running")
    neither = invoke("vm", "restore", "run-1")
    assert neither.exit_code == 2 and "name one source" in neither.output


def test_vm_restore_as_a_new_vm_sends_the_backup_and_stays_stopped_without_start(
    invoke: Invoke, server: LiveServer, sent: RecordingTransport
) -> None:
    assert invoke("vm", "backup", "run-1", "--target", "nightly", "--name", "b1", "--wait").exit_code == 0

    result = invoke("vm", "restore", "run-1", "--backup", "b1", "--as", "copy-1")

    assert result.exit_code == 0, result.output
    [request] = sent.to("POST", "/v1/vms/actions/create")
    assert request.body == {"names": ["copy-1"], "backup": "b1", "run_policy": "Manual"}
    assert "vm/copy-1 created from backup/b1" in result.stdout
    wait_phase(server, "copy-1", "Stopped")
    no_backup = invoke("vm", "restore", "run-1", "--snapshot", "s", "--as", "copy-2")
    assert no_backup.exit_code == 2 and "--as makes a new VM from a backup" in no_backup.output
