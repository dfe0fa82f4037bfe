"""``LibvirtDriver``: the HypervisorDriver for any libvirt URI.

Blocking libvirt calls run in a small per-driver thread pool; libvirt
connections are thread-safe. Errors leave as ``virtplane.drivers.errors``.
What libvirt's test driver lacks is one ``HypervisorFlavor`` (``flavor``), chosen
from the URI; who stopped a domain is told by ``stop_requests``; memory snapshots
are ``memory``'s save images.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any, TypeVar

from virtplane.drivers.base import (
    Capability,
    ConsoleStream,
    DomainEventType,
    DomainInfo,
    DomainSpec,
    EventSink,
    HostFacts,
    ImageInfo,
    ImageRef,
    MigrationJob,
    MigrationRequest,
    PoolRef,
    VolumeInfo,
)
from virtplane.drivers.errors import DriverError, PermanentError, Unsupported
from virtplane.drivers.libvirt import _libvirt, console, images, stop_requests, storage
from virtplane.drivers.libvirt.bridges import check_vlans, host_bridges
from virtplane.drivers.libvirt.call_pool import CallPool
from virtplane.drivers.libvirt.connection import LibvirtConnection, Opener
from virtplane.drivers.libvirt.domain import LibvirtDomain
from virtplane.drivers.libvirt.domain_xml import build_domain_xml, parse_domain_xml, spec_digest
from virtplane.drivers.libvirt.events import EventRelay, domain_info
from virtplane.drivers.libvirt.flavor import flavor_for
from virtplane.drivers.libvirt.memory import DEFAULT_STATE_DIR, STATE_POOL, MemoryImages
from virtplane.drivers.libvirt.migration import MigrationTracker
from virtplane.drivers.libvirt.stop_requests import StopRequests

T = TypeVar("T")


class LibvirtDriver:
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

    @property
    def uri(self) -> str:
        return self._uri

    @property
    def connected(self) -> bool:
        """False while the host is away (the control plane shows it Disconnected)."""
        return self._connection.connected

    @property
    def capabilities(self) -> frozenset[Capability]:
        return self.flavor.capabilities

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

    # ------------------------------------------------------------------ domains

    async def list_domains(self) -> list[DomainInfo]:
        def listing(conn: Any) -> list[DomainInfo]:
            infos = []
            for dom in LibvirtDomain.list_all(conn):
                info = self._info_unless_gone(dom)  # one that vanished mid-listing is simply not there
                if info is not None:
                    infos.append(info)
            return infos

        return await self._call(listing)

    async def get_info(self, name: str) -> DomainInfo | None:
        def info(conn: Any) -> DomainInfo | None:
            dom = LibvirtDomain.find(conn, name)
            return None if dom is None else self._info_unless_gone(dom)

        return await self._call(info)

    async def ensure_defined(self, spec: DomainSpec) -> None:
        console_log = self._console_log(spec)
        digest = spec_digest(spec, self.flavor.xml, console_log)

        def define(conn: Any) -> None:
            xml = self._domain_xml(conn, spec)  # checks the boot files even when nothing changed
            dom = LibvirtDomain.find(conn, spec.name)
            stop_requested = False
            if dom is not None:
                if parse_domain_xml(dom.xml(inactive=True)).digest == digest:
                    return
                stop_requested = stop_requests.marked(dom)
            dom = LibvirtDomain(conn.defineXML(xml))
            if stop_requested:  # a redefinition must not turn our shutdown into the guest's
                stop_requests.set_mark(dom, True)

        await self._call(define)

    async def start(self, name: str) -> None:
        def start(conn: Any) -> None:
            dom = LibvirtDomain.lookup(conn, name)
            if dom.is_active():
                return
            self._stops.clear(dom)
            dom.create()

        await self._call(start)

    async def shutdown(self, name: str) -> None:
        def shutdown(conn: Any) -> None:
            lv = _libvirt.load()
            dom = LibvirtDomain.lookup(conn, name)
            if not dom.is_active():
                return
            self._stops.request(name)
            try:
                stop_requests.set_mark(dom, True)
                if dom.state()[0] == lv.VIR_DOMAIN_PAUSED:
                    # A paused guest cannot hear the button (libvirt refuses to press it, and
                    # its test driver would power off at once): the caller's grace period runs
                    # out and destroys it, as for any guest that ignores ACPI.
                    return
                dom.shutdown(power_button=self.flavor.power_button)
            except lv.libvirtError as exc:
                # The button is pressed again while a guest powers off: one that is being shut
                # down (or is off) since is_active() gives "domain is not running", which is
                # what was asked for; so does a guest paused meanwhile (see above).
                if _libvirt.error_code(exc) != lv.VIR_ERR_OPERATION_INVALID:
                    raise
                state = dom.state()[0] if dom.is_active() else lv.VIR_DOMAIN_SHUTOFF
                if state not in (lv.VIR_DOMAIN_SHUTDOWN, lv.VIR_DOMAIN_SHUTOFF, lv.VIR_DOMAIN_PAUSED):
                    raise

        await self._call(shutdown)

    async def destroy(self, name: str) -> None:
        def destroy(conn: Any) -> None:
            lv = _libvirt.load()
            dom = LibvirtDomain.find(conn, name)
            if dom is None:
                return
            try:
                dom.destroy()
            except lv.libvirtError as exc:
                if _libvirt.error_code(exc) != lv.VIR_ERR_OPERATION_INVALID or dom.is_active():
                    raise  # "domain is not running" means there is nothing to destroy

        await self._call(destroy)

    async def undefine(self, name: str) -> None:
        def undefine(conn: Any) -> None:
            lv = _libvirt.load()
            dom = LibvirtDomain.find(conn, name)
            if dom is None:
                return
            if dom.is_active():
                # libvirt would make it a transient domain that vanishes at its next stop; refuse instead.
                raise PermanentError(f"domain {name} is running: stop it before undefining it")
            # Leftovers someone else made (managed save, snapshot metadata) must not block the undefine.
            flags = lv.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE | lv.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA
            if self.flavor.undefine_checkpoints:
                flags |= lv.VIR_DOMAIN_UNDEFINE_CHECKPOINTS_METADATA
            try:
                dom.undefine(flags)
            except lv.libvirtError as exc:
                if _libvirt.error_code(exc) != lv.VIR_ERR_NO_DOMAIN:
                    raise
            self._stops.forget(name)

        await self._call(undefine)

    async def pause(self, name: str) -> None:
        def pause(conn: Any) -> None:
            lv = _libvirt.load()
            dom = LibvirtDomain.lookup(conn, name)
            if dom.state()[0] == lv.VIR_DOMAIN_PAUSED:
                return
            if not dom.is_active():
                raise PermanentError(f"domain {name} is not running")
            dom.suspend()

        await self._call(pause)

    async def resume(self, name: str) -> None:
        def resume(conn: Any) -> None:
            lv = _libvirt.load()
            dom = LibvirtDomain.lookup(conn, name)
            if dom.state()[0] in (lv.VIR_DOMAIN_PAUSED, lv.VIR_DOMAIN_PMSUSPENDED):
                dom.resume()
            elif not dom.is_active():
                raise PermanentError(f"domain {name} is not running")

        await self._call(resume)

    async def open_console(self, name: str) -> ConsoleStream:
        self._require(Capability.SERIAL_CONSOLE)  # libvirt's test driver has no consoles
        loop = asyncio.get_running_loop()
        return await self._call(
            lambda conn: console.open_console(
                conn, LibvirtDomain.lookup(conn, name), loop, self._calls.executor
            )
        )

    # ------------------------------------------------------------------ storage

    async def ensure_pool(self, pool: PoolRef) -> None:
        await self._call(lambda conn: storage.ensure_pool(conn, pool))

    async def inspect_image(self, image: ImageRef) -> ImageInfo:
        return await self._call(lambda conn: self._check_image(conn, image)[1])

    async def create_volume(
        self, pool: PoolRef, name: str, size_gib: int, source: ImageRef | None = None
    ) -> VolumeInfo:
        can_resize = Capability.VOLUME_RESIZE in self.capabilities

        def create(conn: Any) -> VolumeInfo:
            vol, capacity = None, 0
            if source is not None:
                vol, info = self._check_image(conn, source)
                capacity = info.virtual_size_bytes
            return storage.create_volume(conn, pool, name, size_gib, vol, capacity, can_resize=can_resize)

        return await self._call(create)

    async def upload_volume(self, pool: PoolRef, name: str, data: bytes) -> VolumeInfo:
        streams = self.flavor.volume_streams
        return await self._call(
            lambda conn: storage.upload_volume(conn, pool, name, data, can_stream=streams)
        )

    async def delete_volume(self, pool: PoolRef, name: str) -> None:
        await self._call(lambda conn: storage.delete_volume(conn, pool, name))

    async def resize_volume(self, pool: PoolRef, name: str, size_gib: int) -> VolumeInfo:
        self._require(Capability.VOLUME_RESIZE)
        return await self._call(lambda conn: storage.resize_volume(conn, pool, name, size_gib))

    # ------------------------------------------------------------------ snapshots

    async def snapshot_volume(self, pool: PoolRef, name: str, snapshot_id: str) -> str:
        live_backup = self.flavor.live_backup
        return await self._call(
            lambda conn: storage.snapshot_volume(conn, pool, name, snapshot_id, live_backup=live_backup)
        )

    async def revert_volume(self, pool: PoolRef, name: str, handle: str) -> None:
        await self._call(lambda conn: storage.revert_volume(conn, pool, name, handle))

    async def delete_volume_snapshot(self, handle: str) -> None:
        def delete(conn: Any) -> None:
            if not self._memory.delete_local(handle):  # a memory image of the test driver's
                storage.delete_snapshot(conn, handle)

        await self._call(delete)

    async def save_memory(self, name: str, snapshot_id: str) -> str:
        storage.check_name("snapshot id", snapshot_id)
        return await self._call(
            lambda conn: self._memory.save(conn, LibvirtDomain.lookup(conn, name), snapshot_id)
        )

    async def restore_memory(self, spec: DomainSpec, handle: str) -> None:
        await self.ensure_defined(spec)

        def restore(conn: Any) -> None:
            definition = self._domain_xml(conn, spec) if self.flavor.restore_with_definition else None
            dom = LibvirtDomain.lookup(conn, spec.name)
            if dom.is_active():
                raise PermanentError(f"domain {spec.name} is running; stop it before restoring memory")
            self._stops.clear(dom)
            self._memory.restore(conn, handle, definition)

        await self._call(restore)

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

    # ------------------------------------------------------------------ internals

    def _check_image(self, conn: Any, image: ImageRef) -> tuple[Any, ImageInfo]:
        return images.check_image(conn, image, local_view=self.flavor.local_view)

    def _domain_xml(self, conn: Any, spec: DomainSpec) -> str:
        if any(nic.vlan is not None for nic in spec.nics):
            check_vlans(spec, host_bridges(conn))
        kernel = images.image_path(conn, spec.kernel, local_view=self.flavor.local_view)
        initrd = images.image_path(conn, spec.initrd, local_view=self.flavor.local_view)
        return build_domain_xml(
            spec, self.flavor.xml, self._console_log(spec), kernel_path=kernel, initrd_path=initrd
        )

    def _require(self, capability: Capability) -> None:
        if capability not in self.capabilities:
            raise Unsupported(f"{self._uri} does not support {capability.value}")

    def _console_log(self, spec: DomainSpec) -> str | None:
        if spec.console_log:
            return spec.console_log
        if self._console_dir:
            return os.path.join(self._console_dir, f"{spec.name}.log")
        return None

    async def _call(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn(virConnect)`` on the pool; libvirt errors become driver errors."""
        return await self._calls.run(lambda: self._call_blocking(fn))

    def _call_blocking(self, fn: Callable[[Any], T]) -> T:
        lv = _libvirt.load()
        with self._connection.using() as conn:  # not closed while the call is in it
            try:
                return fn(conn)
            except DriverError:
                raise
            except lv.libvirtError as exc:
                alive = self._connection.is_alive()
                if not alive:
                    self._connection.lost(str(exc))
                raise _libvirt.translate(exc, connection_alive=alive) from exc

    def _info_unless_gone(self, dom: LibvirtDomain) -> DomainInfo | None:
        """What is reported of ``dom``; None when it was undefined since it was found."""
        lv = _libvirt.load()
        name = dom.name
        try:
            return domain_info(
                dom,
                stop_asked=self._stops.asked_for,
                saving=self._memory.saving(name),
                migrating=self._migrations.running(name),
            )
        except lv.libvirtError as exc:
            if _libvirt.error_code(exc) != lv.VIR_ERR_NO_DOMAIN:
                raise
            return None


__all__ = ["DEFAULT_STATE_DIR", "STATE_POOL", "LibvirtDriver"]
