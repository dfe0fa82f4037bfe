"""Who wakes whom: each controller's watches as a table over one small fleet in the cache.

A row is (the watches of one controller, a change: kind, object before, object after) and
the keys that controller looks at again. The fleet:

- hosts h1, h2, h3 (connected), h4 (fenced); a HostMaintenance for h1 and one for h3;
- pools ``shared`` (volumes) and ``images`` (a library with images debian and vmlinuz);
- VMs: a on h1 (disk root-a), b on h1 (boots vmlinuz), c Pending without a host (disk root-c,
  a copy of debian), d on h2 migrating to h1 for operation move-d;
- recovery from a failed host (issue 15), cluster default: r1 holds a slot (Starting on h2),
  r2 waits for one, f (AlwaysOn, Running on fenced h4) is not released yet; r3 waits for
  a slot of cluster rack-2;
- networks lan (VM e on h2 has a NIC on it) and wan (unused);
- operations: start-a (under way), stop-a (finished), move-d (Migrate, under way),
  evict-b (Evict, pending), move-gone (Migrate of a VM deleted meanwhile); a snapshot snap-a.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from virtplane.controllers import (
    host,
    images,
    maintenance,
    migration,
    networks,
    operations,
    snapshots,
    storage,
)
from virtplane.controllers.vm import watches as vm
from virtplane.controllers.watch import Watch, reconciling, requests_for
from virtplane.domain.intents import (
    Intents,
    MigrationIntent,
    Recovery,
    RecoveryStage,
    write_intents,
    write_migration,
)
from virtplane.domain.networks import Network, NetworkKind, NetworkSpec, Nic
from virtplane.domain.resources import (
    Allocation,
    Boot,
    Disk,
    FencePhase,
    FenceStatus,
    Host,
    HostConnection,
    HostMaintenance,
    HostMaintenanceSpec,
    HostResourceState,
    HostSpec,
    Image,
    ImageKind,
    ImageSpec,
    Metadata,
    OperationPhase,
    OperationType,
    PoolContent,
    PoolKind,
    Resource,
    RunPolicy,
    Setting,
    StoragePool,
    StoragePoolSpec,
    VirtualMachine,
    VirtualMachineOperation,
    VirtualMachineOperationSpec,
    VirtualMachineSnapshot,
    VirtualMachineSnapshotSpec,
    VirtualMachineSpec,
    VMPhase,
    Volume,
    VolumeSource,
    VolumeSpec,
)
from virtplane.reconcile.types import Request
from virtplane.runtime.cache import Cache
from virtplane.store.store import Store

INTENT = MigrationIntent(
    source="h2",
    target="h1",
    attempt=1,
    requested_by="operation/move-d",
    started_at=datetime(2026, 1, 1, tzinfo=UTC),
)


def _host(name: str, **status: Any) -> Host:
    h = Host(metadata=Metadata(name=name), spec=HostSpec(uri=f"sim://{name}"))
    h.status.connection = HostConnection.UP
    h.status.allocated = Allocation(vcpus=4, memory_mib=4096, vms=2)
    for field, value in status.items():
        setattr(h.status, field, value)
    return h


def _fenced_host(name: str) -> Host:
    h = _host(name, connection=HostConnection.DOWN)
    h.spec.fenced = True
    return h


def _pool(name: str, content: PoolContent = PoolContent.VOLUMES) -> StoragePool:
    spec = StoragePoolSpec(kind=PoolKind.SHARED, content=content, hosts=["h1", "h2"], capacity_gib=100)
    return StoragePool(metadata=Metadata(name=name), spec=spec)


def _image(name: str, kind: ImageKind) -> Image:
    return Image(metadata=Metadata(name=name), spec=ImageSpec(pool="images", file=f"{name}.img", kind=kind))


def _volume(name: str, image: str | None = None) -> Volume:
    source = VolumeSource(image=image) if image else None
    return Volume(metadata=Metadata(name=name), spec=VolumeSpec(pool="shared", size_gib=1, source=source))


def _vm(name: str, host: str | None, phase: VMPhase = VMPhase.RUNNING, **spec: Any) -> VirtualMachine:
    v = VirtualMachine(metadata=Metadata(name=name), spec=VirtualMachineSpec(**spec))
    v.status.host, v.status.phase = host, phase
    return v


def _network(name: str) -> Network:
    spec = NetworkSpec(kind=NetworkKind.BRIDGE, bridge=f"br-{name}", cluster="default")
    return Network(metadata=Metadata(name=name), spec=spec)


def _vm_d(intent: MigrationIntent | None = INTENT) -> VirtualMachine:
    d = _vm("d", "h2", VMPhase.MIGRATING)
    d.metadata.annotations = write_migration({}, intent)
    return d


def _recovering(name: str, stage: RecoveryStage, cluster: str = "default") -> VirtualMachine:
    phase, host = (VMPhase.STARTING, "h2") if stage is RecoveryStage.STARTING else (VMPhase.STOPPED, None)
    v = _vm(name, host, phase)
    v.metadata.annotations = write_intents({}, Intents(recovery=Recovery(stage, cluster, "h4")))
    return v


def _op(name: str, vm: str, kind: OperationType, phase: OperationPhase) -> VirtualMachineOperation:
    op = VirtualMachineOperation(
        metadata=Metadata(name=name), spec=VirtualMachineOperationSpec(vm=vm, type=kind)
    )
    op.status.phase = phase
    return op


def _fleet() -> list[Resource]:
    return [
        _host("h1"),
        _host("h2"),
        _host("h3"),
        _fenced_host("h4"),
        _pool("shared"),
        _pool("images", PoolContent.IMAGES),
        _image("debian", ImageKind.DISK),
        _image("vmlinuz", ImageKind.KERNEL),
        _volume("root-a"),
        _volume("root-c", image="debian"),
        _vm("a", "h1", disks=[Disk(volume="root-a")]),
        _vm("b", "h1", boot=Boot(kernel="vmlinuz")),
        _vm("c", None, VMPhase.PENDING, disks=[Disk(volume="root-c")]),
        _vm_d(),
        _recovering("r1", RecoveryStage.STARTING),
        _recovering("r2", RecoveryStage.WAITING),
        _recovering("r3", RecoveryStage.WAITING, cluster="rack-2"),
        _vm("f", "h4", run_policy=RunPolicy.ALWAYS_ON),
        _vm("e", "h2", nics=[Nic(network="lan")]),
        _network("lan"),
        _network("wan"),
        _op("start-a", "a", OperationType.START, OperationPhase.IN_PROGRESS),
        _op("stop-a", "a", OperationType.STOP, OperationPhase.COMPLETED),
        _op("move-d", "d", OperationType.MIGRATE, OperationPhase.IN_PROGRESS),
        _op("evict-b", "b", OperationType.EVICT, OperationPhase.PENDING),
        _op("move-gone", "gone", OperationType.MIGRATE, OperationPhase.IN_PROGRESS),
        HostMaintenance(metadata=Metadata(name="h1"), spec=HostMaintenanceSpec(host="h1")),
        HostMaintenance(metadata=Metadata(name="h3"), spec=HostMaintenanceSpec(host="h3")),
        VirtualMachineSnapshot(metadata=Metadata(name="snap-a"), spec=VirtualMachineSnapshotSpec(vm="a")),
        Setting(metadata=Metadata(name="host.cpu_allocation_ratio")),
    ]


@pytest.fixture
def cache(store: Store) -> Cache:
    cache = Cache(store)
    for obj in _fleet():
        cache.put(obj)
    return cache


def _changed(obj: Resource, change: Callable[[Any], None]) -> Resource:
    new = obj.model_copy(deep=True)
    change(new)
    return new


def _set(**fields: Any) -> Callable[[Any], None]:
    """A change of the object's status fields."""

    def change(obj: Any) -> None:
        for field, value in fields.items():
            setattr(obj.status, field, value)

    return change


