"""An OVA (a tar of an OVF descriptor and its disks) read for an import: its one disk, and the
CPU and memory its OVF asks for.

Nothing in the archive is extracted by its own name: the OVF is read from the archive, and the
disk it references is copied out to a file the caller names, only if it is a regular member
named plainly (no path). Appliances of several disks are refused for now (``OvaDisks``).
"""

from __future__ import annotations

import shutil
import tarfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from virtplane.domain.errors import Invalid

__all__ = ["OvaAppliance", "is_ova", "read_ova"]

_TAR_MAGIC_AT = 257
OVF_NS = "http://schemas.dmtf.org/ovf/envelope/1"
RASD_NS = "http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_ResourceAllocationSettingData"
_CPU, _MEMORY = "3", "4"  # CIM resource types
_MEMORY_UNITS_MIB = {
    "byte * 2^20": 1,
    "MB": 1,
    "MegaBytes": 1,
    "byte * 2^30": 1024,
    "GB": 1024,
    "GigaBytes": 1024,
}
MAX_OVF_BYTES = 1024 * 1024


def is_ova(head: bytes) -> bool:
    """Whether a file that starts with ``head`` is a tar archive (POSIX ustar), as an OVA is."""
    return head[_TAR_MAGIC_AT : _TAR_MAGIC_AT + 5] == b"ustar"


@dataclass(frozen=True)
class OvaAppliance:
    disk: str
    """The archive's member that holds the disk (a VMDK)."""
    cpu: int
    memory_mib: int

    def describe(self) -> str:
        return f"from an OVA whose OVF asks for {self.cpu} vCPU and {self.memory_mib} MiB (disk {self.disk})"


def _invalid(why: str) -> Invalid:
    return Invalid("InvalidOva", f"the OVA {why}: nothing was written")


def read_ova(path: str, disk_target: str) -> OvaAppliance:
    """The appliance in the OVA at ``path``; its disk copied to ``disk_target``. Blocks."""
    try:
        with tarfile.open(path, mode="r:") as archive:
            members = {m.name: m for m in archive.getmembers()}
            ovfs = [m for name, m in members.items() if name.endswith(".ovf")]
            if len(ovfs) != 1 or not ovfs[0].isfile() or ovfs[0].size > MAX_OVF_BYTES:
                raise _invalid("must hold one OVF descriptor")
            descriptor = archive.extractfile(ovfs[0])
            assert descriptor is not None
            appliance = _parse_ovf(descriptor.read())
            member = members.get(appliance.disk)
            if member is None or not member.isfile():
                raise _invalid(f"has no disk file {appliance.disk!r}, which its OVF references")
            source = archive.extractfile(member)
            assert source is not None
            with open(disk_target, "wb") as target:
                shutil.copyfileobj(source, target, 1024 * 1024)
    except (tarfile.TarError, OSError) as exc:
        raise _invalid(f"cannot be read ({exc})") from None
    return appliance


def _parse_ovf(text: bytes) -> OvaAppliance:
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise _invalid(f"has an OVF that is not XML ({exc})") from None
    ovf = f"{{{OVF_NS}}}"
    files = {f.get(f"{ovf}id"): f.get(f"{ovf}href", "") for f in root.iter(f"{ovf}File")}
    disks = [d.get(f"{ovf}fileRef") for d in root.iter(f"{ovf}Disk")]
    if len(disks) != 1:
        raise Invalid(
            "OvaDisks", f"the OVA's OVF has {len(disks)} disks; only appliances of one disk are taken"
        )
    href = files.get(disks[0], "")
    if not href or "/" in href or "\\" in href or href in (".", ".."):
        raise _invalid(f"references the disk file {href!r}, not a plain name in the archive")
    cpu, memory_mib = 1, 512
    for item in root.iter(f"{ovf}Item"):
        kind = item.findtext(f"{{{RASD_NS}}}ResourceType", "").strip()
        quantity = item.findtext(f"{{{RASD_NS}}}VirtualQuantity", "").strip()
        if not quantity.isdigit():
            continue
        if kind == _CPU:
            cpu = int(quantity)
        elif kind == _MEMORY:
            units = item.findtext(f"{{{RASD_NS}}}AllocationUnits", "byte * 2^20").strip()
            memory_mib = int(quantity) * _MEMORY_UNITS_MIB.get(units, 1)
    return OvaAppliance(disk=href, cpu=cpu, memory_mib=memory_mib)
