"""What a restore reads from (DESIGN.md §4, issue 36): a snapshot, or a backup with the chain
under it. The restore's steps are the same for both (``controllers.restore``); only where each
disk's content comes from, and how it is put back, differ:

- a snapshot's disk is reverted from its saved copy (``revert_volume``);
- a backup's disk is written from the backup's file of it, read through its chain down to the
  full backup (``restore_from_backup``: ``qemu-img convert`` on libvirt hosts).

A restore from a backup may name only some of its disks: those come back and the VM's spec,
labels and annotations stay as they are; with none named, every disk and the VM as it was
when the backup was taken, as for a snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from virtplane.controllers.backup_targets import target_ref
from virtplane.controllers.context import ControllerContext
from virtplane.controllers.restore_checks import RestoreFailed, snapshot_for
from virtplane.controllers.storage import pool_ref, volume_file
from virtplane.domain.backup_restore import backup_chain, restore_refusal
from virtplane.domain.errors import Refused
from virtplane.domain.resources import (
    BackupTarget,
    CapturedVM,
    StoragePool,
    VirtualMachineBackup,
    VirtualMachineOperation,
    Volume,
)
from virtplane.drivers.base import HypervisorDriver

__all__ = ["RestoreSource", "SourceDisk", "put_back", "source_for"]


@dataclass(frozen=True)
class SourceDisk:
    volume: str  # the VM's Volume it brings back
    saved: str  # a snapshot's handle, or the backup's volume of this disk in the target's pool


@dataclass(frozen=True)
class RestoreSource:
    kind: Literal["snapshot", "backup"]
    name: str
    captured: CapturedVM
    disks: tuple[SourceDisk, ...]
    whole_vm: bool  # the VM's spec, labels and annotations come back too (False: only the disks)
    memory_handle: str | None = None
    target: BackupTarget | None = None  # a backup's
    chain: tuple[str, ...] = ()  # a backup's: it and those it builds on, newest first

    @property
    def what(self) -> str:
        return f"{self.kind} {self.name}"

    def plan(self) -> str:
        """The dry run's word on each of its disks."""
        if self.kind == "snapshot":
            return f"revert to snapshot {self.name}"
        reads = " <- ".join(reversed(self.chain))
        return f"write from backup {self.name} (reads {reads}) over the disk"


def source_for(ctx: ControllerContext, op: VirtualMachineOperation) -> RestoreSource:
    """The operation's source, checked (raises ``RestoreFailed`` with the reason)."""
    restore = op.spec.restore
    assert restore is not None
    if restore.backup is None:
        snap = snapshot_for(ctx, op)
        assert snap.status.captured is not None
        return RestoreSource(
            "snapshot",
            snap.metadata.name,
            snap.status.captured,
            tuple(SourceDisk(d.volume, d.handle) for d in snap.status.disk_snapshots),
            whole_vm=True,
            memory_handle=snap.status.memory_handle,
        )

    def find(name: str) -> VirtualMachineBackup | None:
        return ctx.read(VirtualMachineBackup, name)

    refusal = restore_refusal(op.spec.vm, restore.backup, restore.disks, find)
    if refusal is not None:
        raise RestoreFailed(refusal.reason, refusal.message)
    backup = find(restore.backup)
    assert backup is not None and backup.status.captured is not None
    target = ctx.read(BackupTarget, backup.spec.target)
    if target is None:
        raise RestoreFailed("TargetNotFound", f"backup target {backup.spec.target} does not exist")
    try:
        chain = tuple(b.metadata.name for b in backup_chain(backup, find))
    except Refused as refused:  # checked above; a base may go in between
        raise RestoreFailed(refused.reason, refused.message) from refused
    chosen = set(restore.disks)
    return RestoreSource(
        "backup",
        backup.metadata.name,
        backup.status.captured,
        tuple(
            SourceDisk(d.volume, d.backup_volume)
            for d in backup.status.disks
            if not chosen or d.volume in chosen
        ),
        whole_vm=not chosen,
        target=target,
        chain=chain,
    )


async def put_back(
    driver: HypervisorDriver, source: RestoreSource, disk: SourceDisk, volume: Volume, pool: StoragePool
) -> None:
    """The disk's content as the source saved it, over ``volume`` (its VM is stopped by now)."""
    if source.target is None:
        await driver.revert_volume(pool_ref(pool), volume_file(volume), disk.saved)
        return
    await driver.restore_from_backup(
        target_ref(source.target), disk.saved, pool_ref(pool), volume_file(volume)
    )
