"""The resources users write and the control plane reports on.

Every resource has ``metadata`` / ``spec`` / ``status`` like a Kubernetes
object. The API writes ``metadata`` and ``spec``; controllers write ``status``.
Field names are part of the scripted API (see DESIGN.md §2): snake_case, units
in the name.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, Field, model_validator

from virtplane.domain.base import _LABEL_KEY as _LABEL_KEY
from virtplane.domain.base import API_VERSION as API_VERSION  # re-exported: kinds share the base
from virtplane.domain.base import Condition as Condition
from virtplane.domain.base import ConditionStatus as ConditionStatus
from virtplane.domain.base import Metadata as Metadata
from virtplane.domain.base import Name as Name
from virtplane.domain.base import Resource as Resource
from virtplane.domain.base import Strict as Strict
from virtplane.domain.base import StringMap as StringMap
from virtplane.domain.images import check_image_file
from virtplane.domain.networks import CloudInit, Nic, NicStatus, check_nics
from virtplane.domain.networks import Network as Network
from virtplane.domain.progress import PlanAction, ProgressState

# --------------------------------------------------------------------------- Host


class HostResourceState(StrEnum):
    ENABLED = "Enabled"
    DISABLED = "Disabled"
    PREPARE_FOR_MAINTENANCE = "PrepareForMaintenance"
    ERROR_IN_PREPARE_FOR_MAINTENANCE = "ErrorInPrepareForMaintenance"
    MAINTENANCE = "Maintenance"
    ERROR_IN_MAINTENANCE = "ErrorInMaintenance"


class HostConnection(StrEnum):
    UP = "Up"
    DOWN = "Down"
    DISCONNECTED = "Disconnected"
    UNKNOWN = "Unknown"


class Capability(StrEnum):
    """What a host's driver can do; the drivers declare theirs, the host controller records them."""

    LIVE_MIGRATION = "live-migration"
    BLOCK_MIGRATION = "block-migration"
    MEMORY_SNAPSHOT = "memory-snapshot"
    DISK_SNAPSHOT = "disk-snapshot"
    VOLUME_RESIZE = "volume-resize"
    FAULT_INJECTION = "fault-injection"
    USER_NETWORK = "user-network"
    """QEMU's user-mode network (kind ``user``): the simulator only, see docs/decisions.md."""
    SERIAL_CONSOLE = "serial-console"


class Capacity(Strict):
    vcpus: int = Field(ge=1, le=4096)
    memory_mib: int = Field(ge=64, le=64 * 1024 * 1024)


class AllocationRatios(BaseModel):
    """The settings host.cpu_allocation_ratio and host.memory_allocation_ratio as they apply to a host."""

    cpu: float
    memory: float


class Allocatable(BaseModel):
    """What placement may give out on a host: its capacity times the allocation ratios."""

    vcpus: int = 0
    memory_mib: int = 0


class Allocation(BaseModel):
    vcpus: int = 0
    memory_mib: int = 0
    vms: int = 0


class RedfishFencing(Strict):
    """The host's BMC, reached over Redfish (DMTF), that can power the host off."""

    address: str = Field(
        max_length=1024,
        pattern=r"^https?://[^\s/?#@]+(:\d{1,5})?/?$",
        description="The BMC's base URL, http(s)://HOST[:PORT] (no path, no credentials).",
    )
    system_id: str = Field(
        min_length=1,
        max_length=255,
        pattern=r"^[A-Za-z0-9._~-]+$",
        description="The host's ComputerSystem id on the BMC (the last part of /redfish/v1/Systems/ID).",
    )
    credentials_secret: Name = Field(description="A Secret with the BMC's username and password.")
    verify_tls: bool = Field(default=True, description="Check the BMC's TLS certificate.")


class FencingSpec(Strict):
    redfish: RedfishFencing | None = None


