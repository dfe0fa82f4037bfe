"""Hot-plug through the spec (issue 32, item 4), on the simulator through the real API: an operator
edits a running VM's ``spec.disks`` / ``spec.nics`` and the VM controller attaches and detaches
one device per look, without a restart (the simulator counts the domain's boots); the new NIC
gets its MAC and address from IPAM, the one taken out gives its address back, a detached
volume is released, and the guest's seed says what the VM has. What cannot be done is refused
with a reason: by the API (409) where it can know, by the VM's DevicesReady condition where
only the host knows (a guest that never releases a device, a host that cannot hot-plug).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer, eventually, libvirt_or_skip, make_plane, serving, wait_json
from tests.drivers.conftest import write_node_xml
from tests.restore.test_restore import make_vm
from virtplane.bootstrap import ControlPlane
from virtplane.controllers.seed import vm_seed
from virtplane.domain.base import Condition
from virtplane.domain.conditions import VMCondition, get_condition
from virtplane.domain.networks import Network
from virtplane.domain.resources import Disk, Metadata, RunPolicy, VirtualMachine, VMPhase, Volume, VolumeSpec
from virtplane.drivers.base import domain_name
from virtplane.drivers.sim import SimCloud
from virtplane.store.store import Store

LAN = {
    "kind": "bridge",
    "bridge": "br0",
    "cluster": "default",
    "subnet": "10.8.0.0/24",
    "gateway": "10.8.0.1",
}
LAN2 = {
    "kind": "bridge",
    "bridge": "br1",
    "cluster": "default",
    "subnet": "10.9.0.0/24",
    "gateway": "10.9.0.1",
}
FAR = {"kind": "bridge", "bridge": "br9", "cluster": "default"}  # on no host


@pytest.fixture
def world(store: Store) -> Iterator[tuple[LiveServer, SimCloud]]:
    sim = SimCloud(boot_seconds=0.02, shutdown_seconds=0.02, detach_seconds=0.3)
    sim.add_host("h1", 16, 32768, ["br0", "br1"])
    sim.add_host("h2", 16, 32768, ["br0", "br1", "br9"])
    with serving(store, make_plane(store, sim=sim)) as server:
        with server.client("admin") as admin:
            post(admin, "hosts", {"metadata": {"name": "h1"}, "spec": {"uri": "sim://h1"}})
            post(
                admin,
                "storagepools",
                {
                    "metadata": {"name": "shared"},
                    "spec": {"kind": "shared", "hosts": ["h1"], "capacity_gib": 50},
                },
            )
            for name, spec in (("lan", LAN), ("lan2", LAN2), ("far", FAR)):
                post(admin, "networks", {"metadata": {"name": name}, "spec": spec})
            for volume in ("root", "data"):
                post(
                    admin,
                    "volumes",
                    {"metadata": {"name": volume}, "spec": {"pool": "shared", "size_gib": 1}},
                )
            wait_json(admin, "/v1/storagepools/shared", lambda p: p["status"]["reachable_hosts"] == ["h1"])
            vm = {
                "metadata": {"name": "web"},
                "spec": {"disks": [{"volume": "root"}], "nics": [{"network": "lan"}], "cloud_init": {}},
            }
            post(admin, "vms", vm)
            wait_json(admin, "/v1/vms/web", lambda v: v["status"]["phase"] == "Running")
        yield server, sim


def post(client: httpx.Client, plural: str, doc: dict[str, Any]) -> None:
    created = client.post(f"/v1/{plural}", json=doc)
    assert created.status_code == 201, created.text


def devices_ready(vm: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in vm["status"]["conditions"] if c["type"] == "DevicesReady"), {})


def settled(vm: dict[str, Any]) -> bool:
    """The running domain has the devices of the VM's current spec."""
    return (
        devices_ready(vm).get("status") == "True"
        and vm["status"]["devices_generation"] == vm["metadata"]["generation"]
    )


