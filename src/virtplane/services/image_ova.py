"""An OVA (a tar of an OVF descriptor and its disks) read for an import: its disks, and the
name, CPU, memory and NIC count its OVF asks for.

The OVF is untrusted XML: it is parsed with defusedxml, which refuses a DTD, entities and
external references (so an entity bomb or an XXE is refused, never expanded), and only
after its size is checked. Nothing in the archive is extracted by its own name: each disk
the OVF references is copied out to a file the caller names, only if it is a regular member
named plainly (no path), of the VMDK format (a sparse VMDK, magic ``KDMV``; a text
descriptor could name files outside the archive).
"""

from __future__ import annotations

import re
import shutil
import tarfile
from dataclasses import dataclass
from xml.etree.ElementTree import Element, ParseError

import defusedxml.ElementTree as SafeET
from defusedxml import DefusedXmlException

from virtplane.domain.errors import Invalid
from virtplane.domain.images import PROBE_BYTES, probe_format
from virtplane.domain.resources.volume import MAX_VOLUME_GIB

__all__ = ["MAX_OVA_DISKS", "OvaAppliance", "OvaDisk", "extract_disk", "is_ova", "read_ova", "read_ovf"]

_TAR_MAGIC_AT = 257
OVF_NS = "http://schemas.dmtf.org/ovf/envelope/1"
RASD_NS = "http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_ResourceAllocationSettingData"
_CPU, _MEMORY, _ETHERNET = "3", "4", "10"  # CIM resource types
_MEMORY_UNITS_MIB = {
    "byte * 2^20": 1,
    "MB": 1,
    "MegaBytes": 1,
    "byte * 2^30": 1024,
    "GB": 1024,
    "GigaBytes": 1024,
}
_BYTE_UNITS = re.compile(r"byte\s*(\*\s*2\s*\^\s*(\d{1,2}))?")
MAX_OVF_BYTES = 1024 * 1024
MAX_OVA_DISKS = 16
"""A VM takes this many disks from an OVA at most (as many as ``vm create`` gives it)."""
MAX_QUANTITY_DIGITS = 12
GIB = 1024**3


def is_ova(head: bytes) -> bool:
    """Whether a file that starts with ``head`` is a tar archive (POSIX ustar), as an OVA is."""
    return head[_TAR_MAGIC_AT : _TAR_MAGIC_AT + 5] == b"ustar"


@dataclass(frozen=True)
class OvaDisk:
    member: str
    """The archive's member that holds the disk (a VMDK)."""
    capacity_bytes: int | None
    """What the OVF says the disk holds, if it says."""


@dataclass(frozen=True)
class OvaAppliance:
    name: str
    """The virtual system's name (its Name, else its ovf:id), as the OVF spells it."""
    disks: tuple[OvaDisk, ...]
    cpu: int
    memory_mib: int
    nics: int

    @property
    def disk(self) -> str:
        return self.disks[0].member

    def describe(self) -> str:
        disks = ", ".join(d.member for d in self.disks)
        return f"from an OVA whose OVF asks for {self.cpu} vCPU and {self.memory_mib} MiB (disk {disks})"


def _invalid(why: str) -> Invalid:
    return Invalid("InvalidOva", f"the OVA {why}: nothing was written")


def read_ova(path: str, disk_target: str) -> OvaAppliance:
    """The appliance of one disk in the OVA at ``path``; its disk copied to ``disk_target``.
    Blocks. An appliance of several disks is a VM's (``virtplane vm import-ova``)."""
    appliance = read_ovf(path)
    if len(appliance.disks) != 1:
        raise Invalid(
            "OvaDisks",
            f"the OVA's OVF has {len(appliance.disks)} disks; an Image takes one: import the "
            "appliance as a VM (POST /v1/vms/actions/import-ova, virtplane vm import-ova)",
        )
    extract_disk(path, appliance.disk, disk_target)
    return appliance


