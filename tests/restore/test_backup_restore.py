"""Restore from a backup into the same VM (issue 36), on the simulator: the restore of
DESIGN.md §4 with a backup as its source, so the VM comes back in the power state it had before,
for every run policy; any point of a chain (full or incremental) brings back what that backup
saw; one disk alone leaves the VM's spec as it is; a dry run says what would happen and changes
nothing. The backup jobs run on a fake clock the test moves: no sleeps."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import pytest

from tests.conftest import eventually, make_plane
from tests.controllers.helpers import add_host, vm, wait_op, wait_settled
from tests.drivers.test_sim_persistence import Clock
from tests.restore.test_restore import bring_to, settled_after_restore
from virtplane.bootstrap import ControlPlane
from virtplane.domain.resources import (
    BackupPhase,
    BackupTarget,
    BackupTargetSpec,
    Disk,
    Metadata,
    OperationPhase,
    OperationType,
    PoolKind,
    RestoreMode,
    RestoreSpec,
    RunPolicy,
    StoragePool,
    StoragePoolSpec,
    VirtualMachine,
    VirtualMachineBackup,
    VirtualMachineBackupSpec,
    VirtualMachineOperation,
    VirtualMachineOperationSpec,
    VirtualMachineSpec,
    Volume,
    VolumePhase,
    VolumeSpec,
)
from virtplane.drivers.sim import SimCloud
from virtplane.store.store import Store

CLOCK = Clock()
_ids = itertools.count(1)
ON, OFF, MANUAL, AOUSM = (
    RunPolicy.ALWAYS_ON,
    RunPolicy.ALWAYS_OFF,
    RunPolicy.MANUAL,
    RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY,
)


@pytest.fixture
async def plane(store: Store) -> AsyncIterator[ControlPlane]:
    sim = SimCloud(boot_seconds=0.02, shutdown_seconds=0.02, clock=CLOCK, backup_mib_s=100)
    p = make_plane(store, sim=sim)
    p.settings.set("vm.start.backoff_base_s", 0.02)
    p.settings.set("vm.start.backoff_cap_s", 0.2)
    await p.start()
    yield p
    await p.stop()


async def world(plane: ControlPlane, policy: RunPolicy, *disks: str) -> VirtualMachine:
    add_host(plane, "h1")
    plane.store.create(
        StoragePool(
            metadata=Metadata(name="shared"),
            spec=StoragePoolSpec(kind=PoolKind.SHARED, cluster="default", capacity_gib=100),
        )
    )
    plane.store.create(
        BackupTarget(metadata=Metadata(name="t"), spec=BackupTargetSpec(path="/srv/b", capacity_gib=100))
    )
    for disk in disks or ("a-root",):
        plane.store.create(Volume(metadata=Metadata(name=disk), spec=VolumeSpec(pool="shared", size_gib=1)))
        await eventually(lambda d=disk: plane.store.get(Volume, d).status.phase is VolumePhase.READY)  # type: ignore[misc]
    plane.store.create(
        VirtualMachine(
            metadata=Metadata(name="a", labels={"v": "1"}),
            spec=VirtualMachineSpec(
                run_policy=policy,
                disks=[Disk(volume=d, boot_order=i + 1) for i, d in enumerate(disks or ("a-root",))],
                termination_grace_period_s=2,
            ),
        )
    )
    await wait_settled(plane, "a", "Running" if policy in (ON, AOUSM) else "Stopped")
    if policy is MANUAL:  # backed up live: incrementals need a running VM
        await bring_to(plane, "a", "Running")
    return vm(plane, "a")


async def take(plane: ControlPlane, name: str) -> VirtualMachineBackup:
    plane.store.create(
        VirtualMachineBackup(metadata=Metadata(name=name), spec=VirtualMachineBackupSpec(vm="a", target="t"))
    )

    def ended() -> VirtualMachineBackup | None:
        CLOCK.now += 60  # a 1 GiB disk at 100 MiB/s: 10.24 s
        found = plane.store.get(VirtualMachineBackup, name)
        return found if found.status.phase in (BackupPhase.SUCCEEDED, BackupPhase.FAILED) else None

    done = await eventually(ended)
    assert done.status.phase is BackupPhase.SUCCEEDED, done.status.message
    return done


def restore(
    plane: ControlPlane, backup: str, mode: RestoreMode = RestoreMode.STRICT, disks: tuple[str, ...] = ()
) -> str:
    name = f"a-restore-{next(_ids)}"
    plane.store.create(
        VirtualMachineOperation(
            metadata=Metadata(name=name),
            spec=VirtualMachineOperationSpec(
                vm="a",
                type=OperationType.RESTORE,
                restore=RestoreSpec(backup=backup, mode=mode, disks=list(disks)),
            ),
        )
    )
    return name


def path(plane: ControlPlane, volume: str = "a-root") -> str:
    return plane.store.get(Volume, volume).status.path


def set_policy(plane: ControlPlane, policy: RunPolicy) -> None:
    plane.store.mutate(VirtualMachine, "a", lambda v: setattr(v.spec, "run_policy", policy))


# (run policy, power state before the restore): the restore keeps it
CASES = [
    (ON, "Running"),
    (OFF, "Stopped"),
    (MANUAL, "Running"),
    (MANUAL, "Stopped"),
    (AOUSM, "Running"),
    (AOUSM, "Stopped"),
]


@pytest.mark.parametrize(("policy", "before"), CASES)
async def test_a_restore_from_an_incremental_backup_keeps_the_power_state(
    plane: ControlPlane, policy: RunPolicy, before: str
) -> None:
    assert plane.sim is not None
    await world(plane, MANUAL)
    plane.sim.write_volume(path(plane), "day one")
    await take(plane, "b1")
    plane.sim.write_volume(path(plane), "day two")
    incremental = await take(plane, "b2")
    assert incremental.status.base == "b1", "a point inside a chain"
    plane.sim.write_volume(path(plane), "corrupted")
    await bring_to(plane, "a", before)
    set_policy(plane, policy)
    await wait_settled(plane, "a", before)
    # the backup captured Manual: the VM gets it back, the power state is the one before
    op = await wait_op(plane, restore(plane, "b2"), timeout=15)
    assert op.status.phase is OperationPhase.COMPLETED, op.status.message
    current = await settled_after_restore(plane, "a")
    assert current.status.phase.value == before, "the power state holds after the restore"
    assert plane.sim.read_volume(path(plane)) == "day two"


async def test_each_point_of_a_chain_brings_back_what_it_saw(plane: ControlPlane) -> None:
    assert plane.sim is not None
    await world(plane, AOUSM)
    plane.sim.write_volume(path(plane), "day one")
    await take(plane, "b1")
    plane.sim.write_volume(path(plane), "day two")
    await take(plane, "b2")
    for point, content in (("b1", "day one"), ("b2", "day two"), ("b1", "day one")):
        plane.sim.write_volume(path(plane), "corrupted")
        op = await wait_op(plane, restore(plane, point), timeout=15)
        assert op.status.phase is OperationPhase.COMPLETED, op.status.message
        assert op.status.message.startswith(f"VM restored from backup {point}; start requested"), (
            op.status.message
        )
        assert plane.sim.read_volume(path(plane)) == content
        await settled_after_restore(plane, "a")


async def test_one_disk_alone_comes_back_and_the_vm_keeps_its_spec(plane: ControlPlane) -> None:
    assert plane.sim is not None
    await world(plane, MANUAL, "a-root", "a-data")
    plane.sim.write_volume(path(plane), "root one")
    plane.sim.write_volume(path(plane, "a-data"), "data one")
    await take(plane, "b1")
    plane.sim.write_volume(path(plane), "root two")
    plane.sim.write_volume(path(plane, "a-data"), "data two")
    plane.store.mutate(VirtualMachine, "a", lambda v: setattr(v.metadata, "labels", {"v": "2"}))
    op = await wait_op(plane, restore(plane, "b1", disks=("a-data",)), timeout=15)
    assert op.status.phase is OperationPhase.COMPLETED, op.status.message
    current = await settled_after_restore(plane, "a")
    assert current.status.phase.value == "Running"
    assert plane.sim.read_volume(path(plane, "a-data")) == "data one"
    assert plane.sim.read_volume(path(plane)) == "root two", "the other disk is left alone"
    assert current.metadata.labels == {"v": "2"}, "the VM is not overwritten from the backup"


async def test_a_dry_run_says_what_would_happen_and_changes_nothing(plane: ControlPlane) -> None:
    assert plane.sim is not None
    await world(plane, MANUAL)
    plane.sim.write_volume(path(plane), "day one")
    await take(plane, "b1")
    await take(plane, "b2")
    plane.sim.write_volume(path(plane), "now")
    op = await wait_op(plane, restore(plane, "b2", RestoreMode.DRY_RUN), timeout=15)
    assert (op.status.phase, op.status.reason) == (OperationPhase.COMPLETED, "DryRun")
    assert op.status.progress["volume/a-root"] == "write from backup b2 (reads b1 <- b2) over the disk"
    assert op.status.progress["power_state"] == "Running (kept as before the restore)"
    assert op.status.progress["stopped_first"] == "VM a is stopped first, then started again"
    assert op.status.progress["vm/a"] == "spec unchanged"
    assert plane.sim.read_volume(path(plane)) == "now"
    assert vm(plane, "a").status.phase.value == "Running"
