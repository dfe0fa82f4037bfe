"""The maintenance plan counts with what the hosts' drivers can do (issue 11, part 3).

libvirt's test driver (``test:///``) cannot migrate. Before, a dry run on such a host
promised a live migration that then failed at every attempt and ended in
ErrorInMaintenance; now the plan says Blocked, with the reason, before anything moves.
Over the live API, with the hosts' drivers as the host controller recorded them.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.conftest import LiveServer, libvirt_or_skip, wait_json
from tests.drivers.conftest import write_node_xml

libvirt_or_skip()


def _seed(admin: httpx.Client, hosts: dict[str, str], vm_host: str) -> None:
    """Hosts (name -> URI), a shared pool, and VM ``app`` running on ``vm_host``."""
    for name, uri in hosts.items():
        spec = {"uri": uri, "enabled": name == vm_host}  # the VM starts on vm_host
        assert admin.post("/v1/hosts", json={"metadata": {"name": name}, "spec": spec}).status_code == 201
    pool = {"kind": "shared", "cluster": "default", "capacity_gib": 100}
    assert (
        admin.post("/v1/storagepools", json={"metadata": {"name": "shared"}, "spec": pool}).status_code == 201
    )
    volume = {"metadata": {"name": "app-disk"}, "spec": {"pool": "shared", "size_gib": 1}}
    assert admin.post("/v1/volumes", json=volume).status_code == 201
    wait_json(admin, "/v1/volumes/app-disk", lambda v: v["status"]["phase"] == "Ready")
    vm = {"metadata": {"name": "app"}, "spec": {"disks": [{"volume": "app-disk", "boot_order": 1}]}}
    assert admin.post("/v1/vms", json=vm).status_code == 201
    wait_json(admin, "/v1/vms/app", lambda v: v["status"]["phase"] == "Running")
    for name in hosts:
        admin.patch(f"/v1/hosts/{name}", json={"spec": {"enabled": True}})
        wait_json(admin, f"/v1/hosts/{name}", lambda h: h["status"]["resource_state"] == "Enabled")


def test_a_test_driver_host_cannot_be_drained_live_and_the_plan_says_so(
    live_server: LiveServer, tmp_path: Path
) -> None:
    hosts = {name: write_node_xml(tmp_path / f"{name}.xml") for name in ("a", "b")}
    with live_server.client("admin") as admin:
        _seed(admin, hosts, vm_host="a")
        recorded = admin.get("/v1/hosts/a").json()["status"]["capabilities"]
        assert recorded == ["disk-snapshot", "memory-snapshot"], "what libvirt's test driver can do"

        dry = admin.post("/v1/hosts/a/maintenance", json={"strategy": "Migration", "dry_run": True})
        assert dry.status_code == 200, dry.text
        assert dry.json()["plan"] == {
            "feasible": False,
            "items": [
                {
                    "vm": "app",
                    "action": "Blocked",
                    "target": None,
                    "reason": "cannot leave host a: its driver cannot live-migrate",
                    "risk": "",  # a blocked VM is not moved, so no convergence risk is said
                }
            ],
        }

        started = admin.post("/v1/hosts/a/maintenance", json={"strategy": "Migration"})
        assert started.status_code == 200, started.text
        shown = wait_json(admin, "/v1/hosts/a/maintenance", lambda m: m["phase"] == "Failed")
        assert shown["host_state"] == "ErrorInMaintenance" and shown["blocking"] == ["app"]
        vm = admin.get("/v1/vms/app").json()
        assert (vm["status"]["phase"], vm["status"]["host"]) == ("Running", "a")
        reasons = [
            e["reason"] for e in admin.get("/v1/events", params={"name": "app", "limit": 500}).json()["items"]
        ]
        assert "MigrationStarted" not in reasons and "MigrationFailed" not in reasons, "nothing was tried"


def test_a_target_whose_driver_cannot_migrate_is_no_target(live_server: LiveServer, tmp_path: Path) -> None:
    hosts = {"s": "sim://s", "t": write_node_xml(tmp_path / "t.xml")}
    with live_server.client("admin") as admin:
        _seed(admin, hosts, vm_host="s")
        assert admin.get("/v1/hosts/s").json()["status"]["capabilities"] == [
            "backup",
            "block-migration",
            "disk-snapshot",
            "fault-injection",
            "hotplug",
            "live-migration",
            "memory-snapshot",
            "serial-console",
            "user-network",
            "volume-resize",
        ]
        dry = admin.post("/v1/hosts/s/maintenance", json={"strategy": "Error", "dry_run": True}).json()
        [item] = dry["plan"]["items"]
        assert (item["action"], item["reason"]) == (
            "Blocked",
            "no target host: t: its driver cannot live-migrate",
        )
