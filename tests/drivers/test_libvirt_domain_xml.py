"""Domain XML generation: pure ElementTree, so these run without libvirt."""

from __future__ import annotations

import uuid
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st

from virtplane.drivers.base import DiskAttachment, DomainSpec, ImageRef, PoolRef, domain_name
from virtplane.drivers.errors import PermanentError
from virtplane.drivers.libvirt.domain_xml import (
    INSTANCE_NS,
    TEST_DRIVER_OPTIONS,
    XmlOptions,
    backup_xml,
    build_domain_xml,
    disk_target,
    domain_uuid,
    parse_domain_xml,
    parse_stop_request,
    spec_digest,
    stop_request_xml,
    volume_xml,
)

HOSTILE = "a'b\"c<d>e&f]]><!--x--><![CDATA[y]]>\n\x00\x07\ud800tail"
LIBRARY = PoolRef(name="library", path="/srv/library", shared=True)
KERNEL = ImageRef(LIBRARY, "vmlinuz")
INITRD = ImageRef(LIBRARY, "initrd.gz")


def spec(**overrides: object) -> DomainSpec:
    fields: dict[str, object] = {
        "name": domain_name("0b7c4a9e-2f35-4c1e-9f3a-5d8e6b1a2c3d"),
        "vm_name": "web-1",
        "vm_uid": "0b7c4a9e-2f35-4c1e-9f3a-5d8e6b1a2c3d",
        "cpu": 2,
        "memory_mib": 256,
        "disks": (
            DiskAttachment(path="/pools/a/root.qcow2", boot_order=1),
            DiskAttachment(path="/pools/b/data.qcow2"),
            DiskAttachment(path="/pools/b/swap.raw", boot_order=2, format="raw"),
        ),
    }
    fields.update(overrides)
    return DomainSpec(**fields)  # type: ignore[arg-type]


def test_basic_shape() -> None:
    root = ET.fromstring(build_domain_xml(spec(), XmlOptions(), console_log="/var/log/vp/c.log"))
    assert root.get("type") == "qemu"
    assert root.findtext("name") == "virtplane-0b7c4a9e-2f35-4c1e-9f3a-5d8e6b1a2c3d"
    assert root.findtext("uuid") == "0b7c4a9e-2f35-4c1e-9f3a-5d8e6b1a2c3d"
    assert root.findtext("title") == "web-1"
    assert root.findtext("vcpu") == "2"
    memory = root.find("memory")
    assert memory is not None and (memory.text, memory.get("unit")) == ("256", "MiB")
    os_type = root.find("os/type")
    assert os_type is not None and (os_type.get("arch"), os_type.get("machine")) == ("x86_64", "q35")
    # A guest power-off stops the domain, a guest reset keeps it running (and libvirt sends a reboot event).
    assert [root.findtext(t) for t in ("on_poweroff", "on_reboot", "on_crash")] == [
        "destroy",
        "restart",
        "destroy",
    ]
    log = root.find("devices/serial/log")
    assert log is not None and log.get("file") == "/var/log/vp/c.log"


def test_disks_keep_their_order_targets_and_boot_order() -> None:
    root = ET.fromstring(build_domain_xml(spec(), XmlOptions()))
    disks = root.findall("devices/disk")
    assert [d.find("source").get("file") for d in disks] == [  # type: ignore[union-attr]
        "/pools/a/root.qcow2",
        "/pools/b/data.qcow2",
        "/pools/b/swap.raw",
    ]
    assert [d.find("target").get("dev") for d in disks] == ["vda", "vdb", "vdc"]  # type: ignore[union-attr]
    assert [d.find("boot").get("order") if d.find("boot") is not None else None for d in disks] == [  # type: ignore[union-attr]
        "1",
        None,
        "2",
    ]
    assert [d.find("driver").get("type") for d in disks] == ["qcow2", "qcow2", "raw"]  # type: ignore[union-attr]


def test_direct_kernel_boot() -> None:
    root = ET.fromstring(
        build_domain_xml(
            spec(kernel=KERNEL, initrd=INITRD, cmdline="console=ttyS0 x=<1>"),
            XmlOptions(),
            kernel_path="/srv/library/vmlinuz",
            initrd_path="/srv/library/initrd.gz",
        )
    )
    assert root.findtext("os/kernel") == "/srv/library/vmlinuz"
    assert root.findtext("os/initrd") == "/srv/library/initrd.gz"
    assert root.findtext("os/cmdline") == "console=ttyS0 x=<1>"
    assert root.find("os/kernel") is not None
    assert ET.fromstring(build_domain_xml(spec(), XmlOptions())).find("os/kernel") is None


