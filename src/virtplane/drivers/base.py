"""The one interface between the control plane and a hypervisor host.

A ``HypervisorDriver`` is one connection to one host. It speaks in the control
plane's terms (``DomainSpec``, ``DomainInfo``, ``DomainEvent``); libvirt handles
and domain XML never leave the libvirt implementation. Orchestration across
hosts (which target, when to retry) lives in the controllers, not here.

Rules every implementation follows (the contract suite checks them):
- ``ensure_defined`` is idempotent; ``destroy``/``undefine``/``delete_volume``
  of something that is already gone succeed.
- Methods raise only ``virtplane.drivers.errors`` exceptions.
- The last exit reason of a stopped domain is reported by ``get_info`` (level),
  and also sent as an event (edge); the controllers rely on the level.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from virtplane.domain.phases import DomainState  # declared once, in the domain vocabulary
from virtplane.domain.resources import Accelerator, Capability, ExitReason, HostCPU
from virtplane.drivers.backups import BackupOperations
from virtplane.drivers.migration_ops import (
    MigrationJob,
    MigrationOperations,
    MigrationPhase,
    MigrationRequest,
)
from virtplane.drivers.stats import UsageSample
from virtplane.drivers.storage_ops import ImageInfo, ImageRef, PoolRef, StorageOperations, VolumeInfo

DOMAIN_PREFIX = "virtplane-"


def domain_name(vm_uid: str) -> str:
    """Deterministic libvirt domain name for a VM: derived from its uid, never its user-chosen name."""
    return f"{DOMAIN_PREFIX}{vm_uid}"


def vm_uid_of(domain: str) -> str:
    """The VM uid in a domain name made by ``domain_name``; "" for a domain that is not ours."""
    return domain.removeprefix(DOMAIN_PREFIX) if domain.startswith(DOMAIN_PREFIX) else ""


@dataclass(frozen=True)
class DiskAttachment:
    path: str
    boot_order: int | None = None
    format: str = "qcow2"
    shared: bool = False  # on a pool other hosts see; never copied by a block migration
    volume: str = ""  # the Volume resource name, for messages
    size_gib: int = 0


@dataclass(frozen=True)
class NicAttachment:
    """A NIC on one of the host's Linux bridges (``bridge`` None: QEMU's user network, which
    only the simulator offers)."""

    mac: str
    bridge: str | None
    vlan: int | None = None  # carried by the bridge itself, never tagged by us (docs/decisions.md)
    network: str = ""  # the Network resource name, for messages


@dataclass(frozen=True)
class DomainSpec:
    name: str  # domain_name(vm_uid)
    vm_name: str
    vm_uid: str
    cpu: int
    memory_mib: int
    disks: tuple[DiskAttachment, ...] = ()
    kernel: ImageRef | None = None
    initrd: ImageRef | None = None
    cmdline: str = ""
    console_log: str | None = None
    nics: tuple[NicAttachment, ...] = ()
    seed: str | None = None  # path of the NoCloud seed ISO on the host (a volume of the VM's pool)
    cpu_passthrough: bool = False  # the host's own CPU (KVM only); else cpu_model
    cpu_model: str = ""  # the cluster's CPU model ("": the host's default for its domains)
    cpu_features: tuple[str, ...] = ()  # required on top of cpu_model
    cpu_disabled: tuple[str, ...] = ()  # cpu_model's features the cluster lacks
    cdrom: ImageRef | None = (
        None  # an installer ISO from the library: a read-only CD-ROM, booted after the disks
    )


@dataclass(frozen=True)
class LiveDevices:
    """The guest disks (source paths, in the domain's order; not the seed's CD-ROM) and the NICs
    (MACs) a running domain has now: a device being detached is here until the guest let it go."""

    disks: tuple[str, ...] = ()
    nics: tuple[str, ...] = ()


@dataclass(frozen=True)
class DomainInfo:
    name: str
    vm_uid: str
    state: DomainState
    exit_reason: ExitReason | None = None  # why it last stopped (shutoff/crashed only)
    cpu: int = 0
    memory_mib: int = 0
    migrated_away: bool = False  # off here because it live-migrated to another host


class DomainEventType(StrEnum):
    DEFINED = "defined"
    UNDEFINED = "undefined"
    STARTED = "started"
    STOPPED = "stopped"
    CRASHED = "crashed"
    RESET = "reset"
    PAUSED = "paused"
    RESUMED = "resumed"
    MIGRATED = "migrated"  # left this host
    MIGRATION_FAILED = "migration-failed"
    HOST_DOWN = "host-down"
    HOST_UP = "host-up"
    AGENT_CONNECTED = "agent-connected"  # the guest's agent opened its channel
    AGENT_DISCONNECTED = "agent-disconnected"
    DEVICE_REMOVED = "device-removed"  # the guest released a device asked back (detail: its alias)


@dataclass(frozen=True)
class DomainEvent:
    host_uri: str
    domain: str  # "" for host-level events
    vm_uid: str
    type: DomainEventType
    reason: ExitReason | None = None
    detail: str = ""


EventSink = Callable[[DomainEvent], None]
"""Called from any thread; implementations of the sink must be thread-safe."""


@dataclass(frozen=True)
class GuestInterface:
    """A network interface as the guest's agent reports it (the guest's own view)."""

    name: str
    mac: str
    addresses: tuple[str, ...] = ()  # "10.1.0.5/24", "fe80::1/64"


@dataclass(frozen=True)
class HostFacts:
    hostname: str
    vcpus: int
    memory_mib: int
    bridges: tuple[str, ...] = ()  # the Linux bridges bridge networks can use


@dataclass(frozen=True)
class AcceleratorOffer:
    kvm: bool
    """libvirt's capabilities offer kvm domains on the host."""
    fingerprint: str
    """The libvirt and QEMU versions and the host's identity: a validation verdict holds while it does."""


