"""Networks and NICs through the real app (issue 14): IPAM, MACs, and bad input as a 4xx with a reason.

Every refusal leaves nothing written: the VM does not exist afterwards and the
address it asked for stays free for the next one.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer, eventually_sync, wait_json
from virtplane.drivers.base import domain_name


def network(name: str, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"kind": "bridge", "bridge": "br0", "cluster": "c1"}
    return {"kind": "Network", "metadata": {"name": name}, "spec": {**base, **spec}}


def vm(name: str, *nics: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {"run_policy": "Manual", "nics": list(nics)},
    }


@pytest.fixture
def admin(live_server: LiveServer) -> Iterator[httpx.Client]:
    with live_server.client("admin") as client:
        created = client.post(
            "/v1/networks",
            json=network(
                "lan",
                subnet="10.1.0.0/24",
                gateway="10.1.0.1",
                range={"start": "10.1.0.1", "end": "10.1.0.6"},
            ),
        )
        assert created.status_code == 201, created.text
        yield client


def refused(response: httpx.Response, status: int, reason: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["reason"] == reason, body
    return str(body["message"])


def test_nics_get_a_derived_mac_and_the_first_free_address(admin: httpx.Client) -> None:
    first = admin.post("/v1/vms", json=vm("a", {"network": "lan"})).json()
    nic = first["spec"]["nics"][0]
    assert nic["ip"] == "10.1.0.2"  # the range starts at the gateway, which is skipped
    assert nic["mac"].startswith("52:54:00:")
    second = admin.post("/v1/vms", json=vm("b", {"network": "lan"}, {"network": "lan"})).json()
    assert [n["ip"] for n in second["spec"]["nics"]] == ["10.1.0.3", "10.1.0.4"]
    assert len({nic["mac"], *(n["mac"] for n in second["spec"]["nics"])}) == 3


def test_a_replace_without_mac_or_address_keeps_them(admin: httpx.Client) -> None:
    chosen = {"network": "lan", "ip": "10.1.0.5", "mac": "52:54:00:12:34:56"}
    created = admin.post("/v1/vms", json=vm("a", chosen, {"network": "lan"})).json()
    doc = vm("a", {"network": "lan"}, {"network": "lan"})
    doc["spec"]["cpu"] = 2
    replaced = admin.put("/v1/vms/a", json=doc)
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["spec"]["nics"] == created["spec"]["nics"]


def test_bad_nics_are_refused_and_nothing_is_written(admin: httpx.Client) -> None:
    admin.post("/v1/vms", json=vm("a", {"network": "lan", "ip": "10.1.0.5", "mac": "52:54:00:aa:bb:cc"}))
    cases = [
        ({"network": "lan", "ip": "10.2.0.5"}, 422, "AddressOutsideSubnet"),
        ({"network": "lan", "ip": "10.1.0.255"}, 422, "AddressReserved"),
        ({"network": "lan", "ip": "10.1.0.1"}, 422, "AddressReserved"),
        ({"network": "lan", "ip": "10.1.0.5"}, 409, "AddressInUse"),
        ({"network": "lan", "mac": "52:54:00:AA:BB:CC"}, 409, "MacInUse"),
        ({"network": "wan"}, 422, "NetworkNotFound"),
        ({"network": "lan", "mac": "01:00:5e:00:00:01"}, 422, "Invalid"),
    ]
    for nic, status, reason in cases:
        refused(admin.post("/v1/vms", json=vm("b", nic)), status, reason)
        assert admin.get("/v1/vms/b").status_code == 404
    refused(
        admin.post(
            "/v1/vms",
            json=vm(
                "b",
                {"network": "lan", "mac": "52:54:00:00:00:01"},
                {"network": "lan", "mac": "52:54:00:00:00:01"},
            ),
        ),
        422,
        "Invalid",
    )
    # an update that takes a used address is refused too, and the VM keeps what it had
    other = admin.post("/v1/vms", json=vm("c", {"network": "lan"})).json()
    refused(admin.put("/v1/vms/c", json=vm("c", {"network": "lan", "ip": "10.1.0.5"})), 409, "AddressInUse")
    assert admin.get("/v1/vms/c").json()["spec"]["nics"] == other["spec"]["nics"]


def test_a_full_network_is_a_409(admin: httpx.Client) -> None:
    for index in range(5):  # 10.1.0.2 .. 10.1.0.6
        assert admin.post("/v1/vms", json=vm(f"v{index}", {"network": "lan"})).status_code == 201
    refused(admin.post("/v1/vms", json=vm("full", {"network": "lan"})), 409, "NetworkFull")


def test_deleting_a_vm_releases_its_address_and_mac(admin: httpx.Client) -> None:
    nic = admin.post("/v1/vms", json=vm("a", {"network": "lan", "mac": "52:54:00:00:00:07"})).json()["spec"][
        "nics"
    ][0]
    refused(admin.delete("/v1/networks/lan"), 409, "NetworkInUse")
    assert admin.delete("/v1/vms/a").status_code == 200
    eventually_sync(lambda: admin.get("/v1/vms/a").status_code == 404)
    again = admin.post("/v1/vms", json=vm("b", {"network": "lan", "ip": nic["ip"], "mac": nic["mac"]}))
    assert again.status_code == 201, again.text
    assert admin.delete("/v1/vms/b").status_code == 200
    eventually_sync(lambda: admin.get("/v1/vms/b").status_code == 404)
    assert admin.delete("/v1/networks/lan").status_code == 200


def test_an_address_stays_claimed_while_the_vm_is_being_deleted_and_its_domain_exists(
    live_server: LiveServer, admin: httpx.Client
) -> None:
    """Deletion asked is not deletion done: while the VM's host cannot remove its domain (the
    guest may still answer at that address, with that MAC), nobody else gets them."""
    live_server.plane.sim.add_host("h1", 8, 16384, ["br0"])  # has the network's bridge
    host = {"metadata": {"name": "h1"}, "spec": {"uri": "sim://h1", "cluster": "c1"}}
    assert admin.post("/v1/hosts", json=host).status_code == 201
    chosen = {"network": "lan", "ip": "10.1.0.5", "mac": "52:54:00:00:00:05"}
    doc = vm("a", chosen)
    doc["spec"]["run_policy"] = "AlwaysOn"
    assert admin.post("/v1/vms", json=doc).status_code == 201
    uid = wait_json(admin, "/v1/vms/a", lambda v: v["status"]["phase"] == "Running")["metadata"]["uid"]
    cut = admin.post("/v1/hosts/h1/faults", json={"kind": "disconnect"})
    assert cut.status_code in (200, 201), cut.text

    assert admin.delete("/v1/vms/a").status_code == 200
    events = "/v1/events?name=a&limit=500"
    wait_json(admin, events, lambda e: any(i["reason"] == "DeletionWaiting" for i in e["items"]))
    assert live_server.plane.sim.snapshot_state().active_hosts(domain_name(uid)) == ["h1"]
    refused(admin.post("/v1/vms", json=vm("b", {"network": "lan", "ip": "10.1.0.5"})), 409, "AddressInUse")
    refused(admin.post("/v1/vms", json=vm("b", {"network": "lan", "mac": chosen["mac"]})), 409, "MacInUse")

    assert admin.post("/v1/hosts/h1/faults", json={"kind": "reconnect"}).status_code in (200, 201)
    eventually_sync(lambda: admin.get("/v1/vms/a").status_code == 404, timeout=20)
    assert live_server.plane.sim.snapshot_state().active_hosts(domain_name(uid)) == []
    again = admin.post("/v1/vms", json=vm("b", chosen))
    assert again.status_code == 201, again.text


def test_concurrent_creates_never_share_an_address(live_server: LiveServer, admin: httpx.Client) -> None:
    def create(index: int) -> httpx.Response:
        with live_server.client("admin") as client:
            return client.post("/v1/vms", json=vm(f"race{index}", {"network": "lan"}))

    with ThreadPoolExecutor(max_workers=5) as pool:
        responses = list(pool.map(create, range(5)))
    assert [r.status_code for r in responses] == [201] * 5, [r.text for r in responses]
    addresses = [r.json()["spec"]["nics"][0]["ip"] for r in responses]
    assert sorted(addresses) == [f"10.1.0.{i}" for i in range(2, 7)]


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"vlan": 0}, "Invalid"),
        ({"vlan": 4095}, "Invalid"),
        ({"subnet": "10.1.0.128/25"}, "SubnetOverlap"),
        ({"subnet": "10.0.0.0/8"}, "Invalid"),  # larger than IPAM walks
        ({"subnet": "10.3.0.0/24", "gateway": "10.4.0.1"}, "Invalid"),
        ({"subnet": "10.3.0.0/24", "range": {"start": "10.3.0.9", "end": "10.3.0.2"}}, "Invalid"),
        ({"kind": "user", "bridge": None, "subnet": "10.3.0.0/24"}, "Invalid"),
        ({"bridge": "a-name-longer-than-15"}, "Invalid"),
        ({"cluster": None}, "Invalid"),
    ],
)
def test_bad_networks_are_refused(admin: httpx.Client, spec: dict[str, Any], reason: str) -> None:
    doc = network("other", **spec)
    doc["spec"] = {k: v for k, v in doc["spec"].items() if v is not None}
    refused(admin.post("/v1/networks", json=doc), 422, reason)
    assert admin.get("/v1/networks/other").status_code == 404


def test_the_same_subnet_in_another_cluster_is_fine(admin: httpx.Client) -> None:
    created = admin.post("/v1/networks", json=network("lan2", subnet="10.1.0.0/24", cluster="c2"))
    assert created.status_code == 201, created.text
    refused(admin.patch("/v1/networks/lan2", json={"spec": {"subnet": "10.5.0.0/24"}}), 422, "Immutable")


def with_network_config(doc: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    doc["spec"]["cloud_init"] = {"network_config": config}
    return doc


def v2(mac: str | None, *addresses: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"addresses": list(addresses)} if addresses else {"dhcp4": True}
    if mac is not None:
        entry["match"] = {"macaddress": mac}
    return {"version": 2, "ethernets": {"nic0": entry}}


def test_a_network_config_override_cannot_take_an_address_ipam_did_not_give(admin: httpx.Client) -> None:
    """A chosen MAC is known before the VM exists: an override could set another VM's address on it."""
    other = admin.post("/v1/vms", json=vm("other", {"network": "lan"})).json()
    taken = other["spec"]["nics"][0]["ip"]
    mac = "52:54:00:00:00:77"
    cases = [
        (v2(mac, f"{taken}/24"), f"ethernets.nic0 sets the address {taken}/24 for MAC {mac}, whose NIC has"),
        (v2(None, "10.1.0.9/24"), "ethernets.nic0 sets the address 10.1.0.9/24 on an interface not matched"),
        (v2("52:54:00:00:00:99", "10.1.0.9/24"), "not matched by the MAC of one of the VM's NICs"),
        (
            {"version": 1, "config": [{"type": "physical", "mac_address": mac, "subnets": [
                {"type": "static", "address": taken, "netmask": "255.255.255.0"}]}]},
            f"config[0] sets the address {taken} for MAC {mac}",
        ),
        ({"version": 2, "bonds": {"bond0": {"addresses": ["10.1.0.9/24"]}}}, "bonds.bond0 sets the address"),
    ]  # fmt: skip
    for config, message in cases:
        doc = with_network_config(vm("sneaky", {"network": "lan", "mac": mac}), config)
        said = refused(admin.post("/v1/vms", json=doc), 422, "NetworkConfigBypassesIpam")
        assert said.startswith("spec.cloud_init.network_config: ") and message in said, said
    assert admin.get("/v1/vms/sneaky").status_code == 404, "nothing written"

    # IPAM's own address, or DHCP, for the NIC's MAC: accepted, on create and on a replace
    created = admin.post(
        "/v1/vms", json=with_network_config(vm("fine", {"network": "lan", "mac": mac}), v2(mac))
    )
    assert created.status_code == 201, created.text
    own = created.json()["spec"]["nics"][0]["ip"]
    doc = with_network_config(vm("fine", {"network": "lan"}), v2(mac.upper(), f"{own}/24"))
    assert admin.put("/v1/vms/fine", json=doc).status_code == 200
    doc = with_network_config(vm("fine", {"network": "lan"}), v2(mac, f"{taken}/24"))
    refused(admin.put("/v1/vms/fine", json=doc), 422, "NetworkConfigBypassesIpam")