def _heartbeat(h: Host) -> None:
    h.status.last_heartbeat = datetime(2026, 1, 2, tzinfo=UTC)
    h.status.allocated = Allocation(vcpus=6, memory_mib=6144, vms=3)  # more used: no room freed


def _add_disk(v: VirtualMachine) -> None:
    v.spec.disks.append(Disk(volume="root-c"))


def _intent_ended(v: VirtualMachine) -> None:
    v.metadata.annotations = write_migration(v.metadata.annotations, None)


H1, A, D = _host("h1"), _vm("a", "h1", disks=[Disk(volume="root-a")]), _vm_d()
E = _vm("e", "h2", nics=[Nic(network="lan")])
DOWN = _changed(H1, _set(connection=HostConnection.DOWN))
MAINTENANCE = _changed(H1, _set(resource_state=HostResourceState.PREPARE_FOR_MAINTENANCE))
HEARTBEAT = _changed(H1, _heartbeat)
FREED = _changed(H1, _set(allocated=Allocation(vcpus=2, memory_mib=2048, vms=1)))
A_NOTE = _changed(A, _set(message="a note"))
A_STOPPED = _changed(A, _set(phase=VMPhase.STOPPED))
A_MOVED = _changed(A, _set(host="h2"))
A_STARTING = _changed(A, _set(phase=VMPhase.STARTING))
A_DISK = _changed(A, _add_disk)
BRIDGES = _changed(H1, _set(bridges=["br-lan"]))
E_NOTE = _changed(E, _set(message="a note"))
E_MOVED_NIC = _changed(E, lambda v: setattr(v.spec, "nics", [Nic(network="wan")]))
D_ARRIVED = _changed(D, lambda v: (_intent_ended(v), setattr(v.status, "host", "h1")))
D_FAILED = _changed(D, _intent_ended)
GONE = _changed(
    D,
    lambda v: setattr(
        v.metadata,
        "annotations",
        write_migration({}, MigrationIntent("h2", "h1", 1, "operation/move-gone", INTENT.started_at)),
    ),
)
GONE.metadata.name = "gone"
FENCING = _changed(H1, _set(fence=FenceStatus(phase=FencePhase.POWERING_OFF, attempts=1)))
SILENT = _changed(H1, _set(silent_since=datetime(2026, 1, 2, tzinfo=UTC)))
R1, R2 = _recovering("r1", RecoveryStage.STARTING), _recovering("r2", RecoveryStage.WAITING)
R3 = _recovering("r3", RecoveryStage.WAITING, cluster="rack-2")


