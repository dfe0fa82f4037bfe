"""Restoring a VM from a backup (issue 36), pure: which backups a restore reads and why one is
refused. A restore reads its chosen backup's files, which read through the backups under it
(qcow2 overlays, ``resources.backup``) down to a full one: every backup of that chain must be
there and good, or the disk it would bring back is not the one the backup saw.

The API refuses with these reasons before it stores the restore; the restore checks again
before it changes anything, since a backup can go in between.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from virtplane.domain.errors import DomainError, Invalid, Refused
from virtplane.domain.resources.backup import BackupPhase, VirtualMachineBackup
from virtplane.domain.resources.operation import RestoreSpec, VirtualMachineOperation
from virtplane.domain.resources.volume import Volume, VolumePhase

__all__ = ["backup_chain", "read_by", "restore_refusal", "saved_disk_of_backup", "spec_refusal"]

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


def spec_refusal(vm: str, spec: RestoreSpec | None, find: FindBackup) -> DomainError | None:
    """``restore_refusal`` of a Restore operation's source, when it is a backup."""
    if spec is None or spec.backup is None:
        return None
    return restore_refusal(vm, spec.backup, spec.disks, find)


def saved_disk_of_backup(name: str, volume: str, find: FindBackup) -> DomainError | None:
    """Why the disk of ``volume`` cannot be copied from backup ``name`` into a new volume (a VM
    restored as a new one), or None: it can."""
    backup = find(name)
    if backup is None:
        return Invalid("BackupNotFound", f"backup {name} does not exist")
    return restore_refusal(backup.spec.vm, name, [volume], find)


def read_by(
    name: str, operations: Iterable[VirtualMachineOperation], volumes: Iterable[Volume]
) -> Refused | None:
    """Why backup ``name`` cannot be deleted now: a restore not finished reads it, or a volume
    is being copied from it (the backups under it are kept as its bases already)."""
    readers = [
        f"restore {op.metadata.name}"
        for op in operations
        if op.spec.restore is not None and op.spec.restore.backup == name and not op.status.phase.finished
    ] + [
        f"volume {v.metadata.name}"
        for v in volumes
        if v.spec.source is not None
        and v.spec.source.backup == name
        and v.status.phase is not VolumePhase.READY
    ]
    if not readers:
        return None
    return Refused("BackupInUse", f"backup {name} is being read by {', '.join(readers)}; wait for it to end")
