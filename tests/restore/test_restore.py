"""Restore keeps the VM's power state (DESIGN.md §4), on the simulated driver."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.conftest import eventually, libvirt_or_skip
from tests.controllers.helpers import add_host, operate, phase_history, vm, wait_op, wait_settled
from tests.reconciles import reconciled
from virtplane.bootstrap import ControlPlane
from virtplane.domain.conditions import VMCondition, get_condition
from virtplane.domain.intents import RESTORE_POWER_STATE, read_intents
from virtplane.domain.resources import (
    Disk,
    ExitReason,
    Host,
    Metadata,
    OperationPhase,
    OperationType,
    PoolKind,
    RestoreMode,
    RestoreSpec,
    RunPolicy,
    SnapshotPhase,
    StoragePool,
    StoragePoolSpec,
    VirtualMachine,
    VirtualMachineOperation,
    VirtualMachineOperationSpec,
    VirtualMachineSnapshot,
    VirtualMachineSnapshotSpec,
    VirtualMachineSpec,
    Volume,
    VolumePhase,
    VolumeSpec,
)
from virtplane.drivers.base import domain_name

ON, OFF, MANUAL, AOUSM = (
    RunPolicy.ALWAYS_ON,
    RunPolicy.ALWAYS_OFF,
    RunPolicy.MANUAL,
    RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY,
)
_ids = itertools.count(1)


@pytest.fixture(autouse=True)
def fast_backoff(plane: ControlPlane) -> None:
    plane.settings.set("vm.start.backoff_base_s", 0.02)
    plane.settings.set("vm.start.backoff_cap_s", 0.2)


async def make_vm(
    plane: ControlPlane,
    policy: RunPolicy,
    name: str = "a",
    grace: int = 2,
    uri: str | None = None,
    host_enabled: bool = True,
) -> VirtualMachine:
    add_host(plane, uri=uri)
    if not host_enabled:  # the VM waits for a host (Pending)
        plane.store.mutate(Host, "h1", lambda h: setattr(h.spec, "enabled", False))
    plane.store.create(
        StoragePool(
            metadata=Metadata(name="shared"),
            spec=StoragePoolSpec(kind=PoolKind.SHARED, cluster="default", capacity_gib=100),
        )
    )
    plane.store.create(
        Volume(metadata=Metadata(name=f"{name}-root"), spec=VolumeSpec(pool="shared", size_gib=1))
    )
    await eventually(lambda: plane.store.get(Volume, f"{name}-root").status.phase is VolumePhase.READY)
    return plane.store.create(
        VirtualMachine(
            metadata=Metadata(name=name, labels={"v": "1"}),
            spec=VirtualMachineSpec(
                run_policy=policy,
                disks=[Disk(volume=f"{name}-root", boot_order=1)],
                termination_grace_period_s=grace,
            ),
        )
    )


async def bring_to(plane: ControlPlane, name: str, state: str) -> None:
    """Running or Stopped, through operations where the policy needs them."""

    def settled() -> str | None:
        current = vm(plane, name)
        intents = read_intents(current.metadata.annotations)
        if intents.start or intents.stop or intents.restart:
            return None
        phase = current.status.phase.value
        return phase if phase in ("Running", "Stopped") else None

    current = await eventually(settled)
    if current == state:
        return
    kind = OperationType.START if state == "Running" else OperationType.STOP
    op = await wait_op(plane, operate(plane, name, kind))
    assert op.status.phase is OperationPhase.COMPLETED, op.status.message
    await wait_settled(plane, name, state)


async def snapshot(plane: ControlPlane, vm_name: str, **spec: object) -> VirtualMachineSnapshot:
    name = f"{vm_name}-snap-{next(_ids)}"
    plane.store.create(
        VirtualMachineSnapshot(
            metadata=Metadata(name=name), spec=VirtualMachineSnapshotSpec(vm=vm_name, **spec)
        )
    )  # type: ignore[arg-type]
    await eventually(
        lambda: (
            plane.store.get(VirtualMachineSnapshot, name).status.phase
            in (SnapshotPhase.READY, SnapshotPhase.FAILED)
        )
    )
    snap = plane.store.get(VirtualMachineSnapshot, name)
    assert snap.status.phase is SnapshotPhase.READY, snap.status.message
    return snap


def restore(plane: ControlPlane, vm_name: str, snap: str, mode: RestoreMode = RestoreMode.STRICT) -> str:
    name = f"{vm_name}-restore-{next(_ids)}"
    plane.store.create(
        VirtualMachineOperation(
            metadata=Metadata(name=name),
            spec=VirtualMachineOperationSpec(
                vm=vm_name, type=OperationType.RESTORE, restore=RestoreSpec(snapshot=snap, mode=mode)
            ),
        )
    )
    return name


async def settled_after_restore(plane: ControlPlane, name: str, timeout: float = 15) -> VirtualMachine:
    """The VM once the restore's intent is consumed and no request is left, as the controller
    still sees it on a reconcile started after that: a power state that only lasts is returned."""

    def settled() -> bool:
        current = vm(plane, name)
        intents = read_intents(current.metadata.annotations)
        return (
            current.status.phase.value in ("Running", "Stopped")
            and intents.restore_power_state is None
            and intents.held_by is None
            and not (intents.start or intents.stop or intents.restart)
        )

    await eventually(settled, timeout=timeout)
    await reconciled(plane, name)
    return vm(plane, name)


def set_policy(plane: ControlPlane, name: str, policy: RunPolicy) -> None:
    plane.store.mutate(VirtualMachine, name, lambda v: setattr(v.spec, "run_policy", policy))


# (policy in the snapshot, power state before the restore, expected after)
MATRIX = [
    (ON, "Running", "Running"),
    (ON, "Stopped", "Running"),
    (OFF, "Running", "Stopped"),
    (OFF, "Stopped", "Stopped"),
    (MANUAL, "Running", "Running"),
    (MANUAL, "Stopped", "Stopped"),
    (AOUSM, "Running", "Running"),
    (AOUSM, "Stopped", "Stopped"),
]


@pytest.fixture(params=["sim", "libvirt-test"])
def host_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    """The restore matrix runs on the simulator and on libvirt's own test hypervisor."""
    if request.param == "sim":
        return None
    libvirt_or_skip()
    from tests.drivers.conftest import write_node_xml

    return write_node_xml(tmp_path / "h1.xml", cpus=16, memory_mib=32768)


