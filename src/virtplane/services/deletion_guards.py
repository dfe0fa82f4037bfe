"""What may not be deleted while something else uses it: one guard per kind, as a table.

Each guard raises ``Refused`` (409) naming who holds the object, so the caller knows what to
delete or move first; a kind without a guard is deleted (its controller cleans up behind).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from virtplane.domain.backup_restore import read_by
from virtplane.domain.errors import Refused
from virtplane.domain.linked import backing_refusal
from virtplane.domain.networks import Network
from virtplane.domain.resources import (
    BackupPolicy,
    BackupTarget,
    Host,
    Image,
    OperationPhase,
    Secret,
    StoragePool,
    VirtualMachineBackup,
    VirtualMachineOperation,
    VirtualMachineSnapshot,
    Volume,
    VolumePhase,
)
from virtplane.runtime.cache import Cache
from virtplane.services.networks import NetworkAdmission
from virtplane.store.store import Store

__all__ = ["DELETION_GUARDS", "InUse"]


@dataclass(frozen=True)
class InUse:
    """Where the guards look: the store (read-your-writes) and the cache (indexes)."""

    store: Store
    cache: Cache
    networks: NetworkAdmission


def _backup(at: InUse, backup: VirtualMachineBackup) -> None:
    name = backup.metadata.name
    refusal = read_by(name, at.store.list_objects(VirtualMachineOperation), at.cache.volumes())
    if refusal is not None:
        raise refusal
    builders = sorted(
        b.metadata.name
        for b in at.store.list_objects(VirtualMachineBackup)
        if b.status.base == name and b.metadata.deletion_requested_at is None
    )
    if builders:
        raise Refused(
            "BackupInUse", f"backup {name} is the base of {', '.join(builders)}; delete those first"
        )


def _backup_target(at: InUse, target: BackupTarget) -> None:
    name = target.metadata.name
    held = sorted(
        b.metadata.name for b in at.store.list_objects(VirtualMachineBackup) if b.spec.target == name
    )
    if held:
        raise Refused("TargetInUse", f"backup target {name} holds {len(held)} backup(s), e.g. {held[0]}")
    policies = sorted(p.metadata.name for p in at.store.list_objects(BackupPolicy) if p.spec.target == name)
    if policies:
        raise Refused("TargetInUse", f"backup policy {policies[0]} writes to backup target {name}")


def _volume(at: InUse, volume: Volume) -> None:
    name = volume.metadata.name
    linked = backing_refusal(name, at.cache.linked_clones_of(name))
    if linked is not None:
        raise linked
    users = [vm.metadata.name for vm in at.cache.vms() if any(d.volume == name for d in vm.spec.disks)]
    if users:
        raise Refused("VolumeInUse", f"volume {name} is a disk of VM {', '.join(sorted(users))}")
    copies = sorted(
        v.metadata.name
        for v in at.cache.volumes()
        if v.spec.source
        and v.spec.source.volume == name
        and not v.spec.source.snapshot
        and v.status.phase is not VolumePhase.READY
    )
    if copies:
        raise Refused("VolumeInUse", f"volume {name} is being copied to {', '.join(copies)}")


def _pool(at: InUse, pool: StoragePool) -> None:
    name = pool.metadata.name
    volumes = [v.metadata.name for v in at.cache.volumes() if v.spec.pool == name]
    if volumes:
        raise Refused("PoolInUse", f"pool {name} still holds {len(volumes)} volume(s), e.g. {volumes[0]}")
    images = [i.metadata.name for i in at.cache.images() if i.spec.pool == name]
    if images:
        raise Refused("PoolInUse", f"pool {name} still holds {len(images)} image(s), e.g. {images[0]}")


def _image(at: InUse, image: Image) -> None:
    name = image.metadata.name
    users = sorted(
        vm.metadata.name
        for vm in at.cache.vms()
        if name == vm.spec.cdrom
        or (vm.spec.boot is not None and name in (vm.spec.boot.kernel, vm.spec.boot.initrd))
    ) + sorted(
        v.metadata.name
        for v in at.cache.volumes()
        if v.spec.source and v.spec.source.image == name and v.status.phase is not VolumePhase.READY
    )
    if users:
        raise Refused("ImageInUse", f"image {name} is used by {', '.join(users)}")


def _secret(at: InUse, secret: Secret) -> None:
    name = secret.metadata.name
    users = sorted(
        h.metadata.name
        for h in at.cache.hosts()
        if h.spec.fencing and h.spec.fencing.redfish and h.spec.fencing.redfish.credentials_secret == name
    )
    if users:
        raise Refused("SecretInUse", f"secret {name} holds the BMC credentials of {', '.join(users)}")


def _network(at: InUse, network: Network) -> None:
    users = at.networks.network_users(network.metadata.name)
    if users:
        raise Refused("NetworkInUse", f"network {network.metadata.name} is used by VM {', '.join(users)}")


def _host(at: InUse, host: Host) -> None:
    name = host.metadata.name
    vms = at.cache.vms_on_host(name)
    if vms:
        raise Refused(
            "HostInUse",
            f"host {name} still has {len(vms)} VM(s); move or delete them first (e.g. {vms[0].metadata.name})",
        )


def _snapshot(at: InUse, snapshot: VirtualMachineSnapshot) -> None:
    name = snapshot.metadata.name
    copies = sorted(
        v.metadata.name
        for v in at.cache.volumes()
        if v.spec.source and v.spec.source.snapshot == name and v.status.phase is not VolumePhase.READY
    )
    if copies:
        raise Refused("SnapshotInUse", f"snapshot {name} is being copied to {', '.join(copies)}")
    linked_to = backing_refusal(name, at.cache.linked_to_snapshot(name), kind="snapshot")
    if linked_to is not None:
        raise linked_to


def _operation(at: InUse, op: VirtualMachineOperation) -> None:
    if op.status.phase is OperationPhase.IN_PROGRESS:
        raise Refused(
            "OperationInProgress", f"operation {op.metadata.name} is in progress; wait for it to finish"
        )


Guard = Callable[[InUse, Any], None]
DELETION_GUARDS: Mapping[type, Guard] = MappingProxyType(
    {
        VirtualMachineBackup: _backup,
        BackupTarget: _backup_target,
        Volume: _volume,
        StoragePool: _pool,
        Image: _image,
        Secret: _secret,
        Network: _network,
        Host: _host,
        VirtualMachineSnapshot: _snapshot,
        VirtualMachineOperation: _operation,
    }
)
