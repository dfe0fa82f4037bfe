"""An operation with nothing to wait for takes one look per step: its admission, then one for
each change of its VM (issue 13, row 4: every look runs on the one event loop the next step
waits for)."""

from __future__ import annotations

from tests.conftest import eventually
from tests.reconciles import reconcile_log
from virtplane.bootstrap import ControlPlane
from virtplane.domain.resources import (
    Host,
    HostSpec,
    Metadata,
    OperationPhase,
    OperationType,
    RunPolicy,
    VirtualMachine,
    VirtualMachineOperation,
    VirtualMachineOperationSpec,
    VirtualMachineSpec,
    VMPhase,
)

OP = VirtualMachineOperation.KIND


async def test_an_operation_is_not_woken_by_its_own_writes(plane: ControlPlane) -> None:
    plane.store.create(Host(metadata=Metadata(name="h1"), spec=HostSpec(uri="sim://h1")))
    plane.store.create(
        VirtualMachine(metadata=Metadata(name="vm-1"), spec=VirtualMachineSpec(run_policy=RunPolicy.MANUAL))
    )
    await eventually(
        lambda: (vm := plane.cache.vm("vm-1")) is not None and vm.status.phase is VMPhase.STOPPED
    )
    log = reconcile_log(plane)
    vm_writes: list[VMPhase] = []
    plane.cache.add_listener(
        lambda kind, name, old, new: (
            vm_writes.append(new.status.phase)  # type: ignore[union-attr]
            if kind == VirtualMachine.KIND and new is not None
            else None
        )
    )
    plane.store.create(
        VirtualMachineOperation(
            metadata=Metadata(name="start-1"),
            spec=VirtualMachineOperationSpec(vm="vm-1", type=OperationType.START),
        )
    )

    def finished() -> bool:
        op = plane.cache._objects[OP].get("start-1")
        return isinstance(op, VirtualMachineOperation) and op.status.phase is OperationPhase.COMPLETED

    await eventually(finished)
    looks = len(log.finished[(OP, "start-1")])
    # its creation, then at most one look per write of its VM (the intent, Starting, Running...)
    assert looks <= 1 + len(vm_writes), (looks, vm_writes)
