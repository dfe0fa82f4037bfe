"""Draining a host under each strategy, on simulated hosts with shared and local storage."""

from __future__ import annotations

import pytest

from tests.conftest import eventually
from tests.maintenance.conftest import Cluster
from virtplane.domain.intents import PowerState, StopMode, read_intents
from virtplane.domain.resources import (
    Disk,
    LiveMigrationPolicy,
    Metadata,
    RunPolicy,
    VirtualMachine,
    VirtualMachineSpec,
    VMPhase,
    Volume,
    VolumePhase,
    VolumeSpec,
)
from virtplane.drivers.sim import SimFaultError


async def seeded(cluster: Cluster) -> None:
    """h1 runs a shared-disk VM (s), a local-disk VM (l) and has a stopped VM (off); h2, h3 are empty."""
    await cluster.add_host("h1")
    await cluster.add_vm("s")
    await cluster.add_vm("l", pool="h1-local")
    await cluster.add_vm("off", running=False)
    await cluster.add_host("h2")
    await cluster.add_host("h3")


async def test_shared_vms_are_live_migrated_and_the_host_reaches_maintenance(cluster: Cluster) -> None:
    await cluster.add_host("h1")
    await cluster.add_vm("a")
    await cluster.add_vm("b")
    await cluster.add_host("h2")
    await cluster.add_host("h3")
    guests = {vm: cluster.sim.read_memory(cluster.domain(vm)) for vm in ("a", "b")}
    view = cluster.request("h1")
    assert {i["vm"]: i["action"] for i in view["plan"]["items"]} == {"a": "Migrate", "b": "Migrate"}
    await cluster.wait_state("h1", "Maintenance")
    for vm in ("a", "b"):
        assert cluster.vm(vm).status.host in ("h2", "h3")
        await eventually(lambda vm=vm: cluster.settled(vm, cluster.vm(vm).status.host or ""))
    # the VMs never stopped: each guest's memory is the one it had (a new boot has new memory)
    assert {vm: cluster.sim.read_memory(cluster.domain(vm)) for vm in ("a", "b")} == guests
    m = cluster.maintenance("h1")
    assert m.status.phase.value == "Completed"
    assert set(m.status.migrated_vms) == {"a", "b"}
    assert {"PrepareForMaintenance", "Maintenance", "MaintenancePlanned"} <= set(cluster.events("Host", "h1"))
    assert {"MigrationStarted", "Migrated"} <= set(cluster.events("VirtualMachine", "a"))


async def test_strategy_error_blocks_and_touches_nothing(cluster: Cluster) -> None:
    await seeded(cluster)
    before = {vm: cluster.vm(vm).metadata.annotations for vm in ("s", "l", "off")}
    view = cluster.request("h1", "Error")
    assert {i["vm"]: i["action"] for i in view["plan"]["items"]} == {
        "s": "Migrate",
        "l": "Blocked",
        "off": "Leave",
    }
    assert view["plan"]["feasible"] is False
    await cluster.wait_state("h1", "ErrorInMaintenance")
    m = cluster.maintenance("h1")
    assert m.status.phase.value == "Failed" and m.status.blocking == ["l"]
    assert "local storage" in m.status.message and "nothing was touched" in m.status.message
    for vm in ("s", "l"):
        assert cluster.settled(vm, "h1")
    assert cluster.vm("off").status.phase is VMPhase.STOPPED
    assert {vm: cluster.vm(vm).metadata.annotations for vm in ("s", "l", "off")} == before
    assert "MigrationStarted" not in cluster.events("VirtualMachine", "s")