def live(server: LiveServer, sim: SimCloud) -> tuple[tuple[str, ...], tuple[str, ...], int, str | None]:
    """(disk paths, NIC MACs, boots, seed path) of web's running instance on h1, as the simulator has it."""
    vm = server.store.get(VirtualMachine, "web")
    domain = sim.host_by_uri("sim://h1").domains[domain_name(vm.metadata.uid)]  # type: ignore[union-attr]
    spec = domain.live
    assert spec is not None
    return tuple(d.path for d in spec.disks), tuple(n.mac for n in spec.nics), domain.boots, spec.seed


def test_a_disk_and_a_nic_come_and_go_on_a_running_vm_with_ipam_seed_and_volumes_kept_right(
    world: tuple[LiveServer, SimCloud],
) -> None:
    server, sim = world
    with server.client("operator") as op:
        vm = op.get("/v1/vms/web").json()
        first = vm["spec"]["nics"][0]
        _, _, boots, _ = live(server, sim)

        added = op.patch(
            "/v1/vms/web",
            json={
                "spec": {
                    "disks": [{"volume": "root"}, {"volume": "data"}],
                    "nics": [first, {"network": "lan2"}],
                }
            },
        )
        assert added.status_code == 200, added.text
        second = added.json()["spec"]["nics"][1]
        assert second["ip"] == "10.9.0.2" and second["mac"].startswith("52:54:00:")  # IPAM, as at create
        vm = wait_json(op, "/v1/vms/web", settled)
        assert vm["status"]["phase"] == "Running"
        data = op.get("/v1/volumes/data").json()
        assert data["status"]["attached_vm"] == "web"
        disks, macs, now_boots, seed = live(server, sim)
        assert disks[1] == data["status"]["path"] and macs == (first["mac"], second["mac"])
        assert now_boots == boots, "attached without a restart"
        networks = {n.metadata.name: n for n in server.store.list_objects(Network)}
        wanted = vm_seed(server.store.get(VirtualMachine, "web"), networks)
        assert wanted is not None and seed is not None and seed.endswith(wanted.file_name)
        assert second["mac"].encode() in wanted.documents["network-config"]

        # the first NIC and the data disk out: the second NIC keeps its MAC and address
        taken = op.patch(
            "/v1/vms/web", json={"spec": {"disks": [{"volume": "root"}], "nics": [{"network": "lan2"}]}}
        )
        assert taken.status_code == 200, taken.text
        assert taken.json()["spec"]["nics"] == [second]
        vm = wait_json(op, "/v1/vms/web", settled)
        assert vm["status"]["device_changes"] == [] and vm["status"]["phase"] == "Running"
        disks, macs, now_boots, seed = live(server, sim)
        assert disks == (op.get("/v1/volumes/root").json()["status"]["path"],) and macs == (second["mac"],)
        assert now_boots == boots, "detached without a restart"
        wait_json(op, "/v1/volumes/data", lambda v: v["status"]["attached_vm"] is None)
        lan = wait_json(op, "/v1/networks/lan", lambda n: n["status"]["addresses_in_use"] == 0)
        assert lan["status"]["allocations"] == []
        networks = {n.metadata.name: n for n in server.store.list_objects(Network)}
        wanted = vm_seed(server.store.get(VirtualMachine, "web"), networks)
        assert wanted is not None and seed is not None and seed.endswith(wanted.file_name)

        events = op.get("/v1/events", params={"kind": "VirtualMachine", "name": "web"}).json()["items"]
        hotplug = [
            e["reason"] for e in events if e["reason"] in ("Attached", "Detaching", "Detached", "SeedChanged")
        ]
        # one device per look; the seed follows once the devices agree
        attached = ["Attached", "Attached", "SeedChanged"]
        detached = ["Detaching", "Detaching", "Detached", "Detached", "SeedChanged"]
        assert hotplug == attached + detached, hotplug


