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
from dataclasses import dataclass

from virtplane.controllers.chain import Step, StopChain, run_chain
from virtplane.controllers.context import Change, ControllerContext
from virtplane.controllers.networks import vm_claims
from virtplane.controllers.operations import finish_operation
from virtplane.controllers.registration import HandlerRegistration
from virtplane.controllers.restore_checks import (
    RestoreFailed,
    attached_now,
    dropped_nics,
    validation_report,
)
from virtplane.controllers.restore_sources import RestoreSource, put_back, source_for
from virtplane.controllers.storage import pool_driver
from virtplane.domain.conditions import VMCondition, remove_condition
from virtplane.domain.intents import (
    PowerState,
    StopMode,
    read_intents,
    split_annotations,
    strip_system,
    write_intents,
)
from virtplane.domain.phases import RESTORE_RUNNING_PHASES
from virtplane.domain.resources import (
    OperationPhase,
    OperationType,
    RestoreMode,
    StoragePool,
    VirtualMachine,
    VirtualMachineOperation,
    VMPhase,
    Volume,
)
from virtplane.domain.restore import STEPS, RestoreStep, not_past
from virtplane.drivers.base import domain_name
from virtplane.drivers.errors import DriverError, HostUnreachable
from virtplane.reconcile.types import Result
from virtplane.store.claims import ClaimTaken

log = logging.getLogger("virtplane.controllers.restore")

POLL_S = 0.5


def holder(op: VirtualMachineOperation) -> str:
    return f"restore/{op.metadata.name}"