class ConsoleStream(Protocol):
    """A domain's serial console as a byte stream, open until ``close`` or until the guest's
    instance ends here (it stops, crashes, or migrates away): then ``read`` returns b"".

    One session per domain at a time: ``open_console`` raises ``ConsoleBusy`` while another
    is open (as libvirt does without VIR_DOMAIN_CONSOLE_FORCE)."""

    async def read(self) -> bytes:
        """The next bytes the guest wrote (waits for them); b"" once the console has ended."""

    async def write(self, data: bytes) -> None:
        """Send ``data`` to the guest, as typed; after the end it is dropped."""

    async def close(self) -> None:
        """End the session (idempotent); the console is free for the next one."""


class DisplayStream(ConsoleStream, Protocol):
    """A connection to a domain's VNC server (RFB, as the server speaks it, from its first
    byte), made on the host by the hypervisor for the control plane alone: no port listens,
    and the server has let the client in (no VNC password). Any number may be open at a time;
    ``read`` returns b"" once the guest's instance ends here."""


@runtime_checkable
class HypervisorDriver(StorageOperations, MigrationOperations, BackupOperations, Protocol):
    """One connection to one hypervisor host. All methods are coroutines but ``uri``/``capabilities``."""

    @property
    def uri(self) -> str: ...

    @property
    def capabilities(self) -> frozenset[Capability]: ...

    async def connect(self) -> None:
        """Open the connection; raises HostUnreachable if the host is away."""

    async def close(self) -> None: ...

    def set_event_sink(self, sink: EventSink | None) -> None: ...

    async def host_facts(self) -> HostFacts: ...

    async def usage(self) -> UsageSample:
        """The host's own use and its running domains' counters, in one call (``drivers.stats``)."""

    # -- accelerator (domain.accelerators decides; the host controller asks and records)
    async def accelerator_offer(self) -> AcceleratorOffer: ...

    async def validate_kvm(self, kernel: str, timeout_s: float) -> str:
        """Boot a validation guest (``kernel``, a path on the host) under KVM: "" when it reaches
        its known point within ``timeout_s``, else why it did not. The guest is gone after."""

    def use_accelerator(self, accelerator: Accelerator | None) -> None:
        """What domains defined from now on run under; None: ``ensure_defined`` refuses them."""

    # -- CPU models
    async def host_cpu(self) -> HostCPU | None:
        """The CPU the hypervisor offers guests under the accelerator in use (libvirt's host-model);
        None where the host names none (libvirt's test driver)."""

    async def baseline_cpu(self, cpus: list[HostCPU]) -> HostCPU | None:
        """The most capable CPU model all of ``cpus`` can run (libvirt's baselineHypervisorCPU);
        None where the host cannot compute one."""

    # -- domains
    async def list_domains(self) -> list[DomainInfo]: ...

    async def get_info(self, name: str) -> DomainInfo | None: ...

    async def ensure_defined(self, spec: DomainSpec) -> None: ...

    async def start(self, name: str) -> None: ...

    async def shutdown(self, name: str) -> None:
        """Ask the guest to power off (ACPI); returns at once. The caller enforces the grace period."""

    async def destroy(self, name: str) -> None: ...

    async def undefine(self, name: str) -> None: ...

    async def pause(self, name: str) -> None: ...

    async def resume(self, name: str) -> None: ...

    async def open_console(self, name: str) -> ConsoleStream:
        """Attach to the serial console of a live domain: ``NotFound`` (no such domain here),
        ``NotRunning`` (it has no live instance), ``ConsoleBusy``, ``Unsupported``."""

    async def open_display(self, name: str) -> DisplayStream:
        """Connect to the VNC server of a live domain's screen: ``NotFound``, ``NotRunning``,
        ``Unsupported`` (the host has no screens, or cannot hand this connection one)."""

    async def screenshot(self, name: str) -> bytes:
        """The live domain's screen now, as PNG; the same refusals as ``open_display``."""

    # -- the guest agent (QEMU's qemu-ga on the domain's org.qemu.guest_agent.0 channel). It
    # answers only while the guest runs an agent; every call but ``agent_connected`` raises
    # ``AgentUnavailable`` when none does (the guest has none, has not started it yet, or is off).
    async def agent_connected(self, name: str) -> bool:
        """Whether the guest's agent is connected now (False for a domain that is off or missing)."""

    async def guest_interfaces(self, name: str) -> tuple[GuestInterface, ...]:
        """The guest's interfaces and addresses, as its agent reports them."""

    async def agent_shutdown(self, name: str) -> None:
        """Ask the guest's agent to power the guest off; returns at once. Recorded as our stop
        request, as ``shutdown`` is (the domain stops STOPPED_BY_SYSTEM)."""

    async def freeze_filesystems(self, name: str) -> int:
        """Freeze the guest's filesystems (writes wait, data on disk is consistent); how many."""

    async def thaw_filesystems(self, name: str) -> int:
        """Thaw what ``freeze_filesystems`` froze (idempotent: 0 when nothing is frozen)."""

    # -- hot-plug (``Capability.HOTPLUG``): the running instance and the persistent definition both
    async def live_devices(self, name: str) -> LiveDevices | None:
        """The devices of ``name``'s running instance; None when it has none (off or missing).
        Also where the host cannot change them (no ``Capability.HOTPLUG``)."""

    async def attach_disk(self, name: str, disk: DiskAttachment) -> None:
        """Attach ``disk`` to the running domain (immediate); a no-op when it has it already."""

    async def detach_disk(self, name: str, path: str) -> None:
        """Ask the guest to release the disk at ``path`` and return: it stays in ``live_devices``
        until the guest has let it go (or for ever, if the guest ignores the request). A no-op when
        the domain has no such disk."""

    async def attach_nic(self, name: str, nic: NicAttachment) -> None:
        """Attach ``nic`` to the running domain (immediate); a no-op when it has its MAC already."""

    async def detach_nic(self, name: str, mac: str) -> None:
        """As ``detach_disk``, for the NIC with ``mac``."""

    async def change_seed(self, name: str, path: str) -> None:
        """Put the seed image at ``path`` into the running domain's seed CD-ROM (a media change)."""


__all__ = [
    "DOMAIN_PREFIX",
    "AcceleratorOffer",
    "Capability",
    "ConsoleStream",
    "DiskAttachment",
    "DisplayStream",
    "DomainEvent",
    "DomainEventType",
    "DomainInfo",
    "DomainSpec",
    "DomainState",
    "EventSink",
    "GuestInterface",
    "HostFacts",
    "HypervisorDriver",
    "ImageInfo",
    "ImageRef",
    "LiveDevices",
    "MigrationJob",
    "MigrationPhase",
    "MigrationRequest",
    "NicAttachment",
    "PoolRef",
    "VolumeInfo",
    "domain_name",
    "vm_uid_of",
]
