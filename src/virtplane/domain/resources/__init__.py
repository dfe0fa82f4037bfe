"""The resources users write and the control plane reports on.

Every resource has ``metadata`` / ``spec`` / ``status`` like a Kubernetes
object. The API writes ``metadata`` and ``spec``; controllers write ``status``.
Field names are part of the scripted API (see DESIGN.md §2): snake_case, units
in the name.

One module a kind (``host``, ``virtual_machine``, ...), with its spec, status and
vocabulary; ``registry`` lists them all. The parts every kind shares (metadata,
conditions, ``Resource``) are ``virtplane.domain.base``. Import from this package.
"""

from virtplane.domain.base import (
    API_VERSION,
    Condition,
    ConditionStatus,
    Metadata,
    Name,
    Resource,
    Strict,
    StringMap,
)
from virtplane.domain.networks import Network
from virtplane.domain.resources.event import Event, EventType
from virtplane.domain.resources.host import (
    Allocatable,
    Allocation,
    AllocationRatios,
    Capability,
    Capacity,
    FencePhase,
    FenceStatus,
    FencingSpec,
    Host,
    HostConnection,
    HostResourceState,
    HostSpec,
    HostStatus,
    RedfishFencing,
)
from virtplane.domain.resources.host_maintenance import (
    HostMaintenance,
    HostMaintenanceSpec,
    HostMaintenanceStatus,
    MaintenancePhase,
    MaintenancePlanItem,
    MaintenanceStrategy,
    MaintenanceVMProgress,
)
from virtplane.domain.resources.image import Image, ImageFormat, ImageKind, ImagePhase, ImageSpec, ImageStatus
from virtplane.domain.resources.operation import (
    MigrateSpec,
    OperationPhase,
    OperationType,
    RestoreMode,
    RestoreSpec,
    VirtualMachineOperation,
    VirtualMachineOperationSpec,
    VirtualMachineOperationStatus,
)
from virtplane.domain.resources.registry import KIND_BY_NAME, KIND_BY_PLURAL, KINDS
from virtplane.domain.resources.secret import Secret, SecretSpec, SecretStatus
from virtplane.domain.resources.setting import Setting, SettingSpec, SettingStatus
from virtplane.domain.resources.snapshot import (
    CapturedVM,
    DiskSnapshot,
    SnapshotPhase,
    VirtualMachineSnapshot,
    VirtualMachineSnapshotSpec,
    VirtualMachineSnapshotStatus,
)
from virtplane.domain.resources.storage_pool import (
    PoolContent,
    PoolKind,
    StoragePool,
    StoragePoolSpec,
    StoragePoolStatus,
)
from virtplane.domain.resources.virtual_machine import (
    Boot,
    Disk,
    ExitReason,
    LiveMigrationPolicy,
    MigrationPolicy,
    Placement,
    RunPolicy,
    VirtualMachine,
    VirtualMachineSpec,
    VirtualMachineStatus,
    VMPhase,
)
from virtplane.domain.resources.volume import Volume, VolumePhase, VolumeSource, VolumeSpec, VolumeStatus

__all__ = [
    "API_VERSION",
    "KINDS",
    "KIND_BY_NAME",
    "KIND_BY_PLURAL",
    "Allocatable",
    "Allocation",
    "AllocationRatios",
    "Boot",
    "Capability",
    "Capacity",
    "CapturedVM",
    "Condition",
    "ConditionStatus",
    "Disk",
    "DiskSnapshot",
    "Event",
    "EventType",
    "ExitReason",
    "FencePhase",
    "FenceStatus",
    "FencingSpec",
    "Host",
    "HostConnection",
    "HostMaintenance",
    "HostMaintenanceSpec",
    "HostMaintenanceStatus",
    "HostResourceState",
    "HostSpec",
    "HostStatus",
    "Image",
    "ImageFormat",
    "ImageKind",
    "ImagePhase",
    "ImageSpec",
    "ImageStatus",
    "LiveMigrationPolicy",
    "MaintenancePhase",
    "MaintenancePlanItem",
    "MaintenanceStrategy",
    "MaintenanceVMProgress",
    "Metadata",
    "MigrateSpec",
    "MigrationPolicy",
    "Name",
    "Network",
    "OperationPhase",
    "OperationType",
    "Placement",
    "PoolContent",
    "PoolKind",
    "RedfishFencing",
    "Resource",
    "RestoreMode",
    "RestoreSpec",
    "RunPolicy",
    "Secret",
    "SecretSpec",
    "SecretStatus",
    "Setting",
    "SettingSpec",
    "SettingStatus",
    "SnapshotPhase",
    "StoragePool",
    "StoragePoolSpec",
    "StoragePoolStatus",
    "Strict",
    "StringMap",
    "VMPhase",
    "VirtualMachine",
    "VirtualMachineOperation",
    "VirtualMachineOperationSpec",
    "VirtualMachineOperationStatus",
    "VirtualMachineSnapshot",
    "VirtualMachineSnapshotSpec",
    "VirtualMachineSnapshotStatus",
    "VirtualMachineSpec",
    "VirtualMachineStatus",
    "Volume",
    "VolumePhase",
    "VolumeSource",
    "VolumeSpec",
    "VolumeStatus",
]
