"""``SimDriver``: the ``HypervisorDriver`` connection to one simulated host."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from virtplane.domain.resources import Accelerator, HostCPU
from virtplane.drivers.base import (
    AcceleratorOffer,
    Capability,
    ConsoleStream,
    DiskAttachment,
    DisplayStream,
    DomainInfo,
    DomainSpec,
    DomainState,
    EventSink,
    GuestInterface,
    HostFacts,
    ImageInfo,
    ImageRef,
    LiveDevices,
    MigrationJob,
    MigrationRequest,
    NicAttachment,
    PoolRef,
    VolumeInfo,
)
from virtplane.drivers.errors import HostUnreachable, NotFound, NotRunning, PermanentError, TransientError
from virtplane.drivers.png import png_from_ppm
from virtplane.drivers.stats import UsageSample

from ._display import screen_ppm
from ._driver_backups import SimBackupCalls
from ._storage import read_upload
from ._world import SimWorld, entry_point

if TYPE_CHECKING:
    from ._host import SimHost

SIM_CAPABILITIES = frozenset(
    {
        Capability.LIVE_MIGRATION,
        Capability.BLOCK_MIGRATION,
        Capability.MEMORY_SNAPSHOT,
        Capability.DISK_SNAPSHOT,
        Capability.VOLUME_RESIZE,
        Capability.FAULT_INJECTION,
        Capability.USER_NETWORK,  # QEMU's user network: simulated hosts only (docs/decisions.md)
        Capability.SERIAL_CONSOLE,
        Capability.HOTPLUG,
        Capability.BACKUP,
    }
)


SIM_KVM_ABSENT, SIM_KVM_WORKS, SIM_KVM_BROKEN = "absent", "works", "broken"
"""A simulated host's KVM (its URI's ``kvm=``): none, one that boots guests, one that does not."""


def kvm_in(uri: str) -> str:
    """The ``kvm=`` of a sim:// URI's query; absent when not given."""
    value = parse_qs(urlsplit(uri).query).get("kvm", [SIM_KVM_ABSENT])[0]
    if value not in (SIM_KVM_ABSENT, SIM_KVM_WORKS, SIM_KVM_BROKEN):
        raise ValueError(f"{uri!r}: kvm must be absent, works or broken, not {value!r}")
    return value


SIM_TCG_CPU = "qemu64"


def cpu_in(uri: str) -> HostCPU | None:
    """The host CPU a sim:// URI names (``cpu=MODEL&cpufeatures=a,b``), offered under KVM."""
    query = parse_qs(urlsplit(uri).query)
    if "cpu" not in query:
        return None
    features = [f for f in query.get("cpufeatures", [""])[0].split(",") if f]
    return HostCPU(model=query["cpu"][0], features=sorted(features))


