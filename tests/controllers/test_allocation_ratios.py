"""Allocation ratios (issue 11, part 3): a host offers its CPUs and memory times the ratios
that apply to it (settings host.cpu_allocation_ratio, host.memory_allocation_ratio: global,
per cluster, per host), shows them in its status, and placement counts with them.

Over the live API. The hosts report their capacity themselves: libvirt's test driver
from its node description (2 cores here), the simulator from its own host.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.conftest import LiveServer, libvirt_or_skip, wait_json

RATIO = "/v1/settings/host.cpu_allocation_ratio"


def _vm(client: httpx.Client, name: str) -> None:
    body = {"metadata": {"name": name}, "spec": {"cpu": 1, "memory_mib": 256, "run_policy": "AlwaysOn"}}
    assert client.post("/v1/vms", json=body).status_code == 201


def _phase(client: httpx.Client, name: str) -> str:
    return str(client.get(f"/v1/vms/{name}").json()["status"]["phase"])


def _libvirt_host(tmp_path: Path, cpus: int) -> str:
    libvirt_or_skip()
    from tests.drivers.conftest import write_node_xml

    return write_node_xml(tmp_path / "h1.xml", cpus=cpus, memory_mib=16384)


def test_a_2_core_libvirt_host_takes_two_guests_at_ratio_1_and_more_when_the_ratio_rises(
    live_server: LiveServer, tmp_path: Path
) -> None:
    uri = _libvirt_host(tmp_path, cpus=2)
    with live_server.client("admin") as admin:
        assert admin.patch(f"{RATIO}?host=h1", json={"spec": {"value": 1}}).status_code == 200
        host = {"metadata": {"name": "h1"}, "spec": {"uri": uri, "cluster": "c1"}}
        assert admin.post("/v1/hosts", json=host).status_code == 201
        status = wait_json(admin, "/v1/hosts/h1", lambda h: h["status"]["connection"] == "Up")["status"]
        assert status["capacity"]["vcpus"] == 2
        assert status["allocation_ratios"] == {"cpu": 1.0, "memory": 1.0}
        assert status["allocatable"] == {"vcpus": 2, "memory_mib": 16384}

        for name in ("a", "b"):
            _vm(admin, name)
            wait_json(admin, f"/v1/vms/{name}", lambda v: v["status"]["phase"] == "Running")
        _vm(admin, "c")
        third = wait_json(
            admin,
            "/v1/vms/c",
            lambda v: (
                v["status"]["phase"] == "Pending"
                and any(c["type"] == "Scheduled" for c in v["status"]["conditions"])
            ),
        )
        [scheduled] = [c for c in third["status"]["conditions"] if c["type"] == "Scheduled"]
        assert scheduled["status"] == "False"
        assert scheduled["message"] == "no host: h1: not enough vCPUs: 0 free, 1 needed"

        # The host's own override beats its cluster's (tests/domain/test_settings.py has the table)
        assert admin.patch(f"{RATIO}?cluster=c1", json={"spec": {"value": 3}}).status_code == 200
        assert admin.get("/v1/settings/host.cpu_allocation_ratio").json()["spec"]["clusters"] == {"c1": 3.0}
        # Without it the cluster's applies: room for the third, which starts.
        assert admin.delete(f"{RATIO}?host=h1").status_code == 200
        wait_json(admin, "/v1/hosts/h1", lambda h: h["status"]["allocatable"]["vcpus"] == 6)
        wait_json(admin, "/v1/vms/c", lambda v: v["status"]["phase"] == "Running")
        # the host records its allocation a batch period after its VMs' changes
        wait_json(admin, "/v1/hosts/h1", lambda h: h["status"]["allocated"]["vcpus"] == 3)


def test_by_default_a_host_offers_four_vcpus_per_core_and_the_simulator_runs_them(
    live_server: LiveServer,
) -> None:
    with live_server.client("admin") as admin:
        host = {
            "metadata": {"name": "s1"},
            "spec": {"uri": "sim://s1", "capacity": {"vcpus": 2, "memory_mib": 8192}},
        }
        assert admin.post("/v1/hosts", json=host).status_code == 201
        status = wait_json(admin, "/v1/hosts/s1", lambda h: h["status"]["connection"] == "Up")["status"]
        assert status["allocation_ratios"] == {"cpu": 4.0, "memory": 1.0}
        assert status["allocatable"] == {"vcpus": 8, "memory_mib": 8192}
        for n in range(9):
            _vm(admin, f"v{n}")
        for n in range(8):  # the 2-vCPU simulated host runs all eight, as a real one would
            wait_json(admin, f"/v1/vms/v{n}", lambda v: v["status"]["phase"] == "Running")
        ninth = wait_json(
            admin, "/v1/vms/v8", lambda v: v["status"]["conditions"] and v["status"]["phase"] == "Pending"
        )
        assert "not enough vCPUs: 0 free, 1 needed" in str(ninth["status"]["conditions"])
        eight = {"vcpus": 8, "memory_mib": 2048, "vms": 8}
        wait_json(admin, "/v1/hosts/s1", lambda h: h["status"]["allocated"] == eight)


def test_scoped_values_are_refused_where_they_do_not_apply(live_server: LiveServer) -> None:
    with live_server.client("admin") as admin:
        global_only = admin.patch(
            "/v1/settings/migration.max_attempts?cluster=c1", json={"spec": {"value": 5}}
        )
        assert global_only.status_code == 400 and "global setting" in global_only.json()["message"]
        bad_name = admin.patch(f"{RATIO}?host=Not_A_Host", json={"spec": {"value": 2}})
        assert bad_name.status_code == 422 and bad_name.json()["reason"] == "Invalid"
        both = admin.delete(f"{RATIO}?host=h1&cluster=c1")
        assert both.status_code == 400 and "not both" in both.json()["message"]
    with live_server.client("operator") as operator:
        assert operator.patch(f"{RATIO}?host=h1", json={"spec": {"value": 2}}).status_code == 403
