"""Domain XML for libvirt, built with ElementTree from a ``DomainSpec``.

Everything that comes from users (VM names, paths, kernel command lines) is
set as element text or attribute values, so ElementTree escapes it; characters
that XML 1.0 cannot carry at all (most control characters) are replaced first,
because libvirt would reject the document otherwise.

Guest power events are told apart by the domain's lifecycle actions:
``on_poweroff=destroy`` turns a guest power-off into a stopped domain (state
reason "shutdown"), while ``on_reboot=restart`` keeps the domain running across
a guest reset and makes libvirt send a reboot event. ``on_crash=destroy`` with a
panic device turns a guest kernel panic into state reason "crashed".

This module is pure (no libvirt import) so it is tested everywhere.
"""

from __future__ import annotations

import hashlib
import re
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass, replace

from virtplane.domain.names import LIBVIRT_DOMAIN_NAME, UNICAST_MAC
from virtplane.drivers.base import DiskAttachment, DomainSpec, NicAttachment
from virtplane.drivers.errors import PermanentError

INSTANCE_NS = "https://virtplane.io/xmlns/libvirt/instance/1"
"""Metadata written with the definition: the VM's name and uid, and a digest of what we defined."""

STOP_NS = "https://virtplane.io/xmlns/libvirt/stop-request/1"
"""Metadata set just before the control plane asks a guest to shut down (kept in the persistent config)."""
STOP_PREFIX = "virtplanestop"  # the XML prefix libvirt writes for STOP_NS

GUEST_AGENT_CHANNEL = "org.qemu.guest_agent.0"

# Stable namespace for deriving libvirt UUIDs from VM uids that are not UUIDs themselves.
_UUID_NAMESPACE = uuid.UUID("9b1f7a2e-5d0c-4e55-8a0e-4f6f1f7c2a11")

# XML 1.0 allows tab, newline, carriage return and everything from U+0020 except surrogates and U+FFFE/F.
_XML_INVALID = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_DISK_FORMATS = frozenset({"qcow2", "raw"})
HOTPLUG_PORTS = 8
"""Free PCIe root ports of a q35 domain: the disks and NICs it can take while it runs (a stop and
start makes room again: the definition then has the spec's devices and 8 ports more)."""
XHCI_SLOT = "0x1d"
"""Where the USB controller sits on a q35 domain's root bus (ICH9 put its USB there; libvirt
places the VGA at 0x01 and SATA at 0x1f)."""
SEED_TARGET = "sda"
"""The seed CD-ROM's device: on virtio-scsi, apart from the virtio disks. Not SATA: cloud kernels
(Debian's linux-image-cloud-amd64) have virtio-scsi but no AHCI driver, so their guests would not see it."""


INSTALLER_TARGET = "sdb"
"""An installer ISO's CD-ROM (``DomainSpec.cdrom``): beside the seed's, on virtio-scsi, which
SeaBIOS boots from and installers carry drivers for."""


def xml_text(value: str) -> str:
    """``value`` with the characters XML cannot represent replaced by U+FFFD."""
    return _XML_INVALID.sub("\ufffd", value)


def one_line(value: str) -> str:
    """libvirt refuses titles with line breaks; fold them into spaces."""
    return " ".join(xml_text(value).splitlines())


def domain_uuid(vm_uid: str) -> str:
    """The libvirt UUID of a VM's domain: its uid when that is a UUID, else derived from it.

    Deterministic, so a domain keeps its UUID when it is redefined or migrated.
    """
    try:
        return str(uuid.UUID(vm_uid))
    except ValueError:
        # Hex of the raw bytes: uuid5 cannot hash strings with lone surrogates.
        return str(uuid.uuid5(_UUID_NAMESPACE, vm_uid.encode("utf-8", "surrogatepass").hex()))


def mac_address(vm_uid: str) -> str:
    """A stable MAC in QEMU's 52:54:00 range: a restored memory image must find the same NIC."""
    digest = hashlib.sha256(vm_uid.encode("utf-8", "surrogatepass")).digest()
    return "52:54:00:" + ":".join(f"{b:02x}" for b in digest[:3])


