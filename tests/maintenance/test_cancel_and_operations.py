"""Cancel during a drain, return_vms, Migrate/Evict operations, and recovery after a restart."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import eventually
from tests.controllers.helpers import operate, wait_op
from tests.maintenance.conftest import Cluster
from virtplane.bootstrap import ControlPlane, ControlPlaneOptions
from virtplane.domain.conditions import VMCondition
from virtplane.domain.intents import MigrationIntent, read_migration, write_migration
from virtplane.domain.resources import (
    ConditionStatus,
    Metadata,
    MigrateSpec,
    OperationPhase,
    OperationType,
    Placement,
    RunPolicy,
    VirtualMachine,
    VirtualMachineOperation,
    VirtualMachineOperationSpec,
    VirtualMachineSpec,
)
from virtplane.drivers.base import MigrationPhase, MigrationRequest
from virtplane.server import sim_factory


async def slow_cluster(cluster: Cluster, vms: int) -> None:
    await cluster.add_host("h1")
    for i in range(vms):
        await cluster.add_vm(f"v{i}")
    await cluster.add_host("h2")
    await cluster.add_host("h3")
    cluster.plane.settings.set("migration.bandwidth_mib_s", 200)  # ~0.5 s per migration
    cluster.plane.settings.set("migration.max_outbound_per_host", 1)


async def test_cancel_in_the_middle_of_a_drain(cluster: Cluster) -> None:
    await slow_cluster(cluster, 3)
    cluster.request("h1")
    await eventually(lambda: any(read_migration(cluster.vm(f"v{i}").metadata.annotations) for i in range(3)))
    moving = next(f"v{i}" for i in range(3) if read_migration(cluster.vm(f"v{i}").metadata.annotations))
    cluster.cancel("h1")
    await eventually(lambda: cluster.maintenance("h1").status.phase.value == "Cancelled", timeout=15)
    assert cluster.state("h1") == "Enabled"
    # the migration in flight finished; nothing else moved
    assert cluster.vm(moving).status.host in ("h2", "h3")
    assert [f"v{i}" for i in range(3) if cluster.vm(f"v{i}").status.host == "h1"] == sorted(
        {"v0", "v1", "v2"} - {moving}
    )
    for i in range(3):
        await eventually(lambda i=i: cluster.settled(f"v{i}", cluster.vm(f"v{i}").status.host or ""))
    assert "MaintenanceCancelled" in cluster.events("Host", "h1")


async def test_cancel_with_return_vms_brings_the_vms_back(cluster: Cluster) -> None:
    await slow_cluster(cluster, 2)
    cluster.plane.settings.set("migration.bandwidth_mib_s", 0)
    cluster.plane.settings.set("host.maintenance.return_vms", True)
    cluster.request("h1")
    await cluster.wait_state("h1", "Maintenance")
    assert all(cluster.vm(f"v{i}").status.host != "h1" for i in range(2))
    cluster.cancel("h1")
    await eventually(lambda: cluster.maintenance("h1").status.phase.value == "Cancelled", timeout=15)
    for i in range(2):
        assert cluster.settled(f"v{i}", "h1")
        assert cluster.maintenance("h1").status.progress[f"v{i}"].state == "Returned"


@pytest.mark.parametrize(("setting", "asked"), [(False, True), (True, False)])
async def test_the_cancel_s_own_return_vms_wins_over_the_setting(
    cluster: Cluster, setting: bool, asked: bool
) -> None:
    await slow_cluster(cluster, 2)
    cluster.plane.settings.set("migration.bandwidth_mib_s", 0)
    cluster.plane.settings.set("host.maintenance.return_vms", setting)
    cluster.request("h1")
    await cluster.wait_state("h1", "Maintenance")
    went_to = {f"v{i}": cluster.vm(f"v{i}").status.host for i in range(2)}
    assert "h1" not in went_to.values()
    shown = cluster.plane.api_context.maintenance.cancel("h1", "test", return_vms=asked)
    assert shown["return_vms"] is asked
    await eventually(lambda: cluster.maintenance("h1").status.phase.value == "Cancelled", timeout=15)
    for vm, host in went_to.items():
        back = cluster.maintenance("h1").status.progress[vm].state == "Returned"
        assert back is asked
        assert cluster.settled(vm, "h1" if asked else host or "")


def migrate_op(
    cluster: Cluster, vm: str, kind: OperationType, target: str | None = None, *, attempt: int = 1
) -> str:
    name = f"{vm}-{kind.value.lower()}" + (f"-{attempt}" if attempt > 1 else "")
    cluster.store.create(
        VirtualMachineOperation(
            metadata=Metadata(name=name),
            spec=VirtualMachineOperationSpec(
                vm=vm, type=kind, migrate=MigrateSpec(target_host=target) if target else None
            ),
        )
    )
    return name


async def test_migrate_to_a_named_host_and_evict(cluster: Cluster) -> None:
    await cluster.add_host("h1")
    await cluster.add_vm("a", pool="h1-local")
    await cluster.add_host("h2")
    await cluster.add_host("h3")
    op = await wait_op(cluster.plane, migrate_op(cluster, "a", OperationType.MIGRATE, "h3"))
    assert op.status.phase is OperationPhase.COMPLETED, op.status.message
    await eventually(lambda: cluster.settled("a", "h3"))
    assert cluster.store.get(type(cluster.vm("a")), "a").status.host == "h3"
    op = await wait_op(cluster.plane, migrate_op(cluster, "a", OperationType.EVICT))
    assert op.status.phase is OperationPhase.COMPLETED, op.status.message
    assert cluster.vm("a").status.host in ("h1", "h2")


async def test_a_migration_that_ended_leaves_its_operation_done_and_no_migration_condition(
    cluster: Cluster,
) -> None:
    """A failed attempt leaves a False Migration condition saying why, until a migration of
    the VM succeeds; a Completed Migrate shows its move Migrated at 100 %, not Migrating at 0 %."""
    await cluster.add_host("h1")
    await cluster.add_vm("a")
    await cluster.add_host("h2")
    cluster.fault("h1", "fail-migration", "a", count=1)
    failed = await wait_op(cluster.plane, migrate_op(cluster, "a", OperationType.MIGRATE, "h2"))
    assert failed.status.phase is OperationPhase.FAILED
    assert failed.status.progress["state"] == "Failed"
    (why,) = [c for c in cluster.vm("a").status.conditions if c.type == VMCondition.MIGRATION]
    assert (why.status, why.reason) == (ConditionStatus.FALSE, "MigrationFailed")

    done = await wait_op(cluster.plane, migrate_op(cluster, "a", OperationType.MIGRATE, "h2", attempt=2))
    assert done.status.phase is OperationPhase.COMPLETED, done.status.message
    assert (done.status.progress["state"], done.status.progress["progress_pct"]) == ("Migrated", 100.0)
    assert done.status.step == "Migrated"
    current = cluster.vm("a")
    assert current.status.host == "h2"
    assert [c.type for c in current.status.conditions if c.type == VMCondition.MIGRATION] == []


async def test_a_start_placed_while_a_migration_prepares_its_target_keeps_the_room(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A migration with its disks prepares the target's pools (driver calls) between its look at
    the target's room and the write of its intent; a VM placed on the target meanwhile took
    that room. The migration looks again where it writes, and fails with why."""
    await cluster.add_host("h1")
    await cluster.add_vm("a", pool="h1-local")  # 1 GiB, with its disk in h1's local pool
    await cluster.add_host("h2", memory_mib=1024)  # room for a, or for b
    target = await cluster.plane.ctx.hosts.get("sim://h2")
    prepare = target.ensure_pool

    async def a_start_takes_the_room(ref: Any) -> None:
        if cluster.store.find(VirtualMachine, "b") is None:
            pinned = VirtualMachineSpec(memory_mib=1024, placement=Placement(host_affinity=["h2"]))
            cluster.store.create(VirtualMachine(metadata=Metadata(name="b"), spec=pinned))
            await eventually(lambda: cluster.vm("b").status.host == "h2")
        await prepare(ref)

    monkeypatch.setattr(target, "ensure_pool", a_start_takes_the_room)
    op = await wait_op(cluster.plane, migrate_op(cluster, "a", OperationType.MIGRATE, "h2"))
    assert op.status.phase is OperationPhase.FAILED
    assert "not enough memory: 0 MiB free, 1024 needed" in op.status.message
    assert cluster.settled("a", "h1")
    await eventually(lambda: cluster.settled("b", "h2"))


