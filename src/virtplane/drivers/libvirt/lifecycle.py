"""The domain operations of the libvirt driver: define, start, stop, pause, look, the console and
the screen."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from virtplane.drivers.base import Capability, ConsoleStream, DisplayStream, DomainInfo, DomainSpec
from virtplane.drivers.errors import PermanentError, Unsupported
from virtplane.drivers.libvirt import _libvirt, console, display, display_ssh, images, stop_requests
from virtplane.drivers.libvirt.bridges import check_vlans, host_bridges
from virtplane.drivers.libvirt.calls import LibvirtCalls
from virtplane.drivers.libvirt.domain import LibvirtDomain
from virtplane.drivers.libvirt.domain_xml import build_domain_xml, parse_domain_xml, spec_digest
from virtplane.drivers.libvirt.events import domain_info
from virtplane.drivers.libvirt.memory import MemoryImages
from virtplane.drivers.libvirt.migration import MigrationTracker
from virtplane.drivers.libvirt.stop_requests import StopRequests


class DomainLifecycle(LibvirtCalls):
    _console_dir: str | None
    _stops: StopRequests
    _memory: MemoryImages
    _migrations: MigrationTracker
    _refusal: str = ""  # set by use_accelerator(None): why this host takes no guests

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
        if self._refusal:
            raise PermanentError(self._refusal)
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

    def _require_screens(self) -> None:
        if not self.flavor.xml.screen:
            raise Unsupported(f"{self._uri} gives its domains no screen")

    async def open_display(self, name: str) -> DisplayStream:
        self._require_screens()
        if display_ssh.is_ssh(self._uri):
            path = await self._call(lambda conn: display_ssh.vnc_socket(LibvirtDomain.lookup(conn, name)))
            return await display_ssh.open_over_ssh(self._uri, path)
        if not display.passes_descriptors(self._uri):
            raise Unsupported(
                f"a VM's screen is reached over a local UNIX socket or over ssh, not over "
                f"{self._uri.partition(':')[0]}: reach this host as qemu+ssh:// for a live screen "
                "(its screenshot works as it is)"
            )
        fd = await self._call(lambda conn: display.graphics_fd(LibvirtDomain.lookup(conn, name)))
        try:
            return await display.open_display(fd)
        except BaseException:
            os.close(fd)
            raise

    async def screenshot(self, name: str) -> bytes:
        self._require_screens()
        return await self._call(lambda conn: display.screenshot_png(conn, LibvirtDomain.lookup(conn, name)))

    def _domain_xml(self, conn: Any, spec: DomainSpec) -> str:
        if any(nic.vlan is not None for nic in spec.nics):
            check_vlans(spec, host_bridges(conn))
        kernel = images.image_path(conn, spec.kernel, local_view=self.flavor.local_view)
        initrd = images.image_path(conn, spec.initrd, local_view=self.flavor.local_view)
        cdrom = images.image_path(conn, spec.cdrom, local_view=self.flavor.local_view)
        return build_domain_xml(
            spec,
            self.flavor.xml,
            self._console_log(spec),
            kernel_path=kernel,
            initrd_path=initrd,
            cdrom_path=cdrom,
        )

    def _console_log(self, spec: DomainSpec) -> str | None:
        if spec.console_log:
            return spec.console_log
        if self._console_dir:
            return os.path.join(self._console_dir, f"{spec.name}.log")
        return None

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
