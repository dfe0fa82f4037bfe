"""The backup policy controller on the simulator (issue 36), on two fake clocks the test moves:
the controllers' (``ctx.now``: when windows fire) and the simulator's (how far backup jobs
got). A due window backs up the VMs the selector picks within the limits; a window the control
plane slept through, or one the limits held back past the next, is reported as missed; retention
removes the policy's old backups (files and records) but never a base a kept one reads through."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from croniter import croniter

from tests.conftest import WallClock, eventually, make_plane
from tests.controllers.helpers import add_host, wait_settled
from tests.drivers.test_sim_persistence import Clock
from tests.test_metrics import scrape, value
from virtplane.bootstrap import ControlPlane
from virtplane.domain.backups import BackupMode
from virtplane.domain.resources import (
    POLICY_LABEL,
    BackupPhase,
    BackupPolicy,
    BackupPolicySpec,
    BackupRetention,
    BackupTarget,
    BackupTargetSpec,
    Disk,
    Event,
    Metadata,
    PoolKind,
    RunPolicy,
    StoragePool,
    StoragePoolSpec,
    VerificationResult,
    VirtualMachine,
    VirtualMachineBackup,
    VirtualMachineSpec,
    Volume,
    VolumePhase,
    VolumeSpec,
)
from virtplane.drivers.backups import BackupRequest, DiskBackup
from virtplane.drivers.base import PoolRef, domain_name
from virtplane.drivers.sim import SimCloud
from virtplane.store.store import Store

JOBS = Clock()
NIGHTLY = "0 2 * * *"


@pytest.fixture
def clock() -> WallClock:
    # the store stamps created_at with the real time: the controllers' clock starts there
    return WallClock(datetime.now(UTC))


@pytest.fixture
async def plane(store: Store, clock: WallClock) -> AsyncIterator[ControlPlane]:
    sim = SimCloud(boot_seconds=0.02, shutdown_seconds=0.02, clock=JOBS, backup_mib_s=100)
    p = make_plane(store, sim=sim)
    p.ctx.now = clock
    await p.start()
    yield p
    await p.stop()


async def world(plane: ControlPlane, vms: dict[str, RunPolicy]) -> None:
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
    for name, policy in vms.items():
        plane.store.create(
            Volume(metadata=Metadata(name=f"{name}-root"), spec=VolumeSpec(pool="shared", size_gib=1))
        )
        await eventually(
            lambda n=name: plane.store.get(Volume, f"{n}-root").status.phase is VolumePhase.READY
        )  # type: ignore[misc]
        plane.store.create(
            VirtualMachine(
                metadata=Metadata(name=name, labels={"backup": "nightly"}),
                spec=VirtualMachineSpec(run_policy=policy, disks=[Disk(volume=f"{name}-root", boot_order=1)]),
            )
        )
    for name, policy in vms.items():
        await wait_settled(plane, name, "Running" if policy is RunPolicy.ALWAYS_ON else "Stopped")


def add_policy(plane: ControlPlane, **spec: object) -> BackupPolicy:
    fields: dict[str, object] = {"target": "t", "schedule": NIGHTLY, "selector": "backup=nightly", **spec}
    return plane.store.create(
        BackupPolicy(metadata=Metadata(name="nightly"), spec=BackupPolicySpec(**fields))
    )  # type: ignore[arg-type]


def policy(plane: ControlPlane) -> BackupPolicy:
    return plane.store.get(BackupPolicy, "nightly")


def backups(plane: ControlPlane) -> dict[str, VirtualMachineBackup]:
    return {b.metadata.name: b for b in plane.store.list_objects(VirtualMachineBackup)}


def next_window(clock: WallClock) -> datetime:
    fire: datetime = croniter(NIGHTLY, clock.now).get_next(datetime)
    return fire


def to(plane: ControlPlane, clock: WallClock, moment: datetime) -> None:
    """Move the controllers' clock and have the policy look (its own timer sleeps in real time)."""
    clock.now = moment
    plane.enqueue(BackupPolicy.KIND, "nightly")


def events(plane: ControlPlane, reason: str) -> list[Event]:
    return [e for e in plane.store.list_events() if e.reason == reason]


async def finished(plane: ControlPlane, names: set[str]) -> dict[str, VirtualMachineBackup]:
    def begun(b: VirtualMachineBackup | None) -> bool:
        return b is not None and (b.status.begun or b.status.phase is BackupPhase.SUCCEEDED)

    await eventually(lambda: all(begun(backups(plane).get(n)) for n in names))
    JOBS.now += 60  # a 1 GiB disk at 100 MiB/s: 10.24 s
    return await eventually(
        lambda: (
            found
            if names <= set(found := backups(plane))
            and all(found[n].status.phase is BackupPhase.SUCCEEDED for n in names)
            else None
        )
    )