def test_what_cannot_be_hot_plugged_is_refused_with_a_reason(world: tuple[LiveServer, SimCloud]) -> None:
    server, _ = world
    with server.client("admin") as admin:
        admin.post("/v1/hosts", json={"metadata": {"name": "h2"}, "spec": {"uri": "sim://h2"}})
        spec = {"kind": "local", "host": "h2", "capacity_gib": 10}
        post(admin, "storagepools", {"metadata": {"name": "h2-local"}, "spec": spec})
        post(
            admin, "volumes", {"metadata": {"name": "far-disk"}, "spec": {"pool": "h2-local", "size_gib": 1}}
        )
        wait_json(admin, "/v1/storagepools/h2-local", lambda p: p["status"]["reachable_hosts"] == ["h2"])
    with server.client("operator") as op:
        db = {"metadata": {"name": "db"}, "spec": {"run_policy": "AlwaysOff", "disks": [{"volume": "data"}]}}
        post(op, "vms", db)
        nics = op.get("/v1/vms/web").json()["spec"]["nics"]
        cases = {
            "VolumeAttached": {"disks": [{"volume": "root"}, {"volume": "data"}]},
            "BootDiskInUse": {"disks": []},
            "PoolNotReachable": {"disks": [{"volume": "root"}, {"volume": "far-disk"}]},
            "NetworkNotOnHost": {"nics": [*nics, {"network": "far"}]},
        }
        for reason, change in cases.items():
            refused = op.patch("/v1/vms/web", json={"spec": change})
            assert refused.status_code == 409, refused.text
            assert refused.json()["reason"] == reason, refused.text
        swapped = op.patch("/v1/vms/web", json={"spec": {"disks": [{"volume": "far-disk"}]}})
        assert swapped.status_code == 409 and "boot disk of VM web" in swapped.json()["message"]
        garbage = op.patch("/v1/vms/web", json={"spec": {"disks": [{"volume": "root"}, {"volume": 7}]}})
        assert garbage.status_code == 422, garbage.text
        assert op.get("/v1/vms/web").json()["status"]["phase"] == "Running"


def test_a_guest_that_does_not_release_a_device_times_out_with_a_condition_and_keeps_the_volume(
    world: tuple[LiveServer, SimCloud],
) -> None:
    server, sim = world
    with server.client("admin") as admin:
        assert (
            admin.patch("/v1/settings/vm.hotplug.detach_timeout_s", json={"spec": {"value": 0.5}}).status_code
            == 200
        )
    with server.client("operator") as op:
        both = {"spec": {"disks": [{"volume": "root"}, {"volume": "data"}]}}
        assert op.patch("/v1/vms/web", json=both).status_code == 200
        wait_json(op, "/v1/vms/web", settled)
        uid = op.get("/v1/vms/web").json()["metadata"]["uid"]
        sim.inject("h1", "ignore-unplug", domain_name(uid))
        assert op.patch("/v1/vms/web", json={"spec": {"disks": [{"volume": "root"}]}}).status_code == 200
        vm = wait_json(op, "/v1/vms/web", lambda v: devices_ready(v).get("reason") == "DetachTimedOut")
        assert vm["status"]["phase"] == "Running" and not settled(vm)
        (change,) = vm["status"]["device_changes"]
        assert (change["kind"], change["name"], change["state"]) == ("disk", "data", "DetachTimedOut")
        assert "did not release it within 0.5 s" in devices_ready(vm)["message"]
        # the guest may still write it: the volume stays the VM's
        assert op.get("/v1/volumes/data").json()["status"]["attached_vm"] == "web"

        # a restart defines the domain from the spec: the disk is gone, the volume released
        restart = {"metadata": {"name": "restart-web"}, "spec": {"vm": "web", "type": "Restart"}}
        post(op, "operations", restart)
        wait_json(op, "/v1/volumes/data", lambda v: v["status"]["attached_vm"] is None)
        vm = wait_json(op, "/v1/vms/web", lambda v: v["status"]["phase"] == "Running" and settled(v))
        assert vm["status"]["device_changes"] == []
        assert len(live(server, sim)[0]) == 1


