"""A backup's consistency: the guest's filesystems frozen through its agent while the job
begins, where an agent answers; otherwise the backup says it is crash-consistent, and why."""

from __future__ import annotations

import logging

from virtplane.controllers.context import ControllerContext
from virtplane.domain.resources import SnapshotConsistency, VirtualMachine, VirtualMachineBackup, VMPhase
from virtplane.drivers.base import HypervisorDriver
from virtplane.drivers.errors import DriverError

__all__ = ["freeze", "thaw"]

log = logging.getLogger("virtplane.controllers.backups")


async def freeze(
    backup: VirtualMachineBackup, vm: VirtualMachine, driver: HypervisorDriver, dname: str
) -> bool:
    """Freeze the guest's filesystems for the job's start where its agent answers; whether it did."""
    status, crash = backup.status, SnapshotConsistency.CRASH_CONSISTENT
    status.consistency, status.consistency_reason = crash, "the VM is paused: its agent cannot freeze it"
    try:
        if vm.status.phase is VMPhase.PAUSED:
            return False
        if not await driver.agent_connected(dname):
            status.consistency_reason = "no guest agent is connected: the disks are as after a power cut"
            return False
        count = await driver.freeze_filesystems(dname)
    except DriverError as exc:
        status.consistency_reason = f"the guest agent did not freeze the filesystems: {exc}"
        return False
    status.consistency = SnapshotConsistency.FILESYSTEM_FROZEN
    status.consistency_reason = f"the guest agent froze {count} filesystem(s) while the job began"
    return True


async def thaw(ctx: ControllerContext, vm: VirtualMachine, driver: HypervisorDriver, dname: str) -> None:
    try:
        await driver.thaw_filesystems(dname)
    except DriverError as exc:
        log.warning("could not thaw the filesystems of %s: %s", vm.metadata.name, exc)
        ctx.event(
            vm, "ThawFailed", f"its filesystems may still be frozen after a backup: {exc}", warning=True
        )
