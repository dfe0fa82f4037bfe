"""Migrate and Evict operations, carried out with the coordinator's machinery."""

from __future__ import annotations

from virtplane.controllers.context import ControllerContext
from virtplane.controllers.migration.coordinator import MigrationCoordinator
from virtplane.controllers.migration.flights import (
    Refused,
    Waiting,
    failure_message,
    migration_ended,
    operation_tag,
    requesting_operation,
)
from virtplane.controllers.operations import finish_operation
from virtplane.controllers.watch import Watch
from virtplane.domain.intents import read_migration
from virtplane.domain.phases import MIGRATABLE_PHASES
from virtplane.domain.placement import why_no_target
from virtplane.domain.progress import (
    Began,
    MoveProgress,
    NoSlot,
    NoTarget,
    ProgressState,
    TargetRefused,
    advance,
    observed,
)
from virtplane.domain.resources import (
    LiveMigrationPolicy,
    OperationPhase,
    OperationType,
    Resource,
    VirtualMachine,
    VirtualMachineOperation,
)
from virtplane.reconcile.types import Request, Result
from virtplane.runtime.cache import Cache

POLL_S = 1.0


class MigrationOperations:
    """The handler of Migrate and Evict operations (registered on the operation controller).

    Migrate goes to ``spec.migrate.target_host`` when given (one attempt there), else like
    Evict to any other host, retried on another target up to ``migration.max_attempts``.
    A VM with local disks migrates with them. A superseded operation's migration is
    aborted by the coordinator.
    """

    def __init__(self, ctx: ControllerContext, coordinator: MigrationCoordinator) -> None:
        self.ctx = ctx
        self.coordinator = coordinator

    async def _finish(
        self, op: VirtualMachineOperation, phase: OperationPhase, reason: str, message: str
    ) -> None:
        await finish_operation(self.ctx, op, phase, reason, message)

    async def _finish_move(
        self,
        op: VirtualMachineOperation,
        progress: MoveProgress,
        phase: OperationPhase,
        reason: str,
        message: str,
    ) -> None:
        """End the operation with the move's last state, which a display shows (Migrated, 100 %),
        not the last one saved while it ran (Migrating, 0 %)."""
        op.status.progress = progress.as_dict()
        op.status.step = progress.state.value
        await self._finish(op, phase, reason, message)

    async def _save(self, op: VirtualMachineOperation, progress: MoveProgress, message: str) -> None:
        new = progress.as_dict()
        if op.status.progress != new or op.status.message != message:
            op.status.progress = new
            op.status.message = message
            op.status.step = progress.state.value
            await self.ctx.write(op)

    async def __call__(self, op: VirtualMachineOperation, vm: VirtualMachine) -> Result | None:
        tag = operation_tag(op.metadata.name)
        progress = MoveProgress.of(op.status.progress)
        intent = read_migration(vm.metadata.annotations)
        if intent is not None and intent.requested_by != tag:
            why = f"waiting: another migration of the VM is under way ({intent.requested_by})"
            await self._save(op, progress, why)
            return Result(requeue_after=POLL_S)
        explicit = op.spec.migrate.target_host if op.spec.migrate else None
        max_attempts = 1 if explicit else self.ctx.settings.get_int("migration.max_attempts")
        flight = None
        if intent is not None:
            flight = self.coordinator.in_flight(vm.metadata.name, intent)
        progress = observed(progress, flight, vm.status.host, failure_message(vm), max_attempts=max_attempts)
        if intent is not None:
            await self._save(op, progress, f"migrating to {intent.target} (attempt {intent.attempt})")
            return Result(requeue_after=POLL_S)
        if progress.state is ProgressState.MIGRATED:
            message = f"VM {vm.metadata.name} is on {progress.target}"
            await self._finish_move(op, progress, OperationPhase.COMPLETED, "Migrated", message)
            return None
        if progress.state is ProgressState.FAILED:
            await self._finish_move(op, progress, OperationPhase.FAILED, "MigrationFailed", progress.message)
            return None
        if vm.status.phase not in MIGRATABLE_PHASES:
            await self._finish(
                op,
                OperationPhase.FAILED,
                "NotRunning",
                f"the VM is {vm.status.phase.value}; {op.spec.type.value} needs it running",
            )
            return None
        if vm.spec.live_migration_policy is LiveMigrationPolicy.NEVER:
            await self._finish(
                op, OperationPhase.FAILED, "NotMigratable", "the VM's live_migration_policy is Never"
            )
            return None
        if explicit == vm.status.host:
            await self._finish(
                op, OperationPhase.FAILED, "AlreadyThere", f"the VM already runs on {explicit}"
            )
            return None
        forced = op.spec.force  # an admin's (the API refuses an operator's): required rules yield
        choice = self.coordinator.choose_target(
            vm, exclude=frozenset(progress.tried), only=explicit, override_rules=forced
        )
        if choice.host is None:
            failed = advance(progress, NoTarget(why_no_target(choice)))
            await self._finish_move(op, failed, OperationPhase.FAILED, "NoTarget", failed.message)
            return None
        result = await self.coordinator.begin(
            vm.metadata.name,
            choice.host,
            requested_by=tag,
            attempt=progress.attempts + 1,
            override_rules=forced,
        )
        if isinstance(result, Waiting):
            progress = advance(progress, NoSlot(result.message))
            await self._save(op, progress, result.message)
            return Result(requeue_after=POLL_S)
        if isinstance(result, Refused):
            progress = advance(
                progress, TargetRefused(choice.host, result.message), max_attempts=max_attempts
            )
            if progress.state is ProgressState.FAILED:
                await self._finish_move(
                    op, progress, OperationPhase.FAILED, "MigrationFailed", progress.message
                )
                return None
            await self._save(op, progress, result.message)
            return Result(requeue_after=0.0)
        progress = advance(progress, Began(choice.host))
        await self._save(op, progress, f"migrating to {choice.host} (attempt {progress.attempts})")
        return Result(requeue_after=POLL_S)


# --------------------------------------------------------------------------- watches


def _moves_waiting_for_a_slot(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """A migration ended, so a slot is free: its requester and every Migrate or Evict under way
    (any of them may wait for that slot) look again."""
    ended = migration_ended(old, new)
    if ended is None:
        return []
    requests = [
        Request(VirtualMachineOperation.KIND, op.metadata.name)
        for op in cache.operations_under_way()  # not every VM's operations: a fleet's worth
        if op.spec.type in (OperationType.MIGRATE, OperationType.EVICT) and cache.vm(op.spec.vm) is not None
    ]
    owner = requesting_operation(ended.requested_by)
    if owner is not None:
        requests.append(Request(VirtualMachineOperation.KIND, owner))
    return requests


WATCHES = (Watch(VirtualMachine.KIND, _moves_waiting_for_a_slot),)
"""The operation controller's watches for the Migrate and Evict handler (it registers them)."""