def _recovery_over(v: VirtualMachine) -> None:
    v.metadata.annotations = write_intents(v.metadata.annotations, Intents())


def _r(kind: str, *names: str) -> set[Request]:
    return {Request(kind, n) for n in names}


VM, HOST, POOL, IMAGE, VOLUME = "VirtualMachine", "Host", "StoragePool", "Image", "Volume"
OP, MIG, HM, SNAP = "VirtualMachineOperation", "Migration", "HostMaintenance", "VirtualMachineSnapshot"
NET = "Network"

ROWS: list[Any] = [
    # ----------------------------------------------------------------- the VM controller
    pytest.param(vm.WATCHES, VM, A, A_NOTE, _r(VM, "a"), id="vm: itself"),
    pytest.param(vm.WATCHES, VM, A, None, _r(VM, "a"), id="vm: itself, deleted"),
    pytest.param(vm.WATCHES, VOLUME, _volume("root-a"), None, _r(VM, "a"), id="vm: its disk"),
    pytest.param(vm.WATCHES, IMAGE, None, _image("vmlinuz", ImageKind.KERNEL), _r(VM, "b"), id="vm: its kernel"),
    pytest.param(vm.WATCHES, IMAGE, None, _image("debian", ImageKind.DISK), set(), id="vm: an image it does not boot"),
    pytest.param(vm.WATCHES, HOST, H1, DOWN, _r(VM, "a", "b", "c"), id="vm: its host's connection (and the unplaced)"),
    pytest.param(vm.WATCHES, HOST, H1, MAINTENANCE, _r(VM, "a", "b", "c"), id="vm: its host's state"),
    pytest.param(vm.WATCHES, HOST, H1, HEARTBEAT, set(), id="vm: a heartbeat wakes nobody"),
    pytest.param(vm.WATCHES, HOST, H1, SILENT, _r(VM, "a", "b", "c"), id="vm: its host stopped answering (liveness)"),
    pytest.param(vm.WATCHES, HOST, H1, FENCING, _r(VM, "a", "b", "c"), id="vm: its host's fence (the VMs say why they wait)"),
    pytest.param(vm.WATCHES, VM, R1, _changed(R1, _recovery_over), _r(VM, "r1", "r2", "f"), id="vm: a recovery slot freed (the cluster's waiting)"),
    pytest.param(vm.WATCHES, VM, R1, None, _r(VM, "r1", "r2", "f"), id="vm: a recovering VM deleted frees its slot"),
    pytest.param(vm.WATCHES, VM, R3, _changed(R3, _recovery_over), _r(VM, "r3"), id="vm: a recovery over in another cluster"),
    pytest.param(vm.WATCHES, VM, R2, _changed(R2, _set(message="x")), _r(VM, "r2"), id="vm: a recovery that goes on frees nothing"),
    pytest.param(vm.WATCHES, HOST, H1, FREED, _r(VM, "c"), id="vm: room freed wakes the unplaced only"),
    pytest.param(vm.WATCHES, HOST, None, _host("h9"), _r(VM, "c"), id="vm: a new host (the unplaced)"),
    pytest.param(vm.WATCHES, HOST, H1, None, set(), id="vm: a host deleted"),
    pytest.param(vm.WATCHES, HOST, H1, BRIDGES, _r(VM, "c"), id="vm: a host's bridges (the unplaced)"),
    pytest.param(vm.WATCHES, NET, None, _network("lan"), _r(VM, "e"), id="vm: a network of its NICs"),
    pytest.param(vm.WATCHES, NET, None, _network("wan"), set(), id="vm: a network nobody uses"),
    pytest.param(vm.WATCHES, OP, None, _op("x", "a", OperationType.STOP, OperationPhase.PENDING), set(), id="vm: an operation (it asks through an intent on the VM)"),
    # ----------------------------------------------------------------- the host controller
    pytest.param(host.WATCHES, HOST, H1, HEARTBEAT, _r(HOST, "h1"), id="host: itself"),
    pytest.param(host.WATCHES, "Setting", None, Setting(metadata=Metadata(name="x")), _r(HOST, "h1", "h2", "h3", "h4"), id="host: a setting (ratios by host)"),
    pytest.param(host.WATCHES, VM, A, A_MOVED, _r(HOST, "h1", "h2"), id="host: a VM moved (both hosts)"),
    pytest.param(host.WATCHES, VM, A, A_STOPPED, _r(HOST, "h1"), id="host: a VM's phase"),
    pytest.param(host.WATCHES, VM, A, A_NOTE, set(), id="host: a VM's message"),
    pytest.param(host.WATCHES, VM, A_STARTING, A, set(), id="host: a VM Starting -> Running (counted in both)"),
    pytest.param(host.WATCHES, VM, A_STOPPED, A_STARTING, _r(HOST, "h1"), id="host: a VM Stopped -> Starting"),
    # ----------------------------------------------------------------- networks
    pytest.param(networks.WATCHES, NET, None, _network("lan"), _r(NET, "lan"), id="network: itself"),
    pytest.param(networks.WATCHES, HOST, H1, BRIDGES, _r(NET, "lan", "wan"), id="network: a host's bridges"),
    pytest.param(networks.WATCHES, HOST, H1, DOWN, _r(NET, "lan", "wan"), id="network: a host's connection"),
    pytest.param(networks.WATCHES, HOST, None, _host("h9"), _r(NET, "lan", "wan"), id="network: a new host"),
    pytest.param(networks.WATCHES, HOST, H1, None, _r(NET, "lan", "wan"), id="network: a host deleted"),
    pytest.param(networks.WATCHES, HOST, H1, HEARTBEAT, set(), id="network: a heartbeat"),
    pytest.param(networks.WATCHES, VM, E, E_NOTE, _r(NET, "lan"), id="network: a VM with a NIC on it"),
    pytest.param(networks.WATCHES, VM, E, E_MOVED_NIC, _r(NET, "lan", "wan"), id="network: a NIC moved (both)"),
    pytest.param(networks.WATCHES, VM, E, None, _r(NET, "lan"), id="network: a VM deleted frees its NICs"),
    pytest.param(networks.WATCHES, VM, A, A_NOTE, set(), id="network: a VM without NICs"),
    # ----------------------------------------------------------------- pools, images, volumes
    pytest.param(storage.POOL_WATCHES, POOL, None, _pool("shared"), _r(POOL, "shared"), id="pool: itself"),
    pytest.param(storage.POOL_WATCHES, HOST, H1, DOWN, _r(POOL, "shared", "images"), id="pool: a host's connection"),
    pytest.param(storage.POOL_WATCHES, HOST, H1, HEARTBEAT, set(), id="pool: a heartbeat"),
    pytest.param(storage.POOL_WATCHES, HOST, H1, FENCING, _r(POOL, "shared", "images"), id="pool: a host's fence"),
    pytest.param(images.WATCHES, IMAGE, None, _image("debian", ImageKind.DISK), _r(IMAGE, "debian"), id="image: itself"),
    pytest.param(images.WATCHES, POOL, None, _pool("images", PoolContent.IMAGES), _r(IMAGE, "debian", "vmlinuz"), id="image: its library"),
    pytest.param(images.WATCHES, POOL, None, _pool("shared"), set(), id="image: another pool"),
    pytest.param(images.WATCHES, HOST, H1, MAINTENANCE, _r(IMAGE, "debian", "vmlinuz"), id="image: a host's state"),
    pytest.param(images.WATCHES, HOST, H1, FREED, set(), id="image: room on a host"),
    pytest.param(storage.VOLUME_WATCHES, VOLUME, None, _volume("root-a"), _r(VOLUME, "root-a"), id="volume: itself"),
    pytest.param(storage.VOLUME_WATCHES, POOL, None, _pool("shared"), _r(VOLUME, "root-a", "root-c"), id="volume: its pool"),
    pytest.param(storage.VOLUME_WATCHES, IMAGE, None, _image("debian", ImageKind.DISK), _r(VOLUME, "root-c"), id="volume: its source image"),
    pytest.param(storage.VOLUME_WATCHES, VM, A, A_DISK, _r(VOLUME, "root-a", "root-c"), id="volume: a VM's disks"),
    pytest.param(storage.VOLUME_WATCHES, VM, A, A_NOTE, set(), id="volume: a VM's message"),
    # ----------------------------------------------------------------- operations and migrations
    pytest.param(operations.WATCHES, OP, None, _op("x", "a", OperationType.STOP, OperationPhase.PENDING), _r(OP, "x"), id="op: itself"),
    pytest.param(operations.WATCHES, VM, A, A_NOTE, _r(OP, "start-a"), id="op: its VM (not a finished one)"),
    pytest.param(migration.OPERATION_WATCHES, VM, D, D_FAILED, _r(OP, "move-d", "evict-b"), id="op: a slot freed (Migrate, Evict)"),
    pytest.param(migration.OPERATION_WATCHES, VM, GONE, None, _r(OP, "move-d", "evict-b", "move-gone"), id="op: a slot freed by a deleted VM (its requester too)"),
    pytest.param(migration.OPERATION_WATCHES, VM, A, A_MOVED, set(), id="op: no slot freed"),
    pytest.param(migration.FOLLOWER_WATCHES, VM, D, _changed(D, _set(message="x")), _r(MIG, "d"), id="migration: an intent stands"),
    pytest.param(migration.FOLLOWER_WATCHES, VM, D, D_ARRIVED, _r(MIG, "d"), id="migration: an intent ended"),
    pytest.param(migration.FOLLOWER_WATCHES, VM, A, A_MOVED, set(), id="migration: no intent"),
    # ----------------------------------------------------------------- maintenance, snapshots
    pytest.param(maintenance.WATCHES, HM, None, HostMaintenance(metadata=Metadata(name="h1"), spec=HostMaintenanceSpec(host="h1")), _r(HM, "h1"), id="maintenance: itself"),
    pytest.param(maintenance.WATCHES, VM, A, A_NOTE, _r(HM, "h1"), id="maintenance: a VM on its host"),
    pytest.param(maintenance.WATCHES, VM, None, _vm("z", "h2"), set(), id="maintenance: a VM elsewhere"),
    pytest.param(maintenance.WATCHES, VM, D, _changed(D, _set(message="x")), _r(HM, "h1"), id="maintenance: a VM migrating to its host"),
    pytest.param(maintenance.WATCHES, VM, D, D_FAILED, _r(HM, "h1", "h3"), id="maintenance: a slot freed (all)"),
    pytest.param(maintenance.WATCHES, HOST, H1, HEARTBEAT, _r(HM, "h1", "h3"), id="maintenance: any host change (room)"),
    pytest.param(snapshots.WATCHES, SNAP, None, VirtualMachineSnapshot(metadata=Metadata(name="s"), spec=VirtualMachineSnapshotSpec(vm="a")), _r(SNAP, "s"), id="snapshot: itself"),
    pytest.param(snapshots.WATCHES, VM, A, A_STOPPED, set(), id="snapshot: nothing else"),
]  # fmt: skip