def test_boot_files_are_only_written_as_the_driver_resolved_them() -> None:
    with pytest.raises(PermanentError, match="resolved"):
        build_domain_xml(spec(kernel=KERNEL), XmlOptions())  # an image with no checked path
    with pytest.raises(PermanentError, match="resolved"):
        build_domain_xml(spec(), XmlOptions(), kernel_path="/etc/shadow")  # a path with no image


def test_there_is_no_user_mode_nic() -> None:
    """QEMU's user network maps its gateway to the host's 127.0.0.1 (docs/decisions.md)."""
    for options in (XmlOptions(), XmlOptions(domain_type="kvm")):
        assert ET.fromstring(build_domain_xml(spec(), options)).find("devices/interface") is None


def test_domain_type_is_configurable_and_the_test_profile_is_minimal() -> None:
    assert ET.fromstring(build_domain_xml(spec(), XmlOptions(domain_type="kvm"))).get("type") == "kvm"
    root = ET.fromstring(build_domain_xml(spec(), TEST_DRIVER_OPTIONS))
    assert root.get("type") == "test"
    assert root.find("cpu") is None and root.find("devices/panic") is None
    assert root.find("os/type").get("machine") is None  # type: ignore[union-attr]


def test_hostile_user_values_are_escaped_and_round_trip() -> None:
    hostile = spec(vm_name=HOSTILE, vm_uid=HOSTILE, cmdline=HOSTILE, kernel=KERNEL)
    text = build_domain_xml(hostile, XmlOptions(), console_log="/tmp/a'b\"<c>&.log", kernel_path="/k")
    root = ET.fromstring(text)  # well-formed whatever the input
    assert "<evil" not in text and "<!--x-->" not in text
    assert root.findtext("title") == "a'b\"c<d>e&f]]><!--x--><![CDATA[y]]> \ufffd\ufffd\ufffdtail"
    parsed = parse_domain_xml(text)
    assert parsed.vm_name == "a'b\"c<d>e&f]]><!--x--><![CDATA[y]]>\n\ufffd\ufffd\ufffdtail"
    assert parsed.vm_uid == parsed.vm_name
    assert root.find("devices/serial/log").get("file") == "/tmp/a'b\"<c>&.log"  # type: ignore[union-attr]
    # A uid that is not a UUID gets a stable derived one.
    assert root.findtext("uuid") == domain_uuid(HOSTILE)
    uuid.UUID(root.findtext("uuid", ""))


@given(st.text(max_size=80))
def test_any_vm_name_gives_well_formed_xml(name: str) -> None:
    text = build_domain_xml(spec(vm_name=name), XmlOptions())
    root = ET.fromstring(text)
    assert len(root.findall("title")) == 1
    assert root.find(f"metadata/{{{INSTANCE_NS}}}instance") is not None


@pytest.mark.parametrize(
    "overrides",
    [
        {"name": "../etc/passwd"},
        {"name": "a b"},
        {"name": ""},
        {"cpu": 0},
        {"memory_mib": 1},
        {"initrd": INITRD},
        {"disks": (DiskAttachment(path="relative.qcow2"),)},
        {"disks": (DiskAttachment(path="/x", format="vmdk'"),)},
    ],
)
def test_invalid_specs_are_refused(overrides: dict[str, object]) -> None:
    with pytest.raises(PermanentError):
        build_domain_xml(spec(**overrides), XmlOptions())


def test_metadata_names_the_vm_and_digest_changes_with_the_spec() -> None:
    first = parse_domain_xml(build_domain_xml(spec(), XmlOptions()))
    assert (first.vm_name, first.vm_uid) == ("web-1", "0b7c4a9e-2f35-4c1e-9f3a-5d8e6b1a2c3d")
    assert first.disks[0] == ("vda", "/pools/a/root.qcow2")
    assert parse_domain_xml(build_domain_xml(spec(), XmlOptions())).digest == first.digest
    assert parse_domain_xml(build_domain_xml(spec(cpu=4), XmlOptions())).digest != first.digest


