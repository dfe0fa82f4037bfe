"""Starts placed in the same turn of the loop share a host's room (the CI run of 9bcf380:
nine VMs Running on a simulated host with room for eight).

A placement reserves by writing ``status.host``; the cache counts a VM on its host only once
that write is committed, and the group commit awaits a turn of the loop. The VM reconciles
running meanwhile must see the room already promised.
"""

from __future__ import annotations

from tests.conftest import eventually
from tests.controllers.helpers import add_host, add_vm, vm
from virtplane.bootstrap import ControlPlane
from virtplane.domain.conditions import VMCondition, get_condition
from virtplane.domain.resources import Host, RunPolicy


async def test_starts_placed_together_never_fill_a_host_beyond_its_room(plane: ControlPlane) -> None:
    add_host(plane, "h1", vcpus=64, memory_mib=1536)  # memory ratio 1: room for six of 256 MiB
    await eventually(lambda: plane.store.get(Host, "h1").status.allocation_ratios is not None)
    names = [f"v{n}" for n in range(12)]
    for name in names:  # created before the loop turns: one feed batch, reconciled side by side
        add_vm(plane, name, RunPolicy.ALWAYS_ON, cpu=1, memory_mib=256)

    def scheduled() -> bool:
        return all(get_condition(vm(plane, n).status.conditions, VMCondition.SCHEDULED) for n in names)

    await eventually(scheduled)
    placed = sorted(n for n in names if vm(plane, n).status.host == "h1")
    assert len(placed) == 6, placed
    pending = [n for n in names if n not in placed]
    for name in pending:
        condition = get_condition(vm(plane, name).status.conditions, VMCondition.SCHEDULED)
        assert condition is not None and "not enough memory: 0 MiB free, 256 needed" in condition.message
    assert len(plane.ctx.promised) == 0  # each reconcile let go of what it promised
