"""Issue 34's clones on real libvirt daemons: a template whose disk holds a marker, cloned three
times through ``POST /v1/vms/actions/create``. Each clone boots a full copy of the template's
disk (its console shows the marker), configures the MAC and address virtplane gave it (its
console shows both, read from its seed), and its seed, as uploaded to the daemon's pool, holds
its own instance id. The module's daemons run in the network namespace of test_network_qemu.
"""

from __future__ import annotations

import pytest

from tests.conftest import eventually
from virtplane.controllers.seed import vm_seed
from virtplane.domain.networks import Network
from virtplane.domain.resources import VMPhase, Volume, VolumePhase
from virtplane.seed_iso import read_seed_iso

from .conftest import console_shows
from .plane import LIMIT_S, SHARED, QemuPlane, disk0, write_marker
from .test_network_qemu import BRIDGE, GATEWAY, SUBNET, _created, _vm_doc
from .test_network_qemu import rig as rig  # the module's daemons, in the namespace with the bridge

pytestmark = [pytest.mark.qemu, pytest.mark.slow]

CLONES = ("c-1", "c-2", "c-3")


async def test_three_clones_each_get_the_disk_and_their_own_mac_address_and_instance_id(
    qplane: QemuPlane,
) -> None:
    await qplane.add_host("a")
    async with qplane.api() as api:
        network = {"kind": "bridge", "bridge": BRIDGE, "cluster": "default", "subnet": SUBNET,
                   "gateway": GATEWAY, "range": {"start": "10.77.0.60", "end": "10.77.0.90"}}  # fmt: skip
        await _created(api, "networks", {"metadata": {"name": "lan"}, "spec": network})
        await eventually(lambda: qplane.store.get(Network, "lan").status.hosts == ["a"], timeout=LIMIT_S)
        gold = await qplane.add_volume("gold-root", SHARED)
        write_marker(gold.status.path, ord("G"))  # no VM runs on it
        template = _vm_doc("gold")
        template["spec"].update(run_policy="AlwaysOff", template=True)
        made = await _created(api, "vms", template)
        await qplane.wait_settled("gold", VMPhase.STOPPED)

        answer = await api.post(
            "/v1/vms/actions/create",
            json={"names": list(CLONES), "template": "gold", "run_policy": "AlwaysOn"},
        )
        assert answer.status_code == 201, answer.text

    for name in CLONES:
        await qplane.wait_settled(name, VMPhase.RUNNING)
    uids, macs, addresses = set(), set(), set()
    for name in CLONES:
        vm = qplane.vm(name)
        (nic,) = vm.status.nics
        volume = qplane.store.get(Volume, f"{name}-root")
        assert volume.status.phase is VolumePhase.READY and volume.status.path != gold.status.path
        log = await console_shows(qplane.rig, qplane.domain(name), disk0(ord("G")), limit_s=LIMIT_S)
        await console_shows(
            qplane.rig,
            qplane.domain(name),
            f"cidata: eth0 {nic.ip}/24 via {GATEWAY} mac {nic.mac}",
            limit_s=LIMIT_S,
        )
        assert f"cidata: hostname {name}" in log
        seed = vm_seed(vm, {"lan": qplane.store.get(Network, "lan")})
        assert seed is not None
        _, documents = read_seed_iso((qplane.rig.base / SHARED / seed.file_name).read_bytes())
        assert f'"instance-id": "{vm.metadata.uid}"' in documents["meta-data"].decode()
        uids.add(vm.metadata.uid)
        macs.add(nic.mac)
        addresses.add(nic.ip)
    template_nic = made["spec"]["nics"][0]
    assert len(uids) == 3 and made["metadata"]["uid"] not in uids
    assert len(macs) == 3 and template_nic["mac"] not in macs
    assert len(addresses) == 3 and template_nic["ip"] not in addresses
