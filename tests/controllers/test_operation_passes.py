"""An operation with nothing to wait for takes one look per step: its admission, then one for
each change of its VM (issue 13, row 4: every look runs on the one event loop the next step
waits for)."""

from __future__ import annotations

from tests.controllers.helpers import add_host, add_vm, operate, wait_op, wait_phase
from tests.reconciles import reconcile_log
from virtplane.bootstrap import ControlPlane
from virtplane.domain.resources import (
    OperationPhase,
    OperationType,
    RunPolicy,
    VirtualMachine,
    VirtualMachineOperation,
    VMPhase,
)

OP = VirtualMachineOperation.KIND


async def test_an_operation_is_not_woken_by_its_own_writes(plane: ControlPlane) -> None:
    add_host(plane)
    add_vm(plane, "vm-1", RunPolicy.MANUAL)
    await wait_phase(plane, "vm-1", "Stopped")
    log = reconcile_log(plane)
    vm_writes: list[VMPhase] = []
    plane.cache.add_listener(
        lambda kind, name, old, new: (
            vm_writes.append(new.status.phase)  # type: ignore[union-attr]
            if kind == VirtualMachine.KIND and new is not None
            else None
        )
    )
    name = operate(plane, "vm-1", OperationType.START)
    assert (await wait_op(plane, name)).status.phase is OperationPhase.COMPLETED
    looks = len(log.finished[(OP, name)])
    # its creation, then at most one look per write of its VM (the intent, Starting, Running...)
    assert looks <= 1 + len(vm_writes), (looks, vm_writes)
