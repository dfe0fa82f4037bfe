"""A host failure's recovery places with the rules (issue 37): the VM restarted elsewhere keeps
its anti-affinity, on the simulated driver."""

from __future__ import annotations

from tests.conftest import eventually
from tests.controllers.helpers import add_host, vm, wait_settled
from virtplane.bootstrap import ControlPlane
from virtplane.domain.resources import (
    Host,
    Metadata,
    PlacementRule,
    PlacementRuleSpec,
    RuleType,
    RunPolicy,
    VirtualMachine,
    VirtualMachineSpec,
)


def add_db(plane: ControlPlane, name: str, host: str) -> None:
    plane.store.create(
        VirtualMachine(
            metadata=Metadata(name=name, labels={"app": "db"}),
            spec=VirtualMachineSpec(run_policy=RunPolicy.ALWAYS_ON, placement={"host_affinity": [host]}),
        )
    )


async def test_a_vm_recovered_from_a_failed_host_keeps_its_anti_affinity(plane: ControlPlane) -> None:
    """h2 has the most room, so without the rule db-1 would restart beside db-2 there. Red with
    vm_view leaving the rules out (db-1 lands on h2)."""
    add_host(plane, "h1")
    add_host(plane, "h2", memory_mib=131072)
    add_host(plane, "h3")
    plane.store.create(
        PlacementRule(
            metadata=Metadata(name="db-apart"),
            spec=PlacementRuleSpec(type=RuleType.ANTI_AFFINITY, vm_selector="app=db"),
        )
    )
    add_db(plane, "db-1", "h1")
    add_db(plane, "db-2", "h2")
    for name, host in (("db-1", "h1"), ("db-2", "h2")):
        settled = await wait_settled(plane, name, "Running")
        assert settled.status.host == host
        plane.store.mutate(VirtualMachine, name, lambda v: setattr(v.spec.placement, "host_affinity", []))
    plane.sim.inject("h1", "host-down")
    plane.store.mutate(Host, "h1", lambda h: setattr(h.spec, "fenced", True))
    await eventually(lambda: vm(plane, "db-1").status.host not in (None, "h1"))
    recovered = await wait_settled(plane, "db-1", "Running")
    assert recovered.status.host == "h3"
