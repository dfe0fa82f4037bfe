from __future__ import annotations

from collections import Counter

import pytest

from tests.conftest import make_plane
from tests.controllers.helpers import add_host, add_vm, vm
from tests.reconciles import reconcile_log
from virtplane.bootstrap import CONFLICT_REQUEUE_S, one_reconcile
from virtplane.controllers.host import ALLOCATION_BATCH_S, HostReconciler
from virtplane.controllers.watch import requests_for
from virtplane.domain.resources import (
    BackupPolicy,
    BackupPolicySpec,
    BackupTarget,
    BackupTargetSpec,
    Host,
    HostConnection,
    HostMaintenance,
    HostMaintenanceSpec,
    HostSpec,
    Image,
    ImageKind,
    ImageSpec,
    Metadata,
    OperationType,
    PoolKind,
    Resource,
    RunPolicy,
    StoragePool,
    StoragePoolSpec,
    VirtualMachine,
    VirtualMachineBackup,
    VirtualMachineBackupSpec,
    VirtualMachineOperation,
    VirtualMachineOperationSpec,
    VirtualMachineSnapshot,
    VirtualMachineSnapshotSpec,
    VMPhase,
    Volume,
    VolumeSpec,
)
from virtplane.reconcile import Request, Result
from virtplane.reconcile.clock import FakeClock
from virtplane.reconcile.queue import WorkQueue
from virtplane.store.errors import Conflict
from virtplane.store.store import Store


async def test_a_lost_write_race_is_a_quick_quiet_requeue(caplog: pytest.LogCaptureFixture) -> None:
    async def loses(_: Request) -> Result | None:
        raise Conflict("VirtualMachine", "a", 1, 2)

    result = await one_reconcile(loses)(Request("VirtualMachine", "a"))
    assert result == Result(requeue_after=CONFLICT_REQUEUE_S)
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "WARNING")]


async def test_other_errors_still_go_to_the_backoff() -> None:
    async def breaks(_: Request) -> Result | None:
        raise RuntimeError("driver exploded")

    with pytest.raises(RuntimeError):
        await one_reconcile(breaks)(Request("VirtualMachine", "a"))


async def test_a_reconcile_writes_its_events_with_its_write_and_drops_them_when_it_loses_a_race(
    store: Store,
) -> None:
    from virtplane.bootstrap import ControlPlane
    from virtplane.domain.resources import Metadata, VirtualMachine, VirtualMachineSpec

    plane = ControlPlane(store)
    ctx = plane.ctx
    store.create(VirtualMachine(metadata=Metadata(name="a"), spec=VirtualMachineSpec()))
    seen: list[list[str]] = []

    def reasons() -> list[str]:
        return [e.reason for e in store.list_events(kind="VirtualMachine", name="a")]

    async def writes(_: Request) -> Result | None:
        current = store.get(VirtualMachine, "a")
        ctx.event(current, "Decided", "before the write")
        seen.append(reasons())  # not written yet: it waits for the write it belongs to
        current.status.message = "decided"
        await ctx.write(current)
        seen.append(reasons())
        ctx.event(current, "Acted", "after the last write")
        return None

    await one_reconcile(writes, ctx)(Request("VirtualMachine", "a"))
    assert seen == [[], ["Decided"]]
    assert reasons() == ["Decided", "Acted"], "what is left is written at the end"

    async def loses(_: Request) -> Result | None:
        stale = store.get(VirtualMachine, "a")
        ctx.event(stale, "Lost", "describes a change that will not happen")
        other = store.get(VirtualMachine, "a")
        other.status.message = "someone else"
        store.update_status(other)
        stale.status.message = "mine"
        store.update_status(stale)  # loses the race; the event is still pending
        return None

    assert await one_reconcile(loses, ctx)(Request("VirtualMachine", "a")) == Result(
        requeue_after=CONFLICT_REQUEUE_S
    )
    assert "Lost" not in reasons()


async def test_a_host_connection_change_wakes_each_of_its_vms_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 12: the host controller requeued its VMs itself and bootstrap did it again on the
    host's write. Now only the VM controller's watch does: one wake each, none for others."""
    plane = make_plane(store)
    for name in ("h1", "h2"):
        add_host(plane, name)
    for name, on in (("x", "h1"), ("y", "h1"), ("z", "h2")):
        vm = VirtualMachine(metadata=Metadata(name=name))
        vm.status.host, vm.status.phase = on, VMPhase.RUNNING
        store.create(vm)
    plane.cache.load()
    woken: Counter[Request] = Counter()

    def record(kind: str, name: str, delay: float = 0.0) -> None:
        woken[Request(kind, name)] += 1

    # every wake goes through one of these: the watches, and a controller's own ctx.enqueue
    monkeypatch.setattr(plane, "enqueue", record)
    monkeypatch.setattr(plane.ctx, "enqueue", record)

    await HostReconciler(plane.ctx)(Request(Host.KIND, "h1"))  # Unknown -> Up

    assert store.get(Host, "h1").status.connection is HostConnection.UP
    assert {r.name: n for r, n in woken.items() if r.kind == VirtualMachine.KIND} == {"x": 1, "y": 1}


def test_a_change_wakes_the_operations_waiting_on_it_first(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13, row 4: a VM that stops frees room on its host and ends its Stop. The operation
    answers a client that waits for it: it looks before the host's allocation is written."""
    plane = make_plane(store)
    add_host(plane, "h1")
    running = VirtualMachine(metadata=Metadata(name="x"))
    running.status.host, running.status.phase = "h1", VMPhase.RUNNING
    store.create(running)
    store.create(
        VirtualMachineOperation(
            metadata=Metadata(name="x-stop"),
            spec=VirtualMachineOperationSpec(vm="x", type=OperationType.STOP),
        )
    )
    plane.cache.load()
    woken: list[Request] = []
    monkeypatch.setattr(plane, "enqueue", lambda kind, name, delay=0.0: woken.append(Request(kind, name)))

    def stopped(current: VirtualMachine) -> None:
        current.status.phase = VMPhase.STOPPED

    plane.cache.put(store.mutate(VirtualMachine, "x", stopped))

    assert woken[0] == Request(VirtualMachineOperation.KIND, "x-stop"), woken
    assert Request(Host.KIND, "h1") in woken