class HostSpec(Strict):
    uri: str = Field(
        min_length=1, max_length=1024, description="libvirt URI, or sim://NAME for a simulated host"
    )
    migration_address: str | None = Field(
        default=None,
        max_length=253,
        pattern=r"^(\[?[0-9A-Fa-f:.]+\]?|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)$",
        description="The IP address or name on which this host receives live-migration data; "
        "unset, libvirt uses the host's own hostname.",
    )
    cluster: Name = "default"
    capacity: Capacity | None = Field(default=None, description="Overrides what the hypervisor reports.")
    enabled: bool = Field(default=True, description="False disables the host (no new VMs).")
    fenced: bool = Field(
        default=False,
        description="Set by an admin once the host is known to be powered off (fenced): its VMs on "
        "shared storage are recovered on other hosts as after a host failure. Unset it when the host is back.",
    )
    fencing: FencingSpec | None = Field(
        default=None,
        description="How to power the host off when it fails (its BMC); without it, a failed host "
        "waits for an admin to set spec.fenced.",
    )


class FencePhase(StrEnum):
    POWERING_OFF = "PoweringOff"
    """Recorded before the BMC is asked to power the host off; carried through once recorded."""
    RETRYING = "Retrying"
    """The BMC did not power the host off, or did not confirm Off; next try at next_attempt_at."""
    FENCED = "Fenced"
    """The BMC confirmed Off: spec.fenced is set, until an admin clears it."""


class FenceStatus(BaseModel):
    phase: FencePhase
    attempts: int = 0
    started_at: datetime | None = None
    next_attempt_at: datetime | None = None
    confirmed_at: datetime | None = None
    reason: str = ""
    message: str = ""


class HostStatus(BaseModel):
    resource_state: HostResourceState = HostResourceState.ENABLED
    connection: HostConnection = HostConnection.UNKNOWN
    capacity: Capacity | None = None
    allocation_ratios: AllocationRatios | None = None
    allocatable: Allocatable | None = None
    allocated: Allocation = Field(default_factory=Allocation)
    capabilities: list[Capability] = Field(
        default_factory=list, description="What the host's driver can do, recorded when it connects."
    )
    bridges: list[str] = Field(
        default_factory=list, description="The Linux bridges the host reports (for bridge networks)."
    )
    last_heartbeat: datetime | None = None
    silent_since: datetime | None = Field(
        default=None, description="Since when the host has not answered, without a break (liveness)."
    )
    answering_since: datetime | None = Field(
        default=None, description="Since when the host has answered, without a break (liveness)."
    )
    fence: FenceStatus | None = Field(default=None, description="Fencing through the BMC, when under way.")
    conditions: list[Condition] = Field(default_factory=list)
    message: str = ""


class Host(Resource):
    KIND: ClassVar[str] = "Host"
    PLURAL: ClassVar[str] = "hosts"
    spec: HostSpec
    status: HostStatus = Field(default_factory=HostStatus)


# --------------------------------------------------------------------------- StoragePool


class PoolKind(StrEnum):
    LOCAL = "local"
    SHARED = "shared"


class PoolContent(StrEnum):
    """What a pool holds: VM volumes (virtplane's own files) or an image library (an admin's files)."""

    VOLUMES = "volumes"
    IMAGES = "images"


class StoragePoolSpec(Strict):
    kind: PoolKind
    content: PoolContent = Field(
        default=PoolContent.VOLUMES,
        description="volumes: VM disks that virtplane creates; images: an image library whose files an "
        "admin places and names with Image resources. Cannot change once the pool exists.",
    )
    host: Name | None = Field(default=None, description="The host of a local pool.")
    hosts: list[Name] = Field(default_factory=list, description="Hosts that see a shared pool.")
    cluster: Name | None = Field(default=None, description="All hosts of this cluster see the shared pool.")
    capacity_gib: int = Field(ge=1, le=1024 * 1024)
    driver_pool: str = Field(
        default="",
        max_length=255,
        pattern=r"^[A-Za-z0-9_.-]*$",
        description="Pool name on the hypervisor (default: the resource name). Local pools with the "
        "same driver_pool on different hosts are where block migration copies disks to.",
    )
    path: str | None = Field(
        default=None,
        max_length=1024,
        pattern=r"^/[^\x00]*$",
        description="Directory of the pool on the host (libvirt dir pools).",
    )

    @model_validator(mode="after")
    def _check_scope(self) -> StoragePoolSpec:
        if self.kind is PoolKind.LOCAL:
            if not self.host:
                raise ValueError("a local pool needs spec.host")
            if self.hosts or self.cluster:
                raise ValueError("a local pool takes spec.host, not spec.hosts or spec.cluster")
        else:
            if self.host:
                raise ValueError("a shared pool takes spec.hosts or spec.cluster, not spec.host")
            if not self.hosts and not self.cluster:
                raise ValueError("a shared pool needs spec.hosts or spec.cluster")
        return self


