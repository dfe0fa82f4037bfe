"""A copy that died with a fenced host, left there because the fence was cleared before the host
answered, must not undo an owner's stop when the locate step adopts it (crash harness, seed
1076353083: an AlwaysOnUnlessStoppedManually VM the user had stopped ended Running)."""

from __future__ import annotations

from tests.conftest import eventually
from tests.controllers.helpers import operate, wait_op
from tests.fencing.conftest import FencedCluster
from tests.reconciles import reconciled
from virtplane.domain.phases import DomainState
from virtplane.domain.resources import (
    ExitReason,
    Host,
    OperationPhase,
    OperationType,
    RunPolicy,
    VMPhase,
)


async def test_a_stopped_vm_adopted_onto_a_copy_that_died_with_its_host_stays_stopped(
    cluster: FencedCluster,
) -> None:
    await cluster.add_host("h1")
    cluster.give_bmc("h1")
    await cluster.add_vm("vm", policy=RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY)
    await cluster.add_host("h2")
    domain = cluster.domain("vm")

    cluster.fault("h1", "host-down")
    cluster.probe("h1")
    await eventually(lambda: cluster.host("h1").spec.fenced)
    await eventually(lambda: cluster.settled("vm", "h2"))  # recovered elsewhere
    # the admin returns h1 to service before it answers: no sweep of a fenced h1 ever runs
    cluster.store.mutate(Host, "h1", lambda h: setattr(h.spec, "fenced", False))
    await reconciled(cluster.plane, "h1", kind="Host")
    cluster.fault("h1", "host-up")
    cluster.probe("h1")
    await eventually(lambda: cluster.host("h1").status.silent_since is None)
    copy = await cluster.sim.driver("sim://h1").get_info(domain)
    assert copy is not None and (copy.state, copy.exit_reason) == (
        DomainState.SHUTOFF,
        ExitReason.HOST_FAILURE,
    )

    stop = operate(cluster.plane, "vm", OperationType.STOP)
    assert (await wait_op(cluster.plane, stop)).status.phase is OperationPhase.COMPLETED
    assert cluster.vm("vm").status.last_exit is ExitReason.STOPPED_BY_USER
    # its domain on h2 goes (as a restore removes it): the locate step finds the copy on h1
    await cluster.sim.driver("sim://h2").undefine(domain)
    cluster.plane.enqueue("VirtualMachine", "vm")
    await eventually(lambda: "FoundOnOtherHost" in cluster.events("VirtualMachine", "vm"))
    await reconciled(cluster.plane, "vm")  # a look at the adopted copy, after the adoption
    await reconciled(cluster.plane, "vm")

    vm = cluster.vm("vm")
    assert (vm.status.phase, vm.status.host) == (VMPhase.STOPPED, "h1"), vm.status
    assert vm.status.last_exit is ExitReason.STOPPED_BY_USER
    assert cluster.runs_on("vm") == [], "the owner's stop stands: the VM runs nowhere"