@pytest.mark.parametrize(("policy", "before", "expected"), MATRIX)
async def test_restore_keeps_the_power_state(
    plane: ControlPlane, host_uri: str | None, policy: RunPolicy, before: str, expected: str
) -> None:
    # AlwaysOn cannot be stopped and AlwaysOff cannot run: reach those states under Manual,
    # with the snapshot holding the policy under test.
    reachable = not ((policy is ON and before == "Stopped") or (policy is OFF and before == "Running"))
    await make_vm(plane, policy if reachable else MANUAL, uri=host_uri)
    if not reachable:
        await bring_to(plane, "a", "Running" if policy is ON else "Stopped")
        set_policy(plane, "a", policy)
        await wait_settled(plane, "a", "Running" if policy is ON else "Stopped")
    snap = await snapshot(plane, "a")
    if not reachable:
        set_policy(plane, "a", MANUAL)
    await bring_to(plane, "a", before)
    op = await wait_op(plane, restore(plane, "a", snap.metadata.name), timeout=15)
    assert op.status.phase is OperationPhase.COMPLETED, op.status.message
    current = await settled_after_restore(plane, "a")
    assert current.spec.run_policy is policy
    assert current.status.phase.value == expected, "the power state holds after the restore"
    assert get_condition(current.status.conditions, VMCondition.MAINTENANCE) is None


@pytest.mark.parametrize("failures", [1, 2, 3])
@pytest.mark.parametrize("policy", [AOUSM, MANUAL])
async def test_failing_first_boots_after_restore_still_end_running(
    plane: ControlPlane, policy: RunPolicy, failures: int
) -> None:
    """AOUSM would start again by policy anyway; under Manual only the start request the
    restore's intent became brings the VM back, so it must outlive every failed boot."""
    await make_vm(plane, policy)
    await bring_to(plane, "a", "Running")
    snap = await snapshot(plane, "a")
    plane.sim.inject("h1", "fail-start", domain_name(vm(plane, "a").metadata.uid), failures)
    op = await wait_op(plane, restore(plane, "a", snap.metadata.name), timeout=15)
    assert op.status.phase is OperationPhase.COMPLETED
    current = await settled_after_restore(plane, "a", timeout=20)
    assert current.status.phase.value == "Running"
    reasons = [e.reason for e in plane.store.list_events(kind="VirtualMachine", name="a", limit=2000)]
    assert reasons.count("StartRetry") >= failures