def test_a_snapshot_after_a_hot_plug_covers_the_disk_and_a_restore_brings_it_back(
    world: tuple[LiveServer, SimCloud],
) -> None:
    server, sim = world
    with server.client("operator") as op:
        both = {"spec": {"disks": [{"volume": "root"}, {"volume": "data"}]}}
        assert op.patch("/v1/vms/web", json=both).status_code == 200
        wait_json(op, "/v1/vms/web", settled)
        post(op, "snapshots", {"metadata": {"name": "with-data"}, "spec": {"vm": "web"}})
        snap = wait_json(op, "/v1/snapshots/with-data", lambda s: s["status"]["phase"] in ("Ready", "Failed"))
        assert snap["status"]["phase"] == "Ready", snap["status"]
        assert sorted(d["volume"] for d in snap["status"]["disk_snapshots"]) == ["data", "root"]
        assert [d["volume"] for d in snap["status"]["captured"]["spec"]["disks"]] == ["root", "data"]

        assert op.patch("/v1/vms/web", json={"spec": {"disks": [{"volume": "root"}]}}).status_code == 200
        wait_json(op, "/v1/volumes/data", lambda v: v["status"]["attached_vm"] is None)
        restore = {
            "metadata": {"name": "back"},
            "spec": {"vm": "web", "type": "Restore", "restore": {"snapshot": "with-data"}},
        }
        post(op, "operations", restore)
        done = wait_json(op, "/v1/operations/back", lambda o: o["status"]["phase"] in ("Completed", "Failed"))
        assert done["status"]["phase"] == "Completed", done["status"]
        wait_json(op, "/v1/vms/web", lambda v: v["status"]["phase"] == "Running" and settled(v))
        data = wait_json(op, "/v1/volumes/data", lambda v: v["status"]["attached_vm"] == "web")
        assert live(server, sim)[0][1] == data["status"]["path"]


async def test_a_host_that_cannot_hot_plug_says_so_and_the_change_waits_for_the_next_start(
    plane: ControlPlane, tmp_path: Path
) -> None:
    """libvirt's test driver reads a running domain's devices but cannot change them."""
    libvirt_or_skip()
    await make_vm(plane, RunPolicy.ALWAYS_ON, uri=write_node_xml(tmp_path / "h1.xml"))
    await eventually(lambda: plane.store.get(VirtualMachine, "a").status.phase is VMPhase.RUNNING)
    plane.store.create(Volume(metadata=Metadata(name="data"), spec=VolumeSpec(pool="shared", size_gib=1)))
    plane.store.mutate(VirtualMachine, "a", lambda v: v.spec.disks.append(Disk(volume="data")))

    def unsupported() -> Condition | None:
        ready = get_condition(
            plane.store.get(VirtualMachine, "a").status.conditions, VMCondition.DEVICES_READY
        )
        return ready if ready is not None and ready.reason == "HotplugUnsupported" else None

    ready = await eventually(unsupported)
    assert (
        ready.status.value == "False" and "the change of data applies at the VM's next start" in ready.message
    )
    assert plane.store.get(VirtualMachine, "a").status.phase is VMPhase.RUNNING


def test_a_nic_whose_network_is_not_known_is_left_alone(world: tuple[LiveServer, SimCloud]) -> None:
    """A network the controller's cache lacks (created a moment ago, or gone behind the API's
    back) never makes the running guest lose its NICs."""
    server, sim = world
    with server.client("operator") as op:
        wait_json(op, "/v1/vms/web", settled)
        macs = live(server, sim)[1]
        assert len(macs) == 1
        server.store.delete(Network, "lan")  # the API refuses this while web lists lan
        vm = wait_json(op, "/v1/vms/web", lambda v: devices_ready(v).get("reason") == "Waiting")
        assert devices_ready(vm)["message"] == "network lan does not exist"
        server.reconciled("web")  # a further look changes nothing
        assert live(server, sim)[1] == macs
        assert op.get("/v1/vms/web").json()["status"]["device_changes"] == []
