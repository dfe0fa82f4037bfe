"""Issue 14's NoCloud seed on a real libvirtd + QEMU: the control plane builds a VM's seed,
uploads it to the host's pool through libvirt (``virStorageVolUpload``) and attaches it as a
CD-ROM; the test guest (scripts/qemu/build-initrd.sh) reads it at boot as cloud-init would,
takes its hostname from the meta-data and runs its user data, and says so on the console.
"""

from __future__ import annotations

import pytest

from virtplane.controllers.seed import vm_seed
from virtplane.domain.networks import CloudInit
from virtplane.domain.resources import RunPolicy, VMPhase
from virtplane.seed_iso import read_seed_iso

from .conftest import console_shows
from .plane import LIMIT_S, QemuPlane

pytestmark = [pytest.mark.qemu, pytest.mark.slow]


async def test_a_guest_reads_the_seed_uploaded_to_its_daemon(qplane: QemuPlane) -> None:
    await qplane.add_host("a")
    await qplane.add_volume("seeded-root")
    user_data = "#!/bin/sh\necho USER-DATA-RAN on $(hostname)\n"
    qplane.add_vm("seeded", RunPolicy.ALWAYS_ON, "seeded-root", cloud_init=CloudInit(user_data=user_data))
    await qplane.wait_settled("seeded", VMPhase.RUNNING)

    log = await console_shows(qplane.rig, qplane.domain("seeded"), "USER-DATA-RAN on seeded", limit_s=LIMIT_S)
    assert "cidata: hostname seeded" in log
    # what the guest read is the volume the plane uploaded to the daemon's pool, byte for byte
    expected = vm_seed(qplane.vm("seeded"), {})
    assert expected is not None
    (seed_file,) = (qplane.rig.base / "shared").glob("vp-seed-*.iso")
    assert seed_file.name == expected.file_name
    assert read_seed_iso(seed_file.read_bytes()) == ("cidata", expected.documents)