class StoragePoolStatus(BaseModel):
    capacity_gib: int = 0
    used_gib: int = 0
    reachable_hosts: list[str] = Field(default_factory=list)


class StoragePool(Resource):
    KIND: ClassVar[str] = "StoragePool"
    PLURAL: ClassVar[str] = "storagepools"
    spec: StoragePoolSpec
    status: StoragePoolStatus = Field(default_factory=StoragePoolStatus)


# --------------------------------------------------------------------------- Volume


class VolumeSource(Strict):
    image: Name | None = Field(default=None, description="The name of an Image (kind Disk) to copy.")
    snapshot: Name | None = Field(default=None, description="A VirtualMachineSnapshot to copy a disk from.")


class VolumeSpec(Strict):
    pool: Name
    size_gib: int = Field(ge=1, le=64 * 1024)
    source: VolumeSource | None = None


class VolumePhase(StrEnum):
    PENDING = "Pending"
    READY = "Ready"
    FAILED = "Failed"


class VolumeStatus(BaseModel):
    phase: VolumePhase = VolumePhase.PENDING
    path: str = ""
    file: str = Field(default="", description="The file virtplane created for this volume in its pool.")
    size_gib: int = 0
    attached_vm: str | None = None
    message: str = ""


class Volume(Resource):
    KIND: ClassVar[str] = "Volume"
    PLURAL: ClassVar[str] = "volumes"
    spec: VolumeSpec
    status: VolumeStatus = Field(default_factory=VolumeStatus)


# --------------------------------------------------------------------------- Image


class ImageKind(StrEnum):
    DISK = "Disk"
    KERNEL = "Kernel"
    INITRD = "Initrd"


class ImageFormat(StrEnum):
    QCOW2 = "qcow2"
    RAW = "raw"


class ImageSpec(Strict):
    pool: Name = Field(description="A StoragePool with content: images (an image library).")
    file: Annotated[str, AfterValidator(check_image_file)] = Field(
        description="The file's name inside the library pool: a plain name, never a path."
    )
    kind: ImageKind
    format: ImageFormat | None = Field(
        default=None, description="Disk images: qcow2 (the default) or raw. Kernels and initrds are raw."
    )

    @model_validator(mode="after")
    def _check_format(self) -> ImageSpec:
        if self.kind is not ImageKind.DISK and self.format is ImageFormat.QCOW2:
            raise ValueError("kernels and initrds are raw files: leave spec.format out or set raw")
        return self

    @property
    def effective_format(self) -> ImageFormat:
        if self.format is not None:
            return self.format
        return ImageFormat.QCOW2 if self.kind is ImageKind.DISK else ImageFormat.RAW


class ImagePhase(StrEnum):
    PENDING = "Pending"
    READY = "Ready"
    FAILED = "Failed"


class ImageStatus(BaseModel):
    phase: ImagePhase = ImagePhase.PENDING
    size_bytes: int = 0
    virtual_size_gib: int = Field(default=0, description="Disk images: the smallest volume they fit.")
    hosts: list[str] = Field(default_factory=list, description="Hosts where the file was checked and found.")
    message: str = ""
    observed_generation: int = 0


class Image(Resource):
    KIND: ClassVar[str] = "Image"
    PLURAL: ClassVar[str] = "images"
    spec: ImageSpec
    status: ImageStatus = Field(default_factory=ImageStatus)


# --------------------------------------------------------------------------- VirtualMachine


