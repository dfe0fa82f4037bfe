"""Draining a host under each strategy, on simulated hosts with shared and local storage."""

from __future__ import annotations

from tests.conftest import eventually
from tests.maintenance.conftest import Cluster


async def test_shared_vms_are_live_migrated_and_the_host_reaches_maintenance(cluster: Cluster) -> None:
    await cluster.add_host("h1")
    await cluster.add_vm("a")
    await cluster.add_vm("b")
    await cluster.add_host("h2")
    await cluster.add_host("h3")
    view = cluster.request("h1")
    assert {i["vm"]: i["action"] for i in view["plan"]["items"]} == {"a": "Migrate", "b": "Migrate"}
    await cluster.wait_state("h1", "Maintenance")
    for vm in ("a", "b"):
        assert cluster.vm(vm).status.host in ("h2", "h3")
        await eventually(lambda vm=vm: cluster.settled(vm, cluster.vm(vm).status.host or ""))
    m = cluster.maintenance("h1")
    assert m.status.phase.value == "Completed"
    assert set(m.status.migrated_vms) == {"a", "b"}