def disk_target(index: int) -> str:
    """virtio disk names in order: vda..vdz, vdaa, vdab, ..."""
    letters = ""
    index += 1
    while index:
        index, rem = divmod(index - 1, 26)
        letters = chr(ord("a") + rem) + letters
    return f"vd{letters}"


@dataclass(frozen=True)
class XmlOptions:
    """How a host wants its domains: these differ between libvirt's test driver and QEMU."""

    domain_type: str = "qemu"
    machine: str | None = "q35"
    arch: str | None = "x86_64"
    cpu_model: str | None = "qemu64"
    panic_device: bool = True
    guest_agent: bool = True
    """A virtio channel for the guest agent (org.qemu.guest_agent.0). A field, so that domains
    defined before it had one get a new digest and are redefined with it at their next start."""
    screen: bool = True
    """A VGA card and a VNC server that listens nowhere (``<listen type='none'/>``): only
    ``virDomainOpenGraphicsFD`` reaches it, through libvirt, so no port and no password. A
    field for the same reason as ``guest_agent``; the test driver has no graphics to open."""
    screen_socket: bool = False
    """The VNC server listens on a UNIX socket libvirt places in the domain's private directory
    (``<listen type='socket'/>``) instead of nowhere: a host reached over ssh, where the screen
    is reached through that socket over ssh (``display_ssh``). Never a TCP port."""


TEST_DRIVER_OPTIONS = XmlOptions(
    domain_type="test", machine=None, arch=None, cpu_model=None, panic_device=False, screen=False
)


def spec_digest(spec: DomainSpec, options: XmlOptions, console_log: str | None) -> str:
    """A digest of everything that goes into the definition: equal digests mean nothing to redefine."""
    return hashlib.sha256(repr((spec, options, console_log)).encode()).hexdigest()[:32]


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    element = ET.SubElement(parent, tag, {k: xml_text(v) for k, v in attrs.items()})
    if text is not None:
        element.text = xml_text(text)
    return element


def validate_spec(
    spec: DomainSpec,
    kernel_path: str | None = None,
    initrd_path: str | None = None,
    cdrom_path: str | None = None,
) -> None:
    if not LIBVIRT_DOMAIN_NAME.matches(spec.name):
        raise PermanentError(f"domain name {spec.name!r} is not a safe libvirt domain name")
    if spec.cpu < 1:
        raise PermanentError(f"a domain needs at least one vCPU, got {spec.cpu}")
    if spec.memory_mib < 16:
        raise PermanentError(f"a domain needs at least 16 MiB of memory, got {spec.memory_mib}")
    if (spec.initrd or spec.cmdline) and not spec.kernel:
        raise PermanentError("an initrd or kernel command line needs a kernel")
    if bool(spec.kernel) != bool(kernel_path) or bool(spec.initrd) != bool(initrd_path):
        raise PermanentError("the kernel and initrd images must be resolved by the driver before use")
    if bool(spec.cdrom) != bool(cdrom_path):
        raise PermanentError("the CD-ROM's image must be resolved by the driver before use")
    if spec.seed is not None and not spec.seed.startswith("/"):
        raise PermanentError(f"seed path {spec.seed!r} is not absolute")
    for nic in spec.nics:
        if nic.bridge is None:
            raise PermanentError(
                f"NIC {nic.mac} is on the user network {nic.network}: only simulated hosts offer one"
            )
        if not UNICAST_MAC.matches(nic.mac):
            raise PermanentError(f"NIC MAC {nic.mac!r} is not a lower-case unicast MAC")
    for disk in spec.disks:
        if disk.format not in _DISK_FORMATS:
            raise PermanentError(f"disk format {disk.format!r} is not one of {sorted(_DISK_FORMATS)}")
        if not disk.path.startswith("/"):
            raise PermanentError(f"disk path {disk.path!r} is not absolute")