@dataclass
class RestoreRun:
    """One look at a restore: its operation, its VM, and the step the operation reached."""

    op: VirtualMachineOperation
    vm: VirtualMachine
    step: RestoreStep

    @property
    def me(self) -> str:
        return holder(self.op)

    @property
    def entered(self) -> bool:
        """This restore holds the VM: its power state is recorded, never to be measured again."""
        return read_intents(self.vm.metadata.annotations).held_by == self.me


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

    async def _reach(self, run: RestoreRun, step: RestoreStep, message: str) -> None:
        """The operation is at ``step``: written (the durable point a crash resumes from)
        when it or its message changed."""
        op = run.op
        if op.status.step != step or op.status.message != message:
            op.status.step = step.value
            op.status.message = message
            self.ctx.event(op, step, message)
            run.op = await self.ctx.write(op)
        run.step = step

    async def _finish(
        self, op: VirtualMachineOperation, phase: OperationPhase, reason: str, message: str
    ) -> None:
        await finish_operation(self.ctx, op, phase, reason, message, vm_event_prefix="Restore")

    async def _vm_write(
        self, point: str, name: str, change: Callable[[VirtualMachine], None], *, overwrite: bool = False
    ) -> VirtualMachine:
        """Durable point ``point`` on the VM; the VM controller looks again after each (its watch)."""
        if not overwrite:
            return await self.ctx.durable(point, Change(VirtualMachine, name, change))
        try:  # with the restored NICs' MACs and addresses, claimed in the same write
            return await self.ctx.durable(
                point,
                Change(
                    VirtualMachine,
                    name,
                    change,
                    spec_because="a restore overwrites the VM from its snapshot",
                    claims=vm_claims,
                ),
            )
        except ClaimTaken as taken:  # taken between the check and the write
            raise RestoreFailed("AddressInUse", f"a NIC of the snapshot: {taken}") from taken

    # ------------------------------------------------------------------ the chain

    def chain(self) -> tuple[Step[RestoreRun], ...]:
        """The steps of ``domain.restore.STEPS``, in its order: each looks at the step the
        operation reached (its durable point, ``op.status.step``) and the VM's hold, and does
        its part or nothing."""
        by_step = {
            RestoreStep.VALIDATE: self._validate_step,
            RestoreStep.ENTER_MAINTENANCE: self._enter_maintenance,
            RestoreStep.PROCESS_RESTORE: self._process_restore,
            RestoreStep.EXIT_MAINTENANCE: self._exit_step,
            RestoreStep.RESTORE_POWER_STATE: self._restore_power_state,
        }
        return tuple(
            Step(row.step.value, by_step[row.step]) for row in STEPS if row.step is not RestoreStep.NEW
        )

    async def _step(self, op: VirtualMachineOperation, vm: VirtualMachine) -> Result | None:
        # every path ends in a StopChain: a step waits, fails, or the last one finishes
        result, _ = await run_chain(self.chain(), RestoreRun(op, vm, RestoreStep(op.status.step)))
        return result

    async def _validate_step(self, run: RestoreRun) -> Result | None:
        """SnapshotReady and Validate; a DryRun ends here with its report, changing nothing."""
        if run.entered or not not_past(run.step, RestoreStep.VALIDATE):
            return None
        restore = run.op.spec.restore
        assert restore is not None
        source = source_for(self.ctx, run.op)
        await self._reach(run, RestoreStep.VALIDATE, f"{source.what} is ready; checking disks and names")
        run.op.status.progress = validation_report(self.ctx, run.op, run.vm, source)
        if restore.mode is RestoreMode.DRY_RUN:
            await self._finish(
                run.op, OperationPhase.COMPLETED, "DryRun", "dry run: nothing was changed; see progress"
            )
            raise StopChain(None)
        held_by = read_intents(run.vm.metadata.annotations).held_by
        if held_by and held_by != run.me:
            raise RestoreFailed("VMInMaintenance", f"the VM is held by {held_by}")
        return None

    async def _enter_maintenance(self, run: RestoreRun) -> Result | None:
        """Durable point: the power state before the restore, the hold and a system stop in ONE
        VM write, before anything is torn down. Then, once the VM controller stopped the VM,
        its domain goes."""
        if not run.entered and not_past(run.step, RestoreStep.VALIDATE):
            me = run.me
            was = PowerState.RUNNING if run.vm.status.phase in RESTORE_RUNNING_PHASES else PowerState.STOPPED

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

            run.vm = await self._vm_write("restore.entered-maintenance", run.vm.metadata.name, enter)
            await self._reach(
                run, RestoreStep.ENTER_MAINTENANCE, f"recorded power state {was.value}; stopping the VM"
            )
            raise StopChain(Result(requeue_after=POLL_S))
        if not not_past(run.step, RestoreStep.ENTER_MAINTENANCE):
            return None
        await self._reach(run, RestoreStep.ENTER_MAINTENANCE, "waiting for the VM to stop")
        if (
            read_intents(run.vm.metadata.annotations).stop is not None
            or run.vm.status.phase is not VMPhase.STOPPED
        ):
            raise StopChain(
                Result(requeue_after=POLL_S)
            )  # the VM controller stops it (graceful, then forced)
        await self._remove_domain(run.vm)
        await self._reach(run, RestoreStep.PROCESS_RESTORE, "restoring disks and the VM from its source")
        return None

    async def _process_restore(self, run: RestoreRun) -> Result | None:
        """Every disk reverted; spec, labels and user annotations overwritten from the snapshot
        (the intents recorded on entering stay), in one VM write: the durable point."""
        if run.step is not RestoreStep.PROCESS_RESTORE:
            return None
        source = source_for(self.ctx, run.op)
        captured = source.captured
        dropped = dropped_nics(self.ctx, run.op, run.vm, captured.spec.nics) if source.whole_vm else set()
        skipped = await self._revert_disks(run, source)

        def overwrite(current: VirtualMachine) -> None:
            if not source.whole_vm:  # only some disks: the VM stays as it is, cold-booted
                intents = read_intents(current.metadata.annotations)
                current.metadata.annotations = write_intents(
                    current.metadata.annotations, intents.with_(resume_from_memory=None)
                )
                return
            # the source's copy, but the intents stay the ones recorded on entering
            system = split_annotations(current.metadata.annotations)[1]
            current.spec = captured.spec.model_copy(deep=True)
            current.spec.disks = [d for d in current.spec.disks if d.volume not in skipped]
            current.spec.nics = [n for i, n in enumerate(current.spec.nics) if i not in dropped]
            current.metadata.labels = dict(captured.labels)
            current.metadata.annotations = {**strip_system(captured.annotations), **system}
            # A VM that was Running resumes the snapshot's memory, if it has any, when it
            # starts again (controllers.vm.memory); one that was Stopped boots cold later.
            intents = read_intents(current.metadata.annotations)
            resume = source.name if source.memory_handle else None
            if intents.restore_power_state is not PowerState.RUNNING:
                resume = None
            current.metadata.annotations = write_intents(
                current.metadata.annotations, intents.with_(resume_from_memory=resume)
            )
            # how an earlier restore's start went no longer applies
            current.status.conditions = remove_condition(
                current.status.conditions, VMCondition.MEMORY_RESTORED
            )

        run.vm = await self._vm_write("restore.overwritten", run.vm.metadata.name, overwrite, overwrite=True)
        note = f"; skipped missing or attached disk(s): {', '.join(skipped)}" if skipped else ""
        if dropped:
            note += f"; dropped NIC(s) {', '.join(map(str, sorted(dropped)))} (see the VM's events)"
        await self._reach(run, RestoreStep.EXIT_MAINTENANCE, f"VM restored from {source.what}{note}")
        return None

    async def _exit_step(self, run: RestoreRun) -> Result | None:
        """The hold goes (after a failure too: ``_fail``); the intent stays for the VM controller."""
        if run.step is not RestoreStep.EXIT_MAINTENANCE:
            return None
        run.vm = await self._exit_maintenance(run.vm.metadata.name, run.me)
        await self._reach(
            run, RestoreStep.RESTORE_POWER_STATE, f"{run.op.status.message}; bringing back its power state"
        )
        return None

    async def _restore_power_state(self, run: RestoreRun) -> Result | None:
        """Done once the VM controller turned the intent into a start or a kept stop."""
        if run.step is not RestoreStep.RESTORE_POWER_STATE:
            return None
        intents = read_intents(run.vm.metadata.annotations)
        if intents.restore_power_state is not None:
            raise StopChain(
                Result(requeue_after=POLL_S)
            )  # consumed where the VM controller recreates the domain
        wanted = "start requested" if intents.start else f"VM is {run.vm.status.phase.value}"
        await self._finish(
            run.op,
            OperationPhase.COMPLETED,
            "Restored",
            f"{run.op.status.message.split('; bringing')[0]}; {wanted}",
        )
        raise StopChain(None)

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

    async def _revert_disks(self, run: RestoreRun, source: RestoreSource) -> list[str]:
        """Each disk put back as the source saved it; each one done is recorded on the operation
        (a durable point: a restart does not copy it again)."""
        restore = run.op.spec.restore
        assert restore is not None
        skipped = []
        for disk in source.disks:
            key, done = f"volume/{disk.volume}", f"restored from {source.what}"
            if run.op.status.progress.get(key) == done:
                continue  # before a crash
            volume = self.ctx.read(Volume, disk.volume)
            pool = self.ctx.read(StoragePool, volume.spec.pool) if volume else None
            if volume is None or pool is None:
                if restore.mode is RestoreMode.STRICT:
                    raise RestoreFailed(
                        "DiskSnapshotMissing", f"volume {disk.volume} is gone; Strict restore stops"
                    )
                skipped.append(disk.volume)
                continue
            owner = attached_now(self.ctx, volume, run.op.spec.vm)
            if owner is not None:  # never revert (or take) the disk of another VM
                if restore.mode is RestoreMode.STRICT:
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
                await put_back(driver, source, disk, volume, pool)
            except DriverError as exc:
                if restore.mode is RestoreMode.STRICT:
                    raise RestoreFailed("RevertFailed", f"volume {disk.volume}: {exc}") from exc
                skipped.append(disk.volume)
                continue
            run.op.status.progress[key] = done
            run.op = await self.ctx.durable("restore.disk-restored", run.op)
        return skipped

    async def _exit_maintenance(self, name: str, me: str) -> VirtualMachine:
        def leave(current: VirtualMachine) -> None:
            now = read_intents(current.metadata.annotations)
            if now.held_by == me:
                current.metadata.annotations = write_intents(
                    current.metadata.annotations, now.with_(held_by=None)
                )

        return await self._vm_write("restore.exited-maintenance", name, leave)

    async def _fail(
        self, op: VirtualMachineOperation, vm: VirtualMachine, reason: str, message: str
    ) -> Result | None:
        """ExitMaintenance also after a failure: the VM leaves the hold and gets its previous power state."""
        await self._exit_maintenance(vm.metadata.name, holder(op))
        await self._finish(
            op,
            OperationPhase.FAILED,
            reason,
            f"{message}; the VM left maintenance in its previous power state",
        )
        return None


HANDLER = HandlerRegistration((OperationType.RESTORE,), lambda parts: RestoreHandler(parts.ctx))

__all__ = ["HANDLER", "RestoreHandler", "holder"]