@pytest.mark.parametrize(("watches", "kind", "old", "new", "expected"), ROWS)
def test_who_wakes_whom(
    cache: Cache,
    watches: Sequence[Watch],
    kind: str,
    old: Resource | None,
    new: Resource | None,
    expected: set[Request],
) -> None:
    requests = requests_for(watches, cache, kind, old, new)
    assert set(requests) == expected
    assert len(requests) == len(set(requests)), "each key once"


@pytest.mark.parametrize(
    ("watch", "kind", "old", "new", "during", "expected"),
    [
        # its own reconcile wrote it: that reconcile's verdict says when to look again
        (vm.WATCHES[0], VM, A, A_NOTE, Request(VM, "a"), set()),
        (vm.WATCHES[0], VM, A, A_NOTE, Request(VM, "b"), _r(VM, "a")),  # another VM's (a slot)
        (vm.WATCHES[0], VM, A, A_NOTE, Request("Migration", "a"), _r(VM, "a")),  # the follower: VM names
        (vm.WATCHES[0], VM, A, A_NOTE, None, _r(VM, "a")),  # the API, another replica
        (host.WATCHES[0], HOST, H1, HEARTBEAT, Request(HOST, "h1"), set()),
        (host.WATCHES[0], HOST, H1, HEARTBEAT, Request("HostMaintenance", "h1"), _r(HOST, "h1")),
        (host.WATCHES[0], HOST, H1, HEARTBEAT, None, _r(HOST, "h1")),
    ],
    ids=[
        "vm: its own reconcile",
        "vm: another VM's reconcile",
        "vm: the migration follower",
        "vm: no reconcile",
        "host: its own reconcile",
        "host: its maintenance's reconcile",
        "host: no reconcile",
    ],
)
def test_vms_and_hosts_are_not_woken_by_their_own_reconciles_writes(
    watch: Watch,
    kind: str,
    old: Resource,
    new: Resource,
    during: Request | None,
    expected: set[Request],
    cache: Cache,
) -> None:
    token = reconciling.set(during)
    try:
        requests = requests_for([watch], cache, kind, old, new)
    finally:
        reconciling.reset(token)
    assert set(requests) == expected


def test_a_volume_is_looked_at_when_the_vm_that_holds_it_stops_holding_it(cache: Cache) -> None:
    """A VM whose disk was taken out of its spec may hold the volume until its domain is
    defined again without it (``domain.attachments``): the Volume controller may look before
    that, so the VM's write that says so (its observed generation caught up) wakes the volume
    it holds, though neither spec lists it."""
    held = _volume("old-g")
    held.status.attached_vm = "g"
    cache.put(held)
    before = _vm("g", "h1", VMPhase.STOPPED)  # its disk taken out: generation 2, domain not redefined
    before.metadata.generation, before.status.observed_generation = 2, 1
    after = _changed(before, _set(observed_generation=2))
    requests = requests_for(storage.VOLUME_WATCHES, cache, VM, before, after)
    assert set(requests) == _r(VOLUME, "old-g")