def test_a_burst_of_vm_changes_is_one_look_at_their_host_after_the_batch_period(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13, row 3: a bulk stop of a thousand VMs wrote their host's allocation once per
    VM. The host waits ``ALLOCATION_BATCH_S``; the stops that land meanwhile are one look."""
    plane = make_plane(store)
    add_host(plane, "h1")
    for n in range(20):
        running = VirtualMachine(metadata=Metadata(name=f"v{n}"))
        running.status.host, running.status.phase = "h1", VMPhase.RUNNING
        store.create(running)
    plane.cache.load()
    clock = FakeClock()
    queues: dict[str, WorkQueue[str]] = {}

    def enqueue(kind: str, name: str, delay: float = 0.0) -> None:
        queues.setdefault(kind, WorkQueue(clock=clock)).add_after(name, delay)

    monkeypatch.setattr(plane, "enqueue", enqueue)

    def stopped(current: VirtualMachine) -> None:
        current.status.phase = VMPhase.STOPPED

    for n in range(20):
        plane.cache.put(store.mutate(VirtualMachine, f"v{n}", stopped))
        clock.advance(ALLOCATION_BATCH_S / 40)

    hosts = queues[Host.KIND]
    assert len(hosts) == 1 and hosts.ready_at("h1") == ALLOCATION_BATCH_S  # the first stop's wake
    assert queues[VirtualMachine.KIND].ready_at("v0") == 0.0  # a VM's own look does not wait


OWN_OBJECTS = [
    VirtualMachine(metadata=Metadata(name="x")),
    Host(metadata=Metadata(name="x"), spec=HostSpec(uri="sim://x")),
    StoragePool(
        metadata=Metadata(name="x"), spec=StoragePoolSpec(kind=PoolKind.LOCAL, host="h", capacity_gib=1)
    ),
    Image(metadata=Metadata(name="x"), spec=ImageSpec(pool="p", file="x.img", kind=ImageKind.DISK)),
    Volume(metadata=Metadata(name="x"), spec=VolumeSpec(pool="p", size_gib=1)),
    VirtualMachineOperation(
        metadata=Metadata(name="x"), spec=VirtualMachineOperationSpec(vm="v", type=OperationType.START)
    ),
    VirtualMachineSnapshot(metadata=Metadata(name="x"), spec=VirtualMachineSnapshotSpec(vm="v")),
    HostMaintenance(metadata=Metadata(name="x"), spec=HostMaintenanceSpec(host="x")),
    BackupTarget(metadata=Metadata(name="x"), spec=BackupTargetSpec(path="/srv/b", capacity_gib=1)),
    VirtualMachineBackup(metadata=Metadata(name="x"), spec=VirtualMachineBackupSpec(vm="v", target="t")),
    BackupPolicy(
        metadata=Metadata(name="x"), spec=BackupPolicySpec(target="t", schedule="@daily", selector="")
    ),
]


@pytest.mark.parametrize("obj", OWN_OBJECTS, ids=lambda obj: obj.KIND)
def test_bootstrap_registers_every_controllers_watches(store: Store, obj: Resource) -> None:
    """A controller whose watches were left out would see its own objects only on resync."""
    plane = make_plane(store)
    assert Request(obj.KIND, "x") in requests_for(plane.watches, plane.cache, obj.KIND, None, obj)


async def test_a_cold_start_sees_vms_running_before_it_has_started_them_all(store: Store) -> None:
    """Issue 13, row 2: after a power outage every VM's first look starts it; the event of its
    boot (and its own write) must be looked at before the start-up listing of the rest, not
    after all of them."""
    from tests.conftest import eventually

    vms = [f"vm-{index:02d}" for index in range(40)]
    first = make_plane(store, boot_seconds=0.0)
    for host in ("h1", "h2"):
        add_host(first, host)
    for name in vms:
        add_vm(first, name, RunPolicy.ALWAYS_ON, cpu=1, memory_mib=128)
    await first.start()
    try:
        await eventually(lambda: all(vm(first, n).status.phase is VMPhase.RUNNING for n in vms))
    finally:
        await first.stop()

    outage = make_plane(store, boot_seconds=0.0)  # a fresh simulator: every domain is gone
    log = reconcile_log(outage)
    await outage.start()
    try:
        await eventually(
            lambda: (
                all(len(log.finished[(VirtualMachine.KIND, n)]) >= 2 for n in vms)
                and all(vm(outage, n).status.phase is VMPhase.RUNNING for n in vms)
            )
        )
    finally:
        await outage.stop()
    looks = {n: sorted(number for number, _ in log.finished[(VirtualMachine.KIND, n)]) for n in vms}
    last_first_look = max(numbers[0] for numbers in looks.values())
    first_second_look = min(numbers[1] for numbers in looks.values())
    assert first_second_look < last_first_look / 2, (first_second_look, last_first_look)
