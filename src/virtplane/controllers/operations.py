"""The operation controller: turns Start/Stop/Restart operations into durable VM intents.

An operation is admitted (``domain.operations.admit``), and its intent is written to
the VirtualMachine (the object that survives) in the transaction that makes the
operation InProgress. The VM controller carries the intent out; this controller watches
the VM and completes the operation when the intent is consumed and the VM shows
the result. Migrate, Evict and Restore are handed to the controllers registered
for them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from virtplane.controllers.context import ControllerContext
from virtplane.controllers.registration import Parts, Registration
from virtplane.controllers.watch import Watch, itself, name_of
from virtplane.domain.base import copied
from virtplane.domain.intents import Intents, RestartStage, StopMode, read_intents, write_intents
from virtplane.domain.operations import active_before, admit
from virtplane.domain.resources import (
    OperationPhase,
    OperationType,
    Resource,
    VirtualMachine,
    VirtualMachineOperation,
    VirtualMachineStatus,
    VMPhase,
)
from virtplane.reconcile.types import Request, Result
from virtplane.runtime.cache import Cache

log = logging.getLogger("virtplane.controllers.operations")

OperationHandler = Callable[[VirtualMachineOperation, VirtualMachine], Awaitable[Result | None]]
"""Reconciles one admitted, InProgress operation of a type this controller does not own."""

POLL_S = 2.0


async def finish_operation(
    ctx: ControllerContext,
    op: VirtualMachineOperation,
    phase: OperationPhase,
    reason: str,
    message: str,
    *,
    vm_event_prefix: str = "Operation",
) -> None:
    """End an operation with a reason, and say so on the operation and on its VM (the events go
    in the write's transaction: they exist exactly when the end does)."""
    op.status.phase = phase
    op.status.reason = reason
    op.status.message = message
    op.status.finished_at = ctx.now()
    warning = phase is not OperationPhase.COMPLETED
    ctx.event(op, phase.value, message, warning=warning)
    ctx.event(
        ("VirtualMachine", op.spec.vm),
        f"{vm_event_prefix}{phase.value}",
        f"{op.spec.type.value} {op.metadata.name}: {message}",
        warning=warning,
    )
    await ctx.write(op)


def intents_for(op: VirtualMachineOperation, intents: Intents) -> Intents:
    """The VM intents that carry ``op`` out (and replace what it supersedes)."""
    kind, force = op.spec.type, op.spec.force
    if kind is OperationType.START:
        return intents.with_(start=True, stop=None, stop_by_system=False)
    if kind is OperationType.STOP:
        # a later unforced Stop does not soften a forced one the user already asked for
        keep_forced = intents.stop is StopMode.FORCE and not intents.stop_by_system
        stop = StopMode.FORCE if force or keep_forced else StopMode.GRACEFUL
        return intents.with_(start=False, restart=None, stop=stop, stop_by_system=False)
    if kind is OperationType.RESTART:
        if intents.restart is RestartStage.STARTING:
            return intents
        return intents.with_(restart=RestartStage.STOPPING_FORCE if force else RestartStage.STOPPING_GRACEFUL)
    return intents


class OperationReconciler:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx
        self.handlers: dict[OperationType, OperationHandler] = {}

    def register(self, kind: OperationType, handler: OperationHandler) -> None:
        self.handlers[kind] = handler

    async def _finish(
        self, op: VirtualMachineOperation, phase: OperationPhase, reason: str, message: str
    ) -> None:
        await finish_operation(self.ctx, op, phase, reason, message)

    async def __call__(self, req: Request) -> Result | None:
        # Most looks only read (an operation waiting for its VM): both start as the cache's own
        # objects, and what is changed is a copy, made where a change begins.
        ctx = self.ctx
        op = ctx.read(VirtualMachineOperation, req.name)
        if op is None or op.status.phase.finished:
            return None
        vm = ctx.read(VirtualMachine, op.spec.vm)
        if vm is None:
            await self._finish(
                copied(op), OperationPhase.FAILED, "VMNotFound", f"VM {op.spec.vm} does not exist"
            )
            return None
        if op.status.phase is OperationPhase.PENDING:
            return await self._admit(copied(op), copied(vm))
        handler = self.handlers.get(op.spec.type)
        if handler is not None:
            return await handler(copied(op), copied(vm))
        return await self._progress(op, vm)

    async def _admit(self, op: VirtualMachineOperation, vm: VirtualMachine) -> Result | None:
        ctx = self.ctx
        if vm.status == VirtualMachineStatus():
            # Its controller has not looked at the VM yet (just created): its phase says nothing
            # of the VM. The operation waits for that first look, whose write wakes it.
            return Result(requeue_after=POLL_S)
        siblings = [
            o for o in ctx.cache.operations_of(vm.metadata.name) if o.metadata.name != op.metadata.name
        ]
        intents = read_intents(vm.metadata.annotations)
        admission = admit(
            op.spec.type,
            op.spec.force,
            vm.spec.run_policy,
            vm.status.phase,
            active_before(siblings, op),
            held=bool(intents.held_by),
        )
        if not admission.allowed:
            await self._finish(op, OperationPhase.FAILED, admission.reason, admission.message)
            return None
        for name in admission.supersede:
            other = ctx.read(VirtualMachineOperation, name, to_change=True)
            if other is not None and not other.status.phase.finished:
                await self._finish(
                    other,
                    OperationPhase.SUPERSEDED,
                    "Superseded",
                    f"superseded by {op.spec.type.value} {op.metadata.name}",
                )
        carries_intent = op.spec.type in (OperationType.START, OperationType.STOP, OperationType.RESTART)
        if carries_intent:
            vm.metadata.annotations = write_intents(vm.metadata.annotations, intents_for(op, intents))
        op.status.phase = OperationPhase.IN_PROGRESS
        op.status.started_at = ctx.now()
        op.status.message = (
            f"{op.spec.type.value} under way"
            if op.spec.type in self.handlers
            else progress_of(op, vm).message
        )
        ctx.event(op, "InProgress", op.status.message)
        if carries_intent:
            # The intent is durable with the operation's InProgress, in one transaction: a
            # client never sees an operation under way whose intent the VM does not carry,
            # and a crash before it leaves the operation Pending, admitted again. A lost race
            # (the VM written since this look read it) looks again.
            vm, op = await ctx.write(vm, op)
        else:
            op = await ctx.write(op)
        handler = self.handlers.get(op.spec.type)
        if handler is not None:  # under way now (durably): its first step in this same look
            return await handler(op, vm)
        return Result(requeue_after=POLL_S)

    async def _progress(self, op: VirtualMachineOperation, vm: VirtualMachine) -> Result | None:
        """``op`` and ``vm`` as the cache holds them: read here, changed only as copies."""
        outcome = progress_of(op, vm)
        if outcome.finished is not None:
            await self._finish(copied(op), outcome.finished, outcome.reason, outcome.message)
            return None
        if outcome.message != op.status.message:
            op = copied(op)
            op.status.message = outcome.message
            await self.ctx.write(op)
        return Result(requeue_after=POLL_S)


@dataclass(frozen=True)
class Progress:
    """Where a Start, Stop or Restart stands, read from its VM: finished (how, why) or a message."""

    message: str
    finished: OperationPhase | None = None
    reason: str = ""


def progress_of(op: VirtualMachineOperation, vm: VirtualMachine) -> Progress:
    intents = read_intents(vm.metadata.annotations)
    phase = vm.status.phase
    kind = op.spec.type
    name = vm.metadata.name
    if kind is OperationType.START:
        if not intents.start and phase is VMPhase.RUNNING:
            return Progress(f"VM {name} is running", OperationPhase.COMPLETED, "Started")
        if not intents.start and phase is VMPhase.STOPPED:
            return Progress(
                f"the start was dropped: {vm.status.message}", OperationPhase.FAILED, "StartDropped"
            )
        message = f"starting on {vm.status.host or 'a host to be chosen'}; VM is {phase.value}"
        if vm.status.start_failures > 1:
            message += f"; {vm.status.start_failures - 1} failed attempt(s), retrying"
        return Progress(message)
    if kind is OperationType.STOP:
        if intents.stop is None and phase is VMPhase.STOPPED:
            return Progress(f"VM {name} is stopped", OperationPhase.COMPLETED, "Stopped")
        return Progress(f"stopping; VM is {phase.value}")
    if kind is OperationType.RESTART:
        if intents.restart is None and phase is VMPhase.RUNNING:
            return Progress(f"VM {name} restarted", OperationPhase.COMPLETED, "Restarted")
        if intents.restart is None and phase is VMPhase.STOPPED:
            return Progress(
                f"the restart was dropped: {vm.status.message}", OperationPhase.FAILED, "RestartDropped"
            )
        stage = intents.restart.value if intents.restart else "done"
        return Progress(f"restart stage {stage}; VM is {phase.value}")
    return Progress(
        f"this server has no controller for {kind.value} operations", OperationPhase.FAILED, "Unsupported"
    )


# --------------------------------------------------------------------------- watches


def _operations_of_vm(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """The VM changed: its operations under way see whether it did what they asked."""
    return [
        Request(VirtualMachineOperation.KIND, op.metadata.name)
        for op in cache.operations_of(name_of(old, new))
        if not op.status.phase.finished
    ]


WATCHES = (
    # Each write here returns when to look again; what moves an operation on is its VM's change.
    itself(VirtualMachineOperation.KIND, after_own_writes=False),
    Watch(VirtualMachine.KIND, _operations_of_vm),
)


def _with_handlers(parts: Parts) -> OperationReconciler:
    """The operation controller, with the handlers other controllers register for their types."""
    reconciler = OperationReconciler(parts.ctx)
    for registered in parts.operation_handlers:
        handler = registered.handler(parts)
        for type_ in registered.types:
            reconciler.register(type_, handler)
    return reconciler


CONTROLLER = Registration(
    VirtualMachineOperation.KIND,
    _with_handlers,
    WATCHES,
    # 32: a bulk request's operations are admitted and ended in shared commits (row 3 of
    # bench/: 4 workers 515-564 VMs per s, 16 605-662, 32 723-756, 64 590-604)
    workers=32,
)
