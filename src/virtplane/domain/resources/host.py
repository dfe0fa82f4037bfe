"""A hypervisor host: its address, capacity, state and connection, and what it can do."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, ClassVar

from pydantic import BaseModel, Field

from virtplane.domain.base import Condition, Name, Resource, Strict
from virtplane.domain.names import BMC_SYSTEM_ID, BMC_URL, MIGRATION_ADDRESS
from virtplane.domain.sizes import MIB, accepts_units


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
    HOTPLUG = "hotplug"
    """Disks and NICs attached to and detached from running domains (libvirt's test driver cannot)."""
    BACKUP = "backup"
    """Backups of running domains with checkpoints, full then incremental (QEMU's dirty bitmaps)."""


class Accelerator(StrEnum):
    """What a host's guests run under: ``auto`` is KVM where it is offered and validated, else TCG."""

    AUTO = "auto"
    KVM = "kvm"
    TCG = "tcg"


class AcceleratorStatus(BaseModel):
    """What the host offers and its guests use, and the validation boot's verdict (cached)."""

    offered: list[Accelerator] = Field(
        default_factory=list, description="What libvirt's capabilities offer on the host (kvm, tcg)."
    )
    used: Accelerator | None = Field(
        default=None, description="What new guests are defined with; unset, the host takes no guests."
    )
    kvm_works: bool | None = Field(
        default=None, description="Whether a validation guest booted under KVM; unset: not tried."
    )
    validated_for: str = Field(
        default="", description="The libvirt and QEMU versions and host the verdict holds for."
    )
    validation: str = Field(default="", description="What the validation guest did, when it failed.")


class HostCPU(BaseModel):
    """A CPU as libvirt defines guests with it: a named model and the features it adds."""

    model: str
    vendor: str = ""
    features: list[str] = Field(default_factory=list, description="Required on top of the model.")
    disabled: list[str] = Field(default_factory=list, description="The model's features this CPU lacks.")

    def signature(self) -> str:
        """Equal for identical CPUs (host-passthrough guests migrate only between those)."""
        return f"{self.vendor}/{self.model}/+{','.join(sorted(self.features))}/-{','.join(sorted(self.disabled))}"


class ClusterCPU(HostCPU):
    source: str = Field(
        default="", description="Where it comes from: setting cpu.model, or the baseline of which hosts."
    )


MAX_HOST_MEMORY_MIB = 64 * 1024 * 1024


class Capacity(Strict):
    vcpus: int = Field(ge=1, le=4096)
    memory_mib: Annotated[int, accepts_units(MIB, ge=64, le=MAX_HOST_MEMORY_MIB)] = Field(
        ge=64, le=MAX_HOST_MEMORY_MIB, description="Memory in MiB, or a size with a unit (256Gi)."
    )


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
        pattern=BMC_URL.anchored,
        description="The BMC's base URL, http(s)://HOST[:PORT] (no path, no credentials).",
    )
    system_id: str = Field(
        min_length=1,
        max_length=255,
        pattern=BMC_SYSTEM_ID.anchored,
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
        pattern=MIGRATION_ADDRESS.anchored,
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
    accelerator: Accelerator = Field(
        default=Accelerator.AUTO,
        description="auto: KVM where offered and a validation guest boots under it, else TCG "
        "(or no guests: host.accelerator.kvm_broken); kvm: KVM or no guests; tcg: always TCG.",
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
    accelerator: AcceleratorStatus | None = Field(
        default=None, description="What the host offers and its guests run under (see condition Accelerator)."
    )
    cpu: HostCPU | None = Field(
        default=None, description="The CPU the host's hypervisor offers guests (libvirt's host-model)."
    )
    cluster_cpu: ClusterCPU | None = Field(
        default=None,
        description="The CPU model the host defines cluster-mode VMs with (see setting cpu.model).",
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
