"""SIGKILL the server in the middle of work, restart it on the same data, and see the work finish.

These run the real `virtplane serve` as a subprocess; the simulated hosts keep their
state in the data directory, so they outlive the control plane as real hosts would.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.crash.server import ServerProcess, intents_left


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path / "data", shutdown_s=0.05)
    yield proc
    proc.stop()


def post(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code in (200, 201), response.text
    result: dict[str, Any] = response.json()
    return result


def seed(server: ServerProcess, policy: str = "AlwaysOnUnlessStoppedManually") -> None:
    with server.client() as c:
        post(
            c,
            "/v1/hosts",
            {
                "kind": "Host",
                "metadata": {"name": "h1"},
                "spec": {"uri": "sim://h1", "capacity": {"vcpus": 16, "memory_mib": 32768}},
            },
        )
        post_shared_root(c)
        post(
            c,
            "/v1/vms",
            {
                "kind": "VirtualMachine",
                "metadata": {"name": "a"},
                "spec": {
                    "run_policy": policy,
                    "disks": [{"volume": "a-root", "boot_order": 1}],
                    "termination_grace_period_s": 5,
                },
            },
        )
        for key, value in (("vm.start.backoff_base_s", "0.2"), ("vm.start.backoff_cap_s", "1")):
            assert c.patch(f"/v1/settings/{key}", json={"spec": {"value": value}}).status_code == 200


def post_shared_root(c: httpx.Client) -> None:
    """A shared pool and the volume ``a-root`` on it: the disk of the VM these tests kill around."""
    post(
        c,
        "/v1/storagepools",
        {
            "kind": "StoragePool",
            "metadata": {"name": "shared"},
            "spec": {"kind": "shared", "cluster": "default", "capacity_gib": 100},
        },
    )
    post(
        c,
        "/v1/volumes",
        {"kind": "Volume", "metadata": {"name": "a-root"}, "spec": {"pool": "shared", "size_gib": 1}},
    )


def settled(phase: str) -> Any:
    def check(vm: dict[str, Any]) -> bool:
        return bool(vm["status"]["phase"] == phase and not intents_left(vm))

    return check


def stays_stopped(server: ServerProcess, name: str) -> None:
    seen = server.look_again_at_stopped_vm(name)
    assert seen["status"]["phase"] == "Stopped", seen["status"]


def operation(server: ServerProcess, name: str, vm: str, kind: str, **extra: Any) -> None:
    with server.client() as c:
        post(
            c,
            "/v1/operations",
            {
                "kind": "VirtualMachineOperation",
                "metadata": {"name": name},
                "spec": {"vm": vm, "type": kind, **extra},
            },
        )


def finished(op: dict[str, Any]) -> bool:
    return bool(op["status"]["phase"] in ("Completed", "Failed", "Superseded"))


def test_stop_and_start_retry_in_flight_survive_sigkill(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", shutdown_s=3.0)  # a guest takes 3 s to power off
    try:
        server.start()
        seed(server)
        with server.client() as c:
            post(
                c,
                "/v1/vms",
                {"kind": "VirtualMachine", "metadata": {"name": "b"}, "spec": {"run_policy": "AlwaysOn"}},
            )
        server.wait_for("/v1/vms/a", settled("Running"))
        server.wait_for("/v1/vms/b", settled("Running"))
        with server.client() as c:
            post(c, "/v1/hosts/h1/faults", {"kind": "fail-start", "vm": "b", "count": 3})
            post(c, "/v1/hosts/h1/faults", {"kind": "crash", "vm": "b"})
        operation(server, "stop-a", "a", "Stop")
        server.wait_for("/v1/operations/stop-a", lambda op: op["status"]["phase"] == "InProgress")
        server.wait_for("/v1/vms/b", lambda vm: vm["status"]["start_failures"] >= 1)
        server.kill()  # the stop is waiting for the guest, b is between failed boots

        server.start()
        op = server.wait_for("/v1/operations/stop-a", finished, timeout=30)
        assert op["status"]["phase"] == "Completed", op["status"]
        a = server.wait_for("/v1/vms/a", settled("Stopped"))
        assert a["status"]["last_exit"] == "stopped-by-user"
        b = server.wait_for("/v1/vms/b", settled("Running"), timeout=30)
        assert b["status"]["start_failures"] == 0
        with server.client() as c:
            events = c.get("/v1/events", params={"kind": "vms", "name": "b", "limit": 500}).json()["items"]
        assert sum(e["reason"] == "StartRetry" for e in events) >= 3, "every failed boot was retried"
        stays_stopped(server, "a")  # stopped manually
    finally:
        server.stop()


@pytest.mark.parametrize(
    "point", ["restore.entered-maintenance", "restore.overwritten", "vm.domain-recreated"]
)
@pytest.mark.parametrize("before", ["Running", "Stopped"])
def test_restore_survives_sigkill_at_every_step(server: ServerProcess, point: str, before: str) -> None:
    server.start()
    seed(server)
    server.wait_for("/v1/vms/a", settled("Running"))
    with server.client() as c:
        post(
            c,
            "/v1/snapshots",
            {"kind": "VirtualMachineSnapshot", "metadata": {"name": "s1"}, "spec": {"vm": "a"}},
        )
    server.wait_for("/v1/snapshots/s1", lambda s: s["status"]["phase"] == "Ready")
    if before == "Stopped":
        operation(server, "stop-a", "a", "Stop")
        server.wait_for("/v1/operations/stop-a", finished)
        server.wait_for("/v1/vms/a", settled("Stopped"))
    server.stop()

    server.start(crash_at=point)
    # the crash point may fire before the response leaves: the operation was stored first
    with contextlib.suppress(httpx.TransportError):
        operation(server, "restore-a", "a", "Restore", restore={"snapshot": "s1", "mode": "Strict"})
    assert server.wait_killed() == -9, "the server died at the crash point"

    server.start()
    op = server.wait_for("/v1/operations/restore-a", finished, timeout=30)
    assert op["status"]["phase"] == "Completed", op["status"]
    vm = server.wait_for("/v1/vms/a", settled(before), timeout=30)
    assert not any(c["type"] == "Maintenance" for c in vm["status"]["conditions"])
    if before == "Stopped":  # AOUSM: nothing but the recorded intent keeps it stopped
        stays_stopped(server, "a")
    # Running needs no second look: settled means no intent is left that could stop it