async def test_a_due_window_backs_up_the_selected_vms_one_per_host_at_a_time(
    plane: ControlPlane, clock: WallClock
) -> None:
    await world(plane, {"a": RunPolicy.ALWAYS_ON, "b": RunPolicy.ALWAYS_ON, "c": RunPolicy.ALWAYS_ON})
    plane.store.create(
        VirtualMachine(metadata=Metadata(name="other"), spec=VirtualMachineSpec(run_policy=RunPolicy.MANUAL))
    )
    add_policy(plane, max_per_host=1)
    await eventually(lambda: policy(plane).status.next_run is not None)
    assert backups(plane) == {}, "nothing is due before the first window"
    window = next_window(clock)
    assert policy(plane).status.next_run == window
    to(plane, clock, window + timedelta(minutes=1))
    stamp = window.strftime("%Y%m%d-%H%M")
    await eventually(lambda: policy(plane).status.waiting == ["b", "c"])
    assert set(backups(plane)) == {f"a-{stamp}"}, "one at a time on host h1"
    counted = policy(plane).status
    assert (counted.running, counted.succeeded) == (1, 0), "a backup is counted good only once it succeeded"
    assert backups(plane)[f"a-{stamp}"].metadata.labels == {POLICY_LABEL: "nightly"}
    await finished(plane, {f"a-{stamp}"})
    await eventually(lambda: f"b-{stamp}" in backups(plane))
    assert f"c-{stamp}" not in backups(plane), "c waits for b"
    await finished(plane, {f"b-{stamp}"})
    done = await finished(plane, {f"c-{stamp}"})
    assert "other" not in {b.spec.vm for b in done.values()}, "the selector picks the VMs"
    status = (await eventually(lambda: policy(plane) if policy(plane).status.succeeded == 3 else None)).status
    assert (status.last_run, status.window, status.waiting, status.missed_windows) == (
        window + timedelta(minutes=1),
        window,
        [],
        0,
    )
    assert status.next_run == window + timedelta(days=1)
    assert [e.message for e in events(plane, "WindowStarted")] == [
        f"the window at {window:%Y-%m-%d %H:%M} UTC: 3 VM(s) to back up"
    ]
    samples = await scrape(plane)  # what the alert "no successful backup in 26 h" reads
    covered_since = max(
        policy(plane).metadata.created_at, plane.store.get(VirtualMachine, "c").metadata.created_at
    )  # type: ignore[type-var]
    assert value(samples, "virtplane_backup_covered_since_timestamp_seconds", vm="c", policy="nightly") == (
        covered_since.timestamp()
    )
    assert (
        value(samples, "virtplane_backup_covered_since_timestamp_seconds", vm="other", policy="nightly")
        is None
    )
    ended = done[f"c-{stamp}"].status.finished_at
    assert ended is not None
    assert value(samples, "virtplane_backup_last_success_timestamp_seconds", vm="c") == ended.timestamp()


async def test_a_window_slept_through_is_missed_and_one_the_limits_held_past_the_next_too(
    plane: ControlPlane, clock: WallClock
) -> None:
    await world(plane, {"a": RunPolicy.ALWAYS_ON, "b": RunPolicy.ALWAYS_ON})
    add_policy(plane, max_per_host=1, start_window_minutes=30)
    window = next_window(clock)
    to(plane, clock, window + timedelta(minutes=31))  # the control plane was down through 02:00-02:30
    await eventually(lambda: policy(plane).status.missed_windows == 1)
    status = policy(plane).status
    assert status.last_missed == window and backups(plane) == {}
    assert "was not started within 30 min" in status.last_missed_reason
    [missed] = events(plane, "MissedWindow")
    assert missed.type.value == "Warning"

    second = window + timedelta(days=1)
    to(plane, clock, second)  # a is backed up; its job does not end, b waits
    await eventually(lambda: policy(plane).status.waiting == ["b"])
    to(plane, clock, second + timedelta(days=1))  # the next window comes while b still waits
    await eventually(lambda: policy(plane).status.missed_windows == 2)
    status = policy(plane).status
    assert status.last_missed == second
    assert status.last_missed_reason.startswith(
        "1 VM(s) of the window at "
    ) and status.last_missed_reason.endswith(": b")
    assert status.window == second + timedelta(days=1)


