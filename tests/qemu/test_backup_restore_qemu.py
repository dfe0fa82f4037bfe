"""Restore from a backup on the rig's libvirt daemons with a real guest (issue 36's check): a
known pattern written, a full backup, more written, an incremental backup, the disk corrupted;
each point restored and its pattern read back by the guest itself (it prints the first bytes
of its disk at boot: ``DISK0: ...``); a Stopped VM stays Stopped, a Running one comes back Running;
and the incremental point restored as a new VM, its disk a new volume holding that pattern.

The pattern is the first sector (``write_marker``, while the VM is stopped): A before the full
backup, B before the incremental one. The VM stays on host a, so its checkpoint (kept across a
stop and start of its domain) makes the second backup incremental.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import eventually
from virtplane.domain.resources import (
    BackupPhase,
    BackupTarget,
    BackupTargetSpec,
    Metadata,
    OperationType,
    RestoreMode,
    RestoreSpec,
    RunPolicy,
    VirtualMachineBackup,
    VirtualMachineBackupSpec,
    VMPhase,
    Volume,
    VolumePhase,
)

from .conftest import console_shows
from .plane import LIMIT_S, QemuPlane, disk0, sector_holds, write_marker

pytestmark = [pytest.mark.qemu, pytest.mark.slow]


async def backed_up(qplane: QemuPlane, name: str) -> VirtualMachineBackup:
    qplane.store.create(
        VirtualMachineBackup(
            metadata=Metadata(name=name), spec=VirtualMachineBackupSpec(vm="rb", target="restore-t")
        )
    )

    def ended() -> bool:
        phase = qplane.store.get(VirtualMachineBackup, name).status.phase
        return phase in (BackupPhase.SUCCEEDED, BackupPhase.FAILED)

    await eventually(ended, timeout=LIMIT_S)
    done = qplane.store.get(VirtualMachineBackup, name)
    assert done.status.phase is BackupPhase.SUCCEEDED, done.status.message
    return done


async def restored(qplane: QemuPlane, backup: str) -> None:
    op = await qplane.operate(
        "rb", OperationType.RESTORE, restore=RestoreSpec(backup=backup, mode=RestoreMode.STRICT)
    )
    assert op.status.reason == "Restored", op.status.message


def last_disk0(log: str) -> str:
    """The first bytes of its disk the guest printed at its latest boot."""
    line = log[log.rindex("DISK0: ") :].splitlines()[0]
    return line.strip()


async def stop(qplane: QemuPlane) -> None:
    await qplane.operate("rb", OperationType.STOP)
    await qplane.wait_settled("rb", VMPhase.STOPPED)


async def test_each_point_of_a_chain_comes_back_in_the_power_state_before(
    qplane: QemuPlane, tmp_path: Path
) -> None:
    rig = qplane.rig
    await qplane.add_host("a")
    volume = await qplane.add_volume("rb-root")
    path = volume.status.path
    # its own target: the daemons keep the pools of the session's other tests' targets
    qplane.store.create(
        BackupTarget(
            metadata=Metadata(name="restore-t"),
            spec=BackupTargetSpec(path=str(rig.base / "shared" / "restore-backups"), capacity_gib=20),
        )
    )
    write_marker(path, ord("A"))
    qplane.add_vm("rb", RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY, "rb-root")
    await qplane.wait_settled("rb", VMPhase.RUNNING)
    dname = qplane.domain("rb")
    await console_shows(rig, dname, disk0(ord("A")))
    full = await backed_up(qplane, "rb-full")
    assert full.status.mode is not None and full.status.mode.value == "Full"

    await stop(qplane)
    write_marker(path, ord("B"))
    await qplane.operate("rb", OperationType.START)
    await qplane.wait_settled("rb", VMPhase.RUNNING)
    await console_shows(rig, dname, disk0(ord("B")))
    incremental = await backed_up(qplane, "rb-inc")
    assert incremental.status.mode is not None
    assert (incremental.status.mode.value, incremental.status.base) == ("Incremental", "rb-full"), (
        incremental.status.mode_reason
    )

    # corrupted, and Stopped before the restore: it stays Stopped and never boots
    await stop(qplane)
    write_marker(path, ord("Z"))
    boots = qplane.console("rb").count("GUEST-UP")
    await restored(qplane, "rb-full")
    await qplane.wait_settled("rb", VMPhase.STOPPED)
    assert await qplane.runs_on("rb") == []
    assert sector_holds(path, ord("A")), "the full backup's pattern is back on the disk"
    assert qplane.console("rb").count("GUEST-UP") == boots, "a Stopped VM stays Stopped"
    await qplane.operate("rb", OperationType.START)
    await qplane.wait_settled("rb", VMPhase.RUNNING)
    log = await console_shows(rig, dname, "DISK0: ", count=boots + 1)
    assert last_disk0(log) == disk0(ord("A")), "the guest reads the full backup's pattern"

    # Running before the restore of the incremental point: back Running, reading B
    await restored(qplane, "rb-inc")
    current = await qplane.wait_settled("rb", VMPhase.RUNNING)
    log = await console_shows(rig, dname, "DISK0: ", count=boots + 2)
    assert last_disk0(log) == disk0(ord("B")), "the guest reads the incremental's pattern"
    assert await qplane.runs_on("rb") == [current.status.host]

    # as a new VM: its disk a new volume written from the incremental point, Stopped
    async with qplane.api() as api:
        made = await api.post("/v1/vms/actions/create", json={"names": ["rb-copy"], "backup": "rb-inc"})
        assert made.status_code == 201, made.text
    await eventually(
        lambda: qplane.store.get(Volume, "rb-copy-root").status.phase is VolumePhase.READY, timeout=LIMIT_S
    )
    copy = qplane.store.get(Volume, "rb-copy-root")
    assert copy.status.path != path and sector_holds(copy.status.path, ord("B")), "the incremental's pattern"
    await qplane.wait_settled("rb-copy", VMPhase.STOPPED)