def _cpu(domain: ET.Element, spec: DomainSpec, default_model: str) -> None:
    """The guest CPU: the cluster's model (migrates within it), the host's own by explicit choice,
    else the host's default model (a VM defined before the cluster had one)."""
    if spec.cpu_passthrough:
        _sub(domain, "cpu", mode="host-passthrough", migratable="on")
        return
    cpu = _sub(domain, "cpu", mode="custom", match="exact")
    if not spec.cpu_model:
        _sub(cpu, "model", default_model, fallback="allow")
        return
    _sub(cpu, "model", spec.cpu_model, fallback="forbid")  # another model would not migrate back
    for name in spec.cpu_features:
        _sub(cpu, "feature", policy="require", name=name)
    for name in spec.cpu_disabled:
        _sub(cpu, "feature", policy="disable", name=name)


def build_domain_xml(
    spec: DomainSpec,
    options: XmlOptions,
    console_log: str | None = None,
    *,
    kernel_path: str | None = None,
    initrd_path: str | None = None,
    cdrom_path: str | None = None,
) -> str:
    """The persistent definition of ``spec``'s domain; the library files' paths come checked from the driver."""
    validate_spec(spec, kernel_path, initrd_path, cdrom_path)
    domain = ET.Element("domain", {"type": options.domain_type})
    _sub(domain, "name", spec.name)
    _sub(domain, "uuid", domain_uuid(spec.vm_uid))
    _sub(domain, "title", one_line(spec.vm_name))
    _sub(domain, "description", f"virtplane VM {spec.vm_name} (uid {spec.vm_uid})")

    metadata = _sub(domain, "metadata")
    instance = ET.SubElement(metadata, f"{{{INSTANCE_NS}}}instance")
    _sub(instance, f"{{{INSTANCE_NS}}}name", spec.vm_name)
    _sub(instance, f"{{{INSTANCE_NS}}}uid", spec.vm_uid)
    _sub(instance, f"{{{INSTANCE_NS}}}digest", spec_digest(spec, options, console_log))

    _sub(domain, "memory", str(spec.memory_mib), unit="MiB")
    _sub(domain, "currentMemory", str(spec.memory_mib), unit="MiB")
    _sub(domain, "vcpu", str(spec.cpu))

    os_element = _sub(domain, "os")
    type_attrs = {}
    if options.arch:
        type_attrs["arch"] = options.arch
    if options.machine:
        type_attrs["machine"] = options.machine
    _sub(os_element, "type", "hvm", **type_attrs)
    if kernel_path:
        _sub(os_element, "kernel", kernel_path)
        if initrd_path:
            _sub(os_element, "initrd", initrd_path)
        if spec.cmdline:
            _sub(os_element, "cmdline", spec.cmdline)

    features = _sub(domain, "features")
    _sub(features, "acpi")
    _sub(features, "apic")
    if options.cpu_model:  # libvirt's test driver takes no CPU models
        _cpu(domain, spec, options.cpu_model)
    _sub(domain, "clock", offset="utc")
    _sub(domain, "on_poweroff", "destroy")
    _sub(domain, "on_reboot", "restart")
    _sub(domain, "on_crash", "destroy")

    devices = _sub(domain, "devices")
    if options.machine == "q35":
        # libvirt gives q35 just the PCIe root ports its devices take: spare ones to hot-plug into
        # (indexes 1..: libvirt numbers the ports its devices take after these)
        for index in range(1, HOTPLUG_PORTS + 1):
            _sub(devices, "controller", type="pci", index=str(index), model="pcie-root-port")
    disks = spec.disks
    if cdrom_path:  # the disks, in their boot order, then the installer: an empty disk falls through
        ranked = sorted(range(len(disks)), key=lambda i: (disks[i].boot_order or len(disks) + 64, i))
        order = {index: rank for rank, index in enumerate(ranked, start=1)}
        disks = tuple(replace(disk, boot_order=order[i]) for i, disk in enumerate(disks))
    for index, disk in enumerate(disks):
        devices.append(disk_element(disk, disk_target(index)))
    if spec.seed is not None or cdrom_path:
        _sub(devices, "controller", type="scsi", index="0", model="virtio-scsi")
    if cdrom_path:
        installer = _sub(devices, "disk", type="file", device="cdrom")
        _sub(installer, "driver", name="qemu", type="raw")
        _sub(installer, "source", file=cdrom_path)
        _sub(installer, "target", dev=INSTALLER_TARGET, bus="scsi")
        _sub(installer, "readonly")  # so any number of VMs may have the same library file
        _sub(installer, "boot", order=str(len(disks) + 1))
    if spec.seed is not None:
        cdrom = _sub(devices, "disk", type="file", device="cdrom")
        _sub(cdrom, "driver", name="qemu", type="raw")
        _sub(cdrom, "source", file=spec.seed)
        _sub(cdrom, "target", dev=SEED_TARGET, bus="scsi")
        _sub(cdrom, "readonly")
    for nic in spec.nics:
        assert nic.bridge is not None  # validate_spec
        # No <vlan>: libvirt tags ports of Open vSwitch only; on a Linux bridge the bridge
        # itself carries the VLAN (the driver checks it does, docs/decisions.md).
        devices.append(nic_element(nic))
    serial = _sub(devices, "serial", type="pty")
    if console_log:
        _sub(serial, "log", file=console_log, append="on")
    _sub(serial, "target", port="0")
    console = _sub(devices, "console", type="pty")
    _sub(console, "target", type="serial", port="0")
    # No user-mode NIC ever: QEMU's user network maps its gateway to the host's 127.0.0.1,
    # where the control plane listens (docs/decisions.md); guests get bridge networks only.
    if options.guest_agent:
        # libvirt picks the socket path and adds the virtio-serial controller; the live
        # definition's target says whether the guest's agent has the port open (state=connected)
        channel = _sub(devices, "channel", type="unix")
        _sub(channel, "target", type="virtio", name=GUEST_AGENT_CHANNEL)
    if options.screen:
        graphics = _sub(devices, "graphics", type="vnc")
        # never a TCP port, not even on the host's loopback
        _sub(graphics, "listen", type="socket" if options.screen_socket else "none")
        # std VGA: the firmware's and the kernel's text show before any guest driver loads
        _sub(_sub(devices, "video"), "model", type="vga")
        if options.machine == "q35":
            # the tablet's USB controller on the root bus itself (an integrated device, as the
            # VGA): left to libvirt it takes one of the root ports kept free for hot-plug
            usb = _sub(devices, "controller", type="usb", index="0", model="qemu-xhci")
            _sub(usb, "address", type="pci", domain="0x0000", bus="0x00", slot=XHCI_SLOT, function="0x0")
        # an absolute pointer: a viewer's mouse lines up. Its USB address is written here: libvirt
        # gives one only at start, and a memory image restored with our definition must match it
        tablet = _sub(devices, "input", type="tablet", bus="usb")
        _sub(tablet, "address", type="usb", bus="0", port="1")
    _sub(devices, "memballoon", model="none")
    if options.panic_device:
        _sub(devices, "panic", model="isa")

    return ET.tostring(domain, encoding="unicode")