class RunPolicy(StrEnum):
    ALWAYS_ON = "AlwaysOn"
    ALWAYS_OFF = "AlwaysOff"
    MANUAL = "Manual"
    ALWAYS_ON_UNLESS_STOPPED_MANUALLY = "AlwaysOnUnlessStoppedManually"


class LiveMigrationPolicy(StrEnum):
    ALLOWED = "Allowed"
    NEVER = "Never"


class VMPhase(StrEnum):
    PENDING = "Pending"
    STARTING = "Starting"
    RUNNING = "Running"
    STOPPING = "Stopping"
    STOPPED = "Stopped"
    MIGRATING = "Migrating"
    PAUSED = "Paused"
    DEGRADED = "Degraded"


class ExitReason(StrEnum):
    GUEST_SHUTDOWN = "guest-shutdown"
    GUEST_RESET = "guest-reset"
    CRASH = "crash"
    HOST_FAILURE = "host-failure"
    STOPPED_BY_USER = "stopped-by-user"
    STOPPED_BY_SYSTEM = "stopped-by-system"
    VANISHED = "vanished"
    START_FAILED = "start-failed"


class Disk(Strict):
    volume: Name
    boot_order: int | None = Field(default=None, ge=1, le=64)


class Placement(Strict):
    host_affinity: list[Name] = Field(default_factory=list, description="Run only on these hosts.")
    anti_affinity_group: Name | None = Field(default=None, description="VMs of a group never share a host.")


class Boot(Strict):
    """Direct kernel boot: the kernel and initrd are Images from the image library, by name."""

    kernel: Name = Field(description="The name of an Image of kind Kernel.")
    initrd: Name | None = Field(default=None, description="The name of an Image of kind Initrd.")
    cmdline: str = Field(default="", max_length=4096)


class VirtualMachineSpec(Strict):
    run_policy: RunPolicy = RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY
    cpu: int = Field(default=1, ge=1, le=256)
    memory_mib: int = Field(default=512, ge=16, le=4 * 1024 * 1024)
    disks: list[Disk] = Field(default_factory=list, max_length=32)
    live_migration_policy: LiveMigrationPolicy = LiveMigrationPolicy.ALLOWED
    placement: Placement = Field(default_factory=Placement)
    termination_grace_period_s: int = Field(default=60, ge=0, le=3600)
    boot: Boot | None = None
    recovery_priority: int = Field(
        default=0,
        ge=0,
        le=1000,
        description="After a host failure, VMs with a higher priority start elsewhere first.",
    )
    nics: Annotated[list[Nic], AfterValidator(check_nics)] = Field(default_factory=list, max_length=16)
    cloud_init: CloudInit | None = Field(
        default=None, description="First-boot configuration: a NoCloud seed attached as a read-only CD-ROM."
    )

    @model_validator(mode="after")
    def _unique_disks(self) -> VirtualMachineSpec:
        names = [d.volume for d in self.disks]
        if len(names) != len(set(names)):
            raise ValueError("a volume is listed twice in spec.disks")
        return self


class VirtualMachineStatus(BaseModel):
    phase: VMPhase = VMPhase.PENDING
    host: str | None = None
    conditions: list[Condition] = Field(default_factory=list)
    last_exit: ExitReason | None = None
    last_exit_at: datetime | None = None
    observed_generation: int = 0
    start_failures: int = Field(default=0, description="Start attempts since the VM last reached Running.")
    next_start_at: datetime | None = None
    stopping_since: datetime | None = None
    nics: list[NicStatus] = Field(default_factory=list, description="Each NIC's network, MAC and address.")
    message: str = ""


class VirtualMachine(Resource):
    KIND: ClassVar[str] = "VirtualMachine"
    PLURAL: ClassVar[str] = "vms"
    spec: VirtualMachineSpec = Field(default_factory=VirtualMachineSpec)
    status: VirtualMachineStatus = Field(default_factory=VirtualMachineStatus)


# --------------------------------------------------------------------------- Snapshot


class SnapshotPhase(StrEnum):
    PENDING = "Pending"
    IN_PROGRESS = "InProgress"
    READY = "Ready"
    FAILED = "Failed"