async def test_strategy_migration_moves_local_disks_with_the_vm(cluster: Cluster) -> None:
    await seeded(cluster)
    disk = cluster.store.get(Volume, "l-disk")
    cluster.sim.write_volume(disk.status.path, "data on h1", host="h1")
    view = cluster.request("h1", "Migration")
    actions = {i["vm"]: i["action"] for i in view["plan"]["items"]}
    assert actions == {"s": "Migrate", "l": "MigrateWithStorage", "off": "Leave"}
    await cluster.wait_state("h1", "Maintenance")
    target = cluster.vm("l").status.host
    assert target in ("h2", "h3")
    await eventually(lambda: cluster.settled("l", target or ""))
    assert cluster.store.get(Volume, "l-disk").spec.pool == f"{target}-local"
    assert cluster.sim.read_volume(disk.status.path, host=target) == "data on h1"
    # the source copy is gone
    with pytest.raises(Exception, match="no volume"):
        cluster.sim.read_volume(disk.status.path, host="h1")
    assert cluster.vm("off").status.phase is VMPhase.STOPPED and cluster.vm("off").status.host == "h1"


async def test_strategy_migration_moves_every_local_disk_of_a_vm(cluster: Cluster) -> None:
    """A VM with two disks in h1's local pool and one shared: both local disks arrive on the
    target with their data and neither is left on the source; the shared one stays put."""
    await cluster.add_host("h1")
    pools = {"two-root": "h1-local", "two-data": "h1-local", "two-shared": "shared"}
    for name, pool in pools.items():
        cluster.store.create(Volume(metadata=Metadata(name=name), spec=VolumeSpec(pool=pool, size_gib=1)))
        await eventually(lambda name=name: cluster.store.get(Volume, name).status.phase is VolumePhase.READY)  # type: ignore[misc]
    disks = [Disk(volume="two-root", boot_order=1), Disk(volume="two-data"), Disk(volume="two-shared")]
    spec = VirtualMachineSpec(disks=disks, termination_grace_period_s=1)
    cluster.store.create(VirtualMachine(metadata=Metadata(name="two"), spec=spec))
    await eventually(lambda: cluster.settled("two", "h1"))
    await cluster.add_host("h2")
    paths = {name: cluster.store.get(Volume, name).status.path for name in pools}
    for name in pools:
        cluster.sim.write_volume(paths[name], f"{name} written on h1", host="h1")

    view = cluster.request("h1", "Migration")
    assert [(i["vm"], i["action"], i["target"]) for i in view["plan"]["items"]] == [
        ("two", "MigrateWithStorage", "h2")
    ]
    await cluster.wait_state("h1", "Maintenance")
    await eventually(lambda: cluster.settled("two", "h2"))
    for name in ("two-root", "two-data"):
        assert cluster.store.get(Volume, name).spec.pool == "h2-local"
        assert cluster.sim.read_volume(paths[name], host="h2") == f"{name} written on h1"
        with pytest.raises(SimFaultError, match="no volume"):
            cluster.sim.read_volume(paths[name], host="h1")
    assert cluster.store.get(Volume, "two-shared").spec.pool == "shared"
    assert cluster.sim.read_volume(paths["two-shared"]) == "two-shared written on h1"


@pytest.mark.parametrize("policy", [RunPolicy.ALWAYS_ON, RunPolicy.MANUAL])
@pytest.mark.parametrize(("strategy", "mode"), [("ForceStop", StopMode.FORCE), ("Stop", StopMode.GRACEFUL)])
async def test_stop_strategies_stop_local_vms_and_cancel_starts_them_again(
    cluster: Cluster, strategy: str, mode: StopMode, policy: RunPolicy
) -> None:
    """Under Manual only the maintenance's intent starts the VM again: its policy would not."""
    await seeded(cluster)
    cluster.store.mutate(VirtualMachine, "l", lambda v: setattr(v.spec, "run_policy", policy))
    off_version = cluster.vm("off").metadata.resource_version
    cluster.request("h1", strategy)
    await cluster.wait_state("h1", "Maintenance")
    l_vm = cluster.vm("l")
    intents = read_intents(l_vm.metadata.annotations)
    assert l_vm.status.phase is VMPhase.STOPPED and l_vm.status.host == "h1"
    assert intents.held_by == "maintenance/h1"
    assert intents.maintenance_power_state is PowerState.RUNNING
    assert cluster.runs_on("l") == []
    assert cluster.vm("s").status.host in ("h2", "h3")
    m = cluster.maintenance("h1")
    assert m.status.stopped_vms == ["l"] and set(m.status.migrated_vms) == {"s"}
    assert m.status.progress["off"].state == "Left"
    assert any(
        e.reason == "MaintenanceStop" and mode.value in e.message
        for e in cluster.store.list_events(kind="VirtualMachine", name="l")
    )
    assert cluster.vm("off").metadata.resource_version == off_version, "a stopped VM is left alone"

    cluster.cancel("h1")
    await cluster.wait_state("h1", "Enabled")
    await eventually(lambda: cluster.settled("l", "h1"))
    intents = read_intents(cluster.vm("l").metadata.annotations)
    assert intents.held_by is None and intents.maintenance_power_state is None and not intents.start
    await eventually(lambda: cluster.maintenance("h1").status.phase.value == "Cancelled")
    assert cluster.vm("off").status.phase is VMPhase.STOPPED