async def test_migrate_to_a_disabled_host_fails_and_the_vm_stays(cluster: Cluster) -> None:
    await cluster.add_host("h1")
    await cluster.add_vm("a")
    await cluster.add_host("h2")
    from virtplane.domain.resources import Host

    def disable(host: Host) -> None:
        host.spec.enabled = False

    cluster.store.mutate(Host, "h2", disable)
    await cluster.wait_state("h2", "Disabled")
    op = await wait_op(cluster.plane, migrate_op(cluster, "a", OperationType.MIGRATE, "h2"))
    assert op.status.phase is OperationPhase.FAILED and "disabled" in op.status.message
    assert cluster.settled("a", "h1")


async def test_stop_supersedes_migrate_and_the_migration_is_aborted(cluster: Cluster) -> None:
    await cluster.add_host("h1")
    await cluster.add_vm("a", policy=RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY)
    await cluster.add_host("h2")
    cluster.plane.settings.set("migration.bandwidth_mib_s", 20)  # seconds: it is still running at the stop
    migrate = migrate_op(cluster, "a", OperationType.MIGRATE)
    await eventually(lambda: read_migration(cluster.vm("a").metadata.annotations) is not None)
    stop = operate(cluster.plane, "a", OperationType.STOP)
    assert (await wait_op(cluster.plane, stop)).status.phase is OperationPhase.COMPLETED
    assert cluster.store.get(VirtualMachineOperation, migrate).status.phase is OperationPhase.SUPERSEDED
    current = cluster.vm("a")
    assert current.status.host == "h1" and read_migration(current.metadata.annotations) is None
    assert "MigrationAborting" in cluster.events("VirtualMachine", "a")
    assert cluster.runs_on("a") == []