async def test_a_stale_intent_in_the_snapshot_does_not_leak(plane: ControlPlane) -> None:
    await make_vm(plane, AOUSM)
    await wait_settled(plane, "a", "Running")
    snap = await snapshot(plane, "a")
    assert snap.status.captured is not None
    snap.status.captured.annotations[RESTORE_POWER_STATE] = "Stopped"
    snap.status.captured.annotations["team"] = "blue"
    plane.store.update(snap)
    op = await wait_op(plane, restore(plane, "a", snap.metadata.name), timeout=15)
    assert op.status.phase is OperationPhase.COMPLETED
    current = await wait_settled(plane, "a", "Running", timeout=15)
    assert current.metadata.annotations.get("team") == "blue", "user annotations come back"
    assert RESTORE_POWER_STATE not in current.metadata.annotations


@pytest.mark.parametrize(
    ("policy", "before"), [(AOUSM, "Running"), (MANUAL, "Running"), (AOUSM, "Stopped"), (MANUAL, "Stopped")]
)
async def test_a_strict_restore_that_fails_part_way_keeps_the_power_state(
    plane: ControlPlane, policy: RunPolicy, before: str
) -> None:
    """The revert fails after EnterMaintenance stopped the VM: only the recorded intent can tell
    what to bring back. Manual would stay stopped by policy, and AOUSM, stopped by the system,
    would start by policy: both end where they were only if the intent outlives the failure."""
    await make_vm(plane, policy)
    await bring_to(plane, "a", before)
    snap = await snapshot(plane, "a")
    driver = plane.sim.driver("sim://h1")
    await driver.delete_volume_snapshot(snap.status.disk_snapshots[0].handle)
    op = await wait_op(plane, restore(plane, "a", snap.metadata.name), timeout=15)
    assert op.status.phase is OperationPhase.FAILED
    assert op.status.reason == "RevertFailed" and "a-root" in op.status.message
    steps = [e.reason for e in plane.store.list_events(kind="VirtualMachineOperation", name=op.metadata.name)]
    assert "EnterMaintenance" in steps and "ProcessRestore" in steps, "it failed part-way, not up front"
    current = await settled_after_restore(plane, "a")
    assert current.status.phase.value == before, "the power state from before the restore"
    if before == "Stopped":
        assert current.status.last_exit is ExitReason.STOPPED_BY_USER, "kept stopped on purpose"
    assert get_condition(current.status.conditions, VMCondition.MAINTENANCE) is None


async def test_strict_restore_with_a_missing_volume_fails_before_touching_the_vm(plane: ControlPlane) -> None:
    await make_vm(plane, MANUAL)
    await bring_to(plane, "a", "Running")
    snap = await snapshot(plane, "a")
    assert snap.status.disk_snapshots
    snap.status.disk_snapshots[0].volume = "gone"
    plane.store.update(snap)
    before = vm(plane, "a")
    op = await wait_op(plane, restore(plane, "a", snap.metadata.name))
    assert op.status.phase is OperationPhase.FAILED and op.status.reason == "DiskSnapshotMissing"
    await reconciled(plane, "a")
    after = vm(plane, "a")
    assert after.status.phase.value == "Running"
    assert after.status.last_exit == before.status.last_exit


async def test_restore_brings_back_disk_content(plane: ControlPlane) -> None:
    await make_vm(plane, AOUSM)
    await wait_settled(plane, "a", "Running")
    path = plane.store.get(Volume, "a-root").status.path
    plane.sim.write_volume(path, "marker-1")
    snap = await snapshot(plane, "a")
    plane.sim.write_volume(path, "marker-2")
    op = await wait_op(plane, restore(plane, "a", snap.metadata.name), timeout=15)
    assert op.status.phase is OperationPhase.COMPLETED
    assert plane.sim.read_volume(path) == "marker-1"
    await wait_settled(plane, "a", "Running")


async def test_dry_run_reports_and_changes_nothing(plane: ControlPlane) -> None:
    await make_vm(plane, AOUSM)
    await wait_settled(plane, "a", "Running")
    path = plane.store.get(Volume, "a-root").status.path
    plane.sim.write_volume(path, "old")
    snap = await snapshot(plane, "a")
    plane.sim.write_volume(path, "new")
    plane.store.mutate(VirtualMachine, "a", lambda v: setattr(v.spec, "cpu", 2))
    await wait_settled(plane, "a", "Running")
    before = vm(plane, "a")
    op = await wait_op(plane, restore(plane, "a", snap.metadata.name, RestoreMode.DRY_RUN))
    assert op.status.phase is OperationPhase.COMPLETED and op.status.reason == "DryRun"
    assert "cpu: 2 -> 1" in op.status.progress["vm/a"]
    assert "revert" in op.status.progress["volume/a-root"]
    after = vm(plane, "a")
    assert after.spec == before.spec and after.metadata.annotations == before.metadata.annotations
    assert after.status.phase.value == "Running"
    assert plane.sim.read_volume(path) == "new"


