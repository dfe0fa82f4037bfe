"""The demo world (``virtplane.demo``) as ``serve --demo`` seeds it: every VM has a NIC on the
``user`` network whose MAC was admitted and claimed as through the API, and runs with it."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import make_plane, serving, wait_json
from virtplane.demo import USER_NETWORK, guest_loads, seed, stock_library
from virtplane.domain.resources import VirtualMachine
from virtplane.drivers.base import NicAttachment, domain_name
from virtplane.drivers.sim import SimCloud
from virtplane.store.store import Store, sqlite_url


def test_each_demo_vm_has_a_user_nic_whose_mac_it_holds(tmp_path: Path) -> None:
    store = Store(sqlite_url(tmp_path / "demo.db"))
    store.migrate()
    seed(store)
    macs = {}
    for vm in store.list_objects(VirtualMachine):
        (nic,) = vm.spec.nics
        assert (nic.network, nic.ip) == (USER_NETWORK, None), "a user network hands out no addresses"
        assert nic.mac is not None
        macs[nic.mac] = vm.metadata.name
    assert len(macs) == 6, "six VMs, six MACs"
    held = {claim.value: holder.name for claim, holder in store.claims("mac")}
    assert held == macs, "each MAC is claimed by its VM, so the API hands it to no other NIC"

    assert seed(store) == 0, "a restart adds nothing"
    assert {n.mac for vm in store.list_objects(VirtualMachine) for n in vm.spec.nics} == set(macs)
    with serving(store, make_plane(store), name="demo") as server, server.client("operator") as operator:
        body = {
            "metadata": {"name": "extra-1"},
            "spec": {"run_policy": "AlwaysOff", "nics": [{"network": "user"}]},
        }
        created = operator.post("/v1/vms", json=body)
        assert created.status_code == 201, created.text
        assert created.json()["spec"]["nics"][0]["mac"] not in macs
        taken = next(iter(macs))
        body = {"metadata": {"name": "extra-2"}, "spec": {"nics": [{"network": "user", "mac": taken}]}}
        refused = operator.post("/v1/vms", json=body)
        assert (refused.status_code, refused.json()["reason"]) == (409, "MacInUse")
    store.close()


def test_the_demo_vms_run_with_their_nic(tmp_path: Path) -> None:
    store = Store(sqlite_url(tmp_path / "demo.db"))
    store.migrate()
    seed(store)
    sim = SimCloud(boot_seconds=0.02, shutdown_seconds=0.02)
    stock_library(sim)
    with serving(store, make_plane(store, sim=sim), name="demo") as server, server.client("viewer") as viewer:
        vm = wait_json(viewer, "/v1/vms/web-1", lambda v: v["status"]["phase"] == "Running")
        (nic,) = vm["spec"]["nics"]
        assert vm["status"]["nics"] == [
            {"network": USER_NETWORK, "mac": nic["mac"], "ip": None, "prefix_length": None, "gateway": None}
        ]
        domain = sim.host_named(vm["status"]["host"]).domains[domain_name(vm["metadata"]["uid"])]
        assert domain.spec.nics == (
            NicAttachment(mac=nic["mac"], bridge=None, vlan=None, network=USER_NETWORK),
        )
    store.close()


def test_the_demo_guests_are_given_work_each_its_own(store: Store) -> None:
    """So that the usage graphs and ``virtplane top`` show something in the demo."""
    seed(store)
    sim = SimCloud()
    guest_loads(sim, store)
    vms = store.list_objects(VirtualMachine)
    loads = {vm.metadata.name: sim.meters.load_of(domain_name(vm.metadata.uid)) for vm in vms}
    assert len(loads) >= 3 and all(load.cpu > 0.02 or load.disk_write_bps > 0 for load in loads.values())
    assert len({load.cpu for load in loads.values()}) > 1
