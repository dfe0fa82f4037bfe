"""Every kind, by its kind name and by its plural (the API's paths)."""

from __future__ import annotations

from virtplane.domain.base import Resource
from virtplane.domain.networks import Network
from virtplane.domain.resources.backup import BackupTarget, VirtualMachineBackup
from virtplane.domain.resources.backup_policy import BackupPolicy
from virtplane.domain.resources.host import Host
from virtplane.domain.resources.host_maintenance import HostMaintenance
from virtplane.domain.resources.image import Image
from virtplane.domain.resources.operation import VirtualMachineOperation
from virtplane.domain.resources.placement_rule import PlacementRule
from virtplane.domain.resources.secret import Secret
from virtplane.domain.resources.setting import Setting
from virtplane.domain.resources.snapshot import VirtualMachineSnapshot
from virtplane.domain.resources.storage_pool import StoragePool
from virtplane.domain.resources.virtual_machine import VirtualMachine
from virtplane.domain.resources.volume import Volume

KINDS: tuple[type[Resource], ...] = (
    Host,
    StoragePool,
    Image,
    Network,
    Volume,
    VirtualMachine,
    VirtualMachineSnapshot,
    VirtualMachineOperation,
    HostMaintenance,
    Setting,
    Secret,
    BackupTarget,
    VirtualMachineBackup,
    BackupPolicy,
    PlacementRule,
)
KIND_BY_NAME: dict[str, type[Resource]] = {k.KIND: k for k in KINDS}
KIND_BY_PLURAL: dict[str, type[Resource]] = {k.PLURAL: k for k in KINDS}