class VirtualMachineSnapshotSpec(Strict):
    vm: Name
    with_memory: bool = False
    required_consistency: bool = False


class CapturedVM(BaseModel):
    spec: VirtualMachineSpec
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class DiskSnapshot(BaseModel):
    volume: str
    handle: str = Field(description="Driver-owned reference to the saved disk content.")
    size_gib: int = 0


class VirtualMachineSnapshotStatus(BaseModel):
    phase: SnapshotPhase = SnapshotPhase.PENDING
    captured: CapturedVM | None = None
    disk_snapshots: list[DiskSnapshot] = Field(default_factory=list)
    memory_handle: str | None = None
    power_state: Literal["Running", "Stopped"] | None = None
    host: str | None = None
    message: str = ""
    conditions: list[Condition] = Field(default_factory=list)


class VirtualMachineSnapshot(Resource):
    KIND: ClassVar[str] = "VirtualMachineSnapshot"
    PLURAL: ClassVar[str] = "snapshots"
    spec: VirtualMachineSnapshotSpec
    status: VirtualMachineSnapshotStatus = Field(default_factory=VirtualMachineSnapshotStatus)


# --------------------------------------------------------------------------- Operation


class OperationType(StrEnum):
    START = "Start"
    STOP = "Stop"
    RESTART = "Restart"
    MIGRATE = "Migrate"
    EVICT = "Evict"
    RESTORE = "Restore"


class RestoreMode(StrEnum):
    DRY_RUN = "DryRun"
    STRICT = "Strict"
    BEST_EFFORT = "BestEffort"


class RestoreSpec(Strict):
    snapshot: Name
    mode: RestoreMode = RestoreMode.STRICT


class MigrateSpec(Strict):
    target_host: Name | None = None


class OperationPhase(StrEnum):
    PENDING = "Pending"
    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    FAILED = "Failed"
    SUPERSEDED = "Superseded"

    @property
    def finished(self) -> bool:
        return self in (OperationPhase.COMPLETED, OperationPhase.FAILED, OperationPhase.SUPERSEDED)


class VirtualMachineOperationSpec(Strict):
    vm: Name
    type: OperationType
    force: bool = False
    restore: RestoreSpec | None = None
    migrate: MigrateSpec | None = None

    @model_validator(mode="after")
    def _check_params(self) -> VirtualMachineOperationSpec:
        if self.type is OperationType.RESTORE and self.restore is None:
            raise ValueError("a Restore operation needs spec.restore.snapshot")
        if self.type is not OperationType.RESTORE and self.restore is not None:
            raise ValueError("spec.restore is only for type Restore")
        if self.migrate is not None and self.type not in (OperationType.MIGRATE, OperationType.EVICT):
            raise ValueError("spec.migrate is only for type Migrate or Evict")
        return self


class VirtualMachineOperationStatus(BaseModel):
    phase: OperationPhase = OperationPhase.PENDING
    step: str = ""
    conditions: list[Condition] = Field(default_factory=list)
    progress: dict[str, Any] = Field(default_factory=dict)
    message: str = ""
    reason: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None


class VirtualMachineOperation(Resource):
    KIND: ClassVar[str] = "VirtualMachineOperation"
    PLURAL: ClassVar[str] = "operations"
    spec: VirtualMachineOperationSpec
    status: VirtualMachineOperationStatus = Field(default_factory=VirtualMachineOperationStatus)


# --------------------------------------------------------------------------- HostMaintenance


class MaintenanceStrategy(StrEnum):
    """What maintenance does with running VMs that have local disks (DESIGN.md §5.2)."""

    ERROR = "Error"
    MIGRATION = "Migration"
    FORCE_STOP = "ForceStop"
    STOP = "Stop"


class MaintenancePhase(StrEnum):
    PLANNED = "Planned"  # dry run: the plan only
    DRAINING = "Draining"
    COMPLETED = "Completed"  # the host is in Maintenance
    FAILED = "Failed"  # the host is in ErrorInMaintenance
    CANCELLING = "Cancelling"
    CANCELLED = "Cancelled"


