"""A VM's NICs and NoCloud seed reach its host (issue 14), on the simulator.

The host reports its bridges through the driver (``Host.status.bridges``); a VM waiting for
a host with its network is placed once one reports the bridge; its domain gets one NIC per
network (the bridge and the NIC's MAC) and the seed ISO as a volume in the pool of its first
disk, sent through the driver, whose documents give the NIC its address.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from tests.conftest import LiveServer, wait_json
from virtplane.drivers.base import NicAttachment, domain_name
from virtplane.seed_iso import read_seed_iso


def _setup(admin: Any) -> None:
    docs = [
        ("hosts", {"metadata": {"name": "h1"}, "spec": {"uri": "sim://h1"}}),
        ("storagepools", {"metadata": {"name": "shared"}, "spec": {"kind": "shared", "cluster": "default", "capacity_gib": 50}}),
        ("volumes", {"metadata": {"name": "root"}, "spec": {"pool": "shared", "size_gib": 1}}),
        ("networks", {"metadata": {"name": "lan"}, "spec": {"kind": "bridge", "bridge": "br-lan", "cluster": "default", "subnet": "10.9.0.0/24", "gateway": "10.9.0.1", "dns_servers": ["10.9.0.1"]}}),
    ]  # fmt: skip
    for plural, doc in docs:
        created = admin.post(f"/v1/{plural}", json=doc)
        assert created.status_code == 201, created.text


def test_a_host_that_gets_the_bridge_runs_the_vm_with_its_nic_and_seed(live_server: LiveServer) -> None:
    sim = live_server.plane.sim
    with live_server.client("admin") as admin:
        _setup(admin)
        wait_json(admin, "/v1/hosts/h1", lambda h: h["status"]["connection"] == "Up")
        vm_doc = {
            "metadata": {"name": "web"},
            "spec": {
                "run_policy": "AlwaysOn",
                "disks": [{"volume": "root"}],
                "nics": [{"network": "lan"}],
                "cloud_init": {
                    "user_data": "#cloud-config\n",
                    "ssh_authorized_keys": ["ssh-ed25519 AAAAC3 me@x"],
                },
            },
        }
        assert admin.post("/v1/vms", json=vm_doc).status_code == 201
        wait_json(admin, "/v1/vms/web", lambda v: v["status"]["phase"] == "Pending")

        # an admin adds the bridge on the host; its next look reports it
        live_server.in_loop(sim.set_bridges, "h1", ["br-lan", "br-other"])
        live_server.in_loop(live_server.plane.enqueue, "Host", "h1")
        host = wait_json(admin, "/v1/hosts/h1", lambda h: h["status"]["bridges"])
        assert host["status"]["bridges"] == ["br-lan", "br-other"]
        wait_json(admin, "/v1/networks/lan", lambda n: n["status"]["hosts"] == ["h1"])
        vm = wait_json(admin, "/v1/vms/web", lambda v: v["status"]["phase"] == "Running")

    nic = vm["spec"]["nics"][0]
    spec = sim.host_named("h1").domains[domain_name(vm["metadata"]["uid"])].spec
    assert spec.nics == (NicAttachment(mac=nic["mac"], bridge="br-lan", vlan=None, network="lan"),)
    assert spec.seed is not None and spec.seed.startswith("sim://shared/vp-seed-")
    label, files = read_seed_iso(base64.b64decode(sim.read_volume(spec.seed)))
    assert label == "cidata"
    config = json.loads(files["network-config"])
    (ethernet,) = config["ethernets"].values()
    assert ethernet["match"] == {"macaddress": nic["mac"]}
    assert ethernet["addresses"] == [f"{nic['ip']}/24"]