def disk_element(disk: DiskAttachment, target: str) -> ET.Element:
    """A guest disk on virtio (hot-pluggable, unlike IDE or SATA), as defined and as hot-plugged."""
    element = ET.Element("disk", {"type": "file", "device": "disk"})
    # cache=none: no host page cache, so a migration or a copy of the file sees what the guest wrote.
    _sub(element, "driver", name="qemu", type=disk.format, cache="none")
    _sub(element, "source", file=disk.path)
    _sub(element, "target", dev=target, bus="virtio")
    if disk.boot_order is not None:
        _sub(element, "boot", order=str(disk.boot_order))
    return element


def nic_element(nic: NicAttachment) -> ET.Element:
    """A NIC on a Linux bridge, as defined and as hot-plugged."""
    if nic.bridge is None or not UNICAST_MAC.matches(nic.mac):
        raise PermanentError(f"NIC {nic.mac!r} on {nic.network}: needs a bridge and a lower-case unicast MAC")
    element = ET.Element("interface", {"type": "bridge"})
    _sub(element, "mac", address=nic.mac)
    _sub(element, "source", bridge=nic.bridge)
    _sub(element, "model", type="virtio")
    return element


@dataclass(frozen=True)
class DefinedDomain:
    """What we read back from a domain's XML."""

    vm_name: str
    vm_uid: str
    digest: str
    disks: tuple[tuple[str, str], ...]  # (target dev, source file)


