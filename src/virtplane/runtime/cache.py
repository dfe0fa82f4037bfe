"""An in-memory copy of the store, kept current by the change feed (an informer).

Controllers read related objects here (hosts for placement, the VMs of a host,
the operations of a VM) instead of querying per object; they read the object
they reconcile fresh from the store and write with a version check, so a
slightly stale cache can cost a retry, never a wrong write.
"""

from __future__ import annotations

import gc
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from virtplane.domain.intents import MIGRATION
from virtplane.domain.networks import Network
from virtplane.domain.phases import ALLOCATED_PHASES, PLACED_PHASES
from virtplane.domain.resources import (
    KIND_BY_NAME,
    Host,
    Image,
    Resource,
    StoragePool,
    VirtualMachine,
    VirtualMachineBackup,
    VirtualMachineOperation,
    VirtualMachineSnapshot,
    Volume,
    VolumePhase,
)
from virtplane.store.changes import Change
from virtplane.store.store import Store

R = TypeVar("R", bound=Resource)

CacheListener = Callable[[str, str, Resource | None, Resource | None], None]
"""(kind, name, old, new) after the cache applied a change; new is None when deleted."""


@dataclass(frozen=True)
class HostShare:
    """What one VM holds on the host its status names (None: it names no host)."""

    host: str
    vcpus: int
    memory_mib: int
    placed: bool  # counted against the host's room by placement (``PLACED_PHASES``)
    allocated: bool  # not Stopped: it has, or is getting, a domain there (``ALLOCATED_PHASES``)
    group: str | None  # its anti-affinity group

    @classmethod
    def of(cls, vm: VirtualMachine) -> HostShare | None:
        if not vm.status.host:
            return None
        return cls(
            vm.status.host,
            vm.spec.cpu,
            vm.spec.memory_mib,
            vm.status.phase in PLACED_PHASES,
            vm.status.phase in ALLOCATED_PHASES,
            vm.spec.placement.anti_affinity_group,
        )


@dataclass
class HostUsage:
    """What the VMs recorded on one host hold there, kept as they change (not summed per look:
    placement looks at every host, and a host with hundreds of VMs changes often)."""

    placed_vcpus: int = 0  # what placement counts (``PLACED_PHASES``: Stopped VMs too)
    placed_memory_mib: int = 0
    allocated_vcpus: int = 0  # only those not Stopped: the host's status.allocated
    allocated_memory_mib: int = 0
    allocated_vms: int = 0
    groups: Counter[str] = field(default_factory=Counter)

    def add(self, share: HostShare, sign: int) -> None:
        if share.placed:
            self.placed_vcpus += sign * share.vcpus
            self.placed_memory_mib += sign * share.memory_mib
        if share.allocated:
            self.allocated_vcpus += sign * share.vcpus
            self.allocated_memory_mib += sign * share.memory_mib
            self.allocated_vms += sign
        if share.group:
            self.groups[share.group] += sign
            if not self.groups[share.group]:
                del self.groups[share.group]

    def anti_affinity_groups(self) -> frozenset[str]:
        return frozenset(self.groups)


