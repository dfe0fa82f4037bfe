"""``LibvirtDomain``: a typed handle on one libvirt domain, with the calls the driver makes.

libvirt-python's ``virDomain`` is untyped. This class is the one place that holds it:
the rest of the driver passes a ``LibvirtDomain`` and gets ints, strings and booleans
back. Its methods block (the driver runs them in its executor) and raise libvirt's own
errors, which the driver translates into ``virtplane.drivers.errors`` at its edge.
"""

from __future__ import annotations

from typing import Any

from virtplane.drivers.errors import NotFound
from virtplane.drivers.libvirt import _libvirt


class LibvirtDomain:
    __slots__ = ("_dom",)

    def __init__(self, dom: Any) -> None:
        self._dom = dom

    # ------------------------------------------------------------------ finding domains

    @classmethod
    def find(cls, conn: Any, name: str) -> LibvirtDomain | None:
        """The domain called ``name`` on ``conn``, or None when there is none."""
        lv = _libvirt.load()
        try:
            return cls(conn.lookupByName(name))
        except lv.libvirtError as exc:
            if _libvirt.error_code(exc) != lv.VIR_ERR_NO_DOMAIN:
                raise
            return None

    @classmethod
    def lookup(cls, conn: Any, name: str) -> LibvirtDomain:
        """The domain called ``name``; NotFound when there is none."""
        dom = cls.find(conn, name)
        if dom is None:
            raise NotFound(f"domain {name} does not exist")
        return dom

    @classmethod
    def list_all(cls, conn: Any, *, active_only: bool = False) -> list[LibvirtDomain]:
        lv = _libvirt.load()
        flags = lv.VIR_CONNECT_LIST_DOMAINS_ACTIVE if active_only else 0
        return [cls(dom) for dom in conn.listAllDomains(flags)]

    # ------------------------------------------------------------------ reading

    @property
    def name(self) -> str:
        return str(self._dom.name())

    def state(self) -> tuple[int, int]:
        """libvirt's ``(state, reason)`` codes."""
        state, reason = self._dom.state()
        return int(state), int(reason)

    def is_active(self) -> bool:
        return bool(self._dom.isActive())

    def is_persistent(self) -> bool:
        return bool(self._dom.isPersistent())

    def size(self) -> tuple[int, int]:
        """``(vcpus, memory_mib)``: the vCPUs and the maximum memory of the domain."""
        _state, max_memory_kib, _memory, vcpus, _cpu_time = self._dom.info()
        return int(vcpus), int(max_memory_kib) // 1024

    def xml(self, *, inactive: bool = False) -> str:
        """The live definition, or with ``inactive`` the persistent one."""
        flags = _libvirt.load().VIR_DOMAIN_XML_INACTIVE if inactive else 0
        return str(self._dom.XMLDesc(flags))

    def metadata(self, namespace: str) -> str | None:
        """The persistent metadata element of ``namespace``; None when it is not set."""
        lv = _libvirt.load()
        try:
            return str(
                self._dom.metadata(lv.VIR_DOMAIN_METADATA_ELEMENT, namespace, lv.VIR_DOMAIN_AFFECT_CONFIG)
            )
        except lv.libvirtError as exc:
            if _libvirt.error_code(exc) == lv.VIR_ERR_NO_DOMAIN_METADATA:
                return None
            raise

    def job_type(self) -> int:
        """libvirt's type of the domain's current job (``VIR_DOMAIN_JOB_NONE``: no job)."""
        return int(self._dom.jobInfo()[0])

    def job_stats(self, *, completed: bool = False) -> dict[str, Any]:
        """Statistics of the current job, or with ``completed`` of the job that ended last."""
        flags = _libvirt.load().VIR_DOMAIN_JOB_STATS_COMPLETED if completed else 0
        return dict(self._dom.jobStats(flags))

    # ------------------------------------------------------------------ acting

    def set_metadata(self, namespace: str, prefix: str | None, xml: str | None) -> None:
        """Set (or with ``xml`` None remove) the metadata element of ``namespace``, in the
        persistent definition and, while the domain runs, in the live one too."""
        lv = _libvirt.load()
        flags = lv.VIR_DOMAIN_AFFECT_CONFIG
        if self.is_active():
            flags |= lv.VIR_DOMAIN_AFFECT_LIVE
        self._dom.setMetadata(lv.VIR_DOMAIN_METADATA_ELEMENT, xml, prefix, namespace, flags)

    def create(self) -> None:
        self._dom.create()

    def open_console(self, stream: Any) -> None:
        """Connect ``stream`` to the domain's first console (serial port 0), without FORCE."""
        self._dom.openConsole(None, stream, 0)

    def open_graphics_fd(self, flags: int) -> int:
        """A file descriptor connected to the domain's first graphics (VNC) server."""
        return int(self._dom.openGraphicsFD(0, flags))

    def screenshot(self, stream: Any) -> str:
        """Stream the first screen's picture into ``stream``; returns its MIME type."""
        return str(self._dom.screenshot(stream, 0, 0))

    def shutdown(self, *, power_button: bool) -> None:
        """Ask the guest to power off: by the ACPI power button, or the hypervisor's default way."""
        if power_button:
            self._dom.shutdownFlags(_libvirt.load().VIR_DOMAIN_SHUTDOWN_ACPI_POWER_BTN)
        else:
            self._dom.shutdown()

    def shutdown_by_agent(self) -> None:
        """Ask the guest's agent to power the guest off (it runs the guest's own shutdown)."""
        self._dom.shutdownFlags(_libvirt.load().VIR_DOMAIN_SHUTDOWN_GUEST_AGENT)

    def agent_interfaces(self) -> dict[str, Any]:
        """The guest's interfaces as its agent reports them: name → {hwaddr, addrs: [{addr, prefix}]}."""
        source = _libvirt.load().VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_AGENT
        return dict(self._dom.interfaceAddresses(source, 0) or {})

    def freeze_filesystems(self) -> int:
        return int(self._dom.fsFreeze(None, 0))

    def thaw_filesystems(self) -> int:
        return int(self._dom.fsThaw(None, 0))

    def destroy(self) -> None:
        self._dom.destroy()

    def undefine(self, flags: int) -> None:
        self._dom.undefineFlags(flags)

    def suspend(self) -> None:
        self._dom.suspend()

    def resume(self) -> None:
        self._dom.resume()

    def save(self, path: str, *, paused: bool) -> None:
        """Save the memory to ``path`` (the domain stops); ``paused``: a restore of the image
        brings the guest back paused."""
        self._dom.saveFlags(path, None, _libvirt.load().VIR_DOMAIN_SAVE_PAUSED if paused else 0)

    def migrate(self, target_uri: str, params: dict[str, Any], flags: int) -> None:
        """``migrateToURI3``: blocks until the migration ended."""
        self._dom.migrateToURI3(target_uri, params, flags)

    def abort_job(self) -> None:
        self._dom.abortJob()

    def set_max_downtime(self, ms: int) -> None:
        """The longest pause the switch-over of a migration may take (QEMU's downtime-limit)."""
        self._dom.migrateSetMaxDowntime(ms, 0)

    def start_post_copy(self) -> None:
        """Switch the running outgoing migration (started with VIR_MIGRATE_POSTCOPY) to post-copy."""
        self._dom.migrateStartPostCopy(0)

    def change_device(self, verb: str, xml: str, *, live: bool) -> None:
        """``attach``, ``detach`` or ``update`` the device ``xml`` in the running instance
        (``live``) or in the persistent definition. A live detach is asynchronous: it asks the
        guest, and the device stays until the guest has let it go."""
        lv = _libvirt.load()
        flags = lv.VIR_DOMAIN_AFFECT_LIVE if live else lv.VIR_DOMAIN_AFFECT_CONFIG
        if verb == "detach" and live:
            # by alias: returns once asked (detachDeviceFlags would wait up to 5 s for the guest)
            self._dom.detachDeviceAlias(xml, flags)
            return
        call = {"attach": self._dom.attachDeviceFlags, "detach": self._dom.detachDeviceFlags}.get(
            verb, self._dom.updateDeviceFlags
        )
        call(xml, flags)

    def begin_backup(self, xml: str) -> None:
        self._dom.backupBegin(xml, None, 0)


__all__ = ["LibvirtDomain"]
