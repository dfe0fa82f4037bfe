"""Checks on API writes that need more than field validation: references, applicability, immutability.

The API calls these before writing; the controllers re-check what they act on,
since the world may change between the two.
"""

from __future__ import annotations

from virtplane.api.errors import ApiError
from virtplane.controllers.attachments import attached_elsewhere
from virtplane.controllers.operations import active_before
from virtplane.domain.intents import read_intents
from virtplane.domain.operations import admit
from virtplane.domain.resources import (
    Host,
    Resource,
    StoragePool,
    VirtualMachine,
    VirtualMachineOperation,
    VirtualMachineSnapshot,
    Volume,
)
from virtplane.runtime.cache import Cache
from virtplane.store.store import Store

IMMUTABLE_SPEC = (VirtualMachineOperation, VirtualMachineSnapshot)


class Admission:
    def __init__(self, store: Store, cache: Cache) -> None:
        self.store = store
        self.cache = cache

    def on_create(self, obj: Resource) -> Resource:
        if isinstance(obj, VirtualMachineOperation):
            self._admit_operation(obj)
        elif isinstance(obj, VirtualMachineSnapshot) and self.store.find(VirtualMachine, obj.spec.vm) is None:
            raise ApiError(422, "VMNotFound", f"VM {obj.spec.vm} does not exist")
        elif isinstance(obj, Volume) and self.store.find(StoragePool, obj.spec.pool) is None:
            raise ApiError(422, "PoolNotFound", f"storage pool {obj.spec.pool} does not exist")
        elif isinstance(obj, VirtualMachine):
            self._admit_disks(obj, set())
        return obj

    def _admit_disks(self, vm: VirtualMachine, already: set[str]) -> None:
        """A volume is a disk of one VM at a time: refuse one that another live VM holds or lists.

        Two writes may still race past this check; the Volume controller then attaches the
        volume to one of them and the other waits (controllers.attachments)."""
        for disk in vm.spec.disks:
            if disk.volume in already:
                continue
            volume = self.store.find(Volume, disk.volume)
            holder = volume.status.attached_vm if volume else None
            owner = attached_elsewhere(self.cache, disk.volume, vm.metadata.name, holder)
            if owner is not None:
                raise ApiError(
                    409,
                    "VolumeAttached",
                    f"volume {disk.volume} is attached to VM {owner}; a volume is a disk of one VM at a time",
                )

    def _admit_operation(self, op: VirtualMachineOperation) -> None:
        vm = self.store.find(VirtualMachine, op.spec.vm)
        if vm is None:
            raise ApiError(422, "VMNotFound", f"VM {op.spec.vm} does not exist")
        ops = self.cache.operations_of(vm.metadata.name)
        admission = admit(
            op.spec.type,
            op.spec.force,
            vm.spec.run_policy,
            vm.status.phase,
            active_before(ops, op),
            held=bool(read_intents(vm.metadata.annotations).held_by),
        )
        if not admission.allowed:
            raise ApiError(409, admission.reason, admission.message)

    def on_update(self, current: Resource, new: Resource) -> Resource:
        if isinstance(current, IMMUTABLE_SPEC) and current.spec != new.spec:  # type: ignore[attr-defined]
            raise ApiError(422, "Immutable", f"the spec of a {current.KIND} cannot change; create a new one")
        if isinstance(current, VirtualMachine) and isinstance(new, VirtualMachine):
            self._admit_disks(new, {d.volume for d in current.spec.disks})
        return new

    def on_delete(self, current: Resource) -> None:
        name = current.metadata.name
        if isinstance(current, Volume):
            users = [
                vm.metadata.name for vm in self.cache.vms() if any(d.volume == name for d in vm.spec.disks)
            ]
            if users:
                raise ApiError(
                    409, "VolumeInUse", f"volume {name} is a disk of VM {', '.join(sorted(users))}"
                )
        elif isinstance(current, StoragePool):
            volumes = [v.metadata.name for v in self.cache.volumes() if v.spec.pool == name]
            if volumes:
                raise ApiError(
                    409, "PoolInUse", f"pool {name} still holds {len(volumes)} volume(s), e.g. {volumes[0]}"
                )
        elif isinstance(current, Host):
            vms = self.cache.vms_on_host(name)
            if vms:
                raise ApiError(
                    409,
                    "HostInUse",
                    f"host {name} still has {len(vms)} VM(s); move or delete them first (e.g. {vms[0].metadata.name})",
                )
        elif isinstance(current, VirtualMachineOperation) and current.status.phase.value == "InProgress":
            raise ApiError(
                409, "OperationInProgress", f"operation {name} is in progress; wait for it to finish"
            )