class HostMaintenanceSpec(Strict):
    host: Name
    strategy: MaintenanceStrategy | None = Field(
        default=None, description="Overrides the setting host.maintenance.local.storage.strategy."
    )
    dry_run: bool = False
    cancel: bool = Field(default=False, description="Set to cancel: the host returns to Enabled.")
    return_vms: bool | None = Field(
        default=None,
        description="On cancel: migrate back the VMs that left. Overrides the setting host.maintenance.return_vms.",
    )
    request: int = Field(
        default=1, ge=1, description="Bumped by each repeated request; a new value retries a failed drain."
    )


class MaintenancePlanItem(BaseModel):
    vm: str
    action: PlanAction
    target: str | None = None
    reason: str = ""


class MaintenanceVMProgress(BaseModel):
    state: ProgressState = ProgressState.PENDING  # changed only through domain.progress.advance
    target: str | None = None
    attempts: int = 0
    tried: list[str] = Field(default_factory=list)
    progress_pct: float = 0.0
    message: str = ""


class HostMaintenanceStatus(BaseModel):
    phase: MaintenancePhase = MaintenancePhase.DRAINING
    strategy: MaintenanceStrategy | None = None
    plan: list[MaintenancePlanItem] = Field(default_factory=list)
    progress: dict[str, MaintenanceVMProgress] = Field(default_factory=dict)
    stopped_vms: list[str] = Field(default_factory=list)
    migrated_vms: dict[str, str] = Field(default_factory=dict)  # vm -> target, for return_vms
    blocking: list[str] = Field(default_factory=list)
    message: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    observed_generation: int = 0


class HostMaintenance(Resource):
    KIND: ClassVar[str] = "HostMaintenance"
    PLURAL: ClassVar[str] = "maintenances"
    spec: HostMaintenanceSpec
    status: HostMaintenanceStatus = Field(default_factory=HostMaintenanceStatus)


# --------------------------------------------------------------------------- Setting


class SettingSpec(Strict):
    value: Any = None
    clusters: dict[Name, Any] = Field(
        default_factory=dict, description="Cluster -> value, for settings of scope host."
    )
    hosts: dict[Name, Any] = Field(
        default_factory=dict, description="Host -> value, for settings of scope host."
    )


class SettingStatus(BaseModel):
    type: str = ""
    default: Any = None
    allowed: list[Any] | None = None
    description: str = ""
    scope: str = "global"


class Setting(Resource):
    KIND: ClassVar[str] = "Setting"
    PLURAL: ClassVar[str] = "settings"
    NAME_IS_DNS_LABEL: ClassVar[bool] = False
    spec: SettingSpec = Field(default_factory=SettingSpec)
    status: SettingStatus = Field(default_factory=SettingStatus)


# --------------------------------------------------------------------------- Secret


class SecretSpec(Strict):
    """Credentials (a BMC's). Write-only: the API never returns ``password``."""

    username: str = Field(min_length=1, max_length=255)
    password: str | None = Field(
        default=None,
        max_length=1024,
        repr=False,  # never in a log line or a traceback
        description="Required on create; a write without it keeps the stored one. Never returned.",
    )


class SecretStatus(BaseModel):
    password_set: bool = False


class Secret(Resource):
    KIND: ClassVar[str] = "Secret"
    PLURAL: ClassVar[str] = "secrets"
    spec: SecretSpec
    status: SecretStatus = Field(default_factory=SecretStatus)


# --------------------------------------------------------------------------- Event


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


class Event(BaseModel):
    """One line of the append-only audit trail; never updated."""

    id: int = 0
    time: datetime | None = None
    kind: str
    name: str
    type: EventType = EventType.NORMAL
    reason: str
    message: str = ""


# --------------------------------------------------------------------------- registry

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
)
KIND_BY_NAME: dict[str, type[Resource]] = {k.KIND: k for k in KINDS}
KIND_BY_PLURAL: dict[str, type[Resource]] = {k.PLURAL: k for k in KINDS}
