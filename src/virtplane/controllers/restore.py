"""Restore from a snapshot, in the resumable steps of DESIGN.md §4 (``domain.restore``
names them, in order):

1. SnapshotReady / Validate (DryRun stops here with a per-resource report)
2. EnterMaintenance: ONE write puts ``restore-power-state`` (Running or Stopped), the
   hold and a system stop on the VirtualMachine — before anything is torn down. The
   VM controller carries the stop out; this step then removes the domain.
3. ProcessRestore: revert every disk, overwrite spec, labels and user annotations
   from the snapshot; system annotations (the intent) are kept, the snapshot's never
   come back.
4. ExitMaintenance, also after a failure: the hold goes, the intent stays.
5. The VM controller consumes the intent where it recreates the domain (a durable
   start request, or the VM stays stopped); the operation completes once it did.

Every step is idempotent and decides from what is stored, so a crash anywhere
resumes correctly: in particular, a VM already held by this operation is never
re-measured, since by then it has been stopped on purpose.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from virtplane.controllers.attachments import attached_elsewhere
from virtplane.controllers.context import ControllerContext
from virtplane.controllers.networks import nic_conflicts, vm_claims
from virtplane.controllers.operations import finish_operation
from virtplane.controllers.registration import HandlerRegistration
from virtplane.controllers.storage import pool_driver, pool_ref, volume_file
from virtplane.crashpoints import crashpoint
from virtplane.domain.conditions import VMCondition, remove_condition
from virtplane.domain.intents import (
    PowerState,
    StopMode,
    read_intents,
    split_annotations,
    strip_system,
    write_intents,
)
from virtplane.domain.networks import Nic
from virtplane.domain.phases import RESTORE_RUNNING_PHASES
from virtplane.domain.resources import (
    OperationPhase,
    OperationType,
    RestoreMode,
    SnapshotPhase,
    StoragePool,
    VirtualMachine,
    VirtualMachineOperation,
    VirtualMachineSnapshot,
    VMPhase,
    Volume,
)
from virtplane.domain.restore import RestoreStep, not_past
from virtplane.drivers.base import domain_name
from virtplane.drivers.errors import DriverError, HostUnreachable
from virtplane.reconcile.types import Result
from virtplane.store.claims import ClaimTaken

log = logging.getLogger("virtplane.controllers.restore")

POLL_S = 0.5


class RestoreFailed(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def holder(op: VirtualMachineOperation) -> str:
    return f"restore/{op.metadata.name}"


class RestoreHandler:
    """Registered with the operation controller for type Restore."""

    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx

    async def __call__(self, op: VirtualMachineOperation, vm: VirtualMachine) -> Result | None:
        try:
            return await self._step(op, vm)
        except RestoreFailed as failure:
            return await self._fail(op, vm, failure.reason, failure.message)

    # ------------------------------------------------------------------ bookkeeping

    async def _set_step(
        self, op: VirtualMachineOperation, step: RestoreStep, message: str
    ) -> VirtualMachineOperation:
        if op.status.step != step or op.status.message != message:
            op.status.step = step.value
            op.status.message = message
            self.ctx.event(op, step, message)
            op = await self.ctx.write(op)
        return op

    async def _finish(
        self, op: VirtualMachineOperation, phase: OperationPhase, reason: str, message: str
    ) -> None:
        await finish_operation(self.ctx, op, phase, reason, message, vm_event_prefix="Restore")

    def _vm_write(
        self, name: str, change: Callable[[VirtualMachine], None], *, overwrite: bool = False
    ) -> VirtualMachine:
        """The VM controller looks again after each write: its watch on the VM."""
        if not overwrite:
            return self.ctx.mutate(VirtualMachine, name, change)
        try:  # with the restored NICs' MACs and addresses, claimed in the same write
            return self.ctx.mutate_spec(
                VirtualMachine,
                name,
                change,
                why="a restore overwrites the VM from its snapshot",
                claims=vm_claims,
            )
        except ClaimTaken as taken:  # taken between the check and the write
            raise RestoreFailed("AddressInUse", f"a NIC of the snapshot: {taken}") from taken

    # ------------------------------------------------------------------ steps

    def _snapshot(self, op: VirtualMachineOperation) -> VirtualMachineSnapshot:
        assert op.spec.restore is not None
        snap = self.ctx.store.find(VirtualMachineSnapshot, op.spec.restore.snapshot)
        if snap is None:
            raise RestoreFailed("SnapshotNotFound", f"snapshot {op.spec.restore.snapshot} does not exist")
        if snap.spec.vm != op.spec.vm:
            raise RestoreFailed(
                "SnapshotOfAnotherVM", f"snapshot {snap.metadata.name} belongs to VM {snap.spec.vm}"
            )
        if snap.status.phase is not SnapshotPhase.READY or snap.status.captured is None:
            raise RestoreFailed(
                "SnapshotNotReady", f"snapshot {snap.metadata.name} is {snap.status.phase.value}"
            )
        return snap

    def _validate(
        self, op: VirtualMachineOperation, vm: VirtualMachine, snap: VirtualMachineSnapshot
    ) -> dict[str, str]:
        """What would change, per resource; raises in Strict mode when something is missing."""
        assert op.spec.restore is not None and snap.status.captured is not None
        strict = op.spec.restore.mode is RestoreMode.STRICT
        report: dict[str, str] = {}
        missing: list[str] = []
        for disk in snap.status.disk_snapshots:
            volume = self.ctx.store.find(Volume, disk.volume)
            owner = self._attached_elsewhere(volume, vm.metadata.name)
            if volume is None or self.ctx.store.find(StoragePool, volume.spec.pool) is None:
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
                report[f"volume/{disk.volume}"] = f"revert to snapshot {snap.metadata.name}"
        captured = snap.status.captured
        for index in self._dropped_nics(op, vm, captured.spec.nics):
            report[f"nic/{index}"] = "dropped"
        changes = [
            f"{field}: {getattr(vm.spec, field)!r} -> {getattr(captured.spec, field)!r}"
            for field in type(vm.spec).model_fields
            if getattr(vm.spec, field) != getattr(captured.spec, field)
        ]
        if vm.metadata.labels != captured.labels:
            changes.append(f"labels: {vm.metadata.labels} -> {captured.labels}")
        if strip_system(vm.metadata.annotations) != strip_system(captured.annotations):
            changes.append("annotations replaced")
        report[f"vm/{vm.metadata.name}"] = "; ".join(changes) if changes else "spec unchanged"
        before = "Running" if vm.status.phase in RESTORE_RUNNING_PHASES else "Stopped"
        report["power_state"] = f"{before} (kept as before the restore)"
        if missing and strict:
            raise RestoreFailed(
                "DiskSnapshotMissing", f"Strict restore: disk(s) {', '.join(missing)} cannot be restored"
            )
        return report

    def _dropped_nics(self, op: VirtualMachineOperation, vm: VirtualMachine, nics: list[Nic]) -> set[int]:
        """The snapshot's NICs the VM cannot have back now (network gone, MAC or address taken by
        another VM meanwhile): Strict fails with the reason, BestEffort drops them and says so."""
        assert op.spec.restore is not None
        conflicts = nic_conflicts(self.ctx.store, vm.metadata.uid, nics)
        if conflicts and op.spec.restore.mode is RestoreMode.STRICT:
            first = conflicts[0]
            raise RestoreFailed(first.reason, f"Strict restore: NIC {first.index}: {first.message}")
        for conflict in conflicts:
            self.ctx.event(vm, "RestoreDroppedNic", f"NIC {conflict.index}: {conflict.message}", warning=True)
        return {c.index for c in conflicts}

    async def _step(self, op: VirtualMachineOperation, vm: VirtualMachine) -> Result | None:
        assert op.spec.restore is not None
        mode = op.spec.restore.mode
        intents = read_intents(vm.metadata.annotations)
        me = holder(op)
        entered = intents.held_by == me
        step = RestoreStep(op.status.step)

        if not entered and not_past(step, RestoreStep.VALIDATE):
            snap = self._snapshot(op)
            op = await self._set_step(
                op, RestoreStep.VALIDATE, f"snapshot {snap.metadata.name} is ready; checking disks and names"
            )
            report = self._validate(op, vm, snap)
            if mode is RestoreMode.DRY_RUN:  # stops here, changes nothing
                op.status.progress = report
                await self._finish(
                    op, OperationPhase.COMPLETED, "DryRun", "dry run: nothing was changed; see progress"
                )
                return None
            op.status.progress = report
            if intents.held_by and intents.held_by != me:
                raise RestoreFailed("VMInMaintenance", f"the VM is held by {intents.held_by}")
            # EnterMaintenance: the power state before the restore, the hold and a system stop, in ONE write.
            was = PowerState.RUNNING if vm.status.phase in RESTORE_RUNNING_PHASES else PowerState.STOPPED

            def enter(current: VirtualMachine) -> None:
                now = read_intents(current.metadata.annotations)
                if now.held_by == me:
                    return  # already entered: never re-measure a VM we stopped ourselves
                current.metadata.annotations = write_intents(
                    current.metadata.annotations,
                    now.with_(
                        restore_power_state=was,
                        held_by=me,
                        stop=StopMode.GRACEFUL,
                        stop_by_system=True,
                        start=False,
                        restart=None,
                        resume_from_memory=None,
                    ),
                )

            vm = self._vm_write(vm.metadata.name, enter)
            crashpoint("restore.entered-maintenance")
            op = await self._set_step(
                op, RestoreStep.ENTER_MAINTENANCE, f"recorded power state {was.value}; stopping the VM"
            )
            return Result(requeue_after=POLL_S)

        if not_past(step, RestoreStep.ENTER_MAINTENANCE):
            op = await self._set_step(op, RestoreStep.ENTER_MAINTENANCE, "waiting for the VM to stop")
            if intents.stop is not None or vm.status.phase is not VMPhase.STOPPED:
                return Result(requeue_after=POLL_S)  # the VM controller stops it (graceful, then forced)
            await self._remove_domain(vm)
            op = await self._set_step(
                op, RestoreStep.PROCESS_RESTORE, "reverting disks and the VM from the snapshot"
            )
            step = RestoreStep.PROCESS_RESTORE

        if step is RestoreStep.PROCESS_RESTORE:
            snap = self._snapshot(op)
            captured = snap.status.captured
            assert captured is not None
            dropped = self._dropped_nics(op, vm, captured.spec.nics)
            skipped = await self._revert_disks(op, snap)

            def overwrite(current: VirtualMachine) -> None:
                # the snapshot's copy, but the intents stay the ones recorded in step 2
                system = split_annotations(current.metadata.annotations)[1]
                current.spec = captured.spec.model_copy(deep=True)
                current.spec.disks = [d for d in current.spec.disks if d.volume not in skipped]
                current.spec.nics = [n for i, n in enumerate(current.spec.nics) if i not in dropped]
                current.metadata.labels = dict(captured.labels)
                current.metadata.annotations = {**strip_system(captured.annotations), **system}
                # A VM that was Running resumes the snapshot's memory, if it has any, when it
                # starts again (controllers.vm.memory); one that was Stopped boots cold later.
                intents = read_intents(current.metadata.annotations)
                resume = snap.metadata.name if snap.status.memory_handle else None
                if intents.restore_power_state is not PowerState.RUNNING:
                    resume = None
                current.metadata.annotations = write_intents(
                    current.metadata.annotations, intents.with_(resume_from_memory=resume)
                )
                # how an earlier restore's start went no longer applies
                current.status.conditions = remove_condition(
                    current.status.conditions, VMCondition.MEMORY_RESTORED
                )

            vm = self._vm_write(vm.metadata.name, overwrite, overwrite=True)
            crashpoint("restore.overwritten")
            note = f"; skipped missing or attached disk(s): {', '.join(skipped)}" if skipped else ""
            if dropped:
                note += f"; dropped NIC(s) {', '.join(map(str, sorted(dropped)))} (see the VM's events)"
            op = await self._set_step(
                op, RestoreStep.EXIT_MAINTENANCE, f"VM restored from {snap.metadata.name}{note}"
            )
            step = RestoreStep.EXIT_MAINTENANCE

        if step is RestoreStep.EXIT_MAINTENANCE:
            vm = self._exit_maintenance(vm.metadata.name, me)
            op = await self._set_step(
                op, RestoreStep.RESTORE_POWER_STATE, f"{op.status.message}; bringing back its power state"
            )
            step = RestoreStep.RESTORE_POWER_STATE

        if step is RestoreStep.RESTORE_POWER_STATE:
            intents = read_intents(vm.metadata.annotations)
            if intents.restore_power_state is not None:
                return Result(requeue_after=POLL_S)  # consumed where the VM controller recreates the domain
            wanted = "start requested" if intents.start else f"VM is {vm.status.phase.value}"
            await self._finish(
                op,
                OperationPhase.COMPLETED,
                "Restored",
                f"{op.status.message.split('; bringing')[0]}; {wanted}",
            )
            return None
        return Result(requeue_after=POLL_S)

    async def _remove_domain(self, vm: VirtualMachine) -> None:
        if not vm.status.host:
            return
        host = self.ctx.cache.host(vm.status.host)
        if host is None:
            return
        try:
            driver = await self.ctx.hosts.get(host.spec.uri)
            await driver.undefine(domain_name(vm.metadata.uid))
        except HostUnreachable as exc:
            raise RestoreFailed("HostUnreachable", f"cannot remove the domain: {exc}") from exc

    async def _revert_disks(self, op: VirtualMachineOperation, snap: VirtualMachineSnapshot) -> list[str]:
        assert op.spec.restore is not None
        skipped = []
        for disk in snap.status.disk_snapshots:
            volume = self.ctx.store.find(Volume, disk.volume)
            pool = self.ctx.store.find(StoragePool, volume.spec.pool) if volume else None
            if volume is None or pool is None:
                if op.spec.restore.mode is RestoreMode.STRICT:
                    raise RestoreFailed(
                        "DiskSnapshotMissing", f"volume {disk.volume} is gone; Strict restore stops"
                    )
                skipped.append(disk.volume)
                continue
            owner = self._attached_elsewhere(volume, op.spec.vm)
            if owner is not None:  # never revert (or take) the disk of another VM
                if op.spec.restore.mode is RestoreMode.STRICT:
                    raise RestoreFailed(
                        "VolumeAttached",
                        f"volume {disk.volume} is attached to VM {owner}; Strict restore stops",
                    )
                skipped.append(disk.volume)
                continue
            driver = await pool_driver(self.ctx, pool)
            if driver is None:
                raise RestoreFailed("PoolUnreachable", f"no connected host sees pool {pool.metadata.name}")
            try:
                await driver.revert_volume(pool_ref(pool), volume_file(volume), disk.handle)
            except DriverError as exc:
                if op.spec.restore.mode is RestoreMode.STRICT:
                    raise RestoreFailed("RevertFailed", f"volume {disk.volume}: {exc}") from exc
                skipped.append(disk.volume)
        return skipped

    def _attached_elsewhere(self, volume: Volume | None, vm: str) -> str | None:
        if volume is None:
            return None
        return attached_elsewhere(self.ctx.cache, volume.metadata.name, vm, volume.status.attached_vm)

    def _exit_maintenance(self, name: str, me: str) -> VirtualMachine:
        def leave(current: VirtualMachine) -> None:
            now = read_intents(current.metadata.annotations)
            if now.held_by == me:
                current.metadata.annotations = write_intents(
                    current.metadata.annotations, now.with_(held_by=None)
                )

        return self._vm_write(name, leave)

    async def _fail(
        self, op: VirtualMachineOperation, vm: VirtualMachine, reason: str, message: str
    ) -> Result | None:
        """ExitMaintenance also after a failure: the VM leaves the hold and gets its previous power state."""
        self._exit_maintenance(vm.metadata.name, holder(op))
        await self._finish(
            op,
            OperationPhase.FAILED,
            reason,
            f"{message}; the VM left maintenance in its previous power state",
        )
        return None


HANDLER = HandlerRegistration((OperationType.RESTORE,), lambda parts: RestoreHandler(parts.ctx))

__all__ = ["HANDLER", "RestoreHandler", "holder"]
