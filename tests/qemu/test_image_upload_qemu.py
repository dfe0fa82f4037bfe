"""Issue 34 on real libvirt daemons: images uploaded through the API into a library that each
daemon keeps on its own (``/var/lib/libvirt/...``, its private mount) and the control plane
does not see at all, written through libvirt's volume upload; a corrupted upload refused
with nothing left on either host; a VM with the uploaded ISO as its CD-ROM runs.
"""

from __future__ import annotations

import hashlib
import subprocess
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import eventually
from virtplane.domain.resources import Image, ImagePhase, RunPolicy, StoragePool, VMPhase
from virtplane.seed_iso import build_seed_iso

from .plane import LIMIT_S, QemuPlane

pytestmark = [pytest.mark.qemu, pytest.mark.slow]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_uploads_reach_both_daemons_private_libraries_and_an_iso_becomes_a_cdrom(
    qplane: QemuPlane, tmp_path: Path
) -> None:
    await qplane.add_host("a")
    await qplane.add_host("b")
    library = f"/var/lib/libvirt/uploads-{uuid.uuid4().hex[:8]}"  # inside each daemon's own mount
    assert not Path(library).exists()  # nothing of it on the control plane's side

    def on_host(host: str, file: str) -> Path:
        """The file as the host keeps it (the test reads the rig's directory; the plane cannot)."""
        return qplane.rig.base / "hosts" / host / "lib" / library.removeprefix("/var/lib/libvirt/") / file

    qcow2_path = tmp_path / "disk.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(qcow2_path), "64M"], check=True)
    qcow2 = qcow2_path.read_bytes()
    iso = build_seed_iso({"README": b"a tiny installer\n"})

    async with qplane.api() as api:
        pool = {
            "metadata": {"name": "uploads"},
            "spec": {"kind": "shared", "cluster": "default", "path": library, "capacity_gib": 10, "content": "images"},
        }  # fmt: skip
        assert (await api.post("/v1/storagepools", json=pool)).status_code == 201
        await eventually(
            lambda: qplane.store.get(StoragePool, "uploads").status.reachable_hosts == ["a", "b"],
            timeout=LIMIT_S,
        )
        corrupted = await api.put(
            "/v1/images/broken/content",
            params={"pool": "uploads", "sha256": sha(qcow2)},
            content=qcow2[:-1] + b"\x01",
        )
        assert (corrupted.status_code, corrupted.json()["reason"]) == (422, "ChecksumMismatch")
        for data, name, kind in ((qcow2, "disk", "Disk"), (iso, "installer", "Iso")):
            answer = await api.put(
                f"/v1/images/{name}/content",
                params={"pool": "uploads", "sha256": sha(data), "kind": kind},
                content=data,
            )
            assert answer.status_code == 201, answer.text

    for name in ("disk", "installer"):
        await eventually(
            lambda name=name: qplane.store.get(Image, name).status.phase is not ImagePhase.PENDING,
            timeout=LIMIT_S,
        )
        image = qplane.store.get(Image, name)
        assert image.status.phase is ImagePhase.READY, image.status.message
        assert image.status.hosts == ["a", "b"]
    for host in ("a", "b"):
        assert sha(on_host(host, "vp-image-disk.qcow2").read_bytes()) == sha(qcow2)
        assert sha(on_host(host, "vp-image-installer.iso").read_bytes()) == sha(iso)
        assert not on_host(host, "vp-image-broken.qcow2").exists()  # the corrupted one: nowhere

    root = await qplane.add_volume("installing-root")
    qplane.add_vm("installing", RunPolicy.ALWAYS_ON, root.metadata.name, cdrom="installer")
    vm = await qplane.wait_settled("installing", VMPhase.RUNNING)
    assert vm.status.host is not None
    driver = qplane.drivers[vm.status.host]
    xml = await driver._call(lambda conn: conn.lookupByName(qplane.domain("installing")).XMLDesc(0))
    disks = {
        d.get("device"): d for d in ET.fromstring(xml).findall("devices/disk") if d.find("boot") is not None
    }
    cdrom = disks["cdrom"]
    assert cdrom.find("source").get("file") == f"{library}/vp-image-installer.iso"  # type: ignore[union-attr]
    assert cdrom.find("readonly") is not None
    assert (disks["disk"].find("boot").get("order"), cdrom.find("boot").get("order")) == ("1", "2")  # type: ignore[union-attr]

    # an uploaded Image's deletion takes its files from both daemons' libraries
    async with qplane.api() as api:
        assert (await api.delete("/v1/images/disk")).status_code == 200
    await eventually(lambda: qplane.store.find(Image, "disk") is None, timeout=LIMIT_S)
    for host in ("a", "b"):
        assert not on_host(host, "vp-image-disk.qcow2").exists()
        assert on_host(host, "vp-image-installer.iso").exists()  # in use by the VM: kept
