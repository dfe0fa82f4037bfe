"""Hot-plug for the libvirt driver: disks and NICs attached to and detached from running domains.

Each change goes to the running instance and to the persistent definition, as two calls
(``VIR_DOMAIN_AFFECT_LIVE``, then ``_CONFIG``) rather than one with both flags: libvirt
matches a disk by its target, and the two may differ (a definition written since the start),
so each is changed by its own element. The persistent part is a courtesy: the VM controller
defines the domain from the VM's spec again at its next start. A live detach asks the
guest and returns (``detachDeviceAlias``); the device stays in the live XML until the
guest let it go, which ``live_devices`` shows.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, replace
from typing import Any

from virtplane.drivers.base import Capability, DiskAttachment, LiveDevices, NicAttachment
from virtplane.drivers.errors import NotRunning, PermanentError
from virtplane.drivers.libvirt.calls import LibvirtCalls
from virtplane.drivers.libvirt.domain import LibvirtDomain
from virtplane.drivers.libvirt.domain_xml import (
    _DISK_FORMATS,
    SEED_TARGET,
    disk_element,
    disk_target,
    nic_element,
    xml_text,
)


def hotplug_disk_xml(disk: DiskAttachment, used_targets: set[str]) -> str:
    """``disk`` as a device to attach, on the first virtio target the domain does not use."""
    if disk.format not in _DISK_FORMATS or not disk.path.startswith("/"):
        raise PermanentError(f"disk {disk.path!r} ({disk.format}) cannot be attached")
    index = 0
    while disk_target(index) in used_targets:
        index += 1
    return ET.tostring(disk_element(replace(disk, boot_order=None), disk_target(index)), encoding="unicode")


def hotplug_nic_xml(nic: NicAttachment) -> str:
    return ET.tostring(nic_element(nic), encoding="unicode")


@dataclass(frozen=True)
class DomainDevices:
    """The guest disks and NICs of one domain XML, as the elements libvirt matches them by."""

    disks: dict[str, ET.Element]  # source path -> its <disk> (libvirt matches a disk by its target)
    nics: dict[str, ET.Element]  # MAC -> its <interface>
    targets: set[str]  # every disk target in use (the seed's CD-ROM's too)
    seed_cdrom: ET.Element | None

    def alias(self, element: ET.Element) -> str:
        alias = element.find("alias")
        name = alias.get("name", "") if alias is not None else ""
        if not name:
            raise PermanentError("the running domain's device has no alias to detach it by")
        return name


def domain_devices(xml: str) -> DomainDevices:
    root = ET.fromstring(xml)
    disks: dict[str, ET.Element] = {}
    targets: set[str] = set()
    seed = None
    for disk in root.findall("devices/disk"):
        target = disk.find("target")
        dev = target.get("dev", "") if target is not None else ""
        targets.add(dev)
        if disk.get("device", "disk") == "cdrom" and dev == SEED_TARGET:
            seed = disk
            continue
        source = disk.find("source")
        path = (source.get("file") or source.get("dev") or "") if source is not None else ""
        if disk.get("device", "disk") == "disk" and path:
            disks[path] = disk
    nics = {}
    for interface in root.findall("devices/interface"):
        mac = interface.find("mac")
        address = mac.get("address", "").lower() if mac is not None else ""
        if address:
            nics[address] = interface
    return DomainDevices(disks, nics, targets, seed)


def seed_media_xml(cdrom: ET.Element, path: str) -> str:
    """The seed CD-ROM element ``cdrom`` with ``path`` as its media (for a media change)."""
    source = cdrom.find("source")
    if source is None:
        source = ET.SubElement(cdrom, "source")
    source.attrib.clear()
    source.set("file", xml_text(path))
    return ET.tostring(cdrom, encoding="unicode")


def _xml(element: ET.Element) -> str:
    return ET.tostring(element, encoding="unicode")


class DeviceHotplug(LibvirtCalls):
    def _running(self, conn: Any, name: str) -> tuple[LibvirtDomain, DomainDevices, DomainDevices | None]:
        """The domain, its live devices and (when it is persistent) its definition's."""
        self._require(Capability.HOTPLUG)
        dom = LibvirtDomain.lookup(conn, name)
        if not dom.is_active():
            raise NotRunning(f"domain {name} is not running: its devices come from its definition")
        config = domain_devices(dom.xml(inactive=True)) if dom.is_persistent() else None
        return dom, domain_devices(dom.xml()), config

    async def live_devices(self, name: str) -> LiveDevices | None:
        # reading works everywhere (libvirt's test driver too): what differs from the spec is
        # then said even where it cannot be changed

        def read(conn: Any) -> LiveDevices | None:
            dom = LibvirtDomain.find(conn, name)
            if dom is None or not dom.is_active():
                return None
            devices = domain_devices(dom.xml())
            return LiveDevices(tuple(devices.disks), tuple(devices.nics))

        return await self._call(read)

    async def attach_disk(self, name: str, disk: DiskAttachment) -> None:
        def attach(conn: Any) -> None:
            dom, live, config = self._running(conn, name)
            if disk.path not in live.disks:
                dom.change_device("attach", hotplug_disk_xml(disk, live.targets), live=True)
            if config is not None and disk.path not in config.disks:
                dom.change_device("attach", hotplug_disk_xml(disk, config.targets), live=False)

        await self._call(attach)

    async def detach_disk(self, name: str, path: str) -> None:
        def detach(conn: Any) -> None:
            dom, live, config = self._running(conn, name)
            if config is not None and path in config.disks:
                dom.change_device("detach", _xml(config.disks[path]), live=False)
            if path in live.disks:
                dom.change_device("detach", live.alias(live.disks[path]), live=True)

        await self._call(detach)

    async def attach_nic(self, name: str, nic: NicAttachment) -> None:
        def attach(conn: Any) -> None:
            dom, live, config = self._running(conn, name)
            if nic.mac not in live.nics:
                dom.change_device("attach", hotplug_nic_xml(nic), live=True)
            if config is not None and nic.mac not in config.nics:
                dom.change_device("attach", hotplug_nic_xml(nic), live=False)

        await self._call(attach)

    async def detach_nic(self, name: str, mac: str) -> None:
        def detach(conn: Any) -> None:
            dom, live, config = self._running(conn, name)
            if config is not None and mac in config.nics:
                dom.change_device("detach", _xml(config.nics[mac]), live=False)
            if mac in live.nics:
                dom.change_device("detach", live.alias(live.nics[mac]), live=True)

        await self._call(detach)

    async def change_seed(self, name: str, path: str) -> None:
        def change(conn: Any) -> None:
            dom, live, config = self._running(conn, name)
            if live.seed_cdrom is not None:
                dom.change_device("update", seed_media_xml(live.seed_cdrom, path), live=True)
            if config is not None and config.seed_cdrom is not None:
                dom.change_device("update", seed_media_xml(config.seed_cdrom, path), live=False)

        await self._call(change)


__all__ = ["DeviceHotplug", "DomainDevices", "domain_devices", "hotplug_disk_xml", "hotplug_nic_xml"]