async def test_never_migratable_vms_follow_the_local_storage_strategy(cluster: Cluster) -> None:
    await cluster.add_host("h1")
    await cluster.add_vm("pinned", live_migration_policy=LiveMigrationPolicy.NEVER)
    await cluster.add_host("h2")
    view = cluster.request("h1", "Migration")
    assert view["plan"]["items"][0]["action"] == "Blocked"
    await cluster.wait_state("h1", "ErrorInMaintenance")
    # asking again with another strategy retries
    view = cluster.request("h1", "ForceStop")
    await cluster.wait_state("h1", "Maintenance")
    assert cluster.vm("pinned").status.phase is VMPhase.STOPPED


async def test_always_off_vm_stopped_by_maintenance_stays_off_after_cancel(cluster: Cluster) -> None:
    await cluster.add_host("h1")
    await cluster.add_vm("l", pool="h1-local")
    await cluster.add_host("h2")
    cluster.request("h1", "ForceStop")
    await cluster.wait_state("h1", "Maintenance")

    def to_always_off(vm: object) -> None:
        vm.spec.run_policy = RunPolicy.ALWAYS_OFF  # type: ignore[attr-defined]

    cluster.store.mutate(VirtualMachine, "l", to_always_off)
    cluster.cancel("h1")
    await eventually(lambda: cluster.maintenance("h1").status.phase.value == "Cancelled")
    await eventually(
        lambda: read_intents(cluster.vm("l").metadata.annotations).maintenance_power_state is None
    )
    assert cluster.vm("l").status.phase is VMPhase.STOPPED and cluster.runs_on("l") == []


@pytest.mark.parametrize("value", ["Error", "Migration", "ForceStop", "Stop"])
async def test_without_a_strategy_the_setting_drives_the_drain(cluster: Cluster, value: str) -> None:
    """``host.maintenance.local.storage.strategy`` decides for a request that names no strategy."""
    await seeded(cluster)
    cluster.plane.settings.set("host.maintenance.local.storage.strategy", value)
    view = cluster.request("h1")
    assert view["strategy"] == value and view["requested_strategy"] is None
    await eventually(lambda: cluster.state("h1") in ("Maintenance", "ErrorInMaintenance"), timeout=15)
    m = cluster.maintenance("h1")
    assert m.status.strategy is not None and m.status.strategy.value == value, m.status.message
    if value == "Error":
        assert cluster.state("h1") == "ErrorInMaintenance" and m.status.blocking == ["l"]
        assert cluster.settled("l", "h1"), "nothing was touched"
        return
    assert cluster.state("h1") == "Maintenance", m.status.message
    if value == "Migration":
        target = cluster.vm("l").status.host
        assert target in ("h2", "h3")
        assert cluster.store.get(Volume, "l-disk").spec.pool == f"{target}-local"
        return
    assert cluster.vm("l").status.phase is VMPhase.STOPPED and cluster.runs_on("l") == []
    mode = StopMode.FORCE if value == "ForceStop" else StopMode.GRACEFUL
    stops = [e.message for e in cluster.store.list_events(kind="VirtualMachine", name="l")
             if e.reason == "MaintenanceStop"]  # fmt: skip
    assert stops and all(mode.value in m for m in stops), stops
