"""``LibvirtDriver``: the HypervisorDriver for any libvirt URI.

Its parts, by what they operate on: ``calls`` (every call, on ``call_pool``'s threads, and
the translation of libvirt's errors), ``lifecycle`` (domains), ``volumes`` (pools, images,
volumes), ``snapshots`` (disk snapshots, memory images); this module wires them and holds
the connection, the host's facts and migration. What libvirt's test driver lacks is one
``HypervisorFlavor`` (``flavor``), chosen from the URI; who stopped a domain is told by
``stop_requests``; memory snapshots are ``memory``'s save images; the guest agent is ``agent``;
backup jobs with checkpoints are ``backups``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from virtplane.domain.resources import Accelerator, HostCPU
from virtplane.drivers.base import (
    AcceleratorOffer,
    Capability,
    DomainEventType,
    EventSink,
    HostFacts,
    MigrationJob,
    MigrationRequest,
)
from virtplane.drivers.errors import DriverError, PermanentError
from virtplane.drivers.libvirt import _libvirt, accelerator, usage
from virtplane.drivers.libvirt.agent import GuestAgentOperations
from virtplane.drivers.libvirt.backups import BackupJobs
from virtplane.drivers.libvirt.bridges import host_bridges
from virtplane.drivers.libvirt.call_pool import CallPool
from virtplane.drivers.libvirt.connection import LibvirtConnection, Opener
from virtplane.drivers.libvirt.domain import LibvirtDomain
from virtplane.drivers.libvirt.events import EventRelay
from virtplane.drivers.libvirt.flavor import flavor_for
from virtplane.drivers.libvirt.hotplug import DeviceHotplug
from virtplane.drivers.libvirt.memory import DEFAULT_STATE_DIR, STATE_POOL, MemoryImages
from virtplane.drivers.libvirt.migration import MigrationTracker
from virtplane.drivers.libvirt.snapshots import SnapshotOperations
from virtplane.drivers.libvirt.stop_requests import StopRequests
from virtplane.drivers.libvirt.volumes import VolumeOperations
from virtplane.drivers.stats import UsageSample


class LibvirtDriver(SnapshotOperations, GuestAgentOperations, VolumeOperations, DeviceHotplug, BackupJobs):
    """One connection to one libvirt host (``qemu:///system``, ``qemu+ssh://h/system``, ``test:///...``).

    ``domain_type`` is the ``<domain type=...>`` for QEMU hosts ("qemu" is TCG;
    "kvm" where hardware virtualization works); libvirt's test driver only
    runs its own "test" domains, which it gets whatever is passed here.
    ``console_dir``: where each domain's serial console is logged (on the host),
    as ``<console_dir>/<domain>.log``, unless the spec names a file.
    ``state_dir``: where memory snapshots are saved (see ``memory``).
    ``migration_address``: the address destination hosts listen on for
    migration data (None: libvirt uses the destination's hostname).
    """

    def __init__(
        self,
        uri: str,
        *,
        domain_type: str = "qemu",
        console_dir: str | None = None,
        state_dir: str | None = None,
        migration_address: str | None = None,
        keepalive_interval_s: int = 0,  # off: see docs/decisions.md (a stopped daemon)
        keepalive_count: int = 0,
        reconnect_initial_s: float = 0.5,
        reconnect_max_s: float = 30.0,
        opener: Opener | None = None,
    ) -> None:
        self._uri = uri
        self.flavor = flavor_for(uri, domain_type)
        self._console_dir = console_dir
        self._migration_address = migration_address
        self._stops = StopRequests()
        self._memory = MemoryImages(self.flavor, state_dir)
        self._calls = CallPool(uri)
        self._events = EventRelay(uri, stop_asked=self._stops.asked)
        self._migrations = MigrationTracker(on_failed=self._events.migration_failed)
        self._connection = LibvirtConnection(
            uri,
            on_open=self._events.register,
            on_up=lambda: self._events.host(DomainEventType.HOST_UP, "connected"),
            on_down=lambda why: self._events.host(DomainEventType.HOST_DOWN, why),
            opener=opener,
            keepalive_interval_s=keepalive_interval_s,
            keepalive_count=keepalive_count,
            reconnect_initial_s=reconnect_initial_s,
            reconnect_max_s=reconnect_max_s,
        )

    # ------------------------------------------------------------------ connection

    async def connect(self) -> None:
        _libvirt.load()
        await self._calls.run(self._connection.open)

    async def close(self) -> None:
        """Close the connection; callers still waiting for a call read HostUnreachable at once."""
        self._calls.close()
        # not on the pool: its threads may all be in calls that a silent daemon holds
        await asyncio.to_thread(self._connection.close)
        self._memory.close()

    def set_event_sink(self, sink: EventSink | None) -> None:
        self._events.sink = sink

    async def host_facts(self) -> HostFacts:
        def facts(conn: Any) -> HostFacts:
            info = conn.getInfo()
            bridges = tuple(sorted(host_bridges(conn)))
            return HostFacts(conn.getHostname(), vcpus=int(info[2]), memory_mib=int(info[1]), bridges=bridges)

        return await self._call(facts)

    async def usage(self) -> UsageSample:
        return await self._call(lambda conn: usage.sample(conn, self._uri))

    # ------------------------------------------------------------------ accelerator

    async def accelerator_offer(self) -> AcceleratorOffer:
        if self.flavor.xml.domain_type == "test":  # libvirt's test driver runs only its own domains
            return AcceleratorOffer(kvm=False, fingerprint=f"{self._uri} test")

        def offer(conn: Any) -> AcceleratorOffer:
            caps = conn.getCapabilities()
            fingerprint = (
                f"libvirt {conn.getLibVersion()} qemu {conn.getVersion()} host {accelerator.host_uuid(caps)}"
            )
            return AcceleratorOffer("kvm" in accelerator.offered_domain_types(caps), fingerprint)

        return await self._call(offer)

    async def validate_kvm(self, kernel: str, timeout_s: float) -> str:
        lv = _libvirt.load()

        def boot(conn: Any) -> None:
            accelerator.destroy_leftover(conn, lv)
            # paused until the console is attached: the kernel's first lines must not be missed
            conn.createXML(accelerator.validation_xml(kernel), lv.VIR_DOMAIN_START_PAUSED)

        try:
            await self._call(boot)
        except DriverError as exc:
            return f"the validation guest could not start: {exc}"
        try:
            console = await self.open_console(accelerator.VALIDATION_DOMAIN)
            try:
                await self._call(
                    lambda conn: LibvirtDomain.lookup(conn, accelerator.VALIDATION_DOMAIN).resume()
                )
                return await accelerator.read_until_known_point(console, timeout_s)
            finally:
                await console.close()
        except DriverError as exc:
            return f"the validation guest failed: {exc}"
        finally:
            with contextlib.suppress(DriverError):  # the next validation destroys it first anyway
                await self._call(lambda conn: accelerator.destroy_leftover(conn, lv))

    def use_accelerator(self, used: Accelerator | None) -> None:
        if used is None:
            self._refusal = (
                f"{self._uri} takes no guests: its KVM is not usable (see the Host's Accelerator condition)"
            )
            return
        self._refusal = ""
        domain_type = "kvm" if used is Accelerator.KVM else "qemu"
        self.flavor = flavor_for(self._uri, domain_type)

    async def host_cpu(self) -> HostCPU | None:
        if self.domain_type == "test":  # its domains take no CPU models
            return None
        virttype = self.domain_type

        def model(conn: Any) -> HostCPU | None:
            return accelerator.host_model(conn.getDomainCapabilities(None, "x86_64", None, virttype, 0))

        return await self._call(model)

    async def baseline_cpu(self, cpus: list[HostCPU]) -> HostCPU | None:
        if self.domain_type == "test" or not cpus:
            return None
        virttype, xmls = self.domain_type, [accelerator.cpu_xml(cpu) for cpu in cpus]

        def baseline(conn: Any) -> HostCPU | None:
            return accelerator.parse_cpu(conn.baselineHypervisorCPU(None, "x86_64", None, virttype, xmls, 0))

        return await self._call(baseline)

    @property
    def domain_type(self) -> str:
        """The ``<domain type>`` this driver defines domains with."""
        return self.flavor.xml.domain_type

    # ------------------------------------------------------------------ migration

    async def migrate(self, request: MigrationRequest) -> None:
        self._require(Capability.BLOCK_MIGRATION if request.copy_disks else Capability.LIVE_MIGRATION)
        if request.target_uri == self._uri:
            raise PermanentError("cannot migrate a domain to the host it runs on")

        def begin(conn: Any) -> None:
            dom = LibvirtDomain.lookup(conn, request.domain)
            self._migrations.begin(dom, request, migration_address=self._migration_address)

        await self._call(begin)

    async def migration_job(self, name: str) -> MigrationJob | None:
        return await self._call(lambda conn: self._migrations.current(name, LibvirtDomain.find(conn, name)))

    async def abort_migration(self, name: str) -> None:
        def abort(conn: Any) -> None:
            dom = LibvirtDomain.find(conn, name)
            if dom is not None:
                self._migrations.abort(dom)

        await self._call(abort)

    async def start_post_copy(self, name: str) -> None:
        await self._call(lambda conn: self._migrations.start_post_copy(LibvirtDomain.lookup(conn, name)))


__all__ = ["DEFAULT_STATE_DIR", "STATE_POOL", "LibvirtDriver"]
