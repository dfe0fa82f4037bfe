"""Networks on the running control plane (issue 14): status.nics, Network.status and placement.

A VM runs only on a host that has every network of its NICs; until one does, it waits
with that reason, and the Network's status says which hosts have it and who uses it.
"""

from __future__ import annotations

from typing import Any

from tests.conftest import LiveServer, wait_json


def post(client: Any, plural: str, doc: dict[str, Any]) -> None:
    created = client.post(f"/v1/{plural}", json=doc)
    assert created.status_code == 201, created.text


def scheduled(vm: dict[str, Any]) -> str:
    return next((str(c["message"]) for c in vm["status"]["conditions"] if c["type"] == "Scheduled"), "")


def test_a_vm_waits_for_a_host_with_its_network_and_shows_its_nics(live_server: LiveServer) -> None:
    with live_server.client("admin") as admin:
        post(admin, "hosts", {"metadata": {"name": "h1"}, "spec": {"uri": "sim://h1"}})
        post(
            admin,
            "networks",
            {
                "metadata": {"name": "lan"},
                "spec": {
                    "kind": "bridge",
                    "bridge": "br-none",
                    "cluster": "default",
                    "subnet": "10.7.0.0/24",
                    "gateway": "10.7.0.1",
                },
            },
        )
        post(
            admin,
            "vms",
            {"metadata": {"name": "a"}, "spec": {"run_policy": "AlwaysOn", "nics": [{"network": "lan"}]}},
        )
        vm = wait_json(admin, "/v1/vms/a", lambda v: "h1: network lan is not on this host" in scheduled(v))
        assert vm["status"]["phase"] == "Pending"
        nic = vm["spec"]["nics"][0]
        assert vm["status"]["nics"] == [
            {
                "network": "lan",
                "mac": nic["mac"],
                "ip": "10.7.0.2",
                "prefix_length": 24,
                "gateway": "10.7.0.1",
            }
        ]
        network = wait_json(admin, "/v1/networks/lan", lambda n: n["status"]["allocations"])
        assert network["status"]["hosts"] == []
        assert network["status"]["allocations"] == [{"ip": "10.7.0.2", "mac": nic["mac"], "vm": "a"}]
        assert network["status"]["addresses_in_use"] == 1
        assert network["status"]["addresses_free"] == 252  # 254 host addresses, less the gateway and a