class Cache:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._objects: dict[str, dict[str, Resource]] = defaultdict(dict)
        self._vms_by_host: dict[str, set[str]] = defaultdict(set)
        self._vm_by_uid: dict[str, str] = {}
        self._ops_by_vm: dict[str, set[str]] = defaultdict(set)
        self._ops_under_way: set[str] = set()  # operations not finished yet
        self._vms_by_volume: dict[str, set[str]] = defaultdict(set)
        self._volumes_by_pool: dict[str, set[str]] = defaultdict(set)
        self._volumes_by_holder: dict[str, set[str]] = defaultdict(set)  # status.attached_vm
        # clones not copied yet, by the volume and the snapshot they copy (spec.source)
        self._copies_of_volume: dict[str, set[str]] = defaultdict(set)
        self._copies_of_snapshot: dict[str, set[str]] = defaultdict(set)
        self._linked_clones: dict[str, set[str]] = defaultdict(set)  # by their backing volume
        self._linked_to_snapshot: dict[str, set[str]] = defaultdict(set)  # by the snapshot saving theirs
        self._pool_used_gib: dict[str, int] = defaultdict(int)  # the sizes of each pool's volumes
        self._unscheduled: set[str] = set()  # VMs waiting for a host
        self._migrating: set[str] = set()  # VMs that carry a migration intent
        self._shares: dict[str, HostShare] = {}  # VM -> what it added to its host's usage
        self._usage: dict[str, HostUsage] = defaultdict(HostUsage)
        self._listeners: list[CacheListener] = []
        self.host_generation = 0
        """Counts the changes of Host objects: what is derived from all hosts is kept until it moves."""

    def add_listener(self, listener: CacheListener) -> None:
        self._listeners.append(listener)

    # ------------------------------------------------------------------ loading

    def load(self) -> int:
        """Fill the cache from the store; returns the revision it is current at.

        Without the cycle collector meanwhile: everything a load makes lives on, and each
        collection on the way walks all that is loaded so far again (10,000 VMs: 0.35 s with
        the server's thresholds, 0.25 s without; the load is most of a server's start after
        its imports)."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            revision = self._store.revision()
            for cls in KIND_BY_NAME.values():
                for obj in self._store.list_objects(cls):
                    self._put(obj)
            return revision
        finally:
            if collecting:
                gc.enable()

    def apply(self, changes: Iterable[Change]) -> None:
        """Apply a batch of changes from the feed: re-read what changed, drop what is gone.

        A change this cache already holds (a controller's own write, taken in by ``put``:
        an object's resource_version is the revision of its last write) is not read again.
        """
        latest: dict[tuple[str, str], Change] = {}
        for change in changes:
            latest[(change.kind, change.name)] = change
        by_kind: dict[str, list[str]] = defaultdict(list)
        for (kind, name), change in latest.items():
            if change.op != "deleted" and kind in KIND_BY_NAME and not self._holds(change):
                by_kind[kind].append(name)
        fresh: dict[tuple[str, str], Resource] = {}
        for kind, names in by_kind.items():
            for name, obj in self._store.get_many(KIND_BY_NAME[kind], names).items():
                fresh[(kind, name)] = obj
        for (kind, name), change in latest.items():
            if kind not in KIND_BY_NAME or self._holds(change):
                continue
            old = self._objects[kind].get(name)
            new = fresh.get((kind, name))
            if (
                old is not None
                and new is not None
                and old.metadata.resource_version >= new.metadata.resource_version
            ):
                continue
            if new is None:
                self._drop(kind, name)
            else:
                self._put(new)
            for listener in self._listeners:
                listener(kind, name, old, new)

    def resync(self) -> int:
        """Every object as the store has it now, for a change feed that lost changes (retention
        pruned them before this process read them): each one held or stored is looked at as if
        it changed at the newest revision, through ``apply`` (read again unless held that new,
        dropped if gone, listeners told). Returns that revision: the feed goes on after it."""
        revision = self._store.revision()
        keys = {(kind, name) for kind, held in self._objects.items() for name in held}
        keys |= {(kind, name) for kind in KIND_BY_NAME for name in self._store.names(kind)}
        self.apply(Change(revision, kind, name, "modified") for kind, name in sorted(keys))
        return revision

    def _holds(self, change: Change) -> bool:
        """This cache has the object at ``change``'s revision or later."""
        held = self._objects[change.kind].get(change.name)
        return held is not None and held.metadata.resource_version >= change.revision

    def _put(self, obj: Resource) -> None:
        kind, name = obj.KIND, obj.metadata.name
        self._unindex(kind, name)
        self.host_generation += kind == "Host"
        self._objects[kind][name] = obj
        if isinstance(obj, VirtualMachine):
            self._vm_by_uid[obj.metadata.uid] = name
            share = HostShare.of(obj)
            if share is not None:
                self._vms_by_host[share.host].add(name)
                self._shares[name] = share
                self._usage[share.host].add(share, +1)
            elif obj.status.phase.value == "Pending":
                self._unscheduled.add(name)
            for disk in obj.spec.disks:
                self._vms_by_volume[disk.volume].add(name)
            if MIGRATION in obj.metadata.annotations:
                self._migrating.add(name)
        elif isinstance(obj, VirtualMachineOperation):
            self._ops_by_vm[obj.spec.vm].add(name)
            if not obj.status.phase.finished:
                self._ops_under_way.add(name)
        elif isinstance(obj, Volume):
            self._volumes_by_pool[obj.spec.pool].add(name)
            if obj.status.attached_vm:
                self._volumes_by_holder[obj.status.attached_vm].add(name)
            self._pool_used_gib[obj.spec.pool] += obj.spec.size_gib
            source = obj.spec.source
            if source is not None and obj.status.phase is not VolumePhase.READY:
                if source.volume:
                    self._copies_of_volume[source.volume].add(name)
                if source.snapshot:
                    self._copies_of_snapshot[source.snapshot].add(name)
            if source is not None and source.linked and source.snapshot:
                self._linked_to_snapshot[source.snapshot].add(name)
            elif source is not None and source.linked and source.volume:
                self._linked_clones[source.volume].add(name)

    def _drop(self, kind: str, name: str) -> None:
        self._unindex(kind, name)
        self.host_generation += kind == "Host"
        self._objects[kind].pop(name, None)

    def _unindex(self, kind: str, name: str) -> None:
        old = self._objects[kind].get(name)
        if isinstance(old, VirtualMachine):
            self._vm_by_uid.pop(old.metadata.uid, None)
            if old.status.host:
                self._vms_by_host[old.status.host].discard(name)
            share = self._shares.pop(name, None)
            if share is not None:  # what it added when it was put (also if it changed since)
                self._usage[share.host].add(share, -1)
            self._unscheduled.discard(name)
            self._migrating.discard(name)
            for disk in old.spec.disks:
                self._vms_by_volume[disk.volume].discard(name)
        elif isinstance(old, VirtualMachineOperation):
            self._ops_by_vm[old.spec.vm].discard(name)
            self._ops_under_way.discard(name)
        elif isinstance(old, Volume):
            self._volumes_by_pool[old.spec.pool].discard(name)
            if old.status.attached_vm:
                self._volumes_by_holder[old.status.attached_vm].discard(name)
            self._pool_used_gib[old.spec.pool] -= old.spec.size_gib
            if old.spec.source is not None:
                self._copies_of_volume[old.spec.source.volume or ""].discard(name)
                self._copies_of_snapshot[old.spec.source.snapshot or ""].discard(name)
                self._linked_clones[old.spec.source.volume or ""].discard(name)
                self._linked_to_snapshot[old.spec.source.snapshot or ""].discard(name)

    def put(self, obj: Resource) -> None:
        """Take a freshly written object in before the feed delivers it (read-your-writes)."""
        current = self._objects[obj.KIND].get(obj.metadata.name)
        if current is None or current.metadata.resource_version < obj.metadata.resource_version:
            self._put(obj)
            for listener in self._listeners:
                listener(obj.KIND, obj.metadata.name, current, obj)

    def gone(self, kind: str, name: str) -> None:
        """Drop an object this process deleted before the feed delivers it (read-your-writes)."""
        current = self._objects[kind].get(name)
        if current is not None:
            self._drop(kind, name)
            for listener in self._listeners:
                listener(kind, name, current, None)

    # ------------------------------------------------------------------ reads

    def get(self, cls: type[R], name: str) -> R | None:
        """The object as held (shared: read it, never change it), or None."""
        obj = self._objects[cls.KIND].get(name)
        return obj if isinstance(obj, cls) else None

    def hosts(self) -> list[Host]:
        return [o for o in self._objects["Host"].values() if isinstance(o, Host)]

    def host(self, name: str) -> Host | None:
        obj = self._objects["Host"].get(name)
        return obj if isinstance(obj, Host) else None

    def host_by_uri(self, uri: str) -> Host | None:
        for host in self.hosts():
            if host.spec.uri == uri:
                return host
        return None

    def pools(self) -> list[StoragePool]:
        return [o for o in self._objects["StoragePool"].values() if isinstance(o, StoragePool)]

    def pool(self, name: str) -> StoragePool | None:
        obj = self._objects["StoragePool"].get(name)
        return obj if isinstance(obj, StoragePool) else None

    def networks(self) -> list[Network]:
        return [o for o in self._objects["Network"].values() if isinstance(o, Network)]

    def network(self, name: str) -> Network | None:
        obj = self._objects["Network"].get(name)
        return obj if isinstance(obj, Network) else None

    def image(self, name: str) -> Image | None:
        obj = self._objects["Image"].get(name)
        return obj if isinstance(obj, Image) else None

    def images(self) -> list[Image]:
        return [o for o in self._objects["Image"].values() if isinstance(o, Image)]

    def volume(self, name: str) -> Volume | None:
        obj = self._objects["Volume"].get(name)
        return obj if isinstance(obj, Volume) else None

    def volumes(self) -> list[Volume]:
        return [o for o in self._objects["Volume"].values() if isinstance(o, Volume)]

    def vm(self, name: str) -> VirtualMachine | None:
        obj = self._objects["VirtualMachine"].get(name)
        return obj if isinstance(obj, VirtualMachine) else None

    def vms(self) -> list[VirtualMachine]:
        return [o for o in self._objects["VirtualMachine"].values() if isinstance(o, VirtualMachine)]

    def vm_names(self) -> list[str]:
        return list(self._objects["VirtualMachine"])

    def names(self, kind: str) -> list[str]:
        return list(self._objects[kind])

    def vm_by_uid(self, uid: str) -> str | None:
        return self._vm_by_uid.get(uid)

    def usage(self, host: str) -> HostUsage:
        """What the VMs recorded on ``host`` hold there (read it; do not change it)."""
        return self._usage.get(host) or HostUsage()

    def vms_on_host(self, host: str) -> list[VirtualMachine]:
        result = []
        for name in self._vms_by_host.get(host, ()):
            vm = self.vm(name)
            if vm is not None:
                result.append(vm)
        return result

    def vms_using_volume(self, volume: str) -> list[str]:
        return sorted(self._vms_by_volume.get(volume, ()))

    def pool_used_gib(self, pool: str) -> int:
        """The sizes of the volumes in ``pool``, summed as volumes come and go (placement reads it
        at every look; a fleet has thousands of volumes)."""
        return self._pool_used_gib.get(pool, 0)

    def volumes_held_by(self, vm: str) -> list[str]:
        """The volumes attached to ``vm`` (their ``status.attached_vm``)."""
        return sorted(self._volumes_by_holder.get(vm, ()))

    def volumes_in_pool(self, pool: str) -> list[str]:
        return sorted(self._volumes_by_pool.get(pool, ()))

    def copies_of_volume(self, volume: str) -> list[str]:
        """The volumes not Ready yet whose ``spec.source.volume`` is ``volume`` (clones to copy)."""
        return sorted(self._copies_of_volume.get(volume, ()))

    def linked_clones_of(self, volume: str) -> list[str]:
        """The linked clones whose backing file is ``volume`` (``spec.source: {volume, linked}``)."""
        return sorted(self._linked_clones.get(volume, ()))

    def linked_to_snapshot(self, snapshot: str) -> list[str]:
        """The linked clones whose backing file is a disk ``snapshot`` saved."""
        return sorted(self._linked_to_snapshot.get(snapshot, ()))

    def copies_of_snapshot(self, snapshot: str) -> list[str]:
        """The volumes not Ready yet whose ``spec.source.snapshot`` is ``snapshot``."""
        return sorted(self._copies_of_snapshot.get(snapshot, ()))

    def unscheduled_vms(self) -> list[str]:
        """VMs that want a host and have none (Pending without a host)."""
        return sorted(self._unscheduled)

    def migrating_vms(self) -> list[VirtualMachine]:
        """The VMs that carry a migration intent (a few, however many VMs there are): what the
        migration slots and the drains count. An unreadable intent is here too: its reader says."""
        found = (self.vm(name) for name in sorted(self._migrating))
        return [vm for vm in found if vm is not None]

    def operations_under_way(self) -> list[VirtualMachineOperation]:
        """Every operation not finished yet (a few, however many VMs and old operations there are)."""
        found = (self._objects["VirtualMachineOperation"].get(name) for name in self._ops_under_way)
        return [op for op in found if isinstance(op, VirtualMachineOperation)]

    def operations_of(self, vm: str) -> list[VirtualMachineOperation]:
        result = []
        for name in self._ops_by_vm.get(vm, ()):
            obj = self._objects["VirtualMachineOperation"].get(name)
            if isinstance(obj, VirtualMachineOperation):
                result.append(obj)
        return result

    def objects(self, cls: type[R]) -> list[R]:
        """Every held object of a kind (shared: read them, never change them)."""
        return [o for o in self._objects[cls.KIND].values() if isinstance(o, cls)]

    def backups(self) -> list[VirtualMachineBackup]:
        return [
            o for o in self._objects["VirtualMachineBackup"].values() if isinstance(o, VirtualMachineBackup)
        ]

    def snapshots(self) -> list[VirtualMachineSnapshot]:
        return [
            o
            for o in self._objects["VirtualMachineSnapshot"].values()
            if isinstance(o, VirtualMachineSnapshot)
        ]
