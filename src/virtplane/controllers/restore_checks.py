"""What a restore checks before it changes anything (DESIGN.md §4, Validate): the snapshot (or
backup: ``restore_sources``) is there, Ready and this VM's; which disks and NICs can come back; what would change. A Strict
restore fails with the reason, BestEffort skips and says so; a DryRun reports only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from virtplane.controllers.attachments import attached_elsewhere
from virtplane.controllers.context import ControllerContext
from virtplane.controllers.networks import nic_conflicts
from virtplane.domain.intents import strip_system
from virtplane.domain.networks import Nic
from virtplane.domain.phases import RESTORE_RUNNING_PHASES
from virtplane.domain.resources import (
    CapturedVM,
    RestoreMode,
    SnapshotPhase,
    StoragePool,
    VirtualMachine,
    VirtualMachineOperation,
    VirtualMachineSnapshot,
    Volume,
)

if TYPE_CHECKING:
    from virtplane.controllers.restore_sources import RestoreSource

__all__ = ["RestoreFailed", "attached_now", "dropped_nics", "snapshot_for", "validation_report"]


class RestoreFailed(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def snapshot_for(ctx: ControllerContext, op: VirtualMachineOperation) -> VirtualMachineSnapshot:
    assert op.spec.restore is not None and op.spec.restore.snapshot is not None
    snap = ctx.read(VirtualMachineSnapshot, op.spec.restore.snapshot)
    if snap is None:
        raise RestoreFailed("SnapshotNotFound", f"snapshot {op.spec.restore.snapshot} does not exist")
    if snap.spec.vm != op.spec.vm:
        raise RestoreFailed(
            "SnapshotOfAnotherVM", f"snapshot {snap.metadata.name} belongs to VM {snap.spec.vm}"
        )
    if snap.status.phase is not SnapshotPhase.READY or snap.status.captured is None:
        raise RestoreFailed("SnapshotNotReady", f"snapshot {snap.metadata.name} is {snap.status.phase.value}")
    return snap


def validation_report(
    ctx: ControllerContext, op: VirtualMachineOperation, vm: VirtualMachine, source: RestoreSource
) -> dict[str, str]:
    """What would change, per resource; raises in Strict mode when something is missing."""
    assert op.spec.restore is not None
    strict = op.spec.restore.mode is RestoreMode.STRICT
    report: dict[str, str] = {}
    missing: list[str] = []
    for disk in source.disks:
        volume = ctx.read(Volume, disk.volume)
        owner = attached_now(ctx, volume, vm.metadata.name)
        if volume is None or ctx.read(StoragePool, volume.spec.pool) is None:
            missing.append(disk.volume)
            report[f"volume/{disk.volume}"] = "missing: skipped" if not strict else "missing"
        elif owner is not None:
            if strict:
                raise RestoreFailed(
                    "VolumeAttached",
                    f"Strict restore: volume {disk.volume} is attached to VM {owner} now",
                )
            report[f"volume/{disk.volume}"] = f"attached to VM {owner}: skipped"
        else:
            report[f"volume/{disk.volume}"] = source.plan()
    before = "Running" if vm.status.phase in RESTORE_RUNNING_PHASES else "Stopped"
    if source.whole_vm:
        for index in dropped_nics(ctx, op, vm, source.captured.spec.nics):
            report[f"nic/{index}"] = "dropped"
        report[f"vm/{vm.metadata.name}"] = _vm_changes(vm, source.captured)
    else:
        report[f"vm/{vm.metadata.name}"] = "spec unchanged: only the disks named are restored"
    report["power_state"] = f"{before} (kept as before the restore)"
    report["stopped_first"] = (
        f"VM {vm.metadata.name} is stopped first, then started again"
        if before == "Running"
        else f"VM {vm.metadata.name} is stopped: nothing to stop"
    )
    if missing and strict:
        raise RestoreFailed(
            "DiskSnapshotMissing", f"Strict restore: disk(s) {', '.join(missing)} cannot be restored"
        )
    return report


def _vm_changes(vm: VirtualMachine, captured: CapturedVM) -> str:
    changes = [
        f"{field}: {getattr(vm.spec, field)!r} -> {getattr(captured.spec, field)!r}"
        for field in type(vm.spec).model_fields
        if getattr(vm.spec, field) != getattr(captured.spec, field)
    ]
    if vm.metadata.labels != captured.labels:
        changes.append(f"labels: {vm.metadata.labels} -> {captured.labels}")
    if strip_system(vm.metadata.annotations) != strip_system(captured.annotations):
        changes.append("annotations replaced")
    return "; ".join(changes) if changes else "spec unchanged"


def dropped_nics(
    ctx: ControllerContext, op: VirtualMachineOperation, vm: VirtualMachine, nics: list[Nic]
) -> set[int]:
    """The snapshot's NICs the VM cannot have back now (network gone, MAC or address taken by
    another VM meanwhile): Strict fails with the reason, BestEffort drops them and says so."""
    assert op.spec.restore is not None
    conflicts = nic_conflicts(ctx.store, vm.metadata.uid, nics)
    if conflicts and op.spec.restore.mode is RestoreMode.STRICT:
        first = conflicts[0]
        raise RestoreFailed(first.reason, f"Strict restore: NIC {first.index}: {first.message}")
    for conflict in conflicts:
        ctx.event(vm, "RestoreDroppedNic", f"NIC {conflict.index}: {conflict.message}", warning=True)
    return {c.index for c in conflicts}


def attached_now(ctx: ControllerContext, volume: Volume | None, vm: str) -> str | None:
    if volume is None:
        return None
    return attached_elsewhere(ctx.cache, volume.metadata.name, vm, volume.status.attached_vm)
