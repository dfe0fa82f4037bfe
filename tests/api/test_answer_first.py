"""A write is answered before the reconciles it wakes run (issue 13, row 4).

The create route runs on the event loop and the app's middleware starts no task of its
own, so nothing between the store's commit and the answer hands the loop to the
controllers the write woke: a client that waits for an operation starts looking as soon
as it exists, not once the controllers are done with it.
"""

from __future__ import annotations

import httpx

from tests.conftest import eventually
from tests.reconciles import reconcile_log
from virtplane.bootstrap import ControlPlane
from virtplane.domain.resources import (
    Metadata,
    RunPolicy,
    VirtualMachine,
    VirtualMachineOperation,
    VirtualMachineSpec,
    VMPhase,
)
from virtplane.reconcile import Request


async def test_an_operation_is_answered_before_its_first_reconcile(plane: ControlPlane) -> None:
    plane.store.create(
        VirtualMachine(metadata=Metadata(name="vm-1"), spec=VirtualMachineSpec(run_policy=RunPolicy.MANUAL))
    )
    await eventually(
        lambda: (vm := plane.cache.vm("vm-1")) is not None and vm.status.phase is VMPhase.STOPPED
    )
    token = plane.store.create_token("operator", "operator")
    log = reconcile_log(plane)
    operations = plane.controllers[VirtualMachineOperation.KIND]
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=plane.app()),
        base_url="http://api",
        headers={"Authorization": f"Bearer {token}"},
    ) as client:
        response = await client.post(
            "/v1/operations", json={"metadata": {"name": "start-1"}, "spec": {"vm": "vm-1", "type": "Start"}}
        )
        assert response.status_code == 201, response.text
        # answered: the operation's reconcile, which the write woke, has not begun
        assert not log.finished[(VirtualMachineOperation.KIND, "start-1")]
        assert not operations.queue.is_processing(Request(VirtualMachineOperation.KIND, "start-1"))
    await eventually(lambda: log.finished[(VirtualMachineOperation.KIND, "start-1")])  # and then it runs