async def test_the_vm_shows_maintenance_and_refuses_other_operations_meanwhile(plane: ControlPlane) -> None:
    await make_vm(plane, MANUAL, grace=2)
    await bring_to(plane, "a", "Running")
    snap = await snapshot(plane, "a")
    await plane.sim.driver("sim://h1").pause(
        domain_name(vm(plane, "a").metadata.uid)
    )  # ignores ACPI: the stop waits
    op_name = restore(plane, "a", snap.metadata.name)
    await eventually(
        lambda: get_condition(vm(plane, "a").status.conditions, VMCondition.MAINTENANCE) is not None
    )
    refused = await wait_op(plane, operate(plane, "a", OperationType.STOP, force=True))
    assert refused.status.phase is OperationPhase.FAILED
    assert refused.status.reason in ("OperationInProgress", "VMInMaintenance")
    op = await wait_op(plane, op_name, timeout=15)
    assert op.status.phase is OperationPhase.COMPLETED
    await wait_settled(plane, "a", "Running")


async def test_a_vm_restored_stopped_reports_stopped_not_pending(
    plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    await make_vm(plane, AOUSM)
    await wait_settled(plane, "a", "Running")
    snap = await snapshot(plane, "a")
    await bring_to(plane, "a", "Stopped")
    written = phase_history(monkeypatch, plane, "a")
    name = restore(plane, "a", snap.metadata.name)
    await eventually(  # until it ends, or the first phase that is not Stopped is written
        lambda: (
            set(written) - {"Stopped"} or plane.store.get(VirtualMachineOperation, name).status.phase.finished
        ),
        timeout=15,
    )
    assert set(written) <= {"Stopped"}, f"every phase written through the restore: {written}"
    assert plane.store.get(VirtualMachineOperation, name).status.phase is OperationPhase.COMPLETED
    await settled_after_restore(plane, "a")
    assert written and set(written) == {"Stopped"}, f"and after it: {written}"


async def test_deleting_a_snapshot_deletes_its_disk_snapshots(plane: ControlPlane) -> None:
    from virtplane.controllers.storage import pool_ref
    from virtplane.drivers.errors import NotFound as DriverNotFound

    await make_vm(plane, AOUSM)
    await wait_settled(plane, "a", "Running")
    snap = await snapshot(plane, "a")
    handle = snap.status.disk_snapshots[0].handle
    plane.store.delete(VirtualMachineSnapshot, snap.metadata.name)
    await eventually(lambda: plane.store.find(VirtualMachineSnapshot, snap.metadata.name) is None)
    pool = plane.store.get(StoragePool, "shared")
    with pytest.raises(DriverNotFound):
        await plane.sim.driver("sim://h1").revert_volume(pool_ref(pool), "a-root", handle)


async def test_a_vm_pending_when_the_restore_begins_comes_back_running(plane: ControlPlane) -> None:
    """DESIGN.md §4: Pending counts as Running for the power state a restore keeps. The VM waits
    for a host (its only one is disabled) from its creation to the end of the restore; once the
    host takes VMs again it runs, though after a restore recorded Stopped it would stay off."""
    await make_vm(plane, AOUSM, host_enabled=False)
    await eventually(lambda: vm(plane, "a").status.phase.value == "Pending")
    snap = await snapshot(plane, "a")
    dry = await wait_op(plane, restore(plane, "a", snap.metadata.name, RestoreMode.DRY_RUN))
    assert dry.status.progress["power_state"] == "Running (kept as before the restore)"
    op = await wait_op(plane, restore(plane, "a", snap.metadata.name), timeout=15)
    assert op.status.phase is OperationPhase.COMPLETED, op.status.message
    assert read_intents(vm(plane, "a").metadata.annotations).start, "the start request it became"
    plane.store.mutate(Host, "h1", lambda h: setattr(h.spec, "enabled", True))
    current = await settled_after_restore(plane, "a")
    assert current.status.phase.value == "Running"


def test_the_restore_handler_runs_the_table_as_its_chain() -> None:
    """The table is the code: the handler's chain is the table's steps, in its order."""
    from typing import cast

    from virtplane.controllers.context import ControllerContext
    from virtplane.controllers.restore import RestoreHandler
    from virtplane.domain.restore import STEPS, RestoreStep

    chain = RestoreHandler(cast(ControllerContext, None)).chain()
    assert [step.name for step in chain] == [
        row.step.value for row in STEPS if row.step is not RestoreStep.NEW
    ]