class SimDriver(SimBackupCalls):
    """Every call checks the connection first: closed, host unknown, down or disconnected
    → ``HostUnreachable``. Get one from ``SimCloud.driver(uri)``."""

    def __init__(
        self, world: SimWorld, uri: str, *, kvm: str = SIM_KVM_ABSENT, cpu: HostCPU | None = None
    ) -> None:
        self._world = world
        self._uri = uri
        self._open = False
        self._kvm = kvm
        self._cpu = cpu or HostCPU(model=SIM_TCG_CPU)
        self._accelerator: Accelerator | None = Accelerator.TCG
        self.event_sink: EventSink | None = None

    @property
    def uri(self) -> str:
        return self._uri

    @property
    def world(self) -> SimWorld:
        return self._world

    @property
    def is_open(self) -> bool:
        return self._open

    @property
    def capabilities(self) -> frozenset[Capability]:
        return SIM_CAPABILITIES

    def _host(self) -> SimHost:
        if not self._open:
            raise HostUnreachable(f"{self._uri}: not connected; call connect() first")
        return self._reachable_host()

    def _reachable_host(self) -> SimHost:
        host = self.world.host_by_uri(self._uri)
        if host is None:
            raise HostUnreachable(f"{self._uri}: no simulated host there")
        if not host.up:
            raise HostUnreachable(f"{self._uri}: the host is down")
        if not host.link_up:
            raise HostUnreachable(f"{self._uri}: the connection is lost")
        return host

    @entry_point
    async def connect(self) -> None:
        self._reachable_host()
        self._open = True

    async def close(self) -> None:
        self._open = False

    def set_event_sink(self, sink: EventSink | None) -> None:
        self.event_sink = sink

    @entry_point
    async def host_facts(self) -> HostFacts:
        return self._host().facts()

    @entry_point
    async def usage(self) -> UsageSample:
        host = self._host()
        return self.world.meters.sample(host.name, host.vcpus, host.memory_mib, list(host.domains.values()))

    @entry_point
    async def accelerator_offer(self) -> AcceleratorOffer:
        host = self._host()
        return AcceleratorOffer(
            kvm=self._kvm != SIM_KVM_ABSENT, fingerprint=f"sim {host.name} kvm={self._kvm}"
        )

    @entry_point
    async def validate_kvm(self, kernel: str, timeout_s: float) -> str:
        self._host()
        if self._kvm == SIM_KVM_WORKS:
            return ""
        return f"the validation guest did not reach its known point within {timeout_s:g}s (simulated kvm={self._kvm})"

    def use_accelerator(self, accelerator: Accelerator | None) -> None:
        self._accelerator = accelerator

    @entry_point
    async def host_cpu(self) -> HostCPU | None:
        self._host()
        if self._accelerator is not Accelerator.KVM:  # TCG offers its own model, whatever the host has
            return HostCPU(model=SIM_TCG_CPU)
        return self._cpu

    @entry_point
    async def baseline_cpu(self, cpus: list[HostCPU]) -> HostCPU | None:
        """As libvirt's: the common model where all have it (else the TCG one), the common features."""
        self._host()
        if not cpus:
            return None
        models = {cpu.model for cpu in cpus}
        common = set(cpus[0].features).intersection(*(cpu.features for cpu in cpus[1:]))
        return HostCPU(model=models.pop() if len(models) == 1 else SIM_TCG_CPU, features=sorted(common))

    @property
    def accelerator(self) -> Accelerator | None:
        """What this host's guests are defined with (tests read it)."""
        return self._accelerator

    # ------------------------------------------------------------------ domains

    @entry_point
    async def list_domains(self) -> list[DomainInfo]:
        host = self._host()
        return [host.info(domain) for domain in host.domains.values()]

    @entry_point
    async def get_info(self, name: str) -> DomainInfo | None:
        host = self._host()
        domain = host.domains.get(name)
        return None if domain is None else host.info(domain)

    @entry_point
    async def ensure_defined(self, spec: DomainSpec) -> None:
        host = self._host()
        if self._accelerator is None:
            raise PermanentError(
                f"{self._uri} takes no guests: its KVM is not usable (see the Host's Accelerator condition)"
            )
        host.define(spec)

    @entry_point
    async def start(self, name: str) -> None:
        self._host().start(name)

    @entry_point
    async def shutdown(self, name: str) -> None:
        self._host().shutdown(name)

    @entry_point
    async def destroy(self, name: str) -> None:
        self._host().destroy(name)

    @entry_point
    async def undefine(self, name: str) -> None:
        self._host().undefine(name)

    @entry_point
    async def pause(self, name: str) -> None:
        self._host().pause(name)

    @entry_point
    async def resume(self, name: str) -> None:
        self._host().resume(name)

    @entry_point
    async def open_console(self, name: str) -> ConsoleStream:
        host = self._host()
        domain = host.get(name)
        if not domain.active:
            raise NotRunning(f"domain {name} is {domain.state}: a console needs a live guest")
        return host.consoles.open(name, (domain.live or domain.spec).vm_name)

    def _live_vm_name(self, name: str) -> str:
        domain = self._host().get(name)
        if not domain.active:
            raise NotRunning(f"domain {name} is {domain.state}: a screen needs a live guest")
        return (domain.live or domain.spec).vm_name

    @entry_point
    async def open_display(self, name: str) -> DisplayStream:
        return self._host().consoles.open_screen(name, self._live_vm_name(name))

    @entry_point
    async def screenshot(self, name: str) -> bytes:
        return png_from_ppm(screen_ppm(self._live_vm_name(name)))

    # ------------------------------------------------------------------ the guest agent

    @entry_point
    async def agent_connected(self, name: str) -> bool:
        domain = self._host().domains.get(name)
        return domain is not None and self.world.guests.agent_connected(domain)

    @entry_point
    async def guest_interfaces(self, name: str) -> tuple[GuestInterface, ...]:
        return self.world.guests.interfaces(self._host().get(name))

    @entry_point
    async def agent_shutdown(self, name: str) -> None:
        self._host().agent_shutdown(name)

    @entry_point
    async def freeze_filesystems(self, name: str) -> int:
        return self.world.guests.freeze(self._host().get(name))

    @entry_point
    async def thaw_filesystems(self, name: str) -> int:
        return self.world.guests.thaw(self._host().get(name))

    # ------------------------------------------------------------------ hot-plug (see _devices)

    @entry_point
    async def live_devices(self, name: str) -> LiveDevices | None:
        return self._host().live_devices(name)

    @entry_point
    async def attach_disk(self, name: str, disk: DiskAttachment) -> None:
        host = self._host()
        visible = not disk.path.startswith("sim://") or (
            self.world.storage.locate_local(host.name, disk.path) is not None
        )
        host.attach_disk(name, disk, visible)

    @entry_point
    async def detach_disk(self, name: str, path: str) -> None:
        self._host().detach(name, path)

    @entry_point
    async def attach_nic(self, name: str, nic: NicAttachment) -> None:
        self._host().attach_nic(name, nic)

    @entry_point
    async def detach_nic(self, name: str, mac: str) -> None:
        self._host().detach(name, mac)

    @entry_point
    async def change_seed(self, name: str, path: str) -> None:
        self._host().change_seed(name, path)

    # ------------------------------------------------------------------ storage

    @entry_point
    async def ensure_pool(self, pool: PoolRef) -> None:
        self.world.storage.ensure_pool(self._host().name, pool)

    @entry_point
    async def inspect_image(self, image: ImageRef) -> ImageInfo:
        return self.world.storage.inspect_image(self._host().name, image)[0]

    @entry_point
    async def create_volume(
        self, pool: PoolRef, name: str, size_gib: int, source: ImageRef | None = None, *, linked: bool = False
    ) -> VolumeInfo:  # a linked clone reads as its backing volume does, as a copy would
        return self.world.storage.create_volume(self._host().name, pool, name, size_gib, source)

    @entry_point
    async def upload_volume(self, pool: PoolRef, name: str, data: bytes) -> VolumeInfo:
        return self.world.storage.upload_volume(self._host().name, pool, name, data)

    async def write_image(self, image: ImageRef, source: str) -> None:
        # the file is read before the world's transaction, which must not suspend
        fmt, size, digest = await asyncio.to_thread(read_upload, source)
        await self._record_image(image, fmt, size, digest)

    @entry_point
    async def _record_image(self, image: ImageRef, fmt: str, size: int, digest: str) -> None:
        self.world.storage.write_image(self._host().name, image, fmt, size, digest)

    @entry_point
    async def delete_volume(self, pool: PoolRef, name: str) -> None:
        self.world.storage.delete_volume(self._host().name, pool, name)

    @entry_point
    async def resize_volume(self, pool: PoolRef, name: str, size_gib: int) -> VolumeInfo:
        return self.world.storage.resize_volume(self._host().name, pool, name, size_gib)

    @entry_point
    async def snapshot_volume(self, pool: PoolRef, name: str, snapshot_id: str) -> str:
        return self.world.storage.snapshot_volume(self._host().name, pool, name, snapshot_id)

    @entry_point
    async def copy_volume_snapshot(
        self, pool: PoolRef, name: str, size_gib: int, handle: str, *, linked: bool = False
    ) -> VolumeInfo:  # linked: read as the saved disk, as a copy
        return self.world.storage.copy_snapshot(self._host().name, pool, name, size_gib, handle)

    @entry_point
    async def revert_volume(self, pool: PoolRef, name: str, handle: str) -> None:
        self.world.storage.revert_volume(self._host().name, pool, name, handle)

    @entry_point
    async def delete_volume_snapshot(self, handle: str) -> None:
        self._host()
        # memory snapshot handles are forgotten the same way
        self.world.storage.delete_snapshot(handle)
        self.world.forget_memory(handle)

    @entry_point
    async def save_memory(self, name: str, snapshot_id: str) -> str:
        host = self._host()
        domain = host.get(name)
        if domain.state not in (DomainState.RUNNING, DomainState.PAUSED, DomainState.MIGRATING):
            raise PermanentError(f"domain {name} is {domain.state}: only a running domain has memory to save")
        handle = f"sim-mem://{name}@{snapshot_id}"
        self.world.save_memory(handle, domain.live or domain.spec, domain.memory)
        return handle

    @entry_point
    async def restore_memory(self, spec: DomainSpec, handle: str) -> None:
        host = self._host()
        saved = self.world.saved_memory(handle)
        if saved is None:
            raise NotFound(f"memory snapshot {handle} does not exist")
        host.restore(spec, saved[1])

    # ------------------------------------------------------------------ live migration

    @entry_point
    async def migrate(self, request: MigrationRequest) -> None:
        host = self._host()
        domain = host.domains.get(request.domain)
        if domain is not None and self.world.backups.running(domain):
            # as libvirt's: the backup is the domain's job until it ends
            raise TransientError(f"domain {request.domain} has a backup job running: migrate it once it ends")
        self.world.migrations.start(host, request)

    @entry_point
    async def migration_job(self, name: str) -> MigrationJob | None:
        return self.world.migrations.job(self._host(), name)

    @entry_point
    async def abort_migration(self, name: str) -> None:
        self.world.migrations.abort(self._host(), name)

    @entry_point
    async def start_post_copy(self, name: str) -> None:
        self.world.migrations.start_post_copy(self._host(), name)