async def test_after_a_restart_the_truth_comes_from_the_drivers(cluster: Cluster) -> None:
    """A crash after the intent was written: one VM made it to the target, one never left."""
    await cluster.add_host("h1")
    await cluster.add_vm("moved")
    await cluster.add_vm("stayed")
    await cluster.add_host("h2")
    plane, sim, store = cluster.plane, cluster.sim, cluster.store
    await plane.stop()
    for vm in ("moved", "stayed"):
        intent = MigrationIntent("h1", "h2", 1, "operation/gone", plane.ctx.now())

        def mark(current: VirtualMachine, intent: MigrationIntent = intent) -> None:
            current.metadata.annotations = write_migration(current.metadata.annotations, intent)

        store.mutate(VirtualMachine, vm, mark)
    h1 = sim.driver("sim://h1")
    await h1.connect()
    await h1.migrate(MigrationRequest(domain=cluster.domain("moved"), target_uri="sim://h2"))
    await eventually(lambda: sim.snapshot_state().active_hosts(cluster.domain("moved")) == ["h2"])
    job = await h1.migration_job(cluster.domain("moved"))
    assert job is not None and job.phase is MigrationPhase.COMPLETED

    restarted: ControlPlane
    restarted = ControlPlane(
        store,
        sim=sim,
        driver_factory=sim_factory(sim, lambda: restarted.cache.hosts()),
        options=ControlPlaneOptions(workers=4),
    )
    cluster.plane = restarted
    await restarted.start()
    try:
        await eventually(lambda: cluster.settled("moved", "h2"))
        await eventually(lambda: cluster.settled("stayed", "h1"))
        assert "MigrationFailed" in cluster.events("VirtualMachine", "stayed")
        assert "Migrated" in cluster.events("VirtualMachine", "moved")
    finally:
        await restarted.stop()
        cluster.plane = plane
        await plane.start()