def parse_domain_xml(xml: str) -> DefinedDomain:
    root = ET.fromstring(xml)
    instance = root.find(f"metadata/{{{INSTANCE_NS}}}instance")

    def field(tag: str) -> str:
        if instance is None:
            return ""
        return instance.findtext(f"{{{INSTANCE_NS}}}{tag}", default="")

    disks: list[tuple[str, str]] = []  # the guest's disks: not the seed's CD-ROM
    for disk in root.findall("devices/disk"):
        if disk.get("device", "disk") != "disk":
            continue
        target = disk.find("target")
        source = disk.find("source")
        if target is None or source is None:
            continue
        path = source.get("file") or source.get("dev") or ""
        disks.append((target.get("dev", ""), path))
    return DefinedDomain(
        vm_name=field("name"), vm_uid=field("uid"), digest=field("digest"), disks=tuple(disks)
    )


def agent_channel_state(xml: str) -> str | None:
    """The state of the guest agent's channel in a live definition: "connected" while the guest's
    agent has it open, "disconnected"; None when the domain has no such channel."""
    for target in ET.fromstring(xml).findall("devices/channel/target"):
        if target.get("name") == GUEST_AGENT_CHANNEL:
            return target.get("state", "disconnected")
    return None


def stop_request_xml(requested: bool) -> str:
    """The stop-request metadata element (without namespace: libvirt adds it from the call's URI)."""
    element = ET.Element("stop", {"requested": "yes" if requested else "no"})
    return ET.tostring(element, encoding="unicode")


def parse_stop_request(xml: str) -> bool:
    return ET.fromstring(xml).get("requested") == "yes"


def volume_xml(name: str, capacity_bytes: int, fmt: str = "qcow2", *, backing: str = "") -> str:
    """``backing``: the path of a qcow2 file the new volume is an overlay on (a linked clone)."""
    volume = ET.Element("volume")
    _sub(volume, "name", name)
    _sub(volume, "capacity", str(capacity_bytes), unit="bytes")
    target = _sub(volume, "target")
    _sub(target, "format", type=fmt)
    if fmt == "qcow2":
        # v3: libvirt 9.0 makes v2 (0.10) files by default, and those cannot keep the dirty
        # bitmaps an incremental backup's checkpoint needs ("Cannot store dirty bitmaps in qcow2 v2")
        _sub(target, "compat", "1.1")
    if backing:
        store = _sub(volume, "backingStore")
        _sub(store, "path", backing)
        _sub(store, "format", type="qcow2")
    return ET.tostring(volume, encoding="unicode")


def dir_pool_xml(name: str, path: str) -> str:
    pool = ET.Element("pool", {"type": "dir"})
    _sub(pool, "name", name)
    target = _sub(pool, "target")
    _sub(target, "path", path)
    return ET.tostring(pool, encoding="unicode")


def backup_xml(disks: list[tuple[str, str]]) -> str:
    """A push-mode backup of the given (target dev, destination file) pairs, as qcow2."""
    backup = ET.Element("domainbackup", {"mode": "push"})
    disks_element = _sub(backup, "disks")
    for dev, destination in disks:
        disk = _sub(disks_element, "disk", name=dev, backup="yes", type="file")
        _sub(disk, "target", file=destination)
        _sub(disk, "driver", type="qcow2")
    return ET.tostring(backup, encoding="unicode")


__all__ = [
    "GUEST_AGENT_CHANNEL",
    "HOTPLUG_PORTS",
    "INSTANCE_NS",
    "SEED_TARGET",
    "STOP_NS",
    "TEST_DRIVER_OPTIONS",
    "DefinedDomain",
    "XmlOptions",
    "agent_channel_state",
    "backup_xml",
    "build_domain_xml",
    "dir_pool_xml",
    "disk_element",
    "disk_target",
    "domain_uuid",
    "mac_address",
    "nic_element",
    "one_line",
    "parse_domain_xml",
    "parse_stop_request",
    "spec_digest",
    "stop_request_xml",
    "validate_spec",
    "volume_xml",
    "xml_text",
]
