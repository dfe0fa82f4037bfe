"""Issue 34's OVA import on real libvirt daemons: an OVA of two VMDKs made by ``qemu-img``
and an OVF written here, uploaded through the API. Its disks reach each daemon's private
library, the VM is created Stopped with the OVF's CPU, memory and two disks (copies in the
shared pool), and with the test kernel it boots from the imported first disk (its console
shows the marker written into that disk before it was packed)."""

from __future__ import annotations

import hashlib
import subprocess
import tarfile
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import eventually
from virtplane.domain.resources import StoragePool, VMPhase, Volume, VolumePhase

from .conftest import console_shows
from .plane import LIMIT_S, SHARED, QemuPlane, disk0

pytestmark = [pytest.mark.qemu, pytest.mark.slow]

OVF = """<?xml version="1.0" encoding="UTF-8"?>
<Envelope xmlns="http://schemas.dmtf.org/ovf/envelope/1" xmlns:ovf="http://schemas.dmtf.org/ovf/envelope/1"
    xmlns:rasd="http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_ResourceAllocationSettingData">
  <References><File ovf:id="f0" ovf:href="boot.vmdk"/><File ovf:id="f1" ovf:href="data.vmdk"/></References>
  <DiskSection><Info>disks</Info>
    <Disk ovf:diskId="d0" ovf:fileRef="f0" ovf:capacity="64" ovf:capacityAllocationUnits="byte * 2^20"/>
    <Disk ovf:diskId="d1" ovf:fileRef="f1" ovf:capacity="32" ovf:capacityAllocationUnits="byte * 2^20"/>
  </DiskSection>
  <VirtualSystem ovf:id="tiny">
    <Name>Tiny Appliance</Name>
    <VirtualHardwareSection>
      <Item><rasd:ResourceType>3</rasd:ResourceType><rasd:VirtualQuantity>2</rasd:VirtualQuantity></Item>
      <Item><rasd:AllocationUnits>byte * 2^20</rasd:AllocationUnits>
        <rasd:ResourceType>4</rasd:ResourceType><rasd:VirtualQuantity>256</rasd:VirtualQuantity></Item>
    </VirtualHardwareSection>
  </VirtualSystem>
</Envelope>
"""


def vmdk(directory: Path, name: str, size_mib: int, marker: int | None) -> None:
    """A VMDK made by qemu-img from a raw disk whose first sector holds ``marker``."""
    raw = directory / f"{name}.raw"
    with raw.open("wb") as disk:
        disk.truncate(size_mib * 1024 * 1024)
        if marker is not None:
            disk.write(bytes([marker]) * 512)
    subprocess.run(
        ["qemu-img", "convert", "-q", "-f", "raw", "-O", "vmdk", str(raw), str(directory / f"{name}.vmdk")],
        check=True,
    )


async def test_an_ova_of_two_disks_becomes_a_vm_that_boots_its_first_disk(
    qplane: QemuPlane, tmp_path: Path
) -> None:
    await qplane.add_host("a")
    await qplane.add_host("b")
    vmdk(tmp_path, "boot", 64, ord("O"))
    vmdk(tmp_path, "data", 32, None)
    (tmp_path / "tiny.ovf").write_text(OVF)
    with tarfile.open(tmp_path / "tiny.ova", "w", format=tarfile.USTAR_FORMAT) as archive:
        for member in ("tiny.ovf", "boot.vmdk", "data.vmdk"):
            archive.add(tmp_path / member, arcname=member)
    ova = (tmp_path / "tiny.ova").read_bytes()
    library = f"/var/lib/libvirt/ova-{uuid.uuid4().hex[:8]}"  # inside each daemon's own mount

    async with qplane.api() as api:
        pool = {
            "metadata": {"name": "ova-library"},  # not test_image_upload's "uploads": the daemons keep that pool, on another path
            "spec": {"kind": "shared", "cluster": "default", "path": library, "capacity_gib": 10, "content": "images"},
        }  # fmt: skip
        assert (await api.post("/v1/storagepools", json=pool)).status_code == 201
        await eventually(
            lambda: qplane.store.get(StoragePool, "ova-library").status.reachable_hosts == ["a", "b"],
            timeout=LIMIT_S,
        )
        answer = await api.put(
            "/v1/vms/actions/import-ova",
            params={"pool": SHARED, "library": "ova-library", "sha256": hashlib.sha256(ova).hexdigest()},
            content=ova,
        )
        assert answer.status_code == 201, answer.text
        vm = await qplane.wait_settled("tiny-appliance", VMPhase.STOPPED)
        assert (vm.spec.cpu, vm.spec.memory_mib) == (2, 256)
        assert [d.volume for d in vm.spec.disks] == ["tiny-appliance-disk0", "tiny-appliance-disk1"]
        for disk in vm.spec.disks:
            await eventually(
                lambda disk=disk: qplane.store.get(Volume, disk.volume).status.phase is VolumePhase.READY,
                timeout=LIMIT_S,
            )
        # the tiny guest has no boot loader: its kernel boots with the imported disks as vda, vdb
        boot = {"kernel": "guest-kernel", "initrd": "guest-initrd", "cmdline": "console=ttyS0 panic=-1 quiet"}
        patched = await api.patch(
            "/v1/vms/tiny-appliance", json={"spec": {"boot": boot, "run_policy": "AlwaysOn"}}
        )
        assert patched.status_code == 200, patched.text

    vm = await qplane.wait_settled("tiny-appliance", VMPhase.RUNNING)
    await console_shows(qplane.rig, qplane.domain("tiny-appliance"), disk0(ord("O")), limit_s=LIMIT_S)
    assert vm.status.host is not None
    xml = await qplane.drivers[vm.status.host]._call(
        lambda conn: conn.lookupByName(qplane.domain("tiny-appliance")).XMLDesc(0)
    )
    sources = [
        d.find("source").get("file") for d in ET.fromstring(xml).findall("devices/disk[@device='disk']")
    ]  # type: ignore[union-attr]
    volumes = [qplane.store.get(Volume, d.volume).status.path for d in vm.spec.disks]
    assert sources[:2] == volumes
