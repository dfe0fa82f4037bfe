"""Issue 14's NoCloud seed on a real libvirtd + QEMU: the control plane builds a VM's seed,
uploads it to the host's pool through libvirt (``virStorageVolUpload``) and attaches it as a
CD-ROM; the test guest (scripts/qemu/build-initrd.sh) reads it at boot as cloud-init would,
takes its hostname from the meta-data and runs its user data, and says so on the console.
"""

from __future__ import annotations

import pytest

from tests.conftest import eventually
from virtplane.controllers.seed import vm_seed
from virtplane.domain.networks import CloudInit
from virtplane.domain.resources import OperationType, RunPolicy, VirtualMachine, VMPhase
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
    seed_file = qplane.rig.base / "shared" / expected.file_name
    assert read_seed_iso(seed_file.read_bytes()) == ("cidata", expected.documents)


async def test_a_rebuilt_seed_replaces_the_old_volume_on_the_daemon_and_goes_with_the_vm(
    qplane: QemuPlane,
) -> None:
    def seeds() -> set[str]:
        """The seed files in the shared pool, but those of earlier tests on the rig."""
        return {path.name for path in (qplane.rig.base / "shared").glob("vp-seed-*.iso")} - earlier

    earlier: set[str] = set()
    earlier = seeds()

    await qplane.add_host("a")
    await qplane.add_volume("reseeded-root")
    first_boot = CloudInit(user_data="#!/bin/sh\necho FIRST-SEED\n")
    qplane.add_vm(
        "reseeded", RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY, "reseeded-root", cloud_init=first_boot
    )
    await qplane.wait_settled("reseeded", VMPhase.RUNNING)
    await console_shows(qplane.rig, qplane.domain("reseeded"), "FIRST-SEED", limit_s=LIMIT_S)
    (first,) = seeds()

    async with qplane.api() as api:
        patch = {"spec": {"cloud_init": {"user_data": "#!/bin/sh\necho SECOND-SEED\n"}}}
        response = await api.patch("/v1/vms/reseeded", json=patch)
        assert response.status_code == 200, response.text
        assert seeds() == {first}, "the running guest's CD-ROM stays"
        await qplane.operate("reseeded", OperationType.STOP)
        await qplane.wait_settled("reseeded", VMPhase.STOPPED)
        # defined again while off, with the new seed; the old file is deleted from the pool
        (second,) = await eventually(lambda: (found := seeds()) != {first} and len(found) == 1 and found)
        await qplane.operate("reseeded", OperationType.START)
        await console_shows(qplane.rig, qplane.domain("reseeded"), "SECOND-SEED", limit_s=LIMIT_S)
        assert seeds() == {second}

        assert (await api.delete("/v1/vms/reseeded")).status_code in (200, 202)
        await eventually(lambda: qplane.store.find(VirtualMachine, "reseeded") is None, timeout=LIMIT_S)
    assert seeds() == set()
