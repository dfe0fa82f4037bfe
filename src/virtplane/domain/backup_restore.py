"""Restoring a VM from a backup (issue 36), pure: which backups a restore reads and why one is
refused. A restore reads its chosen backup's files, which read through the backups under it
(qcow2 overlays, ``resources.backup``) down to a full one: every backup of that chain must be
there and good, or the disk it would bring back is not the one the backup saw.

The API refuses with these reasons before it stores the restore; the restore checks again
before it changes anything, since a backup can go in between.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from virtplane.domain.errors import DomainError, Invalid, Refused
from virtplane.domain.resources.backup import BackupPhase, VirtualMachineBackup

__all__ = ["backup_chain", "restore_refusal", "saved_disk_of_backup"]

FindBackup = Callable[[str], VirtualMachineBackup | None]


def backup_chain(top: VirtualMachineBackup, find: FindBackup) -> list[VirtualMachineBackup]:
    """``top`` and the backups it builds on, newest first, down to the full one; a base that
    is missing, not good or being deleted is a ``Refused`` (BackupChainBroken)."""
    chain = [top]
    while chain[-1].status.base is not None:
        on = chain[-1]
        base_name = on.status.base
        assert base_name is not None
        base = find(base_name)
        if base is None or base.metadata.deletion_requested_at is not None:
            state = "gone" if base is None else "being deleted"
            raise Refused(
                "BackupChainBroken", f"backup {on.metadata.name} builds on {base_name}, which is {state}"
            )
        if base.status.phase is not BackupPhase.SUCCEEDED:
            raise Refused(
                "BackupChainBroken",
                f"backup {on.metadata.name} builds on {base_name}, which is {base.status.phase.value}",
            )
        if any(b.metadata.name == base_name for b in chain):  # never loops, whatever is stored
            raise Refused("BackupChainBroken", f"backup {base_name} builds on itself")
        chain.append(base)
    return chain


def restore_refusal(vm: str, name: str, disks: Sequence[str], find: FindBackup) -> DomainError | None:
    """Why VM ``vm`` cannot be restored from backup ``name`` (only ``disks`` of it, when given),
    or None: it can."""
    backup = find(name)
    if backup is None:
        return Invalid("BackupNotFound", f"spec.restore.backup: backup {name} does not exist")
    if backup.spec.vm != vm:
        return Invalid("BackupOfAnotherVM", f"spec.restore.backup: backup {name} is of VM {backup.spec.vm}")
    if backup.metadata.deletion_requested_at is not None:
        return Refused("BackupDeleting", f"backup {name} is being deleted")
    if backup.status.phase is not BackupPhase.SUCCEEDED or backup.status.captured is None:
        return Refused(
            "BackupNotReady",
            f"backup {name} is {backup.status.phase.value}: only a Succeeded backup can be restored",
        )
    saved = [d.volume for d in backup.status.disks]
    unknown = [d for d in disks if d not in saved]
    if unknown:
        return Invalid(
            "DiskNotInBackup",
            f"spec.restore.disks: backup {name} has no disk {unknown[0]} (it has {', '.join(saved)})",
        )
    try:
        backup_chain(backup, find)
    except Refused as refused:
        return refused
    return None


def saved_disk_of_backup(name: str, volume: str, find: FindBackup) -> DomainError | None:
    """Why the disk of ``volume`` cannot be copied from backup ``name`` into a new volume (a VM
    restored as a new one), or None: it can."""
    backup = find(name)
    if backup is None:
        return Invalid("BackupNotFound", f"backup {name} does not exist")
    return restore_refusal(backup.spec.vm, name, [volume], find)
