"""A disk of a backup copied into a new volume (issue 36: a VM restored as a new VM): a Volume
with ``source: {backup, volume}``, made by the volume controller from the backup's file of that
disk, read through its chain (``restore_from_backup``)."""

from __future__ import annotations

from virtplane.controllers.context import ControllerContext
from virtplane.domain.backup_restore import saved_disk_of_backup
from virtplane.domain.resources import BackupTarget, VirtualMachineBackup

__all__ = ["saved_backup_disk"]


def saved_backup_disk(ctx: ControllerContext, name: str, volume: str) -> tuple[BackupTarget, str] | str:
    """The target and the backup's volume of the disk of ``volume`` in backup ``name``, or why
    it cannot be copied now."""

    def find(backup: str) -> VirtualMachineBackup | None:
        return ctx.read(VirtualMachineBackup, backup)

    refusal = saved_disk_of_backup(name, volume, find)
    if refusal is not None:
        return refusal.message
    backup = find(name)
    assert backup is not None
    target = ctx.read(BackupTarget, backup.spec.target)
    if target is None:
        return f"backup target {backup.spec.target} of backup {name} does not exist"
    return target, next(d.backup_volume for d in backup.status.disks if d.volume == volume)