async def test_retention_removes_old_full_backups_but_keeps_an_incremental_chain(
    plane: ControlPlane, clock: WallClock
) -> None:
    assert plane.sim is not None
    await world(plane, {"a": RunPolicy.ALWAYS_ON, "s": RunPolicy.MANUAL})
    add_policy(plane, retention=BackupRetention(keep_last=1))
    window = next_window(clock)
    names: list[tuple[str, str]] = []
    volumes: list[str] = []
    for night in range(3):
        fire = window + timedelta(days=night)
        to(plane, clock, fire)
        stamp = fire.strftime("%Y%m%d-%H%M")
        await eventually(lambda s=stamp: {f"a-{s}", f"s-{s}"} <= set(backups(plane)))  # type: ignore[misc]
        done = await finished(plane, {f"a-{stamp}", f"s-{stamp}"})
        names.append((f"a-{stamp}", f"s-{stamp}"))
        volumes.append(done[f"s-{stamp}"].status.disks[0].backup_volume)
    # the stopped VM's backups are full: keep-last 1 leaves the newest; the running VM's are
    # incrementals on the first: the chain stays whole
    kept = await eventually(lambda: b if len(b := backups(plane)) == 4 else None, timeout=15)
    running_vm = [kept[a] for a, _ in names]
    assert [b.status.mode for b in running_vm] == [
        BackupMode.FULL,
        BackupMode.INCREMENTAL,
        BackupMode.INCREMENTAL,
    ]
    assert names[2][1] in kept and names[0][1] not in kept and names[1][1] not in kept
    for gone in volumes[:2]:  # the files went before the records
        with pytest.raises(Exception, match="no volume"):
            plane.sim.read_volume(f"sim://backups-t/{gone}")
    await eventually(lambda: (policy(plane).status.pruned, policy(plane).status.backups) == (2, 4))
    assert policy(plane).status.succeeded == 4
    assert len(events(plane, "Pruned")) == 2


async def test_a_checkpoint_no_backup_knows_is_dropped_when_a_window_starts(
    plane: ControlPlane, clock: WallClock
) -> None:
    assert plane.sim is not None
    await world(plane, {"a": RunPolicy.ALWAYS_ON})
    a = plane.store.get(VirtualMachine, "a")
    driver = plane.sim.driver("sim://h1")
    target = PoolRef(name="backups-t", path="/srv/b", shared=True, capacity_gib=100)
    path = plane.store.get(Volume, "a-root").status.path
    orphan = "backup-0000-from-a-store-restored-from-an-older-copy"
    await driver.begin_backup(
        BackupRequest(
            domain_name(a.metadata.uid), target, orphan, (DiskBackup(path, "orphan.qcow2", 1024**3),)
        )
    )
    JOBS.now += 60
    assert orphan in await driver.checkpoints(domain_name(a.metadata.uid))
    add_policy(plane)
    window = next_window(clock)
    to(plane, clock, window)
    stamp = window.strftime("%Y%m%d-%H%M")
    [event] = await eventually(lambda: events(plane, "CheckpointOrphaned"))
    assert orphan in event.message
    # gone before the new backup ended (whose success drops the older checkpoints anyway)
    assert orphan not in await driver.checkpoints(domain_name(a.metadata.uid))
    done = await finished(plane, {f"a-{stamp}"})
    checkpoints = await driver.checkpoints(domain_name(a.metadata.uid))
    assert checkpoints == (done[f"a-{stamp}"].status.checkpoint,), "the new one stays"


async def test_the_verify_schedule_verifies_each_vms_newest_good_backup(
    plane: ControlPlane, clock: WallClock
) -> None:
    await world(plane, {"a": RunPolicy.ALWAYS_ON})
    add_policy(plane, verify_schedule="0 12 * * *")
    window = next_window(clock)
    nights = [window, window + timedelta(days=1)]
    for fire in nights:
        to(plane, clock, fire)
        stamp = fire.strftime("%Y%m%d-%H%M")
        await eventually(lambda s=stamp: f"a-{s}" in backups(plane))  # type: ignore[misc]
        await finished(plane, {f"a-{stamp}"})
    noon = nights[1].replace(hour=12)
    to(plane, clock, noon)
    newest = f"a-{nights[1]:%Y%m%d-%H%M}"

    def verified() -> VirtualMachineBackup | None:
        found = backups(plane)[newest]
        check = found.status.verification
        return found if check is not None and check.result is not None else None

    checked = await eventually(verified)
    assert checked.status.verification is not None
    assert checked.status.verification.requested == f"nightly@{noon.isoformat()}"
    assert checked.status.verification.result is VerificationResult.OK
    assert backups(plane)[f"a-{nights[0]:%Y%m%d-%H%M}"].status.verification is None, "only the newest"
    assert policy(plane).status.verify_window == noon
    assert [e.message for e in events(plane, "VerifyStarted")] == ["1 backup(s) to verify"]
