"""KVM on a libvirt host: what its capabilities offer, and a validation boot that shows it works.

A host may offer kvm (``/dev/kvm`` opens, libvirt lists kvm domains) and still not run guests
under it: under nested virtualization a guest may print nothing and stop with "KVM internal
error ... emulation failure". So KVM counts only once a validation guest, a Linux kernel with
no root disk, reached its known point under it: the kernel's panic on the serial console
("Kernel panic ... Unable to mount root fs"), which comes after the whole of its early boot.
The guest is transient (``createXML``) and named outside virtplane's domains.
"""

from __future__ import annotations

import asyncio
import contextlib
import xml.etree.ElementTree as ET
from typing import Any

from virtplane.domain.resources import HostCPU
from virtplane.drivers.base import ConsoleStream

VALIDATION_DOMAIN = "vp-kvm-validation"
"""Not ``virtplane-...``: no VM's domain; a leftover one is destroyed before the next boot."""
KNOWN_POINT = b"Kernel panic"


def offered_domain_types(capabilities_xml: str, arch: str = "x86_64") -> frozenset[str]:
    """The ``<domain type>`` values the host's capabilities list for hvm guests of ``arch``."""
    root = ET.fromstring(capabilities_xml)
    types: set[str] = set()
    for guest in root.findall("guest"):
        arch_element = guest.find("arch")
        if guest.findtext("os_type") != "hvm" or arch_element is None or arch_element.get("name") != arch:
            continue
        types.update(d.get("type", "") for d in arch_element.findall("domain"))
    return frozenset(types - {""})


def host_uuid(capabilities_xml: str) -> str:
    return ET.fromstring(capabilities_xml).findtext("host/uuid", default="")


def host_model(domain_capabilities_xml: str) -> HostCPU | None:
    """The host-model CPU of libvirt's domain capabilities: what the hypervisor offers guests."""
    mode = ET.fromstring(domain_capabilities_xml).find("cpu/mode[@name='host-model']")
    if mode is None or mode.get("supported") != "yes" or not mode.findtext("model"):
        return None
    return _cpu_of(mode)


def parse_cpu(cpu_xml: str) -> HostCPU | None:
    """A ``<cpu>`` definition (as baselineHypervisorCPU returns) as a HostCPU."""
    root = ET.fromstring(cpu_xml)
    return _cpu_of(root) if root.findtext("model") else None


def _cpu_of(element: ET.Element) -> HostCPU:
    features = element.findall("feature")
    return HostCPU(
        model=element.findtext("model", default=""),
        vendor=element.findtext("vendor", default=""),
        features=sorted(f.get("name", "") for f in features if f.get("policy", "require") == "require"),
        disabled=sorted(f.get("name", "") for f in features if f.get("policy") == "disable"),
    )


def cpu_xml(cpu: HostCPU) -> str:
    """``cpu`` as a custom CPU definition (baselineHypervisorCPU's input)."""
    root = ET.Element("cpu", {"mode": "custom", "match": "exact"})
    ET.SubElement(root, "model", {"fallback": "forbid"}).text = cpu.model
    if cpu.vendor:
        ET.SubElement(root, "vendor").text = cpu.vendor
    for name in cpu.features:
        ET.SubElement(root, "feature", {"policy": "require", "name": name})
    for name in cpu.disabled:
        ET.SubElement(root, "feature", {"policy": "disable", "name": name})
    return ET.tostring(root, encoding="unicode")


def validation_xml(kernel: str) -> str:
    """A one-vCPU KVM guest booting ``kernel`` with no root: it must panic, printing on ttyS0."""
    domain = ET.Element("domain", {"type": "kvm"})
    ET.SubElement(domain, "name").text = VALIDATION_DOMAIN
    ET.SubElement(domain, "memory", {"unit": "MiB"}).text = "128"
    ET.SubElement(domain, "vcpu").text = "1"
    os_element = ET.SubElement(domain, "os")
    ET.SubElement(os_element, "type", {"arch": "x86_64", "machine": "q35"}).text = "hvm"
    ET.SubElement(os_element, "kernel").text = kernel
    # panic=-1: the kernel resets at once after its panic, and on_reboot=destroy ends the guest
    ET.SubElement(os_element, "cmdline").text = "console=ttyS0 panic=-1 root=/dev/null"
    for event in ("on_poweroff", "on_reboot", "on_crash"):
        ET.SubElement(domain, event).text = "destroy"
    devices = ET.SubElement(domain, "devices")
    serial = ET.SubElement(devices, "serial", {"type": "pty"})
    ET.SubElement(serial, "target", {"port": "0"})
    console = ET.SubElement(devices, "console", {"type": "pty"})
    ET.SubElement(console, "target", {"type": "serial", "port": "0"})
    ET.SubElement(devices, "memballoon", {"model": "none"})
    return ET.tostring(domain, encoding="unicode")


async def read_until_known_point(console: ConsoleStream, timeout_s: float) -> str:
    """ "" when the console shows the known point within ``timeout_s``, else why not."""
    seen = b""
    try:
        async with asyncio.timeout(timeout_s):
            while KNOWN_POINT not in seen:
                chunk = await console.read()
                if not chunk:
                    return _verdict("the guest ended before its known point", seen)
                seen = (seen + chunk)[-65536:]
    except TimeoutError:
        return _verdict(f"no known point within {timeout_s:g}s", seen)
    return ""


def _verdict(what: str, seen: bytes) -> str:
    tail = seen.decode(errors="replace").strip().splitlines()[-1:] if seen.strip() else []
    return f"{what} ({'last line: ' + tail[0] if tail else 'it printed nothing'})"


def destroy_leftover(conn: Any, lv: Any) -> None:
    with contextlib.suppress(lv.libvirtError):
        conn.lookupByName(VALIDATION_DOMAIN).destroy()


__all__ = [
    "KNOWN_POINT",
    "VALIDATION_DOMAIN",
    "cpu_xml",
    "destroy_leftover",
    "host_model",
    "host_uuid",
    "offered_domain_types",
    "parse_cpu",
    "read_until_known_point",
    "validation_xml",
]
