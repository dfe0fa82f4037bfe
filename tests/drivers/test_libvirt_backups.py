"""The libvirt driver's backup XML (the behaviour itself: tests/qemu/test_backup_driver_qemu.py)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from virtplane.drivers.libvirt.backups import checkpoint_xml, job_xml
from virtplane.drivers.libvirt.domain_xml import volume_xml


def test_a_disk_not_asked_for_is_neither_backed_up_nor_tracked() -> None:
    job = ET.fromstring(job_xml(["vda", "vdb", "sda"], {"vda": "/t/b.qcow2"}, incremental_from="cp-1"))
    assert job.findtext("incremental") == "cp-1"
    backed = {d.get("name"): d.get("backup") for d in job.iter("disk")}
    assert backed == {"vda": "yes", "vdb": "no", "sda": "no"}
    checkpoint = ET.fromstring(checkpoint_xml("cp-2", ["vda", "vdb", "sda"], {"vda"}))
    assert {d.get("name"): d.get("checkpoint") for d in checkpoint.iter("disk")} == {
        "vda": "bitmap",
        "vdb": "no",
        "sda": "no",
    }


def test_qcow2_volumes_are_v3_so_they_can_keep_dirty_bitmaps() -> None:
    """libvirt 9.0 makes qcow2 v2 by default: a checkpoint on such a disk fails ("Cannot store
    dirty bitmaps in qcow2 v2 files", seen on the rig)."""
    assert ET.fromstring(volume_xml("d.qcow2", 1024)).findtext("target/compat") == "1.1"
    assert ET.fromstring(volume_xml("d.raw", 1024, "raw")).findtext("target/compat") is None
    overlay = ET.fromstring(volume_xml("b2.qcow2", 1024, backing="/t/b1.qcow2"))
    assert overlay.findtext("target/compat") == "1.1"
    assert overlay.findtext("backingStore/path") == "/t/b1.qcow2"
