"""NICs, the seed CD-ROM, bridges and VLANs in the libvirt driver (issue 14).

The XML rules are pure; the rest runs against libvirt's test driver, whose node
interfaces stand for a host's (defined through libvirt's interface API, as the udev
backend reports a real host's).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable

import pytest

from tests.conftest import libvirt_or_skip
from virtplane.drivers.base import DiskAttachment, DomainSpec, NicAttachment, PoolRef, domain_name
from virtplane.drivers.errors import PermanentError
from virtplane.drivers.libvirt.bridges import parse_bridge
from virtplane.drivers.libvirt.domain_xml import (
    TEST_DRIVER_OPTIONS,
    XmlOptions,
    build_domain_xml,
    parse_domain_xml,
)

UID = "5f0c9d2e-8a1b-4c3d-9e7f-6a5b4c3d2e1f"
LAN = NicAttachment(mac="52:54:00:0a:0b:0c", bridge="br0", network="lan")
TAGGED = NicAttachment(mac="52:54:00:0a:0b:0d", bridge="br100", vlan=100, network="tagged")
SEED = "/var/lib/virtplane/pools/shared/vp-seed-abc.iso"


def spec(**overrides: object) -> DomainSpec:
    fields: dict[str, object] = {
        "name": domain_name(UID),
        "vm_name": "web",
        "vm_uid": UID,
        "cpu": 1,
        "memory_mib": 128,
        "disks": (DiskAttachment(path="/pools/a/root.qcow2", boot_order=1),),
    }
    fields.update(overrides)
    return DomainSpec(**fields)  # type: ignore[arg-type]


def test_one_bridge_interface_per_nic_and_the_seed_as_a_read_only_cdrom() -> None:
    root = ET.fromstring(build_domain_xml(spec(nics=(LAN, TAGGED), seed=SEED), XmlOptions()))
    interfaces = root.findall("devices/interface")
    assert [
        (
            i.get("type"),
            i.find("mac").get("address"),
            i.find("source").get("bridge"),
            i.find("model").get("type"),
        )  # type: ignore[union-attr]
        for i in interfaces
    ] == [("bridge", LAN.mac, "br0", "virtio"), ("bridge", TAGGED.mac, "br100", "virtio")]
    assert root.find("devices/interface/vlan") is None, "libvirt tags no port of a Linux bridge"
    (cdrom,) = root.findall("devices/disk[@device='cdrom']")
    assert cdrom.find("source").get("file") == SEED  # type: ignore[union-attr]
    assert cdrom.find("readonly") is not None
    assert cdrom.find("target").attrib == {"dev": "sda", "bus": "scsi"}  # type: ignore[union-attr]
    (controller,) = root.findall("devices/controller[@type='scsi']")
    assert controller.get("model") == "virtio-scsi"  # the cloud kernels have no AHCI for SATA
    # the guest's disks (what snapshots and migrations copy) are not the seed
    assert parse_domain_xml(ET.tostring(root, encoding="unicode")).disks == (("vda", "/pools/a/root.qcow2"),)


def test_no_nic_and_no_cdrom_without_them() -> None:
    root = ET.fromstring(build_domain_xml(spec(), XmlOptions()))
    assert root.findall("devices/interface") == []
    assert root.findall("devices/disk[@device='cdrom']") == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"nics": (NicAttachment(mac=LAN.mac, bridge=None, network="user"),)},
            "only simulated hosts offer one",
        ),
        ({"nics": (NicAttachment(mac="53:54:00:0a:0b:0c", bridge="br0"),)}, "not a lower-case unicast MAC"),
        ({"nics": (NicAttachment(mac="52:54:00:0A:0B:0C", bridge="br0"),)}, "not a lower-case unicast MAC"),
        ({"seed": "seed.iso"}, "is not absolute"),
    ],
    ids=["user network", "multicast MAC", "upper-case MAC", "relative seed"],
)
def test_what_a_libvirt_host_cannot_honour_is_refused(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(PermanentError, match=message):
        build_domain_xml(spec(**overrides), TEST_DRIVER_OPTIONS)


@pytest.mark.parametrize(
    ("xml", "parsed"),
    [
        ("<interface type='bridge' name='br0'><bridge/></interface>", ("br0", frozenset())),
        (
            "<interface type='bridge' name='br100'><bridge><interface type='vlan' name='eth0.100'>"
            "<vlan tag='100'><interface name='eth0'/></vlan></interface></bridge></interface>",
            ("br100", frozenset({100})),
        ),
        ("<interface type='ethernet' name='eth0'/>", None),
    ],
    ids=["bridge", "bridge over a VLAN", "not a bridge"],
)
def test_bridges_and_the_vlans_they_carry_from_interface_xml(
    xml: str, parsed: tuple[str, frozenset[int]] | None
) -> None:
    assert parse_bridge(xml) == parsed


# --------------------------------------------------------------------------- libvirt's test driver


def _bridge_xml(name: str, vlan: int | None = None) -> str:
    port = (
        f"<interface type='vlan' name='eth0.{vlan}'><vlan tag='{vlan}'><interface name='eth0'/></vlan></interface>"
        if vlan
        else "<interface type='ethernet' name='eth9'/>"
    )
    return f"<interface type='bridge' name='{name}'><start mode='onboot'/><bridge>{port}</bridge></interface>"


async def test_a_host_reports_its_bridges_and_a_vlan_its_bridge_lacks_is_refused(
    node_uri: Callable[[str], str],
) -> None:
    libvirt_or_skip()
    from virtplane.drivers.libvirt import LibvirtDriver

    driver = LibvirtDriver(node_uri("h"))
    await driver.connect()
    try:
        assert (await driver.host_facts()).bridges == ()
        conn = driver._connection.get()
        for xml in (_bridge_xml("br0"), _bridge_xml("br100", vlan=100)):
            conn.interfaceDefineXML(xml, 0).create(0)
        assert (await driver.host_facts()).bridges == ("br0", "br100")

        await driver.ensure_defined(spec(nics=(LAN, TAGGED), seed=SEED))
        xml = conn.lookupByName(domain_name(UID)).XMLDesc(0)
        assert "<source bridge='br100'/>" in xml and "<mac address='52:54:00:0a:0b:0d'/>" in xml

        untagged = NicAttachment(mac=TAGGED.mac, bridge="br0", vlan=100, network="tagged")
        with pytest.raises(PermanentError, match="bridge br0 does not carry VLAN 100"):
            await driver.ensure_defined(spec(vm_uid="other", name=domain_name("other"), nics=(untagged,)))
    finally:
        await driver.close()


async def test_a_seed_is_uploaded_as_a_volume_of_the_pool(node_uri: Callable[[str], str]) -> None:
    libvirt_or_skip()
    from virtplane.drivers.libvirt import LibvirtDriver

    driver = LibvirtDriver(node_uri("h"))
    await driver.connect()
    try:
        pool = PoolRef(name="shared", path="/srv/shared", shared=True)
        info = await driver.upload_volume(pool, "vp-seed-1.iso", b"x" * 2048)
        assert info.path == "/srv/shared/vp-seed-1.iso"
        again = await driver.upload_volume(pool, "vp-seed-1.iso", b"x" * 2048)
        assert again == info, "a second call (an interrupted first one) keeps the volume"
        vol = driver._connection.get().storageVolLookupByPath(info.path)
        assert int(vol.info()[1]) == 2048
    finally:
        await driver.close()
