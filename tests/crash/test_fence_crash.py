"""SIGKILL the server in the middle of a fence and of the recovery after it (issue 15): once it
is back, the host is fenced and the must-run VM runs elsewhere, exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.crash.server import ServerProcess
from tests.crash.test_kill_restart import post, post_shared_root, settled

SETTINGS = {
    "host.liveness.disconnected_after_s": "0.2",
    "host.liveness.reconnected_after_s": "0.2",
    "host.fencing.after_s": "0.4",
    "vm.start.backoff_base_s": "0.2",
    "vm.start.backoff_cap_s": "1",
}


def _seed(server: ServerProcess) -> None:
    with server.client() as c:
        post(
            c,
            "/v1/secrets",
            {"kind": "Secret", "metadata": {"name": "bmc"}, "spec": {"username": "u", "password": "p"}},
        )
        for host in ("h1", "h2"):
            fencing = {
                "redfish": {"address": "https://bmc.invalid", "system_id": host, "credentials_secret": "bmc"}
            }
            spec = {
                "uri": f"sim://{host}",
                "capacity": {"vcpus": 16, "memory_mib": 32768},
                "fencing": fencing,
            }
            post(c, "/v1/hosts", {"kind": "Host", "metadata": {"name": host}, "spec": spec})
        post_shared_root(c)
        spec = {
            "run_policy": "AlwaysOn",
            "disks": [{"volume": "a-root"}],
            "placement": {"host_affinity": ["h1"]},
        }
        post(c, "/v1/vms", {"kind": "VirtualMachine", "metadata": {"name": "a"}, "spec": spec})
        for key, value in SETTINGS.items():
            assert c.patch(f"/v1/settings/{key}", json={"spec": {"value": value}}).status_code == 200


@pytest.mark.parametrize("point", ["host.before-fence", "vm.before-start"])
def test_a_fence_and_its_recovery_survive_sigkill(tmp_path: Path, point: str) -> None:
    server = ServerProcess(tmp_path / "data", shutdown_s=0.05)
    try:
        server.start()
        _seed(server)
        server.wait_for("/v1/vms/a", lambda vm: settled("Running")(vm) and vm["status"]["host"] == "h1")
        with server.client() as c:  # free to run elsewhere now
            assert (
                c.patch("/v1/vms/a", json={"spec": {"placement": {"host_affinity": []}}}).status_code == 200
            )
        server.stop()

        server.start(crash_at=point)
        with server.client() as c:
            post(c, "/v1/hosts/h1/faults", {"kind": "host-down"})
        assert server.wait_killed() == -9, f"the server died at {point}"

        server.start()
        host = server.wait_for("/v1/hosts/h1", lambda h: h["spec"]["fenced"])
        assert host["status"]["fence"]["phase"] == "Fenced"
        vm = server.wait_for("/v1/vms/a", lambda vm: settled("Running")(vm) and vm["status"]["host"] == "h2")
        with server.client() as c:
            events = c.get("/v1/events", params={"kind": "vms", "name": "a", "limit": 500}).json()["items"]
        assert [e["reason"] for e in events].count("Recovered") == 1, [e["reason"] for e in events]
        uid = vm["metadata"]["uid"]
        server.stop()
    finally:
        server.stop()
    from virtplane.drivers.base import domain_name
    from virtplane.drivers.sim import SimCloud

    cloud = SimCloud(state_path=tmp_path / "data" / "sim.db")
    try:
        assert cloud.snapshot_state().placements().get(domain_name(uid)) == ["h2"], "runs once, on h2"
    finally:
        cloud.close()
