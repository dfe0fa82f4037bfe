"""A virtual machine: what it runs, how it runs, and where it is."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, Field, model_validator

from virtplane.domain.base import Condition, Name, Resource, Strict
from virtplane.domain.networks import CloudInit, Nic, NicStatus, check_nics
from virtplane.domain.sizes import MIB, accepts_units, renamed_size
from virtplane.domain.vocabulary import RunPolicy


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


class CpuMode(StrEnum):
    CLUSTER = "cluster"
    """The CPU model of the VM's cluster (a baseline of its hosts, or setting cpu.model): migrates anywhere in it."""
    HOST_PASSTHROUGH = "host-passthrough"
    """The host's own CPU: needs KVM, and migrates only to hosts with the identical CPU."""


class MigrationPolicy(Strict):
    """How a live migration of the VM is made to converge. An unset field takes the setting
    ``migration.<field>`` of the VM's host (its own value, else its cluster's, else the global)."""

    auto_converge: bool | None = Field(
        default=None,
        description="Slow the guest's vCPUs while pre-copy does not converge (libvirt's auto-converge).",
    )
    post_copy_after_s: int | None = Field(
        default=None,
        ge=0,
        le=86400,
        description="Switch to post-copy after this many seconds without convergence; 0 never. "
        "RISK: during post-copy the guest's memory is split between the two hosts, and a failure "
        "of either host or of the link between them loses the guest.",
    )
    max_downtime_ms: int | None = Field(
        default=None, ge=0, le=60_000, description="Longest pause of the switch-over; 0 the hypervisor's."
    )
    bandwidth_mib_s: int | None = Field(
        default=None, ge=0, le=1_000_000, description="Bandwidth limit of the migration; 0 none."
    )


MAX_MEMORY_MIB = 4 * 1024 * 1024


class VirtualMachineSpec(Strict):
    run_policy: RunPolicy = RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY
    cpu: int = Field(default=1, ge=1, le=256)
    cpu_mode: CpuMode = Field(
        default=CpuMode.CLUSTER,
        description="cluster: the cluster's CPU model, so the VM can live-migrate to any host of its "
        "cluster; host-passthrough: the host's CPU (KVM only; migrates only to identical CPUs).",
    )
    memory_mib: Annotated[int, accepts_units(MIB, ge=16, le=MAX_MEMORY_MIB)] = Field(
        default=512,
        ge=16,
        le=MAX_MEMORY_MIB,
        description="Memory in MiB, or a size with a unit (4Gi, 512Mi); ``memory: 4Gi`` also works.",
    )
    disks: list[Disk] = Field(default_factory=list, max_length=32)
    live_migration_policy: LiveMigrationPolicy = LiveMigrationPolicy.ALLOWED
    migration: MigrationPolicy = Field(
        default_factory=MigrationPolicy, description="How its live migrations converge (settings by default)."
    )
    placement: Placement = Field(default_factory=Placement)
    termination_grace_period_s: int = Field(default=60, ge=0, le=3600)
    boot: Boot | None = None
    cdrom: Name | None = Field(
        default=None,
        description="An Image of kind Iso (an installer), attached read-only as a CD-ROM and tried "
        "after the disks: an empty disk falls through to it, an installed one boots first. Taken "
        "out of the spec once the install is done; a change applies at the VM's next start.",
    )
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
    template: bool = Field(
        default=False,
        description="A template: never runs (run_policy AlwaysOff), so that new VMs get copies of its "
        "disks as they are (POST /v1/vms/actions/create with template). Only a stopped VM becomes one.",
    )

    @model_validator(mode="before")
    @classmethod
    def _memory_with_a_unit(cls, data: Any) -> Any:
        return renamed_size(data, "memory", "memory_mib")

    @model_validator(mode="after")
    def _unique_disks(self) -> VirtualMachineSpec:
        names = [d.volume for d in self.disks]
        if len(names) != len(set(names)):
            raise ValueError("a volume is listed twice in spec.disks")
        return self


class GuestAgentState(StrEnum):
    CONNECTED = "Connected"
    NOT_CONNECTED = "NotConnected"  # the guest runs no agent, or it has not started yet


class GuestInterfaceStatus(BaseModel):
    """An interface as the guest itself reports it through its agent."""

    name: str
    mac: str = ""
    addresses: list[str] = Field(default_factory=list, description="CIDR, e.g. 10.1.0.7/24.")


class DeviceKind(StrEnum):
    DISK = "disk"
    NIC = "nic"


class DeviceChangeState(StrEnum):
    DETACHING = "Detaching"
    """Asked back from the guest, which has not let it go yet."""
    DETACH_TIMED_OUT = "DetachTimedOut"
    """The guest did not let it go within ``vm.hotplug.detach_timeout_s``: not asked again."""


class DeviceChange(BaseModel):
    """A hot-plug change of a running VM that is not done: a disk (by volume) or a NIC (by MAC)."""

    kind: DeviceKind
    name: str = Field(description="The volume of a disk, the MAC of a NIC.")
    state: DeviceChangeState
    since: datetime
    message: str = ""


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
    agent_shutdown_at: datetime | None = Field(
        default=None,
        description="When the stop under way asked the guest's agent to shut the guest down, "
        "the ACPI power button having gone unheard (vm.stop.agent_after_s).",
    )
    nics: list[NicStatus] = Field(default_factory=list, description="Each NIC's network, MAC and address.")
    message: str = ""
    devices_generation: int = Field(
        default=0,
        description="The generation whose disks and NICs its running domain has (hot-plug); "
        "0 until one was looked at.",
    )
    device_changes: list[DeviceChange] = Field(
        default_factory=list, description="Hot-plug changes not done yet: devices being detached."
    )
    migration_dirty_rate_mib_s: float | None = Field(
        default=None,
        description="The highest memory dirty rate its last live migration saw (None: never migrated).",
    )
    guest_agent: GuestAgentState | None = Field(
        default=None, description="Whether the guest's agent answers (None: the VM is not running)."
    )
    guest_addresses: list[GuestInterfaceStatus] = Field(
        default_factory=list,
        description="The addresses the guest reports through its agent, beside the IPAM ones in nics "
        "(empty without an agent).",
    )


class VirtualMachine(Resource):
    KIND: ClassVar[str] = "VirtualMachine"
    PLURAL: ClassVar[str] = "vms"
    spec: VirtualMachineSpec = Field(default_factory=VirtualMachineSpec)
    status: VirtualMachineStatus = Field(default_factory=VirtualMachineStatus)