def read_ovf(path: str) -> OvaAppliance:
    """The appliance the OVA at ``path`` describes, once each disk it references is in the
    archive as a plain regular member. Blocks; extracts nothing."""
    try:
        with tarfile.open(path, mode="r:") as archive:
            members = {m.name: m for m in archive.getmembers()}
            ovfs = [m for name, m in members.items() if name.endswith(".ovf")]
            if len(ovfs) != 1 or not ovfs[0].isfile():
                raise _invalid("must hold one OVF descriptor")
            if ovfs[0].size > MAX_OVF_BYTES:
                raise _invalid(f"has an OVF of {ovfs[0].size} bytes (at most {MAX_OVF_BYTES})")
            descriptor = archive.extractfile(ovfs[0])
            assert descriptor is not None
            appliance = _parse_ovf(descriptor.read())
            for disk in appliance.disks:
                member = members.get(disk.member)
                if member is None or not member.isfile():
                    raise _invalid(f"has no disk file {disk.member!r}, which its OVF references")
                source = archive.extractfile(member)
                assert source is not None
                if probe_format(source.read(PROBE_BYTES)) != "vmdk":
                    raise _invalid(f"has a disk file {disk.member!r} that is not a sparse VMDK")
    except (tarfile.TarError, OSError) as exc:
        raise _invalid(f"cannot be read ({exc})") from None
    return appliance


def extract_disk(path: str, member_name: str, target: str) -> None:
    """Copy the member ``member_name`` (checked by ``read_ovf``) of the OVA at ``path`` to ``target``."""
    try:
        with tarfile.open(path, mode="r:") as archive:
            source = archive.extractfile(archive.getmember(member_name))
            assert source is not None
            with open(target, "wb") as copy:
                shutil.copyfileobj(source, copy, 1024 * 1024)
    except (tarfile.TarError, OSError, KeyError) as exc:
        raise _invalid(f"cannot be read ({exc})") from None


def _parse_ovf(text: bytes) -> OvaAppliance:
    try:
        root = SafeET.fromstring(text, forbid_dtd=True)
    except DefusedXmlException as exc:
        raise _invalid(f"has an OVF with a DTD, entities or external references, refused ({exc})") from None
    except ParseError as exc:
        raise _invalid(f"has an OVF that is not XML ({exc})") from None
    ovf = f"{{{OVF_NS}}}"
    files = {f.get(f"{ovf}id"): f.get(f"{ovf}href", "") for f in root.iter(f"{ovf}File")}
    disk_elements = list(root.iter(f"{ovf}Disk"))
    if not disk_elements:
        raise _invalid("has an OVF with no disk")
    if len(disk_elements) > MAX_OVA_DISKS:
        raise _invalid(f"has an OVF with {len(disk_elements)} disks (at most {MAX_OVA_DISKS})")
    disks = []
    for element in disk_elements:
        href = files.get(element.get(f"{ovf}fileRef"), "")
        if not href or "/" in href or "\\" in href or href in (".", ".."):
            raise _invalid(f"references the disk file {href!r}, not a plain name in the archive")
        disks.append(OvaDisk(href, _capacity(element, ovf, href)))
    cpu, memory_mib, nics = 1, 512, 0
    for item in root.iter(f"{ovf}Item"):
        kind = item.findtext(f"{{{RASD_NS}}}ResourceType", "").strip()
        quantity = item.findtext(f"{{{RASD_NS}}}VirtualQuantity", "").strip()
        if kind == _ETHERNET:
            nics += 1
        if not quantity.isdigit() or len(quantity) > MAX_QUANTITY_DIGITS:
            continue
        if kind == _CPU:
            cpu = int(quantity)
        elif kind == _MEMORY:
            units = item.findtext(f"{{{RASD_NS}}}AllocationUnits", "byte * 2^20").strip()
            memory_mib = int(quantity) * _MEMORY_UNITS_MIB.get(units, 1)
    return OvaAppliance(_system_name(root, ovf), tuple(disks), cpu, memory_mib, nics)


def _capacity(disk: Element, ovf: str, href: str) -> int | None:
    """The disk's capacity in bytes, when the OVF gives it; refused when absurd."""
    capacity = (disk.get(f"{ovf}capacity") or "").strip()
    if not capacity:
        return None
    units = _BYTE_UNITS.fullmatch((disk.get(f"{ovf}capacityAllocationUnits") or "byte").strip())
    if not capacity.isdigit() or len(capacity) > 20 or units is None:
        raise _invalid(f"gives disk {href!r} a capacity it cannot read ({capacity!r})")
    size = int(capacity) << int(units.group(2) or 0)
    if size > MAX_VOLUME_GIB * GIB:
        raise _invalid(f"gives disk {href!r} {size} bytes, more than a volume holds ({MAX_VOLUME_GIB} GiB)")
    return size


def _system_name(root: Element, ovf: str) -> str:
    system = next(root.iter(f"{ovf}VirtualSystem"), None)
    if system is None:
        return ""
    return (system.findtext(f"{ovf}Name") or system.get(f"{ovf}id") or "").strip()
