"""``LibvirtDriver``: the HypervisorDriver for any libvirt URI.

Blocking libvirt calls run in a small per-driver thread pool; libvirt
connections are thread-safe. Errors leave as ``virtplane.drivers.errors``.

Who stopped a domain: libvirt reports a clean guest power-off as state reason
"shutdown" whoever pressed the button. Before ``shutdown()`` presses it we
record a stop request in the domain's persistent metadata (and in memory), and
``start()`` clears it; so a guest that powers itself off is GUEST_SHUTDOWN and
one we shut down is STOPPED_BY_SYSTEM, also after the control plane restarts.

Memory snapshots are libvirt save images in ``state_dir`` on the host (a
directory pool named ``virtplane-state``); point ``state_dir`` at a shared
directory to restore them on another host.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from virtplane.drivers.base import (
    Capability,
    DomainEvent,
    DomainEventType,
    DomainInfo,
    DomainSpec,
    DomainState,
    EventSink,
    HostFacts,
    ImageInfo,
    ImageRef,
    MigrationJob,
    MigrationRequest,
    PoolRef,
    VolumeInfo,
    vm_uid_of,
)
from virtplane.drivers.errors import DriverError, NotFound, PermanentError, Unsupported
from virtplane.drivers.libvirt import _libvirt, images, storage
from virtplane.drivers.libvirt.connection import LibvirtConnection, Opener
from virtplane.drivers.libvirt.domain_xml import (
    STOP_NS,
    STOP_PREFIX,
    TEST_DRIVER_OPTIONS,
    XmlOptions,
    build_domain_xml,
    parse_domain_xml,
    parse_stop_request,
    spec_digest,
    stop_request_xml,
)
from virtplane.drivers.libvirt.events import MappedEvent, map_lifecycle, map_state, reboot_event
from virtplane.drivers.libvirt.migration import MigrationTracker, is_incoming, live_job, migration_parameters

log = logging.getLogger(__name__)
T = TypeVar("T")

STATE_POOL = "virtplane-state"
DEFAULT_STATE_DIR = "/var/lib/libvirt/virtplane/state"

_ALL_CAPABILITIES = frozenset(
    {
        Capability.LIVE_MIGRATION,
        Capability.BLOCK_MIGRATION,
        Capability.MEMORY_SNAPSHOT,
        Capability.DISK_SNAPSHOT,
        Capability.VOLUME_RESIZE,
    }
)
# libvirt's test driver has no migration, no job control and no volume resize.
_TEST_DRIVER_CAPABILITIES = frozenset({Capability.MEMORY_SNAPSHOT, Capability.DISK_SNAPSHOT})


class LibvirtDriver:
    """One connection to one libvirt host (``qemu:///system``, ``qemu+ssh://h/system``, ``test:///...``).

    ``domain_type`` is the ``<domain type=...>`` for QEMU hosts ("qemu" is TCG;
    "kvm" where hardware virtualization works); libvirt's test driver only
    runs its own "test" domains, which it gets whatever is passed here.
    ``console_dir``: where each domain's serial console is logged (on the host),
    as ``<console_dir>/<domain>.log``, unless the spec names a file.
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
        keepalive_interval_s: int = 5,
        keepalive_count: int = 3,
        reconnect_initial_s: float = 0.5,
        reconnect_max_s: float = 30.0,
        opener: Opener | None = None,
    ) -> None:
        self._uri = uri
        self._is_test_driver = uri.split(":", 1)[0] == "test"
        self._xml_options = (
            TEST_DRIVER_OPTIONS if self._is_test_driver else XmlOptions(domain_type=domain_type)
        )
        self._console_dir = console_dir
        self._state_dir = state_dir
        self._own_state_dir: str | None = None
        self._migration_address = migration_address
        self._sink: EventSink | None = None
        self._stop_requested: set[str] = set()
        self._quiet: set[str] = set()  # domains stopped only for the instant of a memory save
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="libvirt")
        self._callback_ids: list[int] = []
        self._migrations = MigrationTracker(on_failed=self._migration_failed)
        self._connection = LibvirtConnection(
            uri,
            on_open=self._register_callbacks,
            on_up=lambda: self._emit_host(DomainEventType.HOST_UP, "connected"),
            on_down=lambda why: self._emit_host(DomainEventType.HOST_DOWN, why),
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
        return _TEST_DRIVER_CAPABILITIES if self._is_test_driver else _ALL_CAPABILITIES

    async def connect(self) -> None:
        _libvirt.load()
        await self._blocking(self._connection.open)

    async def close(self) -> None:
        await self._blocking(self._connection.close)
        self._executor.shutdown(wait=False)
        if self._own_state_dir is not None:
            shutil.rmtree(self._own_state_dir, ignore_errors=True)

    def set_event_sink(self, sink: EventSink | None) -> None:
        self._sink = sink

    async def host_facts(self) -> HostFacts:
        def facts(conn: Any) -> HostFacts:
            info = conn.getInfo()
            return HostFacts(hostname=conn.getHostname(), vcpus=int(info[2]), memory_mib=int(info[1]))

        return await self._call(facts)

    # ------------------------------------------------------------------ domains

    async def list_domains(self) -> list[DomainInfo]:
        def listing(conn: Any) -> list[DomainInfo]:
            lv = _libvirt.load()
            infos = []
            for dom in conn.listAllDomains(0):
                try:
                    infos.append(self._domain_info(dom))
                except lv.libvirtError as exc:
                    if _libvirt.error_code(exc) != lv.VIR_ERR_NO_DOMAIN:
                        raise  # one that vanished mid-listing is simply not there
            return infos

        return await self._call(listing)

    async def get_info(self, name: str) -> DomainInfo | None:
        def info(conn: Any) -> DomainInfo | None:
            lv = _libvirt.load()
            dom = self._lookup(conn, name, missing_ok=True)
            if dom is None:
                return None
            try:
                return self._domain_info(dom)
            except lv.libvirtError as exc:
                if _libvirt.error_code(exc) != lv.VIR_ERR_NO_DOMAIN:
                    raise
                return None  # undefined between the lookup and the read: it is not there

        return await self._call(info)

    async def ensure_defined(self, spec: DomainSpec) -> None:
        console_log = self._console_log(spec)
        digest = spec_digest(spec, self._xml_options, console_log)

        def define(conn: Any) -> None:
            lv = _libvirt.load()
            xml = self._domain_xml(conn, spec)  # checks the boot files even when nothing changed
            dom = self._lookup(conn, spec.name, missing_ok=True)
            stop_requested = False
            if dom is not None:
                if parse_domain_xml(dom.XMLDesc(lv.VIR_DOMAIN_XML_INACTIVE)).digest == digest:
                    return
                stop_requested = self._stop_mark(dom)
            dom = conn.defineXML(xml)
            if stop_requested:  # a redefinition must not turn our shutdown into the guest's
                self._set_stop_mark(dom, True)

        await self._call(define)

    async def start(self, name: str) -> None:
        def start(conn: Any) -> None:
            dom = self._lookup(conn, name)
            if dom.isActive():
                return
            with self._lock:
                self._stop_requested.discard(name)
            self._set_stop_mark(dom, False)
            dom.create()

        await self._call(start)

    async def shutdown(self, name: str) -> None:
        def shutdown(conn: Any) -> None:
            lv = _libvirt.load()
            dom = self._lookup(conn, name)
            if not dom.isActive():
                return
            with self._lock:
                self._stop_requested.add(name)
            try:
                self._set_stop_mark(dom, True)
                if self._is_test_driver:
                    dom.shutdown()
                else:
                    dom.shutdownFlags(lv.VIR_DOMAIN_SHUTDOWN_ACPI_POWER_BTN)
            except lv.libvirtError as exc:
                # The button is pressed again while a guest powers off: one that is being shut
                # down (or is off) since isActive() gives "domain is not running", which is
                # what was asked for.
                if _libvirt.error_code(exc) != lv.VIR_ERR_OPERATION_INVALID:
                    raise
                state = dom.state()[0] if dom.isActive() else lv.VIR_DOMAIN_SHUTOFF
                if state not in (lv.VIR_DOMAIN_SHUTDOWN, lv.VIR_DOMAIN_SHUTOFF):
                    raise

        await self._call(shutdown)

    async def destroy(self, name: str) -> None:
        def destroy(conn: Any) -> None:
            lv = _libvirt.load()
            dom = self._lookup(conn, name, missing_ok=True)
            if dom is None:
                return
            try:
                dom.destroy()
            except lv.libvirtError as exc:
                if _libvirt.error_code(exc) != lv.VIR_ERR_OPERATION_INVALID or dom.isActive():
                    raise  # "domain is not running" means there is nothing to destroy

        await self._call(destroy)

    async def undefine(self, name: str) -> None:
        def undefine(conn: Any) -> None:
            lv = _libvirt.load()
            dom = self._lookup(conn, name, missing_ok=True)
            if dom is None:
                return
            if dom.isActive():
                # libvirt would make it a transient domain that vanishes at its next stop; refuse instead.
                raise PermanentError(f"domain {name} is running: stop it before undefining it")
            # Leftovers someone else made (managed save, snapshot metadata) must not block the undefine.
            flags = lv.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE | lv.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA
            if not self._is_test_driver:
                flags |= lv.VIR_DOMAIN_UNDEFINE_CHECKPOINTS_METADATA
            try:
                dom.undefineFlags(flags)
            except lv.libvirtError as exc:
                code = _libvirt.error_code(exc)
                if code != lv.VIR_ERR_NO_DOMAIN:
                    raise
            with self._lock:
                self._stop_requested.discard(name)

        await self._call(undefine)

    async def pause(self, name: str) -> None:
        def pause(conn: Any) -> None:
            lv = _libvirt.load()
            dom = self._lookup(conn, name)
            state = dom.state()[0]
            if state == lv.VIR_DOMAIN_PAUSED:
                return
            if not dom.isActive():
                raise PermanentError(f"domain {name} is not running")
            dom.suspend()

        await self._call(pause)

    async def resume(self, name: str) -> None:
        def resume(conn: Any) -> None:
            lv = _libvirt.load()
            dom = self._lookup(conn, name)
            if dom.state()[0] in (lv.VIR_DOMAIN_PAUSED, lv.VIR_DOMAIN_PMSUSPENDED):
                dom.resume()
            elif not dom.isActive():
                raise PermanentError(f"domain {name} is not running")

        await self._call(resume)

    # ------------------------------------------------------------------ storage

    async def ensure_pool(self, pool: PoolRef) -> None:
        await self._call(lambda conn: storage.ensure_pool(conn, pool))

    async def inspect_image(self, image: ImageRef) -> ImageInfo:
        return await self._call(lambda conn: images.check_image(conn, image, local_view=self._local_view)[1])

    async def create_volume(
        self, pool: PoolRef, name: str, size_gib: int, source: ImageRef | None = None
    ) -> VolumeInfo:
        can_resize = Capability.VOLUME_RESIZE in self.capabilities

        def create(conn: Any) -> VolumeInfo:
            vol, capacity = None, 0
            if source is not None:
                vol, info = images.check_image(conn, source, local_view=self._local_view)
                capacity = info.virtual_size_bytes
            return storage.create_volume(conn, pool, name, size_gib, vol, capacity, can_resize=can_resize)

        return await self._call(create)

    async def delete_volume(self, pool: PoolRef, name: str) -> None:
        await self._call(lambda conn: storage.delete_volume(conn, pool, name))

    async def resize_volume(self, pool: PoolRef, name: str, size_gib: int) -> VolumeInfo:
        self._require(Capability.VOLUME_RESIZE)
        return await self._call(lambda conn: storage.resize_volume(conn, pool, name, size_gib))

    async def copy_volume(self, src: PoolRef, src_name: str, dst: PoolRef, dst_name: str) -> VolumeInfo:
        return await self._call(lambda conn: storage.copy_volume(conn, src, src_name, dst, dst_name))

    # ------------------------------------------------------------------ snapshots

    async def snapshot_volume(self, pool: PoolRef, name: str, snapshot_id: str) -> str:
        live_backup = not self._is_test_driver
        return await self._call(
            lambda conn: storage.snapshot_volume(conn, pool, name, snapshot_id, live_backup=live_backup)
        )

    async def revert_volume(self, pool: PoolRef, name: str, handle: str) -> None:
        await self._call(lambda conn: storage.revert_volume(conn, pool, name, handle))

    async def delete_volume_snapshot(self, handle: str) -> None:
        def delete(conn: Any) -> None:
            if self._own_state_dir is not None and os.path.dirname(handle) == self._own_state_dir:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(handle)  # a test-driver memory image, kept in a local directory
                return
            storage.delete_snapshot(conn, handle)

        await self._call(delete)

    async def save_memory(self, name: str, snapshot_id: str) -> str:
        storage.check_name("snapshot id", snapshot_id)

        def save(conn: Any) -> str:
            lv = _libvirt.load()
            dom = self._lookup(conn, name)
            if not dom.isActive():
                raise PermanentError(f"domain {name} is not running: no memory to save")
            directory = self._memory_dir(conn)
            path = os.path.join(directory, f"{name}.{snapshot_id}.mem")
            was_paused = dom.state()[0] == lv.VIR_DOMAIN_PAUSED
            with self._lock:
                self._quiet.add(name)
            try:
                # A save stops the domain; restoring right away keeps it running (or paused) as it was.
                keep_paused = lv.VIR_DOMAIN_SAVE_PAUSED if was_paused and not self._is_test_driver else 0
                dom.saveFlags(path, None, keep_paused)
                conn.restoreFlags(path, None, keep_paused)
                if was_paused and self._is_test_driver:
                    dom.suspend()  # the test driver has no "restore paused" flag
            finally:
                with self._lock:
                    self._quiet.discard(name)
            if not self._is_test_driver:
                self._state_pool(conn).refresh(0)
            return path

        return await self._call(save)

    async def restore_memory(self, spec: DomainSpec, handle: str) -> None:
        await self.ensure_defined(spec)

        def restore(conn: Any) -> None:
            dxml = None if self._is_test_driver else self._domain_xml(conn, spec)
            dom = self._lookup(conn, spec.name)
            if dom.isActive():
                raise PermanentError(f"domain {spec.name} is running; stop it before restoring memory")
            with self._lock:
                self._stop_requested.discard(spec.name)
            self._set_stop_mark(dom, False)
            conn.restoreFlags(handle, dxml, 0)

        await self._call(restore)

    # ------------------------------------------------------------------ migration

    async def migrate(self, request: MigrationRequest) -> None:
        self._require(Capability.BLOCK_MIGRATION if request.copy_disks else Capability.LIVE_MIGRATION)
        if request.target_uri == self._uri:
            raise PermanentError("cannot migrate a domain to the host it runs on")

        def begin(conn: Any) -> None:
            dom = self._lookup(conn, request.domain)
            if not dom.isActive():
                raise PermanentError(
                    f"domain {request.domain} is not running; only live migration is supported"
                )
            params, flags = migration_parameters(
                request, dom.XMLDesc(0), migration_address=self._migration_address
            )
            self._migrations.start(dom, request, params, flags)

        await self._call(begin)

    async def migration_job(self, name: str) -> MigrationJob | None:
        def job(conn: Any) -> MigrationJob | None:
            dom = self._lookup(conn, name, missing_ok=True)
            if self._migrations.running(name):
                return self._migrations.job(name, dom)
            # one started by an earlier process or another replica, which the hypervisor still runs
            live = live_job(dom) if dom is not None and dom.isActive() else None
            return live or self._migrations.job(name, None)

        return await self._call(job)

    async def abort_migration(self, name: str) -> None:
        def abort(conn: Any) -> None:
            lv = _libvirt.load()
            dom = self._lookup(conn, name, missing_ok=True)
            if dom is None:
                return
            ours = self._migrations.request_abort(name)
            if not ours and (not dom.isActive() or live_job(dom) is None):
                return  # no migration runs
            try:
                dom.abortJob()
            except lv.libvirtError as exc:
                if _libvirt.error_code(exc) != lv.VIR_ERR_OPERATION_INVALID:
                    raise  # "no job is active": it finished just now

        await self._call(abort)

    # ------------------------------------------------------------------ internals

    @property
    def _local_view(self) -> bool:
        """Whether library files are checked on this machine's filesystem too (see ``images``)."""
        return not self._is_test_driver

    def _domain_xml(self, conn: Any, spec: DomainSpec) -> str:
        kernel = images.image_path(conn, spec.kernel, local_view=self._local_view)
        initrd = images.image_path(conn, spec.initrd, local_view=self._local_view)
        return build_domain_xml(
            spec, self._xml_options, self._console_log(spec), kernel_path=kernel, initrd_path=initrd
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

    async def _blocking(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def _call(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn(virConnect)`` in the executor; libvirt errors become driver errors."""
        return await self._blocking(lambda: self._call_blocking(fn))

    def _call_blocking(self, fn: Callable[[Any], T]) -> T:
        lv = _libvirt.load()
        conn = self._connection.get()
        try:
            return fn(conn)
        except DriverError:
            raise
        except lv.libvirtError as exc:
            alive = self._connection.is_alive()
            if not alive:
                self._connection.lost(str(exc))
            raise _libvirt.translate(exc, connection_alive=alive) from exc

    @staticmethod
    def _lookup(conn: Any, name: str, *, missing_ok: bool = False) -> Any:
        lv = _libvirt.load()
        try:
            return conn.lookupByName(name)
        except lv.libvirtError as exc:
            if _libvirt.error_code(exc) != lv.VIR_ERR_NO_DOMAIN:
                raise
            if missing_ok:
                return None
            raise NotFound(f"domain {name} does not exist") from exc

    def _stop_mark(self, dom: Any) -> bool:
        lv = _libvirt.load()
        try:
            xml = dom.metadata(lv.VIR_DOMAIN_METADATA_ELEMENT, STOP_NS, lv.VIR_DOMAIN_AFFECT_CONFIG)
        except lv.libvirtError as exc:
            if _libvirt.error_code(exc) == lv.VIR_ERR_NO_DOMAIN_METADATA:
                return False
            raise
        return parse_stop_request(xml)

    def _set_stop_mark(self, dom: Any, requested: bool) -> None:
        lv = _libvirt.load()
        flags = lv.VIR_DOMAIN_AFFECT_CONFIG
        if dom.isActive():
            flags |= lv.VIR_DOMAIN_AFFECT_LIVE
        if requested:
            dom.setMetadata(
                lv.VIR_DOMAIN_METADATA_ELEMENT, stop_request_xml(True), STOP_PREFIX, STOP_NS, flags
            )
        else:
            dom.setMetadata(lv.VIR_DOMAIN_METADATA_ELEMENT, None, None, STOP_NS, flags)

    def _stop_requested_for(self, dom: Any, name: str) -> bool:
        with self._lock:
            if name in self._stop_requested:
                return True
        return self._stop_mark(dom)

    def _domain_info(self, dom: Any) -> DomainInfo:
        lv = _libvirt.load()
        name = dom.name()
        state, reason = dom.state()
        stop_requested = False
        if state == lv.VIR_DOMAIN_SHUTOFF and reason == lv.VIR_DOMAIN_SHUTOFF_SHUTDOWN:
            stop_requested = self._stop_requested_for(dom, name)
        ours, exit_reason = map_state(state, reason, stop_requested=stop_requested)
        with self._lock:
            saving = name in self._quiet
        if saving:
            ours, exit_reason = DomainState.PAUSED, None  # stopped only for the instant of a memory save
        elif ours in (DomainState.RUNNING, DomainState.PAUSED) and self._migrations.running(name):
            ours = DomainState.MIGRATING
        elif ours is DomainState.PAUSED and is_incoming(dom, state, reason):
            ours = DomainState.INCOMING
        migrated_away = state == lv.VIR_DOMAIN_SHUTOFF and reason == lv.VIR_DOMAIN_SHUTOFF_MIGRATED
        _state, max_memory_kib, _memory, vcpus, _cpu_time = dom.info()
        return DomainInfo(
            name=name,
            vm_uid=vm_uid_of(name),
            state=ours,
            exit_reason=exit_reason,
            cpu=int(vcpus),
            memory_mib=int(max_memory_kib) // 1024,
            migrated_away=migrated_away,
        )

    def _memory_dir(self, conn: Any) -> str:
        if self._is_test_driver:
            # The test driver runs in this process and writes save images to the local filesystem.
            if self._state_dir is not None:
                os.makedirs(self._state_dir, exist_ok=True)
                return self._state_dir
            if self._own_state_dir is None:
                self._own_state_dir = tempfile.mkdtemp(prefix="virtplane-libvirt-test-")
            return self._own_state_dir
        return storage.pool_path(self._state_pool(conn))

    def _state_pool(self, conn: Any) -> Any:
        return storage.ensure_pool(conn, PoolRef(name=STATE_POOL, path=self._state_dir or DEFAULT_STATE_DIR))

    # -- events (called on libvirt's event loop thread)

    def _register_callbacks(self, conn: Any) -> None:
        lv = _libvirt.load()
        self._callback_ids = [
            conn.domainEventRegisterAny(None, lv.VIR_DOMAIN_EVENT_ID_LIFECYCLE, self._on_lifecycle, None),
            conn.domainEventRegisterAny(None, lv.VIR_DOMAIN_EVENT_ID_REBOOT, self._on_reboot, None),
        ]

    def _on_lifecycle(self, _conn: Any, dom: Any, event: int, detail: int, _opaque: object) -> None:
        try:
            name = dom.name()
            with self._lock:
                stop_requested = name in self._stop_requested
            mapped = map_lifecycle(event, detail, stop_requested=stop_requested)
            if mapped is not None:
                self._emit(name, mapped)
        except Exception:
            log.exception("libvirt lifecycle callback failed")

    def _on_reboot(self, _conn: Any, dom: Any, _opaque: object) -> None:
        try:
            self._emit(dom.name(), reboot_event())
        except Exception:
            log.exception("libvirt reboot callback failed")

    def _emit(self, name: str, mapped: MappedEvent) -> None:
        sink = self._sink
        if sink is None:
            return
        sink(DomainEvent(self._uri, name, vm_uid_of(name), mapped.type, mapped.reason, mapped.detail))

    def _emit_host(self, event_type: DomainEventType, detail: str) -> None:
        sink = self._sink
        if sink is not None:
            try:
                sink(DomainEvent(self._uri, "", "", event_type, None, detail))
            except Exception:
                log.exception("event sink failed on %s", event_type)

    def _migration_failed(self, job: MigrationJob) -> None:
        sink = self._sink
        if sink is not None:
            sink(
                DomainEvent(
                    self._uri,
                    job.domain,
                    vm_uid_of(job.domain),
                    DomainEventType.MIGRATION_FAILED,
                    None,
                    job.error or job.phase,
                )
            )


__all__ = ["DEFAULT_STATE_DIR", "STATE_POOL", "LibvirtDriver"]