def test_disk_targets() -> None:
    assert [disk_target(i) for i in (0, 1, 25, 26, 27, 701, 702)] == [
        "vda",
        "vdb",
        "vdz",
        "vdaa",
        "vdab",
        "vdzz",
        "vdaaa",
    ]


def test_small_documents() -> None:
    assert parse_stop_request(stop_request_xml(True)) is True
    assert parse_stop_request(stop_request_xml(False)) is False
    vol = ET.fromstring(volume_xml("d<1>", 5))
    assert (vol.findtext("name"), vol.findtext("capacity")) == ("d<1>", "5")
    backup = ET.fromstring(backup_xml([("vda", "/p/x.snap")]))
    disk = backup.find("disks/disk")
    assert disk is not None and (disk.get("name"), disk.find("target").get("file")) == ("vda", "/p/x.snap")  # type: ignore[union-attr]


def test_an_installer_iso_is_a_read_only_cd_rom_tried_after_the_disks() -> None:
    """An empty disk falls through to the installer; once installed, the disk boots first."""
    installer = ImageRef(LIBRARY, "vp-image-debian.iso", "iso")
    root = ET.fromstring(
        build_domain_xml(spec(cdrom=installer), XmlOptions(), cdrom_path="/srv/library/d.iso")
    )
    cdroms = [d for d in root.findall("devices/disk") if d.get("device") == "cdrom"]
    assert len(cdroms) == 1
    cdrom = cdroms[0]
    assert cdrom.find("source").get("file") == "/srv/library/d.iso"  # type: ignore[union-attr]
    assert cdrom.find("readonly") is not None
    assert cdrom.find("driver").get("type") == "raw"  # type: ignore[union-attr]
    orders = {
        disk.find("source").get("file"): disk.find("boot").get("order")  # type: ignore[union-attr]
        for disk in root.findall("devices/disk")
    }
    # the disks in their boot order (root 1, swap 2, then the one without), then the CD-ROM
    assert orders == {
        "/pools/a/root.qcow2": "1",
        "/pools/b/data.qcow2": "3",
        "/pools/b/swap.raw": "2",
        "/srv/library/d.iso": "4",
    }
    assert root.find("os/boot") is None  # per-device boot order only (libvirt refuses both)
    assert parse_domain_xml(ET.tostring(root, encoding="unicode")).disks == (
        ("vda", "/pools/a/root.qcow2"),
        ("vdb", "/pools/b/data.qcow2"),
        ("vdc", "/pools/b/swap.raw"),
    )  # a CD-ROM is no guest disk: never copied by a migration, never hot-plugged


def test_a_cd_rom_must_be_resolved_by_the_driver() -> None:
    with pytest.raises(PermanentError, match="CD-ROM"):
        build_domain_xml(spec(cdrom=ImageRef(LIBRARY, "x.iso", "iso")), XmlOptions())


def test_the_screen_is_a_vga_card_whose_vnc_server_listens_nowhere() -> None:
    root = ET.fromstring(build_domain_xml(spec(), XmlOptions()))
    graphics = root.findall("devices/graphics")
    assert [g.get("type") for g in graphics] == ["vnc"]
    # no port, no address, no password: only virDomainOpenGraphicsFD (through libvirt) reaches it
    assert {"port", "autoport", "listen", "passwd", "socket"}.isdisjoint(graphics[0].attrib)
    assert [(listen.attrib) for listen in graphics[0].findall("listen")] == [{"type": "none"}]
    assert [m.get("type") for m in root.findall("devices/video/model")] == ["vga"]
    assert root.find("devices/input[@type='tablet']/address[@type='usb']") is not None  # restores match
    # its USB controller sits on the root bus: it takes none of the root ports kept for hot-plug
    usb = root.find("devices/controller[@type='usb']/address")
    assert usb is not None and (usb.get("type"), usb.get("bus")) == ("pci", "0x00")
    assert ET.fromstring(build_domain_xml(spec(), TEST_DRIVER_OPTIONS)).find("devices/graphics") is None


def test_a_domain_defined_before_it_had_a_screen_gets_a_new_digest_so_it_is_redefined_at_its_start() -> None:
    before = XmlOptions(screen=False)  # what every domain was defined with until issue 34
    assert spec_digest(spec(), before, None) != spec_digest(spec(), XmlOptions(), None)
