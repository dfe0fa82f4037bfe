"""Hot-plug in the libvirt driver (issue 32, item 4): the device XML it attaches and detaches by,
read from a running QEMU domain's live XML (with the aliases libvirt gives devices), and
libvirt's test driver, which reads them but cannot attach or detach (``Unsupported``, no HOTPLUG
capability).
The calls themselves run against real QEMU in tests/qemu/test_hotplug_qemu.py."""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET

import pytest

from tests.conftest import libvirt_or_skip
from virtplane.domain.resources import Capability
from virtplane.drivers.base import DiskAttachment, DomainSpec, LiveDevices, NicAttachment, domain_name
from virtplane.drivers.errors import PermanentError, Unsupported
from virtplane.drivers.libvirt.domain_xml import (
    HOTPLUG_PORTS,
    TEST_DRIVER_OPTIONS,
    XmlOptions,
    build_domain_xml,
)
from virtplane.drivers.libvirt.hotplug import (
    domain_devices,
    hotplug_disk_xml,
    hotplug_nic_xml,
    seed_media_xml,
)

LIVE_XML = """<domain type='qemu' id='3'><name>virtplane-x</name><devices>
  <disk type='file' device='disk'><driver name='qemu' type='qcow2' cache='none'/>
    <source file='/pools/shared/root.qcow2'/><target dev='vda' bus='virtio'/><boot order='1'/>
    <alias name='virtio-disk0'/></disk>
  <disk type='file' device='cdrom'><driver name='qemu' type='raw'/>
    <source file='/pools/shared/vp-seed-1.iso'/><target dev='sda' bus='scsi'/><readonly/>
    <alias name='scsi0-0-0-0'/></disk>
  <disk type='file' device='disk'><source file='/pools/shared/data.qcow2'/>
    <target dev='vdc' bus='virtio'/><alias name='virtio-disk2'/></disk>
  <interface type='bridge'><mac address='52:54:00:AA:00:01'/><source bridge='br0'/>
    <model type='virtio'/><alias name='net0'/></interface>
</devices></domain>"""


def test_the_live_xml_gives_each_device_by_path_or_mac_with_its_alias_and_free_targets() -> None:
    devices = domain_devices(LIVE_XML)
    assert list(devices.disks) == ["/pools/shared/root.qcow2", "/pools/shared/data.qcow2"]
    assert devices.alias(devices.disks["/pools/shared/data.qcow2"]) == "virtio-disk2"
    assert list(devices.nics) == ["52:54:00:aa:00:01"]  # lower case, as the spec has MACs
    assert devices.alias(devices.nics["52:54:00:aa:00:01"]) == "net0"
    assert devices.targets == {"vda", "sda", "vdc"}

    # a new disk takes the first free virtio target, never the boot order of the spec's disk
    added = hotplug_disk_xml(DiskAttachment(path="/pools/shared/new.qcow2", boot_order=2), devices.targets)
    assert '<target dev="vdb" bus="virtio" />' in added and "<boot" not in added
    assert 'cache="none"' in added
    with pytest.raises(PermanentError):
        hotplug_disk_xml(DiskAttachment(path="relative.qcow2"), devices.targets)
    nic = hotplug_nic_xml(NicAttachment(mac="52:54:00:aa:00:02", bridge="br1", network="lan2"))
    assert '<source bridge="br1" />' in nic and '<model type="virtio" />' in nic
    with pytest.raises(PermanentError):
        hotplug_nic_xml(NicAttachment(mac="52:54:00:aa:00:02", bridge=None, network="user"))

    assert devices.seed_cdrom is not None
    media = seed_media_xml(devices.seed_cdrom, "/pools/shared/vp-seed-2.iso")
    assert "vp-seed-2.iso" in media and "vp-seed-1.iso" not in media and 'dev="sda"' in media


def test_libvirts_test_driver_reads_a_running_domains_devices_but_cannot_hot_plug() -> None:
    libvirt_or_skip()
    from virtplane.drivers.libvirt import LibvirtDriver

    async def main() -> None:
        driver = LibvirtDriver("test:///default")
        await driver.connect()
        try:
            assert Capability.HOTPLUG not in driver.capabilities
            devices = await driver.live_devices("test")  # the test driver's own running domain
            assert devices == LiveDevices(("/guest/diskimage1",), ("aa:bb:cc:dd:ee:ff",))
            with pytest.raises(Unsupported, match="does not support hotplug"):
                await driver.attach_disk("test", DiskAttachment(path="/x.qcow2"))
            with pytest.raises(Unsupported, match="does not support hotplug"):
                await driver.detach_nic("test", "aa:bb:cc:dd:ee:ff")
        finally:
            await driver.close()

    asyncio.run(main())


def test_a_q35_domain_has_spare_pcie_root_ports_to_hot_plug_into() -> None:
    spec = DomainSpec(name=domain_name("u1"), vm_name="web", vm_uid="u1", cpu=1, memory_mib=128)
    root = ET.fromstring(build_domain_xml(spec, XmlOptions()))
    ports = [c for c in root.iterfind("devices/controller") if c.get("model") == "pcie-root-port"]
    assert [p.get("index") for p in ports] == [str(i) for i in range(1, HOTPLUG_PORTS + 1)]
    assert HOTPLUG_PORTS >= 2  # a disk and a NIC at least (the real-QEMU test adds both)
    test_driver = ET.fromstring(build_domain_xml(spec, TEST_DRIVER_OPTIONS))  # no machine, no ports
    assert test_driver.find("devices/controller") is None
